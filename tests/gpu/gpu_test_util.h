// What the kernel-level GPU tests share (test_mamba2_cuda.cpp, test_gdn_cuda.cpp and their speculative siblings):
// the device check that turns a test into a message on a machine without a GPU, a zero-initialised device buffer,
// the storage codes of fp32 / bf16 / fp16 values, and comparisons that keep a NaN (so a NaN fails, never vanishes).
#pragma once

#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/kernel_footprint.h"
#include "numeric/arith.h"
#include "numeric/bits.h"
#include "numeric/format.h"
#include "numeric/scaled.h"
#include "numeric/stochastic.h"
#include "decoder/scheme.h"

namespace rssm::gpu_test {

// False (with a message) where no CUDA device exists: the caller returns and the test passes as skipped.
inline bool have_device() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    WARN("no CUDA device: GPU test skipped");
    return false;
  }
  return true;
}

// The sanitizers' scope. compute-sanitizer's racecheck and initcheck slow the kernels down so far that the whole GPU
// suite does not finish in a device call (benchmarks/runs/sanitize.h200.txt); with REPLAYSSM_GPU_TESTS=one-per-kernel
// in the environment (scripts/gpu_sanitize.sh passes it on) a kernel-level case is skipped when an earlier case of the
// process differed from it only in its interval, read as a class: K = 1 (every step flushes), K = 8 or 16 (the
// grouped Mamba-2 kernel's fp32 flush is compiled for these two apart, with B_e in registers: the loops reach K = 8
// first), or any other K > 1 (the generic fold; K = 4 first). Every other field of the case's name (geometry, kind,
// route, formats, kernel variant and shape, flush arithmetic, rounding) still runs once, so every kernel
// configuration the suite reaches is checked once. Unset, empty or "all": every case runs. Any other value throws, so
// that a misspelt scope does not silently run the whole suite under a sanitizer.
inline bool one_per_kernel_scope() {
  const char* v = std::getenv("REPLAYSSM_GPU_TESTS");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "all") == 0) return false;
  if (std::strcmp(v, "one-per-kernel") == 0) return true;
  throw std::runtime_error(std::string("REPLAYSSM_GPU_TESTS: unknown scope '") + v + "' (all, one-per-kernel)");
}
// A case's key under that scope: its name with " K=<n>" as " K=1", " K=8|16" or " K>1".
inline std::string kernel_config_key(const std::string& case_name) {
  static const std::regex k_eq(R"( K=(\d+))");
  std::smatch m;
  if (!std::regex_search(case_name, m, k_eq)) return case_name;
  const std::string k = m[1].str();
  return m.prefix().str() + (k == "1" ? " K=1" : k == "8" || k == "16" ? " K=8|16" : " K>1") + m.suffix().str();
}
// True when the case should be skipped: the scope is one-per-kernel and its key has run before in this process.
inline bool repeats_a_kernel_config(const std::string& case_name) {
  if (!one_per_kernel_scope()) return false;
  static std::set<std::string> seen;
  return !seen.insert(kernel_config_key(case_name)).second;
}

// A device array of n T's, zeroed at allocation, so copying back a region no kernel wrote is not a read of
// uninitialised memory (compute-sanitizer initcheck).
template <class T>
struct DevBuf {
  T* p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t count) : n(count) {
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)));
    CUDA_CHECK(cudaMemset(p, 0, std::max<size_t>(count, 1) * sizeof(T)));
  }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void put(const std::vector<T>& h) { CUDA_CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice)); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  void copy_from(const DevBuf& o) { CUDA_CHECK(cudaMemcpy(p, o.p, n * sizeof(T), cudaMemcpyDeviceToDevice)); }
};

// Bytes per stored element and the value a store in format f keeps (fp32, bf16, fp16; nearest even).
inline size_t width(Format f) { return f == Format::FP32 ? 4 : 2; }
inline float round_to(Format f, float v) {
  return f == Format::BF16 ? round_bf16(v) : f == Format::FP16 ? round_fp16(v) : v;
}
// The value a stochastic-rounding store in format f keeps, with the words of numeric/stochastic.h at (seed, stream,
// step, element): what a kernel launched with rounding = stochastic stores (fp32: the value itself).
inline float round_sr(Format f, float v, uint64_t seed, RandomStream stream, long long step, long long element) {
  if (f == Format::FP32) return v;
  const uint32_t r = state_random_bits(seed, stream, step, element);
  return f == Format::BF16 ? round_bf16_sr(v, r) : round_fp16_sr(v, r);
}
// Values as the raw bytes of format f, and back (element i of raw bytes b; a whole buffer).
inline std::vector<uint8_t> encode(Format f, const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * width(f));
  for (size_t i = 0; i < v.size(); ++i) {
    if (f == Format::FP32) {
      std::memcpy(&out[4 * i], &v[i], 4);
    } else {
      const uint16_t b = f == Format::BF16 ? float_to_bf16_bits(v[i]) : float_to_fp16_bits(v[i]);
      std::memcpy(&out[2 * i], &b, 2);
    }
  }
  return out;
}
inline float decode_at(Format f, const uint8_t* b, size_t i) {
  if (f == Format::FP32) {
    float x;
    std::memcpy(&x, b + 4 * i, 4);
    return x;
  }
  uint16_t u;
  std::memcpy(&u, b + 2 * i, 2);
  return f == Format::BF16 ? bf16_bits_to_float(u) : fp16_bits_to_float(u);
}
inline std::vector<float> decode(Format f, const std::vector<uint8_t>& b) {
  std::vector<float> v(b.size() / width(f));
  for (size_t i = 0; i < v.size(); ++i) v[i] = decode_at(f, b.data(), i);
  return v;
}

