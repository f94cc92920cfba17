// Mamba-2 speculative verify, grouped (mamba2_verify picks it at serving batches; Mamba2VerifyLaunch::heads_per_cta):
// mamba2_verify.cu's window (same formulas, ring convention, deferred flush, dual copies, padded rows) with the work
// split of mamba2_replay_grouped.cu. One CTA per (row, group, chunk of hc heads of the group):
//   A  slot, cursor, flush rule; the window's C_s, B_s (B appended to the ring by chunk 0), Δ_s per (head, position),
//      each head's committed (Δ_e, Λ_e), and per (head, row) pair and position D·x_s, gate, the x_s ring append.
//   B  once per CTA: the dots B_e·C_s of every visible entry and position (shared by the group's heads), then per
//      head Λ_s, the window weights Δ_e·exp(Λ_s − Λ_e)·(B_e·C_s) and a flushing row's fold weights.
//   C  the ring sums of every (position, pair) from 16-byte loads of the ring's x entries (the group's heads are
//      contiguous in the ring), positions four at a time.
//   D  the hc heads' tiles streamed back to back (two chunks in flight, the next head's tile prefetched into L2); each
//      state row is dotted with all T C_s and the chunk's R·T dots reduced together (reduce_scatter: about one shuffle
//      per dot). A flushing row first folds its committed entries into each head's tile, stores it (and the dual read
//      copy from the same registers), then dots the stored values.
// Why: the per-head verify pays its prologue (the B_e·C_s dots, T·E weights with exp, the ring sums) once per head and
// per position; at batch 256 that prologue, not the state stream, set its time (796 µs at T = 4 against 300 µs for a
// grouped replay step streaming the same bytes). Here it is paid once per hc heads: 359 µs there, 484 amortised over
// flushing windows against 938 (benchmarks/runs/spec-bench-mamba2*.533cacf.*, benchmarks/experiments/README.md).
// Every value is computed by the same chain of operations as mamba2_verify.cu's per-head kernel (weights, ring sums in
// entry order, each dot's fmaf chain and row_sum's tree, the fold's fmaf chain), so the two kernels agree bit for
// bit; tests/gpu/test_mamba2_spec_cuda.cpp checks that.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "common/cuda_check.h"
#include "common/device_query.h"
#include "common/kernel_footprint.cuh"
#include "common/spec_kernels.h"
#include "common/warp_reduce.cuh"
#include "mamba2/mamba2_device.cuh"

