// Mamba-2 eager decode step (mamba2_kernels.h): S <- a·S + Δ·x ⊗ B, y = S·C + D·x (·z·sigmoid(z)), the state
// read and written once in its storage format, fp32 arithmetic, the dot over the stored (rounded) values as the
// CPU emulation (lib/cpu/eager.cpp) takes it.
// Work split: one CTA of 128 threads per (row, head, P-tile). A state row of N elements is N/vec lanes of 16-byte
// vectors (fp32 N=128: 32 lanes; bf16: 16), so a CTA covers 128/(N/vec) rows per pass. The loads of a chunk
// (R passes; at the Super-120B geometry half the head) are issued right after the slot is known, before the
// per-head scalars and the per-row x, z, D are fetched into shared memory: the only dependent latency left in
// front of the stream is the slot read (Little's law: ~20-26 KiB per SM must be in flight on the H200; a CTA
// holds up to 32 KiB). P-tiles only at small batch, where rows × heads would not fill 132 SMs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "common/cuda_check.h"
#include "common/device_query.h"
#include "mamba2/mamba2_device.cuh"

namespace rssm {
namespace m2 {

constexpr int kEagerMaxTileRows = 128;  // per-row scalars staged in shared memory; longer tiles loop over stages

// kSR: stochastic rounding of the stored state (16-bit S only), the words of numeric/stochastic.h at step d_pos[row].
template <class S, class A, int R, bool kSR>
__global__ void __launch_bounds__(kThreads) mamba2_eager_kernel(Mamba2StepArgs a, S* __restrict__ state, int ptiles) {
  constexpr int kVec = StateVec<S>::kVec;
  __shared__ float s_x[kEagerMaxTileRows], s_d[kEagerMaxTileRows], s_g[kEagerMaxTileRows];
  const int H = a.dims.H, P = a.dims.P, N = a.dims.N, hpg = a.dims.H / a.dims.G;
  const int per_row = H * ptiles;
  const int row = blockIdx.x / per_row;
  const int h = (blockIdx.x % per_row) / ptiles, tile = blockIdx.x % ptiles;
  const int slot = a.d_slot[row];
  if (slot < 0) return;  // padded row
  const TileLayout<S> t(N);
  const int tile_rows = (P + ptiles - 1) / ptiles;
  const int p_begin = tile * tile_rows, p_end = min(P, p_begin + tile_rows);
  const long long head_elem = (static_cast<long long>(slot) * H + h) * P * N + t.c * kVec;  // row 0's, this lane
  S* head = state + head_elem;
  uint4 q[kMaxRows];
  load_chunk<S, R>(q, head, t, p_begin, p_end, N);  // first: nothing below is needed to address the state

  const int g = h / hpg;
  const A* x = static_cast<const A*>(a.d_x) + row * or_default(a.x_stride, static_cast<long long>(H) * P) + h * P;
  const A* dtp = static_cast<const A*>(a.d_dt) + row * or_default(a.dt_stride, H);
  const long long bcs = or_default(a.bc_stride, static_cast<long long>(a.dims.G) * N);
  const A* B = static_cast<const A*>(a.d_B) + row * bcs + g * N + t.c * kVec;
  const A* C = static_cast<const A*>(a.d_C) + row * bcs + g * N + t.c * kVec;
  const A* z = a.d_z ? static_cast<const A*>(a.d_z) + row * or_default(a.z_stride, static_cast<long long>(H) * P) + h * P
                     : nullptr;
  const long long ys = or_default(a.y_stride, static_cast<long long>(H) * P);
  const bool y_bf16 = a.y_format == Format::BF16;
  SrKey key;
  if constexpr (kSR) key = SrKey{a.seed, RandomStream::EagerState, static_cast<long long>(a.d_pos[row])};

  const float delta = delta_of(to_f32(dtp[h]), a.d_dt_bias[h], a.dt_min, a.dt_max);
  const float decay = expf(-expf(a.d_A_log[h]) * delta);
  float Bv[kVec], Cv[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    Bv[k] = to_f32(B[k]);
    Cv[k] = to_f32(C[k]);
  }

  const int chunk = R * t.rpp;
  for (int s0 = p_begin; s0 < p_end; s0 += kEagerMaxTileRows) {  // one stage at the presets (tiles of <= 128 rows)
    const int s1 = min(p_end, s0 + kEagerMaxTileRows);
    if (s0 != p_begin) __syncthreads();  // the previous stage's scalars are consumed
    for (int p = s0 + threadIdx.x; p < s1; p += kThreads) {
      s_x[p - s0] = to_f32(x[p]);
      s_d[p - s0] = a.d_per_dim ? a.d_D[h * P + p] : a.d_D[h];
      if (z) {
        const float zv = to_f32(z[p]);
        s_g[p - s0] = silu<float>(zv);
      }
    }
    __syncthreads();
    for (int p0 = s0; p0 < s1; p0 += chunk) {
      if (p0 != p_begin) load_chunk<S, R>(q, head, t, p0, s1, N);
      float acc[R];
#pragma unroll
      for (int u = 0; u < R; ++u) {
        const int p = p0 + u * t.rpp + t.rsub;
        const int pl = min(p, s1 - 1) - s0;  // rows past the stage read a valid slot; their results are dropped
        float s[kVec];
        StateVec<S>::unpack(q[u], s);
        const float dx = delta * s_x[pl];
#pragma unroll
        for (int k = 0; k < kVec; ++k) s[k] = fmaf(decay, s[k], dx * Bv[k]);
        if (p < s1) {  // s now holds stored values
          if constexpr (kSR) {
            uint32_t r[kVec];
            random_words<kVec>(key, head_elem + static_cast<long long>(p) * N, r);
            StateVec<S>::store_sr(head + static_cast<long long>(p) * N, s, r);
          } else {
            StateVec<S>::store(head + static_cast<long long>(p) * N, s);
          }
        }
        acc[u] = 0.0f;
#pragma unroll
        for (int k = 0; k < kVec; ++k) acc[u] = fmaf(s[k], Cv[k], acc[u]);
      }
      // The chunk's R row dots reduced together (the same tree as row_sum, about R shuffles instead of R·log2(lanes));
      // each row's sum ends on one lane, which writes its output.
      const Scattered r = reduce_scatter<R>(acc, t.lanes);
#pragma unroll
      for (int i = 0; i < R; ++i) {
        const int p = p0 + (r.first + i) * t.rpp + t.rsub;
        if (i < r.count && r.owner && p < s1) {
          const int pl = p - s0;
          float out = acc[i] + s_d[pl] * s_x[pl];
          if (z) out = out * s_g[pl];  // gate(out, z) with the factor computed once per row
          store_y(a.d_y, row * ys + static_cast<long long>(h) * P + p, y_bf16, out);
        }
      }
    }
  }
}

template <class S, class A>
void launch_eager(const Mamba2EagerLaunch& l, int ptiles, cudaStream_t stream) {
  const long long blocks = static_cast<long long>(l.step.batch) * l.step.dims.H * ptiles;
  if (blocks > 0x7FFFFFFFLL) bad_launch("mamba2_eager_step", "batch · H · tiles exceeds the grid limit");
  constexpr int kFull = TileLayout<S>::kRows;
  // Rows a thread per chunk, timed on the H200 at batch 256 (fp32 / bf16 state): 16 (8) 616 / 375 us, 8 (4)
  // 590 / 336 us, 4 (2) 600 / 347 us. Split tiles (small batch) are one pass of rows: one row a thread keeps the
  // registers, hence the CTAs resident at once, at their most; the launch is latency-bound there (batch 1: 8.5 us,
  // against 16.5 us with 8 rows a thread).
  auto kernel = ptiles > 1 ? mamba2_eager_kernel<S, A, 1, false> : mamba2_eager_kernel<S, A, kFull / 2, false>;
  // Stochastic rounding: 16-bit states only (an fp32 state stores without rounding), one row a thread at every batch
  // (the shape the GPU tests run; its speed is not what such a run measures).
  if constexpr (sizeof(S) == 2) {
    if (l.step.rounding == Rounding::Stochastic) kernel = mamba2_eager_kernel<S, A, 1, true>;
  }
  kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(l.step, static_cast<S*>(l.d_state), ptiles);
  CUDA_CHECK_LAUNCH(stream);
}

template <class S>
void dispatch_act(const Mamba2EagerLaunch& l, int ptiles, cudaStream_t stream) {
  if (l.step.act_format == Format::BF16)
    launch_eager<S, __nv_bfloat16>(l, ptiles, stream);
  else
    launch_eager<S, float>(l, ptiles, stream);
}

}  // namespace m2

int mamba2_rows_per_pass(const Mamba2Dims& dims, Format state_format) {
  const int lanes = dims.N / m2::state_vec(state_format);
  return lanes > 0 ? m2::kThreads / lanes : dims.P;
}

int mamba2_p_tiles(const Mamba2Dims& dims, int batch, Format state_format) {
  // Aim for >= 2048 CTAs (about 16 per SM on 132 SMs); never split below one pass of rows.
  const int rows_per_pass = mamba2_rows_per_pass(dims, state_format);
  int tiles = 1;
  while (static_cast<long long>(batch) * dims.H * tiles < 2048 && (dims.P + 2 * tiles - 1) / (2 * tiles) >= rows_per_pass)
    tiles *= 2;
  return tiles;
}

int mamba2_eager_p_tiles(const Mamba2Dims& dims, int batch, Format state_format) {
  // One wave (the grouped replay's rule, grouped_shape): split while twice the tiles still fit 4 CTAs per SM, never
  // below one pass of rows. At small batch every CTA is a chain of latencies and a second wave doubles it, while
  // an unsplit head runs the kernel that holds several rows a thread in flight. The H200 sweep
  // (benchmarks/experiments/mamba2_p_tiles.h200.json, medians, us): batch 1 fp32 over 1/2/4/8/16 tiles
  // 6.8/9.9/7.2/7.4/8.3, bf16 6.0/6.5/5.2/5.8; batch 8 fp32 21.2/29.9/29.6/33.7/46.4, bf16 14.5/18.0/19.6/26.0.
  // This picks 4 at batch 1, 2 at batch 2 and 1 from batch 3 on: fp32 batch 1 then sits 0.4 us above its best (1
  // tile), bf16 at its best; mamba2_p_tiles' 2048-CTA rule (kept for the per-head replay and verify kernels)
  // picked 16 / 8 and 2.
  const int rows_per_pass = mamba2_rows_per_pass(dims, state_format);
  const long long slots = 4LL * sm_count();
  int tiles = 1;
  while (static_cast<long long>(batch) * dims.H * 2 * tiles <= slots && (dims.P + 2 * tiles - 1) / (2 * tiles) >= rows_per_pass)
    tiles *= 2;
  return tiles;
}

void mamba2_eager_step(const Mamba2EagerLaunch& l, cudaStream_t stream) {
  const char* what = "mamba2_eager_step";
  m2::check_step_args(what, l.step, l.variant == 0);
  if (l.step.batch == 0) return;
  if (l.state_format != Format::FP32 && l.state_format != Format::BF16 && l.state_format != Format::FP16)
    m2::bad_launch(what, "state_format must be fp32, bf16 or fp16 (got " + format_name(l.state_format) + ")");
  if (!l.d_state) m2::bad_launch(what, "d_state must be set");
  m2::check_state_rows(what, l.step.dims.N, m2::state_vec(l.state_format), l.d_state);
  if (l.variant != 0 && l.variant != 1) m2::bad_launch(what, "variant must be 0 or 1 (got " + std::to_string(l.variant) + ")");
  if (l.p_tiles < 0 || (l.p_tiles > 0 && (l.p_tiles - 1) * ((l.step.dims.P + l.p_tiles - 1) / l.p_tiles) >= l.step.dims.P))
    m2::bad_launch(what, "p_tiles must be 0 (automatic) or 1..P without an empty tile (got " + std::to_string(l.p_tiles) +
                             ", P = " + std::to_string(l.step.dims.P) + ")");
  if (l.p_tiles > 0 && l.variant != 0)
    m2::bad_launch(what, "p_tiles applies to variant 0 only (got variant " + std::to_string(l.variant) + ")");
  if (l.variant == 1) return m2::eager_pipelined(l, stream);
  const int ptiles = l.p_tiles > 0 ? l.p_tiles : mamba2_eager_p_tiles(l.step.dims, l.step.batch, l.state_format);
  switch (l.state_format) {
    case Format::FP32: m2::dispatch_act<float>(l, ptiles, stream); break;
    case Format::BF16: m2::dispatch_act<__nv_bfloat16>(l, ptiles, stream); break;
    default: m2::dispatch_act<__half>(l, ptiles, stream); break;
  }
}

// Explicit instantiations: state fp32 / bf16 / fp16 × activations bf16 / fp32.
namespace m2 {
template void launch_eager<float, __nv_bfloat16>(const Mamba2EagerLaunch&, int, cudaStream_t);
template void launch_eager<float, float>(const Mamba2EagerLaunch&, int, cudaStream_t);
template void launch_eager<__nv_bfloat16, __nv_bfloat16>(const Mamba2EagerLaunch&, int, cudaStream_t);
template void launch_eager<__nv_bfloat16, float>(const Mamba2EagerLaunch&, int, cudaStream_t);
template void launch_eager<__half, __nv_bfloat16>(const Mamba2EagerLaunch&, int, cudaStream_t);
template void launch_eager<__half, float>(const Mamba2EagerLaunch&, int, cudaStream_t);
}  // namespace m2

}  // namespace rssm
