// Mamba-2 eager and replay steps as persistent, pipelined kernels (Mamba2EagerLaunch::variant 1,
// Mamba2ReplayLaunch::variant 2): same arithmetic, ring and cursor as mamba2_eager.cu / mamba2_replay.cu, a different
// way of keeping the memory system busy.
//
// Why: the per-head kernels give each CTA one (row, head) and hide its chain of dependent small reads (slot, ring
// cursor, ring entries) behind many resident CTAs; measured, the replay step then sits at about half the read-only
// ceiling (benchmarks/experiments/README.md). Here a CTA lives for the whole launch and walks the items (row, head)
// blockIdx.x, blockIdx.x + gridDim.x, ...; one producer warp runs ahead of the consumers:
//   - it resolves the chain for 32 items at once (lane i: item i's slot, then its cursor read and arrival), so each
//     dependent latency is paid once per 32 items, not once per item;
//   - it bulk-copies every byte an item needs (the state tile, this step's x, z, B, C, per-dim D, and for replay
//     the ring entries below the cursor: x_e of the head, B_e of the group, (Δ_e, Λ_e)) into a stage of shared
//     memory; several stages are in flight, so the bytes in flight no longer depend on how many CTAs are resident;
//   - the consumer warps (8) compute from shared memory and write outputs, states, ring appends with plain stores.
// The arithmetic follows mamba2_eager.cu / mamba2_replay.cu line for line (same fp32 operations in the same order
// per element; dots are tree sums, the contract's bounded half), so the two variants agree to rounding of the sums'
// order and the tests hold both to the same bounds.
// Cursor hand-off as in mamba2_replay.cu: every item reads d_fill[slot] (acquire) and counts itself on
// d_arrive[slot]; the item that arrives last (H per row) writes the advanced fill and re-zeroes d_arrive when its
// consumers are done with it.
// Limits: activation rows, P and N must allow 16-byte bulk copies (checked at launch; variant 0 has none of these).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/pipeline.cuh"
#include "mamba2/mamba2_device.cuh"

