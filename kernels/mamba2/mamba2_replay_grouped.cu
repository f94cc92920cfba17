// Mamba-2 replay decode step, grouped variant (Mamba2ReplayLaunch::variant = 1): the same step as mamba2_replay.cu
// (same formulas, ring layout, cursor protocol, dual copies, padded rows, rounding; its header comment has them),
// with another work split. One CTA per (row, group, chunk of hc heads of the group[, P-tile when hc = 1]):
//   A  slot; head 0's tile on its way into L2; the cursor; C_t, B_t, and per (head, row) pair D·x, gate, x_t.
//   B  once per CTA: the B_e·C_t dots (shared by every head of the group), each head's (Δ_e, Λ_e) and weights
//      Δ_e·exp(Λ_t − Λ_e), the ring sum of every (head, row) pair from 16-byte loads of the ring's x entries (the
//      group's heads are contiguous in the ring), the token's ring append.
//   D  the hc heads' tiles streamed back to back, register double-buffered (the next chunk's loads are issued
//      before the current chunk is reduced, across head boundaries) and the next head's tile prefetched into L2,
//      so the memory pipe does not drain between heads. A flushing row folds the ring into each head's tile in
//      turn (its x·weights per head in shared memory, computed just before that head's stream); on a 16-bit
//      checkpoint at N = 128 on tensor cores (grouped_flush_head_mma, common/mma_fold.cuh).
// Why: the one-CTA-per-head kernel pays the slot -> cursor -> ring chain of dependent reads once per head and
// needed 8 resident CTAs per SM to hide it; here it is paid once per hc heads, so fewer, longer-lived CTAs
// (4 per SM, 128 registers, no spills) keep the bandwidth busy. Shape (grouped_shape): hc = 16 at batch 256 and
// H = 128 (2048 CTAs), 4 at batch 64; at batch 1 one head per CTA in 4 P-tiles (512 CTAs, a single wave).
// Shared memory at Super-120B, hc = 16: 27 KiB at interval 16, 40 KiB at 32 (4 CTAs per SM either way).
// Small batches (split heads: hc = 1, P-tiles > 1) run kSmall: the ring's B codes, (Δ, Λ) and this tile's x codes
// of entries 0 .. interval − 2 are copied into shared memory (cp.async) right after the slot, beside the cursor
// read, instead of after it: the fill is at most interval − 1, so this is every entry the step can use. There every
// CTA is a chain of dependent latencies (slot -> cursor -> ring -> dots -> ring sum -> state), so the chain loses
// two memory latencies; the bytes of entries at or past the fill are read and not used (a few KiB a CTA). Its ring
// sum spreads each pair's entries over several lanes (16 pairs a CTA at batch 1: 8 lanes each).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "common/cuda_check.h"
#include "common/device_query.h"
#include "common/mma_fold.cuh"
#include "common/pipeline.cuh"
#include "mamba2/mamba2_device.cuh"
#include "numeric/scaled.h"

