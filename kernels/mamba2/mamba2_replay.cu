// Mamba-2 replay decode step (mamba2_kernels.h), output-only route of METHOD.md, one launch for all rows:
//   y_t = exp(Λ_t)·(S_c·C_t) + Σ_{j<=t} Δ_j·exp(Λ_t − Λ_j)·(B_j·C_t)·x_j + D·x_t   (·z·sigmoid(z))
// and, on the step that fills a row's ring to `interval`, the flush
//   S_c <- exp(Λ_t)·S_c + Σ_j Δ_j·exp(Λ_t − Λ_j)·x_j ⊗ B_j   (fp32, accumulator starting from the decayed S_c).
// Order of operations follows lib/cpu/replay.cpp (step_mamba2 / flush_mamba2) where it costs nothing: the current
// token enters through its bf16 buffer copy; Λ is the running fp32 sum of A·Δ over the ring; weights are
// Δ_j·exp(Λ_t − Λ_j)·(B_j·C_t); flush terms accumulate over j in order. Dots and the ring sum are tree/parallel
// sums (the contract's bounded half). One deliberate difference: at a dual flush step the output reads the fp32
// update copy the flush streams anyway (the CPU emulation reads the read copy), saving a read of the read copy.
//
// Work split: one CTA (128 threads) per (row, head, P-tile), as in the eager kernel. Each CTA first does the small
// per-(row, head) work: Δ_t, Λ_t, the B_j·C_t dots (one warp per entry, entries in parallel, once per CTA; a head
// tile never repeats them per row tile), the weights (one thread per entry), the ring sum Σ_j w_j·x_j[p] (one
// thread per row p); then streams its checkpoint tile once with kUnroll 16-byte loads in flight per thread. Other
// resident CTAs' streams hide that prologue, so the step time does not grow with the ring fill.
//
// Ring cursor, on the device: d_fill[slot] is read by one thread of every CTA of the row; the CTA that arrives
// last on d_arrive[slot] (atomicAdd, fenced) writes the advanced fill (0 after a flush) and re-zeroes d_arrive.
// Chosen over a parity-indexed double buffer (the host would pass a parity per launch, which a replayed CUDA graph
// cannot change, and a slot that sits out a step would read a stale copy) and over a second cursor kernel (one
// more launch per step, which is what batch 1 pays for). The cost is one L2 atomic per CTA.
// Which CTA writes what in the ring (no other CTA of the launch reads what it writes): entry j's x rows by the tile
// that owns them, B_t by tile 0 of the first head of the group, (Δ_t, Λ_t) by tile 0 of the head. Entries < j are
// only read. A flushing row writes no ring entry: its ring restarts at 0.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "common/cuda_check.h"
#include "mamba2/mamba2_device.cuh"