namespace rssm {
namespace m2 {

constexpr int kConsumerWarps = 8;
constexpr int kConsumers = 32 * kConsumerWarps;
constexpr int kPipeThreads = 32 + kConsumers;  // warp 0 produces
constexpr uint32_t kFullArrivals = 33;         // the producer's lane 0 (with the byte count) + 32 copy arrivals

__host__ __device__ inline uint32_t up16(uint64_t n) { return static_cast<uint32_t>((n + 15) & ~uint64_t(15)); }

// What the producer resolved for an item, handed to the consumers in the stage: the chain and the per-head scalars
// (loaded by the producer with the chain, so a consumer never waits on a global load of its own).
struct Meta {
  int slot, j, arrived;
  float dt_raw, bias, A_log, Dh, pad;
};

// Byte offsets of one stage's regions and of the CTA's shared memory (host and device compute the same).
struct PipeLayout {
  uint32_t tile, rx, rB, dl, x, z, Bt, Ct, Dp, meta, stage;  // within a stage
  uint32_t scratch, bars, total;                            // within the CTA's shared memory
  int stages, E4;
};

// E = interval (0: eager); tile_elem = bytes per element of the largest tile a stage holds.
inline PipeLayout make_layout(const Mamba2StepArgs& a, int E, int tile_elem, int stages) {
  const int P = a.dims.P, N = a.dims.N, act = a.act_format == Format::FP32 ? 4 : 2;
  PipeLayout L{};
  uint32_t o = 0;
  L.tile = o, o += up16(uint64_t(P) * N * tile_elem);
  L.rx = o, o += up16(uint64_t(E) * P * 2);
  L.rB = o, o += up16(uint64_t(E) * N * 2);
  L.dl = o, o += up16(uint64_t(E) * 8);
  L.x = o, o += up16(uint64_t(P) * act);
  L.z = o, o += a.d_z ? up16(uint64_t(P) * act) : 0;
  L.Bt = o, o += up16(uint64_t(N) * act);
  L.Ct = o, o += up16(uint64_t(N) * act);
  L.Dp = o, o += a.d_per_dim ? up16(uint64_t(P) * 4) : 0;
  L.meta = o, o += up16(sizeof(Meta));
  L.stage = o;
  L.stages = stages;
  L.E4 = (E + 3) & ~3;
  L.scratch = stages * L.stage;
  // Consumer scratch, two sets (item parity): dots and weights per entry, ring sum per row.
  const uint32_t scratch_floats = E > 0 ? 2u * (2u * L.E4 + ((P + 3) & ~3)) : 0u;
  L.bars = L.scratch + up16(uint64_t(scratch_floats) * 4);
  L.total = L.bars + 2 * stages * 8;
  return L;
}


// ---- producer ----

// Item i of the launch: row i / H, head i % H. The CTA's n-th item is blockIdx.x + n·gridDim.x.
// Chain of lane `lane`'s item: its slot, and for replay its cursor (acquire) and arrival count.
struct Chain {
  int slot = -1, fill = 0, arrived = 0;
  float dt_raw = 0.0f, bias = 0.0f, A_log = 0.0f, Dh = 0.0f;
};

template <bool kReplay, class A>
__device__ Chain resolve(const Mamba2ReplayLaunch& l, long long item, long long n_items) {
  Chain c;
  const Mamba2StepArgs& a = l.step;
  const int H = a.dims.H;
  if (item < n_items) {
    const int row = static_cast<int>(item / H), h = static_cast<int>(item % H);
    c.slot = a.d_slot[row];
    c.dt_raw = to_f32(static_cast<const A*>(a.d_dt)[row * or_default(a.dt_stride, H) + h]);
    c.bias = a.d_dt_bias[h], c.A_log = a.d_A_log[h], c.Dh = a.d_per_dim ? 0.0f : a.d_D[h];
    if constexpr (kReplay) {
      if (c.slot >= 0) {
        c.fill = ld_acquire(&l.d_fill[c.slot]);
        c.arrived = atomicAdd(&l.d_arrive[c.slot], 1);  // after the read (acquire): see mamba2_replay.cu
      }
    }
  }
  return c;
}

// Issues the copies of one item into stage `st` (called by the 32 lanes of the producer warp, after lane 0 declared
// the tile's bytes): the tile as bulk copies, everything else as 16-byte cp.async pieces spread over the lanes
// (timed the same as one bulk request per piece, and needs no per-piece byte count). The stage's full barrier
// tracks both.
template <bool kReplay, class A>
__device__ void issue_item(const Mamba2ReplayLaunch& l, const PipeLayout& L, char* st, uint64_t* full, int lane,
                           long long item, int slot, int j, const void* tile_src, uint32_t tile_bytes) {
  const Mamba2StepArgs& a = l.step;
  const int H = a.dims.H, P = a.dims.P, N = a.dims.N, G = a.dims.G;
  const int row = static_cast<int>(item / H), h = static_cast<int>(item % H), g = h / (H / G);
  // The tile in up to 4 pieces (more copies in flight at once), each a multiple of 16 bytes.
  const uint32_t piece = (tile_bytes / 4) % 16 == 0 ? tile_bytes / 4 : tile_bytes;
  if (lane < 4 && lane * piece < tile_bytes)
    pipe::bulk_load(st + L.tile + lane * piece, static_cast<const char*>(tile_src) + lane * piece, piece, full);
  const uint32_t act = a.act_format == Format::FP32 ? 4 : 2;
  const long long bcs = or_default(a.bc_stride, static_cast<long long>(G) * N);
  // The small pieces in 16-byte cp.async copies spread over the lanes (the stage's arrivals wait for them).
  const auto spread = [lane](char* dst, const void* src, int bytes) {
    for (int i = lane; i < bytes / 16; i += 32) pipe::copy16_async(dst + 16 * i, static_cast<const char*>(src) + 16 * i);
  };
  spread(st + L.x, static_cast<const char*>(a.d_x) + (row * or_default(a.x_stride, static_cast<long long>(H) * P) + h * P) * act,
         P * act);
  if (a.d_z)
    spread(st + L.z, static_cast<const char*>(a.d_z) + (row * or_default(a.z_stride, static_cast<long long>(H) * P) + h * P) * act,
           P * act);
  spread(st + L.Bt, static_cast<const char*>(a.d_B) + (row * bcs + g * N) * act, N * act);
  spread(st + L.Ct, static_cast<const char*>(a.d_C) + (row * bcs + g * N) * act, N * act);
  if (a.d_per_dim) spread(st + L.Dp, a.d_D + static_cast<long long>(h) * P, P * 4);
  if constexpr (kReplay) {
    const long long ring0 = static_cast<long long>(slot) * l.capacity;
    const int xc = P * 2 / 16, bc = N * 2 / 16;  // 16-byte pieces of an entry's x_e, B_e
    for (int i = lane; i < j * xc; i += 32) {
      const int e = i / xc, c = i % xc;
      pipe::copy16_async(st + L.rx + e * P * 2 + 16 * c, l.d_ring_x + ((ring0 + e) * H + h) * P + 8 * c);
    }
    for (int i = lane; i < j * bc; i += 32) {
      const int e = i / bc, c = i % bc;
      pipe::copy16_async(st + L.rB + e * N * 2 + 16 * c, l.d_ring_B + ((ring0 + e) * G + g) * N + 8 * c);
    }
    for (int e = lane; e < j; e += 32) pipe::copy8_async(st + L.dl + e * 8, l.d_ring_dl + ((ring0 + e) * H + h) * 2);
  }
}

template <bool kReplay, class A, class CK, class RD>
__device__ void produce(const Mamba2ReplayLaunch& l, const PipeLayout& L, char* smem, uint64_t* full, uint64_t* empty,
                        long long n_items, int ck_elem, int src_elem, const void* state) {
  const int lane = threadIdx.x;
  const Mamba2StepArgs& a = l.step;
  const int H = a.dims.H, P = a.dims.P, N = a.dims.N;
  const long long grid = gridDim.x, head_elems = static_cast<long long>(P) * N;
  long long n = 0;
  for (long long base = blockIdx.x; base < n_items; base += 32 * grid) {
    const Chain mine = resolve<kReplay, A>(l, base + lane * grid, n_items);
    for (int i = 0; i < 32; ++i) {
      const long long item = base + i * grid;
      if (item >= n_items) break;  // uniform over the warp
      const int slot = __shfl_sync(0xFFFFFFFFu, mine.slot, i);
      const int fill = __shfl_sync(0xFFFFFFFFu, mine.fill, i);
      const int arrived = __shfl_sync(0xFFFFFFFFu, mine.arrived, i);
      const float dt_raw = __shfl_sync(0xFFFFFFFFu, mine.dt_raw, i), bias = __shfl_sync(0xFFFFFFFFu, mine.bias, i);
      const float A_log = __shfl_sync(0xFFFFFFFFu, mine.A_log, i), Dh = __shfl_sync(0xFFFFFFFFu, mine.Dh, i);
      const int k = static_cast<int>(n % L.stages);
      if (lane == 0) pipe::mbar_wait(&empty[k], static_cast<uint32_t>((n / L.stages) & 1) ^ 1u);
      __syncwarp();
      char* st = smem + static_cast<size_t>(k) * L.stage;
      int j = 0;
      const void* tile_src = nullptr;
      uint32_t tile_bytes = 0, bytes = 0;
      if (slot >= 0) {
        const long long head_off = (static_cast<long long>(slot) * H + item % H) * head_elems;
        if constexpr (kReplay) {
          j = min(max(fill, 0), l.interval - 1);  // a corrupt cursor must not send ring writes out of bounds
          const bool flush = j + 1 == l.interval;
          const bool from_read = !std::is_void<RD>::value && !flush;  // dual non-flush: the read copy
          tile_src = static_cast<const char*>(from_read ? l.d_read : l.d_ckpt) + head_off * (from_read ? src_elem : ck_elem);
          tile_bytes = static_cast<uint32_t>(head_elems * (from_read ? src_elem : ck_elem));
        } else {
          tile_src = static_cast<const char*>(state) + head_off * ck_elem;
          tile_bytes = static_cast<uint32_t>(head_elems * ck_elem);
        }
        bytes = tile_bytes;  // the bulk copies; the small pieces are tracked by the copy arrivals
      }
      if (lane == 0) {
        Meta* m = reinterpret_cast<Meta*>(st + L.meta);
        m->slot = slot, m->j = j, m->arrived = arrived;
        m->dt_raw = dt_raw, m->bias = bias, m->A_log = A_log, m->Dh = Dh;
        pipe::mbar_arrive_expect_tx(&full[k], bytes);  // releases the meta written above
      }
      __syncwarp();
      if (slot >= 0) issue_item<kReplay, A>(l, L, st, &full[k], lane, item, slot, j, tile_src, tile_bytes);
      pipe::arrive_after_copies(&full[k]);
      ++n;
    }
  }
}

// ---- consumers ----

// How the consumers cover a tile of T: a row of N elements is N/kVec lanes of 16-byte vectors.
template <class T>
struct PipeRows {
  static constexpr int kVec = 16 / sizeof(T);
  int lanes, rpp, c, rsub;
  __device__ PipeRows(int N, int ct) { lanes = N / kVec, rpp = kConsumers / lanes, c = ct % lanes, rsub = ct / lanes; }
};

template <class A>
__device__ inline float act_at(const char* base, int i) {
  return to_f32(reinterpret_cast<const A*>(base)[i]);
}

// The y element of row p: as write_out in mamba2_replay.cu / the eager kernel's epilogue.
template <class A>
__device__ inline void put_y(const Mamba2StepArgs& a, const PipeLayout& L, const char* st, int row, int h, int p,
                             float out, float Dh) {
  const float xa = act_at<A>(st + L.x, p);
  out += (a.d_per_dim ? reinterpret_cast<const float*>(st + L.Dp)[p] : Dh) * xa;
  if (a.d_z) out = out * silu<float>(act_at<A>(st + L.z, p));
  store_y(a.d_y, row * or_default(a.y_stride, static_cast<long long>(a.dims.H) * a.dims.P) +
                     static_cast<long long>(h) * a.dims.P + p,
          a.y_format == Format::BF16, out);
}

// Eager: S <- decay·S + Δ·x ⊗ B stored, y = S·C + D·x (mamba2_eager.cu).
template <class S, class A>
__device__ void eager_item(const Mamba2StepArgs& a, const PipeLayout& L, const char* st, int ct, int row, int h,
                           S* head, float delta, float decay, float Dh) {
  const int P = a.dims.P, N = a.dims.N;
  const PipeRows<S> r(N, ct);
  constexpr int kVec = PipeRows<S>::kVec;
  float Bv[kVec], Cv[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) Bv[k] = act_at<A>(st + L.Bt, r.c * kVec + k), Cv[k] = act_at<A>(st + L.Ct, r.c * kVec + k);
  const char* tile = st + L.tile;
  for (int p0 = 0; p0 < P; p0 += r.rpp) {  // uniform over each warp: every lane reaches the shuffles
    const int p = p0 + r.rsub;
    const int pc = min(p, P - 1);
    float s[kVec];
    StateVec<S>::unpack(*reinterpret_cast<const uint4*>(tile + (static_cast<long long>(pc) * N + r.c * kVec) * sizeof(S)), s);
    const float dx = delta * act_at<A>(st + L.x, pc);
#pragma unroll
    for (int k = 0; k < kVec; ++k) s[k] = fmaf(decay, s[k], dx * Bv[k]);
    if (p < P) StateVec<S>::store(head + static_cast<long long>(p) * N + r.c * kVec, s);
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc = fmaf(s[k], Cv[k], acc);
    acc = row_sum(acc, r.lanes);
    if (r.c == 0 && p < P) put_y<A>(a, L, st, row, h, p, acc, Dh);
  }
}

// Replay, non-flush: y = decay·(S_c·C_t) + ring sum + D·x from the tile of T (read copy or shared checkpoint).
template <class T, class A>
__device__ void replay_read(const Mamba2StepArgs& a, const PipeLayout& L, const char* st, const float* ring, int ct,
                            int row, int h, float decay, float Dh) {
  const int P = a.dims.P, N = a.dims.N;
  const PipeRows<T> r(N, ct);
  constexpr int kVec = PipeRows<T>::kVec;
  float Cv[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) Cv[k] = act_at<A>(st + L.Ct, r.c * kVec + k);
  const char* tile = st + L.tile;
#pragma unroll 4
  for (int p0 = 0; p0 < P; p0 += r.rpp) {
    const int p = p0 + r.rsub;
    float s[kVec];
    StateVec<T>::unpack(*reinterpret_cast<const uint4*>(tile + (static_cast<long long>(min(p, P - 1)) * N + r.c * kVec) * sizeof(T)), s);
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc = fmaf(s[k], Cv[k], acc);
    acc = row_sum(acc, r.lanes);
    if (r.c == 0 && p < P) put_y<A>(a, L, st, row, h, p, decay * acc + ring[p], Dh);
  }
}

// Replay, flush: output from the checkpoint tile (update copy), then S <- decay·S + Σ_e (w_e·x_e[p])·B_e over the
// entries in order, stored (and the dual read copy from the same registers). Rows four at a time share B_e's loads.
template <class CK, class RD, class A>
__device__ void replay_flush(const Mamba2ReplayLaunch& l, const PipeLayout& L, const char* st, const float* ring,
                             const float* wf, int ct, int row, int h, int j, CK* ck, RD* rd, float decay, float Dh) {
  const Mamba2StepArgs& a = l.step;
  const int P = a.dims.P, N = a.dims.N;
  const PipeRows<CK> r(N, ct);
  constexpr int kVec = PipeRows<CK>::kVec;
  constexpr int R = 4;
  float Cv[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) Cv[k] = act_at<A>(st + L.Ct, r.c * kVec + k);
  const char* tile = st + L.tile;
  const uint16_t* rx = reinterpret_cast<const uint16_t*>(st + L.rx);
  const uint16_t* rB = reinterpret_cast<const uint16_t*>(st + L.rB);
  for (int p0 = 0; p0 < P; p0 += R * r.rpp) {
    float s[R][kVec];
#pragma unroll
    for (int u = 0; u < R; ++u) {
      const int p = p0 + u * r.rpp + r.rsub;
      StateVec<CK>::unpack(*reinterpret_cast<const uint4*>(tile + (static_cast<long long>(min(p, P - 1)) * N + r.c * kVec) * sizeof(CK)), s[u]);
      float acc = 0.0f;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        acc = fmaf(s[u][k], Cv[k], acc);
        s[u][k] *= decay;
      }
      acc = row_sum(acc, r.lanes);
      if (r.c == 0 && p < P) put_y<A>(a, L, st, row, h, p, decay * acc + ring[p], Dh);
    }
    for (int e = 0; e <= j; ++e) {
      float b[kVec];
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const int n = r.c * kVec + k;
        b[k] = e < j ? bf16_bits_to_float(rB[e * N + n]) : to_buffer_f32(reinterpret_cast<const A*>(st + L.Bt)[n]);
      }
      const float w = wf[e];
#pragma unroll
      for (int u = 0; u < R; ++u) {
        const int pc = min(p0 + u * r.rpp + r.rsub, P - 1);
        const float xe = e < j ? bf16_bits_to_float(rx[e * P + pc]) : to_buffer_f32(reinterpret_cast<const A*>(st + L.x)[pc]);
        const float ue = w * xe;
#pragma unroll
        for (int k = 0; k < kVec; ++k) s[u][k] = fmaf(ue, b[k], s[u][k]);
      }
    }
#pragma unroll
    for (int u = 0; u < R; ++u) {
      const int p = p0 + u * r.rpp + r.rsub;
      if (p < P) {
        StateVec<CK>::store(ck + static_cast<long long>(p) * N + r.c * kVec, s[u]);
        if constexpr (!std::is_void<RD>::value) store_narrow4(rd + static_cast<long long>(p) * N + r.c * kVec, s[u]);
      }
    }
  }
}

