// Warp reductions the kernels of both families share. Device code only, for kernels/*/*.cu.
#pragma once

#include <cuda_runtime.h>

namespace rssm {

// Sum over the `width` consecutive lanes that share a state row (width a power of two <= 32), partner offsets
// width/2, ..., 1 in that order. Unrolled over the five possible offsets with a warp-uniform test: the step kernels
// are bound by instruction issue (ncu on the H200: 84% issue-slot use in the Mamba-2 replay step), and a loop with
// a run-time trip count costs a shift, a compare and a branch per level on top of the shuffle and the add.
__device__ inline float row_sum(float v, int width) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < width) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

// row_sum of each of N values (every lane keeps every sum), the values' shuffles of one level issued together.
// kWidth > 0 fixes the width at compile time (as reduce_scatter's kLanes).
template <int N, int kWidth = 0>
__device__ inline void row_sums(float (&v)[N], int width) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < (kWidth > 0 ? kWidth : width)) {
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] += __shfl_xor_sync(0xFFFFFFFFu, v[i], o);
    }
}

// N per-lane partial sums (N a power of two) reduced over the `lanes` consecutive lanes of a state row (a power of two
// <= 32) with about N shuffles instead of row_sum's N·log2(lanes): each step sends half of the values still held to
// the partner lane and keeps the other half. Every value's additions form row_sum's tree (the same partner offsets in
// the same order, own value first), so a dot reduced here equals row_sum's bit for bit. Afterwards the lane holds
// complete sums of values first .. first + count − 1 in v[0 .. count), count = max(N / lanes, 1); `owner` is false
// on lanes holding a duplicate (N < lanes). kLanes > 0 fixes `lanes` at compile time (the step kernels dispatch on
// it: a run-time width costs a test and a branch per level). Every lane of the warp must call it (full-mask shuffles).
struct Scattered {
  int first = 0, count = 1;
  bool owner = true;
};
template <int N, int kLanes, int kStep>
__device__ inline void scatter_step(float (&v)[N], int lanes, int lane, Scattered& r) {
  if constexpr (kStep < 5 && (kLanes == 0 || (kLanes >> (kStep + 1)) > 0)) {
    const int o = kLanes > 0 ? kLanes >> (kStep + 1) : lanes >> (kStep + 1);
    if (kLanes == 0 && o == 0) return;
    constexpr int n = N >> kStep;
    const bool hi = (lane & o) != 0;
    if constexpr (n >= 2) {
      constexpr int half = n / 2;
#pragma unroll
      for (int i = 0; i < half; ++i) {
        const float send = hi ? v[i] : v[i + half];
        const float keep = hi ? v[i + half] : v[i];
        v[i] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, o);
      }
      if (hi) r.first += half;
      r.count = half;
    } else {
      v[0] += __shfl_xor_sync(0xFFFFFFFFu, v[0], o);
      if (hi) r.owner = false;
    }
    scatter_step<N, kLanes, kStep + 1>(v, lanes, lane, r);
  }
}
template <int N, int kLanes = 0>
__device__ inline Scattered reduce_scatter(float (&v)[N], int lanes) {
  static_assert(N >= 1 && (N & (N - 1)) == 0, "N must be a power of two");
  static_assert(kLanes >= 0 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "kLanes: 0 (run time) or a power of two");
  Scattered r;
  r.count = N;
  scatter_step<N, kLanes, 0>(v, lanes, static_cast<int>(threadIdx.x & 31u), r);
  return r;
}

// reduce_scatter, then f(i, sum) on the lane that owns the complete sum of value i (once per value).
template <int N, int kLanes = 0, class F>
__device__ inline void reduce_scatter_each(float (&v)[N], int lanes, F&& f) {
  const Scattered r = reduce_scatter<N, kLanes>(v, lanes);
  if (!r.owner) return;
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (i < r.count) f(r.first + i, v[i]);
}

}  // namespace rssm