namespace rssm {
namespace m2 {

// Shared memory of one CTA, in floats: C_t, B_t, per-entry dots and weights, the ring sums of the tile's rows, and
// for the flush the entries' B (fp32) and x·weight per row.
struct ReplaySmem {
  int N, E, rows;  // E = interval (largest number of entries), rows = tile rows
  // Regions start on 16-byte boundaries (the flush reads B_j as float4).
  __host__ __device__ static int up4(int n) { return (n + 3) & ~3; }
  __host__ __device__ int off_C() const { return 0; }
  __host__ __device__ int off_Bt() const { return up4(N); }
  __host__ __device__ int off_dot() const { return 2 * up4(N); }
  __host__ __device__ int off_w() const { return off_dot() + up4(E); }
  __host__ __device__ int off_wf() const { return off_w() + up4(E); }
  __host__ __device__ int off_ring() const { return off_wf() + up4(E); }
  __host__ __device__ int off_B() const { return off_ring() + up4(rows); }
  __host__ __device__ int off_u() const { return off_B() + E * up4(N); }
  __host__ __device__ int floats() const { return off_u() + E * rows; }
};

// Everything the stream phase needs, per CTA.
struct TileCtx {
  int P, N, h, row, c, rsub, lanes, rows_per_pass, p_begin, p_end, nent;
  long long ys;
  float decay;
  bool y_bf16;
};

template <class A>
__device__ inline void write_out(const Mamba2StepArgs& a, const TileCtx& t, const A* x, const A* z, const float* s_ring,
                                 int p, float dot) {
  const float d = a.d_per_dim ? a.d_D[t.h * t.P + p] : a.d_D[t.h];
  float out = t.decay * dot + s_ring[p - t.p_begin];
  out += d * to_f32(x[p]);
  if (z) out = gate(out, to_f32(z[p]));
  store_y(a.d_y, t.row * t.ys + static_cast<long long>(t.h) * t.P + p, t.y_bf16, out);
}

// Non-flush: read the tile of `src` (the read copy, or the shared checkpoint) against C_t.
template <class T, class A>
__device__ void stream_read(const Mamba2StepArgs& a, const TileCtx& t, const T* src, const A* x, const A* z,
                            const float* smem, const ReplaySmem& L) {
  constexpr int kVec = StateVec<T>::kVec;
  float Cv[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) Cv[k] = smem[L.off_C() + t.c * kVec + k];
  const float* s_ring = smem + L.off_ring();
  for (int p0 = t.p_begin; p0 < t.p_end; p0 += t.rows_per_pass * kUnroll) {
    float s[kUnroll][kVec];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int p = p0 + u * t.rows_per_pass + t.rsub;
      if (p < t.p_end) {
        StateVec<T>::load(src + static_cast<long long>(p) * t.N, s[u]);
      } else {
#pragma unroll
        for (int k = 0; k < kVec; ++k) s[u][k] = 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int p = p0 + u * t.rows_per_pass + t.rsub;
      float acc = 0.0f;
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc = fmaf(s[u][k], Cv[k], acc);
      acc = row_sum(acc, t.lanes);
      if (t.c == 0 && p < t.p_end) write_out(a, t, x, z, s_ring, p, acc);
    }
  }
}

// Flush: read the tile of the checkpoint (update copy), output from it, fold the ring in, write it back (and the
// dual read copy, rounded from the same registers). T: checkpoint type; R: read-copy type (dual) or void.
template <class T, class R, class A>
__device__ void stream_flush(const Mamba2StepArgs& a, const TileCtx& t, T* ck, R* rd, const A* x, const A* z,
                             const float* smem, const ReplaySmem& L) {
  constexpr int kVec = StateVec<T>::kVec;
  float Cv[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) Cv[k] = smem[L.off_C() + t.c * kVec + k];
  const float* s_ring = smem + L.off_ring();
  const float* sB = smem + L.off_B() + t.c * kVec;
  const float* su = smem + L.off_u();
  for (int p0 = t.p_begin; p0 < t.p_end; p0 += t.rows_per_pass * kUnroll) {
    float s[kUnroll][kVec];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int p = p0 + u * t.rows_per_pass + t.rsub;
      if (p < t.p_end) {
        StateVec<T>::load(ck + static_cast<long long>(p) * t.N, s[u]);
      } else {
#pragma unroll
        for (int k = 0; k < kVec; ++k) s[u][k] = 0.0f;
      }
    }
    int pl[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int p = p0 + u * t.rows_per_pass + t.rsub;
      pl[u] = min(p, t.p_end - 1) - t.p_begin;  // rows past the tile read a valid slot; their results are dropped
      float acc = 0.0f;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        acc = fmaf(s[u][k], Cv[k], acc);
        s[u][k] *= t.decay;
      }
      acc = row_sum(acc, t.lanes);
      if (t.c == 0 && p < t.p_end) write_out(a, t, x, z, s_ring, p, acc);
    }
    for (int e = 0; e < t.nent; ++e) {
      float b[kVec];
#pragma unroll
      for (int k = 0; k < kVec; k += 4) {
        const float4 q = *reinterpret_cast<const float4*>(sB + e * t.N + k);
        b[k] = q.x, b[k + 1] = q.y, b[k + 2] = q.z, b[k + 3] = q.w;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float ue = su[e * L.rows + pl[u]];
#pragma unroll
        for (int k = 0; k < kVec; ++k) s[u][k] = fmaf(ue, b[k], s[u][k]);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int p = p0 + u * t.rows_per_pass + t.rsub;
      if (p < t.p_end) {
        StateVec<T>::store(ck + static_cast<long long>(p) * t.N, s[u]);
        if constexpr (!std::is_void<R>::value) {
          static_assert(kVec == 4, "dual read copies are written from an fp32 update copy");
          store_narrow4(rd + static_cast<long long>(p) * t.N, s[u]);
        }
      }
    }
  }
}

// CK: checkpoint type (the update copy when dual); RD: read-copy type, void when the checkpoint is shared.
template <class A, class CK, class RD>
__global__ void __launch_bounds__(kThreads) mamba2_replay_kernel(Mamba2ReplayLaunch l, int ptiles) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  __shared__ int s_fill;
  const Mamba2StepArgs& a = l.step;
  const int H = a.dims.H, P = a.dims.P, N = a.dims.N, G = a.dims.G, hpg = H / G;
  const int per_row = H * ptiles;
  const int row = blockIdx.x / per_row;
  const int h = (blockIdx.x % per_row) / ptiles, tile = blockIdx.x % ptiles;
  const int slot = a.d_slot[row];
  if (slot < 0) return;  // padded row: nothing read or written
  const int g = h / hpg, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int tile_rows = (P + ptiles - 1) / ptiles;
  const ReplaySmem L{N, l.interval, tile_rows};
  constexpr bool kDual = !std::is_void<RD>::value;
  using Src = typename std::conditional<kDual, RD, CK>::type;  // what a non-flush step reads
  const int p_begin = tile * tile_rows, p_end = min(P, p_begin + tile_rows);
  const long long head_off = (static_cast<long long>(slot) * H + h) * P * N;
  {
    // Start the tile's state on its way into L2 now: the prologue below is a chain of dependent small loads (fill,
    // ring, weights) that would otherwise leave this CTA's share of the bandwidth idle. A hint only (a dual flush
    // step streams the update copy instead, 1 step in `interval`).
    const char* tile_src = reinterpret_cast<const char*>(static_cast<const Src*>(kDual ? l.d_read : l.d_ckpt) + head_off +
                                                         static_cast<long long>(p_begin) * N);
    const int lines = static_cast<int>((static_cast<long long>(p_end - p_begin) * N * sizeof(Src) + 127) / 128);
    for (int i = tid; i < lines; i += kThreads) asm volatile("prefetch.global.L2 [%0];" ::"l"(tile_src + 128LL * i));
  }