// Replay: the ring's terms of one item (dots B_e·C_t, weights, ring sum per row) into scratch, and the token's ring
// append for a non-flushing row. Ends with the consumers synchronised (scratch complete).
template <class A>
__device__ void replay_ring(const Mamba2ReplayLaunch& l, const PipeLayout& L, const char* st, float* dot, float* wf,
                            float* ring, int ct, int row, int h, int slot, int j, float delta, float lam_t) {
  const Mamba2StepArgs& a = l.step;
  const int H = a.dims.H, P = a.dims.P, N = a.dims.N, G = a.dims.G, g = h / (H / G);
  const int warp = ct / 32, lane = ct % 32, nent = j + 1;
  const bool flush = nent == l.interval;
  const uint16_t* rx = reinterpret_cast<const uint16_t*>(st + L.rx);
  const uint16_t* rB = reinterpret_cast<const uint16_t*>(st + L.rB);
  const float2* dl = reinterpret_cast<const float2*>(st + L.dl);
  const A* xt = reinterpret_cast<const A*>(st + L.x);
  const A* Bt = reinterpret_cast<const A*>(st + L.Bt);
  for (int e = warp; e < nent; e += kConsumerWarps) {  // one warp per entry
    float acc = 0.0f;
    for (int n = lane; n < N; n += 32) {
      const float b = e < j ? bf16_bits_to_float(rB[e * N + n]) : to_buffer_f32(Bt[n]);
      acc = fmaf(b, act_at<A>(st + L.Ct, n), acc);
    }
    acc = row_sum(acc, 32);
    if (lane == 0) {
      const float2 de = e < j ? dl[e] : make_float2(delta, lam_t);
      dot[e] = acc;
      wf[e] = de.x * expf(lam_t - de.y);
    }
  }
  pipe::consumer_sync(kConsumers);
  // Ring sum of row p: tpr threads per row (a power of two within a warp), entries e = sub, sub + tpr, ...
  int tpr = 1;
  while (tpr < 32 && 2 * tpr * P <= kConsumers) tpr *= 2;
  const int rows_per_round = kConsumers / tpr, sub = ct % tpr;
  for (int p0 = 0; p0 < P; p0 += rows_per_round) {  // uniform: every lane reaches the shuffles
    const int p = p0 + ct / tpr;
    const bool live = p < P;
    float acc = 0.0f;
    for (int e = sub; e < nent && live; e += tpr) {
      const float xe = e < j ? bf16_bits_to_float(rx[e * P + p]) : to_buffer_f32(xt[p]);
      acc = fmaf(wf[e] * dot[e], xe, acc);
    }
    acc = row_sum(acc, tpr);
    if (live && sub == 0) {
      ring[p] = acc;
      if (!flush)
        l.d_ring_x[static_cast<long long>(slot) * l.capacity * H * P + (static_cast<long long>(j) * H + h) * P + p] =
            to_buffer_bits(xt[p]);
    }
  }
  if (!flush) {
    if (h % (H / G) == 0)
      for (int n = ct; n < N; n += kConsumers)
        l.d_ring_B[static_cast<long long>(slot) * l.capacity * G * N + (static_cast<long long>(j) * G + g) * N + n] =
            to_buffer_bits(Bt[n]);
    if (ct == 0)
      reinterpret_cast<float2*>(l.d_ring_dl)[static_cast<long long>(slot) * l.capacity * H + static_cast<long long>(j) * H + h] =
          make_float2(delta, lam_t);
  }
  pipe::consumer_sync(kConsumers);
}

