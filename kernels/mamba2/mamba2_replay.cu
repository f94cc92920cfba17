// Mamba-2 replay decode step (mamba2_kernels.h), output-only route of METHOD.md, one launch for all rows:
//   y_t = exp(Λ_t)·(S_c·C_t) + Σ_{j<=t} Δ_j·exp(Λ_t − Λ_j)·(B_j·C_t)·x_j + D·x_t   (·z·sigmoid(z))
// and, on the step that fills a row's ring to `interval`, the flush
//   S_c <- exp(Λ_t)·S_c + Σ_j Δ_j·exp(Λ_t − Λ_j)·x_j ⊗ B_j   (fp32, accumulator starting from the decayed S_c).
// Order of operations follows lib/cpu/replay.cpp (step_mamba2 / flush_mamba2) where it costs nothing: the current
// token enters through its bf16 buffer copy; Λ is the running fp32 sum of A·Δ over the ring; weights are
// Δ_j·exp(Λ_t − Λ_j)·(B_j·C_t); the output adds checkpoint term, ring sum, D·x in that order; flush terms accumulate
// over j in order. Dots and the ring sum are tree/parallel sums (the contract's bounded half). One deliberate
// difference: at a dual flush step the output reads the fp32 update copy the flush streams anyway (the CPU
// emulation reads the read copy), saving a read of the read copy.
//
// Work split: one CTA (128 threads) per (row, head, P-tile), as in the eager kernel. The step is bandwidth work
// behind a chain of small dependent reads (slot -> ring cursor -> ring entries), so the kernel is laid out to keep
// that chain at three memory latencies and to have the state tile in flight underneath it:
//   A  slot; the tile is sent on its way into L2 (prefetch: no registers held; a dual flush row adds the update
//      copy once it knows); the cursor; C_t, B_t, Δ_t and the per-row x, D, gate factor into shared memory.
//   B  every ring read at once: (Δ_e, Λ_e), B_e in 16-byte pieces for the dots B_e·C_t (N/8 lanes per entry, a
//      shuffle tree), and the x_e[p] of the ring sum (several threads per row, entries split between them).
//   C  weights from the dots, the ring sum per row; the flush's x·weight per (row, entry); the token's ring append.
//   D  the stream, from L2, in chunks of a few rows a thread: the rows against C_t (flush: decay, rank-`nent`
//      update from shared memory four entries at a time, store, dual read copy from the same registers).
// Small chunks and a register cap of 64 keep 8 CTAs on an SM (see kReplayMinBlocks). The step is bound by
// instruction issue (ncu: 84% of issue slots used, DRAM at 43%; benchmarks/experiments/README.md), so what matters
// is instructions per state element and warps to issue from; the stream's reductions use reduce_scatter for that.
// Nothing in A-C loops serially over ring entries with a load per iteration, so the step no longer grows with the
// ring fill; the B_j·C_t dots are repeated by the heads of a group, from L2 (4 KiB per CTA at interval 16).
//
// Ring cursor, on the device: d_fill[slot] is read (acquire) by one thread of every CTA of the row, which then
// counts itself on d_arrive[slot]; the CTA that arrives last writes the advanced fill (0 after a flush) and re-zeroes
// d_arrive. The acquire orders each CTA's read before its arrival, so the last arriver writes after every read; the
// arrival's result is first looked at after the prologue's barrier, where the atomic has returned and the fence has
// no output store to wait on (the grouped kernel's 2.6-3.6% at batch 1; here 1-6% on the H100's replay rows:
// benchmarks/experiments/README.md, "The ring cursor's hand-off"). Dual kernels look at it when the CTA ends: held
// through the stream it cost them spills.
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
#include "common/scaled_vec.cuh"
#include "mamba2/mamba2_device.cuh"