  if (tid == 0) {  // ring cursor hand-off (see the top of this file)
    int f = __ldcg(&l.d_fill[slot]);  // L2: the last writer ran on another SM
    f = min(max(f, 0), l.interval - 1);  // a corrupt cursor must not send ring writes out of bounds
    s_fill = f;
    __threadfence();
    if (atomicAdd(&l.d_arrive[slot], 1) == per_row - 1) {
      __threadfence();
      l.d_arrive[slot] = 0;
      l.d_fill[slot] = f + 1 >= l.interval ? 0 : f + 1;
    }
  }

  // Inputs of this row.
  const A* x = static_cast<const A*>(a.d_x) + row * or_default(a.x_stride, static_cast<long long>(H) * P) + h * P;
  const A* dtp = static_cast<const A*>(a.d_dt) + row * or_default(a.dt_stride, H);
  const long long bcs = or_default(a.bc_stride, static_cast<long long>(G) * N);
  const A* Bt = static_cast<const A*>(a.d_B) + row * bcs + g * N;
  const A* Ct = static_cast<const A*>(a.d_C) + row * bcs + g * N;
  const A* z = a.d_z ? static_cast<const A*>(a.d_z) + row * or_default(a.z_stride, static_cast<long long>(H) * P) + h * P
                     : nullptr;
  for (int n = tid; n < N; n += kThreads) {
    smem[L.off_C() + n] = to_f32(Ct[n]);
    smem[L.off_Bt() + n] = to_buffer_f32(Bt[n]);
  }
  const float delta = delta_of(to_f32(dtp[h]), a.d_dt_bias[h], a.dt_min, a.dt_max);
  const float A_h = -expf(a.d_A_log[h]);
  // Ring of this slot.
  const int cap = l.capacity;
  const float2* dl = reinterpret_cast<const float2*>(l.d_ring_dl) + static_cast<long long>(slot) * cap * H + h;  // + e·H
  const uint16_t* rx = l.d_ring_x + static_cast<long long>(slot) * cap * H * P + static_cast<long long>(h) * P;  // + e·H·P
  const uint16_t* rB = l.d_ring_B + static_cast<long long>(slot) * cap * G * N + static_cast<long long>(g) * N;  // + e·G·N
  __syncthreads();
  const int j = s_fill;  // the current token's entry
  const bool flush = j + 1 == l.interval;
  const int nent = j + 1;
  const float lam_t = (j > 0 ? dl[static_cast<long long>(j - 1) * H].y : 0.0f) + A_h * delta;

