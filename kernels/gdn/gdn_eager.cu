// GDN eager decode step (gdn_kernels.h): per state row i (a K-vector of value head h)
//   kv = S_i·k_t;  u = β·(v_i − α·kv);  S_i <- α·S_i + u·k_t (stored in its format);  o_i = S_i·q_t
// in the order of the CPU emulation (lib/cpu/eager.cpp: the read against k on the undecayed stored row, the
// output from the stored, rounded row), fp32 arithmetic, q_t and k_t normalised once per CTA.
// Work split: one CTA of 128 threads per (row, value head, V-tile), or per (row, group of value heads sharing a key
// head) where heads_per_cta > 1: the heads' tiles are one stream of chunks. A state row of K elements is K/vec lanes
// of 16-byte vectors (fp32 K=128: 32 lanes; bf16: 16), so a CTA covers 128/(K/vec) rows per pass; a chunk is kUnroll
// passes. The first chunk's loads are issued before q and k are normalised, and each later chunk's before the chunk
// in hand is used; l2_ahead chunks beyond those are prefetched into L2 (a rolling window: a whole tile per resident
// CTA overruns the L2, and the re-reads cost more than the prefetch gained). The rows' dots are reduced together
// (row_sums, reduce_scatter): the step is bound by instruction issue as much as by bandwidth. V-tiles at small batch,
// where rows × heads would not fill 132 SMs, and two for fp32 states at serving batch (gdn_eager_v_tiles).
#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/cuda_check.h"
#include "common/device_query.h"
#include "gdn/gdn_device.cuh"

namespace rssm {
namespace gdn {

// kK: kPresetK or 0 (K at run time, gdn_device.cuh). kSR: stochastic rounding of the stored state (16-bit S only),
// the words of numeric/stochastic.h at step d_pos[row].
// hpc: value heads per CTA (a divisor of HV / HK, so they share one key head: q and k are normalised once for all of
// them); the stream runs through the heads as one sequence of chunks, the next head's first chunk loaded while the
// last chunk of the head in hand is used. l2_ahead: < 0 prefetches the CTA's whole tile into L2 before the prologue;
// D >= 0 prefetches D chunks beyond the register double buffer, rolling (D = 0: none). Tunables of the launch struct.
// Launch bounds: the head loop's bookkeeping took fp32 states from 72 to 93 registers (5 CTAs per SM) when the
// compiler was free; 7 CTAs per SM caps them at 72 again with no spill at K = 128 (4-8 bytes for a run-time K). 16-bit
// states need about 128 registers (4 CTAs per SM) either way.
template <class S, class A, int kK, bool kSR>
__global__ void __launch_bounds__(kThreads, sizeof(S) == 4 ? 7 : 4)
    gdn_eager_kernel(GdnStepArgs a, S* __restrict__ state, int vtiles, int hpc, int l2_ahead) {
  extern __shared__ float4 smem4[];
  float* s_q = reinterpret_cast<float*>(smem4);  // [K] normalised q (scaled), then [K] normalised k, then scratch
  __shared__ Gate s_gate[kMaxEagerHeadsPerCta];
  constexpr int kVec = StateVec<S>::kVec;
  constexpr int kL = kK / kVec;  // lanes of a row at compile time, 0 when K is a run-time value
  const int HV = a.dims.HV, K = kK > 0 ? kK : a.dims.K, V = a.dims.V, vpk = a.dims.HV / a.dims.HK;
  const int per_row = HV / hpc * vtiles;
  const int row = blockIdx.x / per_row;
  const int h0 = (blockIdx.x % per_row) / vtiles * hpc, tile = blockIdx.x % vtiles;
  const int slot = a.d_slot[row];
  if (slot < 0) return;  // padded row
  const int tile_rows = (V + vtiles - 1) / vtiles;
  const int v_begin = tile * tile_rows, v_end = min(V, v_begin + tile_rows);
  const long long head_off = (static_cast<long long>(slot) * HV + h0) * V * K;  // head h0's; head h0 + l is l·V·K on
  const long long head_elems = static_cast<long long>(V) * K;
  const int lanes = K / kVec, rows_per_pass = kThreads / lanes;
  const int c = threadIdx.x % lanes, rsub = threadIdx.x / lanes;
  const int span = rows_per_pass * kUnroll;
  const int nch = (v_end - v_begin + span - 1) / span, total = hpc * nch;  // chunks per head, per CTA
  // Chunk g of the CTA's sequence into L2 (one 128-byte line per thread and pass; rows of a chunk are contiguous).
  const auto prefetch = [&](int g) {
    if (g >= total) return;
    const int i0 = v_begin + g % nch * span, i1 = min(v_end, i0 + span);
    const char* src =
        reinterpret_cast<const char*>(state + head_off + g / nch * head_elems + static_cast<long long>(i0) * K);
    const int lines = static_cast<int>((static_cast<long long>(i1 - i0) * K * sizeof(S) + 127) / 128);
    for (int i = threadIdx.x; i < lines; i += kThreads) asm volatile("prefetch.global.L2 [%0];" ::"l"(src + 128LL * i));
  };
  if (l2_ahead < 0) {
    // The whole tile on its way into L2 while the CTA normalises q and k (a chain of dependent small steps).
    for (int g = 0; g < total; ++g) prefetch(g);
  } else {
    for (int g = 2; g <= l2_ahead; ++g) prefetch(g);  // chunk 1 is the register double buffer's first load
  }
  const A* v0 = static_cast<const A*>(a.d_v) + row * or_default(a.v_stride, static_cast<long long>(HV) * V) +
                static_cast<long long>(h0) * V;
  S* const base = state + head_off + c * kVec;
  // A chunk (kUnroll passes of rows from i0 of head h0 + hl) into registers as raw 16-byte vectors (a 16-bit state
  // stays packed until used: two chunks in flight cost 32 registers whatever the format); rows past the tile hold zeros.
  // Rows u of a chunk are one pass of the CTA apart, rows_per_pass·K = kThreads·kVec elements whatever K is: fixed
  // offsets from the chunk's first row, no 64-bit row arithmetic per load or store.
  constexpr int kPass = kThreads * kVec;
  const auto load = [&](const S* hp, const A* v, int i0, uint4 (&q)[kUnroll], float (&vv)[kUnroll]) {
    const S* r0 = hp + static_cast<long long>(i0 + rsub) * K;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // every load first: kUnroll independent 16-byte loads in flight
      const int i = i0 + u * rows_per_pass + rsub;
      const bool live = i < v_end;
      q[u] = live ? __ldcs(reinterpret_cast<const uint4*>(r0 + u * kPass)) : make_uint4(0, 0, 0, 0);
      vv[u] = live ? to_f32(v[i]) : 0.0f;
    }
  };
  // The first chunk is in flight while the CTA normalises q and k; each later chunk is loaded before the one in
  // hand is used.
  uint4 q[kUnroll];
  float vv[kUnroll];
  load(base, v0, v_begin, q, vv);
  // The gates' inputs read now and used after q and k arrive: read and used at once, they put a second latency before
  // the first threads' q and k reads, which the CTA's first barrier waits for.
  GateIn<A> gin{};
  if (threadIdx.x < hpc) gin = gate_in<A>(a, row, h0 + threadIdx.x);
  float* s_k = s_q + K;
  load_normalised<A>(a, row, h0 / vpk, s_q, s_k, s_k + K, [&] {
    if (threadIdx.x < hpc) s_gate[threadIdx.x] = gate_from(gin);
  });