namespace rssm {
namespace m2 {

constexpr int kGroupedMinBlocks = 4;   // CTAs per SM the register cap (128) allows
constexpr int kPairVec = 8;            // (head, row) pairs per thread: one 16-byte ring load of bf16 x per entry
constexpr int kMaxPairs = kThreads * kPairVec;
constexpr int kXRound = 8;             // ring entries whose x loads are in flight together
constexpr int kDlRound = 4;            // (head, entry) items of (Δ, Λ) loaded together per thread
constexpr int kReadRows = 8;           // non-flush stream: state rows per thread per chunk (two chunks in flight:
                                       // 256 bytes a thread). With 4, an ncu profile of an earlier session (not
                                       // kept) showed it latency-bound at 0.3 issues per cycle; 8 took fp32 K16
                                       // amortised 345.5 -> 335.4 us (benchmarks/runs/mamba2-bench.*.h200.json)
constexpr int kStreamRows = 4;         // 16-bit flush: rows per thread per chunk (next chunk's loads in flight)
constexpr int kFlushRows32 = 2;        // fp32 flush: rows per thread per chunk (4 spill under the 128 cap)
constexpr int kMaxGroupHeads = 16;     // heads per CTA: per-pair arrays and weights in shared memory

// Shared memory in floats. Pairs q = hl·rows + pl, hl < hc, pl < rows.
struct GroupedSmem {
  int N, E, hc, rows;
  int spec = 0;  // kSmall: ring entries read ahead of the cursor (interval − 1), else 0
  __host__ __device__ static int up4(int n) { return (n + 3) & ~3; }
  __host__ __device__ int E4() const { return up4(E); }
  __host__ __device__ int np() const { return hc * rows; }
  __host__ __device__ int off_C() const { return 0; }
  __host__ __device__ int off_Bt() const { return up4(N); }
  __host__ __device__ int off_Bbits() const { return 2 * up4(N); }
  __host__ __device__ int off_dot() const { return 3 * up4(N); }
  __host__ __device__ int off_delta() const { return off_dot() + E4(); }     // Δ_t per head
  __host__ __device__ int off_A() const { return off_delta() + up4(hc); }    // A per head
  __host__ __device__ int off_decay() const { return off_A() + up4(hc); }    // exp(Λ_t) per head
  __host__ __device__ int off_wf() const { return off_decay() + up4(hc); }   // [hc][E4] Δ_e·exp(Λ_t − Λ_e)
  __host__ __device__ int off_ring() const { return off_wf() + hc * E4(); }  // ring sum per pair
  __host__ __device__ int off_dx() const { return off_ring() + up4(np()); }  // D·x_t per pair
  __host__ __device__ int off_g() const { return off_dx() + up4(np()); }     // gate factor per pair
  __host__ __device__ int off_dq() const { return off_g() + up4(np()); }     // exp(Λ_t) of the pair's head
  __host__ __device__ int off_B() const { return off_dq() + up4(np()); }     // flush: [E][N] B_e fp32
  __host__ __device__ int off_u() const { return off_B() + E * up4(N); }     // flush: [rows][E4] x·weight, one head
  __host__ __device__ int rows8() const { return (rows + 7) & ~7; }
  __host__ __device__ int off_sB() const { return off_u() + rows * E4(); }   // kSmall: [spec][N] ring B codes
  __host__ __device__ int off_sdl() const { return off_sB() + spec * N / 2; } // kSmall: [spec] ring (Δ, Λ), hc = 1
  __host__ __device__ int off_sx() const { return off_sdl() + up4(2 * spec); } // kSmall: [spec][rows8] ring x codes
  // The tensor-core flush (N = 128, not kSmall: grouped_flush_head_mma) stages its operands over the B_e and x·weight
  // regions instead, in common/mma_fold.cuh's fragment order; k-steps of 16 over the interval's entries.
  __host__ __device__ int mma_ks() const { return (E + 15) / 16; }
  __host__ __device__ int off_mma_a() const { return off_B(); }
  __host__ __device__ int off_mma_b() const { return off_B() + mma_a_floats(mma_ks()); }
  __host__ __device__ int floats() const {
    const int fma = off_sx() + spec * rows8() / 2, mma = off_mma_b() + mma_b_floats(mma_ks(), rows);
    return fma > mma ? fma : mma;
  }
};

// Split heads (one head per CTA in several P-tiles: the small-batch shape) read the ring ahead of the cursor.
inline bool grouped_small(int hc, int ptiles) { return hc == 1 && ptiles > 1; }

inline GroupedSmem grouped_smem(const Mamba2Dims& d, int interval, int hc, int ptiles) {
  return GroupedSmem{d.N, interval, hc, (d.P + ptiles - 1) / ptiles, grouped_small(hc, ptiles) ? interval - 1 : 0};
}

// What the stream phase needs.
struct GroupedCtx {
  int H, P, N, h0, hc, row, p_begin, p_end, rows, nent;
  long long slot_off, pair_base;  // the slot's first element in a [pool, H, P, N] copy; pair 0 = (h0, p_begin)
  long long y0;                   // y index of pair 0
  bool y_bf16, gated;
  int flush_l2_ahead;  // Mamba2ReplayLaunch's where the kernel has the window (kRoll) and hc > 1, else -1 (whole heads)
};

// The output of pair q (pairs are contiguous in y as in the state: y index = row·ys + pair_base + q).
__device__ inline void out_pair(const Mamba2StepArgs& a, const GroupedCtx& t, const float* smem, const GroupedSmem& L,
                                int q, float dot) {
  float out = smem[L.off_dq() + q] * dot + smem[L.off_ring() + q];
  out += smem[L.off_dx() + q];
  if (t.gated) out = out * smem[L.off_g() + q];
  store_y(a.d_y, t.y0 + q, t.y_bf16, out);
}

// The chunk's R pair dots reduced together (reduce_scatter: row_sum's tree with about R shuffles) and written by the
// lanes holding them. kLanes: the row's lane count when fixed at compile time (with_lanes), else 0.
template <int R, int kLanes, class Lay>
__device__ inline void write_scattered(const Mamba2StepArgs& a, const GroupedCtx& t, const float* smem,
                                       const GroupedSmem& L, const Lay& lay, int q0, int q_end, float (&acc)[R]) {
  reduce_scatter_each<R, kLanes>(acc, lay.lanes, [&](int i, float dot) {
    const int q = q0 + i * lay.rpp + lay.rsub;
    if (q < q_end) out_pair(a, t, smem, L, q, dot);
  });
}

// Non-flush: every head's tile against C_t, as one run of hc·rows pairs (contiguous in the copy), two chunks in
// flight; the next head's tile is prefetched into L2 when the stream enters a head.
template <class T, int kLanes>
__device__ void grouped_read(const Mamba2StepArgs& a, const GroupedCtx& t, const T* src, const float* smem,
                             const GroupedSmem& L) {
  constexpr int R = kReadRows;
  const TileLayout<T> lay(t.N);
  constexpr int kVec = TileLayout<T>::kVec;
  float Cv[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) Cv[k] = smem[L.off_C() + lay.c * kVec + k];
  const T* run = src + t.slot_off + t.pair_base * t.N;
  const T* base = run + lay.c * kVec;
  const int span = R * lay.rpp, np = t.hc * t.rows;
  const long long head_elems = static_cast<long long>(t.rows) * t.N;
  int next_head = t.rows;  // the first pair of the next head: its tile goes into L2 once the stream reaches this one
  auto consume = [&](const uint4 (&q)[R], int q0) {
    float acc[R];
#pragma unroll
    for (int u = 0; u < R; ++u) {
      float s[kVec];
      StateVec<T>::unpack(q[u], s);
      acc[u] = 0.0f;
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc[u] = fmaf(s[k], Cv[k], acc[u]);
    }
    write_scattered<R, kLanes>(a, t, smem, L, lay, q0, np, acc);
  };
  auto issue = [&](uint4 (&q)[R], int q0) {
    if (q0 + span > next_head - t.rows && next_head < np) {  // uniform: the chunk reaches into head next_head/rows − 1
      prefetch_l2(run + next_head * static_cast<long long>(t.N), head_elems * sizeof(T));
      next_head += t.rows;
    }
    load_rows<T, R>(q, base, lay, np, q0, t.N);
  };
  uint4 qa[R], qb[R];
  issue(qa, 0);
  for (int q0 = 0; q0 < np; q0 += 2 * span) {
    if (q0 + span < np) issue(qb, q0 + span);
    consume(qa, q0);
    if (q0 + 2 * span < np) issue(qa, q0 + 2 * span);
    if (q0 + span < np) consume(qb, q0 + span);
  }
}

// Flush of head hl: output from the update copy, fold the ring in (x·weights in smem u, B_e in smem B), store
// (and the dual read copy from the same registers). Same arithmetic order as mamba2_replay.cu's stream_flush.
// kE > 0 (fp32 update copy, the flush's entry count kE = interval, fixed at compile time): the thread's kVec
// columns of every B_e sit in registers for the whole head, so the fold reads only the (row, entry) weights from
// shared memory (one broadcast per row and 4 entries). B_e read per 4-entry block and reused over the R = 2 rows
// of a chunk cost 4 shared-memory wavefronts per entry and warp; without them the fp32 K16 flush at batch 256 went
// 848.5 -> 805.8 us, and it is now bound by load latency (benchmarks/experiments/README.md, "the flush's fold").
// kRoll: the kernel has the rolling L2 window (Mamba2ReplayLaunch::flush_l2_ahead; serving shapes at N = 128): chunk
// c + flush_l2_ahead + 1 of the CTA's run of heads on its way into L2 as the fold reaches chunk c, across the head's
// end. Compiled out elsewhere, where its registers made the generic-N and split-head kernels spill.
template <class T, class RDT, int kLanes, int kE = 0, bool kRoll = false>
__device__ void grouped_flush_head(const Mamba2StepArgs& a, const GroupedCtx& t, int hl, T* ck, RDT* rd,
                                   const float* smem, const GroupedSmem& L) {
  constexpr int R = sizeof(T) == 4 ? kFlushRows32 : kStreamRows;
  const TileLayout<T> lay(t.N);
  constexpr int kVec = TileLayout<T>::kVec;
  const int E4 = L.E4();
  float Cv[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) Cv[k] = smem[L.off_C() + lay.c * kVec + k];
  const float decay = smem[L.off_decay() + hl];
  const float* sB = smem + L.off_B() + lay.c * kVec;
  const float* su = smem + L.off_u();
  const long long run = t.slot_off + t.pair_base * t.N + lay.c * kVec;  // pair 0 at the thread's lane
  const int qh = hl * t.rows, q_end = qh + t.rows;                       // this head's pairs
  const int span = R * lay.rpp;
  static_assert(kE == 0 || (kVec == 4 && kE % 4 == 0), "register B: fp32 update copy, whole float4 weight loads");
  float breg[kE > 0 ? kE : 1][kVec];
  if constexpr (kE > 0) {
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      const float4 v = *reinterpret_cast<const float4*>(sB + e * t.N);
      breg[e][0] = v.x, breg[e][1] = v.y, breg[e][2] = v.z, breg[e][3] = v.w;
    }
  }
  uint4 qn[R];  // the next chunk's loads are issued before this chunk's fold: one chunk always in flight
  load_rows<T, R>(qn, ck + run, lay, q_end, qh, t.N);
  for (int q0 = qh; q0 < q_end; q0 += span) {
    uint4 q[R];
#pragma unroll
    for (int u = 0; u < R; ++u) q[u] = qn[u];
    if (q0 + span < q_end) load_rows<T, R>(qn, ck + run, lay, q_end, q0 + span, t.N);
    if constexpr (kRoll) {
      const int qp = q0 + (t.flush_l2_ahead + 1) * span, np = t.hc * t.rows;
      if (t.flush_l2_ahead >= 0 && qp < np)
        prefetch_l2(ck + t.slot_off + (t.pair_base + qp) * t.N, static_cast<long long>(min(span, np - qp)) * t.N * sizeof(T));
    }
    float s[R][kVec], acc[R];
#pragma unroll
    for (int u = 0; u < R; ++u) {
      StateVec<T>::unpack(q[u], s[u]);
      acc[u] = 0.0f;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        acc[u] = fmaf(s[u][k], Cv[k], acc[u]);
        s[u][k] *= decay;
      }
    }
    write_scattered<R, kLanes>(a, t, smem, L, lay, q0, q_end, acc);
    if constexpr (kE > 0) {  // the same fmaf chain per element as below: bit-identical by construction
#pragma unroll
      for (int u = 0; u < R; ++u) {
        const float* ur = su + (min(q0 + u * lay.rpp + lay.rsub, q_end - 1) - qh) * E4;
#pragma unroll
        for (int e0 = 0; e0 < kE; e0 += 4) {
          const float4 uv = *reinterpret_cast<const float4*>(ur + e0);
          const float ue[4] = {uv.x, uv.y, uv.z, uv.w};
#pragma unroll
          for (int ee = 0; ee < 4; ++ee)
#pragma unroll
            for (int k = 0; k < kVec; ++k) s[u][k] = fmaf(ue[ee], breg[e0 + ee][k], s[u][k]);
        }
      }
    }
    for (int e0 = 0; kE == 0 && e0 < t.nent; e0 += 4) {
      float b[4][kVec];
#pragma unroll
      for (int ee = 0; ee < 4; ++ee)
#pragma unroll
        for (int k = 0; k < kVec; k += 4) {
          const float4 v = e0 + ee < t.nent ? *reinterpret_cast<const float4*>(sB + (e0 + ee) * t.N + k)
                                            : make_float4(0.f, 0.f, 0.f, 0.f);
          b[ee][k] = v.x, b[ee][k + 1] = v.y, b[ee][k + 2] = v.z, b[ee][k + 3] = v.w;
        }
      const int ne = min(4, t.nent - e0);
#pragma unroll
      for (int u = 0; u < R; ++u) {
        const int pl = min(q0 + u * lay.rpp + lay.rsub, q_end - 1) - qh;
        const float4 uv = *reinterpret_cast<const float4*>(su + pl * E4 + e0);
        const float ue[4] = {uv.x, uv.y, uv.z, uv.w};
#pragma unroll
        for (int ee = 0; ee < 4; ++ee)
          if (ee < ne) {
#pragma unroll
            for (int k = 0; k < kVec; ++k) s[u][k] = fmaf(ue[ee], b[ee][k], s[u][k]);
          }
      }
    }
    T* c0 = chunk_row0(ck + run, lay, q0, t.N);
#pragma unroll
    for (int u = 0; u < R; ++u) {
      if (q0 + u * lay.rpp + lay.rsub < q_end) {
        StateVec<T>::store(c0 + u * kPassElems<T>, s[u]);
        if constexpr (!std::is_void<RDT>::value) {
          static_assert(kVec == 4, "dual read copies are written from an fp32 update copy");
          store_narrow4(chunk_row0(rd + run, lay, q0, t.N) + u * kPassElems<T>, s[u]);
        }
      }
    }
  }
}

