// GDN speculative verify kernels (gdn_kernels.h, issue 12): the replay verify (checkpoint + circular ring, no draft
// state written) and the eager baseline (one state written per position). Conventions: common/spec_kernels.h.
//
// Replay verify, per (row, value head h), window positions s = 0 .. T−1, committed entries e < h' (h' = fill, or 0
// after the deferred flush), G_s = G_{s−1} + g_s with G_{−1} the last committed entry's G (0 after a flush):
//   u_s = bf16(β_s·(v_s − α_s·(e^{G_{s−1}}·(S_c·k_s) + Σ_{e<h'} W^k_{s,e}·u_e + Σ_{j<s} W^k_{s,h'+j}·u_j)))
//   o_s = e^{G_s}·(S_c·q_s) + Σ_{e<h'} W^q_{s,e}·u_e + Σ_{j<s} W^q_{s,h'+j}·u_j + W^q_{s,h'+s}·u_s
//   W^k_{s,x} = e^{G_{s−1}−G_x}·(k_x·k_s),  W^q_{s,x} = e^{G_s−G_x}·(k_x·q_s)   (k_x the bf16 buffered key)
// i.e. the chunked form of METHOD.md: the T×T strictly lower-triangular system (I + A)·U = R solved by forward
// substitution per state row, after one pass over the checkpoint that forms S_c·k_s and S_c·q_s for all T positions
// (a V×K by K×2T product). Every sum, weight and rounding is the one gdn_replay_step (inner route) performs when it
// runs the same tokens one launch each, in the same order (ring entries in order, the window's after the committed
// ones; the dots' trees; the flush's fold), so an all-accepted window equals T standard steps wherever the flushes
// coincide. The deferred flush folds the h committed entries as gdn_replay_step's flush (S ← e^{G_{h−1}}·S, then
// + (e^{G_{h−1}−G_e}·u_e)·k_e for e in order), rounds to the checkpoint format (dual: writes the read copy from the
// same registers) and the window then reads what a later launch would read: the stored checkpoint, or for a dual
// checkpoint the read copy's values. Where K = 128, in windows of 3 or 4 positions (kVerifyMma), the fold runs on
// tensor cores (verify_flush_mma, as gdn_replay_step's: exact products, fp32 sums in the tensor core's order) and the
// window's dots of the folded rows are summed in that layout: such a flushing window equals the standard steps to
// fp32 rounding, not bit for bit.
//
// Work split (as gdn_replay.cu): one CTA of 128 threads per (row, value head, V-tile). Prologue: q_s, k_s of all T
// positions normalised together (one latency, not T), gates, the window's G, the key dots of every visible entry
// against every k_s and q_s (one warp per entry, the 2T sums reduced with one reduce_scatter), the weights W (one
// thread per pair). Stream: the tile's checkpoint rows in batches of kVerifyUnroll rows a thread, each key/query chunk
// loaded from shared memory once per batch and used for all its rows; the batch's U·2T dots reduced with one
// reduce_scatter (K = 128 fixes the lane count at compile time) and left in shared memory. Substitution: one thread
// per state row, the committed ring terms, then the T positions in order; it writes o_s and the ring's u. The
// per-position scalars and W live in shared memory.
// Writes of the ring (positions' entries only; no other CTA of the launch reads them): u rows by the tile that owns
// them, k_s by tile 0 of the first value head of the key group, G_s by tile 0 of the head.
//
// Eager verify: per state row, the row of draft d_cur is loaded, then positions s = 0 .. T−1 update it in registers
// and store it into draft s (gdn_eager_step's arithmetic and order per position, so T eager steps on the committed
// stream give the same bits). A row is read and written only by the lanes that hold it, all its loads before its
// stores, so overwriting draft d_cur in place is safe. The tile's v_s sit in shared memory and each position's dots
// of the batch's rows are reduced together (row_sums), off the update's chain of dependent latencies (902 -> 771 µs
// at batch 256, T = 4; 70% -> 82% of the copy ceiling).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "common/cuda_check.h"
#include "common/kernel_footprint.cuh"
#include "common/mma_fold.cuh"
#include "common/spec_kernels.h"
#include "gdn/gdn_device.cuh"

