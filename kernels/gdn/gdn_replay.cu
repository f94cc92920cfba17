// GDN replay decode step (gdn_kernels.h), one launch for all rows, rows at any ring fill. Token t is ring entry j
// (j = fill before the step); G is the running fp32 sum of the log-gates g over the ring, G_t = G_{j−1} + g_t.
// Inner-product route, per state row i of value head h:
//   S_{t−1}k_t = e^{G_{j−1}}·(S_c·k_t) + Σ_{e<j} e^{G_{j−1}−G_e}·(k_e·k_t)·u_e      (k_e·k_t once per CTA)
//   u_t = bf16(β·(v_t − α·S_{t−1}k_t))                                              (the ring keeps u in bf16)
//   o_t = e^{G_t}·(S_c·q_t) + Σ_{e<=j} e^{G_t−G_e}·(k_e·q_t)·u_e                    (u_j = u_t, k_j = bf16(k_t))
// one read of the checkpoint row against both k_t and q_t.
// Reconstruct route: R = e^{G_{j−1}}·S_c + Σ_{e<j} (e^{G_{j−1}−G_e}·u_e)·k_e rebuilt per row in registers,
//   u_t = bf16(β·(v_t − α·R·k_t)), S_t = α·R + u_t·k_j, o_t = S_t·q_t.
// Flush, on the step that fills a row's ring to `interval` (fp32, accumulator starting from the decayed S_c):
//   inner:       S_c <- e^{G_t}·S_c + Σ_{e<=j} (e^{G_t−G_e}·u_e)·k_e   (lib/cpu/replay.cpp flush_gdn, e in order;
//                at K = 128 with fp32 arithmetic the entries before j go through tensor cores: flush_tile_mma)
//   reconstruct: S_c <- S_t, the row the step rebuilt anyway (equal in exact arithmetic; rounding differs from the
//                CPU emulation's flush formula within the contract's bound).
// Order of operations follows lib/cpu/replay.cpp (step_gdn / flush_gdn) where it costs nothing: normalisation and
// gate through model/formulas.h, the current token's key through its bf16 buffer copy, weights exp(G_a − G_e) times
// the dot, ring sums over e in order. Dots and the sums of squares are tree sums (the contract's bounded half).
// Deliberate differences: the ring sum is added to the checkpoint term rather than accumulated onto it; at a dual
// flush step u_t and the output read the fp32 update copy the flush streams anyway (the CPU emulation reads the read
// copy), saving a read of the read copy.
//
// Work split: one CTA (128 threads) per (row, value head, V-tile), as in the eager kernel. Each CTA first does the
// small per-(row, head) work: q_t, k_t normalised, the key dots k_e·k_t and k_e·q_t (one warp per entry, entries in
// parallel; reconstruct and flush steps also keep the keys in fp32 in shared memory), the weights (one thread per
// entry), the ring sums per row of the tile (one thread per row); then streams its state tile once with kUnroll
// 16-byte loads in flight per thread. The tile's first chunks are prefetched into L2 before that prologue, so the
// step time does not grow with the ring fill while other resident CTAs stream, and the stream prefetches the rest a
// few chunks ahead (l2_ahead: whole tiles for every resident CTA overran the L2 and cost 10% more time).
//
// Ring cursor, on the device, exactly the Mamba-2 replay kernel's protocol: d_fill[slot] is read by one thread of
// every CTA of the row; the CTA that arrives last on d_arrive[slot] (atomicAdd, fenced) writes the advanced fill (0
// after a flush) and re-zeroes d_arrive. Which CTA writes what in the ring (no other CTA of the launch reads what it
// writes): entry j's u rows by the tile that owns them, k_j by tile 0 of the first value head of the key group, G_j
// by tile 0 of the head. Entries < j are only read. A flushing row writes no ring entry: its ring restarts at 0.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "common/cuda_check.h"
#include "common/mma_fold.cuh"
#include "common/ring_cursor.cuh"
#include "common/scaled_vec.cuh"
#include "gdn/gdn_device.cuh"

