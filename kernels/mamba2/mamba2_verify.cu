// Mamba-2 speculative decoding on the device (mamba2_kernels.h, common/spec_kernels.h):
//   mamba2_verify        a window of T positions per row from the checkpoint plus the ring (output-only route with a
//                        causal mask over the window), the committed entries folded into the checkpoint first when
//                        the row's flush is due (the previous window's flush, deferred into this launch because it
//                        streams the checkpoint anyway); no per-draft state.
//   mamba2_eager_verify  the eager speculative baseline: T states written per verify, one per draft position.
// Work split: one CTA (128 threads) per (row, head, P-tile), as the replay step. At serving batches mamba2_verify
// runs the grouped twin instead (mamba2_verify_grouped.cu: the prologue once per chunk of a group's heads), which
// computes every value by the same operations. The checkpoint tile is read once per
// window: each state row is dotted with the T C_s in registers, so the window costs one state read whatever T is,
// plus T times the small per-position work (dots B_e·C_s, weights, ring sums) done in the prologue from shared memory.
// Order of operations follows lib/cpu/replay.cpp step_mamba2 where it costs nothing: entries enter through their bf16
// buffer copies; Λ is the running fp32 sum of A·Δ continued from the last visible committed entry; weights are
// Δ_e·exp(Λ_s − Λ_e)·(B_e·C_s); ring sums accumulate over entries in order. The dots and the ring sum's place in the
// output are the contract's bounded half (docs/fp_contract.md), as in the replay step.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "common/cuda_check.h"
#include "common/kernel_footprint.cuh"
#include "common/spec_kernels.h"
#include "common/warp_reduce.cuh"
#include "mamba2/mamba2_device.cuh"