namespace rssm {
namespace gdn {
namespace {

__host__ __device__ inline int up4(int n) { return (n + 3) & ~3; }

// Rows in flight per thread in the verify stream. The batch's 2T dots per row are reduced together, and U·2T = 16
// values over a 32-lane row leave each lane at most one complete sum to store: no loop over a run-time count, and
// 16 dot registers. Fewer registers also raise occupancy: at U = 4 (T = 4: 122 registers, 4 CTAs per SM) the stream
// spent 145 instructions per state row, 32 of them the dots' FMAs (ncu source counters, H200).
template <int TP>
constexpr int kVerifyUnroll = 2 * TP >= 16 ? 1 : 2 * TP >= 4 ? 16 / (2 * TP) : 4;
// Whether the stream loads the next batch of rows before this batch's arithmetic, and the resident CTAs per SM the
// kernel's registers are capped for (0: ptxas's choice). bench_spec_cuda on the H200, fp32 checkpoint, batch 256:
// T <= 4 runs best as ptxas builds it without the look-ahead (72-80 registers, 6-7 CTAs; the look-ahead or a cap
// cost 2-12%); T = 8 held 126 registers (4 CTAs) and gains 7-10% from 96 (5 CTAs, the shared-memory limit there)
// with the look-ahead. T = 4 is capped at 6 CTAs (80 registers, what ptxas chose for the fp32 checkpoint before the
// tensor-core flush): the flush's staging took that kernel to 96 (5 CTAs) uncapped, and capped it spills nothing.
template <int TP>
constexpr int kVerifyMinBlocks = TP <= 2 ? 0 : TP == 4 ? 6 : TP == 8 ? 5 : 4;
template <int TP>
constexpr bool kVerifyLookAhead = TP >= 8;
// The tensor-core flush (verify_flush_mma) runs the windows of 3 and 4 positions (TP = 4), folding each 8-row block
// in two halves of 64 columns (16 accumulators a thread, not 32: one block at a time spilled 12 bytes at the 6-CTA
// cap). bench_spec_cuda on the H200 (fp32 checkpoint, batch 256, against the FFMA kernel in one process,
// benchmarks/experiments/README.md "the verify's flush on tensor cores"): T = 4 flush 504.6 -> 472.7 us, non-flush
// 286.3 -> 290.7, amortised 325.6 -> 323.5; T = 2 (TP = 2, uncapped: the staging took it from 80 to 96 registers)
// was 8% slower at every kind of window, and T = 8 spilled more at its 5-CTA cap (24/76 -> 100/152 bytes).
template <int TP>
constexpr bool kVerifyMma = TP == 4;
__host__ __device__ inline bool verify_uses_mma(int K, int T) { return K == kMmaCols && T > 2 && T <= 4; }
constexpr int kVerifyMmaParts = 2;

// Window shared memory, in floats. Regions holding keys start on 16-byte boundaries (read as float4).
struct VerifySmem {
  int K, T, E, rows;  // E = max committed entries; rows = tile rows
  __host__ __device__ int ldk() const { return up4(K); }
  __host__ __device__ int ne() const { return E + T; }       // visible entries: committed + window
  __host__ __device__ int ldr() const { return rows + 1; }   // odd: a row's 2T dots land in distinct banks
  __host__ __device__ int off_q() const { return 0; }                          // [T][ldk] normalised q_s (scaled)
  __host__ __device__ int off_k() const { return off_q() + T * ldk(); }        // [T][ldk] normalised k_s
  __host__ __device__ int off_kb() const { return off_k() + T * ldk(); }       // [T][ldk] bf16(k_s)
  __host__ __device__ int off_red() const { return off_kb() + T * ldk(); }     // [2·kMaxSpecWindow][kWarps]
  __host__ __device__ int off_g() const { return off_red() + 2 * kMaxSpecWindow * kWarps; }  // [16] log-gate g_s
  __host__ __device__ int off_alpha() const { return off_g() + kMaxSpecWindow; }             // [16] α_s
  __host__ __device__ int off_beta() const { return off_alpha() + kMaxSpecWindow; }          // [16] β_s
  __host__ __device__ int off_G() const { return off_beta() + kMaxSpecWindow; }              // [16] G_s
  __host__ __device__ int off_dprev() const { return off_G() + kMaxSpecWindow; }             // [16] e^{G_{s−1}}
  __host__ __device__ int off_dcur() const { return off_dprev() + kMaxSpecWindow; }          // [16] e^{G_s}
  __host__ __device__ int off_Gc() const { return off_dcur() + kMaxSpecWindow; }             // [E] committed G_e
  __host__ __device__ int off_wf() const { return off_Gc() + up4(E); }                       // [E] flush weights
  __host__ __device__ int off_wk() const { return off_wf() + up4(E); }       // [T][ne] k dots, then W^k
  __host__ __device__ int off_wq() const { return off_wk() + T * ne(); }     // [T][ne] q dots, then W^q
  __host__ __device__ int off_sk() const { return off_wq() + T * ne(); }     // [T][ldr] S_c·k_s per tile row
  __host__ __device__ int off_sq() const { return off_sk() + T * ldr(); }    // [T][ldr] S_c·q_s per tile row
  __host__ __device__ int off_keys() const { return up4(off_sq() + T * ldr()); }  // [E][ldk] committed keys (flush)
  __host__ __device__ int off_uw() const { return off_keys() + E * ldk(); }  // [E][rows] flush: w_e·u_e per row
  // The tensor-core flush (verify_flush_mma, K = 128) stages its operands over keys and uw instead, in
  // common/mma_fold.cuh's fragment order; k-steps of 16 over the committed entries.
  __host__ __device__ int mma_ks() const { return (E + 15) / 16; }
  __host__ __device__ int off_mma_a() const { return off_keys(); }
  __host__ __device__ int off_mma_b() const { return off_keys() + mma_a_floats(mma_ks()); }
  __host__ __device__ int floats() const {
    const int fma = off_uw() + E * rows, mma = verify_uses_mma(K, T) ? off_mma_b() + mma_b_floats(mma_ks(), rows) : 0;
    return fma > mma ? fma : mma;
  }
};

template <int kVec>
__device__ inline void load_f32(const float* p, float v[kVec]) {
#pragma unroll
  for (int k = 0; k < kVec; k += 4) {
    const float4 q = *reinterpret_cast<const float4*>(p + k);
    v[k] = q.x, v[k + 1] = q.y, v[k + 2] = q.z, v[k + 3] = q.w;
  }
}

// q_s, k_s of key head hk for the T positions of a row (input rows row·T + s), L2-normalised into s_q / s_k
// ([T][ld]) and bf16(k_s) into s_kb when set. The per-position arithmetic is load_normalised's (per-thread fmaf
// partial sums, warp tree, warps in order), with every position's loads issued together. s_red: [2·TP][kWarps].
// Ends with __syncthreads.
// `before_barrier` runs once the window's loads are consumed, before the first barrier: what it writes to shared memory
// is visible on return (the verify kernel's cursor, read before the call and stored there, so that thread 0's loads
// of q and k are not held a memory latency behind the cursor).
template <class A, int TP, class F = NoOp>
__device__ void normalise_window(const GdnStepArgs& a, int row, int T, int hk, int ld, float* s_q, float* s_k,
                                 float* s_kb, float* s_red, F before_barrier = F()) {
  const int K = a.dims.K, tid = threadIdx.x, warp = tid / 32;
  const long long qks = or_default(a.qk_stride, static_cast<long long>(a.dims.HK) * K);
  float part[2 * TP];
#pragma unroll
  for (int s = 0; s < TP; ++s) {
    float sq = 0.0f, sk = 0.0f;
    if (s < T) {
      const long long base = static_cast<long long>(row * T + s) * qks + static_cast<long long>(hk) * K;
      const A* q = static_cast<const A*>(a.d_q) + base;
      const A* k = static_cast<const A*>(a.d_k) + base;
      for (int i = tid; i < K; i += kThreads) {
        const float qi = to_f32(q[i]), ki = to_f32(k[i]);
        s_q[s * ld + i] = qi, s_k[s * ld + i] = ki;
        sq = fmaf(qi, qi, sq);
        sk = fmaf(ki, ki, sk);
      }
    }
    part[s] = sq, part[TP + s] = sk;
  }
  const Scattered r = reduce_scatter<2 * TP>(part, 32);
  if (r.owner) {
#pragma unroll
    for (int i = 0; i < 2 * TP; ++i)
      if (i < r.count) s_red[(r.first + i) * kWarps + warp] = part[i];
  }
  before_barrier();
  __syncthreads();
  const float qscale = 1.0f / sqrtf(static_cast<float>(K));
  for (int s = 0; s < T; ++s) {
    float tq = 0.0f, tk = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) tq += s_red[s * kWarps + w], tk += s_red[(TP + s) * kWarps + w];
    const float iq = l2norm_factor<float>(tq, a.eps, qscale), ik = l2norm_factor<float>(tk, a.eps, 1.0f);
    for (int i = tid; i < K; i += kThreads) {
      s_q[s * ld + i] *= iq;
      s_k[s * ld + i] *= ik;
      if (s_kb) s_kb[s * ld + i] = round_bf16(s_k[s * ld + i]);
    }
  }
  __syncthreads();
}

// Per-CTA constants of the verify's stream and substitution phases.
struct VerifyCtx {
  int K, HV, V, h, row, slot, T, hw, hc, c, rsub, lanes, rows_per_pass, v_begin, v_end;
  int l2_ahead;  // GdnVerifyLaunch::l2_ahead (>= 0: the stream's rolling prefetch)
  float dflush;  // e^{G_{h−1}} of the deferred flush
};

// The stream phase: the CTA's tile of `src` read once; a flushing CTA (kFlush) first folds the committed entries
// into it and writes it back (dual: also the read copy rd); then the 2T dots of each row go to shared memory.
// kL: lanes of a row when K is fixed at compile time (the kernel's kK), else 0.
template <class T, class R, bool kFlush, int TP, int kL>
__device__ void verify_stream(const VerifyCtx& t, T* src, R* rd, float* smem, const VerifySmem& L) {
  constexpr int kVec = StateVec<T>::kVec;
  constexpr int U = kVerifyUnroll<TP>;
  const int ldk = L.ldk(), ldr = L.ldr();
  const float* s_q = smem + L.off_q() + t.c * kVec;
  const float* s_k = smem + L.off_k() + t.c * kVec;
  const float* s_keys = smem + L.off_keys() + t.c * kVec;
  const float* s_uw = smem + L.off_uw();
  float* s_sk = smem + L.off_sk();
  float* s_sq = smem + L.off_sq();
  const int span = t.rows_per_pass * U;
  const int ahead = t.l2_ahead >= 0 ? (t.l2_ahead + 2) * span : 0;  // the prefetch window's end, rows past i0
  // With the look-ahead (kVerifyLookAhead) the next batch's rows are loaded before this batch's arithmetic, so the
  // state loads stay in flight under the dots and their reduction.
  uint4 next[U];
  const auto load_batch = [&](int b0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = b0 + u * t.rows_per_pass + t.rsub;
      next[u] = i < t.v_end ? __ldcs(reinterpret_cast<const uint4*>(src + static_cast<long long>(i) * t.K))
                            : make_uint4(0, 0, 0, 0);
    }
  };
  if constexpr (kVerifyLookAhead<TP>) load_batch(t.v_begin);
  for (int i0 = t.v_begin; i0 < t.v_end; i0 += span) {
    if (ahead > 0 && i0 != t.v_begin) prefetch_rows(src - t.c * kVec, t.K, i0 + ahead - span, min(i0 + ahead, t.v_end));
    float s[U][kVec];
    int il[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {  // rows past the tile read as zeros; their results are dropped
      const int i = i0 + u * t.rows_per_pass + t.rsub;
      il[u] = min(i, t.v_end - 1) - t.v_begin;
      if constexpr (kVerifyLookAhead<TP>) {
        StateVec<T>::unpack(next[u], s[u]);
      } else if (i < t.v_end) {  // every load of the batch first: U independent 16-byte loads in flight
        StateVec<T>::load(src + static_cast<long long>(i) * t.K, s[u]);
      } else {
#pragma unroll
        for (int k = 0; k < kVec; ++k) s[u][k] = 0.0f;
      }
    }
    if constexpr (kVerifyLookAhead<TP>)
      if (i0 + span < t.v_end) load_batch(i0 + span);
    if constexpr (kFlush) {  // S_c <- e^{G_{h−1}}·S_c + Σ_e (e^{G_{h−1}−G_e}·u_e[i])·k_e, e in order
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int k = 0; k < kVec; ++k) s[u][k] *= t.dflush;
      for (int e = 0; e < t.hc; ++e) {
        float key[kVec];
        load_f32<kVec>(s_keys + e * ldk, key);
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const float w = s_uw[e * L.rows + il[u]];
#pragma unroll
          for (int k = 0; k < kVec; ++k) s[u][k] = fmaf(w, key[k], s[u][k]);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int i = i0 + u * t.rows_per_pass + t.rsub;
        if (i < t.v_end) {
          StateVec<T>::store(src + static_cast<long long>(i) * t.K, s[u]);  // s now holds the stored values
          if constexpr (!std::is_void<R>::value) {
            static_assert(kVec == 4, "dual read copies are written from an fp32 update copy");
            store_narrow4(rd + static_cast<long long>(i) * t.K, s[u]);
          }
        }
        if constexpr (!std::is_void<R>::value) round_narrow4<R>(s[u]);  // the window reads the read copy's values
      }
    }
    // The 2T dots of each row, the batch's rows reduced together (value u·2T + x: row u, dot x; x < T against k_x,
    // x >= T against q_{x−T}): each value's additions are row_sum's tree, as gdn_replay_step's.
    constexpr int N = U * 2 * TP;
    float d[N];
#pragma unroll
    for (int x = 0; x < N; ++x) d[x] = 0.0f;
#pragma unroll
    for (int p = 0; p < TP; ++p) {
      if (p < t.T) {  // each position's key and query chunk loaded once for the U rows
        float kv[kVec], qv[kVec];
        load_f32<kVec>(s_k + p * ldk, kv);
        load_f32<kVec>(s_q + p * ldk, qv);
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int k = 0; k < kVec; ++k) {
            d[u * 2 * TP + p] = fmaf(s[u][k], kv[k], d[u * 2 * TP + p]);
            d[u * 2 * TP + TP + p] = fmaf(s[u][k], qv[k], d[u * 2 * TP + TP + p]);
          }
      }
    }
    const Scattered r = reduce_scatter<N, kL>(d, t.lanes);
    if (r.owner) {
#pragma unroll
      for (int x = 0; x < N; ++x) {
        if (x >= r.count) break;
        const int idx = r.first + x, u = idx / (2 * TP), dot = idx % (2 * TP), p = dot % TP;
        const int i = i0 + u * t.rows_per_pass + t.rsub;
        if (p < t.T && i < t.v_end) (dot < TP ? s_sk : s_sq)[p * ldr + i - t.v_begin] = d[x];
      }
    }
  }
}