namespace rssm {
namespace gdn {

// Shared memory of one CTA, in floats. Regions start on 16-byte boundaries (keys are read as float4).
struct ReplaySmem {
  int K, E, rows, F;  // E = interval (largest number of entries), rows = tile rows, F = flush terms per entry
  int S;              // 1: a block-scaled dual read copy, whose row scales the non-flush stream reads; else 0
  __host__ __device__ static int up4(int n) { return (n + 3) & ~3; }
  __host__ __device__ int off_q() const { return 0; }                    // [K] normalised q_t (scaled)
  __host__ __device__ int off_k() const { return up4(K); }               // [K] normalised k_t
  __host__ __device__ int off_kb() const { return 2 * up4(K); }          // [K] bf16(k_t): entry j's key
  __host__ __device__ int off_red() const { return 3 * up4(K); }         // [2·kWarps] reduction scratch
  __host__ __device__ int off_kk() const { return off_red() + up4(2 * kWarps); }  // [E] k_e·k_t
  __host__ __device__ int off_kq() const { return off_kk() + up4(E); }   // [E] k_e·q_t
  __host__ __device__ int off_wk() const { return off_kq() + up4(E); }   // [E] inner: e^{G_{j−1}−G_e}·k_e·k_t;
                                                                         //     reconstruct: e^{G_{j−1}−G_e}
  __host__ __device__ int off_wq() const { return off_wk() + up4(E); }   // [E] e^{G_t−G_e}·k_e·q_t
  __host__ __device__ int off_wf() const { return off_wq() + up4(E); }   // [E] e^{G_t−G_e} (flush)
  __host__ __device__ int off_rk() const { return off_wf() + up4(E); }   // [rows] ring sum against k_t
  __host__ __device__ int off_rq() const { return off_rk() + up4(rows); }  // [rows] ring sum against q_t
  __host__ __device__ int off_v() const { return off_rq() + up4(rows); }   // [rows] v_t of the tile's rows
  __host__ __device__ int off_G() const { return off_v() + up4(rows); }     // [E] G_e (small-batch prologue)
  // The keys and weighted u of the entries (reconstruct: fp32 values of the rebuild; inner flush: the flush terms'
  // operands staged in flush_arith, F rows per entry, numeric/arith.h).
  __host__ __device__ int off_rscale() const { return off_G() + up4(E); }  // [rows] read-copy row scales (S = 1)
  __host__ __device__ int off_keys() const { return off_rscale() + S * up4(rows); }  // [E·F, up4(K)] k_e
  __host__ __device__ int off_uw() const { return off_keys() + E * F * up4(K); }  // [E·F, rows] weight·u_e per row
  // The tensor-core flush (flush_tile_mma, K = 128) stages its operands over the same region instead, in the mma's
  // fragment order (bf16 words): A = the keys, [ks][m-tile 0..7][lane][8]; B = the weighted u in three bf16 pieces,
  // [8-row block][ks][piece][lane][4]. ks: k-steps of 16 entries over the entries before the current one.
  __host__ __device__ int mma_ks() const { return (E - 1 + 15) / 16; }
  __host__ __device__ int off_mma_a() const { return off_keys(); }
  __host__ __device__ int off_mma_b() const { return off_keys() + mma_a_floats(mma_ks()); }
  __host__ __device__ int floats() const {
    const int fma = off_uw() + E * F * rows, mma = off_mma_b() + mma_b_floats(mma_ks(), rows);
    return fma > mma ? fma : mma;
  }
};

// Everything the stream phase needs, per CTA.
struct TileCtx {
  int K, HV, V, h, row, slot, cap, j, c, rsub, lanes, rows_per_pass, v_begin, v_end;
  int l2_ahead;  // GdnReplayLaunch::l2_ahead (>= 0: the stream's rolling prefetch)
  int F;     // the inner flush's terms per entry (flush_terms of fa)
  Arith fa;  // the inner flush's arithmetic
  long long os;
  long long elem0;       // the element index (stochastic rounding) of row 0 of the head at the thread's lane
  SrKey sr_ck, sr_read;  // stochastic rounding of the flush's stores: checkpoint (update copy), dual read copy
  float* rscale;         // a block-scaled read copy's scales of the head's rows (flush: written), else null
  float dprev, dt, alpha, beta, wq_j, wf_j;  // e^{G_{j−1}}, e^{G_t}, α_t, β_t, entry j's output and flush weights
  bool o_bf16;
};

template <int kVec>
__device__ inline void load_f32(const float* p, float v[kVec]) {
#pragma unroll
  for (int k = 0; k < kVec; k += 4) {
    const float4 q = *reinterpret_cast<const float4*>(p + k);
    v[k] = q.x, v[k + 1] = q.y, v[k + 2] = q.z, v[k + 3] = q.w;
  }
}

// One chunk of a tile (kUnroll passes of rows from i0, rows_per_pass rows per pass) into registers as raw 16-byte
// vectors, streaming loads; rows past v_end hold zeros. `lane0`: the thread's vector of row 0 of the head.
template <class T>
__device__ inline void load_chunk_raw(const T* lane0, int K, int i0, int rsub, int rows_per_pass, int v_end,
                                      uint4 (&q)[kUnroll]) {
  constexpr int kPass = kThreads * StateVec<T>::kVec;
  const T* r0 = lane0 + static_cast<long long>(i0 + rsub) * K;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const bool live = i0 + u * rows_per_pass + rsub < v_end;
    q[u] = live ? ldcs_vec(r0 + u * kPass) : make_uint4(0, 0, 0, 0);
  }
}

// Streams the CTA's tile of `src` once. Non-flush steps: src is the read copy (dual) or the shared checkpoint, R is
// void. Flush steps: src is the checkpoint (dual: the fp32 update copy, R the read-copy type), written back.
// kL: lanes of a row when K is fixed at compile time (the kernel's kK), else 0. Rows u of a chunk are one pass of
// the CTA apart, rows_per_pass·K = kThreads·kVec elements whatever K is: fixed offsets from one row pointer.
// kSR (flush steps): the stores round stochastically, row i's vector at element t.elem0 + i·K. kArith: the flush
// folds in t.fa with t.F terms per entry; false: fp32, one term (the fold the timed kernels run, nothing staged at
// run time).
// pre / have_pre: the tile's first chunk of `src`, already loaded (the small-batch prologue reads it with the slot;
// the inner route's serving-batch prologue before its ring sums).
// kRoll: the stream prefetches into L2 as it goes (t.l2_ahead); false: only the prologue's prefetch (replay_step).
template <class T, class R, bool kInner, bool kFlush, int kL, bool kSR, bool kArith, bool kRoll = true>
__device__ __forceinline__ void stream_tile(const GdnReplayLaunch& l, const TileCtx& t, T* src, R* rd,
                                            const float* smem, const ReplaySmem& L, const uint4 (&pre)[kUnroll],
                                            bool have_pre) {
  constexpr int kVec = StateVec<T>::kVec;
  float kv[kVec], qv[kVec], kbv[kVec];
  load_f32<kVec>(smem + L.off_k() + t.c * kVec, kv);
  load_f32<kVec>(smem + L.off_q() + t.c * kVec, qv);
  load_f32<kVec>(smem + L.off_kb() + t.c * kVec, kbv);
  const float* s_rk = smem + L.off_rk();
  const float* s_rq = smem + L.off_rq();
  const float* s_uw = smem + L.off_uw();
  const float* s_keys = smem + L.off_keys() + t.c * kVec;
  const int ldk = ReplaySmem::up4(t.K);
  uint16_t* ring_uj =
      l.d_ring_u + ((static_cast<long long>(t.slot) * t.cap + t.j) * t.HV + t.h) * static_cast<long long>(t.V);
  constexpr int kPass = kThreads * kVec;
  const int span = t.rows_per_pass * kUnroll;
  // Inner-route non-flush steps keep the next chunk's loads in flight while this chunk's dots are reduced (as the
  // eager step does): raw 16-byte vectors, unpacked when used. On the H200 (fp32, K16, batch 256) that took the
  // non-flush step 247 -> 224 us; the reconstruct route's rebuild holds too many registers for a second chunk (its
  // amortised step went 271 -> 328 us with it: benchmarks/experiments/gdn_double_buffer_both_routes.h200.json) and
  // flush steps have the fold's: they load each chunk when they reach it.
  constexpr bool kAhead = kInner && !kFlush;
  uint4 qa[kUnroll];
  const float* s_v = smem + L.off_v();  // v_t by tile row: read by the lane that finishes a row, not by all its lanes
  const auto load_raw = [&](int i0, uint4 (&q)[kUnroll]) {
    load_chunk_raw(src, t.K, i0, t.rsub, t.rows_per_pass, t.v_end, q);
  };
  if constexpr (kAhead) {
    if (have_pre) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) qa[u] = pre[u];
    } else {
      load_raw(t.v_begin, qa);
    }
  }
  const T* const row0 = src - t.c * kVec;  // row 0 of the head, lane 0
  const int ahead = t.l2_ahead >= 0 ? (t.l2_ahead + 2) * span : 0;  // the prefetch window's end, rows past i0
  for (int i0 = t.v_begin; i0 < t.v_end; i0 += span) {
    if (kRoll && ahead > 0 && i0 != t.v_begin) prefetch_rows(row0, t.K, i0 + ahead - span, min(i0 + ahead, t.v_end));
    float s[kUnroll][kVec], vv[kUnroll], uj[kUnroll];
    int il[kUnroll];
    [[maybe_unused]] T* r0 = src + static_cast<long long>(i0 + t.rsub) * t.K;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)  // rows past the tile read a valid slot; their results are dropped
      il[u] = min(i0 + u * t.rows_per_pass + t.rsub, t.v_end - 1) - t.v_begin;
    if constexpr (kAhead) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) StateVec<T>::unpack(qa[u], s[u]);  // zero bits: 0.0f
      if (i0 + span < t.v_end) load_raw(i0 + span, qa);
    } else {
      const bool from_pre = have_pre && i0 == t.v_begin;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {  // every load first: kUnroll independent 16-byte loads in flight
        const int i = i0 + u * t.rows_per_pass + t.rsub;
        if (i < t.v_end) {
          if (from_pre)
            StateVec<T>::unpack(pre[u], s[u]);
          else
            StateVec<T>::load(r0 + u * kPass, s[u]);
          vv[u] = s_v[il[u]];
        } else {
#pragma unroll
          for (int k = 0; k < kVec; ++k) s[u][k] = 0.0f;
          vv[u] = 0.0f;
        }
      }
    }
    if constexpr (!kInner) {  // rebuild S_{t−1}: R = e^{G_{j−1}}·S_c + Σ_{e<j} (w_e·u_e[i])·k_e
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        // A block-scaled read copy holds codes: the row's scale joins the decay (its dots take it after the sum).
        const float d = kIsScaled8<T> ? t.dprev * smem[L.off_rscale() + il[u]] : t.dprev;
#pragma unroll
        for (int k = 0; k < kVec; ++k) s[u][k] *= d;
      }
      for (int e = 0; e < t.j; ++e) {
        float key[kVec];
        load_f32<kVec>(s_keys + e * ldk, key);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const float w = s_uw[e * L.rows + il[u]];
#pragma unroll
          for (int k = 0; k < kVec; ++k) s[u][k] = fmaf(w, key[k], s[u][k]);
        }
      }
    }
    // The rows' dots reduced together (the step is bound by instruction issue): row_sums where every lane needs the
    // sum (the update's dk; the inner flush's u_t), reduce_scatter where one lane writes it (outputs, ring u).
    float dk[kUnroll], dq[kUnroll];
    const auto emit = [&](int u, float ov, float ujv) {  // the output and ring entry of row u of the chunk
      const int i = i0 + u * t.rows_per_pass + t.rsub;
      if (i < t.v_end) {
        store_o(l.step.d_o, t.row * t.os + static_cast<long long>(t.h) * t.V + i, t.o_bf16, ov);
        if constexpr (!kFlush) ring_uj[i] = static_cast<uint16_t>(__float_as_uint(ujv) >> 16);  // ujv is a bf16 value
      }
    };
    const auto pick = [](const auto& arr, int u) {  // arr[u] for a run-time u without an indexed register array
      auto v = arr[0];
#pragma unroll
      for (int m = 1; m < kUnroll; ++m)
        if (u == m) v = arr[m];
      return v;
    };
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      dk[u] = 0.0f, dq[u] = 0.0f;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        dk[u] = fmaf(s[u][k], kv[k], dk[u]);
        if constexpr (kInner) dq[u] = fmaf(s[u][k], qv[k], dq[u]);
      }
    }
    if constexpr (kInner) {
      // u_t and o_t of a row from its two sums (in the CPU emulation's order).
      const auto finish = [&](float dku, float dqu, float vvu, int ilu, float& ujv, float& ov) {
        const float skt = t.dprev * dku + s_rk[ilu];
        ujv = round_bf16_hw(t.beta * (vvu - t.alpha * skt));
        ov = t.dt * dqu + s_rq[ilu] + t.wq_j * ujv;
      };
      if constexpr (kFlush) {  // every lane folds u_t into its part of the row
        row_sums<kUnroll, kL>(dk, t.lanes);
        row_sums<kUnroll, kL>(dq, t.lanes);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          float ov;
          finish(dk[u], dq[u], vv[u], il[u], uj[u], ov);
          if (t.c == 0) emit(u, ov, uj[u]);
        }
      } else {  // dk[u] and dq[u] end on the same lane (same count, same partners), in slots 0 .. count−1
        const Scattered r = reduce_scatter<kUnroll, kL>(dk, t.lanes);
        reduce_scatter<kUnroll, kL>(dq, t.lanes);
#pragma unroll
        for (int n = 0; n < kUnroll; ++n)
          if (n < r.count && r.owner) {
            const int u = r.first + n;
            const int ilu = min(i0 + u * t.rows_per_pass + t.rsub, t.v_end - 1) - t.v_begin;  // rows past the tile: dropped
            const float sc = kIsScaled8<T> ? smem[L.off_rscale() + ilu] : 1.0f;  // codes: the row's scale after the sum
            float ujv, ov;
            finish(kIsScaled8<T> ? dk[n] * sc : dk[n], kIsScaled8<T> ? dq[n] * sc : dq[n], s_v[ilu], ilu, ujv, ov);
            emit(u, ov, ujv);
          }
      }
    } else {
      row_sums<kUnroll, kL>(dk, t.lanes);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        uj[u] = round_bf16_hw(t.beta * (vv[u] - t.alpha * dk[u]));
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          s[u][k] = fmaf(t.alpha, s[u][k], uj[u] * kbv[k]);  // S_t
          dq[u] = fmaf(s[u][k], qv[k], dq[u]);
        }
      }
      const Scattered r = reduce_scatter<kUnroll, kL>(dq, t.lanes);