// One kernel for both: kReplay false is the eager step (CK = state type, RD void).
template <bool kReplay, class A, class CK, class RD>
__global__ void __launch_bounds__(kPipeThreads, 2) mamba2_pipelined_kernel(Mamba2ReplayLaunch l, PipeLayout L, void* state) {
  extern __shared__ __align__(128) char smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + L.bars);
  uint64_t* empty = full + L.stages;
  const Mamba2StepArgs& a = l.step;
  const int H = a.dims.H, P = a.dims.P, N = a.dims.N;
  const long long n_items = static_cast<long long>(a.batch) * H;
  if (threadIdx.x == 0) {
    for (int k = 0; k < L.stages; ++k) pipe::mbar_init(&full[k], kFullArrivals), pipe::mbar_init(&empty[k], kConsumerWarps);
    pipe::mbar_init_fence();
  }
  __syncthreads();
  using Src = typename std::conditional<std::is_void<RD>::value, CK, RD>::type;
  if (threadIdx.x < 32) {
    constexpr int src_elem = sizeof(Src);
    produce<kReplay, A, CK, RD>(l, L, smem, full, empty, n_items, sizeof(CK), src_elem, state);
    return;
  }
  const int ct = threadIdx.x - 32;
  const long long head_elems = static_cast<long long>(P) * N;
  long long n = 0;
  for (long long item = blockIdx.x; item < n_items; item += gridDim.x, ++n) {
    const int row = static_cast<int>(item / H), h = static_cast<int>(item % H);
    const int k = static_cast<int>(n % L.stages);
    pipe::mbar_wait(&full[k], static_cast<uint32_t>((n / L.stages) & 1));
    const char* st = smem + static_cast<size_t>(k) * L.stage;
    const Meta m = *reinterpret_cast<const Meta*>(st + L.meta);
    if (m.slot >= 0) {
      const float delta = delta_of(m.dt_raw, m.bias, a.dt_min, a.dt_max), A_log = m.A_log, Dh = m.Dh;
      const long long head_off = (static_cast<long long>(m.slot) * H + h) * head_elems;
      if constexpr (!kReplay) {
        const float decay = expf(-expf(A_log) * delta);
        eager_item<CK, A>(a, L, st, ct, row, h, static_cast<CK*>(state) + head_off, delta, decay, Dh);
      } else {
        const int j = m.j;
        const float lam_prev = j > 0 ? reinterpret_cast<const float2*>(st + L.dl)[j - 1].y : 0.0f;
        const float lam_t = lam_prev + -expf(A_log) * delta;
        float* sc = reinterpret_cast<float*>(smem + L.scratch) + (n & 1) * (2 * L.E4 + ((P + 3) & ~3));
        float *dot = sc, *wf = sc + L.E4, *ring = sc + 2 * L.E4;
        replay_ring<A>(l, L, st, dot, wf, ring, ct, row, h, m.slot, j, delta, lam_t);
        const float decay = expf(lam_t);
        if (j + 1 == l.interval) {
          RD* rd = nullptr;
          if constexpr (!std::is_void<RD>::value) rd = static_cast<RD*>(l.d_read) + head_off;
          replay_flush<CK, RD, A>(l, L, st, ring, wf, ct, row, h, j, static_cast<CK*>(l.d_ckpt) + head_off, rd, decay, Dh);
        } else {
          replay_read<Src, A>(a, L, st, ring, ct, row, h, decay, Dh);
        }
        if (ct == 0 && m.arrived == H - 1)  // the row's last item: advance the cursor for the next launch
          ring_cursor_advance(l, m.slot, j);
      }
    }
    __syncwarp();
    if (ct % 32 == 0) pipe::mbar_arrive(&empty[k]);
  }
}