__device__ inline float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ inline float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

// Flush of head hl on tensor cores (N = 128; common/mma_fold.cuh): the same step as grouped_flush_head, the fold's
// order the tensor core's (fp32 sums, exact products: docs/fp_contract.md's bounded half). Each warp takes 8-row
// blocks of the head: loads them, their dots with C_t (the outputs, from the update copy as above), decays, folds
// every entry (the current token's included: its x and B are known before the step) from the staged operands, stores.
// ks: k-steps staged. The FFMA fold issued per state element and entry an FFMA and a share of a weight load; the
// fp32 K16 flush at batch 256 was bound by load latency at 16 warps per SM (benchmarks/experiments/README.md).
template <class T, class RDT>
__device__ void grouped_flush_head_mma(const Mamba2StepArgs& a, const GroupedCtx& t, int hl, T* ck, RDT* rd,
                                       const float* smem, const GroupedSmem& L, int ks) {
  constexpr int kV = StateVec<T>::kVec, kQ = 16 / kV;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  const uint4* A = reinterpret_cast<const uint4*>(smem + L.off_mma_a()) + lane;
  const uint2* B = reinterpret_cast<const uint2*>(smem + L.off_mma_b());
  const float decay = smem[L.off_decay() + hl];
  const int qh = hl * t.rows;
  const long long head = t.slot_off + (t.pair_base + qh) * kMmaCols;  // row pl of the head: head + pl·N
  for (int nb = warp; nb < (t.rows + 7) / 8; nb += kThreads / 32) {
    const int il0 = nb * 8 + 2 * tig;
    float acc[2][16];
    mma_load_block<T>(acc, ck, head, il0, t.rows, g);
    float d[2] = {0.0f, 0.0f};
#pragma unroll
    for (int q = 0; q < kQ; ++q)
#pragma unroll
      for (int e = 0; e < kV; ++e) {
        const float c = smem[L.off_C() + mma_col(kV, g, q * kV) + e];
        d[0] = fmaf(acc[0][q * kV + e], c, d[0]);
        d[1] = fmaf(acc[1][q * kV + e], c, d[1]);
      }
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) d[0] += __shfl_xor_sync(0xFFFFFFFFu, d[0], o), d[1] += __shfl_xor_sync(0xFFFFFFFFu, d[1], o);
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if (g == 0 && il0 + r < t.rows) out_pair(a, t, smem, L, qh + il0 + r, d[r]);
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int c = 0; c < 16; ++c) acc[r][c] *= decay;
    mma_fold_block(acc, A, B, nb, ks, g, tig);
    mma_store_block<T, RDT>(acc, ck, rd, head, il0, t.rows, g);
  }
}