#pragma unroll
      for (int n = 0; n < kUnroll; ++n)
        if (n < r.count && r.owner) emit(r.first + n, dq[n], pick(uj, r.first + n));
    }
    if constexpr (kFlush) {
      if constexpr (kInner) {  // S_c <- e^{G_t}·S_c + Σ_{e<=j} (e^{G_t−G_e}·u_e[i])·k_e, e in order
        // The terms of entries < j were staged in shared memory (F per entry, in t.fa); entry j's from registers.
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
#pragma unroll
          for (int k = 0; k < kVec; ++k) s[u][k] *= t.dt;
        const int F = kArith ? t.F : 1;
        const Arith fa = kArith ? t.fa : Arith::FP32;
        for (int e = 0; e < t.j * F; ++e) {
          float key[kVec];
          load_f32<kVec>(s_keys + e * ldk, key);
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const float w = s_uw[e * L.rows + il[u]];
#pragma unroll
            for (int k = 0; k < kVec; ++k) s[u][k] = fmaf(w, key[k], s[u][k]);
          }
        }
        for (int r = 0; r < F; ++r) {
          float kr[kVec];
#pragma unroll
          for (int k = 0; k < kVec; ++k) kr[k] = flush_operand_b(fa, kbv[k], r);
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const float w = flush_operand_a(fa, t.wf_j * uj[u], r);
#pragma unroll
            for (int k = 0; k < kVec; ++k) s[u][k] = fmaf(w, kr[k], s[u][k]);
          }
        }
      }
      float rs[kUnroll];  // block-scaled read copy: the rows' scales, outside the row guard (every lane shuffles)
      if constexpr (kIsScaled8<R>) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) rs[u] = row_block_scale<R::kFormat>(s[u], t.lanes);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = i0 + u * t.rows_per_pass + t.rsub;
        if (i < t.v_end) {
          if constexpr (kSR && sizeof(T) == 2) {
            uint32_t r[kVec];
            random_words<kVec>(t.sr_ck, t.elem0 + static_cast<long long>(i) * t.K, r);
            StateVec<T>::store_sr(r0 + u * kPass, s[u], r);
          } else {
            StateVec<T>::store(r0 + u * kPass, s[u]);
          }
          if constexpr (!std::is_void<R>::value) {
            static_assert(kVec == 4, "dual read copies are written from an fp32 update copy");
            if constexpr (kIsScaled8<R>) {
              uint32_t r[4] = {0u, 0u, 0u, 0u};
              if constexpr (kSR) random_words<4>(t.sr_read, t.elem0 + static_cast<long long>(i) * t.K, r);
              store_scaled4<R::kFormat, kSR>(rd + static_cast<long long>(i0 + t.rsub) * t.K + u * kPass, s[u], rs[u], r);
              if (t.c == 0) t.rscale[i] = rs[u];
            } else if constexpr (kSR) {
              uint32_t r[4];
              random_words<4>(t.sr_read, t.elem0 + static_cast<long long>(i) * t.K, r);
              store_narrow4_sr(rd + static_cast<long long>(i0 + t.rsub) * t.K + u * kPass, s[u], r);
            } else {
              store_narrow4(rd + static_cast<long long>(i0 + t.rsub) * t.K + u * kPass, s[u]);
            }
          }
        }
      }
    }
  }
}

// ---- The flush's fold on tensor cores (inner route, fp32 flush arithmetic, K = 128; common/mma_fold.cuh) ----
// S_c <- e^{G_t}·S_c + Σ_{e<j} (w_e·u_e[i])·k_e + (w_j·u_t[i])·k_j: the entries before j on tensor cores (A = the
// ring's keys, B = w_e·u_e in three bf16 pieces), entry j, whose u_t comes from this step's row dots, with fmaf after
// them. The FFMA fold (stream_tile) issued per state element and entry one FFMA and a share of 5 shared-memory loads.
constexpr int kMmaK = kMmaCols;