namespace rssm {
namespace m2 {

constexpr int kRingRegs = 8;  // ring x values per thread loaded together in phase B (more entries: further rounds)

// Shared memory of one CTA, in floats: C_t, B_t, per-entry dots and weights, per-row scalars of the tile, and for
// the flush its terms' operands: B ([E·F][N]) and x·weight per row ([rows][up4(E·F)], a row's terms as float4), staged
// in the flush arithmetic (numeric/arith.h), F = flush_terms terms per entry (3xtf32: 3, else 1).
struct ReplaySmem {
  int N, E, rows, F;  // E = interval (largest number of entries), rows = tile rows, F = flush terms per entry
  int S;              // 1: a block-scaled dual read copy, whose row scales the non-flush stream reads; else 0
  // Regions start on 16-byte boundaries (float4 reads).
  __host__ __device__ static int up4(int n) { return (n + 3) & ~3; }
  __host__ __device__ int off_C() const { return 0; }
  __host__ __device__ int off_Bt() const { return up4(N); }
  __host__ __device__ int off_dot() const { return 2 * up4(N); }
  __host__ __device__ int off_wf() const { return off_dot() + up4(E); }
  __host__ __device__ int off_ring() const { return off_wf() + up4(E); }  // ring sum per row
  __host__ __device__ int off_dx() const { return off_ring() + up4(rows); }  // D·x_t per row
  __host__ __device__ int off_g() const { return off_dx() + up4(rows); }     // gate factor per row
  __host__ __device__ int off_xb() const { return off_g() + up4(rows); }     // x_t as buffered (bf16 value) per row
  __host__ __device__ int off_xbits() const { return off_xb() + up4(rows); }  // x_t's buffer code (int) per row
  __host__ __device__ int off_Bbits() const { return off_xbits() + up4(rows); }  // B_t's buffer codes (int)
  __host__ __device__ int off_rscale() const { return off_Bbits() + up4(N); }  // read-copy scale per row (S = 1)
  __host__ __device__ int off_B() const { return off_rscale() + S * up4(rows); }
  __host__ __device__ int off_u() const { return off_B() + E * F * up4(N); }
  __host__ __device__ int floats() const { return off_u() + rows * up4(E * F); }
};

// Everything the stream phase needs, per CTA.
struct TileCtx {
  int P, N, h, row, p_begin, p_end, nfold, E4;  // nfold: the flush's terms (entries · F)
  long long ys;
  long long elem0;       // the element index (stochastic rounding) of row 0 of the head at the thread's lane
  SrKey sr_ck, sr_read;  // stochastic rounding of the flush's stores: checkpoint (update copy), dual read copy
  float* rscale;         // a block-scaled read copy's scales of the head's rows (flush: written), else null
  float decay;
  bool y_bf16, gated;
};

__device__ inline void write_out(const Mamba2StepArgs& a, const TileCtx& t, const float* smem, const ReplaySmem& L,
                                 int p, float dot) {
  const int pl = p - t.p_begin;
  float out = t.decay * dot + smem[L.off_ring() + pl];
  out += smem[L.off_dx() + pl];
  if (t.gated) out = out * smem[L.off_g() + pl];  // gate(out, z), its factor computed once per row
  store_y(a.d_y, t.row * t.ys + static_cast<long long>(t.h) * t.P + p, t.y_bf16, out);
}

// The chunk's R row dots (rows p0 + u·rpp + rsub) reduced together with reduce_scatter (row_sum's tree, about R
// shuffles instead of R·log2(lanes): the step is bound by instruction issue) and written by the lanes that end up
// holding them. kLanes: the row's lane count when fixed at compile time (with_lanes), else 0.
// kScaled: the rows are codes of a block-scaled copy, each dot still to be multiplied by its row's scale.
template <int R, int kLanes, bool kScaled = false, class Lay>
__device__ inline void write_scattered(const Mamba2StepArgs& a, const TileCtx& t, const float* smem, const ReplaySmem& L,
                                       const Lay& lay, int p0, float (&acc)[R]) {
  reduce_scatter_each<R, kLanes>(acc, lay.lanes, [&](int i, float dot) {
    const int p = p0 + i * lay.rpp + lay.rsub;
    if (p < t.p_end) write_out(a, t, smem, L, p, kScaled ? dot * smem[L.off_rscale() + p - t.p_begin] : dot);
  });
}

// Non-flush: the tile of `src` (the read copy, or the shared checkpoint) against C_t; the first chunk is in q.
template <class T, int R, int kLanes>
__device__ void stream_read(const Mamba2StepArgs& a, const TileCtx& t, const T* src, const float* smem,
                            const ReplaySmem& L) {
  const TileLayout<T> lay(t.N);
  constexpr int kVec = TileLayout<T>::kVec;
  float Cv[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) Cv[k] = smem[L.off_C() + lay.c * kVec + k];
  for (int p0 = t.p_begin; p0 < t.p_end; p0 += R * lay.rpp) {
    uint4 q[kMaxRows];
    load_chunk<T, R>(q, src, lay, p0, t.p_end, t.N);
    float acc[R];
#pragma unroll
    for (int u = 0; u < R; ++u) {
      float s[kVec];
      StateVec<T>::unpack(q[u], s);
      acc[u] = 0.0f;
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc[u] = fmaf(s[k], Cv[k], acc[u]);
    }
    write_scattered<R, kLanes, kIsScaled8<T>>(a, t, smem, L, lay, p0, acc);
  }
}

// Flush: the tile of the checkpoint (update copy; first chunk in q): output from it, fold the ring in, write it back
// (and the dual read copy, rounded from the same registers). T: checkpoint type; R: read-copy type or void.
// The fold runs over the staged terms in entry order from the decayed checkpoint, as the emulation's flush_head.
// kSR: both stores round stochastically (t.sr_ck, t.sr_read; row p's vector starts at element t.elem0 + p·N).
// A block-scaled read copy (RDT = Scaled8<F>) takes each row's scale from the row's stored update values (a max over
// the row's lanes), then its codes; the lane at the row's first vector stores the scale.
template <class T, class RDT, int R, int kLanes, bool kSR>
__device__ void stream_flush(const Mamba2StepArgs& a, const TileCtx& t, T* ck, RDT* rd, const float* smem,
                             const ReplaySmem& L) {
  const TileLayout<T> lay(t.N);
  constexpr int kVec = TileLayout<T>::kVec;
  float Cv[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) Cv[k] = smem[L.off_C() + lay.c * kVec + k];
  const float* sB = smem + L.off_B() + lay.c * kVec;
  const float* su = smem + L.off_u();
  for (int p0 = t.p_begin; p0 < t.p_end; p0 += R * lay.rpp) {
    uint4 q[kMaxRows];
    load_chunk<T, R>(q, ck, lay, p0, t.p_end, t.N);
    float s[R][kVec], acc[R];
#pragma unroll
    for (int u = 0; u < R; ++u) {
      StateVec<T>::unpack(q[u], s[u]);
      acc[u] = 0.0f;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        acc[u] = fmaf(s[u][k], Cv[k], acc[u]);
        s[u][k] *= t.decay;
      }
    }
    write_scattered<R, kLanes>(a, t, smem, L, lay, p0, acc);
    for (int e0 = 0; e0 < t.nfold; e0 += 4) {  // 4 terms per round: the x·weights of a row as one float4
      float b[4][kVec];
#pragma unroll
      for (int ee = 0; ee < 4; ++ee)
#pragma unroll
        for (int k = 0; k < kVec; k += 4) {
          const float4 v = e0 + ee < t.nfold ? *reinterpret_cast<const float4*>(sB + (e0 + ee) * t.N + k)
                                            : make_float4(0.f, 0.f, 0.f, 0.f);
          b[ee][k] = v.x, b[ee][k + 1] = v.y, b[ee][k + 2] = v.z, b[ee][k + 3] = v.w;
        }
      const int ne = min(4, t.nfold - e0);
#pragma unroll
      for (int u = 0; u < R; ++u) {
        const int pl = min(p0 + u * lay.rpp + lay.rsub, t.p_end - 1) - t.p_begin;  // rows past the tile: dropped
        const float4 uv = *reinterpret_cast<const float4*>(su + pl * t.E4 + e0);
        const float ue[4] = {uv.x, uv.y, uv.z, uv.w};
#pragma unroll
        for (int ee = 0; ee < 4; ++ee)
          if (ee < ne) {  // uniform over the CTA
#pragma unroll
            for (int k = 0; k < kVec; ++k) s[u][k] = fmaf(ue[ee], b[ee][k], s[u][k]);
          }
      }
    }
    T* c0 = chunk_row0(ck, lay, p0, t.N);
    float rs[R];  // block-scaled read copy: the rows' scales, outside the row guard (every lane joins the shuffles)
    if constexpr (kIsScaled8<RDT>) {
#pragma unroll
      for (int u = 0; u < R; ++u) rs[u] = row_block_scale<RDT::kFormat>(s[u], lay.lanes);
    }
#pragma unroll
    for (int u = 0; u < R; ++u) {
      if (p0 + u * lay.rpp + lay.rsub < t.p_end) {
        if constexpr (kSR && sizeof(T) == 2) {
          uint32_t r[kVec];
          random_words<kVec>(t.sr_ck, t.elem0 + static_cast<long long>(p0 + lay.rsub) * t.N + u * kPassElems<T>, r);
          StateVec<T>::store_sr(c0 + u * kPassElems<T>, s[u], r);
        } else {
          StateVec<T>::store(c0 + u * kPassElems<T>, s[u]);
        }
        if constexpr (!std::is_void<RDT>::value) {
          static_assert(kVec == 4, "dual read copies are written from an fp32 update copy");
          if constexpr (kIsScaled8<RDT>) {
            uint32_t r[4] = {0u, 0u, 0u, 0u};
            if constexpr (kSR)
              random_words<4>(t.sr_read, t.elem0 + static_cast<long long>(p0 + lay.rsub) * t.N + u * kPassElems<T>, r);
            store_scaled4<RDT::kFormat, kSR>(chunk_row0(rd, lay, p0, t.N) + u * kPassElems<T>, s[u], rs[u], r);
            if (lay.c == 0) t.rscale[p0 + u * lay.rpp + lay.rsub] = rs[u];
          } else if constexpr (kSR) {
            uint32_t r[4];
            random_words<4>(t.sr_read, t.elem0 + static_cast<long long>(p0 + lay.rsub) * t.N + u * kPassElems<T>, r);
            store_narrow4_sr(chunk_row0(rd, lay, p0, t.N) + u * kPassElems<T>, s[u], r);
          } else {
            store_narrow4(chunk_row0(rd, lay, p0, t.N) + u * kPassElems<T>, s[u]);
          }
        }
      }
    }
  }
}

// CK: checkpoint type (the update copy when dual); RD: read-copy type, void when the checkpoint is shared.
// Occupancy is what the step needs most (timed on the H200, fp32 K16 batch 256 non-flush): the tile in registers
// before the prologue (16 rows a thread, 3 CTAs per SM) 920 us, 8 rows a thread and the tile prefetched into L2
// (4 CTAs) 750 us, 4 rows and a floor of 8 CTAs per SM (64 registers) 468 us (391 us since the reductions were
// cut). More resident warps give the issue-bound step more to choose from each cycle.
constexpr int kReplayMinBlocks = 8;
template <class T> constexpr int kChunkRows = TileLayout<T>::kRows / 4;

// kN: kPresetN or 0 (N at run time, mamba2_device.cuh). kSR: the flush's stores round stochastically (a 16-bit
// checkpoint or read copy), at step d_pos[row] + 1. kArith: the flush arithmetic is l.flush_arith; false: fp32, with
// F = 1 known at compile time (the staging loops and operand switches a run-time arithmetic costs slowed the fp32
// flush 759 -> 813 us on the H200).
template <class A, class CK, class RD, int kN, bool kSR, bool kArith>
__global__ void __launch_bounds__(kThreads, kReplayMinBlocks) mamba2_replay_kernel(Mamba2ReplayLaunch l, int ptiles) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  __shared__ int s_fill;
  const Mamba2StepArgs& a = l.step;
  const int H = a.dims.H, P = a.dims.P, N = kN > 0 ? kN : a.dims.N, G = a.dims.G, hpg = H / G;
  const int per_row = H * ptiles;
  const int row = blockIdx.x / per_row;
  const int h = (blockIdx.x % per_row) / ptiles, tile = blockIdx.x % ptiles;
  const int slot = a.d_slot[row];
  if (slot < 0) return;  // padded row: nothing read or written
  const int g = h / hpg, tid = threadIdx.x;
  const int tile_rows = (P + ptiles - 1) / ptiles;
  const Arith fa = kArith ? l.flush_arith : Arith::FP32;
  const int F = kArith ? flush_terms(fa) : 1;
  constexpr bool kDual = !std::is_void<RD>::value;
  const ReplaySmem L{N, l.interval, tile_rows, F, kIsScaled8<RD> ? 1 : 0};
  const int p_begin = tile * tile_rows, p_end = min(P, p_begin + tile_rows), rows = p_end - p_begin;
  const long long head_off = (static_cast<long long>(slot) * H + h) * P * N;