namespace rssm {
namespace m2 {

namespace {

constexpr int kGVMinBlocks = 4;                  // CTAs per SM the register cap (128) and kGVSmemBudget allow
constexpr int kGVPairVec = 8;                    // (head, row) pairs per thread in A and C: one 16-byte ring load
constexpr int kGVMaxPairs = kThreads * kGVPairVec;
constexpr int kGVXRound = 4;                     // ring entries whose x loads are in flight together in C
constexpr int kGVMaxHeads = 16;
constexpr int kGVMaxWindow = 8;                  // larger windows run the per-head kernel
constexpr size_t kGVSmemBudget = 56 * 1024;      // 4 CTAs on an SM: 228 KiB less 1 KiB reserved per CTA

// Shared memory in floats. Pairs q = hl·P + p, hl < hc. The committed-entry arrays are sized by spec_max_committed
// (decoder/spec.h), not by hist: with hist the power-of-two ring (bench_spec_cuda --hist=ring, 32 at interval 16),
// sizing them by hist took the T = 4 CTA of 16 heads to 61.8 KB, over kGVSmemBudget; by the 19 entries a window can
// find there it is 51.3 KB (48.5 KB at hist 20). The region from off_U() is used twice: by what only the
// prologue reads (the window's B_s, the dots, Δ_s and Λ_s, the committed (Δ_e, Λ_e), the weights) up to phase C, then
// by a flushing row's B_e and x·weights in phase D. Sharing it is what lets T = 6 and 8 run 8 heads a CTA within
// kGVSmemBudget (4 at T = 8 before).
struct GVSmem {
  int N, T, most, hc, P;  // most: spec_max_committed, the committed entries a window finds at most
  bool gated;
  __host__ __device__ static int up4(int n) { return (n + 3) & ~3; }
  __host__ __device__ int n4() const { return up4(N); }
  __host__ __device__ int E() const { return most + T; }  // visible entries at most (committed + window)
  __host__ __device__ int E4() const { return up4(E()); }
  __host__ __device__ int H4() const { return up4(most); }
  __host__ __device__ int np4() const { return up4(hc * P); }
  __host__ __device__ int off_C() const { return 0; }                           // [T][n4] C_s
  __host__ __device__ int off_A() const { return T * n4(); }                    // [hc] A_h
  __host__ __device__ int off_dec() const { return off_A() + up4(hc); }         // [hc][T] exp(Λ_s)
  __host__ __device__ int off_wf() const { return off_dec() + up4(hc * T); }    // [hc][H4] fold weights
  __host__ __device__ int off_fd() const { return off_wf() + hc * H4(); }       // [hc] fold decay exp(Λ_K)
  __host__ __device__ int off_ring() const { return off_fd() + up4(hc); }       // [T][np4] ring sums
  __host__ __device__ int off_dx() const { return off_ring() + T * np4(); }     // [T][np4] D·x_s
  __host__ __device__ int off_g() const { return off_dx() + T * np4(); }        // [T][np4] gate factor (gated)
  __host__ __device__ int off_U() const { return off_g() + (gated ? T * np4() : 0); }
  // up to phase C
  __host__ __device__ int off_Bw() const { return off_U(); }                    // [T][n4] B_s as buffered
  __host__ __device__ int off_dot() const { return off_Bw() + T * n4(); }       // [E][T] B_e·C_s
  __host__ __device__ int off_wd() const { return off_dot() + up4(E() * T); }   // [hc][T] Δ_s
  __host__ __device__ int off_wl() const { return off_wd() + up4(hc * T); }     // [hc][T] Λ_s
  __host__ __device__ int off_cd() const { return off_wl() + up4(hc * T); }     // [hc][H4] committed Δ_e
  __host__ __device__ int off_cl() const { return off_cd() + hc * H4(); }       // [hc][H4] committed Λ_e
  __host__ __device__ int off_W() const { return off_cl() + hc * H4(); }        // [hc][T][E4] window weights
  // phase D of a flushing row
  __host__ __device__ int off_Bc() const { return off_U(); }                    // [most][n4] committed B_e
  __host__ __device__ int off_u() const { return off_Bc() + most * n4(); }      // [P][H4] x·weight, one head
  __host__ __device__ int floats() const {
    const int before = off_W() + hc * T * E4(), flush = off_u() + P * H4();
    return before > flush ? before : flush;
  }
};

struct GVCtx {
  int T, P, np;
  float invP;          // q / P as a float product (exact: q + 0.5 is never within rounding of a multiple of P)
  long long y_row0;    // y index of (position 0, pair 0); position s adds s·ys
  long long ys;
  bool y_bf16, gated;
  int hc, flush_l2_ahead;  // heads of the CTA; Mamba2VerifyLaunch's (the flush's rolling L2 window when >= 0)
};

// i / d for the prologues' small item counts as one float product: exact while i < 2^20 and d <= 2^10 (i + 0.5 is at
// least 0.5 / d away from a multiple of d, far above the product's rounding). A run-time integer division is about 20
// instructions, and the prologues divide once or twice per item.
__device__ inline int div_small(int i, float inv_d) { return static_cast<int>((i + 0.5f) * inv_d); }
__device__ inline int head_of(const GVCtx& t, int q) { return div_small(q, t.invP); }

// Output of pair q at position s (mamba2_verify.cu's verify_out).
__device__ inline void gv_out(const Mamba2StepArgs& a, const GVCtx& t, const float* sm, const GVSmem& L, int q, int s,
                              float dot) {
  const int np4 = L.np4();
  float out = sm[L.off_dec() + head_of(t, q) * t.T + s] * dot + sm[L.off_ring() + s * np4 + q];
  out += sm[L.off_dx() + s * np4 + q];
  if (t.gated) out = out * sm[L.off_g() + s * np4 + q];
  store_y(a.d_y, t.y_row0 + s * t.ys + q, t.y_bf16, out);
}

// The window's C_s as this thread's registers: the lane's kVec columns of each position.
template <int TP, int kVec>
__device__ inline void load_window_C(float (&Cv)[TP][kVec], const float* sm, const GVSmem& L, int c, int T) {
#pragma unroll
  for (int s = 0; s < TP; ++s)
#pragma unroll
    for (int k = 0; k < kVec; ++k) Cv[s][k] = s < T ? sm[L.off_C() + s * L.n4() + c * kVec + k] : 0.0f;
}

// R state rows (each this lane's kVec values) dotted with the T C_s, the R·TP dots reduced together, outputs written
// by the lanes that hold them. Rows past q_end are computed on zeros and dropped.
template <int R, int TP, int kVec, int kLanes, class Lay>
__device__ inline void window_dots_rows(const Mamba2StepArgs& a, const GVCtx& t, const float* sm, const GVSmem& L,
                                        const Lay& lay, const float (&Cv)[TP][kVec], const float (&v)[R][kVec],
                                        int q0, int q_end) {
  float acc[R * TP];
#pragma unroll
  for (int u = 0; u < R; ++u)
#pragma unroll
    for (int s = 0; s < TP; ++s) {
      acc[u * TP + s] = 0.0f;
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc[u * TP + s] = fmaf(v[u][k], Cv[s][k], acc[u * TP + s]);
    }
  reduce_scatter_each<R * TP, kLanes>(acc, lay.lanes, [&](int i, float dot) {
    const int u = i / TP, s = i % TP, q = q0 + u * lay.rpp + lay.rsub;
    if (s < t.T && q < q_end) gv_out(a, t, sm, L, q, s, dot);
  });
}

// Non-flush: every head's tile as one run of hc·P pairs, two chunks in flight, the next head's tile into L2.
template <class S, int TP, int kLanes>
__device__ void gv_read(const Mamba2StepArgs& a, const GVCtx& t, const S* run, const float* sm, const GVSmem& L,
                        int N) {
  constexpr int R = 16 / TP;  // R·TP = 16 dots reduced per chunk
  const TileLayout<S> lay(N);
  constexpr int kVec = TileLayout<S>::kVec;
  float Cv[TP][kVec];
  load_window_C<TP, kVec>(Cv, sm, L, lay.c, t.T);
  const S* base = run + lay.c * kVec;
  const int span = R * lay.rpp, np = t.np;
  const long long head_elems = static_cast<long long>(t.P) * N;
  int next_head = t.P;
  auto consume = [&](const uint4 (&q)[R], int q0) {
    float v[R][kVec];
#pragma unroll
    for (int u = 0; u < R; ++u) StateVec<S>::unpack(q[u], v[u]);
    window_dots_rows<R, TP, kVec, kLanes>(a, t, sm, L, lay, Cv, v, q0, np);
  };
  auto issue = [&](uint4 (&q)[R], int q0) {
    if (q0 + span > next_head - t.P && next_head < np) {  // uniform: the chunk reaches into head next_head/P − 1
      prefetch_l2(run + next_head * static_cast<long long>(N), head_elems * sizeof(S));
      next_head += t.P;
    }
    load_rows<S, R>(q, base, lay, np, q0, N);
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

template <class T>
__device__ inline float stored_as(float v) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value)
    return __bfloat162float(__float2bfloat16_rn(v));
  else
    return __half2float(__float2half_rn(v));
}

// Flush of head hl: the update copy's rows decayed, the nf committed entries folded in (x·weights in smem u, B_e in
// smem Bc, mamba2_verify.cu's order), stored (and the dual read copy), then dotted with the window's C_s (the dual
// window reads the read copy's values). Next chunk's loads in flight during the fold.
template <class CK, class RDT, int TP, int kLanes>
__device__ void gv_flush_head(const Mamba2StepArgs& a, const GVCtx& t, int hl, int nf, CK* ck, RDT* rd,
                              const float* sm, const GVSmem& L, int N) {
  // fp32: R·TP = 16 dots a chunk as gv_read (4 rows in flight at T <= 4); 16-bit rows hold twice the values and
  // would spill at 16.
  constexpr int R = (sizeof(CK) == 4 ? 16 : 8) / TP;
  // Entries per block of the fold: 2. At 4 the kernels at the 128-register cap spilled more (fp32 T = 4: 8 bytes, its
  // dual twin 28) and the fold was slower (benchmarks/experiments/README.md, "the flushing window's fold").
  constexpr int kEB = 2;
  static_assert(kEB == 2, "each row's weights are read as one float2");
  const TileLayout<CK> lay(N);
  constexpr int kVec = TileLayout<CK>::kVec;
  constexpr bool kDual = !std::is_void<RDT>::value;
  float Cv[TP][kVec];
  load_window_C<TP, kVec>(Cv, sm, L, lay.c, t.T);
  const float decay = sm[L.off_fd() + hl];
  const int H4 = L.H4(), P = t.P, qh = hl * P;
  const float* sBc = sm + L.off_Bc() + lay.c * kVec;
  const float* su = sm + L.off_u();
  const long long off = static_cast<long long>(qh) * N + lay.c * kVec;  // this head's row 0 at the thread's lane
  const int span = R * lay.rpp;
  uint4 qn[R];
  load_rows<CK, R>(qn, ck + off, lay, P, 0, N);
  for (int p0 = 0; p0 < P; p0 += span) {
    uint4 q[R];
#pragma unroll
    for (int u = 0; u < R; ++u) q[u] = qn[u];
    if (p0 + span < P) load_rows<CK, R>(qn, ck + off, lay, P, p0 + span, N);
    // The rolling L2 window (Mamba2VerifyLaunch::flush_l2_ahead): rows of the CTA's run of heads (ck is its pair 0),
    // across the head's end. At N = 128 only (kLanes > 0): in the generic-N kernels its registers cost spills.
    if (kLanes > 0 && t.flush_l2_ahead >= 0) {
      const int qp = qh + p0 + (t.flush_l2_ahead + 1) * span, np = t.hc * P;
      if (qp < np) prefetch_l2(ck + static_cast<long long>(qp) * N, static_cast<long long>(min(span, np - qp)) * N * sizeof(CK));
    }
    float v[R][kVec];
#pragma unroll
    for (int u = 0; u < R; ++u) {
      StateVec<CK>::unpack(q[u], v[u]);
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[u][k] *= decay;
    }
    // Entries kEB at a time: each B_e read once per chunk for its R rows, each row's kEB weights in one load (H4 is a
    // multiple of 4, e0 of kEB). Entry by entry per row, a chunk cost R·(kVec/4 + 1) shared-memory loads per entry.
    // Each element's fmaf chain is unchanged (decay, then e in order): bit-identical to the per-head kernel.
    for (int e0 = 0; e0 < nf; e0 += kEB) {
      const int ne = min(kEB, nf - e0);
      float b[kEB][kVec];
#pragma unroll
      for (int ee = 0; ee < kEB; ++ee)
#pragma unroll
        for (int k = 0; k < kVec; k += 4) {
          const float4 w = ee < ne ? *reinterpret_cast<const float4*>(sBc + (e0 + ee) * L.n4() + k)
                                   : make_float4(0.f, 0.f, 0.f, 0.f);
          b[ee][k] = w.x, b[ee][k + 1] = w.y, b[ee][k + 2] = w.z, b[ee][k + 3] = w.w;
        }
#pragma unroll
      for (int u = 0; u < R; ++u) {
        const int pl = min(p0 + u * lay.rpp + lay.rsub, P - 1);
        const float2 w = *reinterpret_cast<const float2*>(su + pl * H4 + e0);
        const float ue[kEB] = {w.x, w.y};
#pragma unroll
        for (int ee = 0; ee < kEB; ++ee)
          if (ee < ne) {
#pragma unroll
            for (int k = 0; k < kVec; ++k) v[u][k] = fmaf(ue[ee], b[ee][k], v[u][k]);
          }
      }
    }
    CK* c0 = chunk_row0(ck + off, lay, p0, N);
#pragma unroll
    for (int u = 0; u < R; ++u) {
      if (p0 + u * lay.rpp + lay.rsub < P) {
        StateVec<CK>::store(c0 + u * kPassElems<CK>, v[u]);  // v now holds the stored values
        if constexpr (kDual) {
          static_assert(kVec == 4, "dual read copies are written from an fp32 update copy");
          store_narrow4(chunk_row0(rd + off, lay, p0, N) + u * kPassElems<CK>, v[u]);
        }
      }
      if constexpr (kDual) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) v[u][k] = stored_as<RDT>(v[u][k]);  // the window reads the read copy
      }
    }
    window_dots_rows<R, TP, kVec, kLanes>(a, t, sm, L, lay, Cv, v, qh + p0, qh + P);
  }
}

template <class A, class CK, class RD, int TP, int kN>
__global__ void __launch_bounds__(kThreads, kGVMinBlocks)
    mamba2_verify_grouped_kernel(Mamba2VerifyLaunch l, int hc) {
  extern __shared__ float4 smem4[];
  float* sm = reinterpret_cast<float*>(smem4);
  const Mamba2StepArgs& a = l.step;
  const int H = a.dims.H, P = a.dims.P, N = kN > 0 ? kN : a.dims.N, G = a.dims.G, hpg = H / G, T = l.window;
  const int chunks = hpg / hc, per_row = G * chunks;
  const int row = blockIdx.x / per_row, g = blockIdx.x % per_row / chunks, chunk = blockIdx.x % chunks;
  const int slot = a.d_slot[row];
  if (slot < 0) return;  // padded row: nothing read or written
  const int tid = threadIdx.x, h0 = g * hpg + chunk * hc, np = hc * P;
  const int most = spec_max_committed(T, l.interval, l.hist);
  const GVSmem L{N, T, most, hc, P, a.d_z != nullptr};
  const int n4 = L.n4(), H4 = L.H4(), E4 = L.E4(), np4 = L.np4();
  constexpr bool kDual = !std::is_void<RD>::value;
  using Src = typename std::conditional<kDual, RD, CK>::type;  // what a window without a flush streams
  const long long slot_off = static_cast<long long>(slot) * H * P * N;
  const long long pair_base = static_cast<long long>(h0) * P;  // pairs are contiguous from (h0, 0)
  const void* src_copy = kDual ? l.d_read : l.d_ckpt;
  const long long head_elems = static_cast<long long>(P) * N;  // one head's tile
  prefetch_l2(static_cast<const Src*>(src_copy) + slot_off + pair_base * N, head_elems * sizeof(Src));
  const int cap = l.capacity, mask = cap - 1;
  const int hf = min(max(l.d_fill[slot], 0), most);  // a corrupt cursor must not send ring reads past the entries
  const int rbase = l.d_base[slot] & mask;
  const bool flush = spec_flushes(hf, l.interval, T, l.hist);
  if (kDual && flush)
    prefetch_l2(static_cast<const CK*>(l.d_ckpt) + slot_off + pair_base * N, head_elems * sizeof(CK));
  const int hv = flush ? 0 : hf, nvis = hv + T;
  auto idx = [&](int e) { return static_cast<long long>((rbase + e) & mask); };
  if (flush) {  // the committed x entries of every pair on their way into L2 for the fold's per-head x·weights
    const int lines = (hc * P * 2 + 127) / 128;
    const char* rx0 = reinterpret_cast<const char*>(l.d_ring_x + static_cast<long long>(slot) * cap * H * P + h0 * P);
    for (int i = tid; i < hf * lines; i += kThreads) {
      const int e = i / lines, c = i - e * lines;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(rx0 + idx(e) * H * P * 2 + 128LL * c));
    }
  }
  const float2* dl = reinterpret_cast<const float2*>(l.d_ring_dl) + static_cast<long long>(slot) * cap * H;  // idx·H+h
  const uint16_t* rx = l.d_ring_x + static_cast<long long>(slot) * cap * H * P + pair_base;               // idx·H·P + q
  const uint16_t* rB = l.d_ring_B + static_cast<long long>(slot) * cap * G * N + static_cast<long long>(g) * N;
  const bool vec = pair_base % 8 == 0 && static_cast<long long>(H) * P % 8 == 0 &&
                   reinterpret_cast<uintptr_t>(l.d_ring_x) % 16 == 0;