// The flush of one CTA's tile: T the checkpoint (the update copy when dual, R the read-copy type, else void); `head`
// and `rd` point at row 0, column 0 of the head. ks: k-steps staged (ReplaySmem::mma_ks of this step's j). Each warp
// takes 8-row blocks in turn: loads them, takes the rows' dots with k_t and q_t (for u_t and the output, as the FFMA
// stream does), decays, folds the staged entries on tensor cores and entry j with fmaf, stores.
template <class T, class R>
__device__ __forceinline__ void flush_tile_mma(const GdnReplayLaunch& l, const TileCtx& t, T* head, R* rd,
                                               const float* smem, const ReplaySmem& L, int ks) {
  constexpr int kV = StateVec<T>::kVec, kQ = 16 / kV;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  const uint4* A = reinterpret_cast<const uint4*>(smem + L.off_mma_a()) + lane;
  const uint2* B = reinterpret_cast<const uint2*>(smem + L.off_mma_b());
  const float* s_rk = smem + L.off_rk();
  const float* s_rq = smem + L.off_rq();
  const float* s_v = smem + L.off_v();
  const int rows = t.v_end - t.v_begin;
  for (int nb = warp; nb < (rows + 7) / 8; nb += kWarps) {
    const int il0 = nb * 8 + 2 * tig;
    float acc[2][16];
    mma_load_block<T>(acc, head, static_cast<long long>(t.v_begin) * kMmaK, il0, rows, g);
    // u_t and o_t of the two rows from their dots with k_t and q_t (the 8 lanes of a row: partners 4, 8, 16).
    float d[4];  // dk row 0, dk row 1, dq row 0, dq row 1
    mma_row_dots<kV>(acc, smem + L.off_k(), smem + L.off_q(), g, d);
    float wj[2];  // entry j's weight w_j·u_t per row
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int il = min(il0 + r, rows - 1);  // rows past the tile: computed, dropped
      const float skt = t.dprev * d[r] + s_rk[il];
      const float ujv = round_bf16_hw(t.beta * (s_v[il] - t.alpha * skt));
      const float ov = t.dt * d[2 + r] + s_rq[il] + t.wq_j * ujv;
      if (g == 0 && il0 + r < rows)
        store_o(l.step.d_o, t.row * t.os + static_cast<long long>(t.h) * t.V + t.v_begin + il0 + r, t.o_bf16, ov);
      wj[r] = t.wf_j * ujv;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int c = 0; c < 16; ++c) acc[r][c] *= t.dt;
    mma_fold_block(acc, A, B, nb, ks, g, tig);
#pragma unroll
    for (int q = 0; q < kQ; ++q) {
      float kb[kV];
      load_f32<kV>(smem + L.off_kb() + mma_col(kV, g, q * kV), kb);
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int e = 0; e < kV; ++e) acc[r][q * kV + e] = fmaf(wj[r], kb[e], acc[r][q * kV + e]);
    }
    mma_store_block<T, R>(acc, head, rd, static_cast<long long>(t.v_begin) * kMmaK, il0, rows, g);
  }
}

