// Google Benchmark of the Gated DeltaNet CUDA step kernels (kernels/gdn/gdn_kernels.h) on the H200: µs per decode
// step of one layer for eager, replay (inner-product and reconstruct routes, shared fp32/bf16 checkpoint) and dual
// (fp32 update + bf16 read copy; at interval 16 also block-scaled e4m3 and int8 read copies, inner route, which run the
// kernels for any K), with the copy and read-only ceilings measured in the same process, and at the end a
// table of issue 11's targets (met / missed, with the numbers). Not a correctness test (tests/gpu/ is).
//
//   bench_gdn_cuda [--preset=NAME] [--full] [--smoke] [--once] [google benchmark flags]
//     --preset  GDN geometry preset of model/model.h (default qwen35-4b; qwen35-122b for HV 64)
//     --full    the full sweep (intervals 4 8 16 32 × batch 1 8 64 256 512 × both routes × every scheme, fp16 too);
//               default: interval 16 at every batch, intervals 4 8 32 at batch 1 and 256 for both fp32 routes
//               (about two minutes on an H200)
//     --smoke   a few cases at batch 1 and 3, one repetition (ctest); exits 0 with a message when no GPU exists
//     --once    one iteration of one repetition per case (for ncu: few launches to replay)
//     --eager_tune  adds eager rows at batch 64 and 256 over the eager tunables (heads per CTA 1, HV/HK; L2 prefetch
//               ahead -1 = whole tile, 0, 1, 2, 4 chunks), named .../hpc:H/l2:D/batch:B
//     --replay_tune  adds interval-16 replay rows at batch 256 over the L2 prefetch distance (-1 = whole tile,
//               0, 1, 2, 4 chunks), named .../l2:D/batch:256
//     --fold_tune  adds interval-16 inner-route rows at batch 256 whose flush folds with FFMA instead of the tensor
//               cores (GdnReplayLaunch::mma_fold = false), named .../fold:fma/batch:256
//     --tiles_tune  adds rows at batch 1 and 8 over the CTAs per (row, value head), v_tiles 1 .. 32 (as many as
//               leave one pass of rows per CTA): eager fp32 / bf16, and the interval-16 replay schemes of the targets,
//               named .../vt:N/batch:B; and eager fp32 / bf16 at batch 64 and 256 at v_tiles 1, 2, 4, 8 (finer CTAs
//               shorten the last wave of a grid of ~9 waves: gdn_eager_v_tiles), the same replay schemes there at
//               v_tiles 1, 2, 4
//   JSON: --benchmark_out=FILE --benchmark_out_format=json (context: GPU, driver, git commit, ceilings, geometry).
//
// Method (KERNELS.md "Measuring like the peers were measured"), as bench_mamba2_cuda: inputs and state already on
// the device; one CUDA graph of n × [256 MiB memset (evicts the 50 MB L2), fill-cursor set, step] against the same
// graph without the step; the difference / n is one iteration's step time (UseManualTime). Repetitions report mean,
// median, stddev; quote the median. Kinds per replay scheme:
//   nonflush  mean over ring fills 0 .. interval−2 (one graph cycles through them)
//   flush     the step that folds a full ring into the checkpoint (fill interval−1)
//   amortised interval consecutive steps from an empty ring, the last one flushing (the real sequence)
// Counters: bytes = modelled bytes per step (metrics/traffic.h; nonflush is its mean over the interval),
// GBps = bytes / time, of_copy / of_read = GBps over the copy / read-only ceiling measured at start-up,
// us_median = the median step time in µs, v_tiles = CTAs per (row, value head).
#include <benchmark/benchmark.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench_cuda_common.cuh"
#include "common/cuda_check.h"
#include "gdn/gdn_kernels.h"
#include "metrics/traffic.h"
#include "model/model.h"
#include "replayssm_version.h"

using namespace rssm;
using namespace rssm::bench;