// ||a − b|| / ||b|| over n values; NaN if anything is not finite.
template <class TA, class TB>
double rel_rms(const TA* a, const TB* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = a[i], y = b[i];
    if (!std::isfinite(x) || !std::isfinite(y)) return NAN;
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den == 0 ? (num == 0 ? 0.0 : INFINITY) : std::sqrt(num / den);
}
// The slack a flush arithmetic adds to a cuda decoder's difference from its cpu twin. Both fold the same staged
// operands (numeric/arith.h), but an fp32 ulp between the twins' weights or states (fp32 arithmetic in another order)
// can move an operand across a tf32 / bf16 rounding decision: one unit of the operand format in one term. 4u of the
// operand format bounds it (the kernel-level [arith] tests measured at most 2.1e-4 with tf32 and bf16 operands);
// 3xtf32 and fp32 need none.
inline double flush_slack(Arith m) { return m == Arith::TF32 ? 4 * 0x1p-11 : m == Arith::BF16 ? 4 * 0x1p-8 : 0.0; }

// Whether a scheme's error against fp64 is held to metrics/tolerance.h's budget for its judged format. Not under a
// tf32 / bf16 flush arithmetic (the arithmetic's own error, about its unit roundoff per flush: measured 5.7e-5 mean
// for a tf32 fp32-checkpoint replay, over the fp32 budget) nor stochastic rounding (a 16-bit state's rounding errors
// walk instead of cancelling: 1.07e-2 mean for a bf16 GDN eager state, over the bf16 budget of 1e-2), in the CPU
// emulation as on the GPU; a cuda decoder is held to its cpu twin.
inline bool judged_by_table(const Scheme& s) {
  return s.rounding == Rounding::Nearest && flush_slack(s.flush_arith) == 0;
}

// Elements of a dual read copy that are not a rounding of the update copy's value, read[i] against update[i]:
// nearest must give round_to's code exactly; stochastic one of the two codes that bracket the value (its words are
// keyed by slot and step, which a decoder's state() does not carry; a code outside the bracket is a wrong copy).
// A block-scaled copy (e4m3, e5m2, int8) goes by rows of row_len values: each row's scale is the one its update row
// gives (numeric/scaled.h), and read[i] is a bracketing code of update[i] / scale times the scale, exactly.
inline size_t scaled_read_copy_mismatches(Format f, Rounding r, const double* update, const double* read, size_t n,
                                          size_t row_len) {
  if (row_len == 0) return n;  // a caller's error: scaled copies need their row length
  size_t bad = 0;
  std::vector<float> row(row_len);
  for (size_t r0 = 0; r0 + row_len <= n; r0 += row_len) {
    for (size_t i = 0; i < row_len; ++i) row[i] = static_cast<float>(update[r0 + i]);
    const float scale = block_scale(f, row.data(), row_len);
    for (size_t i = 0; i < row_len; ++i) {
      const float q = row[i] / scale;
      const auto value = [&](bool up) {  // the code's value times the scale, exact in double (as state() holds it)
        const float v = r == Rounding::Nearest ? round_nearest(f, q) : round_stochastic(f, q, up ? 0xFFFFFFFFu : 0u);
        return static_cast<double>(v) * static_cast<double>(scale);
      };
      bad += value(false) != read[r0 + i] && value(true) != read[r0 + i];
    }
  }
  return bad + n % row_len;  // a partial row is a caller's error
}
inline size_t read_copy_mismatches(Format f, Rounding r, const double* update, const double* read, size_t n,
                                   size_t row_len = 0) {
  if (is_scaled_format(f)) return scaled_read_copy_mismatches(f, r, update, read, n, row_len);
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const float u = static_cast<float>(update[i]);
    if (r == Rounding::Nearest) {
      bad += static_cast<double>(round_to(f, u)) != read[i];
    } else {
      const auto sr = [&](uint32_t w) { return f == Format::BF16 ? round_bf16_sr(u, w) : round_fp16_sr(u, w); };
      bad += static_cast<double>(sr(0)) != read[i] && static_cast<double>(sr(0xFFFFFFFFu)) != read[i];
    }
  }
  return bad;
}