  float kv[kVec], qv[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) kv[i] = s_k[c * kVec + i], qv[i] = s_q[c * kVec + i];
  const long long os = or_default(a.o_stride, static_cast<long long>(HV) * V);
  const bool o_bf16 = a.o_format == Format::BF16;

  int hl = 0, i0 = v_begin;
  S* hp = base;      // head h0 + hl, this lane's first vector
  const A* vp = v0;  // its v
#pragma unroll 1
  for (int g = 0; g < total; ++g) {
    const Gate gt = s_gate[hl];
    float s[kUnroll][kVec];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) StateVec<S>::unpack(q[u], s[u]);  // zero bits: 0.0f in every format
    // The next chunk: further down this head, or the next head's first.
    const bool next_head = i0 + span >= v_end;
    const int in = next_head ? v_begin : i0 + span;
    S* const hpn = next_head ? hp + head_elems : hp;
    const A* const vpn = next_head ? vp + V : vp;
    uint4 qn[kUnroll];
    float vn[kUnroll];
    if (g + 1 < total) load(hpn, vpn, in, qn, vn);
    if (l2_ahead > 0) prefetch(g + 1 + l2_ahead);
    // The kUnroll rows' dots reduced together (row_sum's tree per value, no per-row loop: the step is bound by
    // instruction issue); the outputs' dots with reduce_scatter, each sum ending on the lane that writes it.
    float dk[kUnroll], dq[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      dk[u] = 0.0f;
#pragma unroll
      for (int e = 0; e < kVec; ++e) dk[u] = fmaf(s[u][e], kv[e], dk[u]);
    }
    row_sums<kUnroll, kL>(dk, lanes);
    S* r0 = hp + static_cast<long long>(i0 + rsub) * K;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = i0 + u * rows_per_pass + rsub;
      const float upd = gt.beta * (vv[u] - gt.alpha * dk[u]);
#pragma unroll
      for (int e = 0; e < kVec; ++e) s[u][e] = fmaf(gt.alpha, s[u][e], upd * kv[e]);
      if (i < v_end) {  // s now holds stored values
        if constexpr (kSR) {
          uint32_t r[kVec];
          random_words<kVec>(SrKey{a.seed, RandomStream::EagerState, static_cast<long long>(a.d_pos[row])},
                             head_off + hl * head_elems + c * kVec + static_cast<long long>(i) * K, r);
          StateVec<S>::store_sr(r0 + u * kPass, s[u], r);
        } else {
          StateVec<S>::store(r0 + u * kPass, s[u]);
        }
      }
      dq[u] = 0.0f;
#pragma unroll
      for (int e = 0; e < kVec; ++e) dq[u] = fmaf(s[u][e], qv[e], dq[u]);
    }
    const long long o_row = row * os + static_cast<long long>(h0 + hl) * V;
    reduce_scatter_each<kUnroll, kL>(dq, lanes, [&](int u, float o) {
      const int i = i0 + u * rows_per_pass + rsub;
      if (i < v_end) store_o(a.d_o, o_row + i, o_bf16, o);
    });
    if (g + 1 < total) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) q[u] = qn[u], vv[u] = vn[u];
    }
    hl += next_head, i0 = in, hp = hpn, vp = vpn;
  }
}