// kN: kPresetN or 0 (N at run time, mamba2_device.cuh). kSmall: grouped_small's shape (the header comment).
template <class A, class CK, class RD, int kN, bool kSmall>
__global__ void __launch_bounds__(kThreads, kGroupedMinBlocks)
    mamba2_replay_grouped_kernel(Mamba2ReplayLaunch l, int hc, int ptiles) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  int* ismem = reinterpret_cast<int*>(smem);
  __shared__ int s_fill;
  const Mamba2StepArgs& a = l.step;
  const int H = a.dims.H, P = a.dims.P, N = kN > 0 ? kN : a.dims.N, G = a.dims.G, hpg = H / G, chunks = hpg / hc;
  const int per_row = G * chunks * ptiles;
  const int row = blockIdx.x / per_row, in_row = blockIdx.x % per_row;
  const int g = in_row / (chunks * ptiles), chunk = in_row % (chunks * ptiles) / ptiles, tile = in_row % ptiles;
  // The slot's read is issued first and waited on only after the row's inputs (x, dt, B_t, C_t, z: indexed by the row,
  // not the slot) are loaded and staged (kInputsLate below excepted): otherwise thread 0 reads the cursor (an acquire)
  // between the two and issues its inputs a memory latency later, a third link in the chain before the first barrier.
  // A padded row reads them.
  const int slot = a.d_slot[row];
  const int tid = threadIdx.x, h0 = g * hpg + chunk * hc;
  const int tile_rows = (P + ptiles - 1) / ptiles;
  const int p_begin = tile * tile_rows, p_end = min(P, p_begin + tile_rows), rows = p_end - p_begin;
  const GroupedSmem L{N, l.interval, hc, rows, kSmall ? l.interval - 1 : 0};
  const int np = hc * rows, E4 = L.E4();
  constexpr bool kDual = !std::is_void<RD>::value;
  using Src = typename std::conditional<kDual, RD, CK>::type;
  // The flush folds on tensor cores (grouped_flush_head_mma) on a 16-bit checkpoint. On fp32 update copies it was
  // slower on the H200 (Super-120B, batch 256, K16: fp32 flush 799 -> 858 us, dual 961 -> 1027; K32 fp32 1329 -> 1176
  // with the amortised step unchanged) while bf16 gained (flush 652 -> 529, amortised 201 -> 193):
  // benchmarks/experiments/README.md, "the flush's fold on tensor cores".
  constexpr bool kMma = kN == kMmaCols && !kSmall && sizeof(CK) == 2;
  // Pairs are contiguous from (h0, p_begin) in every [.., H, P] array: hc = 1 or the tile is the whole head.
  const long long pair_base = static_cast<long long>(h0) * P + p_begin;
  const A* x = static_cast<const A*>(a.d_x) + row * or_default(a.x_stride, static_cast<long long>(H) * P) + pair_base;
  const A* dtp = static_cast<const A*>(a.d_dt) + row * or_default(a.dt_stride, H);
  const long long bcs = or_default(a.bc_stride, static_cast<long long>(G) * N);
  const A* Bt = static_cast<const A*>(a.d_B) + row * bcs + g * N;
  const A* Ct = static_cast<const A*>(a.d_C) + row * bcs + g * N;
  const A* z = a.d_z ? static_cast<const A*>(a.d_z) + row * or_default(a.z_stride, static_cast<long long>(H) * P) + pair_base
                     : nullptr;
  // This thread's pairs: q = q0 + i, i < kPairVec (np <= kMaxPairs, checked by the launcher).
  const int q0 = tid * kPairVec;
  float xb[kPairVec];
  uint32_t xbits[kPairVec / 2] = {0, 0, 0, 0};  // the pairs' buffer codes, two a register
  // The row's inputs into shared memory (C_t, B_t, Δ, A, D·x, the gate) and registers (the pairs' x). Serving
  // batches stage them before waiting on the slot. The small-batch shape (kSmall) reading a 16-bit copy keeps the
  // order it had, slot -> {ring copies, cursor, inputs}: against the inputs first in one H100 call, batch 1 K16
  // amortised bf16 replay 0.980, dual fp32 + bf16 0.944, fp32 (which keeps the inputs first: the old order cost it 5%)
  // and batch 64 / 256 level (benchmarks/experiments/README.md, "The small-batch shape's order").
  constexpr bool kInputsLate = kSmall && sizeof(Src) == 2;
  const auto stage_inputs = [&] {
    for (int n = tid; n < N; n += kThreads) {
      smem[L.off_C() + n] = to_f32(Ct[n]);
      smem[L.off_Bt() + n] = to_buffer_f32(Bt[n]);
      ismem[L.off_Bbits() + n] = to_buffer_bits(Bt[n]);
    }
    for (int hl = tid; hl < hc; hl += kThreads) {
      const int h = h0 + hl;
      smem[L.off_delta() + hl] = delta_of(to_f32(dtp[h]), a.d_dt_bias[h], a.dt_min, a.dt_max);
      smem[L.off_A() + hl] = -expf(a.d_A_log[h]);
    }
#pragma unroll
    for (int i = 0; i < kPairVec; ++i) {
      const int q = q0 + i;
      xb[i] = 0.0f;
      if (q < np) {
        const int hl = q / rows, p = p_begin + q % rows;
        const float xa = to_f32(x[q]);
        smem[L.off_dx() + q] = (a.d_per_dim ? a.d_D[(h0 + hl) * P + p] : a.d_D[h0 + hl]) * xa;
        xb[i] = to_buffer_f32(x[q]);
        xbits[i / 2] |= static_cast<uint32_t>(to_buffer_bits(x[q])) << (16 * (i % 2));
        if (z) {
          const float zv = to_f32(z[q]);
          smem[L.off_g() + q] = silu<float>(zv);
        }
      }
    }
  };
  if constexpr (!kInputsLate) stage_inputs();
  if (slot < 0) return;
  const long long slot_off = static_cast<long long>(slot) * H * P * N;
  const void* src_copy = kDual ? l.d_read : l.d_ckpt;
  const int cap = l.capacity;
  const float2* dl = reinterpret_cast<const float2*>(l.d_ring_dl) + static_cast<long long>(slot) * cap * H;  // + e·H + h
  const uint16_t* rx = l.d_ring_x + static_cast<long long>(slot) * cap * H * P + pair_base;                // + e·H·P + q
  const uint16_t* rB = l.d_ring_B + static_cast<long long>(slot) * cap * G * N + static_cast<long long>(g) * N;
  // 16-byte ring x loads when the pairs' run starts on an 8-element boundary of the ring (uniform over the CTA).
  const bool vec = pair_base % 8 == 0 && static_cast<long long>(H) * P % 8 == 0 &&
                   reinterpret_cast<uintptr_t>(l.d_ring_x) % 16 == 0;
  uint16_t* sB = reinterpret_cast<uint16_t*>(smem + L.off_sB());  // kSmall: ring entries e < interval − 1
  float2* sdl = reinterpret_cast<float2*>(smem + L.off_sdl());
  uint16_t* sx = reinterpret_cast<uint16_t*>(smem + L.off_sx());
  const int r8 = L.rows8();

  // ---- A ----
  if constexpr (kSmall) {
    const int ns = l.interval - 1, c8 = N / 8, c8r = r8 / 8;
    for (int i = tid; i < ns * c8; i += kThreads) {
      const int e = i / c8, k = i % c8;
      pipe::copy16_async(sB + e * N + 8 * k, rB + static_cast<long long>(e) * G * N + 8 * k);
    }
    for (int e = tid; e < ns; e += kThreads) pipe::copy8_async(sdl + e, dl + static_cast<long long>(e) * H + h0);
    for (int i = tid; i < ns * c8r; i += kThreads) {
      const int e = i / c8r, c = i % c8r;
      const uint16_t* src = rx + static_cast<long long>(e) * H * P + 8 * c;
      if (vec && 8 * c + 8 <= rows) {
        pipe::copy16_async(sx + e * r8 + 8 * c, src);
      } else {
        for (int m = 0; m < 8; ++m) sx[e * r8 + 8 * c + m] = 8 * c + m < rows ? src[m] : 0;
      }
    }
  }
  prefetch_l2(static_cast<const Src*>(src_copy) + slot_off + pair_base * N, static_cast<long long>(rows) * N * sizeof(Src));
  int arrived = 0;
  if (tid == 0) {
    const int f = ld_acquire(&l.d_fill[slot]);
    arrived = atomicAdd(&l.d_arrive[slot], 1);
    s_fill = min(max(f, 0), l.interval - 1);
  }
  if constexpr (kInputsLate) stage_inputs();
  if constexpr (kSmall) pipe::wait_async_copies();
  __syncthreads();
  const int j = s_fill;
  const bool flush = j + 1 == l.interval;
  const int nent = j + 1;
  // The last CTA of the row advances the cursor (mamba2_replay.cu), here rather than at the end of the step: its
  // fence would wait there for thread 0's output and ring stores, and at a small batch the last CTA to arrive is
  // among the last to finish. The atomic was issued with the cursor read, a phase ago.
  if (tid == 0 && arrived == per_row - 1) ring_cursor_advance(l, slot, j);
  if constexpr (kDual) {
    if (flush) prefetch_l2(static_cast<const CK*>(l.d_ckpt) + slot_off + pair_base * N, static_cast<long long>(rows) * N * sizeof(CK));
  }

  // The ring's x entries of this thread's pairs on their way into L2: phase C's loads wait behind the dots' barrier,
  // so without this they would add one more memory latency to the prologue. One prefetch per 128-byte line.
  if (!kSmall && q0 < np)
    for (int e = 0; e < j; ++e) {
      const uint16_t* pe = rx + static_cast<long long>(e) * H * P + q0;
      if ((reinterpret_cast<uintptr_t>(pe) & 127) < 2 * kPairVec || tid == 0) asm volatile("prefetch.global.L2 [%0];" ::"l"(pe));
    }

  // ---- B: (Δ_e, Λ_e) of every (head, entry), the weights; the dots B_e·C_t ----
  auto dl_at = [&](int e, int hl) -> float2 {
    if constexpr (kSmall) return sdl[e];  // hc = 1: hl = 0
    return dl[static_cast<long long>(e) * H + h0 + hl];
  };
  const int items_dl = hc * nent;
  for (int i0 = 0; i0 < items_dl; i0 += kDlRound * kThreads) {
    float2 de[kDlRound];
    float lp[kDlRound];
#pragma unroll
    for (int v = 0; v < kDlRound; ++v) {
      const int i = i0 + v * kThreads + tid, hl = i / nent, e = i % nent;
      const bool live = i < items_dl;
      de[v] = live && e < j ? dl_at(e, hl) : make_float2(0.0f, 0.0f);
      lp[v] = live && j > 0 ? dl_at(j - 1, hl).y : 0.0f;
    }
#pragma unroll
    for (int v = 0; v < kDlRound; ++v) {
      const int i = i0 + v * kThreads + tid, hl = i / nent, e = i % nent;
      if (i < items_dl) {
        const float delta = smem[L.off_delta() + hl];
        const float lam_t = lp[v] + smem[L.off_A() + hl] * delta;
        if (e == j) {
          de[v] = make_float2(delta, lam_t);
          smem[L.off_decay() + hl] = expf(lam_t);
          if (!flush && tile == 0)
            reinterpret_cast<float2*>(l.d_ring_dl)[static_cast<long long>(slot) * cap * H + static_cast<long long>(j) * H + h0 + hl] =
                de[v];
        }
        smem[L.off_wf() + hl * E4 + e] = de[v].x * expf(lam_t - de[v].y);
      }
    }
  }
  const int c8 = N / 8, c8_log = __ffs(c8) - 1, items = nent * c8;
  for (int i0 = 0; i0 < items; i0 += 2 * kThreads) {  // uniform over the CTA: every lane reaches the shuffles
    float acc[2] = {0.0f, 0.0f};
    uint4 raw[2];
#pragma unroll
    for (int v = 0; v < 2; ++v) {
      const int i = i0 + v * kThreads + tid, e = i >> c8_log, k = i & (c8 - 1);
      const uint16_t* be = kSmall ? sB + e * N + 8 * k : rB + static_cast<long long>(e) * G * N + 8 * k;
      raw[v] = (i < items && e < j) ? *reinterpret_cast<const uint4*>(be) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int v = 0; v < 2; ++v) {
      const int i = i0 + v * kThreads + tid, e = i >> c8_log, k = i & (c8 - 1);
      if (i < items) {
        float b[8];
        if (e < j) {
          const uint32_t w[4] = {raw[v].x, raw[v].y, raw[v].z, raw[v].w};
#pragma unroll
          for (int m = 0; m < 4; ++m) b[2 * m] = bf16_lo(w[m]), b[2 * m + 1] = bf16_hi(w[m]);
        } else {
#pragma unroll
          for (int m = 0; m < 8; ++m) b[m] = smem[L.off_Bt() + 8 * k + m];
        }
#pragma unroll
        for (int m = 0; m < 8; ++m) acc[v] = fmaf(b[m], smem[L.off_C() + 8 * k + m], acc[v]);
        if (flush && !kMma) {
          float4* dst = reinterpret_cast<float4*>(smem + L.off_B() + e * N + 8 * k);
          dst[0] = make_float4(b[0], b[1], b[2], b[3]);
          dst[1] = make_float4(b[4], b[5], b[6], b[7]);
        }
      }
      acc[v] = row_sum(acc[v], c8);
      if (i < items && k == 0) smem[L.off_dot() + e] = acc[v];
    }
  }
  __syncthreads();

  // ---- C: ring sum of this thread's pairs; the token's ring append ----
  if constexpr (kSmall) {
    // Few pairs (16 at batch 1, against 8 a thread below): sp lanes per pair split its entries (e = sub, sub + sp,
    // ...) and add up with shuffles, instead of two threads running every entry while the CTA waits at the barrier.
    int sp = 1;
    while (2 * sp <= 32 && 2 * sp * np <= kThreads) sp *= 2;
    const int sp_log = __ffs(sp) - 1;
    for (int qb = 0; qb < np; qb += kThreads / sp) {  // uniform over the CTA: every lane reaches the shuffles
      const int q = qb + (tid >> sp_log), sub = tid & (sp - 1);
      float acc = 0.0f;
      if (q < np)
        for (int e = sub; e < j; e += sp)
          acc = fmaf(smem[L.off_wf() + e] * smem[L.off_dot() + e], bf16_bits_to_float(sx[e * r8 + q]), acc);
      for (int o = sp / 2; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (q < np && sub == 0) {
        smem[L.off_ring() + q] = fmaf(smem[L.off_wf() + j] * smem[L.off_dot() + j], to_buffer_f32(x[q]), acc);
        smem[L.off_dq() + q] = smem[L.off_decay()];  // hc = 1
      }
    }
  }
  {
    float acc[kPairVec];
#pragma unroll
    for (int i = 0; i < kPairVec; ++i) acc[i] = 0.0f;
    // The 8 pairs span at most two heads (rows >= 8 whenever hc > 1, checked by the launcher): hlA below split.
    const int hlA = min(q0 / rows, hc - 1), hlB = min((q0 + kPairVec - 1) / rows, hc - 1), split = (hlA + 1) * rows - q0;
    if (!kSmall && q0 < np) {
      for (int e0 = 0; e0 < j; e0 += kXRound) {
        uint4 raw[kXRound];
#pragma unroll
        for (int u = 0; u < kXRound; ++u) {
          const int e = e0 + u;
          const uint16_t* pe = rx + static_cast<long long>(e) * H * P + q0;
          raw[u] = e < j ? load_bf16x8_row(pe, q0, np, vec) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kXRound; ++u) {
          const int e = e0 + u;
          if (e < j) {
            const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
            const float dot = smem[L.off_dot() + e];
#pragma unroll
            for (int i = 0; i < kPairVec; ++i) {
              const float xe = i % 2 == 0 ? bf16_lo(w[i / 2]) : bf16_hi(w[i / 2]);
              acc[i] = fmaf(smem[L.off_wf() + (i < split ? hlA : hlB) * E4 + e] * dot, xe, acc[i]);
            }
          }
        }
      }
      const float dotj = smem[L.off_dot() + j];
#pragma unroll
      for (int i = 0; i < kPairVec; ++i) {
        acc[i] = fmaf(smem[L.off_wf() + (i < split ? hlA : hlB) * E4 + j] * dotj, xb[i], acc[i]);
        if (q0 + i < np) {
          smem[L.off_ring() + q0 + i] = acc[i];
          smem[L.off_dq() + q0 + i] = smem[L.off_decay() + (i < split ? hlA : hlB)];
        }
      }
    }
    if (!flush && q0 < np) {
      uint16_t* dst = l.d_ring_x + static_cast<long long>(slot) * cap * H * P + static_cast<long long>(j) * H * P + pair_base + q0;
      if (vec && q0 + kPairVec <= np) {
        *reinterpret_cast<uint4*>(dst) = make_uint4(xbits[0], xbits[1], xbits[2], xbits[3]);
      } else {
#pragma unroll
        for (int i = 0; i < kPairVec; ++i)
          if (q0 + i < np) dst[i] = static_cast<uint16_t>(xbits[i / 2] >> (16 * (i % 2)));
      }
    }
  }
  if (!flush && tile == 0 && chunk == 0)
    for (int n = tid; n < N; n += kThreads)
      l.d_ring_B[static_cast<long long>(slot) * cap * G * N + (static_cast<long long>(j) * G + g) * N + n] =
          static_cast<uint16_t>(ismem[L.off_Bbits() + n]);
  __syncthreads();

  // ---- D: the stream ----
  GroupedCtx t;
  t.H = H, t.P = P, t.N = N, t.h0 = h0, t.hc = hc, t.row = row, t.p_begin = p_begin, t.p_end = p_end, t.rows = rows;
  t.nent = nent;
  t.y0 = row * or_default(a.y_stride, static_cast<long long>(H) * P) + pair_base;
  t.slot_off = slot_off, t.pair_base = pair_base;
  t.y_bf16 = a.y_format == Format::BF16;
  t.gated = z != nullptr;
  constexpr bool kRoll = !kSmall && kN > 0 && !kMma;
  t.flush_l2_ahead = kRoll && hc > 1 ? l.flush_l2_ahead : -1;
  if (!flush) {
    grouped_read<Src, kLanes<Src, kN>>(a, t, static_cast<const Src*>(src_copy), smem, L);
  } else {
    CK* ck = static_cast<CK*>(l.d_ckpt);
    using RDv = typename std::conditional<kDual, RD, void>::type;
    RDv* rd = kDual ? static_cast<RDv*>(l.d_read) : nullptr;
    [[maybe_unused]] const int ks = (nent + 15) / 16;  // the tensor-core fold's k-steps
    if constexpr (kMma) {
      // The A operand, once for the CTA's heads (the group's B_e): the ring's entries before j and B_t as entry j
      // (visible to the fold after the first head's staging barrier).
      for (int f = tid; f < ks * 256; f += kThreads)
        reinterpret_cast<uint4*>(smem + L.off_mma_a())[f] =
            mma_a_fragment(f, StateVec<CK>::kVec, [&](int e, int col) -> uint16_t {
              return e < j ? rB[static_cast<long long>(e) * G * N + col]
                           : e == j ? static_cast<uint16_t>(ismem[L.off_Bbits() + col]) : uint16_t(0);
            });
    }
    for (int hl = 0; hl < hc; ++hl) {
      if (hl + 1 < hc && t.flush_l2_ahead < 0)
        prefetch_l2(ck + slot_off + (pair_base + static_cast<long long>(hl + 1) * P) * N,
                    static_cast<long long>(rows) * N * sizeof(CK));
      if constexpr (kMma) {
        // The B operand of this head: x_e·weight per (row, entry), 16 rows of a half-warp per (k-step, tig); zero past
        // the entries (the keys there are zero, these must be finite).
        uint2* Bw = reinterpret_cast<uint2*>(smem + L.off_mma_b());
        for (int i = tid; i < rows * 4 * ks; i += kThreads) {
          const int pl = i % rows, tg = i / rows % 4, k = i / (rows * 4), q = hl * rows + pl;
          float w[4];
#pragma unroll
          for (int b = 0; b < 4; ++b) {
            const int e = mma_entry(k, tg, b);
            const float xe = e < j ? bf16_bits_to_float(rx[static_cast<long long>(e) * H * P + q])
                                   : e == j ? to_buffer_f32(x[q]) : 0.0f;
            w[b] = e < nent ? smem[L.off_wf() + hl * E4 + e] * xe : 0.0f;
          }
          mma_stage_b(Bw, ks, k, pl, tg, w);
        }
        __syncthreads();
        grouped_flush_head_mma<CK, RDv>(a, t, hl, ck, rd, smem, L, ks);
        __syncthreads();
        continue;
      }
      // This head's x·weight per (row, entry); the previous head's are no longer read (barrier at the loop end).
      const int hitems = rows * nent;
      for (int i = tid; i < hitems; i += kThreads) {
        const int pl = i / nent, e = i % nent;
        const int q = hl * rows + pl;
        const uint16_t xc = e < j ? (kSmall ? sx[e * r8 + pl] : rx[static_cast<long long>(e) * H * P + q]) : 0;
        const float xe = e < j ? bf16_bits_to_float(xc) : to_buffer_f32(x[q]);
        smem[L.off_u() + pl * E4 + e] = smem[L.off_wf() + hl * E4 + e] * xe;
      }
      __syncthreads();
      // Not in kSmall: there the flush is a chain of latencies, and the registers would spill its prologue.
      if constexpr (sizeof(CK) == 4 && !kSmall) {
        if (l.interval == 16) {  // the flush folds nent = interval entries
          grouped_flush_head<CK, RDv, kLanes<CK, kN>, 16, kRoll>(a, t, hl, ck, rd, smem, L);
        } else if (l.interval == 8) {
          grouped_flush_head<CK, RDv, kLanes<CK, kN>, 8, kRoll>(a, t, hl, ck, rd, smem, L);
        } else {
          grouped_flush_head<CK, RDv, kLanes<CK, kN>, 0, kRoll>(a, t, hl, ck, rd, smem, L);
        }
      } else {
        grouped_flush_head<CK, RDv, kLanes<CK, kN>, 0, kRoll>(a, t, hl, ck, rd, smem, L);
      }
      __syncthreads();
    }
  }
}