  // ---- A: the tile on its way into L2, the cursor, this step's inputs ----
  using Src = typename std::conditional<kDual, RD, CK>::type;  // what a non-flush step reads
  const long long tile_off = head_off + static_cast<long long>(p_begin) * N;
  prefetch_l2(static_cast<const Src*>(kDual ? l.d_read : l.d_ckpt) + tile_off, static_cast<long long>(rows) * N * sizeof(Src));
  CK* ck = static_cast<CK*>(l.d_ckpt) + head_off + TileLayout<CK>(N).c * TileLayout<CK>::kVec;
  constexpr int RC = kChunkRows<CK>;

  int arrived = 0;
  if (tid == 0) {  // ring cursor hand-off (see the top of this file)
    int f = ld_acquire(&l.d_fill[slot]);
    arrived = atomicAdd(&l.d_arrive[slot], 1);  // ordered after the read by the acquire; result used a phase later
    s_fill = min(max(f, 0), l.interval - 1);      // a corrupt cursor must not send ring writes out of bounds
  }
  const A* x = static_cast<const A*>(a.d_x) + row * or_default(a.x_stride, static_cast<long long>(H) * P) + h * P;
  const A* dtp = static_cast<const A*>(a.d_dt) + row * or_default(a.dt_stride, H);
  const long long bcs = or_default(a.bc_stride, static_cast<long long>(G) * N);
  const A* Bt = static_cast<const A*>(a.d_B) + row * bcs + g * N;
  const A* Ct = static_cast<const A*>(a.d_C) + row * bcs + g * N;
  const A* z = a.d_z ? static_cast<const A*>(a.d_z) + row * or_default(a.z_stride, static_cast<long long>(H) * P) + h * P
                     : nullptr;
  int* ismem = reinterpret_cast<int*>(smem);  // the codes appended to the ring: no input re-read after the prologue
  for (int n = tid; n < N; n += kThreads) {
    smem[L.off_C() + n] = to_f32(Ct[n]);
    smem[L.off_Bt() + n] = to_buffer_f32(Bt[n]);
    ismem[L.off_Bbits() + n] = to_buffer_bits(Bt[n]);
  }
  for (int p = p_begin + tid; p < p_end; p += kThreads) {
    const int pl = p - p_begin;
    const float xa = to_f32(x[p]);
    smem[L.off_dx() + pl] = (a.d_per_dim ? a.d_D[h * P + p] : a.d_D[h]) * xa;
    smem[L.off_xb() + pl] = to_buffer_f32(x[p]);
    ismem[L.off_xbits() + pl] = to_buffer_bits(x[p]);
    if constexpr (kIsScaled8<RD>) smem[L.off_rscale() + pl] = l.d_read_scale[(static_cast<long long>(slot) * H + h) * P + p];
    if (z) {
      const float zv = to_f32(z[p]);
      smem[L.off_g() + pl] = silu<float>(zv);
    }
  }
  const float delta = delta_of(to_f32(dtp[h]), a.d_dt_bias[h], a.dt_min, a.dt_max);
  const float A_h = -expf(a.d_A_log[h]);
  const int cap = l.capacity;
  const float2* dl = reinterpret_cast<const float2*>(l.d_ring_dl) + static_cast<long long>(slot) * cap * H + h;  // + e·H
  const uint16_t* rx = l.d_ring_x + static_cast<long long>(slot) * cap * H * P + static_cast<long long>(h) * P;  // + e·H·P
  const uint16_t* rB = l.d_ring_B + static_cast<long long>(slot) * cap * G * N + static_cast<long long>(g) * N;  // + e·G·N
  __syncthreads();
  const int j = s_fill;  // the current token's entry
  const bool flush = j + 1 == l.interval;
  const int nent = j + 1;
  // The last CTA of the row advances the cursor. Single checkpoint: here, as the grouped kernel does, so that its fence
  // has no output or ring store of the CTA to wait on. Dual: at the end, where it was; here it held `arrived` and the
  // row's indices through the stream and cost the dual kernels 36 more bytes of spill (ptxas).
  const auto advance_cursor = [&] {
    if (tid == 0 && arrived == per_row - 1) ring_cursor_advance(l, slot, j);
  };
  if constexpr (!kDual) advance_cursor();
  constexpr int RS = kChunkRows<Src>;
  const Src* src = nullptr;
  if constexpr (kDual) {
    if (flush) prefetch_l2(static_cast<const CK*>(l.d_ckpt) + tile_off, static_cast<long long>(rows) * N * sizeof(CK));
    src = static_cast<const Src*>(l.d_read) + head_off + TileLayout<Src>(N).c * TileLayout<Src>::kVec;
  } else {
    src = ck;
  }

