// Device helpers shared by the GDN kernels (eager and replay): 16-byte state vectors in each storage format,
// activation loads, the per-CTA L2 normalisation of q_t and k_t, the per-head gate, and the host-side checks of the
// common launch fields. Only for kernels/gdn/*.cu.
// The state vectors have the same shape as the Mamba-2 kernels' (kernels/mamba2/mamba2_device.cuh); they are kept
// separate so each family's kernels can be tuned without touching the other's.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "common/state_vec.cuh"    // StateVec, store_narrow4
#include "common/warp_reduce.cuh"  // row_sum, reduce_scatter
#include "gdn/gdn_kernels.h"
#include "model/formulas.h"
#include "numeric/bits.h"

namespace rssm {
namespace gdn {

constexpr int kThreads = 128;  // one CTA: 4 warps
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;     // passes of rows whose state loads are in flight together
// The step kernels are compiled for K = 128 (every preset's key dim: Qwen3.5, Qwen3-Next, Kimi Linear) and for any
// K (kK = kPresetK or 0): a fixed K makes a row's lane count a constant for the stream's reductions (reduce_scatter /
// row_sums levels unrolled, no test and branch per level).
constexpr int kPresetK = 128;
constexpr int kMaxEagerHeadsPerCta = 8;  // GdnEagerLaunch::heads_per_cta: the per-head gates sit in shared memory

// StateVec (16-byte state vectors, nearest and stochastic stores) and store_narrow4: common/state_vec.cuh.

__device__ inline float to_f32(float v) { return v; }
__device__ inline float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

// bf16 rounding (nearest even) with the hardware conversion, one instruction: equal to numeric/bits.h's round_bf16
// on every finite value and infinity (only a NaN's payload may differ, as in the state stores).
__device__ inline float round_bf16_hw(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// Output element store in the run-time output format (FP32 or BF16; bf16 through the hardware conversion).
__device__ inline void store_o(void* o, long long idx, bool bf16, float v) {
  if (bf16)
    static_cast<__nv_bfloat16*>(o)[idx] = __float2bfloat16_rn(v);
  else
    static_cast<float*>(o)[idx] = v;
}

__host__ __device__ inline long long or_default(long long stride, long long contiguous) {
  return stride > 0 ? stride : contiguous;
}

// The per-step scalars of value head h of one row: g (log-gate), α = exp(g), β = sigmoid(b), in fp32 through
// model/formulas.h as the CPU emulation computes them.
struct Gate {
  float g, alpha, beta;
};
// In two halves where a kernel wants the four loads in flight under other latency: gate_in issues them (raw values,
// not yet used), gate_from computes the gate.
template <class A>
struct GateIn {
  A a_raw, b_raw;
  float A_log, dt_bias;
};
template <class A>
__device__ inline GateIn<A> gate_in(const GdnStepArgs& a, int row, int h) {
  const long long abs_ = or_default(a.ab_stride, a.dims.HV);
  return {static_cast<const A*>(a.d_a)[row * abs_ + h], static_cast<const A*>(a.d_b)[row * abs_ + h], a.d_A_log[h],
          a.d_dt_bias[h]};
}
template <class A>
__device__ inline Gate gate_from(const GateIn<A>& in) {
  Gate gt;
  gt.g = gdn_log_gate<float>(in.A_log, to_f32(in.a_raw), in.dt_bias);
  gt.alpha = expf(gt.g);
  gt.beta = sigmoid<float>(to_f32(in.b_raw));
  return gt;
}
template <class A>
__device__ inline Gate gate_of(const GdnStepArgs& a, int row, int h) {
  return gate_from(gate_in<A>(a, row, h));
}

// q_t and k_t of key head hk of one row, L2-normalised into shared memory (s_q includes the 1/sqrt(K) scale).
// The sums of squares are per-thread partial sums, then warp trees, then the warps in order (the CPU sums in
// sequence: the contract's bounded difference). s_red: 2·kWarps floats. Ends with __syncthreads. `between` runs
// between its two barriers: shared-memory writes there are visible when it returns, without a barrier of their own.
// `first` (optional): the thread's first elements (i = threadIdx.x), already loaded by qk_first, so that a kernel can
// issue those loads before a chain of its own (the replay step's slot) instead of after it.
struct NoOp {
  __device__ void operator()() const {}
};
template <class A>
struct QkFirst {
  A q, k;
};
template <class A>
__device__ inline QkFirst<A> qk_first(const GdnStepArgs& a, int row, int hk) {
  const int K = a.dims.K, tid = threadIdx.x;
  if (tid >= K) return {A(0.0f), A(0.0f)};
  const long long off =
      row * or_default(a.qk_stride, static_cast<long long>(a.dims.HK) * K) + static_cast<long long>(hk) * K + tid;
  return {static_cast<const A*>(a.d_q)[off], static_cast<const A*>(a.d_k)[off]};
}
template <class A, class F = NoOp>
__device__ inline void load_normalised(const GdnStepArgs& a, int row, int hk, float* s_q, float* s_k, float* s_red,
                                       F between = F(), const QkFirst<A>* first = nullptr) {
  const int K = a.dims.K, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const long long qks = or_default(a.qk_stride, static_cast<long long>(a.dims.HK) * K);
  const A* q = static_cast<const A*>(a.d_q) + row * qks + static_cast<long long>(hk) * K;
  const A* k = static_cast<const A*>(a.d_k) + row * qks + static_cast<long long>(hk) * K;
  float sq = 0.0f, sk = 0.0f;
  for (int i = tid; i < K; i += kThreads) {
    const bool pre = first && i == tid;
    const float qi = to_f32(pre ? first->q : q[i]), ki = to_f32(pre ? first->k : k[i]);
    s_q[i] = qi, s_k[i] = ki;
    sq = fmaf(qi, qi, sq);
    sk = fmaf(ki, ki, sk);
  }
  sq = row_sum(sq, 32);
  sk = row_sum(sk, 32);
  if (lane == 0) s_red[warp] = sq, s_red[kWarps + warp] = sk;
  __syncthreads();
  float tq = 0.0f, tk = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) tq += s_red[w], tk += s_red[kWarps + w];
  const float qscale = 1.0f / sqrtf(static_cast<float>(K));
  const float iq = l2norm_factor<float>(tq, a.eps, qscale), ik = l2norm_factor<float>(tk, a.eps, 1.0f);
  for (int i = tid; i < K; i += kThreads) s_q[i] *= iq, s_k[i] *= ik;
  between();
  __syncthreads();
}

// Rows [i0, i1) of a head whose row 0 starts at `row0` (K elements of T per row) into L2, one 128-byte line per
// thread and pass. The streams prefetch a rolling window of chunks this way (the launch structs' l2_ahead): a whole
// tile per resident CTA overruns the L2 (benchmarks/experiments/gdn_l2_ahead.h200.json).
template <class T>
__device__ inline void prefetch_rows(const T* row0, int K, int i0, int i1) {
  if (i1 <= i0) return;
  const char* p = reinterpret_cast<const char*>(row0 + static_cast<long long>(i0) * K);
  const int lines = static_cast<int>((static_cast<long long>(i1 - i0) * K * sizeof(T) + 127) / 128);
  for (int i = threadIdx.x; i < lines; i += kThreads) asm volatile("prefetch.global.L2 [%0];" ::"l"(p + 128LL * i));
}

// Four fp32 values rounded to T (bf16 or fp16) in place: what store_narrow4 writes, as the reader of that copy sees it.
template <class T>
__device__ inline void round_narrow4(float v[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value)
      v[i] = __bfloat162float(__float2bfloat16_rn(v[i]));
    else
      v[i] = __half2float(__float2half_rn(v[i]));
  }
}

// ---- host side ----

[[noreturn]] inline void bad_launch(const char* what, const std::string& msg) {
  throw std::invalid_argument(std::string(what) + ": " + msg);
}

// Elements of a state vector: fp32 4, bf16 / fp16 8 (16 bytes), the 1-byte codes of a block-scaled read copy 8.
inline int state_vec(Format f) { return f == Format::FP32 ? 4 : 8; }

// Checks of the fields every step shares.
// sr_ok: the kernel this launch runs implements stochastic rounding (the step args' `rounding`).
inline void check_step_args(const char* what, const GdnStepArgs& a, bool sr_ok = false) {
  const GdnDims& d = a.dims;
  if (d.HK <= 0 || d.HV <= 0 || d.K <= 0 || d.V <= 0 || d.HV % d.HK != 0)
    bad_launch(what, "dims HK, HV, K, V must be positive with HV a multiple of HK (got HK=" + std::to_string(d.HK) +
                         " HV=" + std::to_string(d.HV) + " K=" + std::to_string(d.K) + " V=" + std::to_string(d.V) + ")");
  if (a.batch < 0) bad_launch(what, "batch must be >= 0");
  if (a.batch == 0) return;
  if (!a.d_slot || !a.d_q || !a.d_k || !a.d_v || !a.d_a || !a.d_b || !a.d_o || !a.d_A_log || !a.d_dt_bias)
    bad_launch(what, "d_slot, d_q, d_k, d_v, d_a, d_b, d_o, d_A_log and d_dt_bias must all be set");
  if (a.act_format != Format::BF16 && a.act_format != Format::FP32)
    bad_launch(what, "act_format must be bf16 or fp32 (got " + format_name(a.act_format) + ")");
  if (a.o_format != Format::BF16 && a.o_format != Format::FP32)
    bad_launch(what, "o_format must be bf16 or fp32 (got " + format_name(a.o_format) + ")");
  if (!(a.eps > 0.0f)) bad_launch(what, "eps must be positive");
  if (a.rounding != Rounding::Nearest && a.rounding != Rounding::Stochastic)
    bad_launch(what, "rounding must be nearest or stochastic");
  if (a.rounding == Rounding::Stochastic && !sr_ok)
    bad_launch(what, "rounding = stochastic is not implemented in this kernel (gdn_eager_step and gdn_replay_step "
                     "have it)");
  if (a.rounding == Rounding::Stochastic && !a.d_pos) bad_launch(what, "d_pos must be set for rounding = stochastic");
}

// The streamed state's vectors: K / vec lanes per row, a power of two dividing 32.
inline void check_state_rows(const char* what, int K, int vec, const void* p) {
  const int lanes = K / vec;
  if (K % vec != 0 || lanes > 32 || (lanes & (lanes - 1)) != 0)
    bad_launch(what, "key dim K=" + std::to_string(K) + " must be " + std::to_string(vec) +
                         " times a power of two up to 32 (16-byte vectors, one state row within a warp)");
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) bad_launch(what, "state pointers must be 16-byte aligned");
}

}  // namespace gdn
}  // namespace rssm