template <class A, class CK, class RD, bool kSmall>
void launch_grouped(const Mamba2ReplayLaunch& l, int hc, int ptiles, cudaStream_t stream) {
  const Mamba2Dims& d = l.step.dims;
  const long long blocks = static_cast<long long>(l.step.batch) * (d.H / hc) * ptiles;
  if (blocks > 0x7FFFFFFFLL) bad_launch("mamba2_replay_step", "batch · H / heads_per_cta · tiles exceeds the grid limit");
  const GroupedSmem L = grouped_smem(d, l.interval, hc, ptiles);
  const size_t bytes = static_cast<size_t>(L.floats()) * sizeof(float);
  if (bytes > 227 * 1024)
    bad_launch("mamba2_replay_step", "variant 1 needs " + std::to_string(bytes) + " bytes of shared memory (over 227 KiB); "
                                     "lower heads_per_cta or the interval");
  auto kernel = d.N == kPresetN ? mamba2_replay_grouped_kernel<A, CK, RD, kPresetN, kSmall>
                                : mamba2_replay_grouped_kernel<A, CK, RD, 0, kSmall>;
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  kernel<<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(l, hc, ptiles);
  CUDA_CHECK_LAUNCH(stream);
}

template <class A, bool kSmall>
void dispatch_grouped_state(const Mamba2ReplayLaunch& l, int hc, int ptiles, cudaStream_t stream) {
  with_checkpoint_types(l.dual, l.ckpt_format, l.read_format, [&](auto ck, auto rd) {
    launch_grouped<A, typename decltype(ck)::type, typename decltype(rd)::type, kSmall>(l, hc, ptiles, stream);
  });
}