// ---- host ----

inline int pipe_sms() {
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

constexpr uint32_t kPipeSmemBudget = 220 * 1024;  // per CTA (the H200 allows 227 KiB)

void check_pipelined(const char* what, const Mamba2StepArgs& a) {
  const int act = a.act_format == Format::FP32 ? 4 : 2;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if ((a.dims.P * act) % 16 != 0 || (a.dims.N * act) % 16 != 0 || a.dims.P % 8 != 0 || a.dims.N % 8 != 0)
    bad_launch(what, "the pipelined variant needs P and N multiples of 8 (16-byte bulk copies); use variant 0");
  const long long xs = or_default(a.x_stride, static_cast<long long>(a.dims.H) * a.dims.P);
  const long long zs = or_default(a.z_stride, static_cast<long long>(a.dims.H) * a.dims.P);
  const long long bs = or_default(a.bc_stride, static_cast<long long>(a.dims.G) * a.dims.N);
  if ((xs * act) % 16 || (zs * act) % 16 || (bs * act) % 16 || !aligned(a.d_x) || !aligned(a.d_B) || !aligned(a.d_C) ||
      (a.d_z && !aligned(a.d_z)) || (a.d_per_dim && !aligned(a.d_D)))
    bad_launch(what, "the pipelined variant needs 16-byte aligned rows of x, z, B, C (and per-dim D); use variant 0");
}

template <bool kReplay, class A, class CK, class RD>
void launch_pipelined(const Mamba2ReplayLaunch& l, void* state, int tile_elem, int stages, int ctas_per_sm,
                      cudaStream_t stream) {
  const char* what = kReplay ? "mamba2_replay_step" : "mamba2_eager_step";
  const int E = kReplay ? l.interval : 0;
  const PipeLayout one = make_layout(l.step, E, tile_elem, 1);
  const int cps = ctas_per_sm > 0 ? ctas_per_sm : 2;
  const uint32_t budget = kPipeSmemBudget / cps;
  int s = stages;
  if (s <= 0) {
    const uint32_t fixed = one.total - one.stage;  // scratch and barriers grow little with the stage count
    s = static_cast<int>((budget - std::min(budget, fixed + 16u * 8)) / one.stage);
    s = std::min(s, 8);
  }
  if (s < 2) bad_launch(what, "a pipelined stage (" + std::to_string(one.stage) + " bytes) leaves fewer than 2 stages in " +
                                  std::to_string(budget) + " bytes of shared memory; use variant 0");
  const PipeLayout L = make_layout(l.step, E, tile_elem, s);
  if (L.total > 227 * 1024) bad_launch(what, "pipelined stages exceed shared memory (" + std::to_string(L.total) + " bytes)");
  const long long n_items = static_cast<long long>(l.step.batch) * l.step.dims.H;
  auto kernel = mamba2_pipelined_kernel<kReplay, A, CK, RD>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(L.total)));
  // Persistent CTAs must all be resident at once: a CTA that waits for a free SM runs its share after the others
  // (measured: the replay step 1.6x slower when registers let only one of two CTAs per SM in).
  int resident = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, kPipeThreads, L.total));
  const long long grid = std::min<long long>(n_items, static_cast<long long>(pipe_sms()) * std::max(1, std::min(cps, resident)));
  kernel<<<static_cast<unsigned>(grid), kPipeThreads, L.total, stream>>>(l, L, state);
  CUDA_CHECK_LAUNCH(stream);
}