  // ---- B: every ring read of the step at once ----
  const float lam_prev = j > 0 ? dl[static_cast<long long>(j - 1) * H].y : 0.0f;
  float2 de = make_float2(0.0f, 0.0f);
  if (tid < j) de = dl[static_cast<long long>(tid) * H];  // entries beyond 128 are read in phase C
  // The ring sum's x_e[p]: tpr threads per row (a power of two, within a warp), entries e = sub, sub + tpr, ...
  int tpr = 1;
  while (tpr < 32 && 2 * tpr * rows <= kThreads) tpr *= 2;
  const int rsub = tid / tpr, sub = tid % tpr;
  const int xp = p_begin + rsub;  // this thread's first row (rows beyond kThreads / tpr: further rounds in C)
  float xr[kRingRegs];
#pragma unroll
  for (int u = 0; u < kRingRegs; ++u) {
    const int e = sub + u * tpr;
    xr[u] = (xp < p_end && e < j) ? bf16_bits_to_float(rx[static_cast<long long>(e) * H * P + xp]) : 0.0f;
  }
  // The dots B_e·C_t: item i = e·c8 + k covers B_e[8k .. 8k+7]; c8 = N/8 is a power of two <= 32, so an entry's
  // items are consecutive lanes of one warp. Entry j is B_t (its buffered copy).
  const int c8 = N / 8, c8_log = __ffs(c8) - 1, items = nent * c8;
  for (int i0 = 0; i0 < items; i0 += 2 * kThreads) {  // uniform over the CTA: every lane reaches the shuffles
    float acc[2] = {0.0f, 0.0f};
    uint4 raw[2];
#pragma unroll
    for (int v = 0; v < 2; ++v) {
      const int i = i0 + v * kThreads + tid, e = i >> c8_log, k = i & (c8 - 1);
      raw[v] = (i < items && e < j) ? *reinterpret_cast<const uint4*>(rB + static_cast<long long>(e) * G * N + 8 * k)
                                    : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int v = 0; v < 2; ++v) {
      const int i = i0 + v * kThreads + tid, e = i >> c8_log, k = i & (c8 - 1);
      if (i < items) {
        float b[8];
        if (e < j) {
          bf16x8_to_f32(raw[v], b);
        } else {
#pragma unroll
          for (int m = 0; m < 8; ++m) b[m] = smem[L.off_Bt() + 8 * k + m];
        }
#pragma unroll
        for (int m = 0; m < 8; ++m) acc[v] = fmaf(b[m], smem[L.off_C() + 8 * k + m], acc[v]);
        if (flush) {  // entry e's terms: rows e·F .. e·F + F − 1 of the staged B
          for (int r = 0; r < F; ++r) {
            float o[8];
#pragma unroll
            for (int m = 0; m < 8; ++m) o[m] = flush_operand_b(fa, b[m], r);
            float4* dst = reinterpret_cast<float4*>(smem + L.off_B() + (e * F + r) * N + 8 * k);
            dst[0] = make_float4(o[0], o[1], o[2], o[3]);
            dst[1] = make_float4(o[4], o[5], o[6], o[7]);
          }
        }
      }
      acc[v] = row_sum(acc[v], c8);
      if (i < items && k == 0) smem[L.off_dot() + e] = acc[v];
    }
  }
  const float lam_t = lam_prev + A_h * delta;
  for (int e = tid; e < nent; e += kThreads) {
    if (e >= kThreads) de = e < j ? dl[static_cast<long long>(e) * H] : make_float2(0.0f, 0.0f);
    if (e == j) de = make_float2(delta, lam_t);
    smem[L.off_wf() + e] = de.x * expf(lam_t - de.y);
  }
  __syncthreads();