// CK: checkpoint type (the update copy when dual); RD: read-copy type, void when the checkpoint is shared.
// kK: kPresetK or 0 (K at run time, gdn_device.cuh).
// kSR: the flush's stores round stochastically (a 16-bit checkpoint or read copy), at step d_pos[row] + 1.
// kArith: the flush arithmetic is l.flush_arith (inner route); false: fp32, with F = 1 known at compile time (the
// staging loops and operand switches a run-time arithmetic costs slowed the fp32 flush 511 -> 565 us on the H200).
// kSmall: the small-batch prologue (gdn_replay_small_kernel): every read the step may need is issued with the slot.
// The body of the kernels below (they differ in their register budget and kSmall only).
template <class A, class CK, class RD, bool kInner, int kK, bool kSR, bool kArith, bool kSmall = false>
__device__ __forceinline__ void replay_step(const GdnReplayLaunch& l, int vtiles, int ring_l2) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  __shared__ int s_fill;
  const GdnStepArgs& a = l.step;
  const int HK = a.dims.HK, HV = a.dims.HV, K = kK > 0 ? kK : a.dims.K, V = a.dims.V, vpk = HV / HK;
  const int per_row = HV * vtiles;
  const int row = blockIdx.x / per_row;
  const int h = (blockIdx.x % per_row) / vtiles, tile = blockIdx.x % vtiles;
  const int hk = h / vpk, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int tile_rows = (V + vtiles - 1) / vtiles;
  const int v_begin = tile * tile_rows, v_end = min(V, v_begin + tile_rows);
  const int i_own = v_begin + tid;  // the thread's first row of the tile (the ring sums, v_t)
  // The row's inputs (q_t, k_t, the gate's, v_t) are indexed by the row, not by its slot: issued before the slot's
  // read, they arrive during the slot -> cursor -> ring chain instead of after its first link (a padded row reads
  // them and returns).
  const GateIn<A> gin = gate_in<A>(a, row, h);
  const A* v = static_cast<const A*>(a.d_v) + row * or_default(a.v_stride, static_cast<long long>(HV) * V) +
               static_cast<long long>(h) * V;
  const A v_own = i_own < v_end ? v[i_own] : A(0.0f);
  const QkFirst<A> qkf = qk_first<A>(a, row, hk);
  const int slot = a.d_slot[row];
  if (slot < 0) return;  // padded row: nothing written
  const Arith fa = kInner && kArith ? l.flush_arith : Arith::FP32;  // the launcher allows it on the inner route only
  const int F = kInner && kArith ? flush_terms(fa) : 1;
  constexpr bool kDual = !std::is_void<RD>::value;
  const ReplaySmem L{K, l.interval, tile_rows, F, kIsScaled8<RD> ? 1 : 0};
  using Src = typename std::conditional<kDual, RD, CK>::type;  // what a non-flush step reads
  // The flush folds on tensor cores (flush_tile_mma) where K is the compiled 128 and the arithmetic is fp32.
  // A block-scaled read copy is written by the FFMA fold's stream (its codes need each row's amax first).
  constexpr bool kMma = kInner && !kArith && kK == kMmaK && !kIsScaled8<RD>;
  constexpr int kVF = StateVec<CK>::kVec;  // the flush streams CK
  const long long head_off = (static_cast<long long>(slot) * HV + h) * V * K;
  const int src_span = kThreads / (K / StateVec<Src>::kVec) * kUnroll;  // rows of a non-flush chunk
  const int cap = l.capacity;
  const float* rG = l.d_ring_G + static_cast<long long>(slot) * cap * HV + h;                               // + e·HV
  const uint16_t* ru = l.d_ring_u + static_cast<long long>(slot) * cap * HV * V + static_cast<long long>(h) * V;  // + e·HV·V
  const uint16_t* rk = l.d_ring_k + static_cast<long long>(slot) * cap * HK * K + static_cast<long long>(hk) * K;  // + e·HK·K
  constexpr int kKeysAhead = 4;     // entries per warp whose keys are read in the wave (intervals up to 16: all)
  constexpr int kUAhead = 16;       // entries of the thread's first row of u read in the wave
  uint4 key_pre[kKeysAhead];
  uint16_t u_pre[kUAhead];
  float G_own = 0.0f;  // entry tid's G (the weights' thread)
  // The ring reads of the prologue: entries below `live` (G, the warp's first keys, the thread's row of u).
  const auto ring_wave = [&](int live) {
    G_own = tid < live ? rG[static_cast<long long>(tid) * HV] : 0.0f;
#pragma unroll
    for (int m = 0; m < kKeysAhead; ++m) {
      const int e = warp + m * kWarps;
      key_pre[m] = e < live && lane * 8 < K ? *reinterpret_cast<const uint4*>(rk + static_cast<long long>(e) * HK * K + lane * 8)
                                            : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int e = 0; e < kUAhead; ++e)
      u_pre[e] = e < live && i_own < v_end ? ru[static_cast<long long>(e) * HV * V + i_own] : uint16_t(0);
  };
  // Small batch: the cursor (stored for the CTA just before load_normalised's last barrier: stored right after its
  // read, it would hold warp 0's q and k reads a memory latency behind it), the tile's first chunk of what a non-flush
  // step streams (a flush of a shared checkpoint streams the same bytes; a dual flush reloads), and the ring entries
  // that may be live (0 .. interval−2, whatever the cursor says), all issued now, so the step waits on one memory
  // latency after the slot as the eager step does. Serving batch: the cursor is read after the prefetches below and
  // stored at once (this kernel's order, applied to every kernel, measured 1-7% slower at batch 256 in one A/B call:
  // benchmarks/experiments/README.md).
  int f_own = 0;
  uint4 chunk0[kUnroll];
  if constexpr (kSmall) {
    if (tid == 0) f_own = __ldcg(&l.d_fill[slot]);  // L2: the last writer ran on another SM
    constexpr int kVecS = StateVec<Src>::kVec;
    const int lanes = K / kVecS;
    const Src* lane0 = static_cast<const Src*>(kDual ? l.d_read : l.d_ckpt) + head_off + (tid % lanes) * kVecS;
    load_chunk_raw(lane0, K, v_begin, tid / lanes, kThreads / lanes, v_end, chunk0);
    ring_wave(l.interval - 1);
  }

  {
    // Start the tile's state on its way into L2 now: the prologue below waits on two waves of small reads (the
    // cursor, then the ring entries it selects). The whole tile (l2_ahead < 0), or the chunks the stream will load
    // first, the rest prefetched by the stream as it goes. A hint only (a dual flush step streams the update copy
    // instead, 1 step in `interval`).
    const int end = l.l2_ahead < 0 ? v_end : min(v_end, v_begin + (l.l2_ahead + 2) * src_span);
    prefetch_rows(static_cast<const Src*>(kDual ? l.d_read : l.d_ckpt) + head_off, K, v_begin, end);
  }
  if (ring_l2 > 0) {
    // Small batch (a grid of at most a wave: launch_replay): the step is latency-bound, a chain of dependent loads
    // (fill, G_{j−1}, keys, u rows). Send every entry that may be live (ring_l2 = 0 .. interval−2) to L2 with the
    // state, so the chain runs on L2 hits (kSmall reads the first entries directly; this serves the rest, and the
    // other kernels). At serving batch (many waves, value tiles or not) this would add ring bytes that are not live,
    // so the launcher passes 0 there.
    const int cap = l.capacity, ents = ring_l2;
    const char* ub = reinterpret_cast<const char*>(l.d_ring_u + static_cast<long long>(slot) * cap * HV * V +
                                                   static_cast<long long>(h) * V + v_begin);
    const char* kb = reinterpret_cast<const char*>(l.d_ring_k + static_cast<long long>(slot) * cap * HK * K +
                                                   static_cast<long long>(hk) * K);
    const char* gb = reinterpret_cast<const char*>(l.d_ring_G + static_cast<long long>(slot) * cap * HV + h);
    const int ulines = (tile_rows * 2 + 127) / 128, klines = (K * 2 + 127) / 128, items = ulines + klines + 1;
    for (int i = tid; i < ents * items; i += kThreads) {
      const int e = i / items, r = i % items;
      const char* p = r < ulines ? ub + static_cast<long long>(e) * HV * V * 2 + 128LL * r
                      : r < ulines + klines ? kb + static_cast<long long>(e) * HK * K * 2 + 128LL * (r - ulines)
                                            : gb + static_cast<long long>(e) * HV * 4;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
    }
  }

  if constexpr (!kSmall) {
    if (tid == 0) s_fill = min(max(__ldcg(&l.d_fill[slot]), 0), l.interval - 1);  // a corrupt cursor: clamped
  }

  // Otherwise the prologue's reads are issued in three waves: q_t, k_t, v_t and the gate's inputs with the slot
  // (above), the cursor, then, once j is known, every ring read at once. Under a saturated memory system each read
  // waits behind the stream for microseconds, and the stream's CTAs per SM sit idle for the chain's length; reading
  // entries that are not live would add ring bytes to every step.
  load_normalised<A>(a, row, hk, smem + L.off_q(), smem + L.off_k(), smem + L.off_red(), [&] {  // ends in a barrier
    if constexpr (kSmall) {
      if (tid == 0) s_fill = min(max(f_own, 0), l.interval - 1);  // a corrupt cursor must not send writes out of bounds
      if (tid < l.interval - 1) smem[L.off_G() + tid] = G_own;
    }
  }, &qkf);
  const int j = s_fill;  // the current token's entry
  const bool flush = j + 1 == l.interval;
  const int nent = j + 1;
  const int ks_mma = kMma && flush ? (j + 15) / 16 : 0;  // k-steps of the tensor-core fold (entries < j)
  int arrivals = 0;
  if (tid == 0) {  // the cursor was read (a value in hand) before the arrival: the last arriver may advance it
    __threadfence();
    arrivals = atomicAdd(&l.d_arrive[slot], 1);
  }
  float G_prev;
  if constexpr (kSmall) {
    G_prev = j > 0 ? smem[L.off_G() + j - 1] : 0.0f;
  } else {
    G_prev = j > 0 ? rG[static_cast<long long>(j - 1) * HV] : 0.0f;
    ring_wave(j);
  }
  // The last CTA of the row advances the cursor. Small batch: after the weights (below), so that warp 0 does not wait
  // on the atomic's round trip before the key dots while the CTA's other warps wait for it at their barrier, and
  // before the ring writes, which a fence at the end of the step would wait on (there it measured 0.1-0.3 us slower
  // at batch 1: benchmarks/experiments/README.md, "The ring cursor's hand-off").
  const auto advance_cursor = [&] {
    if (tid == 0 && arrivals == per_row - 1) ring_cursor_advance(l, slot, j);
  };
  if constexpr (!kSmall) advance_cursor();

  const Gate gt = gate_from<A>(gin);
  // bf16(k_t), entry j's key, for the key dots, the stream and the ring write (the small kernel's key dots round it
  // themselves and spend no barrier on it here).
  for (int n = tid; n < K; n += kThreads) smem[L.off_kb() + n] = round_bf16(smem[L.off_k() + n]);
  const float G_t = G_prev + gt.g;
  if constexpr (!kSmall) __syncthreads();

  // Keys of the entries: dots with k_t and q_t (inner route), fp32 copies where the stream needs them (reconstruct
  // route, and the inner route's flush).
  const bool keep_keys = !kInner || flush;
  const int ldk = ReplaySmem::up4(K);
  // Entry e's slice of the lane (8 bf16 per 16-byte load; `pre`: its first 16 bytes, read in the wave above): the
  // flush terms staged where kept, and the lane's partial dots with k_t and q_t added to dk and dq (inner route).
  const auto key_partial = [&](int e, const uint4* pre, float& dk, float& dq) {
    for (int n = lane * 8; n < K; n += 32 * 8) {
      float b[8];
      if (e < j) {
        const uint4 q = pre && n == lane * 8 ? *pre : *reinterpret_cast<const uint4*>(rk + static_cast<long long>(e) * HK * K + n);
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) b[2 * i] = __uint_as_float(w[i] << 16), b[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
        if (keep_keys && !kMma)  // entry e's flush terms: rows e·F .. e·F + F − 1 (reconstruct: F = 1, fp32 values)
          for (int r = 0; r < F; ++r) {
#pragma unroll
            for (int i = 0; i < 8; ++i) smem[L.off_keys() + (e * F + r) * ldk + n + i] = flush_operand_b(fa, b[i], r);
          }
      } else {  // entry j: bf16(k_t), as written to off_kb above (small kernel: not yet visible, rounded here)
#pragma unroll
        for (int i = 0; i < 8; ++i) b[i] = kSmall ? round_bf16(smem[L.off_k() + n + i]) : smem[L.off_kb() + n + i];
      }
      if constexpr (kInner) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          dk = fmaf(b[i], smem[L.off_k() + n + i], dk);
          dq = fmaf(b[i], smem[L.off_q() + n + i], dq);
        }
      }
    }
  };
  // The reconstruct route needs no dots and no copy of entry j (warp-uniform tests). One warp per entry. Small
  // kernel: the warp's first kKeysAhead entries have their 2·kKeysAhead dots reduced together, reduce_scatter's 9
  // shuffles instead of 40, each sum bit for bit row_sum's (its partner order); the other kernels reduce entry by
  // entry (the batched form was part of a change that measured 1-7% slower at batch 256).
  const auto key_entry = [&](int e, const uint4* pre) {
    if (!kInner && e == j) return;
    float dk = 0.0f, dq = 0.0f;
    key_partial(e, pre, dk, dq);
    if constexpr (kInner) {
      dk = row_sum(dk, 32);
      dq = row_sum(dq, 32);
      if (lane == 0) smem[L.off_kk() + e] = dk, smem[L.off_kq() + e] = dq;
    }
  };
  if constexpr (!kSmall) {
#pragma unroll
    for (int m = 0; m < kKeysAhead; ++m)
      if (warp + m * kWarps < nent) key_entry(warp + m * kWarps, &key_pre[m]);
  } else {
    float acc[2 * kKeysAhead];
#pragma unroll
    for (int m = 0; m < 2 * kKeysAhead; ++m) acc[m] = 0.0f;
#pragma unroll
    for (int m = 0; m < kKeysAhead; ++m) {
      const int e = warp + m * kWarps;
      if (e < nent && (kInner || e != j)) key_partial(e, &key_pre[m], acc[m], acc[kKeysAhead + m]);
    }
    if constexpr (kInner)
      reduce_scatter_each<2 * kKeysAhead, 32>(acc, 32, [&](int i, float sum) {
        const int e = warp + (i % kKeysAhead) * kWarps;
        if (e < nent) smem[(i < kKeysAhead ? L.off_kk() : L.off_kq()) + e] = sum;
      });
  }
  for (int e = warp + kKeysAhead * kWarps; e < nent; e += kWarps) key_entry(e, nullptr);
  if constexpr (kMma) {
    // The A operand of the tensor-core fold, a 16-byte fragment per thread and store (consecutive threads, consecutive
    // fragments: no bank conflicts): fragment f = (k-step, m-tile T, lane (g, tig)) holds the keys of entries
    // 16·k + 2·tig + {0, 1, 8, 9} at the lane's two columns of T (local 2T and 2T + 1), read from the ring (the key
    // dots above just read these lines); zero for entry j and past it (entry j is folded with fmaf).
    for (int f = tid; f < ks_mma * 256; f += kThreads)
      reinterpret_cast<uint4*>(smem + L.off_mma_a())[f] = mma_a_fragment(f, kVF, [&](int e, int col) -> uint16_t {
        return e < j ? rk[static_cast<long long>(e) * HK * K + col] : uint16_t(0);
      });
  }
  __syncthreads();
  for (int e = tid; e < nent; e += kThreads) {
    const float Ge = e < j ? (e == tid ? G_own : rG[static_cast<long long>(e) * HV]) : G_t;
    if constexpr (kInner) {
      smem[L.off_wk() + e] = e < j ? expf(G_prev - Ge) * smem[L.off_kk() + e] : 0.0f;
      smem[L.off_wq() + e] = expf(G_t - Ge) * smem[L.off_kq() + e];
      smem[L.off_wf() + e] = expf(G_t - Ge);
    } else {
      smem[L.off_wk() + e] = e < j ? expf(G_prev - Ge) : 0.0f;
    }
  }
  __syncthreads();
  if constexpr (kSmall) advance_cursor();
  // Inner route at serving batch, non-flush step: the stream's first chunk is issued here, so its load (an L2 hit: the
  // prologue prefetched it) runs under the ring sums and the last barrier instead of after them. On the H200 (batch
  // 256, K16, one call) the non-flush step went 163.1 -> 161.4 us (fp32), 118.9 -> 117.7 (bf16), 114.6 -> 113.0 (dual
  // read copy); issued before the ring wave instead, the chunk's registers spilled 32-72 bytes. The reconstruct route
  // keeps its order: its generic kernels went from 128 to 168 registers with it.
  constexpr bool kEarlyChunk = !kSmall && kInner;
  if constexpr (kEarlyChunk) {
    if (!flush) {
      constexpr int kVecS = StateVec<Src>::kVec;
      const int lanes = K / kVecS;
      const Src* lane0 = static_cast<const Src*>(kDual ? l.d_read : l.d_ckpt) + head_off + (tid % lanes) * kVecS;
      load_chunk_raw(lane0, K, v_begin, tid / lanes, kThreads / lanes, v_end, chunk0);
    }
  }

  // Per row of the tile: the ring sums (inner) and the weighted u_e the stream folds in (reconstruct; inner flush);
  // v_t for the stream. Entries in order; the thread's first row's first kUAhead (and v_t) from the waves above.
  for (int i = v_begin + tid; i < v_end; i += kThreads) {
    const int il = i - v_begin;
    smem[L.off_v() + il] = to_f32(i == i_own ? v_own : v[i]);
    if constexpr (kIsScaled8<RD>) smem[L.off_rscale() + il] = l.d_read_scale[(static_cast<long long>(slot) * HV + h) * V + i];
    float ak = 0.0f, aq = 0.0f;
    const auto term = [&](int e, uint16_t bits) {
      const float ue = bf16_bits_to_float(bits);
      if constexpr (kInner) {
        ak = fmaf(smem[L.off_wk() + e], ue, ak);
        aq = fmaf(smem[L.off_wq() + e], ue, aq);
        if (flush && !kMma)
          for (int r = 0; r < F; ++r)
            smem[L.off_uw() + (e * F + r) * tile_rows + il] = flush_operand_a(fa, smem[L.off_wf() + e] * ue, r);
      } else {
        smem[L.off_uw() + e * tile_rows + il] = smem[L.off_wk() + e] * ue;
      }
    };
    const bool own = i == i_own;
#pragma unroll
    for (int e = 0; e < kUAhead; ++e)
      if (e < j) term(e, own ? u_pre[e] : ru[static_cast<long long>(e) * HV * V + i]);
#pragma unroll 4
    for (int e = kUAhead; e < j; ++e) term(e, ru[static_cast<long long>(e) * HV * V + i]);
    if constexpr (kInner) smem[L.off_rk() + il] = ak, smem[L.off_rq() + il] = aq;
    if (kMma && flush) {
      // The B operand of the tensor-core fold for this row: per k-step and tig, the weights w_e·u_e of entries
      // 16·k + 2·tig + {0, 1, 8, 9} in three bf16 pieces, one 8-byte store per piece (mma_b_slot); zero for entry j
      // and past it (the keys there are zero too, and these must be finite).
      uint2* Bw = reinterpret_cast<uint2*>(smem + L.off_mma_b());
      for (int k = 0; k < ks_mma; ++k) {
#pragma unroll
        for (int tg = 0; tg < 4; ++tg) {
          float w[4];
#pragma unroll
          for (int b = 0; b < 4; ++b) {
            const int e = mma_entry(k, tg, b), ee = mma_entry(0, tg, b);  // ee: e at k = 0, a compile-time index
            float ue = 0.0f;
            if (e < j) ue = bf16_bits_to_float(own && k == 0 ? u_pre[ee] : ru[static_cast<long long>(e) * HV * V + i]);
            w[b] = e < j ? smem[L.off_wf() + e] * ue : 0.0f;
          }
          mma_stage_b(Bw, ks_mma, k, il, tg, w);
        }
      }
    }
  }
  if (!flush) {
    if (tile == 0 && h % vpk == 0)
      for (int n = tid; n < K; n += kThreads)
        l.d_ring_k[static_cast<long long>(slot) * cap * HK * K + (static_cast<long long>(j) * HK + hk) * K + n] =
            float_to_bf16_bits(smem[L.off_kb() + n]);
    if (tile == 0 && tid == 0) l.d_ring_G[static_cast<long long>(slot) * cap * HV + static_cast<long long>(j) * HV + h] = G_t;
  }
  __syncthreads();

  TileCtx t;
  t.K = K, t.HV = HV, t.V = V, t.h = h, t.row = row, t.slot = slot, t.cap = cap, t.j = j;
  t.v_begin = v_begin, t.v_end = v_end;
  t.F = F, t.fa = fa, t.l2_ahead = l.l2_ahead;
  if constexpr (kSR) {
    constexpr int kVecCK = StateVec<CK>::kVec;
    t.elem0 = head_off + (tid % (K / kVecCK)) * kVecCK;  // the flush streams the checkpoint's rows
    const long long folded = static_cast<long long>(a.d_pos[row]) + 1;  // tokens in the checkpoint after the flush
    t.sr_ck = SrKey{a.seed, RandomStream::CheckpointUpdate, folded};
    t.sr_read = SrKey{a.seed, RandomStream::CheckpointRead, folded};
  }
  t.os = or_default(a.o_stride, static_cast<long long>(HV) * V);
  t.rscale = kIsScaled8<RD> ? l.d_read_scale + (static_cast<long long>(slot) * HV + h) * V : nullptr;
  t.dprev = expf(G_prev), t.dt = expf(G_t), t.alpha = gt.alpha, t.beta = gt.beta;
  t.wq_j = kInner ? smem[L.off_wq() + j] : 0.0f;
  t.wf_j = kInner ? smem[L.off_wf() + j] : 0.0f;
  t.o_bf16 = a.o_format == Format::BF16;
  if (!flush) {
    constexpr int kVec = StateVec<Src>::kVec;
    t.lanes = K / kVec, t.rows_per_pass = kThreads / t.lanes, t.c = tid % t.lanes, t.rsub = tid / t.lanes;
    Src* src = static_cast<Src*>(kDual ? l.d_read : l.d_ckpt) + head_off + t.c * kVec;
    // The inner route's non-flush stream on an fp32 checkpoint (shared, or the update copy of a dual pair) does not
    // roll its L2 prefetch: at l2_ahead 0 the hint names the chunk the double buffer loads a few instructions later,
    // and any hint costs its instructions and L2 requests. On the H200 (batch 256, K16, benchmarks/experiments/
    // gdn_replay_noroll.*.h200.json) dropping it took the fp32 non-flush step 177.6 -> 170.0 us and the dual one
    // 127.0 -> 124.3, but the 16-bit checkpoint's kernel 144.3 -> 147.5 at 4 CTAs per SM and 132.2 -> 134.3 at 5
    // (gdn_replay_floors.*.h200.json): it keeps it.
    constexpr bool kRoll = !(kInner && sizeof(CK) == 4);
    stream_tile<Src, void, kInner, false, kK / StateVec<Src>::kVec, false, false, kRoll>(l, t, src, nullptr, smem, L,
                                                                                         chunk0, kSmall || kEarlyChunk);
  } else {
    constexpr int kVec = StateVec<CK>::kVec;
    t.lanes = K / kVec, t.rows_per_pass = kThreads / t.lanes, t.c = tid % t.lanes, t.rsub = tid / t.lanes;
    CK* ck = static_cast<CK*>(l.d_ckpt) + head_off + t.c * kVec;
    if constexpr (kMma) {
      RD* rd = nullptr;
      if constexpr (kDual) rd = static_cast<RD*>(l.d_read) + head_off;
      flush_tile_mma<CK, RD>(l, t, static_cast<CK*>(l.d_ckpt) + head_off, rd, smem, L, ks_mma);
    } else if constexpr (kDual) {
      RD* rd = static_cast<RD*>(l.d_read) + head_off + t.c * kVec;
      stream_tile<CK, RD, kInner, true, kK / StateVec<CK>::kVec, kSR, kArith>(l, t, ck, rd, smem, L, chunk0, false);
    } else {
      stream_tile<CK, void, kInner, true, kK / StateVec<CK>::kVec, kSR, kArith>(l, t, ck, nullptr, smem, L, chunk0,
                                                                                kSmall);  // the same bytes
    }
  }
}