// The flushing window's stream on tensor cores (K = 128; common/mma_fold.cuh): each warp takes 8-row blocks of the
// tile, decays them, folds the ks staged k-steps of committed entries, stores them (dual: the read copy too), then
// forms the window's 2T dots of its rows from the stored values (dual: the read copy's) over the row's 8 lanes. T: the
// checkpoint type (the update copy when dual), R the read-copy type or void; `head`, `rd`: row 0, column 0 of the
// head. The FFMA fold (verify_stream) issued per state element and entry one FFMA and a shared-memory weight load.
template <class T, class R, int TP>
__device__ void verify_flush_mma(const VerifyCtx& t, T* head, R* rd, float* smem, const VerifySmem& L, int ks) {
  constexpr int kV = StateVec<T>::kVec, kP = kVerifyMmaParts;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  const uint4* A = reinterpret_cast<const uint4*>(smem + L.off_mma_a()) + lane;
  const uint2* B = reinterpret_cast<const uint2*>(smem + L.off_mma_b());
  const int rows = t.v_end - t.v_begin, ldk = L.ldk(), ldr = L.ldr();
  float* s_sk = smem + L.off_sk();
  float* s_sq = smem + L.off_sq();
  // The tile as its own pointers (off0 = 0 below): forming each row's address from head and v_begin instead left the
  // T = 4 kernel 4 bytes of spills at its 80-register cap.
  T* tile = head + static_cast<long long>(t.v_begin) * kMmaCols;
  R* rd_tile = nullptr;
  if constexpr (!std::is_void<R>::value) rd_tile = rd + static_cast<long long>(t.v_begin) * kMmaCols;
  const auto part = [&](auto part_tag, int nb) {
    constexpr int kPart = decltype(part_tag)::value;
    const int il0 = nb * 8 + 2 * tig;
    float acc[2][16 / kP];
    mma_load_block<T, kPart, kP>(acc, tile, 0, il0, rows, g);
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int c = 0; c < 16 / kP; ++c) acc[r][c] *= t.dflush;
    mma_fold_block<kPart, kP>(acc, A, B, nb, ks, g, tig);
    mma_store_block<T, R, kPart, kP>(acc, tile, rd_tile, 0, il0, rows, g);
    if constexpr (!std::is_void<R>::value)  // the window reads the read copy's values
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int q = 0; q < 4 / kP; ++q) round_narrow4<R>(&acc[r][4 * q]);
    // Position by position, so that only 4 sums are live: dk row 0, dk row 1, dq row 0, dq row 1; a later part adds
    // its columns' sums to the earlier parts' (the same lane stored them).