  // ---- C: ring sum per row, the flush's x·weight per (row, entry), this token's ring append ----
  const int E4 = ReplaySmem::up4(l.interval * F);
  for (int p = xp, round = 0; round * (kThreads / tpr) < rows; ++round, p += kThreads / tpr) {
    float acc = 0.0f;
    const bool live = p < p_end;
    const float xt = live ? smem[L.off_xb() + p - p_begin] : 0.0f;
    for (int e0 = 0; e0 < nent; e0 += kRingRegs * tpr) {
#pragma unroll
      for (int u = 0; u < kRingRegs; ++u) {
        const int e = e0 + sub + u * tpr;
        if (e >= nent) break;
        float xe;
        if (e == j) xe = xt;
        else if (round == 0 && e0 == 0) xe = xr[u];
        else xe = live ? bf16_bits_to_float(rx[static_cast<long long>(e) * H * P + p]) : 0.0f;
        const float wf = smem[L.off_wf() + e];
        acc = fmaf(wf * smem[L.off_dot() + e], xe, acc);
        if (flush && live)
          for (int r = 0; r < F; ++r)
            smem[L.off_u() + (p - p_begin) * E4 + e * F + r] = flush_operand_a(fa, wf * xe, r);
      }
    }
    acc = row_sum(acc, tpr);
    if (live && sub == 0) {
      smem[L.off_ring() + p - p_begin] = acc;
      if (!flush) l.d_ring_x[static_cast<long long>(slot) * cap * H * P + (static_cast<long long>(j) * H + h) * P + p] =
          static_cast<uint16_t>(ismem[L.off_xbits() + p - p_begin]);
    }
  }
  if (!flush) {
    if (tile == 0 && h % hpg == 0)
      for (int n = tid; n < N; n += kThreads)
        l.d_ring_B[static_cast<long long>(slot) * cap * G * N + (static_cast<long long>(j) * G + g) * N + n] =
            static_cast<uint16_t>(ismem[L.off_Bbits() + n]);
    if (tile == 0 && tid == 0)
      reinterpret_cast<float2*>(l.d_ring_dl)[static_cast<long long>(slot) * cap * H + static_cast<long long>(j) * H + h] =
          make_float2(delta, lam_t);
  }
  __syncthreads();