// Heads per CTA and P-tiles of the grouped variant. Serving batches: as many heads of a group per CTA (a power of
// two dividing H/G, at most 16) as keep about three waves of resident CTAs (batch 256 at H = 128: 16 heads, 2048
// CTAs); each CTA then streams long enough to hide its prologue. Small batches (one head per CTA): P-tiles only
// while the grid fits in one wave, since there every CTA is a chain of latencies and a second wave doubles it.
void grouped_shape(const Mamba2ReplayLaunch& l, Format streamed, int& hc, int& ptiles) {
  const char* what = "mamba2_replay_step";
  const Mamba2Dims& d = l.step.dims;
  const int hpg = d.H / d.G;
  const long long slots = static_cast<long long>(kGroupedMinBlocks) * sm_count();
  const long long heads = static_cast<long long>(l.step.batch) * d.H;
  if (l.heads_per_cta > 0) {
    if (hpg % l.heads_per_cta != 0 || l.heads_per_cta > kMaxGroupHeads)
      bad_launch(what, "heads_per_cta must divide H/G = " + std::to_string(hpg) + " and be at most " +
                           std::to_string(kMaxGroupHeads) + " (got " + std::to_string(l.heads_per_cta) + ")");
    hc = l.heads_per_cta;
  } else {
    hc = 1;
    while (2 * hc <= kMaxGroupHeads && hpg % (2 * hc) == 0 && heads / (2 * hc) >= 3 * slots && 2 * hc * d.P <= kMaxPairs &&
           d.P >= kPairVec)
      hc *= 2;
  }
  if (hc > 1 && d.P < kPairVec) bad_launch(what, "heads_per_cta > 1 needs P >= " + std::to_string(kPairVec));
  const int rpp = mamba2_rows_per_pass(d, streamed);  // the smallest useful tile
  if (l.p_tiles > 0) {
    if (hc != 1) bad_launch(what, "p_tiles > 0 needs heads_per_cta = 1");
    const int tr = (d.P + l.p_tiles - 1) / l.p_tiles;
    if ((l.p_tiles - 1) * tr >= d.P)
      bad_launch(what, "p_tiles = " + std::to_string(l.p_tiles) + " leaves an empty tile of P = " + std::to_string(d.P));
    ptiles = l.p_tiles;
  } else {
    ptiles = 1;
    while (hc == 1 && heads * 2 * ptiles <= slots && (d.P + 2 * ptiles - 1) / (2 * ptiles) >= rpp) ptiles *= 2;
  }
  if (hc * ((d.P + ptiles - 1) / ptiles) > kMaxPairs)
    bad_launch(what, "variant 1: heads_per_cta · P must be at most " + std::to_string(kMaxPairs) + " (got " +
                         std::to_string(hc) + " · " + std::to_string(d.P) + ")");
}

