// What the `cuda` decoders (kernels/*/..._decoder.cpp) share on the host: a device allocation owned by its decoder,
// and the conversions between the host's float / double values and the fp32, bf16 or fp16 codes the kernels read and
// write. Host C++ against the CUDA runtime (include it from CUDA-linked code only, as common/cuda_check.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/cuda_check.h"
#include "numeric/bits.h"
#include "numeric/format.h"
#include "numeric/scaled.h"

namespace rssm {

// One device allocation, freed with its owner. Grown, never shrunk, by reserve(); exactly sized by assign().
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void assign(size_t bytes) {
    release();
    if (bytes > 0) CUDA_CHECK(cudaMalloc(&p_, bytes));
    bytes_ = bytes;
  }
  void reserve(size_t bytes) {
    if (bytes > bytes_) assign(bytes);
  }
  void release() {
    if (p_) (void)cudaFree(p_);  // a destructor never throws: a failed free is a leak, not an error
    p_ = nullptr;
    bytes_ = 0;
  }
  template <class T = void>
  T* as() const {
    return static_cast<T*>(p_);
  }
  char* at(size_t byte_offset) const { return static_cast<char*>(p_) + byte_offset; }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// The state formats the kernels store plainly (no block scales): what every decoder's "no CUDA kernel for ..." check
// asks first.
inline bool plain16(Format f) { return f == Format::BF16 || f == Format::FP16; }
inline bool kernel_state_format(Format f) { return f == Format::FP32 || plain16(f); }

// n stored elements (fp32, bf16 or fp16 codes; raw: n · format_bytes(f) bytes) as double: exact, every value of those
// formats is a double.
inline void dequantise_codes(Format f, const uint8_t* raw, size_t n, double* out) {
  if (f == Format::FP32) {
    for (size_t i = 0; i < n; ++i) {
      float v;
      std::memcpy(&v, raw + 4 * i, 4);
      out[i] = v;
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    uint16_t c;
    std::memcpy(&c, raw + 2 * i, 2);
    out[i] = f == Format::BF16 ? bf16_bits_to_float(c) : fp16_bits_to_float(c);
  }
}

// A block-scaled copy's row scales for a zero copy (a zero row's scale is 1, numeric/scaled.h: the bytes a flush of
// zero rows would store), `rows` of them; released for any other format. Synchronous (reset time).
inline void reset_row_scales(DeviceBuffer& d, Format f, size_t rows) {
  if (!is_scaled_format(f) || rows == 0) {
    d.release();
    return;
  }
  const std::vector<float> ones(rows, 1.0f);
  d.assign(rows * sizeof(float));
  CUDA_CHECK(cudaMemcpy(d.as(), ones.data(), rows * sizeof(float), cudaMemcpyHostToDevice));
}

// A stored copy of n elements back on the host as exact doubles, after the work queued on `stream`: fp32, bf16 or
// fp16 codes, or a block-scaled copy's codes times the scales of its rows of row_len (numeric/scaled.h). raw and
// raw_scales: the caller's scratch.
inline void fetch_copy(const DeviceBuffer& d, const DeviceBuffer& scales, Format f, size_t n, size_t row_len,
                       cudaStream_t stream, std::vector<uint8_t>& raw, std::vector<float>& raw_scales,
                       std::vector<double>& out) {
  raw.resize(n * static_cast<size_t>(format_bytes(f)));
  CUDA_CHECK(cudaMemcpyAsync(raw.data(), d.as(), raw.size(), cudaMemcpyDeviceToHost, stream));
  const bool scaled = is_scaled_format(f);
  if (scaled) {
    raw_scales.resize(n / row_len);
    CUDA_CHECK(cudaMemcpyAsync(raw_scales.data(), scales.as(), raw_scales.size() * sizeof(float),
                               cudaMemcpyDeviceToHost, stream));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  out.resize(n);
  if (scaled)
    dequantize_rows(f, raw.data(), raw_scales.data(), n / row_len, row_len, out.data());
  else
    dequantise_codes(f, raw.data(), n, out.data());
}

// n floats already rounded to bf16 (the runner rounds every input to act_format first) as bf16 codes: exact.
inline void bf16_codes(const float* src, size_t n, std::vector<uint16_t>& codes) {
  codes.resize(n);
  for (size_t k = 0; k < n; ++k) codes[k] = float_to_bf16_bits(src[k]);
}

// The positions of n lockstep steps of seqs rows ([n, seqs], step0 + k for every row of step k) to the device for
// stochastic rounding's step key (Mamba2StepArgs / GdnStepArgs d_pos). `host` must stay untouched until the stream
// has passed the copy (the decoders wait once per advance()).
inline void stage_positions(DeviceBuffer& d, std::vector<int64_t>& host, long long step0, int n, int seqs,
                            cudaStream_t stream) {
  host.resize(static_cast<size_t>(n) * static_cast<size_t>(seqs));
  for (int k = 0; k < n; ++k)
    for (int r = 0; r < seqs; ++r) host[static_cast<size_t>(k) * seqs + r] = step0 + k;
  d.reserve(host.size() * sizeof(int64_t));
  CUDA_CHECK(cudaMemcpyAsync(d.as(), host.data(), host.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream));
}

}  // namespace rssm