  // ---- D: the stream ----
  TileCtx t;
  t.P = P, t.N = N, t.h = h, t.row = row, t.p_begin = p_begin, t.p_end = p_end, t.nfold = nent * F, t.E4 = E4;
  t.ys = or_default(a.y_stride, static_cast<long long>(H) * P);
  if constexpr (kSR) {
    t.elem0 = head_off + TileLayout<CK>(N).c * TileLayout<CK>::kVec;
    const long long folded = static_cast<long long>(a.d_pos[row]) + 1;  // tokens in the checkpoint after the flush
    t.sr_ck = SrKey{a.seed, RandomStream::CheckpointUpdate, folded};
    t.sr_read = SrKey{a.seed, RandomStream::CheckpointRead, folded};
  }
  t.rscale = kIsScaled8<RD> ? l.d_read_scale + (static_cast<long long>(slot) * H + h) * P : nullptr;
  t.decay = expf(lam_t);
  t.y_bf16 = a.y_format == Format::BF16;
  t.gated = z != nullptr;
  if (!flush) {
    stream_read<Src, RS, kLanes<Src, kN>>(a, t, src, smem, L);
  } else if constexpr (kDual) {
    RD* rd = static_cast<RD*>(l.d_read) + head_off + TileLayout<CK>(N).c * TileLayout<CK>::kVec;
    stream_flush<CK, RD, RC, kLanes<CK, kN>, kSR>(a, t, ck, rd, smem, L);
  } else {
    stream_flush<CK, void, RC, kLanes<CK, kN>, kSR>(a, t, ck, nullptr, smem, L);
  }
  if constexpr (kDual) advance_cursor();
}