template <class A, class CK, class RD, bool kInner, int kK, bool kSR, bool kArith>
__global__ void __launch_bounds__(kThreads) gdn_replay_kernel(GdnReplayLaunch l, int vtiles, int ring_l2) {
  replay_step<A, CK, RD, kInner, kK, kSR, kArith>(l, vtiles, ring_l2);
}

// The inner route on an fp32 checkpoint (shared or dual) with a floor of 7 resident CTAs per SM (72 registers, 24
// bytes spilled at K = 128). ncu on the H200 (fp32 K16 batch 256 non-flush): 96 registers held the step to 5 CTAs per
// SM (31% occupancy) and DRAM to 56%; 6 CTAs (80 registers) took the non-flush step 224 -> 213 us and the dual step
// 186 -> 165 us (benchmarks/experiments/gdn_cta_floors.h200.json); 7 took them 170.0 -> 164.9 and 124.6 -> 118.9,
// the flush steps unchanged (gdn_replay_floors.*.h200.json). 8 (64 registers, 48-84 bytes spilled) gained another 1%
// amortised on a shared checkpoint and slowed the dual flush 436 -> 478 us (gdn_replay_floors2.*.h200.json). The
// reconstruct route's rebuild needs its registers: it keeps the kernels below.
constexpr int kInnerMinBlocks = 7;
template <class A, class CK, class RD, int kK, bool kSR, bool kArith>
__global__ void __launch_bounds__(kThreads, kInnerMinBlocks) gdn_replay_inner32_kernel(GdnReplayLaunch l, int vtiles, int ring_l2) {
  replay_step<A, CK, RD, true, kK, kSR, kArith>(l, vtiles, ring_l2);
}