namespace rssm {
namespace m2 {

namespace {

// The value a 16-bit read copy stores for v (what the CPU emulation's window reads after a dual flush).
template <class T>
__device__ inline float stored_as(float v) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value)
    return __bfloat162float(__float2bfloat16_rn(v));
  else
    return __half2float(__float2half_rn(v));
}

// Shared memory of one verify CTA, in floats. T positions, E = hist + T entries at most, R = tile rows.
struct VerifySmem {
  int N, T, E, R, hist;
  __host__ __device__ static int up4(int n) { return (n + 3) & ~3; }
  __host__ __device__ int n4() const { return up4(N); }
  __host__ __device__ int off_C() const { return 0; }                        // [T][n4] C_s
  __host__ __device__ int off_Bw() const { return T * n4(); }                // [T][n4] B_s as buffered
  __host__ __device__ int off_dot() const { return 2 * T * n4(); }           // [E][T] B_e·C_s
  __host__ __device__ int off_W() const { return off_dot() + up4(E * T); }    // [T][up4(E)] weights
  __host__ __device__ int off_wd() const { return off_W() + T * up4(E); }     // [T] Δ_s
  __host__ __device__ int off_wl() const { return off_wd() + up4(T); }        // [T] Λ_s
  __host__ __device__ int off_dec() const { return off_wl() + up4(T); }       // [T] exp(Λ_s)
  __host__ __device__ int off_cd() const { return off_dec() + up4(T); }       // [hist] committed Δ_e
  __host__ __device__ int off_cl() const { return off_cd() + up4(hist); }     // [hist] committed Λ_e
  __host__ __device__ int off_wf() const { return off_cl() + up4(hist); }     // [hist] fold weights
  __host__ __device__ int off_xw() const { return off_wf() + up4(hist); }     // [T][up4(R)] x_s as buffered
  __host__ __device__ int off_dx() const { return off_xw() + T * up4(R); }    // [T][up4(R)] D·x_s
  __host__ __device__ int off_g() const { return off_dx() + T * up4(R); }     // [T][up4(R)] gate factor
  __host__ __device__ int off_ring() const { return off_g() + T * up4(R); }   // [T][up4(R)] ring sums
  __host__ __device__ int off_Bc() const { return off_ring() + T * up4(R); }  // [hist][n4] committed B (fold)
  __host__ __device__ int off_u() const { return off_Bc() + hist * n4(); }    // [R][up4(hist)] fold x·weight
  __host__ __device__ int floats() const { return off_u() + R * up4(hist); }
};

struct VerifyCtx {
  int N, T, h, row, P, p_begin, p_end, R4;
  long long ys;
  bool y_bf16, gated;
};

// Position s's output of row p from the state row's dot with C_s.
__device__ inline void verify_out(const Mamba2StepArgs& a, const VerifyCtx& t, const float* sm, const VerifySmem& L,
                                  int s, int p, float dot) {
  const int pl = p - t.p_begin;
  float out = sm[L.off_dec() + s] * dot + sm[L.off_ring() + s * t.R4 + pl];
  out += sm[L.off_dx() + s * t.R4 + pl];
  if (t.gated) out = out * sm[L.off_g() + s * t.R4 + pl];
  const long long rr = static_cast<long long>(t.row) * t.T + s;
  store_y(a.d_y, rr * t.ys + static_cast<long long>(t.h) * t.P + p, t.y_bf16, out);
}

// The T dots of one state row segment (this lane's kVec values) with the C_s, reduced over the row's lanes with
// reduce_scatter (about TP shuffles for all positions instead of T·log2(lanes)); the lanes then write the outputs of
// the positions they hold in parallel. TP: T rounded up to a power of two (positions >= T are zeros, never written).
template <int kVec, int TP>
__device__ inline void window_dots(const Mamba2StepArgs& a, const VerifyCtx& t, const float* sm, const VerifySmem& L,
                                   int lanes, int c, int p, const float (&v)[kVec]) {
  float acc[TP];
#pragma unroll
  for (int s = 0; s < TP; ++s) {
    acc[s] = 0.0f;
    if (s < t.T) {
      const float* C = sm + L.off_C() + s * L.n4() + c * kVec;
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc[s] = fmaf(v[k], C[k], acc[s]);
    }
  }
  const Scattered r = reduce_scatter<TP>(acc, lanes);
  if (r.owner && p < t.p_end)
#pragma unroll
    for (int i = 0; i < TP; ++i)
      if (i < r.count && r.first + i < t.T) verify_out(a, t, sm, L, r.first + i, p, acc[i]);
}

constexpr int kVerifyRows = 4;  // state rows a thread streams per chunk (registers: several CTAs per SM)
// As the replay step (mamba2_replay.cu): the prologue's dependent reads queue behind other CTAs' streams, so what
// keeps the bandwidth busy is many resident CTAs and the tile already on its way into L2 underneath the prologue.
constexpr int kVerifyMinBlocks = 8;
constexpr int kRingAcc = 8;  // ring-sum accumulators a thread holds at once (windows of more positions: more passes)

template <class A, class CK, class RD, int TP>
__global__ void __launch_bounds__(kThreads, kVerifyMinBlocks) mamba2_verify_kernel(Mamba2VerifyLaunch l, int ptiles) {
  extern __shared__ float4 smem4[];
  float* sm = reinterpret_cast<float*>(smem4);
  const Mamba2StepArgs& a = l.step;
  const int H = a.dims.H, P = a.dims.P, N = a.dims.N, G = a.dims.G, hpg = H / G, T = l.window;
  const int per_row = H * ptiles;
  const int row = blockIdx.x / per_row;
  const int h = (blockIdx.x % per_row) / ptiles, tile = blockIdx.x % ptiles;
  const int slot = a.d_slot[row];
  if (slot < 0) return;  // padded row: nothing read or written
  const int g = h / hpg, tid = threadIdx.x;
  const int tile_rows = (P + ptiles - 1) / ptiles;
  const int p_begin = tile * tile_rows, p_end = min(P, p_begin + tile_rows), rows = p_end - p_begin;
  const VerifySmem L{N, T, l.hist + T, tile_rows, l.hist};
  const int R4 = VerifySmem::up4(tile_rows);
  constexpr bool kDual = !std::is_void<RD>::value;
  const long long tile_off = (static_cast<long long>(slot) * H + h) * P * N + static_cast<long long>(p_begin) * N;
  using Src = typename std::conditional<kDual, RD, CK>::type;  // what a window without a flush streams
  prefetch_l2(static_cast<const Src*>(kDual ? l.d_read : l.d_ckpt) + tile_off, static_cast<long long>(rows) * N * sizeof(Src));
  const int cap = l.capacity, mask = cap - 1;
  // A corrupt cursor must not send ring accesses past the entries in use.
  const int hc = min(max(l.d_fill[slot], 0), l.hist);
  const int base = l.d_base[slot] & mask;
  const bool flush = spec_flushes(hc, l.interval, T, l.hist);
  if (kDual && flush)
    prefetch_l2(static_cast<const CK*>(l.d_ckpt) + tile_off, static_cast<long long>(rows) * N * sizeof(CK));
  const int hv = flush ? 0 : hc;  // committed entries the window reads
  auto idx = [&](int e) { return static_cast<long long>((base + e) & mask); };
  const long long head_off = (static_cast<long long>(slot) * H + h) * P * N;
  const float2* dl = reinterpret_cast<const float2*>(l.d_ring_dl) + static_cast<long long>(slot) * cap * H + h;
  const uint16_t* rx = l.d_ring_x + static_cast<long long>(slot) * cap * H * P + static_cast<long long>(h) * P;
  const uint16_t* rB = l.d_ring_B + static_cast<long long>(slot) * cap * G * N + static_cast<long long>(g) * N;

  // ---- the window's inputs; its entries appended at entry hc + s (past everything any CTA reads) ----
  const long long xs = or_default(a.x_stride, static_cast<long long>(H) * P), dts = or_default(a.dt_stride, H);
  const long long bcs = or_default(a.bc_stride, static_cast<long long>(G) * N);
  const long long zs = or_default(a.z_stride, static_cast<long long>(H) * P);
  const bool writes_B = tile == 0 && h % hpg == 0;
  for (int i = tid; i < T * N; i += kThreads) {
    const int s = i / N, n = i % N;
    const long long rr = static_cast<long long>(row) * T + s;
    const A* Bt = static_cast<const A*>(a.d_B) + rr * bcs + g * N;
    const A* Ct = static_cast<const A*>(a.d_C) + rr * bcs + g * N;
    sm[L.off_C() + s * L.n4() + n] = to_f32(Ct[n]);
    sm[L.off_Bw() + s * L.n4() + n] = to_buffer_f32(Bt[n]);
    if (writes_B)
      l.d_ring_B[static_cast<long long>(slot) * cap * G * N + (idx(hc + s) * G + g) * N + n] = to_buffer_bits(Bt[n]);
  }
  for (int i = tid; i < T * rows; i += kThreads) {
    const int s = i / rows, pl = i % rows, p = p_begin + pl;
    const long long rr = static_cast<long long>(row) * T + s;
    const A* x = static_cast<const A*>(a.d_x) + rr * xs + static_cast<long long>(h) * P;
    const float xa = to_f32(x[p]);
    sm[L.off_dx() + s * R4 + pl] = (a.d_per_dim ? a.d_D[h * P + p] : a.d_D[h]) * xa;
    sm[L.off_xw() + s * R4 + pl] = to_buffer_f32(x[p]);
    l.d_ring_x[static_cast<long long>(slot) * cap * H * P + (idx(hc + s) * H + h) * P + p] = to_buffer_bits(x[p]);
    if (a.d_z) {
      const A* z = static_cast<const A*>(a.d_z) + rr * zs + static_cast<long long>(h) * P;
      sm[L.off_g() + s * R4 + pl] = silu<float>(to_f32(z[p]));
    }
  }
  for (int e = tid; e < hc; e += kThreads) {
    const float2 d = dl[idx(e) * H];
    sm[L.off_cd() + e] = d.x;
    sm[L.off_cl() + e] = d.y;
  }
  __syncthreads();
  if (tid == 0) {  // Λ over the window: one running fp32 sum, continued from the last visible committed entry
    const float A_h = -expf(a.d_A_log[h]);
    float lam = hv > 0 ? sm[L.off_cl() + hv - 1] : 0.0f;
    for (int s = 0; s < T; ++s) {
      const long long rr = static_cast<long long>(row) * T + s;
      const float delta = delta_of(to_f32(static_cast<const A*>(a.d_dt)[rr * dts + h]), a.d_dt_bias[h], a.dt_min, a.dt_max);
      lam = lam + A_h * delta;
      sm[L.off_wd() + s] = delta;
      sm[L.off_wl() + s] = lam;
      sm[L.off_dec() + s] = expf(lam);
      if (tile == 0)
        reinterpret_cast<float2*>(l.d_ring_dl)[static_cast<long long>(slot) * cap * H + idx(hc + s) * H + h] =
            make_float2(delta, lam);
    }
  }
  // The dots B_e·C_s of every visible entry (committed from the ring, then the window's own) with every position.
  // Item i = e·c8 + k covers B_e[8k .. 8k+7]; c8 = N/8 lanes of one warp share an entry.
  const int c8 = N / 8, nvis = hv + T, items = nvis * c8;
  for (int i0 = 0; i0 < items; i0 += kThreads) {  // uniform over the CTA: every lane reaches the shuffles
    const int i = i0 + tid, e = i / c8, k = i % c8;
    const bool live = i < items;
    float b[8];
    if (live && e < hv) {
      bf16x8_to_f32(*reinterpret_cast<const uint4*>(rB + idx(e) * G * N + 8 * k), b);
    } else {
#pragma unroll
      for (int m = 0; m < 8; ++m) b[m] = live ? sm[L.off_Bw() + (e - hv) * L.n4() + 8 * k + m] : 0.0f;
    }
    for (int s = 0; s < T; ++s) {
      float acc = 0.0f;
#pragma unroll
      for (int m = 0; m < 8; ++m) acc = fmaf(b[m], live ? sm[L.off_C() + s * L.n4() + 8 * k + m] : 0.0f, acc);
      acc = row_sum(acc, c8);
      if (live && k == 0) sm[L.off_dot() + e * T + s] = acc;
    }
  }
  if (flush)  // the fold's B_e (fp32) for every committed entry
    for (int i = tid; i < hc * c8; i += kThreads) {
      const int e = i / c8, k = i % c8;
      float b[8];
      bf16x8_to_f32(*reinterpret_cast<const uint4*>(rB + idx(e) * G * N + 8 * k), b);
#pragma unroll
      for (int m = 0; m < 8; ++m) sm[L.off_Bc() + e * L.n4() + 8 * k + m] = b[m];
    }
  __syncthreads();
  const int E4 = VerifySmem::up4(L.E);
  for (int i = tid; i < T * nvis; i += kThreads) {
    const int s = i / nvis, e = i % nvis;
    float w = 0.0f;
    if (e <= hv + s) {  // causal: position s sees the committed entries and the window's up to itself
      const bool committed = e < hv;
      const float de = committed ? sm[L.off_cd() + e] : sm[L.off_wd() + e - hv];
      const float le = committed ? sm[L.off_cl() + e] : sm[L.off_wl() + e - hv];
      w = de * expf(sm[L.off_wl() + s] - le) * sm[L.off_dot() + e * T + s];
    }
    sm[L.off_W() + s * E4 + e] = w;
  }
  float fold_decay = 1.0f;
  if (flush) {
    const float lamK = sm[L.off_cl() + hc - 1];
    fold_decay = expf(lamK);
    for (int e = tid; e < hc; e += kThreads) sm[L.off_wf() + e] = sm[L.off_cd() + e] * expf(lamK - sm[L.off_cl() + e]);
  }
  __syncthreads();

  // ---- ring sums per (position, row), and the fold's x·weight per (row, entry) ----
  const int H4 = VerifySmem::up4(l.hist);
  for (int pl = tid; pl < rows; pl += kThreads) {
    const int p = p_begin + pl;
    for (int s0 = 0; s0 < T; s0 += kRingAcc) {  // kRingAcc positions at a time, each accumulated over entries in order
      float acc[kRingAcc];
#pragma unroll
      for (int s = 0; s < kRingAcc; ++s) acc[s] = 0.0f;
      for (int e = 0; e < hv; ++e) {
        const float xe = bf16_bits_to_float(rx[idx(e) * H * P + p]);
#pragma unroll
        for (int s = 0; s < kRingAcc; ++s)
          if (s0 + s < T) acc[s] = fmaf(sm[L.off_W() + (s0 + s) * E4 + e], xe, acc[s]);
      }
      for (int j = 0; j < T; ++j) {
        const float xj = sm[L.off_xw() + j * R4 + pl];
#pragma unroll
        for (int s = 0; s < kRingAcc; ++s)
          if (s0 + s < T && s0 + s >= j) acc[s] = fmaf(sm[L.off_W() + (s0 + s) * E4 + hv + j], xj, acc[s]);
      }
#pragma unroll
      for (int s = 0; s < kRingAcc; ++s)
        if (s0 + s < T) sm[L.off_ring() + (s0 + s) * R4 + pl] = acc[s];
    }
    if (flush)
      for (int e = 0; e < hc; ++e)
        sm[L.off_u() + pl * H4 + e] = sm[L.off_wf() + e] * bf16_bits_to_float(rx[idx(e) * H * P + p]);
  }
  __syncthreads();

  // ---- the stream: each state row read once, dotted with every C_s (a flush folds and stores it first) ----
  VerifyCtx t;
  t.N = N, t.T = T, t.h = h, t.row = row, t.P = P, t.p_begin = p_begin, t.p_end = p_end, t.R4 = R4;
  t.ys = or_default(a.y_stride, static_cast<long long>(H) * P);
  t.y_bf16 = a.y_format == Format::BF16;
  t.gated = a.d_z != nullptr;
  if (!flush) {
    const TileLayout<Src> lay(N);
    constexpr int kVec = TileLayout<Src>::kVec;
    const Src* src = static_cast<const Src*>(kDual ? l.d_read : l.d_ckpt) + head_off + lay.c * kVec;
    for (int p0 = p_begin; p0 < p_end; p0 += kVerifyRows * lay.rpp) {
      uint4 q[kMaxRows];
      load_chunk<Src, kVerifyRows>(q, src, lay, p0, p_end, N);
#pragma unroll
      for (int u = 0; u < kVerifyRows; ++u) {
        float v[kVec];
        StateVec<Src>::unpack(q[u], v);
        window_dots<kVec, TP>(a, t, sm, L, lay.lanes, lay.c, p0 + u * lay.rpp + lay.rsub, v);
      }
    }
    return;
  }
  const TileLayout<CK> lay(N);
  constexpr int kVec = TileLayout<CK>::kVec;
  CK* ck = static_cast<CK*>(l.d_ckpt) + head_off + lay.c * kVec;
  for (int p0 = p_begin; p0 < p_end; p0 += kVerifyRows * lay.rpp) {
    uint4 q[kMaxRows];
    load_chunk<CK, kVerifyRows>(q, ck, lay, p0, p_end, N);
#pragma unroll
    for (int u = 0; u < kVerifyRows; ++u) {
      const int p = p0 + u * lay.rpp + lay.rsub;
      const int pl = min(p, p_end - 1) - p_begin;  // rows past the tile: computed on a valid row, dropped
      float v[kVec];
      StateVec<CK>::unpack(q[u], v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[k] *= fold_decay;
      for (int e = 0; e < hc; ++e) {
        const float ue = sm[L.off_u() + pl * H4 + e];
        const float* Be = sm + L.off_Bc() + e * L.n4() + lay.c * kVec;
#pragma unroll
        for (int k = 0; k < kVec; ++k) v[k] = fmaf(ue, Be[k], v[k]);
      }
      if (p < p_end) StateVec<CK>::store(ck + static_cast<long long>(p) * N, v);  // v now holds the stored values
      if constexpr (kDual) {
        static_assert(kVec == 4, "dual read copies are written from an fp32 update copy");
        RD* rd = static_cast<RD*>(l.d_read) + head_off + lay.c * kVec;
        if (p < p_end) store_narrow4(rd + static_cast<long long>(p) * N, v);
#pragma unroll
        for (int k = 0; k < kVec; ++k) v[k] = stored_as<RD>(v[k]);  // the window reads the read copy
      }
      window_dots<kVec, TP>(a, t, sm, L, lay.lanes, lay.c, p, v);
    }
  }
}

// describe: set for mamba2_verify_footprint, which gets the kernel's footprint instead of a launch.
template <class A, class CK, class RD>
void launch_verify(const Mamba2VerifyLaunch& l, int ptiles, cudaStream_t stream, KernelFootprint* describe) {
  const long long blocks = static_cast<long long>(l.step.batch) * l.step.dims.H * ptiles;
  if (blocks > 0x7FFFFFFFLL) bad_launch("mamba2_verify", "batch · H · tiles exceeds the grid limit");
  const VerifySmem L{l.step.dims.N, l.window, l.hist + l.window, (l.step.dims.P + ptiles - 1) / ptiles, l.hist};
  const size_t bytes = static_cast<size_t>(L.floats()) * sizeof(float);
  auto kernel = l.window <= 4 ? mamba2_verify_kernel<A, CK, RD, 4>
                : l.window <= 8 ? mamba2_verify_kernel<A, CK, RD, 8> : mamba2_verify_kernel<A, CK, RD, 16>;
  if (describe) {
    *describe = footprint_of(kernel, kThreads, bytes, blocks);
    return;
  }
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  kernel<<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(l, ptiles);
  CUDA_CHECK_LAUNCH(stream);
}

template <class A>
void dispatch_verify(const Mamba2VerifyLaunch& l, int ptiles, cudaStream_t stream, KernelFootprint* describe) {
  with_checkpoint_types(l.dual, l.ckpt_format, l.read_format, [&](auto ck, auto rd) {
    launch_verify<A, typename decltype(ck)::type, typename decltype(rd)::type>(l, ptiles, stream, describe);
  });
}

// ---------------------------------------------------------------------------------------------------------------
// The eager speculative baseline: the tile of draft d_cur in registers, stepped through the T positions as
// mamba2_eager_kernel steps one, each state stored into its draft (T full states written per verify). The tile's
// first chunk is loaded before the window's inputs are staged, and each next chunk's loads are issued before the
// current chunk's T positions are stepped (they read other rows, so no store of this chunk can alias them): the
// stream is never without loads in flight while a chunk's R·T stores go out. The chunk's rows are reduced together
// per position (reduce_scatter: row_sum's tree, so the same sums).
constexpr int kEagerVerifyMaxRows = 128;

template <class S, class A>
__global__ void __launch_bounds__(kThreads) mamba2_eager_verify_kernel(Mamba2EagerVerifyLaunch l, int ptiles) {
  constexpr int kVec = StateVec<S>::kVec;
  constexpr int R = kVerifyRows;
  extern __shared__ float4 smem4[];
  float* sm = reinterpret_cast<float*>(smem4);
  const Mamba2StepArgs& a = l.step;
  const int H = a.dims.H, P = a.dims.P, N = a.dims.N, G = a.dims.G, hpg = H / G, T = l.window;
  const int per_row = H * ptiles;
  const int row = blockIdx.x / per_row;
  const int h = (blockIdx.x % per_row) / ptiles, tile = blockIdx.x % ptiles;
  const int slot = a.d_slot[row];
  if (slot < 0) return;
  const TileLayout<S> lay(N);
  const int tile_rows = (P + ptiles - 1) / ptiles;
  const int p_begin = tile * tile_rows, p_end = min(P, p_begin + tile_rows), rows = p_end - p_begin;
  const int cur = min(max(l.d_cur[slot], 0), T - 1);
  const long long draft = static_cast<long long>(H) * P * N;  // one draft state of the slot
  S* base = static_cast<S*>(l.d_state) + static_cast<long long>(slot) * T * draft + static_cast<long long>(h) * P * N +
            lay.c * kVec;
  const S* src = base + cur * draft;
  uint4 q[kMaxRows];
  load_chunk<S, R>(q, src, lay, p_begin, p_end, N);  // first: only the slot and the cursor address it
  const int g = h / hpg, n4 = (N + 3) & ~3, r4 = (tile_rows + 3) & ~3;
  // Shared: B_s, C_s [T][n4]; x_s, D, gate [T][r4]; Δ_s, decay_s [T].
  float* sB = sm;
  float* sC = sB + T * n4;
  float* sx = sC + T * n4;
  float* sd = sx + T * r4;
  float* sg = sd + T * r4;
  float* sdel = sg + T * r4;
  float* sdec = sdel + T;
  const long long xs = or_default(a.x_stride, static_cast<long long>(H) * P), dts = or_default(a.dt_stride, H);
  const long long bcs = or_default(a.bc_stride, static_cast<long long>(G) * N);
  const long long zs = or_default(a.z_stride, static_cast<long long>(H) * P);
  for (int i = threadIdx.x; i < T * N; i += kThreads) {
    const int s = i / N, n = i % N;
    const long long rr = static_cast<long long>(row) * T + s;
    sB[s * n4 + n] = to_f32(static_cast<const A*>(a.d_B)[rr * bcs + g * N + n]);
    sC[s * n4 + n] = to_f32(static_cast<const A*>(a.d_C)[rr * bcs + g * N + n]);
  }
  for (int i = threadIdx.x; i < T * rows; i += kThreads) {
    const int s = i / rows, pl = i % rows, p = p_begin + pl;
    const long long rr = static_cast<long long>(row) * T + s;
    sx[s * r4 + pl] = to_f32(static_cast<const A*>(a.d_x)[rr * xs + static_cast<long long>(h) * P + p]);
    sd[s * r4 + pl] = a.d_per_dim ? a.d_D[h * P + p] : a.d_D[h];
    if (a.d_z) sg[s * r4 + pl] = silu<float>(to_f32(static_cast<const A*>(a.d_z)[rr * zs + static_cast<long long>(h) * P + p]));
  }
  for (int s = threadIdx.x; s < T; s += kThreads) {
    const long long rr = static_cast<long long>(row) * T + s;
    const float delta = delta_of(to_f32(static_cast<const A*>(a.d_dt)[rr * dts + h]), a.d_dt_bias[h], a.dt_min, a.dt_max);
    sdel[s] = delta;
    sdec[s] = expf(-expf(a.d_A_log[h]) * delta);
  }
  __syncthreads();
  const long long ys = or_default(a.y_stride, static_cast<long long>(H) * P);
  const bool y_bf16 = a.y_format == Format::BF16;
  const int chunk = R * lay.rpp;
  for (int p0 = p_begin; p0 < p_end; p0 += chunk) {
    float v[R][kVec];
    int pl[R];
#pragma unroll
    for (int u = 0; u < R; ++u) {
      StateVec<S>::unpack(q[u], v[u]);  // rows past the tile hold zeros; their results are dropped
      pl[u] = min(p0 + u * lay.rpp + lay.rsub, p_end - 1) - p_begin;
    }
    if (p0 + chunk < p_end) load_chunk<S, R>(q, src, lay, p0 + chunk, p_end, N);  // in flight while this one steps
    for (int s = 0; s < T; ++s) {
      const float* Bv = sB + s * n4 + lay.c * kVec;
      const float* Cv = sC + s * n4 + lay.c * kVec;
      const float dec = sdec[s], del = sdel[s];
      float acc[R];
#pragma unroll
      for (int u = 0; u < R; ++u) {
        const int p = p0 + u * lay.rpp + lay.rsub;
        const float dx = del * sx[s * r4 + pl[u]];
#pragma unroll
        for (int k = 0; k < kVec; ++k) v[u][k] = fmaf(dec, v[u][k], dx * Bv[k]);
        if (p < p_end) StateVec<S>::store(base + s * draft + static_cast<long long>(p) * N, v[u]);  // stored values
        acc[u] = 0.0f;
#pragma unroll
        for (int k = 0; k < kVec; ++k) acc[u] = fmaf(v[u][k], Cv[k], acc[u]);
      }
      reduce_scatter_each<R>(acc, lay.lanes, [&](int u, float dot) {
        const int p = p0 + u * lay.rpp + lay.rsub;
        if (p < p_end) {
          const int pu = p - p_begin;
          float out = dot + sd[s * r4 + pu] * sx[s * r4 + pu];
          if (a.d_z) out = out * sg[s * r4 + pu];
          const long long rr = static_cast<long long>(row) * T + s;
          store_y(a.d_y, rr * ys + static_cast<long long>(h) * P + p, y_bf16, out);
        }
      });
    }
  }
}

template <class S, class A>
void launch_eager_verify(const Mamba2EagerVerifyLaunch& l, int ptiles, cudaStream_t stream) {
  const long long blocks = static_cast<long long>(l.step.batch) * l.step.dims.H * ptiles;
  if (blocks > 0x7FFFFFFFLL) bad_launch("mamba2_eager_verify", "batch · H · tiles exceeds the grid limit");
  const int n4 = (l.step.dims.N + 3) & ~3, r4 = ((l.step.dims.P + ptiles - 1) / ptiles + 3) & ~3;
  const size_t bytes = static_cast<size_t>(l.window) * (2 * n4 + 3 * r4 + 2) * sizeof(float);
  auto kernel = mamba2_eager_verify_kernel<S, A>;
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  kernel<<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(l, ptiles);
  CUDA_CHECK_LAUNCH(stream);
}

template <class S>
void dispatch_eager_verify(const Mamba2EagerVerifyLaunch& l, int ptiles, cudaStream_t stream) {
  if (l.step.act_format == Format::BF16)
    launch_eager_verify<S, __nv_bfloat16>(l, ptiles, stream);
  else
    launch_eager_verify<S, float>(l, ptiles, stream);
}

// mamba2_verify's checks and kernel choice; describe set: the chosen kernel's footprint, nothing launched.
void verify_checked(const Mamba2VerifyLaunch& l, cudaStream_t stream, KernelFootprint* describe) {
  const char* what = "mamba2_verify";
  m2::check_step_args(what, l.step);
  if (l.step.batch == 0) return;
  if (l.window < 1 || l.window > kMaxSpecWindow)
    m2::bad_launch(what, "window must be in 1.." + std::to_string(kMaxSpecWindow) + " (got " + std::to_string(l.window) + ")");
  if (l.interval < 1) m2::bad_launch(what, "interval must be >= 1");
  if (l.hist < l.interval + l.window || l.hist > kMamba2MaxHist)
    m2::bad_launch(what, "hist must be in interval + window .. " + std::to_string(kMamba2MaxHist) + " (got " +
                             std::to_string(l.hist) + ")");
  if (l.capacity < spec_ring_capacity(l.hist, l.window) || (l.capacity & (l.capacity - 1)) != 0)
    m2::bad_launch(what, "capacity must be a power of two >= spec_ring_capacity(hist, window)");
  if (!l.d_ckpt || !l.d_ring_x || !l.d_ring_B || !l.d_ring_dl || !l.d_fill || !l.d_base)
    m2::bad_launch(what, "d_ckpt, d_ring_x, d_ring_B, d_ring_dl, d_fill and d_base must all be set");
  if (l.step.dims.N % 8 != 0) m2::bad_launch(what, "state dim N must be a multiple of 8 (16-byte ring loads of B)");
  if (reinterpret_cast<uintptr_t>(l.d_ring_B) % 16 != 0 || reinterpret_cast<uintptr_t>(l.d_ring_dl) % 8 != 0)
    m2::bad_launch(what, "d_ring_B must be 16-byte aligned, d_ring_dl 8-byte aligned");
  Format streamed;
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
  const int hc = m2::verify_heads_per_cta(l);
  if (hc > 1) {  // serving batches: the prologue once per hc heads (mamba2_verify_grouped.cu)
    m2::verify_grouped(l, hc, stream, describe);
    return;
  }
  const int ptiles = mamba2_p_tiles(l.step.dims, l.step.batch, streamed);
  if (l.step.act_format == Format::BF16)
    m2::dispatch_verify<__nv_bfloat16>(l, ptiles, stream, describe);
  else
    m2::dispatch_verify<float>(l, ptiles, stream, describe);
}

}  // namespace
}  // namespace m2

