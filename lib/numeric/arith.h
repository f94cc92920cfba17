// Arithmetic of the dots and of the flush GEMM, chosen at run time and emulated exactly on the CPU.
//   fp64    operands and accumulation in double
//   fp32    fp32 operands, fp32 products and accumulation
//   tf32    operands rounded to tf32 (nearest-even), products exact in fp32 (11 x 11 bits), fp32 accumulation
//   3xtf32  each operand split hi = tf32(x), lo = tf32(x - hi); acc += hi·hi, then hi·lo, then lo·hi (fp32)
//   bf16    operands rounded to bf16, products exact in fp32, fp32 accumulation
// Accumulation order is fixed so a kernel can match it bit for bit: a dot of n terms keeps kLanes partial sums,
// term i going to lane i % kLanes in increasing i, and adds the lanes in lane order at the end (the shape of a
// vectorised CPU loop and of a per-thread partial sum in a warp). The flush GEMM accumulates its rank-K update
// sequentially over j onto an accumulator initialised with the decayed checkpoint (tensor-core D = A·B + C).
#pragma once

#include <string>

#include "numeric/bits.h"
#include "numeric/format.h"
#include "numeric/hd.h"

namespace rssm {

enum class Arith { FP64, FP32, TF32, TF32x3, BF16 };

std::string arith_name(Arith a);            // "fp64", "fp32", "tf32", "3xtf32", "bf16"
Arith parse_arith(const std::string& name);  // throws ConfigError listing the accepted names

constexpr int kLanes = 8;

// The flush's multiply-accumulate acc + a·b in arithmetic m, as flush_terms(m) fp32 products added in order
// r = 0, 1, ...: acc + flush_operand_a(m, a, r)·flush_operand_b(m, b, r) (3xtf32: hi·hi, hi·lo, lo·hi). Shared with
// the CUDA flush (docs/fp_contract.md): a kernel stages these operands once per entry and folds them with fmaf.
// Under tf32, 3xtf32 and bf16 every product of staged operands is exact in fp32 (at most 11 x 11 significant bits),
// so fmaf(a', b', acc) rounds exactly as acc + a'·b' does and the fold matches the emulation's bit for bit when it
// runs over the entries in the same order from the same accumulator. fp32 (and fp64) pass the operands through.
RSSM_HD inline int flush_terms(Arith m) { return m == Arith::TF32x3 ? 3 : 1; }
RSSM_HD inline float flush_operand_a(Arith m, float a, int r) {
  switch (m) {
    case Arith::TF32: return round_tf32(a);
    case Arith::BF16: return round_bf16(a);
    case Arith::TF32x3: {
      const float hi = round_tf32(a);
      return r < 2 ? hi : round_tf32(a - hi);
    }
    default: return a;
  }
}
RSSM_HD inline float flush_operand_b(Arith m, float b, int r) {
  switch (m) {
    case Arith::TF32: return round_tf32(b);
    case Arith::BF16: return round_bf16(b);
    case Arith::TF32x3: {
      const float hi = round_tf32(b);
      return r == 1 ? round_tf32(b - hi) : hi;
    }
    default: return b;
  }
}

// One multiply-accumulate step acc += a·b in the arithmetic (not for fp64: see dot()).
inline float arith_mac(Arith m, float acc, float a, float b) {
  if (m == Arith::FP32 || m == Arith::FP64) return acc + a * b;
  for (int r = 0; r < flush_terms(m); ++r) acc += flush_operand_a(m, a, r) * flush_operand_b(m, b, r);
  return acc;
}

// Dot product of a[0..n) and b[0..n) in arithmetic m, lane order as above. A and B may be float or double; in
// the fp32-based modes the operands are first converted to float (round to nearest), as a kernel loading an fp32
// array would hold them.
template <class TA, class TB>
double dot(Arith m, const TA* a, const TB* b, int n) {
  if (m == Arith::FP64) {
    double lanes[kLanes] = {0};
    for (int i = 0; i < n; ++i) lanes[i % kLanes] += static_cast<double>(a[i]) * static_cast<double>(b[i]);
    double s = 0;
    for (double l : lanes) s += l;
    return s;
  }
  float lanes[kLanes] = {0};
  if (m == Arith::FP32) {
    int i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int l = 0; l < kLanes; ++l) lanes[l] += static_cast<float>(a[i + l]) * static_cast<float>(b[i + l]);
    for (; i < n; ++i) lanes[i % kLanes] += static_cast<float>(a[i]) * static_cast<float>(b[i]);
  } else {
    for (int i = 0; i < n; ++i)
      lanes[i % kLanes] = arith_mac(m, lanes[i % kLanes], static_cast<float>(a[i]), static_cast<float>(b[i]));
  }
  float s = 0;
  for (float l : lanes) s += l;
  return s;
}

// Rounding into a storage format, inline for inner loops (round_nearest in format.h is the reference entry point;
// this calls the same bit-level functions). FP64 and FP32 return x; INT8 is not a plain storage format here.
inline float round_store(Format f, float x) {
  switch (f) {
    case Format::BF16: return round_bf16(x);
    case Format::FP16: return round_fp16(x);
    case Format::TF32: return round_tf32(x);
    case Format::E4M3: return round_e4m3(x);
    case Format::E5M2: return round_e5m2(x);
    default: return x;
  }
}

}  // namespace rssm