  // B_j·C_t for every entry, one warp per entry, 8 bf16 per lane per load.
  for (int e = warp; e < nent; e += kThreads / 32) {
    float acc = 0.0f;
    for (int n = lane * 8; n < N; n += 32 * 8) {
      float b[8];
      if (e < j) {
        const uint4 q = *reinterpret_cast<const uint4*>(rB + static_cast<long long>(e) * G * N + n);
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) b[2 * i] = __uint_as_float(w[i] << 16), b[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) b[i] = smem[L.off_Bt() + n + i];
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) acc = fmaf(b[i], smem[L.off_C() + n + i], acc);
    }
    acc = row_sum(acc, 32);
    if (lane == 0) smem[L.off_dot() + e] = acc;
  }
  // The flush's B_j in fp32 (entry j is B_t).
  if (flush) {
    for (int i = tid; i < nent * N; i += kThreads) {
      const int e = i / N, n = i % N;
      smem[L.off_B() + i] = e < j ? bf16_bits_to_float(rB[static_cast<long long>(e) * G * N + n]) : smem[L.off_Bt() + n];
    }
  }
  __syncthreads();
  for (int e = tid; e < nent; e += kThreads) {
    const float2 de = e < j ? dl[static_cast<long long>(e) * H] : make_float2(delta, lam_t);
    const float wf = de.x * expf(lam_t - de.y);
    smem[L.off_wf() + e] = wf;
    smem[L.off_w() + e] = wf * smem[L.off_dot() + e];
  }
  __syncthreads();

  // Ring sum per row of the tile, the flush's x·weight per row, and the append of this token's x rows.
  for (int p = p_begin + tid; p < p_end; p += kThreads) {
    const float xt = to_buffer_f32(x[p]);
    float acc = 0.0f;
    for (int e = 0; e < nent; ++e) {
      const float xe = e < j ? bf16_bits_to_float(rx[static_cast<long long>(e) * H * P + p]) : xt;
      acc = fmaf(smem[L.off_w() + e], xe, acc);
      if (flush) smem[L.off_u() + e * tile_rows + (p - p_begin)] = smem[L.off_wf() + e] * xe;
    }
    smem[L.off_ring() + (p - p_begin)] = acc;
    if (!flush) l.d_ring_x[static_cast<long long>(slot) * cap * H * P + (static_cast<long long>(j) * H + h) * P + p] =
        to_buffer_bits(x[p]);
  }
  if (!flush) {
    if (tile == 0 && h % hpg == 0)
      for (int n = tid; n < N; n += kThreads)
        l.d_ring_B[static_cast<long long>(slot) * cap * G * N + (static_cast<long long>(j) * G + g) * N + n] =
            to_buffer_bits(Bt[n]);
    if (tile == 0 && tid == 0)
      reinterpret_cast<float2*>(l.d_ring_dl)[static_cast<long long>(slot) * cap * H + static_cast<long long>(j) * H + h] =
          make_float2(delta, lam_t);
  }
  __syncthreads();

  TileCtx t;
  t.P = P, t.N = N, t.h = h, t.row = row, t.p_begin = p_begin, t.p_end = p_end, t.nent = nent;
  t.ys = or_default(a.y_stride, static_cast<long long>(H) * P);
  t.decay = expf(lam_t);
  t.y_bf16 = a.y_format == Format::BF16;
  if (!flush) {
    constexpr int kVec = StateVec<Src>::kVec;
    t.lanes = N / kVec, t.rows_per_pass = kThreads / t.lanes, t.c = tid % t.lanes, t.rsub = tid / t.lanes;
    const Src* src = static_cast<const Src*>(kDual ? l.d_read : l.d_ckpt) + head_off + t.c * kVec;
    stream_read<Src, A>(a, t, src, x, z, smem, L);
  } else {
    constexpr int kVec = StateVec<CK>::kVec;
    t.lanes = N / kVec, t.rows_per_pass = kThreads / t.lanes, t.c = tid % t.lanes, t.rsub = tid / t.lanes;
    CK* ck = static_cast<CK*>(l.d_ckpt) + head_off + t.c * kVec;
    if constexpr (kDual) {
      RD* rd = static_cast<RD*>(l.d_read) + head_off + t.c * kVec;
      stream_flush<CK, RD, A>(a, t, ck, rd, x, z, smem, L);
    } else {
      stream_flush<CK, void, A>(a, t, ck, nullptr, x, z, smem, L);
    }
  }
}

template <class A, class CK, class RD>
void launch_replay(const Mamba2ReplayLaunch& l, int ptiles, cudaStream_t stream) {
  const long long blocks = static_cast<long long>(l.step.batch) * l.step.dims.H * ptiles;
  if (blocks > 0x7FFFFFFFLL) bad_launch("mamba2_replay_step", "batch · H · tiles exceeds the grid limit");
  const ReplaySmem L{l.step.dims.N, l.interval, (l.step.dims.P + ptiles - 1) / ptiles};
  const size_t bytes = static_cast<size_t>(L.floats()) * sizeof(float);
  auto kernel = mamba2_replay_kernel<A, CK, RD>;
  if (bytes > 48 * 1024) {  // above the default dynamic limit; a cheap attribute set, no synchronisation
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  }
  kernel<<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(l, ptiles);
  CUDA_CHECK_LAUNCH(stream);
}