void mamba2_verify(const Mamba2VerifyLaunch& l, cudaStream_t stream) { m2::verify_checked(l, stream, nullptr); }

KernelFootprint mamba2_verify_footprint(const Mamba2VerifyLaunch& l) {
  KernelFootprint f;  // batch 0: nothing launched, all zero
  m2::verify_checked(l, nullptr, &f);
  return f;
}

void mamba2_eager_verify(const Mamba2EagerVerifyLaunch& l, cudaStream_t stream) {
  const char* what = "mamba2_eager_verify";
  m2::check_step_args(what, l.step);
  if (l.step.batch == 0) return;
  if (l.window < 1 || l.window > kMaxSpecWindow)
    m2::bad_launch(what, "window must be in 1.." + std::to_string(kMaxSpecWindow) + " (got " + std::to_string(l.window) + ")");
  if (l.state_format != Format::FP32 && l.state_format != Format::BF16 && l.state_format != Format::FP16)
    m2::bad_launch(what, "state_format must be fp32, bf16 or fp16 (got " + format_name(l.state_format) + ")");
  if (!l.d_state || !l.d_cur) m2::bad_launch(what, "d_state and d_cur must be set");
  m2::check_state_rows(what, l.step.dims.N, m2::state_vec(l.state_format), l.d_state);
  const int ptiles = mamba2_p_tiles(l.step.dims, l.step.batch, l.state_format);
  if ((l.step.dims.P + ptiles - 1) / ptiles > m2::kEagerVerifyMaxRows)
    m2::bad_launch(what, "a tile of more than " + std::to_string(m2::kEagerVerifyMaxRows) + " rows (head dim P too large)");
  switch (l.state_format) {
    case Format::FP32: m2::dispatch_eager_verify<float>(l, ptiles, stream); break;
    case Format::BF16: m2::dispatch_eager_verify<__nv_bfloat16>(l, ptiles, stream); break;
    default: m2::dispatch_eager_verify<__half>(l, ptiles, stream); break;
  }
}

}  // namespace rssm