template <class S, class A>
void launch_eager(const GdnEagerLaunch& l, int vtiles, int hpc, cudaStream_t stream) {
  const long long blocks = static_cast<long long>(l.step.batch) * (l.step.dims.HV / hpc) * vtiles;
  if (blocks > 0x7FFFFFFFLL) bad_launch("gdn_eager_step", "batch · HV · tiles exceeds the grid limit");
  const size_t bytes = (2 * static_cast<size_t>(l.step.dims.K) + 2 * kWarps) * sizeof(float);
  auto kernel = l.step.dims.K == kPresetK ? gdn_eager_kernel<S, A, kPresetK, false> : gdn_eager_kernel<S, A, 0, false>;
  // Stochastic rounding: 16-bit states only (an fp32 state stores without rounding), the kernel for any K.
  if constexpr (sizeof(S) == 2) {
    if (l.step.rounding == Rounding::Stochastic) kernel = gdn_eager_kernel<S, A, 0, true>;
  }
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  kernel<<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(l.step, static_cast<S*>(l.d_state), vtiles, hpc,
                                                                      l.l2_ahead);
  CUDA_CHECK_LAUNCH(stream);
}

template <class S>
void dispatch_act(const GdnEagerLaunch& l, int vtiles, int hpc, cudaStream_t stream) {
  if (l.step.act_format == Format::BF16)
    launch_eager<S, __nv_bfloat16>(l, vtiles, hpc, stream);
  else
    launch_eager<S, float>(l, vtiles, hpc, stream);
}

}  // namespace gdn

int gdn_rows_per_pass(const GdnDims& dims, Format state_format) {
  const int lanes = dims.K / gdn::state_vec(state_format);
  return lanes > 0 ? gdn::kThreads / lanes : dims.V;
}

bool gdn_small_batch(const GdnDims& dims, int batch) {
  return 2LL * batch * dims.HV <= 4LL * sm_count();
}

namespace {
// The floor of every split: a tile keeps at least one pass of rows and 8 KiB of state.
bool tile_fits(const GdnDims& dims, Format state_format, int tiles) {
  const long long head_bytes = static_cast<long long>(dims.V) * dims.K * format_bytes(state_format);
  return head_bytes / tiles >= 8192 && (dims.V + tiles - 1) / tiles >= gdn_rows_per_pass(dims, state_format);
}
}  // namespace