  // ---- A ----
  const long long xs = or_default(a.x_stride, static_cast<long long>(H) * P), dts = or_default(a.dt_stride, H);
  const long long bcs = or_default(a.bc_stride, static_cast<long long>(G) * N);
  const long long zs = or_default(a.z_stride, static_cast<long long>(H) * P);
  for (int i = tid; i < T * N; i += kThreads) {
    const int s = i / N, n = i % N;
    const long long rr = static_cast<long long>(row) * T + s;
    const A* Bt = static_cast<const A*>(a.d_B) + rr * bcs + g * N;
    sm[L.off_C() + s * n4 + n] = to_f32(static_cast<const A*>(a.d_C)[rr * bcs + g * N + n]);
    sm[L.off_Bw() + s * n4 + n] = to_buffer_f32(Bt[n]);
    if (chunk == 0)
      l.d_ring_B[static_cast<long long>(slot) * cap * G * N + (idx(hf + s) * G + g) * N + n] = to_buffer_bits(Bt[n]);
  }
  for (int i = tid; i < hc * T; i += kThreads) {
    const int hl = i / T, s = i % T, h = h0 + hl;
    const long long rr = static_cast<long long>(row) * T + s;
    const float dt_raw = to_f32(static_cast<const A*>(a.d_dt)[rr * dts + h]);
    sm[L.off_wd() + i] = delta_of(dt_raw, a.d_dt_bias[h], a.dt_min, a.dt_max);
  }
  for (int hl = tid; hl < hc; hl += kThreads) sm[L.off_A() + hl] = -expf(a.d_A_log[h0 + hl]);
  const float inv_hf = 1.0f / static_cast<float>(max(hf, 1)), inv_P = 1.0f / static_cast<float>(P);
  for (int i = tid; i < hc * hf; i += kThreads) {
    const int hl = div_small(i, inv_hf), e = i - hl * hf;
    const float2 d = dl[idx(e) * H + h0 + hl];
    sm[L.off_cd() + hl * H4 + e] = d.x;
    sm[L.off_cl() + hl * H4 + e] = d.y;
  }
  const int q0 = tid * kGVPairVec;  // this thread's pairs in A and C
  float Dq[kGVPairVec];  // D of each pair, read once for all positions
#pragma unroll
  for (int i = 0; i < kGVPairVec; ++i) {
    const int q = min(q0 + i, np - 1), hl = div_small(q, inv_P);
    Dq[i] = a.d_per_dim ? a.d_D[h0 * P + q] : a.d_D[h0 + hl];
  }
  for (int s = 0; s < T; ++s) {
    const long long rr = static_cast<long long>(row) * T + s;
    const A* x = static_cast<const A*>(a.d_x) + rr * xs + pair_base;
    const A* z = a.d_z ? static_cast<const A*>(a.d_z) + rr * zs + pair_base : nullptr;
    uint32_t bits[kGVPairVec / 2] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < kGVPairVec; ++i) {
      const int q = q0 + i;
      if (q < np) {
        sm[L.off_dx() + s * np4 + q] = Dq[i] * to_f32(x[q]);
        bits[i / 2] |= static_cast<uint32_t>(to_buffer_bits(x[q])) << (16 * (i % 2));
        if (z) sm[L.off_g() + s * np4 + q] = silu<float>(to_f32(z[q]));
      }
    }
    if (q0 < np) {
      uint16_t* dst = l.d_ring_x + static_cast<long long>(slot) * cap * H * P + idx(hf + s) * H * P + pair_base + q0;
      if (vec && q0 + kGVPairVec <= np) {
        *reinterpret_cast<uint4*>(dst) = make_uint4(bits[0], bits[1], bits[2], bits[3]);
      } else {
#pragma unroll
        for (int i = 0; i < kGVPairVec; ++i)
          if (q0 + i < np) dst[i] = static_cast<uint16_t>(bits[i / 2] >> (16 * (i % 2)));
      }
    }
  }
  __syncthreads();

  // ---- B: Λ_s per head (and the ring's (Δ, Λ) append), fold weights; the dots B_e·C_s ----
  for (int hl = tid; hl < hc; hl += kThreads) {  // Λ over the window: one running fp32 sum from the last visible entry
    const float A_h = sm[L.off_A() + hl];
    float lam = hv > 0 ? sm[L.off_cl() + hl * H4 + hv - 1] : 0.0f;
    float2* dlw = reinterpret_cast<float2*>(l.d_ring_dl) + static_cast<long long>(slot) * cap * H + h0 + hl;
    for (int s = 0; s < T; ++s) {
      const float delta = sm[L.off_wd() + hl * T + s];
      lam = lam + A_h * delta;
      sm[L.off_wl() + hl * T + s] = lam;
      sm[L.off_dec() + hl * T + s] = expf(lam);
      dlw[idx(hf + s) * H] = make_float2(delta, lam);
    }
    if (flush) sm[L.off_fd() + hl] = expf(sm[L.off_cl() + hl * H4 + hf - 1]);
  }
  if (flush)
    for (int i = tid; i < hc * hf; i += kThreads) {
      const int hl = div_small(i, inv_hf), e = i - hl * hf;
      const float lamK = sm[L.off_cl() + hl * H4 + hf - 1];
      sm[L.off_wf() + hl * H4 + e] = sm[L.off_cd() + hl * H4 + e] * expf(lamK - sm[L.off_cl() + hl * H4 + e]);
    }
  // Item i = e·c8 + k covers B_e[8k .. 8k+7]; c8 = N/8 lanes of one warp share an entry.
  const int c8 = N / 8, items = nvis * c8;
  for (int i0 = 0; i0 < items; i0 += kThreads) {  // uniform over the CTA: every lane reaches the shuffles
    const int i = i0 + tid, e = i / c8, k = i % c8;
    const bool live = i < items;
    float b[8];
    if (live && e < hv) {
      bf16x8_to_f32(*reinterpret_cast<const uint4*>(rB + idx(e) * G * N + 8 * k), b);
    } else {
#pragma unroll
      for (int m = 0; m < 8; ++m) b[m] = live ? sm[L.off_Bw() + (e - hv) * n4 + 8 * k + m] : 0.0f;
    }
    float acc[TP];
#pragma unroll
    for (int s = 0; s < TP; ++s) {
      acc[s] = 0.0f;
      if (s < T) {
#pragma unroll
        for (int m = 0; m < 8; ++m) acc[s] = fmaf(b[m], live ? sm[L.off_C() + s * n4 + 8 * k + m] : 0.0f, acc[s]);
      }
    }
    row_sums<TP>(acc, c8);
    if (live && k == 0)
#pragma unroll
      for (int s = 0; s < TP; ++s)
        if (s < T) sm[L.off_dot() + e * T + s] = acc[s];
  }
  __syncthreads();
  const float inv_nvis = 1.0f / static_cast<float>(nvis), inv_T = 1.0f / static_cast<float>(T);
  for (int i = tid; i < hc * T * nvis; i += kThreads) {
    const int r = div_small(i, inv_nvis), e = i - r * nvis, hl = div_small(r, inv_T), s = r - hl * T;
    float w = 0.0f;
    if (e <= hv + s) {  // causal: position s sees the committed entries and the window's up to itself
      const bool committed = e < hv;
      const float de = committed ? sm[L.off_cd() + hl * H4 + e] : sm[L.off_wd() + hl * T + e - hv];
      const float le = committed ? sm[L.off_cl() + hl * H4 + e] : sm[L.off_wl() + hl * T + e - hv];
      w = de * expf(sm[L.off_wl() + hl * T + s] - le) * sm[L.off_dot() + e * T + s];
    }
    sm[L.off_W() + (hl * T + s) * E4 + e] = w;
  }
  __syncthreads();

  // ---- C: ring sums of this thread's pairs, four positions at a time, entries in order ----
  if (q0 < np) {
    // The 8 pairs span at most two heads (P >= 8, checked by the launcher).
    const int hlA = min(q0 / P, hc - 1), hlB = min((q0 + kGVPairVec - 1) / P, hc - 1), split = (hlA + 1) * P - q0;
    for (int s0 = 0; s0 < T; s0 += 4) {
      float acc[4][kGVPairVec];
#pragma unroll
      for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int i = 0; i < kGVPairVec; ++i) acc[s][i] = 0.0f;
      auto add = [&](int e, const float (&xe)[kGVPairVec]) {
#pragma unroll
        for (int s = 0; s < 4; ++s)
          if (s0 + s < T) {
            const float wA = sm[L.off_W() + (hlA * T + s0 + s) * E4 + e];
            const float wB = sm[L.off_W() + (hlB * T + s0 + s) * E4 + e];
#pragma unroll
            for (int i = 0; i < kGVPairVec; ++i) acc[s][i] = fmaf(i < split ? wA : wB, xe[i], acc[s][i]);
          }
      };
      for (int e0 = 0; e0 < hv; e0 += kGVXRound) {
        uint4 raw[kGVXRound];
#pragma unroll
        for (int u = 0; u < kGVXRound; ++u) {
          const int e = e0 + u;
          raw[u] = e < hv ? load_bf16x8_row(rx + idx(e) * H * P + q0, q0, np, vec) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kGVXRound; ++u)
          if (e0 + u < hv) {
            float xe[kGVPairVec];
            bf16x8_to_f32(raw[u], xe);
            add(e0 + u, xe);
          }
      }
      for (int j = 0; j < T && j < s0 + 4; ++j) {  // the window's own entries, j <= s
        const A* x = static_cast<const A*>(a.d_x) + (static_cast<long long>(row) * T + j) * xs + pair_base + q0;
        float xj[kGVPairVec];
#pragma unroll
        for (int i = 0; i < kGVPairVec; ++i) xj[i] = q0 + i < np ? to_buffer_f32(x[i]) : 0.0f;
#pragma unroll
        for (int s = 0; s < 4; ++s)
          if (s0 + s < T && s0 + s >= j) {
            const float wA = sm[L.off_W() + (hlA * T + s0 + s) * E4 + hv + j];
            const float wB = sm[L.off_W() + (hlB * T + s0 + s) * E4 + hv + j];
#pragma unroll
            for (int i = 0; i < kGVPairVec; ++i) acc[s][i] = fmaf(i < split ? wA : wB, xj[i], acc[s][i]);
          }
      }
#pragma unroll
      for (int s = 0; s < 4; ++s)
        if (s0 + s < T)
#pragma unroll
          for (int i = 0; i < kGVPairVec; ++i)
            if (q0 + i < np) sm[L.off_ring() + (s0 + s) * np4 + q0 + i] = acc[s][i];
    }
  }
  __syncthreads();

  // ---- D: the stream ----
  GVCtx t;
  t.T = T, t.P = P, t.np = np, t.invP = 1.0f / static_cast<float>(P);
  t.ys = or_default(a.y_stride, static_cast<long long>(H) * P);
  t.y_row0 = static_cast<long long>(row) * T * t.ys + pair_base;
  t.y_bf16 = a.y_format == Format::BF16;
  t.gated = a.d_z != nullptr;
  t.hc = hc, t.flush_l2_ahead = kN > 0 ? l.flush_l2_ahead : -1;
  if (!flush) {
    gv_read<Src, TP, kLanes<Src, kN>>(a, t, static_cast<const Src*>(src_copy) + slot_off + pair_base * N, sm, L, N);
    return;
  }
  // The fold's B_e (fp32) of every committed entry, over the weights no longer read.
  for (int i = tid; i < hf * c8; i += kThreads) {
    const int e = i / c8, k = i % c8;
    float b[8];
    bf16x8_to_f32(*reinterpret_cast<const uint4*>(rB + idx(e) * G * N + 8 * k), b);
#pragma unroll
    for (int m = 0; m < 8; ++m) sm[L.off_Bc() + e * n4 + 8 * k + m] = b[m];
  }
  CK* ck = static_cast<CK*>(l.d_ckpt) + slot_off + pair_base * N;
  using RDv = typename std::conditional<kDual, RD, void>::type;
  RDv* rd = nullptr;
  if constexpr (kDual) rd = static_cast<RD*>(l.d_read) + slot_off + pair_base * N;
  for (int hl = 0; hl < hc; ++hl) {
    if (hl + 1 < hc && t.flush_l2_ahead < 0) prefetch_l2(ck + (hl + 1) * head_elems, head_elems * sizeof(CK));
    // This head's x·weight per (row, entry), consecutive threads on consecutive rows of one entry (coalesced ring
    // reads); the previous head's are no longer read (barrier at the loop end).
    for (int i = tid; i < P * hf; i += kThreads) {
      const int e = div_small(i, inv_P), pl = i - e * P;
      sm[L.off_u() + pl * H4 + e] =
          sm[L.off_wf() + hl * H4 + e] * bf16_bits_to_float(rx[idx(e) * H * P + hl * P + pl]);
    }
    __syncthreads();
    gv_flush_head<CK, RDv, TP, kLanes<CK, kN>>(a, t, hl, hf, ck, rd, sm, L, N);
    __syncthreads();
  }
}