template <class A, class CK, class RD>
void launch_replay(const Mamba2ReplayLaunch& l, int ptiles, cudaStream_t stream) {
  const long long blocks = static_cast<long long>(l.step.batch) * l.step.dims.H * ptiles;
  if (blocks > 0x7FFFFFFFLL) bad_launch("mamba2_replay_step", "batch · H · tiles exceeds the grid limit");
  const ReplaySmem L{l.step.dims.N, l.interval, (l.step.dims.P + ptiles - 1) / ptiles, flush_terms(l.flush_arith),
                     kIsScaled8<RD> ? 1 : 0};
  const size_t bytes = static_cast<size_t>(L.floats()) * sizeof(float);
  if (bytes > 227 * 1024)
    bad_launch("mamba2_replay_step", "needs " + std::to_string(bytes) + " bytes of shared memory (over 227 KiB): lower "
               "the interval, or a flush_arith other than 3xtf32 (three staged terms per entry)");
  auto kernel = l.step.dims.N == kPresetN ? mamba2_replay_kernel<A, CK, RD, kPresetN, false, false>
                                          : mamba2_replay_kernel<A, CK, RD, 0, false, false>;
  // A flush arithmetic other than fp32, and stochastic rounding where a 16-bit copy is stored (an fp32 checkpoint
  // stores without rounding): kernels for any N (their speed is not what such runs measure, and each instantiation
  // costs build time).
  const bool arith = l.flush_arith != Arith::FP32;
  if (arith) kernel = mamba2_replay_kernel<A, CK, RD, 0, false, true>;
  if constexpr (sizeof(CK) == 2 || !std::is_void<RD>::value) {
    if (l.step.rounding == Rounding::Stochastic)
      kernel = arith ? mamba2_replay_kernel<A, CK, RD, 0, true, true> : mamba2_replay_kernel<A, CK, RD, 0, true, false>;
  }

  if (bytes > 48 * 1024) {  // above the default dynamic limit; a cheap attribute set, no synchronisation
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  }
  kernel<<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(l, ptiles);
  CUDA_CHECK_LAUNCH(stream);
}

template <class A>
void dispatch_state(const Mamba2ReplayLaunch& l, int ptiles, cudaStream_t stream) {
  if (l.dual && is_scaled_format(l.read_format)) {  // variant 0 only: not in with_checkpoint_types' list
    if (l.read_format == Format::E4M3) return launch_replay<A, float, Scaled8<Format::E4M3>>(l, ptiles, stream);
    if (l.read_format == Format::E5M2) return launch_replay<A, float, Scaled8<Format::E5M2>>(l, ptiles, stream);
    return launch_replay<A, float, Scaled8<Format::INT8>>(l, ptiles, stream);
  }
  with_checkpoint_types(l.dual, l.ckpt_format, l.read_format, [&](auto ck, auto rd) {
    launch_replay<A, typename decltype(ck)::type, typename decltype(rd)::type>(l, ptiles, stream);
  });
}

}  // namespace m2