// A block-scaled read copy's row as the flush stores it from the update copy's stored values (numeric/scaled.h on
// the fp32 row; stochastic with the words of (seed, CheckpointRead, step, element0 + i)): its codes, its scale
// (returned) and, when `values` is set, what they decode to (code times scale in fp32, as the emulation reads them).
inline float scaled_row(Format f, bool sr, const float* row, int n, uint64_t seed, long long step, long long element0,
                 uint8_t* codes, float* values) {
  std::vector<uint32_t> r;
  if (sr) {
    r.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) r[i] = state_random_bits(seed, RandomStream::CheckpointRead, step, element0 + i);
  }
  const Rounding rnd = sr ? Rounding::Stochastic : Rounding::Nearest;
  const float scale = quantize_row(f, rnd, row, static_cast<size_t>(n), codes, sr ? r.data() : nullptr);
  if (values) dequantize_row(f, codes, static_cast<size_t>(n), scale, values);
  return scale;
}

// A dual read copy made from the update copy's initial stored states `ck` [rows·n]: its bytes (1-byte codes, or a
// 16-bit format's values), what they decode to, and for a block-scaled format a scale per row (else empty).
struct ReadCopyInit {
  std::vector<uint8_t> bytes;
  std::vector<float> values, scales;
};
inline ReadCopyInit initial_read_copy(Format f, const std::vector<float>& ck, int n) {
  ReadCopyInit r;
  r.values.resize(ck.size());
  if (is_scaled_format(f)) {
    const size_t rows = ck.size() / static_cast<size_t>(n);
    r.bytes.assign(ck.size(), 0);
    r.scales.assign(rows, 0.0f);
    for (size_t row = 0; row < rows; ++row) {
      const size_t at = row * static_cast<size_t>(n);
      r.scales[row] = scaled_row(f, false, &ck[at], n, 0, 0, 0, &r.bytes[at], &r.values[at]);
    }
  } else {
    for (size_t i = 0; i < ck.size(); ++i) r.values[i] = round_to(f, ck[i]);
    r.bytes = encode(f, r.values);
  }
  return r;
}

// Wrong codes and scales of a block-scaled read copy: codes [rows·n] and scales [rows] against scaled_row of the
// update copy's stored rows `update` [rows·n] (row r's elements at element0 + r·n, stochastic words at `step`).
inline long long scaled_copy_mismatches(Format f, bool sr, const float* update, const uint8_t* codes,
                                        const float* scales, size_t rows, int n, uint64_t seed, long long step,
                                        long long element0) {
  long long bad = 0;
  std::vector<uint8_t> want(static_cast<size_t>(n));
  for (size_t row = 0; row < rows; ++row) {
    const size_t r0 = row * static_cast<size_t>(n);
    const float sc = scaled_row(f, sr, update + r0, n, seed, step, element0 + static_cast<long long>(r0), want.data(),
                                nullptr);
    bad += std::memcmp(&scales[row], &sc, 4) != 0;
    for (int i = 0; i < n; ++i) bad += codes[r0 + i] != want[i];
  }
  return bad;
}

// The same check on a deliberately corrupted copy of one slot (one code flipped, then one scale an ulp off) must
// count each: the check above can fail.
inline bool scaled_check_catches(Format f, bool sr, const float* update, const uint8_t* codes, const float* scales,
                                 size_t rows, int n, uint64_t seed, long long step, long long element0) {
  std::vector<uint8_t> c(codes, codes + rows * static_cast<size_t>(n));
  std::vector<float> s(scales, scales + rows);
  c[0] ^= 0x01;
  const long long code_flip = scaled_copy_mismatches(f, sr, update, c.data(), s.data(), rows, n, seed, step, element0);
  c[0] ^= 0x01;
  s[rows - 1] = std::nextafter(s[rows - 1], INFINITY);
  const long long scale_off = scaled_copy_mismatches(f, sr, update, c.data(), s.data(), rows, n, seed, step, element0);
  const long long clean = scaled_copy_mismatches(f, sr, update, codes, scales, rows, n, seed, step, element0);
  return code_flip == clean + 1 && scale_off == clean + 1;
}

// A running maximum that keeps a NaN.
inline double max_nan(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }

// A verify launcher's footprints of one launch shape at a shorter and a longer L_hist: the grid it launches, a
// kernel the device can hold, and the longer L_hist no cheaper in shared memory or in resident CTAs.
inline void check_footprints(const KernelFootprint& near, const KernelFootprint& far, long long ctas) {
  INFO("smem " << near.smem_bytes << " -> " << far.smem_bytes << " bytes, " << near.registers << " registers, "
               << near.local_bytes << " local bytes, " << near.ctas_per_sm << " -> " << far.ctas_per_sm
               << " CTAs per SM");
  CHECK(near.ctas == ctas);
  CHECK(near.threads > 0);
  CHECK(near.threads % 32 == 0);
  CHECK(near.registers > 0);
  CHECK(near.registers <= 255);
  CHECK(near.ctas_per_sm >= 1);
  CHECK(far.ctas_per_sm <= near.ctas_per_sm);
  CHECK(far.smem_bytes > near.smem_bytes);
}

}  // namespace rssm::gpu_test