template <class A>
void dispatch_state(const Mamba2ReplayLaunch& l, int ptiles, cudaStream_t stream) {
  if (l.dual) {
    if (l.read_format == Format::BF16)
      launch_replay<A, float, __nv_bfloat16>(l, ptiles, stream);
    else
      launch_replay<A, float, __half>(l, ptiles, stream);
    return;
  }
  switch (l.ckpt_format) {
    case Format::FP32: launch_replay<A, float, void>(l, ptiles, stream); break;
    case Format::BF16: launch_replay<A, __nv_bfloat16, void>(l, ptiles, stream); break;
    default: launch_replay<A, __half, void>(l, ptiles, stream); break;
  }
}

}  // namespace m2

void mamba2_replay_step(const Mamba2ReplayLaunch& l, cudaStream_t stream) {
  const char* what = "mamba2_replay_step";
  m2::check_step_args(what, l.step);
  if (l.step.batch == 0) return;
  if (l.interval < 1 || l.interval > kMamba2MaxInterval)
    m2::bad_launch(what, "interval must be in 1.." + std::to_string(kMamba2MaxInterval) + " (got " +
                             std::to_string(l.interval) + ")");
  if (l.capacity < l.interval) m2::bad_launch(what, "capacity must be >= interval");
  if (!l.d_ckpt || !l.d_ring_x || !l.d_ring_B || !l.d_ring_dl || !l.d_fill || !l.d_arrive)
    m2::bad_launch(what, "d_ckpt, d_ring_x, d_ring_B, d_ring_dl, d_fill and d_arrive must all be set");
  if (l.step.dims.N % 8 != 0) m2::bad_launch(what, "state dim N must be a multiple of 8 (16-byte ring loads of B)");
  if (reinterpret_cast<uintptr_t>(l.d_ring_B) % 16 != 0 || reinterpret_cast<uintptr_t>(l.d_ring_dl) % 8 != 0)
    m2::bad_launch(what, "d_ring_B must be 16-byte aligned, d_ring_dl 8-byte aligned");
  Format streamed;  // the copy whose vector width sets the row layout (both copies are checked)
  if (l.dual) {
    if (l.ckpt_format != Format::FP32) m2::bad_launch(what, "a dual checkpoint's update copy must be fp32");
    if (l.read_format != Format::BF16 && l.read_format != Format::FP16)
      m2::bad_launch(what, "read_format must be bf16 or fp16 (got " + format_name(l.read_format) + ")");
    if (!l.d_read) m2::bad_launch(what, "d_read must be set for a dual checkpoint");
    m2::check_state_rows(what, l.step.dims.N, m2::state_vec(l.read_format), l.d_read);
    streamed = l.read_format;
  } else {
    if (l.ckpt_format != Format::FP32 && l.ckpt_format != Format::BF16 && l.ckpt_format != Format::FP16)
      m2::bad_launch(what, "ckpt_format must be fp32, bf16 or fp16 (got " + format_name(l.ckpt_format) + ")");
    streamed = l.ckpt_format;
  }
  m2::check_state_rows(what, l.step.dims.N, m2::state_vec(l.ckpt_format), l.d_ckpt);
  const int ptiles = mamba2_p_tiles(l.step.dims, l.step.batch, streamed);
  if (l.step.act_format == Format::BF16)
    m2::dispatch_state<__nv_bfloat16>(l, ptiles, stream);
  else
    m2::dispatch_state<float>(l, ptiles, stream);
}

// Explicit instantiations: activations bf16 / fp32 × checkpoint fp32, bf16, fp16 shared or fp32 + bf16/fp16 dual.
namespace m2 {
#define RSSM_REPLAY_INST(A)                                                               \
  template void launch_replay<A, float, void>(const Mamba2ReplayLaunch&, int, cudaStream_t);          \
  template void launch_replay<A, __nv_bfloat16, void>(const Mamba2ReplayLaunch&, int, cudaStream_t);  \
  template void launch_replay<A, __half, void>(const Mamba2ReplayLaunch&, int, cudaStream_t);         \
  template void launch_replay<A, float, __nv_bfloat16>(const Mamba2ReplayLaunch&, int, cudaStream_t); \
  template void launch_replay<A, float, __half>(const Mamba2ReplayLaunch&, int, cudaStream_t);
RSSM_REPLAY_INST(__nv_bfloat16)
RSSM_REPLAY_INST(float)
#undef RSSM_REPLAY_INST
}  // namespace m2

}  // namespace rssm