#pragma unroll
    for (int p = 0; p < TP; ++p) {
      if (p >= t.T) break;
      float d[4];
      mma_row_dots<kV, kPart, kP>(acc, smem + L.off_k() + p * ldk, smem + L.off_q() + p * ldk, g, d);
      if (g < 4) {  // lanes g = 0..3 each store one of the four sums (every lane holds all four)
        const int il = il0 + (g & 1);
        float* dst = ((g & 2) ? s_sq : s_sk) + p * ldr + il;
        if (il < rows) *dst = kPart == 0 ? d[g] : *dst + d[g];
      }
    }
  };
  for (int nb = warp; nb < (rows + 7) / 8; nb += kWarps) {
    part(std::integral_constant<int, 0>{}, nb);
    if constexpr (kP > 1) part(std::integral_constant<int, 1>{}, nb);
  }
}

// CK: checkpoint type (the update copy when dual); RD: read-copy type, void when the checkpoint is shared.
// kK: kPresetK or 0 (K at run time, gdn_device.cuh).
template <class A, class CK, class RD, int TP, int kK>
__global__ void __launch_bounds__(kThreads, kVerifyMinBlocks<TP>) gdn_verify_kernel(GdnVerifyLaunch l, int vtiles) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  __shared__ int s_fill, s_base;
  const GdnStepArgs& a = l.step;
  const int HK = a.dims.HK, HV = a.dims.HV, K = kK > 0 ? kK : a.dims.K, V = a.dims.V, vpk = HV / HK, T = l.window;
  const int per_row = HV * vtiles;
  const int row = blockIdx.x / per_row;
  const int h = (blockIdx.x % per_row) / vtiles, tile = blockIdx.x % vtiles;
  const int slot = a.d_slot[row];
  if (slot < 0) return;  // padded row: nothing read or written
  const int hk = h / vpk, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int tile_rows = (V + vtiles - 1) / vtiles;
  const int E = spec_max_committed(T, l.interval, l.hist);
  const VerifySmem L{K, T, E, tile_rows};
  constexpr bool kDual = !std::is_void<RD>::value;
  using Src = typename std::conditional<kDual, RD, CK>::type;  // what a non-flushing window reads
  const int v_begin = tile * tile_rows, v_end = min(V, v_begin + tile_rows);
  const long long head_off = (static_cast<long long>(slot) * HV + h) * V * K;
  {
    // The tile's first chunks (l2_ahead < 0: all of it) on their way into L2 while the prologue runs its chain of
    // dependent small loads; the stream prefetches the rest as it goes (a hint: a dual flushing window streams the
    // update copy instead).
    const int span = kThreads / (K / StateVec<Src>::kVec) * kVerifyUnroll<TP>;
    const int end = l.l2_ahead < 0 ? v_end : min(v_end, v_begin + (l.l2_ahead + 2) * span);
    prefetch_rows(static_cast<const Src*>(kDual ? l.d_read : l.d_ckpt) + head_off, K, v_begin, end);
  }
  const int cap = l.capacity, mask = cap - 1;
  // At TP = 2 thread 0 reads the cursor into registers and stores it in normalise_window's hook, once the window's
  // loads of q and k are issued and consumed, so they are not held a memory latency behind it. On an H100 that timed
  // 2-9% faster at T = 2 and 0.2-2.5% slower at T = 4-8 (more spill there), which keep the store before the call
  // (benchmarks/experiments/README.md, "The GDN verify's cursor after the window's loads"). The two branches repeat
  // the clamp on purpose: each is, to the PTX, the code that was timed (scripts/ptx_diff.sh); a shared form changes
  // both.
  if constexpr (TP == 2) {
    int fill0 = 0, base0 = 0;
    if (tid == 0) fill0 = __ldcg(&l.d_fill[slot]), base0 = __ldcg(&l.d_base[slot]);  // the previous commit's, read-only
    normalise_window<A, TP>(a, row, T, hk, L.ldk(), smem + L.off_q(), smem + L.off_k(), smem + L.off_kb(),
                            smem + L.off_red(), [&] {  // ends in a barrier: s_fill, s_base visible
                              if (tid == 0) {
                                s_fill = min(max(fill0, 0), E);  // a corrupt cursor must not send ring accesses astray
                                s_base = base0 & mask;
                              }
                            });
  } else {
    if (tid == 0) {  // written by the previous commit, read-only here
      s_fill = min(max(__ldcg(&l.d_fill[slot]), 0), E);  // a corrupt cursor must not send ring accesses astray
      s_base = __ldcg(&l.d_base[slot]) & mask;
    }
    normalise_window<A, TP>(a, row, T, hk, L.ldk(), smem + L.off_q(), smem + L.off_k(), smem + L.off_kb(),
                            smem + L.off_red());  // ends in a barrier: s_fill, s_base visible
  }
  const int hfill = s_fill, base = s_base;
  const bool flush = spec_flushes(hfill, l.interval, T, l.hist);
  const int hw = flush ? 0 : hfill;  // committed entries the window reads
  // The flush folds on tensor cores (verify_flush_mma) where K is the compiled 128 (kVerifyMma); ks_mma: its
  // k-steps.
  constexpr bool kMma = kK == kMmaCols && kVerifyMma<TP>;
  const int ks_mma = kMma && flush ? (hfill + 15) / 16 : 0;
  const float* rG = l.d_ring_G + static_cast<long long>(slot) * cap * HV + h;                                    // + idx·HV
  const uint16_t* ru = l.d_ring_u + static_cast<long long>(slot) * cap * HV * V + static_cast<long long>(h) * V;  // + idx·HV·V
  const uint16_t* rk = l.d_ring_k + static_cast<long long>(slot) * cap * HK * K + static_cast<long long>(hk) * K;  // + idx·HK·K
  // The committed u rows of the tile, read by the substitution (or the flush's weights below), towards L2.
  for (int e = tid; e < hfill; e += kThreads)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(ru + static_cast<long long>((base + e) & mask) * HV * V + v_begin));
  if (tid < T) {
    const Gate gt = gate_of<A>(a, row * T + tid, h);
    smem[L.off_g() + tid] = gt.g, smem[L.off_alpha() + tid] = gt.alpha, smem[L.off_beta() + tid] = gt.beta;
  }
  for (int e = tid; e < hfill; e += kThreads) smem[L.off_Gc() + e] = rG[static_cast<long long>((base + e) & mask) * HV];
  const int ldk = L.ldk(), ne = L.ne();
  if constexpr (kMma) {
    // The fold's A operand: fragment f = (k-step, m-tile, lane) holds the keys of entries 16·k + 2·tig + {0, 1, 8, 9}
    // at the lane's two columns of the m-tile, from the ring; zero past the committed entries.
    constexpr int kVF = StateVec<CK>::kVec;
    for (int f = tid; f < ks_mma * 256; f += kThreads)
      reinterpret_cast<uint4*>(smem + L.off_mma_a())[f] = mma_a_fragment(f, kVF, [&](int e, int col) -> uint16_t {
        return e < hfill ? rk[static_cast<long long>((base + e) & mask) * HK * K + col] : uint16_t(0);
      });
  } else if (flush) {  // the committed keys in fp32 for the fold, one warp per entry
    for (int e = warp; e < hfill; e += kWarps)
      for (int n = lane * 8; n < K; n += 32 * 8) {
        const uint4 q = *reinterpret_cast<const uint4*>(rk + static_cast<long long>((base + e) & mask) * HK * K + n);
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          smem[L.off_keys() + e * ldk + n + 2 * i] = __uint_as_float(w[i] << 16);
          smem[L.off_keys() + e * ldk + n + 2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
        }
      }
  }
  // Key dots of every visible entry x (committed x < hw from the ring, window x = hw + j as bf16(k_j)) against every
  // k_s and q_s: one warp per entry, lanes over 8-element chunks in gdn_replay_step's order.
  for (int x = warp; x < hw + T; x += kWarps) {
    float dd[2 * TP];
#pragma unroll
    for (int p = 0; p < 2 * TP; ++p) dd[p] = 0.0f;
    for (int n = lane * 8; n < K; n += 32 * 8) {
      float b[8];
      if (x < hw) {
        const uint4 q = *reinterpret_cast<const uint4*>(rk + static_cast<long long>((base + x) & mask) * HK * K + n);
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) b[2 * i] = __uint_as_float(w[i] << 16), b[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) b[i] = smem[L.off_kb() + (x - hw) * ldk + n + i];
      }
#pragma unroll
      for (int p = 0; p < TP; ++p) {
        if (p < T) {
          float kp[8], qp[8];
          load_f32<8>(smem + L.off_k() + p * ldk + n, kp);
          load_f32<8>(smem + L.off_q() + p * ldk + n, qp);
#pragma unroll
          for (int i = 0; i < 8; ++i) dd[p] = fmaf(b[i], kp[i], dd[p]), dd[TP + p] = fmaf(b[i], qp[i], dd[TP + p]);
        }
      }
    }
    const Scattered r = reduce_scatter<2 * TP>(dd, 32);
    if (r.owner) {
#pragma unroll
      for (int i = 0; i < 2 * TP; ++i) {
        if (i >= r.count) break;
        const int idx = r.first + i, p = idx < TP ? idx : idx - TP;
        if (p < T) smem[(idx < TP ? L.off_wk() : L.off_wq()) + p * ne + x] = dd[i];
      }
    }
  }
  __syncthreads();  // gates, committed G, keys, dots visible
  if (tid == 0) {  // the window's G, in order: G_s = G_{s−1} + g_s from the last committed entry's G (or 0)
    float G = hw > 0 ? smem[L.off_Gc() + hw - 1] : 0.0f;
    for (int s = 0; s < T; ++s) {
      smem[L.off_dprev() + s] = expf(G);
      G = G + smem[L.off_g() + s];
      smem[L.off_G() + s] = G;
      smem[L.off_dcur() + s] = expf(G);
    }
  }
  __syncthreads();
  for (int idx = tid; idx < T * (hw + T); idx += kThreads) {
    const int s = idx / (hw + T), x = idx % (hw + T);
    const float Gx = x < hw ? smem[L.off_Gc() + x] : smem[L.off_G() + x - hw];
    const float Gprev = s > 0 ? smem[L.off_G() + s - 1] : (hw > 0 ? smem[L.off_Gc() + hw - 1] : 0.0f);
    const float Gs = smem[L.off_G() + s];
    float& wk = smem[L.off_wk() + s * ne + x];
    float& wq = smem[L.off_wq() + s * ne + x];
    wk = x < hw + s ? expf(Gprev - Gx) * wk : 0.0f;
    wq = x <= hw + s ? expf(Gs - Gx) * wq : 0.0f;
  }
  float dflush = 1.0f;
  if (flush) {
    const float GK = smem[L.off_Gc() + hfill - 1];
    dflush = expf(GK);
    for (int e = tid; e < hfill; e += kThreads) smem[L.off_wf() + e] = expf(GK - smem[L.off_Gc() + e]);
  }
  // The window's ring entries: k_s and G_s (entries h + s, past every committed one).
  if (tile == 0 && h % vpk == 0)
    for (int idx = tid; idx < T * K; idx += kThreads) {
      const int s = idx / K, n = idx % K;
      l.d_ring_k[static_cast<long long>(slot) * cap * HK * K + (static_cast<long long>((base + hfill + s) & mask) * HK + hk) * K + n] =
          float_to_bf16_bits(smem[L.off_kb() + s * ldk + n]);
    }
  __syncthreads();  // weights, wf visible
  if (tile == 0 && tid < T)
    l.d_ring_G[static_cast<long long>(slot) * cap * HV + static_cast<long long>((base + hfill + tid) & mask) * HV + h] =
        smem[L.off_G() + tid];
  if (flush) {
    for (int i = v_begin + tid; i < v_end; i += kThreads) {
      const int il = i - v_begin;
      if constexpr (kMma) {
        // The fold's B operand for this row: per k-step and tig, w_e·u_e of entries 16·k + 2·tig + {0, 1, 8, 9} in
        // three bf16 pieces; zero past the committed entries (finite: the keys there are zero).
        uint2* Bw = reinterpret_cast<uint2*>(smem + L.off_mma_b());
        for (int k = 0; k < ks_mma; ++k) {
#pragma unroll
          for (int tg = 0; tg < 4; ++tg) {
            float w[4];
#pragma unroll
            for (int b = 0; b < 4; ++b) {
              const int e = mma_entry(k, tg, b);
              w[b] = e < hfill ? smem[L.off_wf() + e] *
                                     bf16_bits_to_float(ru[static_cast<long long>((base + e) & mask) * HV * V + i])
                               : 0.0f;
            }
            mma_stage_b(Bw, ks_mma, k, il, tg, w);
          }
        }
      } else {
#pragma unroll 4
        for (int e = 0; e < hfill; ++e)
          smem[L.off_uw() + e * tile_rows + il] =
              smem[L.off_wf() + e] * bf16_bits_to_float(ru[static_cast<long long>((base + e) & mask) * HV * V + i]);
      }
    }
    __syncthreads();
  }

  VerifyCtx t;
  t.K = K, t.HV = HV, t.V = V, t.h = h, t.row = row, t.slot = slot, t.T = T, t.hw = hw, t.hc = hfill;
  t.v_begin = v_begin, t.v_end = v_end, t.dflush = dflush, t.l2_ahead = l.l2_ahead;
  if (!flush) {
    constexpr int kVec = StateVec<Src>::kVec;
    t.lanes = K / kVec, t.rows_per_pass = kThreads / t.lanes, t.c = tid % t.lanes, t.rsub = tid / t.lanes;
    Src* src = static_cast<Src*>(kDual ? l.d_read : l.d_ckpt) + head_off + t.c * kVec;
    verify_stream<Src, void, false, TP, kK / kVec>(t, src, nullptr, smem, L);
  } else {
    constexpr int kVec = StateVec<CK>::kVec;
    t.lanes = K / kVec, t.rows_per_pass = kThreads / t.lanes, t.c = tid % t.lanes, t.rsub = tid / t.lanes;
    CK* ck = static_cast<CK*>(l.d_ckpt) + head_off + t.c * kVec;
    if constexpr (kMma) {
      RD* rd = nullptr;
      if constexpr (kDual) rd = static_cast<RD*>(l.d_read) + head_off;
      verify_flush_mma<CK, RD, TP>(t, static_cast<CK*>(l.d_ckpt) + head_off, rd, smem, L, ks_mma);
    } else if constexpr (kDual) {
      RD* rd = static_cast<RD*>(l.d_read) + head_off + t.c * kVec;
      verify_stream<CK, RD, true, TP, kK / kVec>(t, ck, rd, smem, L);
    } else {
      verify_stream<CK, void, true, TP, kK / kVec>(t, ck, nullptr, smem, L);
    }
  }
  __syncthreads();  // the dots of every row visible

  // Substitution, one thread per state row: committed ring terms in entry order, then positions s in order, each
  // continuing its sums with the window's earlier u_j (the bf16 values the ring keeps).
  const long long os = or_default(a.o_stride, static_cast<long long>(HV) * V);
  const long long vs = or_default(a.v_stride, static_cast<long long>(HV) * V);
  const bool o_bf16 = a.o_format == Format::BF16;
  const A* vin = static_cast<const A*>(a.d_v) + static_cast<long long>(h) * V;
  uint16_t* ru_w = l.d_ring_u + static_cast<long long>(slot) * cap * HV * V + static_cast<long long>(h) * V;
  const float* s_wk = smem + L.off_wk();
  const float* s_wq = smem + L.off_wq();
  const int ldr = L.ldr();
  for (int i = v_begin + tid; i < v_end; i += kThreads) {
    const int il = i - v_begin;
    float vv[TP], rks[TP], rqs[TP], us[TP];
#pragma unroll
    for (int s = 0; s < TP; ++s) {
      vv[s] = s < T ? to_f32(vin[static_cast<long long>(row * T + s) * vs + i]) : 0.0f;
      rks[s] = 0.0f, rqs[s] = 0.0f, us[s] = 0.0f;
    }
#pragma unroll 2
    for (int e = 0; e < hw; ++e) {
      const float ue = bf16_bits_to_float(ru[static_cast<long long>((base + e) & mask) * HV * V + i]);
#pragma unroll
      for (int s = 0; s < TP; ++s)
        if (s < T) rks[s] = fmaf(s_wk[s * ne + e], ue, rks[s]), rqs[s] = fmaf(s_wq[s * ne + e], ue, rqs[s]);
    }
#pragma unroll
    for (int s = 0; s < TP; ++s) {
      if (s >= T) break;
#pragma unroll
      for (int j = 0; j < s; ++j) {
        rks[s] = fmaf(s_wk[s * ne + hw + j], us[j], rks[s]);
        rqs[s] = fmaf(s_wq[s * ne + hw + j], us[j], rqs[s]);
      }
      const float skt = smem[L.off_dprev() + s] * smem[L.off_sk() + s * ldr + il] + rks[s];
      us[s] = round_bf16(smem[L.off_beta() + s] * (vv[s] - smem[L.off_alpha() + s] * skt));
      const float o = smem[L.off_dcur() + s] * smem[L.off_sq() + s * ldr + il] + rqs[s] + s_wq[s * ne + hw + s] * us[s];
      store_o(a.d_o, static_cast<long long>(row * T + s) * os + static_cast<long long>(h) * V + i, o_bf16, o);
      ru_w[static_cast<long long>((base + hfill + s) & mask) * HV * V + i] = float_to_bf16_bits(us[s]);
    }
  }
}