void replay_grouped(const Mamba2ReplayLaunch& l, Format streamed, cudaStream_t stream) {
  if (l.flush_l2_ahead < -1 || l.flush_l2_ahead > 64)
    bad_launch("mamba2_replay_step", "flush_l2_ahead must be -1 .. 64 (got " + std::to_string(l.flush_l2_ahead) + ")");
  int hc = 1, ptiles = 1;
  grouped_shape(l, streamed, hc, ptiles);
  const bool small = grouped_small(hc, ptiles);
  if (l.step.act_format == Format::BF16)
    small ? dispatch_grouped_state<__nv_bfloat16, true>(l, hc, ptiles, stream)
          : dispatch_grouped_state<__nv_bfloat16, false>(l, hc, ptiles, stream);
  else
    small ? dispatch_grouped_state<float, true>(l, hc, ptiles, stream) : dispatch_grouped_state<float, false>(l, hc, ptiles, stream);
}

}  // namespace m2

void mamba2_grouped_shape(const Mamba2ReplayLaunch& l, int& heads_per_cta, int& p_tiles) {
  m2::grouped_shape(l, l.dual ? l.read_format : l.ckpt_format, heads_per_cta, p_tiles);
}

bool mamba2_grouped_accepts(const Mamba2ReplayLaunch& l) {
  if (l.flush_arith != Arith::FP32 || l.step.rounding != Rounding::Nearest || l.heads_per_cta > 0 || l.p_tiles > 0 ||
      (l.dual && is_scaled_format(l.read_format)))
    return false;
  int hc = 1, ptiles = 1;
  try {
    m2::grouped_shape(l, l.dual ? l.read_format : l.ckpt_format, hc, ptiles);
  } catch (const std::exception&) {  // the shape it would refuse (P beyond a CTA's pairs)
    return false;
  }
  const m2::GroupedSmem L = m2::grouped_smem(l.step.dims, l.interval, hc, ptiles);
  return static_cast<size_t>(L.floats()) * sizeof(float) <= 227 * 1024;
}

}  // namespace rssm