namespace {

struct Options {
  std::string preset = "qwen35-4b";
  bool full = false, smoke = false, once = false, eager_tune = false, replay_tune = false, tiles_tune = false;
  bool fold_tune = false;
};
Options g_opt;
Model g_model;
constexpr size_t kL2FlushBytes = 256ull << 20;
std::map<std::string, std::vector<double>> g_times;  // per case name: every measured step time (s), for the targets

// ---- one step benchmark ----

enum class Scheme { Eager, Replay, Dual };
enum class Kind { Step, Nonflush, Flush, Amortised };

struct Config {
  Scheme scheme;
  GdnRoute route;
  Format state;  // eager state / replay checkpoint / dual read copy
  Kind kind;
  int interval;
  int batch;
  bool tuned = false;  // tunables set (named in the case), else the launch structs' defaults
  int hpc = 0, l2 = 1;  // GdnEagerLaunch::heads_per_cta; l2_ahead of either launch
  int vt = 0;           // v_tiles of either launch forced (named .../vt:N), 0 = the launcher's choice
  bool fma_fold = false;  // GdnReplayLaunch::mma_fold = false (named .../fold:fma)
};

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Step: return "step";
    case Kind::Nonflush: return "nonflush";
    case Kind::Flush: return "flush";
    default: return "amortised";
  }
}

// e.g. eager/fp32/batch:256, replay/inner/fp32/K16/amortised/batch:256, dual/reconstruct/fp32+bf16/K16/flush/batch:1
std::string bench_name(const Config& c) {
  std::string s = c.scheme == Scheme::Eager ? "eager" : c.scheme == Scheme::Replay ? "replay" : "dual";
  if (c.scheme != Scheme::Eager) s += c.route == GdnRoute::Inner ? "/inner" : "/reconstruct";
  s += "/" + (c.scheme == Scheme::Dual ? "fp32+" + format_name(c.state) : format_name(c.state));
  if (c.scheme != Scheme::Eager) s += "/K" + std::to_string(c.interval) + "/" + kind_name(c.kind);
  if (c.tuned && c.scheme == Scheme::Eager) s += "/hpc:" + std::to_string(c.hpc);
  if (c.tuned) s += "/l2:" + std::to_string(c.l2);
  if (c.vt > 0) s += "/vt:" + std::to_string(c.vt);
  if (c.fma_fold) s += "/fold:fma";
  return s + "/batch:" + std::to_string(c.batch);
}

double modelled_bytes(const Config& c) {
  TrafficParams tp;
  tp.scheme = c.scheme == Scheme::Eager ? "eager" : c.scheme == Scheme::Replay ? "replay" : "dual";
  tp.state_bytes = c.scheme == Scheme::Dual ? 4 : format_bytes(c.state);
  tp.read_bytes = c.scheme == Scheme::Dual ? format_bytes(c.state) : 0;
  tp.act_bytes = 2;
  tp.buffer_bytes = 2;
  tp.interval = c.interval;
  tp.batch = c.batch;
  const Traffic t = traffic(g_model, tp);
  switch (c.kind) {
    case Kind::Flush: return t.batch_flush;
    case Kind::Amortised: return t.batch_amortised;
    default: return t.batch_nonflush;
  }
}