// describe: set for gdn_verify_footprint, which gets the kernel's footprint instead of a launch.
template <class A, class CK, class RD, int TP>
void launch_verify(const GdnVerifyLaunch& l, int vtiles, cudaStream_t stream, KernelFootprint* describe) {
  const char* what = "gdn_verify";
  const long long blocks = static_cast<long long>(l.step.batch) * l.step.dims.HV * vtiles;
  if (blocks > 0x7FFFFFFFLL) bad_launch(what, "batch · HV · tiles exceeds the grid limit");
  const VerifySmem L{l.step.dims.K, l.window, spec_max_committed(l.window, l.interval, l.hist),
                     (l.step.dims.V + vtiles - 1) / vtiles};
  const size_t bytes = static_cast<size_t>(L.floats()) * sizeof(float);
  if (bytes > 227 * 1024)
    bad_launch(what, "shared memory of " + std::to_string(bytes) + " bytes exceeds the SM's 227 KiB (window, hist or K too large)");
  // mma_fold = false: the kernel compiled for a run-time K, whose flush folds with FFMA.
  auto kernel = l.step.dims.K == kPresetK && l.mma_fold ? gdn_verify_kernel<A, CK, RD, TP, kPresetK>
                                                        : gdn_verify_kernel<A, CK, RD, TP, 0>;
  if (describe) {
    *describe = footprint_of(kernel, kThreads, bytes, blocks);
    return;
  }
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  kernel<<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(l, vtiles);
  CUDA_CHECK_LAUNCH(stream);
}

