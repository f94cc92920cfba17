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