// The inner route on a shared 16-bit checkpoint with a floor of 7 resident CTAs per SM: without one ptxas gives it
// 128 registers (4 CTAs per SM). Spilling costs less than idle SMs here. H200, bf16, K16, batch 256, amortised us:
// 4 CTAs 155.9, 5 (96 registers, no spill) 144.0, 6 (80, 64 bytes spilled) 140.8, 7 (72, 112 bytes) 136.4, 8 (64,
// 192 bytes) 139.3; the non-flush step 144.4, 132.2, 128.0, 122.9, 124.4 while the flush goes 328.5, 321.5, 326.8,
// 336.4, 355.9 (benchmarks/experiments/gdn_replay_{b16floor,floors,floors2,floors3}.*.h200.json). Stochastic
// rounding and a flush arithmetic keep the kernel above.
constexpr int kInner16MinBlocks = 7;
template <class A, class CK, class RD, int kK>
__global__ void __launch_bounds__(kThreads, kInner16MinBlocks)
    gdn_replay_inner16_kernel(GdnReplayLaunch l, int vtiles, int ring_l2) {
  replay_step<A, CK, RD, true, kK, false, false>(l, vtiles, ring_l2);
}

// The reconstruct route on a shared fp32 checkpoint with a floor of 5 resident CTAs per SM: reading the prologue's
// ring entries in one wave (replay_step) took it from 96 to 111 registers, 5 -> 4 CTAs per SM. The 16-bit and dual
// instantiations spill 20-40 bytes under this floor and keep the kernel above.
constexpr int kRecMinBlocks = 5;
template <class A, class CK, class RD, int kK>
__global__ void __launch_bounds__(kThreads, kRecMinBlocks) gdn_replay_rec_kernel(GdnReplayLaunch l, int vtiles, int ring_l2) {
  replay_step<A, CK, RD, false, kK, false, false>(l, vtiles, ring_l2);
}

// Small batches (the value dim split into tiles, at most a wave of CTAs: gdn_v_tiles): the prologue that issues every
// read with the slot (replay_step's kSmall), K = kPresetK, bf16 activations (what serving runs; other launches take
// the kernels above). Its registers hold the first chunk and the ring entries through the prologue; at most a wave of
// CTAs runs, so 4 per SM (128 registers) is no limit.
template <class A, class CK, class RD, bool kInner>
__global__ void __launch_bounds__(kThreads, 4) gdn_replay_small_kernel(GdnReplayLaunch l, int vtiles, int ring_l2) {
  replay_step<A, CK, RD, kInner, kPresetK, false, false, true>(l, vtiles, ring_l2);
}

