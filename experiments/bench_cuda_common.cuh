// What the CUDA benchmark programs share (bench_mamba2_cuda.cu, bench_gdn_cuda.cu): deterministic device inputs, a
// device buffer and CUDA-event timer, and the copy and read-only ceilings measured in the same process, so that every
// achieved bandwidth is quoted against a ceiling of the same run (GPU.md). Benchmark code only, included by .cu files.
#pragma once

#include <benchmark/benchmark.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "common/cuda_check.h"

namespace rssm::bench {

// The ceilings of this process (measure_ceilings), in GB/s counting bytes read plus written for the copy.
inline double g_copy_GBps = 0, g_read_GBps = 0, g_ceiling_bytes = 0;

__device__ inline float hash_unit(uint64_t i, uint32_t seed) {  // deterministic value in [-1, 1)
  uint64_t x = i * 0x9E3779B97F4A7C15ull + seed;
  x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29;
  return static_cast<float>(x >> 40) * (2.0f / 16777216.0f) - 1.0f;
}
template <class T>
__global__ void init_values(T* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float v = scale * hash_unit(i, seed);
    if constexpr (std::is_same<T, float>::value) p[i] = v;
    else if constexpr (std::is_same<T, __half>::value) p[i] = __float2half_rn(v);
    else p[i] = __float2bfloat16_rn(v);
  }
}
template <class T>
inline void init_dev(T* p, size_t n, uint32_t seed, float scale) {
  init_values<T><<<1024, 256>>>(p, n, seed, scale);
  CUDA_CHECK_LAUNCH(nullptr);
}

// Read-only streaming: every byte read once with 16-byte loads; a result that is never true keeps the loads live.
__global__ void read_only(const uint4* p, size_t n, uint4* sink) {
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcs(p + i);
    acc.x ^= v.x, acc.y ^= v.y, acc.z ^= v.z, acc.w ^= v.w;
  }
  if (acc.x == 0x9E3779B9u && acc.y == 0x7F4A7C15u && acc.z == 1u && acc.w == 2u) *sink = acc;
}

template <class T>
struct Dev {
  T* p = nullptr;
  explicit Dev(size_t n) { CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T))); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
};

struct Events {
  cudaEvent_t a, b;
  Events() { CUDA_CHECK(cudaEventCreate(&a)), CUDA_CHECK(cudaEventCreate(&b)); }
  ~Events() { cudaEventDestroy(a), cudaEventDestroy(b); }
  template <class F>
  float ms(cudaStream_t s, F&& f) {
    CUDA_CHECK(cudaEventRecord(a, s));
    f();
    CUDA_CHECK(cudaEventRecord(b, s));
    CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    return t;
  }
};

// ---- ceilings (4 GiB buffers, best of 10), measured once before the step benchmarks ----

inline void measure_ceilings(bool smoke) {
  const size_t bytes = smoke ? (64ull << 20) : (4ull << 30);
  g_ceiling_bytes = static_cast<double>(bytes);
  Dev<uint8_t> src(bytes), dst(bytes);
  Dev<uint4> sink(1);
  CUDA_CHECK(cudaMemset(src.p, 1, bytes));
  CUDA_CHECK(cudaMemset(dst.p, 2, bytes));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  Events ev;
  float best_copy = 1e30f, best_read = 1e30f;
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  for (int i = 0; i < 11; ++i) {
    const float c = ev.ms(s, [&] { CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice, s)); });
    const float r = ev.ms(s, [&] {
      read_only<<<sms * 8, 512, 0, s>>>(reinterpret_cast<const uint4*>(src.p), bytes / 16, sink.p);
      CUDA_CHECK_LAUNCH(s);
    });
    if (i > 0) best_copy = std::min(best_copy, c), best_read = std::min(best_read, r);  // the first one warms up
  }
  CUDA_CHECK(cudaStreamDestroy(s));
  g_copy_GBps = 2.0 * bytes / (best_copy * 1e-3) / 1e9;
  g_read_GBps = bytes / (best_read * 1e-3) / 1e9;
}

// Ceilings as entries of the same report (their time is the best pass measured above).
inline void bm_ceiling(benchmark::State& st, bool copy) {
  const double GBps = copy ? g_copy_GBps : g_read_GBps;
  const double bytes = copy ? 2.0 * g_ceiling_bytes : g_ceiling_bytes;
  for (auto _ : st) st.SetIterationTime(bytes / (GBps * 1e9));
  st.counters["bytes"] = bytes;
  st.counters["GBps"] = GBps;
}

// The value of a numeric option --NAME=VALUE (VALUE from `prefix` on), the whole text a number; otherwise one error
// line naming the program and the option, and exit status 2.
inline double number_of(const char* prog, const std::string& arg, size_t prefix) {
  const char* text = arg.c_str() + prefix;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0') {
    std::fprintf(stderr, "%s: %s: not a number\n", prog, arg.c_str());
    std::exit(2);
  }
  return v;
}
inline int integer_of(const char* prog, const std::string& arg, size_t prefix) {
  const double v = number_of(prog, arg, prefix);
  if (!(std::fabs(v) < 1e9) || v != std::floor(v)) {
    std::fprintf(stderr, "%s: %s: not an integer\n", prog, arg.c_str());
    std::exit(2);
  }
  return static_cast<int>(v);
}

}  // namespace rssm::bench