int gdn_v_tiles(const GdnDims& dims, int batch, Format state_format) {
  // Small batches are latency chains per CTA (slot, state; replay: cursor, ring, prologue), so the fastest split is
  // the fewest CTAs that still spread the state over the SMs: halve the tiles' rows while the grid stays within 4 CTAs
  // per SM and a tile keeps >= 8 KiB of state. On the H200 (Qwen3.5-4B, benchmarks/experiments/gdn_v_tiles.h200.json)
  // that is 8 tiles at batch 1 and 2 at batch 8 for fp32 (eager 8.1 -> 5.2 us and 16.1 -> 13.3; inner replay K16
  // 17.6 -> 8.4 and 24.9 -> 14.5); the rule it replaced (>= 2048 CTAs) chose 32 and 8, and a second wave of CTAs
  // doubles the chain. Never below one pass of rows. Serving batches keep whole heads here: a replay CTA's ring
  // prologue does not shrink with its tile, and two tiles cost replay 20-45% at batch 64 and 256
  // (benchmarks/experiments/gdn_replay_vt.*.h200.json).
  const long long ctas = static_cast<long long>(batch) * dims.HV, slots = 4LL * sm_count();
  int tiles = 1;
  if (!gdn_small_batch(dims, batch)) return tiles;
  while (ctas * 2 * tiles <= slots && tile_fits(dims, state_format, 2 * tiles)) tiles *= 2;
  return tiles;
}

int gdn_eager_v_tiles(const GdnDims& dims, int batch, Format state_format) {
  const int tiles = gdn_v_tiles(dims, batch, state_format);
  // Serving batch, fp32 state: two tiles per (row, head), though the grid is already many waves. A CTA of one tile
  // streams 128 KiB (read and written back) at 7 CTAs per SM, so the last wave drains for a long CTA; halved, it drains
  // for half of one. On the H200 (Qwen3.5-4B, bench_gdn_cuda --tiles_tune, two processes,
  // benchmarks/experiments/gdn_eager_vt.{1,2}.h200.json): batch 256 281.6 -> 278.4 us (89.2% -> 90.3% of copy),
  // batch 64 79.1 -> 75.1; 4 tiles 288.2 / 76.1, 8 tiles 374 / 97. 16-bit states lose (bf16, batch 256: 150.1 ->
  // 156.2; their CTAs are half as long and share the key head's prologue over HV / HK heads), so they keep one.
  if (tiles == 1 && state_format == Format::FP32 && tile_fits(dims, state_format, 2)) return 2;
  return tiles;
}

int gdn_eager_heads_per_cta(const GdnDims& dims, int batch, Format state_format) {
  if (state_format == Format::FP32 || dims.HK <= 0 || gdn_v_tiles(dims, batch, state_format) > 1) return 1;
  const int vpk = dims.HV / dims.HK;
  for (int hpc = std::min(vpk, gdn::kMaxEagerHeadsPerCta); hpc > 1; --hpc)
    if (vpk % hpc == 0 && static_cast<long long>(batch) * (dims.HV / hpc) >= 2048) return hpc;
  return 1;
}

void gdn_eager_step(const GdnEagerLaunch& l, cudaStream_t stream) {
  const char* what = "gdn_eager_step";
  gdn::check_step_args(what, l.step, true);
  const int vpk = l.step.dims.HV / l.step.dims.HK;
  if (l.heads_per_cta < 0 || l.heads_per_cta > gdn::kMaxEagerHeadsPerCta ||
      (l.heads_per_cta > 0 && vpk % l.heads_per_cta != 0))
    gdn::bad_launch(what, "heads_per_cta must be 0 (automatic) or a divisor of HV / HK = " + std::to_string(vpk) +
                              " up to " + std::to_string(gdn::kMaxEagerHeadsPerCta) + " (got " +
                              std::to_string(l.heads_per_cta) + ")");
  if (l.v_tiles < 0 || l.v_tiles > l.step.dims.V)
    gdn::bad_launch(what, "v_tiles must be 0 (automatic) or 1..V (got " + std::to_string(l.v_tiles) + ")");
  if (l.step.batch == 0) return;
  if (l.state_format != Format::FP32 && l.state_format != Format::BF16 && l.state_format != Format::FP16)
    gdn::bad_launch(what, "state_format must be fp32, bf16 or fp16 (got " + format_name(l.state_format) + ")");
  if (!l.d_state) gdn::bad_launch(what, "d_state must be set");
  gdn::check_state_rows(what, l.step.dims.K, gdn::state_vec(l.state_format), l.d_state);
  const int vtiles = l.v_tiles > 0 ? l.v_tiles : gdn_eager_v_tiles(l.step.dims, l.step.batch, l.state_format);
  const int hpc = l.heads_per_cta > 0 ? l.heads_per_cta : gdn_eager_heads_per_cta(l.step.dims, l.step.batch, l.state_format);
  switch (l.state_format) {
    case Format::FP32: gdn::dispatch_act<float>(l, vtiles, hpc, stream); break;
    case Format::BF16: gdn::dispatch_act<__nv_bfloat16>(l, vtiles, hpc, stream); break;
    default: gdn::dispatch_act<__half>(l, vtiles, hpc, stream); break;
  }
}

}  // namespace rssm