template <class A, class CK, class RD>
void dispatch_window(const GdnVerifyLaunch& l, int vtiles, cudaStream_t stream, KernelFootprint* describe) {
  const int T = l.window;
  if (T <= 1)
    launch_verify<A, CK, RD, 1>(l, vtiles, stream, describe);
  else if (T <= 2)
    launch_verify<A, CK, RD, 2>(l, vtiles, stream, describe);
  else if (T <= 4)
    launch_verify<A, CK, RD, 4>(l, vtiles, stream, describe);
  else if (T <= 8)
    launch_verify<A, CK, RD, 8>(l, vtiles, stream, describe);
  else
    launch_verify<A, CK, RD, 16>(l, vtiles, stream, describe);
}

template <class A>
void dispatch_verify_state(const GdnVerifyLaunch& l, int vtiles, cudaStream_t stream, KernelFootprint* describe) {
  with_checkpoint_types(l.dual, l.ckpt_format, l.read_format, [&](auto ck, auto rd) {
    dispatch_window<A, typename decltype(ck)::type, typename decltype(rd)::type>(l, vtiles, stream, describe);
  });
}

// ---- eager speculative baseline ----

// kK: kPresetK or 0 (K at run time). Capped at 64 registers (8 CTAs per SM; ptxas took 72 with K fixed): neutral,
// 771 µs against 765-774 for the uncapped run-time-K kernel at batch 256, T = 4 (benchmarks/experiments, v2-v4).
template <class S, class A, int TP, int kK>
__global__ void __launch_bounds__(kThreads, 8) gdn_eager_verify_kernel(GdnEagerVerifyLaunch l, int vtiles) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  constexpr int kVec = StateVec<S>::kVec;
  const GdnStepArgs& a = l.step;
  constexpr int kL = kK / kVec;  // lanes of a row when K is fixed at compile time
  const int HV = a.dims.HV, K = kK > 0 ? kK : a.dims.K, V = a.dims.V, vpk = a.dims.HV / a.dims.HK, T = l.window;
  const int per_row = HV * vtiles;
  const int row = blockIdx.x / per_row;
  const int h = (blockIdx.x % per_row) / vtiles, tile = blockIdx.x % vtiles;
  const int slot = a.d_slot[row];
  if (slot < 0) return;  // padded row
  const int tile_rows = (V + vtiles - 1) / vtiles;
  const int v_begin = tile * tile_rows, v_end = min(V, v_begin + tile_rows);
  const int cur = min(max(__ldcg(&l.d_cur[slot]), 0), T - 1);
  const long long draft = static_cast<long long>(HV) * V * K;  // elements per draft state
  const long long head_in_draft = static_cast<long long>(h) * V * K;
  S* pool = static_cast<S*>(l.d_state) + static_cast<long long>(slot) * T * draft + head_in_draft;
  const int span = kThreads / (K / kVec) * kUnroll;
  const int ahead = l.l2_ahead >= 0 ? (l.l2_ahead + 2) * span : 0;  // the prefetch window's end, rows past a chunk
  prefetch_rows(pool + cur * draft, K, v_begin, l.l2_ahead < 0 ? v_end : min(v_end, v_begin + ahead));
  const int ldk = up4(K);
  float* s_q = smem;                 // [T][ldk]
  float* s_k = s_q + T * ldk;        // [T][ldk]
  float* s_red = s_k + T * ldk;      // [2·kMaxSpecWindow][kWarps]
  float* s_gate = s_red + 2 * kMaxSpecWindow * kWarps;  // [2][kMaxSpecWindow]: α_s, β_s
  float* s_v = s_gate + 2 * kMaxSpecWindow;              // [T][tile_rows]: v_s of the tile's rows
  if (static_cast<int>(threadIdx.x) < T) {
    const Gate gt = gate_of<A>(a, row * T + threadIdx.x, h);
    s_gate[threadIdx.x] = gt.alpha, s_gate[kMaxSpecWindow + threadIdx.x] = gt.beta;
  }
  const A* v = static_cast<const A*>(a.d_v) + static_cast<long long>(h) * V;
  const long long vs = or_default(a.v_stride, static_cast<long long>(HV) * V);
  // The tile's v for every position, staged once: in the stream a global load per (position, row) sat on the
  // update's dependency chain.
  for (int x = threadIdx.x; x < T * tile_rows; x += kThreads) {
    const int p = x / tile_rows, i = v_begin + x % tile_rows;
    s_v[x] = i < v_end ? to_f32(v[static_cast<long long>(row * T + p) * vs + i]) : 0.0f;
  }
  normalise_window<A, TP>(a, row, T, h / vpk, ldk, s_q, s_k, nullptr, s_red);  // ends in a barrier

  const int lanes = K / kVec, rows_per_pass = kThreads / lanes;
  const int c = threadIdx.x % lanes, rsub = threadIdx.x / lanes;
  const long long os = or_default(a.o_stride, static_cast<long long>(HV) * V);
  const bool o_bf16 = a.o_format == Format::BF16;
  const S* src = pool + cur * draft + c * kVec;
  for (int i0 = v_begin; i0 < v_end; i0 += span) {
    if (ahead > 0 && i0 != v_begin) prefetch_rows(pool + cur * draft, K, i0 + ahead - span, min(i0 + ahead, v_end));
    float s[kUnroll][kVec];
    int il[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // every load of the batch before any store: draft d_cur is overwritten
      const int i = i0 + u * rows_per_pass + rsub;
      il[u] = min(i, v_end - 1) - v_begin;
      if (i < v_end) {
        StateVec<S>::load(src + static_cast<long long>(i) * K, s[u]);
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) s[u][e] = 0.0f;
      }
    }
    for (int p = 0; p < T; ++p) {
      float kv[kVec], qv[kVec];
      load_f32<kVec>(s_k + p * ldk + c * kVec, kv);
      load_f32<kVec>(s_q + p * ldk + c * kVec, qv);
      const float alpha = s_gate[p], beta = s_gate[kMaxSpecWindow + p];
      S* dst = pool + p * draft + c * kVec;
      // The rows' dots reduced together (row_sums: each value's tree is row_sum's, gdn_eager_step's).
      float dk[kUnroll], dq[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        dk[u] = 0.0f;
#pragma unroll
        for (int e = 0; e < kVec; ++e) dk[u] = fmaf(s[u][e], kv[e], dk[u]);
      }
      row_sums<kUnroll, kL>(dk, lanes);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = i0 + u * rows_per_pass + rsub;
        const float upd = beta * (s_v[p * tile_rows + il[u]] - alpha * dk[u]);
#pragma unroll
        for (int e = 0; e < kVec; ++e) s[u][e] = fmaf(alpha, s[u][e], upd * kv[e]);
        if (i < v_end) StateVec<S>::store(dst + static_cast<long long>(i) * K, s[u]);  // s now holds stored values
        dq[u] = 0.0f;
#pragma unroll
        for (int e = 0; e < kVec; ++e) dq[u] = fmaf(s[u][e], qv[e], dq[u]);
      }
      row_sums<kUnroll, kL>(dq, lanes);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = i0 + u * rows_per_pass + rsub;
        if (c == 0 && i < v_end)
          store_o(a.d_o, static_cast<long long>(row * T + p) * os + static_cast<long long>(h) * V + i, o_bf16, dq[u]);
      }
    }
  }
}