template <class A, class CK, class RD>
void launch_replay(const GdnReplayLaunch& l, int vtiles, cudaStream_t stream) {
  const long long blocks = static_cast<long long>(l.step.batch) * l.step.dims.HV * vtiles;
  if (blocks > 0x7FFFFFFFLL) bad_launch("gdn_replay_step", "batch · HV · tiles exceeds the grid limit");
  const bool inner = l.route == GdnRoute::Inner;
  const ReplaySmem L{l.step.dims.K, l.interval, (l.step.dims.V + vtiles - 1) / vtiles,
                     inner ? flush_terms(l.flush_arith) : 1, kIsScaled8<RD> ? 1 : 0};
  const size_t bytes = static_cast<size_t>(L.floats()) * sizeof(float);
  if (bytes > 227 * 1024)
    bad_launch("gdn_replay_step", "needs " + std::to_string(bytes) + " bytes of shared memory (over 227 KiB): lower "
               "the interval, or a flush_arith other than 3xtf32 (three staged terms per entry)");
  const bool preset = l.step.dims.K == kPresetK;
  // Split value dims at a small batch: the small-batch prologue. Split at serving batch (a forced v_tiles, or
  // gdn_replay_v_tiles' choice there), the serving kernels, reading no ring entry ahead.
  const bool small = vtiles > 1 && gdn_small_batch(l.step.dims, l.step.batch);
  void (*kernel)(GdnReplayLaunch, int, int) = nullptr;
  if (!inner) {
    if constexpr (sizeof(CK) == 4 && std::is_void<RD>::value)
      kernel = preset ? gdn_replay_rec_kernel<A, CK, RD, kPresetK> : gdn_replay_rec_kernel<A, CK, RD, 0>;
    else
      kernel = preset ? gdn_replay_kernel<A, CK, RD, false, kPresetK, false, false>
                      : gdn_replay_kernel<A, CK, RD, false, 0, false, false>;
  } else if constexpr (sizeof(CK) == 4) {
    kernel = preset ? gdn_replay_inner32_kernel<A, CK, RD, kPresetK, false, false>
                    : gdn_replay_inner32_kernel<A, CK, RD, 0, false, false>;
  } else {
    kernel = preset ? gdn_replay_inner16_kernel<A, CK, RD, kPresetK> : gdn_replay_inner16_kernel<A, CK, RD, 0>;
  }
  if (inner && !l.mma_fold) {  // the FFMA fold: the same kernels compiled for a run-time K
    if constexpr (sizeof(CK) == 4)
      kernel = gdn_replay_inner32_kernel<A, CK, RD, 0, false, false>;
    else
      kernel = gdn_replay_inner16_kernel<A, CK, RD, 0>;
  }
  if constexpr (std::is_same<A, __nv_bfloat16>::value) {
    if (small && preset && (l.mma_fold || !inner))
      kernel = inner ? gdn_replay_small_kernel<A, CK, RD, true> : gdn_replay_small_kernel<A, CK, RD, false>;
  }
  // A flush arithmetic other than fp32 (inner route), and stochastic rounding where a 16-bit copy is stored (an fp32
  // checkpoint stores without rounding): kernels for any K (their speed is not what such runs measure, and each
  // instantiation costs build time).
  const bool arith = inner && l.flush_arith != Arith::FP32;
  if (arith) kernel = gdn_replay_kernel<A, CK, RD, true, 0, false, true>;
  if constexpr (sizeof(CK) == 2 || !std::is_void<RD>::value) {
    if (l.step.rounding == Rounding::Stochastic)
      kernel = arith   ? gdn_replay_kernel<A, CK, RD, true, 0, true, true>
               : inner ? gdn_replay_kernel<A, CK, RD, true, 0, true, false>
                       : gdn_replay_kernel<A, CK, RD, false, 0, true, false>;
  }
  if (bytes > 48 * 1024) {  // above the default dynamic limit; a cheap attribute set, no synchronisation
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  }
  kernel<<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(l, vtiles, small ? l.interval - 1 : 0);
  CUDA_CHECK_LAUNCH(stream);
}

template <class A>
void dispatch_state(const GdnReplayLaunch& l, int vtiles, cudaStream_t stream) {
  if (l.dual && is_scaled_format(l.read_format)) {  // not in with_checkpoint_types' list
    if (l.read_format == Format::E4M3) return launch_replay<A, float, Scaled8<Format::E4M3>>(l, vtiles, stream);
    if (l.read_format == Format::E5M2) return launch_replay<A, float, Scaled8<Format::E5M2>>(l, vtiles, stream);
    return launch_replay<A, float, Scaled8<Format::INT8>>(l, vtiles, stream);
  }
  with_checkpoint_types(l.dual, l.ckpt_format, l.read_format, [&](auto ck, auto rd) {
    launch_replay<A, typename decltype(ck)::type, typename decltype(rd)::type>(l, vtiles, stream);
  });
}

}  // namespace gdn

int gdn_replay_v_tiles(const GdnReplayLaunch& l) {
  if (l.v_tiles > 0) return l.v_tiles;
  return gdn_v_tiles(l.step.dims, l.step.batch, l.dual ? l.read_format : l.ckpt_format);
}

void gdn_replay_step(const GdnReplayLaunch& l, cudaStream_t stream) {
  const char* what = "gdn_replay_step";
  if (l.flush_arith != Arith::FP32 && l.flush_arith != Arith::TF32 && l.flush_arith != Arith::TF32x3 &&
      l.flush_arith != Arith::BF16)
    gdn::bad_launch(what, "flush_arith must be fp32, tf32, 3xtf32 or bf16 (got " + arith_name(l.flush_arith) + ")");
  if (l.flush_arith != Arith::FP32 && l.route != GdnRoute::Inner)
    gdn::bad_launch(what, "flush_arith " + arith_name(l.flush_arith) + " needs route inner (the reconstruct route's "
                          "flush is its fp32 rebuild of S)");
  gdn::check_step_args(what, l.step, true);
  // The tunables are checked before an empty launch returns (a sweep's bad value shows at once).
  if (l.v_tiles < 0 || l.v_tiles > l.step.dims.V)
    gdn::bad_launch(what, "v_tiles must be 0 (automatic) or 1..V (got " + std::to_string(l.v_tiles) + ")");
  if (l.step.batch == 0) return;
  if (l.interval < 1 || l.interval > kGdnMaxInterval)
    gdn::bad_launch(what, "interval must be in 1.." + std::to_string(kGdnMaxInterval) + " (got " +
                              std::to_string(l.interval) + ")");
  if (l.capacity < l.interval) gdn::bad_launch(what, "capacity must be >= interval");
  if (l.route != GdnRoute::Inner && l.route != GdnRoute::Reconstruct) gdn::bad_launch(what, "route must be inner or reconstruct");
  if (!l.d_ckpt || !l.d_ring_u || !l.d_ring_k || !l.d_ring_G || !l.d_fill || !l.d_arrive)
    gdn::bad_launch(what, "d_ckpt, d_ring_u, d_ring_k, d_ring_G, d_fill and d_arrive must all be set");
  if (l.step.dims.K % 8 != 0) gdn::bad_launch(what, "key dim K must be a multiple of 8 (16-byte ring loads of k)");
  if (reinterpret_cast<uintptr_t>(l.d_ring_k) % 16 != 0) gdn::bad_launch(what, "d_ring_k must be 16-byte aligned");
  if (l.dual) {
    if (l.ckpt_format != Format::FP32) gdn::bad_launch(what, "a dual checkpoint's update copy must be fp32");
    const bool scaled = is_scaled_format(l.read_format);
    if (l.read_format != Format::BF16 && l.read_format != Format::FP16 && !scaled)
      gdn::bad_launch(what, "read_format must be bf16, fp16, e4m3, e5m2 or int8 (got " + format_name(l.read_format) + ")");
    if (!l.d_read) gdn::bad_launch(what, "d_read must be set for a dual checkpoint");
    if (scaled && (!l.d_read_scale || reinterpret_cast<uintptr_t>(l.d_read_scale) % 4 != 0))
      gdn::bad_launch(what, "d_read_scale must be set (4-byte aligned) for a " + format_name(l.read_format) + " read copy");
    gdn::check_state_rows(what, l.step.dims.K, gdn::state_vec(l.read_format), l.d_read);
  } else {
    if (l.ckpt_format != Format::FP32 && l.ckpt_format != Format::BF16 && l.ckpt_format != Format::FP16)
      gdn::bad_launch(what, "ckpt_format must be fp32, bf16 or fp16 (got " + format_name(l.ckpt_format) + ")");
  }
  gdn::check_state_rows(what, l.step.dims.K, gdn::state_vec(l.ckpt_format), l.d_ckpt);
  const int vtiles = gdn_replay_v_tiles(l);
  if (l.step.act_format == Format::BF16)
    gdn::dispatch_state<__nv_bfloat16>(l, vtiles, stream);
  else
    gdn::dispatch_state<float>(l, vtiles, stream);
}

}  // namespace rssm