template <class A>
void eager_pipelined_act(const Mamba2EagerLaunch& e, cudaStream_t stream) {
  Mamba2ReplayLaunch l;
  l.step = e.step;
  switch (e.state_format) {
    case Format::FP32: launch_pipelined<false, A, float, void>(l, e.d_state, 4, e.pipe_stages, e.pipe_ctas, stream); break;
    case Format::BF16: launch_pipelined<false, A, __nv_bfloat16, void>(l, e.d_state, 2, e.pipe_stages, e.pipe_ctas, stream); break;
    default: launch_pipelined<false, A, __half, void>(l, e.d_state, 2, e.pipe_stages, e.pipe_ctas, stream); break;
  }
}

template <class A>
void replay_pipelined_act(const Mamba2ReplayLaunch& l, cudaStream_t stream) {
  const int st = l.pipe_stages, cps = l.pipe_ctas;
  // The stage holds the checkpoint tile a flush reads (a dual checkpoint's fp32 update copy): sizeof(CK) bytes each.
  with_checkpoint_types(l.dual, l.ckpt_format, l.read_format, [&](auto ck, auto rd) {
    using CK = typename decltype(ck)::type;
    using RD = typename decltype(rd)::type;
    launch_pipelined<true, A, CK, RD>(l, nullptr, static_cast<int>(sizeof(CK)), st, cps, stream);
  });
}

void eager_pipelined(const Mamba2EagerLaunch& e, cudaStream_t stream) {
  check_pipelined("mamba2_eager_step", e.step);
  if (e.step.act_format == Format::BF16) eager_pipelined_act<__nv_bfloat16>(e, stream);
  else eager_pipelined_act<float>(e, stream);
}

void replay_pipelined(const Mamba2ReplayLaunch& l, cudaStream_t stream) {
  check_pipelined("mamba2_replay_step", l.step);
  if (l.step.act_format == Format::BF16) replay_pipelined_act<__nv_bfloat16>(l, stream);
  else replay_pipelined_act<float>(l, stream);
}

}  // namespace m2
}  // namespace rssm