template <class S, class A, int TP>
void launch_eager_verify(const GdnEagerVerifyLaunch& l, int vtiles, cudaStream_t stream) {
  const long long blocks = static_cast<long long>(l.step.batch) * l.step.dims.HV * vtiles;
  if (blocks > 0x7FFFFFFFLL) bad_launch("gdn_eager_verify", "batch · HV · tiles exceeds the grid limit");
  const size_t tile_rows = (l.step.dims.V + vtiles - 1) / vtiles;
  const size_t bytes = (2 * static_cast<size_t>(l.window) * up4(l.step.dims.K) + 2 * kMaxSpecWindow * kWarps +
                        2 * kMaxSpecWindow + l.window * tile_rows) *
                       sizeof(float);
  auto kernel = l.step.dims.K == kPresetK ? gdn_eager_verify_kernel<S, A, TP, kPresetK>
                                          : gdn_eager_verify_kernel<S, A, TP, 0>;
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  kernel<<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(l, vtiles);
  CUDA_CHECK_LAUNCH(stream);
}

template <class S, class A>
void eager_window(const GdnEagerVerifyLaunch& l, int vtiles, cudaStream_t stream) {
  const int T = l.window;
  if (T <= 1)
    launch_eager_verify<S, A, 1>(l, vtiles, stream);
  else if (T <= 2)
    launch_eager_verify<S, A, 2>(l, vtiles, stream);
  else if (T <= 4)
    launch_eager_verify<S, A, 4>(l, vtiles, stream);
  else if (T <= 8)
    launch_eager_verify<S, A, 8>(l, vtiles, stream);
  else
    launch_eager_verify<S, A, 16>(l, vtiles, stream);
}

