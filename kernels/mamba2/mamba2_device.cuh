// Device helpers shared by the Mamba-2 kernels (eager and replay): 16-byte state vectors in each storage format,
// activation loads, the per-head scalars (Δ, A), and the host-side checks of the common launch fields.
// Only for kernels/mamba2/*.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "common/ring_cursor.cuh"  // ld_acquire, ring_cursor_advance
#include "common/state_vec.cuh"    // StateVec, store_narrow4
#include "common/warp_reduce.cuh"  // row_sum, reduce_scatter
#include "mamba2/mamba2_kernels.h"
#include "model/formulas.h"
#include "numeric/bits.h"

namespace rssm {
namespace m2 {

constexpr int kThreads = 128;  // one CTA: 4 warps
constexpr int kMaxRows = 16;   // register array bound of TileLayout::kRows

// How a CTA's 128 threads cover a tile of state rows: a row of N elements is N/kVec lanes of 16-byte vectors, a pass
// covers kThreads/lanes rows, and a chunk is R passes whose loads are all issued before the first use. kRows is the
// most a kernel asks for (fp32: 16 rows x 16 B a thread, the whole Super-120B head); the eager kernel takes half,
// the replay kernel a quarter (registers decide how many CTAs an SM holds). Raw uint4 registers hold the chunk, so
// a 16-bit state keeps 8 elements per register quad until it is used.
template <class T>
struct TileLayout {
  static constexpr int kVec = StateVec<T>::kVec;  // 16-byte vectors (a block-scaled copy's codes: 8 bytes)
  static constexpr int kRows = sizeof(T) == 4 ? 16 : 8;
  int lanes, rpp, c, rsub;
  __device__ explicit TileLayout(int N) {
    lanes = N / kVec, rpp = kThreads / lanes, c = threadIdx.x % lanes, rsub = threadIdx.x / lanes;
  }
};

// Issues the loads of one chunk (rows p0 + u·rpp + rsub, u < R) of a tile whose row p starts at src + p·N (src
// already offset by the thread's lane); rows at or past p_end read nothing and hold zeros. One pass of the CTA is
// rpp·N = kThreads·kVec elements (2 KiB) whatever N is, so the rows after the first are fixed offsets from one row
// pointer: no 64-bit row arithmetic per load (ncu: it was the largest instruction item of the replay streams).
// (E may differ from the layout's T: a dual read copy follows its update copy's rows.)
template <class E, class T>
__device__ inline E* chunk_row0(E* src, const TileLayout<T>& t, int p0, int N) {
  return src + static_cast<long long>(p0 + t.rsub) * N;
}
template <class T>
constexpr int kPassElems = kThreads * TileLayout<T>::kVec;  // elements between rows u and u + 1 of a chunk

// The replay kernels are compiled for N = 128 (every preset's state dim: Nemotron-3, Granite) and for any N: kN is
// 128 or 0 (N read at run time). A fixed N makes the row layout's lane count a constant, which the stream's
// reductions need (reduce_scatter's levels unrolled, no test and branch per level; ncu: 8% of the grouped step's
// instructions). kLanes<T, kN>: lanes of a row of T, 0 when N is a run-time value.
constexpr int kPresetN = 128;
template <class T, int kN>
constexpr int kLanes = kN > 0 ? kN / TileLayout<T>::kVec : 0;

template <class T, int R = TileLayout<T>::kRows>
__device__ inline void load_chunk(uint4 (&q)[kMaxRows], const T* src, const TileLayout<T>& t, int p0, int p_end, int N) {
  const T* r0 = chunk_row0(src, t, p0, N);
  const int left = p_end - p0 - t.rsub;  // row u is in the tile while u·rpp < left
#pragma unroll
  for (int u = 0; u < R; ++u)
    q[u] = u * t.rpp < left ? ldcs_vec(r0 + u * kPassElems<T>) : make_uint4(0, 0, 0, 0);
}

// One chunk (pairs q0 + u·rpp + rsub, u < R; rows of the CTA's contiguous run of pairs) of the run at `base` (pair 0,
// already at the thread's lane): one row pointer, the rest fixed offsets (load_chunk).
template <class T, int R>
__device__ inline void load_rows(uint4 (&q)[R], const T* base, const TileLayout<T>& lay, int np, int q0, int N) {
  const T* r0 = chunk_row0(base, lay, q0, N);
  const int left = np - q0 - lay.rsub;
#pragma unroll
  for (int u = 0; u < R; ++u)
    q[u] = u * lay.rpp < left ? ldcs_vec(r0 + u * kPassElems<T>) : make_uint4(0, 0, 0, 0);
}

// Eight consecutive bf16 ring elements (pairs q0 .. q0 + 7 of a row of np; pe points at pair q0) as raw bits, zero
// past np: one 16-byte load when `vec` (the row is 16-byte aligned) and all eight are inside the row.
__device__ inline uint4 load_bf16x8_row(const uint16_t* pe, int q0, int np, bool vec) {
  if (vec && q0 + 8 <= np) return *reinterpret_cast<const uint4*>(pe);
  uint32_t w[4];
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const uint32_t lo = q0 + 2 * m < np ? pe[2 * m] : 0, hi = q0 + 2 * m + 1 < np ? pe[2 * m + 1] : 0;
    w[m] = lo | (hi << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// StateVec (16-byte state vectors, nearest and stochastic stores) and store_narrow4: common/state_vec.cuh.

__device__ inline float to_f32(float v) { return v; }
__device__ inline float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float to_f32(__half v) { return __half2float(v); }

// An activation element as the buffer keeps it (bf16), as a float. A bf16 activation passes through unchanged.
__device__ inline float to_buffer_f32(float v) { return bf16_bits_to_float(float_to_bf16_bits(v)); }
__device__ inline float to_buffer_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline uint16_t to_buffer_bits(float v) { return float_to_bf16_bits(v); }
__device__ inline uint16_t to_buffer_bits(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }

// Δ = clamp(softplus(dt + dt_bias)) and the output gate: the contract's shared formulas (model/formulas.h), in fp32.
__device__ inline float delta_of(float dt_raw, float dt_bias, float dt_min, float dt_max) {
  return mamba2_delta<float>(dt_raw, dt_bias, dt_min, dt_max);
}

__device__ inline float gate(float y, float z) { return silu_gate<float>(y, z); }

// Output element store in the run-time output format (FP32 or BF16). bf16 rounds with the hardware conversion (one
// instruction; equal to numeric/bits.h's round_bf16 except for a NaN's payload, as the state stores above).
__device__ inline void store_y(void* y, long long idx, bool bf16, float v) {
  if (bf16)
    static_cast<__nv_bfloat16*>(y)[idx] = __float2bfloat16_rn(v);
  else
    static_cast<float*>(y)[idx] = v;
}

// Eight bf16 values (one 16-byte ring load) as floats.
__device__ inline void bf16x8_to_f32(const uint4 q, float b[8]) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) b[2 * i] = __uint_as_float(w[i] << 16), b[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
}

// Starts `bytes` at p on their way into L2 (a hint: no registers held, nothing waited for).
__device__ inline void prefetch_l2(const void* p, long long bytes) {
  const char* c = static_cast<const char*>(p);
  for (long long i = 128LL * threadIdx.x; i < bytes; i += 128LL * kThreads)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(c + i));
}

// ---- host side ----

__host__ __device__ inline long long or_default(long long stride, long long contiguous) { return stride > 0 ? stride : contiguous; }

[[noreturn]] inline void bad_launch(const char* what, const std::string& msg) {
  throw std::invalid_argument(std::string(what) + ": " + msg);
}

// Elements of a state vector: fp32 4, bf16 / fp16 8 (16 bytes), the 1-byte codes of a block-scaled read copy 8.
inline int state_vec(Format f) { return f == Format::FP32 ? 4 : 8; }

// Checks of the fields every step shares; `state_vec_elems` is the 16-byte vector width of the streamed state.
// sr_ok: the kernel this launch runs implements stochastic rounding (the step args' `rounding`).
inline void check_step_args(const char* what, const Mamba2StepArgs& a, bool sr_ok = false) {
  const Mamba2Dims& d = a.dims;
  if (d.H <= 0 || d.P <= 0 || d.N <= 0 || d.G <= 0 || d.H % d.G != 0)
    bad_launch(what, "dims H, P, N, G must be positive with H a multiple of G (got H=" + std::to_string(d.H) +
                         " P=" + std::to_string(d.P) + " N=" + std::to_string(d.N) + " G=" + std::to_string(d.G) + ")");
  if (a.batch < 0) bad_launch(what, "batch must be >= 0");
  if (a.batch == 0) return;
  if (!a.d_slot || !a.d_x || !a.d_dt || !a.d_B || !a.d_C || !a.d_y || !a.d_A_log || !a.d_dt_bias || !a.d_D)
    bad_launch(what, "d_slot, d_x, d_dt, d_B, d_C, d_y, d_A_log, d_dt_bias and d_D must all be set");
  if (a.act_format != Format::BF16 && a.act_format != Format::FP32)
    bad_launch(what, "act_format must be bf16 or fp32 (got " + format_name(a.act_format) + ")");
  if (a.y_format != Format::BF16 && a.y_format != Format::FP32)
    bad_launch(what, "y_format must be bf16 or fp32 (got " + format_name(a.y_format) + ")");
  if (!(a.dt_min >= 0.0f) || !(a.dt_max > a.dt_min)) bad_launch(what, "dt limits need 0 <= dt_min < dt_max");
  if (a.rounding != Rounding::Nearest && a.rounding != Rounding::Stochastic)
    bad_launch(what, "rounding must be nearest or stochastic");
  if (a.rounding == Rounding::Stochastic && !sr_ok)
    bad_launch(what, "rounding = stochastic is not implemented in this kernel (variant 0 of the eager and replay steps "
                     "has it)");
  if (a.rounding == Rounding::Stochastic && !a.d_pos) bad_launch(what, "d_pos must be set for rounding = stochastic");
}

// The streamed state's vectors: N / vec lanes per row, a power of two dividing 32.
inline void check_state_rows(const char* what, int N, int vec, const void* p) {
  const int lanes = N / vec;
  if (N % vec != 0 || lanes > 32 || (lanes & (lanes - 1)) != 0)
    bad_launch(what, "state dim N=" + std::to_string(N) + " must be " + std::to_string(vec) +
                         " times a power of two up to 32 (16-byte vectors, one row within a warp)");
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) bad_launch(what, "state pointers must be 16-byte aligned");
}

// The grouped variant's launcher (mamba2_replay_grouped.cu), called by mamba2_replay_step after its checks;
// `streamed` is the format a non-flush step reads.
void replay_grouped(const Mamba2ReplayLaunch& l, Format streamed, cudaStream_t stream);

// The grouped speculative verify (mamba2_verify_grouped.cu), called by mamba2_verify after its checks:
// verify_heads_per_cta gives the heads per CTA of a launch (1: the per-head kernel runs it; refuses a bad forced value).
int verify_heads_per_cta(const Mamba2VerifyLaunch& l);
// describe set: the grouped kernel's footprint instead of a launch (mamba2_verify_footprint).
void verify_grouped(const Mamba2VerifyLaunch& l, int heads_per_cta, cudaStream_t stream,
                    KernelFootprint* describe = nullptr);

// The pipelined variants' launchers (mamba2_pipelined.cu), called after the common checks.
void eager_pipelined(const Mamba2EagerLaunch& l, cudaStream_t stream);
void replay_pipelined(const Mamba2ReplayLaunch& l, cudaStream_t stream);

}  // namespace m2
}  // namespace rssm