size_t gv_smem_bytes(const Mamba2VerifyLaunch& l, int hc) {
  const GVSmem L{l.step.dims.N, l.window, spec_max_committed(l.window, l.interval, l.hist), hc, l.step.dims.P,
                 l.step.d_z != nullptr};
  return static_cast<size_t>(L.floats()) * sizeof(float);
}

// describe: set for mamba2_verify_footprint, which gets the kernel's footprint instead of a launch.
template <class A, class CK, class RD, int TP>
void launch_gv(const Mamba2VerifyLaunch& l, int hc, cudaStream_t stream, KernelFootprint* describe) {
  const Mamba2Dims& d = l.step.dims;
  const long long blocks = static_cast<long long>(l.step.batch) * (d.H / hc);
  if (blocks > 0x7FFFFFFFLL) bad_launch("mamba2_verify", "batch · H / heads_per_cta exceeds the grid limit");
  const size_t bytes = gv_smem_bytes(l, hc);
  auto kernel = d.N == kPresetN ? mamba2_verify_grouped_kernel<A, CK, RD, TP, kPresetN>
                                : mamba2_verify_grouped_kernel<A, CK, RD, TP, 0>;
  if (describe) {
    *describe = footprint_of(kernel, kThreads, bytes, blocks);
    return;
  }
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  kernel<<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(l, hc);
  CUDA_CHECK_LAUNCH(stream);
}