template <class S>
void eager_act(const GdnEagerVerifyLaunch& l, int vtiles, cudaStream_t stream) {
  if (l.step.act_format == Format::BF16)
    eager_window<S, __nv_bfloat16>(l, vtiles, stream);
  else
    eager_window<S, float>(l, vtiles, stream);
}

// gdn_verify's checks and kernel choice; describe set: the chosen kernel's footprint, nothing launched.
void verify_checked(const GdnVerifyLaunch& l, cudaStream_t stream, KernelFootprint* describe) {
  const char* what = "gdn_verify";
  gdn::check_step_args(what, l.step);
  if (l.window < 1 || l.window > kMaxSpecWindow)
    gdn::bad_launch(what, "window must be in 1.." + std::to_string(kMaxSpecWindow) + " (got " +
                              std::to_string(l.window) + ")");
  if (l.step.batch == 0) return;
  if (l.interval < 1 || l.interval > kGdnMaxInterval)
    gdn::bad_launch(what, "interval must be in 1.." + std::to_string(kGdnMaxInterval) + " (got " +
                              std::to_string(l.interval) + ")");
  if (l.hist < l.interval + l.window) gdn::bad_launch(what, "hist must be >= interval + window");
  if (l.capacity < l.hist || (l.capacity & (l.capacity - 1)) != 0)
    gdn::bad_launch(what, "capacity must be a power of two >= hist");
  // A flushing window still reads its h committed entries while it appends T more (only when hist < 2·window can
  // that exceed hist).
  if (l.capacity < spec_max_committed(l.window, l.interval, l.hist) + l.window)
    gdn::bad_launch(what, "capacity must be >= the most committed entries (" +
                              std::to_string(spec_max_committed(l.window, l.interval, l.hist)) + ") + window");
  if (!l.d_ckpt || !l.d_ring_u || !l.d_ring_k || !l.d_ring_G || !l.d_fill || !l.d_base)
    gdn::bad_launch(what, "d_ckpt, d_ring_u, d_ring_k, d_ring_G, d_fill and d_base must all be set");
  if (l.step.dims.K % 8 != 0) gdn::bad_launch(what, "key dim K must be a multiple of 8 (16-byte ring loads of k)");
  if (reinterpret_cast<uintptr_t>(l.d_ring_k) % 16 != 0) gdn::bad_launch(what, "d_ring_k must be 16-byte aligned");
  Format streamed;
  if (l.dual) {
    if (l.ckpt_format != Format::FP32) gdn::bad_launch(what, "a dual checkpoint's update copy must be fp32");
    if (l.read_format != Format::BF16 && l.read_format != Format::FP16)
      gdn::bad_launch(what, "read_format must be bf16 or fp16 (got " + format_name(l.read_format) + ")");
    if (!l.d_read) gdn::bad_launch(what, "d_read must be set for a dual checkpoint");
    gdn::check_state_rows(what, l.step.dims.K, gdn::state_vec(l.read_format), l.d_read);
    streamed = l.read_format;
  } else {
    if (l.ckpt_format != Format::FP32 && l.ckpt_format != Format::BF16 && l.ckpt_format != Format::FP16)
      gdn::bad_launch(what, "ckpt_format must be fp32, bf16 or fp16 (got " + format_name(l.ckpt_format) + ")");
    streamed = l.ckpt_format;
  }
  gdn::check_state_rows(what, l.step.dims.K, gdn::state_vec(l.ckpt_format), l.d_ckpt);
  const int vtiles = gdn_v_tiles(l.step.dims, l.step.batch, streamed);
  if (l.step.act_format == Format::BF16)
    gdn::dispatch_verify_state<__nv_bfloat16>(l, vtiles, stream, describe);
  else
    gdn::dispatch_verify_state<float>(l, vtiles, stream, describe);
}

}  // namespace
}  // namespace gdn

void gdn_verify(const GdnVerifyLaunch& l, cudaStream_t stream) { gdn::verify_checked(l, stream, nullptr); }

KernelFootprint gdn_verify_footprint(const GdnVerifyLaunch& l) {
  KernelFootprint f;  // batch 0: nothing launched, all zero
  gdn::verify_checked(l, nullptr, &f);
  return f;
}

void gdn_eager_verify(const GdnEagerVerifyLaunch& l, cudaStream_t stream) {
  const char* what = "gdn_eager_verify";
  gdn::check_step_args(what, l.step);
  if (l.window < 1 || l.window > kMaxSpecWindow)
    gdn::bad_launch(what, "window must be in 1.." + std::to_string(kMaxSpecWindow) + " (got " +
                              std::to_string(l.window) + ")");
  if (l.step.batch == 0) return;
  if (l.state_format != Format::FP32 && l.state_format != Format::BF16 && l.state_format != Format::FP16)
    gdn::bad_launch(what, "state_format must be fp32, bf16 or fp16 (got " + format_name(l.state_format) + ")");
  if (!l.d_state || !l.d_cur) gdn::bad_launch(what, "d_state and d_cur must be set");
  gdn::check_state_rows(what, l.step.dims.K, gdn::state_vec(l.state_format), l.d_state);
  const int vtiles = gdn_v_tiles(l.step.dims, l.step.batch, l.state_format);
  switch (l.state_format) {
    case Format::FP32: gdn::eager_act<float>(l, vtiles, stream); break;
    case Format::BF16: gdn::eager_act<__nv_bfloat16>(l, vtiles, stream); break;
    default: gdn::eager_act<__half>(l, vtiles, stream); break;
  }
}

}  // namespace rssm