void bm_step(benchmark::State& st, Config c) {
  const GdnParams& m = g_model.gdn;
  const int HK = m.HK, HV = m.HV, K = m.K, V = m.V, B = c.batch, KI = c.interval;
  const size_t SE = size_t(HV) * V * K, OUT = size_t(HV) * V, QK = size_t(HK) * K;
  const bool eager = c.scheme == Scheme::Eager, dual = c.scheme == Scheme::Dual;
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // Pool of `batch` slots, row r at slot batch-1-r (rows need not be in slot order).
  const size_t ck_elem = dual ? 4 : size_t(format_bytes(c.state));
  const bool scaled = dual && format_bytes(c.state) == 1;  // a block-scaled read copy: codes and row scales
  Dev<uint8_t> ck(size_t(B) * SE * ck_elem), rd(dual ? size_t(B) * SE * format_bytes(c.state) : 0);
  Dev<float> rscale(scaled ? size_t(B) * OUT : 0);
  if (ck_elem == 4) init_dev(reinterpret_cast<float*>(ck.p), B * SE, 1, 0.3f);
  else if (c.state == Format::FP16) init_dev(reinterpret_cast<__half*>(ck.p), B * SE, 1, 0.3f);
  else init_dev(reinterpret_cast<__nv_bfloat16*>(ck.p), B * SE, 1, 0.3f);
  if (scaled) {  // codes of small finite values (0x30: 0.5 in e4m3, 48 in int8), scales 2^-8
    CUDA_CHECK(cudaMemset(rd.p, 0x30, size_t(B) * SE));
    const std::vector<float> sc(size_t(B) * OUT, 1.0f / 256);
    CUDA_CHECK(cudaMemcpy(rscale.p, sc.data(), sc.size() * 4, cudaMemcpyHostToDevice));
  } else if (dual) {
    if (c.state == Format::FP16) init_dev(reinterpret_cast<__half*>(rd.p), B * SE, 1, 0.3f);
    else init_dev(reinterpret_cast<__nv_bfloat16*>(rd.p), B * SE, 1, 0.3f);
  }
  std::vector<int32_t> slots(B);
  for (int r = 0; r < B; ++r) slots[r] = B - 1 - r;
  Dev<int32_t> d_slot(B);
  CUDA_CHECK(cudaMemcpy(d_slot.p, slots.data(), B * sizeof(int32_t), cudaMemcpyHostToDevice));
  // Inputs (bf16), output (bf16) and parameters.
  Dev<__nv_bfloat16> q(B * QK), k(B * QK), v(B * OUT), ga(size_t(B) * HV), gb(size_t(B) * HV), o(B * OUT);
  init_dev(q.p, B * QK, 2, 1.0f), init_dev(k.p, B * QK, 3, 1.0f), init_dev(v.p, B * OUT, 4, 1.0f);
  init_dev(ga.p, size_t(B) * HV, 5, 1.0f), init_dev(gb.p, size_t(B) * HV, 6, 1.0f);
  std::vector<float> A_log(HV), dt_bias(HV, -3.0f);
  for (int h = 0; h < HV; ++h) A_log[h] = std::log(1.0f + 15.0f * h / HV);
  Dev<float> dA(HV), dBias(HV);
  CUDA_CHECK(cudaMemcpy(dA.p, A_log.data(), HV * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dBias.p, dt_bias.data(), HV * 4, cudaMemcpyHostToDevice));
  // Ring: valid entries everywhere (G falling), cursors set per step by the graph.
  const int cap = std::max(KI, 1);
  Dev<uint16_t> ru(eager ? 0 : size_t(B) * cap * OUT), rk(eager ? 0 : size_t(B) * cap * QK);
  Dev<float> rG(eager ? 0 : size_t(B) * cap * HV);
  Dev<int32_t> fill(B), arrive(B), fills_src(size_t(KI) * B);
  if (!eager) {
    init_dev(reinterpret_cast<__nv_bfloat16*>(ru.p), size_t(B) * cap * OUT, 7, 1.0f);
    init_dev(reinterpret_cast<__nv_bfloat16*>(rk.p), size_t(B) * cap * QK, 8, 0.09f);  // |k| ~ 1 over K = 128
    std::vector<float> h_G(size_t(B) * cap * HV);
    for (size_t i = 0; i < h_G.size(); ++i) h_G[i] = -0.1f * (static_cast<int>(i / HV) % cap + 1);
    CUDA_CHECK(cudaMemcpy(rG.p, h_G.data(), h_G.size() * 4, cudaMemcpyHostToDevice));
    std::vector<int32_t> f(size_t(KI) * B);
    for (int x = 0; x < KI; ++x) std::fill(f.begin() + size_t(x) * B, f.begin() + size_t(x + 1) * B, x);
    CUDA_CHECK(cudaMemcpy(fills_src.p, f.data(), f.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(arrive.p, 0, B * 4));
    CUDA_CHECK(cudaMemset(fill.p, 0, B * 4));
  }
  Dev<uint8_t> l2(kL2FlushBytes);

  GdnStepArgs a;
  a.dims = {HK, HV, K, V};
  a.batch = B;
  a.d_slot = d_slot.p;
  a.act_format = Format::BF16;
  a.d_q = q.p, a.d_k = k.p, a.d_v = v.p, a.d_a = ga.p, a.d_b = gb.p;
  a.d_A_log = dA.p, a.d_dt_bias = dBias.p;
  a.d_o = o.p, a.o_format = Format::BF16;
  GdnEagerLaunch le;
  le.step = a, le.state_format = c.state, le.d_state = ck.p;
  le.heads_per_cta = c.hpc, le.l2_ahead = c.l2, le.v_tiles = c.vt;
  GdnReplayLaunch lr;
  lr.step = a, lr.interval = KI, lr.capacity = cap, lr.route = c.route;
  lr.ckpt_format = dual ? Format::FP32 : c.state, lr.d_ckpt = ck.p;
  lr.dual = dual, lr.read_format = c.state, lr.d_read = dual ? rd.p : nullptr;
  lr.d_read_scale = scaled ? rscale.p : nullptr;
  if (c.tuned) lr.l2_ahead = c.l2;
  lr.v_tiles = c.vt;
  lr.mma_fold = !c.fma_fold;
  lr.d_ring_u = ru.p, lr.d_ring_k = rk.p, lr.d_ring_G = rG.p, lr.d_fill = fill.p, lr.d_arrive = arrive.p;

  // The step sequence of one graph: per step, the fill it starts from (-1: leave the cursor to the kernel).
  std::vector<int> seq;
  switch (c.kind) {
    case Kind::Step: seq.assign(20, -1); break;
    case Kind::Nonflush:
      while (seq.size() < 16)  // short intervals: the cycle of fills repeated
        for (int f = 0; f + 1 < KI; ++f) seq.push_back(f);
      break;
    case Kind::Flush: seq.assign(20, KI - 1); break;
    case Kind::Amortised:
      for (int r = 0; r < std::max(1, 20 / KI); ++r)
        for (int f = 0; f < KI; ++f) seq.push_back(f == 0 ? 0 : -1);  // reset at each interval start, then natural
      break;
  }
  auto capture = [&](bool with_step) {
    cudaGraph_t g;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int f : seq) {
      CUDA_CHECK(cudaMemsetAsync(l2.p, 0, kL2FlushBytes, s));
      if (f >= 0) CUDA_CHECK(cudaMemcpyAsync(fill.p, fills_src.p + size_t(f) * B, B * 4, cudaMemcpyDeviceToDevice, s));
      if (with_step) {
        if (eager) gdn_eager_step(le, s);
        else gdn_replay_step(lr, s);
      }
    }
    CUDA_CHECK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t e;
    CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
    CUDA_CHECK(cudaGraphDestroy(g));
    return e;
  };
  cudaGraphExec_t with = capture(true), without = capture(false);
  Events ev;
  auto once = [&] {
    const float tb = ev.ms(s, [&] { CUDA_CHECK(cudaGraphLaunch(without, s)); });
    const float ta = ev.ms(s, [&] { CUDA_CHECK(cudaGraphLaunch(with, s)); });
    return std::max(0.0, double(ta - tb)) * 1e-3 / seq.size();  // seconds per step
  };
  once(), once();  // warm-up
  std::vector<double> times;
  for (auto _ : st) {
    const double t = once();
    st.SetIterationTime(t);
    times.push_back(t);
  }
  CUDA_CHECK(cudaGraphExecDestroy(with));
  CUDA_CHECK(cudaGraphExecDestroy(without));
  CUDA_CHECK(cudaStreamDestroy(s));

  std::vector<double>& all = g_times[bench_name(c)];
  all.insert(all.end(), times.begin(), times.end());
  std::sort(times.begin(), times.end());
  const double med = times.empty() ? 0 : times[times.size() / 2];
  const double bytes = modelled_bytes(c);
  st.counters["bytes"] = bytes;
  st.counters["GBps"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["us_median"] = med * 1e6;
  st.counters["of_copy"] = med > 0 ? bytes / med / 1e9 / g_copy_GBps : 0;
  st.counters["of_read"] = med > 0 ? bytes / med / 1e9 / g_read_GBps : 0;
  // c.state: the copy a non-flush step streams
  st.counters["v_tiles"] = c.vt > 0 ? c.vt : eager ? gdn_eager_v_tiles({HK, HV, K, V}, B, c.state) : gdn_replay_v_tiles(lr);
}

void add(const Config& c) {
  auto* b = benchmark::RegisterBenchmark(bench_name(c).c_str(), [c](benchmark::State& st) { bm_step(st, c); });
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
  if (g_opt.once) b->Iterations(1)->Repetitions(1);
  else if (g_opt.smoke) b->Iterations(2)->Repetitions(1);
  else b->Iterations(10)->Repetitions(5)->ReportAggregatesOnly(true);
}

void add_replay_kinds(Scheme sc, GdnRoute route, Format f, int K, int batch) {
  for (Kind k : {Kind::Nonflush, Kind::Flush, Kind::Amortised}) {
    if (k == Kind::Nonflush && K == 1) continue;
    add({sc, route, f, k, K, batch});
  }
}

void register_all() {
  for (bool copy : {true, false}) {
    auto* b = benchmark::RegisterBenchmark(copy ? "ceiling/copy_d2d" : "ceiling/read_only",
                                           [copy](benchmark::State& st) { bm_ceiling(st, copy); });
    b->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(1)->Repetitions(1);
  }
  const GdnRoute kInner = GdnRoute::Inner, kRec = GdnRoute::Reconstruct;
  if (g_opt.smoke) {
    for (int b : {1, 3}) {
      add({Scheme::Eager, kInner, Format::FP32, Kind::Step, 1, b});
      add_replay_kinds(Scheme::Replay, kInner, Format::BF16, 4, b);
      add_replay_kinds(Scheme::Replay, kRec, Format::FP32, 4, b);
      add_replay_kinds(Scheme::Dual, kInner, Format::BF16, 4, b);
    }
    return;
  }
  const std::vector<int> batches = {1, 8, 64, 256, 512};
  const std::vector<Format> eager_fmts =
      g_opt.full ? std::vector<Format>{Format::FP32, Format::BF16, Format::FP16} : std::vector<Format>{Format::FP32, Format::BF16};
  for (Format f : eager_fmts)
    for (int b : batches) add({Scheme::Eager, kInner, f, Kind::Step, 1, b});
  if (g_opt.eager_tune) {
    const int vpk = g_model.gdn.HV / g_model.gdn.HK;
    for (Format f : {Format::FP32, Format::BF16})
      for (int b : {64, 256})
        for (int hpc : {1, vpk})
          for (int l2 : {-1, 0, 1, 2, 4}) {
            Config c{Scheme::Eager, kInner, f, Kind::Step, 1, b};
            c.tuned = true, c.hpc = hpc, c.l2 = l2;
            add(c);
          }
  }
  if (g_opt.replay_tune) {
    struct R {
      Scheme sc;
      GdnRoute route;
      Format f;
    };
    for (R r : {R{Scheme::Replay, kInner, Format::FP32}, R{Scheme::Replay, kRec, Format::FP32},
                R{Scheme::Replay, kInner, Format::BF16}, R{Scheme::Dual, kInner, Format::BF16}})
      for (int l2 : {-1, 0, 1, 2, 4})
        for (Kind k : {Kind::Nonflush, Kind::Flush, Kind::Amortised}) {
          Config c{r.sc, r.route, r.f, k, 16, 256};
          c.tuned = true, c.l2 = l2;
          add(c);
        }
  }
  if (g_opt.fold_tune) {
    for (auto [sc, f] : {std::pair{Scheme::Replay, Format::FP32}, std::pair{Scheme::Replay, Format::BF16},
                         std::pair{Scheme::Dual, Format::BF16}})
      for (Kind k : {Kind::Nonflush, Kind::Flush, Kind::Amortised}) {
        Config c{sc, kInner, f, k, 16, 256};
        c.fma_fold = true;
        add(c);
      }
  }
  struct S {
    Scheme sc;
    GdnRoute route;
    Format f;
  };
  // v_tiles of at least one pass of rows per CTA, the launchers' floor (fp32 4 rows, 16-bit 8 rows at K = 128).
  const auto max_vt = [](Format f) {
    const GdnParams& m = g_model.gdn;
    return m.V / gdn_rows_per_pass({m.HK, m.HV, m.K, m.V}, f);
  };
  if (g_opt.tiles_tune) {
    for (int b : {64, 256})
      for (Format f : {Format::FP32, Format::BF16})
        for (int vt = 1; vt <= 8 && vt <= max_vt(f); vt *= 2) {
          Config c{Scheme::Eager, kInner, f, Kind::Step, 1, b};
          c.vt = vt;
          add(c);
        }
    for (int b : {64, 256})
      for (S s : std::vector<S>{{Scheme::Replay, kInner, Format::FP32}, {Scheme::Replay, kRec, Format::FP32},
                                {Scheme::Replay, kInner, Format::BF16}, {Scheme::Dual, kInner, Format::BF16}})
        for (int vt = 1; vt <= 4 && vt <= max_vt(s.f); vt *= 2)
          for (Kind k : {Kind::Nonflush, Kind::Flush, Kind::Amortised}) {
            Config c{s.sc, s.route, s.f, k, 16, b};
            c.vt = vt;
            add(c);
          }
    for (int b : {1, 8})
      for (int vt = 1; vt <= 32; vt *= 2) {
        for (Format f : {Format::FP32, Format::BF16})
          if (vt <= max_vt(f)) {
            Config c{Scheme::Eager, kInner, f, Kind::Step, 1, b};
            c.vt = vt;
            add(c);
          }
        for (S s : std::vector<S>{{Scheme::Replay, kInner, Format::FP32}, {Scheme::Replay, kRec, Format::FP32},
                                  {Scheme::Replay, kInner, Format::BF16}, {Scheme::Dual, kInner, Format::BF16}})
          if (vt <= max_vt(s.f))
            for (Kind k : {Kind::Nonflush, Kind::Flush, Kind::Amortised}) {
              Config c{s.sc, s.route, s.f, k, 16, b};
              c.vt = vt;
              add(c);
            }
      }
  }
  // Default: the schemes of the targets at interval 16 at every batch; the route comparison (crossover) at every
  // interval at batch 256, and batch 1.
  const std::vector<S> at16 = {{Scheme::Replay, kInner, Format::FP32}, {Scheme::Replay, kRec, Format::FP32},
                               {Scheme::Replay, kInner, Format::BF16}, {Scheme::Dual, kInner, Format::BF16}};
  const std::vector<S> routes = {{Scheme::Replay, kInner, Format::FP32}, {Scheme::Replay, kRec, Format::FP32}};
  std::vector<S> full;
  for (GdnRoute r : {kInner, kRec})
    for (S s : std::vector<S>{{Scheme::Replay, r, Format::FP32}, {Scheme::Replay, r, Format::BF16},
                              {Scheme::Replay, r, Format::FP16}, {Scheme::Dual, r, Format::BF16},
                              {Scheme::Dual, r, Format::FP16}})
      full.push_back(s);
  for (int K : {4, 8, 16, 32})
    for (int b : batches) {
      if (g_opt.full) {
        for (const S& s : full) add_replay_kinds(s.sc, s.route, s.f, K, b);
      } else if (K == 16) {
        for (const S& s : at16) add_replay_kinds(s.sc, s.route, s.f, K, b);
        for (Format f : {Format::E4M3, Format::INT8}) add_replay_kinds(Scheme::Dual, kInner, f, K, b);
      } else if (b == 1 || b == 256) {
        for (const S& s : routes) add_replay_kinds(s.sc, s.route, s.f, K, b);
      }
    }
}

// ---- issue 11's targets, from the medians of this run ----

double median_us(const std::string& name) {
  auto it = g_times.find(name);
  if (it == g_times.end() || it->second.empty()) return NAN;
  std::vector<double> t = it->second;
  std::sort(t.begin(), t.end());
  return t[t.size() / 2] * 1e6;
}

void print_targets() {
  const std::string b256 = "/batch:256", b1 = "/batch:1";
  const double eager32 = median_us("eager/fp32" + b256), eager16 = median_us("eager/bf16" + b256);
  const double eager32_1 = median_us("eager/fp32" + b1);
  const double rep32 = median_us("replay/inner/fp32/K16/amortised" + b256);
  const double rec32 = median_us("replay/reconstruct/fp32/K16/amortised" + b256);
  const double rep32_1 = median_us("replay/inner/fp32/K16/amortised" + b1);
  const double rep16 = median_us("replay/inner/bf16/K16/amortised" + b256);
  const double dual = median_us("dual/inner/fp32+bf16/K16/amortised" + b256);
  Config ce{Scheme::Eager, GdnRoute::Inner, Format::FP32, Kind::Step, 1, 256};
  const double eager_bytes = modelled_bytes(ce);
  const double eager_of_copy = eager_bytes / (eager32 * 1e-6) / 1e9 / g_copy_GBps;
  // `ok` is false whenever a number is NaN (a case that did not run): such lines say n/a, not MISSED.
  auto line = [](const char* what, bool ok, const std::string& got) {
    const bool ran = got.find("nan") == std::string::npos;
    std::printf("  %-62s %-6s %s\n", what, ran ? (ok ? "met" : "MISSED") : "n/a", got.c_str());
  };
  char buf[256];
  std::printf("\nbench_gdn_cuda targets (issue 11; %s, medians of this run; NaN = case not run):\n",
              g_model.geometry_string().c_str());
  std::snprintf(buf, sizeof buf, "%.1f us = %.0f%% of copy ceiling %.0f GB/s", eager32, 100 * eager_of_copy, g_copy_GBps);
  line("eager fp32 batch 256 >= 90% of the copy ceiling", eager_of_copy >= 0.9, buf);
  std::snprintf(buf, sizeof buf, "%.1f us (published replay 165.5 us)", rep32);
  line("replay fp32 K16 batch 256 amortised <= 150 us", rep32 <= 150, buf);
  std::snprintf(buf, sizeof buf, "%.2fx (eager %.1f us)", eager32 / rep32, eager32);
  line("replay fp32 K16 batch 256 >= 1.75x our eager", eager32 / rep32 >= 1.75, buf);
  std::snprintf(buf, sizeof buf, "replay %.2f us, eager %.2f us (published 8.0 vs 5.9)", rep32_1, eager32_1);
  line("batch 1: replay fp32 K16 amortised no slower than eager", rep32_1 <= eager32_1, buf);
  std::snprintf(buf, sizeof buf, "%.2fx (bf16 eager %.1f us, replay %.1f us)", eager16 / rep16, eager16, rep16);
  line("bf16 state batch 256: replay >= 1.5x bf16 eager", eager16 / rep16 >= 1.5, buf);
  std::snprintf(buf, sizeof buf, "%.1f us", dual);
  line("dual fp32+bf16 K16 batch 256 amortised <= 100 us", dual <= 100, buf);
  std::snprintf(buf, sizeof buf, "inner %.1f us, reconstruct %.1f us at K16", rep32, rec32);
  line("(info) routes at K16, batch 256, fp32", true, buf);
  // Crossover: the smallest interval from which the inner route is faster than reconstruct (amortised, batch 256).
  int crossover = 0;
  std::string per;
  for (int K : {4, 8, 16, 32}) {
    const double in = median_us("replay/inner/fp32/K" + std::to_string(K) + "/amortised" + b256);
    const double re = median_us("replay/reconstruct/fp32/K" + std::to_string(K) + "/amortised" + b256);
    std::snprintf(buf, sizeof buf, " K%d %.1f/%.1f", K, in, re);
    per += buf;
    if (in < re && crossover == 0) crossover = K;
    if (!(in < re)) crossover = 0;
  }
  const double in32 = median_us("replay/inner/fp32/K32/amortised" + b256);
  const double re32 = median_us("replay/reconstruct/fp32/K32/amortised" + b256);
  std::snprintf(buf, sizeof buf, "inner/reconstruct us:%s; inner faster from %s", per.c_str(),
                crossover ? ("K" + std::to_string(crossover)).c_str() : "no interval measured");
  line("inner route faster than reconstruct at K32 (batch 256, fp32)", in32 < re32, buf);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--preset=", 0) == 0) g_opt.preset = a.substr(9);
    else if (a == "--full") g_opt.full = true;
    else if (a == "--smoke") g_opt.smoke = true;
    else if (a == "--once") g_opt.once = true;
    else if (a == "--eager_tune") g_opt.eager_tune = true;
    else if (a == "--replay_tune") g_opt.replay_tune = true;
    else if (a == "--fold_tune") g_opt.fold_tune = true;
    else if (a == "--tiles_tune") g_opt.tiles_tune = true;
    else rest.push_back(argv[i]);
  }
  try {
    g_model = model_preset(g_opt.preset);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gdn_cuda: --preset: %s\n", e.what());
    return 2;
  }
  if (g_model.family != Family::GDN) {
    std::fprintf(stderr, "bench_gdn_cuda: --preset=%s is not a GDN geometry\n", g_opt.preset.c_str());
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("bench_gdn_cuda: no CUDA device, nothing measured\n");
    return 0;
  }
  try {
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    int driver = 0;
    CUDA_CHECK(cudaDriverGetVersion(&driver));
    measure_ceilings(g_opt.smoke);
    benchmark::AddCustomContext("gpu", prop.name);
    benchmark::AddCustomContext("sms", std::to_string(prop.multiProcessorCount));
    benchmark::AddCustomContext("cuda_driver", std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10));
    benchmark::AddCustomContext("git_commit", REPLAYSSM_GIT_COMMIT);
    benchmark::AddCustomContext("geometry", g_model.geometry_string());
    benchmark::AddCustomContext("preset", g_opt.preset);
    benchmark::AddCustomContext("copy_ceiling_GBps", std::to_string(g_copy_GBps));
    benchmark::AddCustomContext("read_ceiling_GBps", std::to_string(g_read_GBps));
    benchmark::AddCustomContext("method", "CUDA graph of n x [256 MiB memset, step] minus the graph without the step, "
                                          "per step; L2 flushed before every step; activations, buffer and output bf16");
    std::printf("bench_gdn_cuda: %s, %s, ceilings copy %.0f GB/s, read-only %.0f GB/s\n", prop.name,
                g_model.geometry_string().c_str(), g_copy_GBps, g_read_GBps);
    register_all();
    int n = static_cast<int>(rest.size());
    benchmark::Initialize(&n, rest.data());
    if (benchmark::ReportUnrecognizedArguments(n, rest.data())) return 2;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    if (!g_opt.smoke && !g_opt.once) print_targets();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gdn_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