void mamba2_replay_step(const Mamba2ReplayLaunch& l, cudaStream_t stream) {
  const char* what = "mamba2_replay_step";
  m2::check_step_args(what, l.step, l.variant == 0);
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
    const bool scaled = is_scaled_format(l.read_format);
    if (l.read_format != Format::BF16 && l.read_format != Format::FP16 && !scaled)
      m2::bad_launch(what, "read_format must be bf16, fp16, e4m3, e5m2 or int8 (got " + format_name(l.read_format) + ")");
    if (!l.d_read) m2::bad_launch(what, "d_read must be set for a dual checkpoint");
    if (scaled && l.variant != 0)
      m2::bad_launch(what, "a " + format_name(l.read_format) + " read copy runs in variant 0 only (got variant " +
                               std::to_string(l.variant) + ")");
    if (scaled && (!l.d_read_scale || reinterpret_cast<uintptr_t>(l.d_read_scale) % 4 != 0))
      m2::bad_launch(what, "d_read_scale must be set (4-byte aligned) for a " + format_name(l.read_format) + " read copy");
    m2::check_state_rows(what, l.step.dims.N, m2::state_vec(l.read_format), l.d_read);
    streamed = l.read_format;
  } else {
    if (l.ckpt_format != Format::FP32 && l.ckpt_format != Format::BF16 && l.ckpt_format != Format::FP16)
      m2::bad_launch(what, "ckpt_format must be fp32, bf16 or fp16 (got " + format_name(l.ckpt_format) + ")");
    streamed = l.ckpt_format;
  }
  m2::check_state_rows(what, l.step.dims.N, m2::state_vec(l.ckpt_format), l.d_ckpt);
  if (l.variant < 0 || l.variant > 2) m2::bad_launch(what, "variant must be 0, 1 or 2 (got " + std::to_string(l.variant) + ")");
  if (l.flush_arith != Arith::FP32 && l.flush_arith != Arith::TF32 && l.flush_arith != Arith::TF32x3 &&
      l.flush_arith != Arith::BF16)
    m2::bad_launch(what, "flush_arith must be fp32, tf32, 3xtf32 or bf16 (got " + arith_name(l.flush_arith) + ")");
  if (l.flush_arith != Arith::FP32 && l.variant != 0)
    m2::bad_launch(what, "flush_arith " + arith_name(l.flush_arith) + " runs in variant 0 only (variants 1 and 2 flush in "
                         "fp32; got variant " + std::to_string(l.variant) + ")");
  if (l.variant == 1) return m2::replay_grouped(l, streamed, stream);
  if (l.variant == 2) return m2::replay_pipelined(l, stream);
  const int ptiles = mamba2_p_tiles(l.step.dims, l.step.batch, streamed);
  if (l.step.act_format == Format::BF16)
    m2::dispatch_state<__nv_bfloat16>(l, ptiles, stream);
  else
    m2::dispatch_state<float>(l, ptiles, stream);
}

// Explicit instantiations: activations bf16 / fp32 × checkpoint fp32, bf16, fp16 shared or fp32 + bf16 / fp16 /
// e4m3 / e5m2 / int8 dual.
namespace m2 {
#define RSSM_REPLAY_INST(A)                                                               \
  template void launch_replay<A, float, void>(const Mamba2ReplayLaunch&, int, cudaStream_t);          \
  template void launch_replay<A, __nv_bfloat16, void>(const Mamba2ReplayLaunch&, int, cudaStream_t);  \
  template void launch_replay<A, __half, void>(const Mamba2ReplayLaunch&, int, cudaStream_t);         \
  template void launch_replay<A, float, __nv_bfloat16>(const Mamba2ReplayLaunch&, int, cudaStream_t); \
  template void launch_replay<A, float, __half>(const Mamba2ReplayLaunch&, int, cudaStream_t);         \
  template void launch_replay<A, float, Scaled8<Format::E4M3>>(const Mamba2ReplayLaunch&, int, cudaStream_t); \
  template void launch_replay<A, float, Scaled8<Format::E5M2>>(const Mamba2ReplayLaunch&, int, cudaStream_t); \
  template void launch_replay<A, float, Scaled8<Format::INT8>>(const Mamba2ReplayLaunch&, int, cudaStream_t);
RSSM_REPLAY_INST(__nv_bfloat16)
RSSM_REPLAY_INST(float)
#undef RSSM_REPLAY_INST
}  // namespace m2

}  // namespace rssm