template <class A, class CK, class RD>
void launch_gv_window(const Mamba2VerifyLaunch& l, int hc, cudaStream_t stream, KernelFootprint* describe) {
  if (l.window <= 4)
    launch_gv<A, CK, RD, 4>(l, hc, stream, describe);
  else
    launch_gv<A, CK, RD, 8>(l, hc, stream, describe);
}

template <class A>
void dispatch_gv(const Mamba2VerifyLaunch& l, int hc, cudaStream_t stream, KernelFootprint* describe) {
  with_checkpoint_types(l.dual, l.ckpt_format, l.read_format, [&](auto ck, auto rd) {
    launch_gv_window<A, typename decltype(ck)::type, typename decltype(rd)::type>(l, hc, stream, describe);
  });
}

}  // namespace

int verify_heads_per_cta(const Mamba2VerifyLaunch& l) {
  const char* what = "mamba2_verify";
  const Mamba2Dims& d = l.step.dims;
  const int hpg = d.H / d.G;
  if (l.flush_l2_ahead < -1 || l.flush_l2_ahead > 64)
    bad_launch(what, "flush_l2_ahead must be -1 .. 64 (got " + std::to_string(l.flush_l2_ahead) + ")");
  if (l.heads_per_cta == 1) return 1;
  if (l.heads_per_cta > 1) {
    const int hc = l.heads_per_cta;
    if (hpg % hc != 0 || hc > kGVMaxHeads)
      bad_launch(what, "heads_per_cta must divide H/G = " + std::to_string(hpg) + " and be at most " +
                           std::to_string(kGVMaxHeads) + " (got " + std::to_string(hc) + ")");
    if (l.window > kGVMaxWindow)
      bad_launch(what, "heads_per_cta > 1 needs window <= " + std::to_string(kGVMaxWindow) + " (got " +
                           std::to_string(l.window) + ")");
    if (d.P < kGVPairVec || hc * d.P > kGVMaxPairs)
      bad_launch(what, "heads_per_cta > 1 needs " + std::to_string(kGVPairVec) + " <= P and heads_per_cta · P <= " +
                           std::to_string(kGVMaxPairs) + " (got P = " + std::to_string(d.P) + ")");
    if (gv_smem_bytes(l, hc) > 227 * 1024)
      bad_launch(what, "heads_per_cta = " + std::to_string(hc) + " needs " + std::to_string(gv_smem_bytes(l, hc)) +
                           " bytes of shared memory (over 227 KiB); lower heads_per_cta or hist");
    return hc;
  }
  if (l.window > kGVMaxWindow || d.P < kGVPairVec) return 1;
  // As the grouped replay step (grouped_shape): as many heads a CTA as keep about three waves of resident CTAs, and
  // no more than four CTAs' shared memory on an SM.
  const long long slots = static_cast<long long>(kGVMinBlocks) * sm_count();
  const long long heads = static_cast<long long>(l.step.batch) * d.H;
  int hc = 1;
  while (2 * hc <= kGVMaxHeads && hpg % (2 * hc) == 0 && heads / (2 * hc) >= 3 * slots && 2 * hc * d.P <= kGVMaxPairs &&
         gv_smem_bytes(l, 2 * hc) <= kGVSmemBudget)
    hc *= 2;
  return hc;
}

void verify_grouped(const Mamba2VerifyLaunch& l, int hc, cudaStream_t stream, KernelFootprint* describe) {
  if (l.step.act_format == Format::BF16)
    dispatch_gv<__nv_bfloat16>(l, hc, stream, describe);
  else
    dispatch_gv<float>(l, hc, stream, describe);
}

}  // namespace m2
}  // namespace rssm
