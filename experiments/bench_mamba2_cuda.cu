// Google Benchmark of the Mamba-2 CUDA step kernels (kernels/mamba2/mamba2_kernels.h) on the H200: µs per decode
// step of one layer for eager, replay (shared fp32/bf16 checkpoint) and dual (fp32 update + bf16 read copy; at interval
// 16 also the block-scaled e4m3 and int8 read copies of the per-head kernel), with the copy and read-only ceilings
// measured in the same process. Not a correctness test (tests/gpu/ is).
//
//   bench_mamba2_cuda [--preset=NAME] [--full] [--z] [--smoke] [google benchmark flags]
//     --preset  geometry preset of model/model.h (default nemotron3-super-120b; e.g. nemotron3-nano-4b)
//     --full    the full sweep (intervals 4 8 16 32 × batch 1 8 64 256 512 × every scheme, fp16 too); default: interval
//               16 at every batch, intervals 4 8 32 at batch 1 and 256 (about a minute on an H200), and the grouped
//               replay kernel (variant 1, names replay_g/ and dual_g/) at intervals 16 and 32, batch 1, 64, 256, and the
//               pipelined kernels (eager variant 1, replay variant 2: eager_p/, replay_p/, dual_p/) at interval 16,
//               batch 1, 64, 256
//     --z       with the output gate z (default off: serving engines gate in the following norm)
//     --smoke   a few tiny cases, one repetition (ctest); exits 0 with a message when no GPU exists
//     --once    one iteration of one repetition per case (for ncu: few launches to replay)
//     --flush-l2-ahead=A  Mamba2ReplayLaunch::flush_l2_ahead of the grouped replay rows (replay_g/, dual_g/) at
//               serving batches: -1 prefetches the next head's whole tile into L2 as the flush's fold enters a head,
//               A >= 0 chunk c + A + 1 as the fold reaches chunk c (default: the struct's, 1); in the JSON context
//     --tiles_tune  adds rows at batch 1 and 8 over the CTAs per (row, head), p_tiles 1 .. 16 (as many as leave
//               one pass of rows per CTA): eager (variant 0) fp32 / bf16, and the grouped replay's interval-16
//               schemes at one head per CTA, named .../pt:N/batch:B
//   JSON: --benchmark_out=FILE --benchmark_out_format=json (context: GPU, driver, git commit, ceilings).
//
// Method (KERNELS.md "Measuring like the peers were measured"): inputs and state already on the device; one CUDA
// graph of n × [256 MiB memset (evicts the 50 MB L2), fill-cursor set, step] against the same graph without the step;
// the difference / n is one iteration's step time (UseManualTime). Repetitions report mean, median, stddev; quote
// the median. Kinds per replay scheme:
//   nonflush  mean over ring fills 0 .. interval−2 (one graph cycles through them)
//   flush     the step that folds a full ring into the checkpoint (fill interval−1)
//   amortised interval consecutive steps from an empty ring, the last one flushing (the real sequence)
// Counters: bytes = modelled bytes per step (metrics/traffic.h, METHOD.md: nonflush is its mean over the interval),
// GBps = bytes / time, of_copy / of_read = GBps over the copy / read-only ceiling measured at start-up.
#include <benchmark/benchmark.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_cuda_common.cuh"
#include "common/cuda_check.h"
#include "mamba2/mamba2_kernels.h"
#include "metrics/traffic.h"
#include "model/model.h"
#include "replayssm_version.h"

using namespace rssm;
using namespace rssm::bench;

namespace {

struct Options {
  std::string preset = "nemotron3-super-120b";
  bool full = false, z = false, smoke = false, once = false, tiles_tune = false;
  int flush_l2_ahead = Mamba2ReplayLaunch{}.flush_l2_ahead;
};
Options g_opt;
Model g_model;
constexpr size_t kL2FlushBytes = 256ull << 20;

// ---- one step benchmark ----

enum class Scheme { Eager, Replay, Dual };
enum class Kind { Step, Nonflush, Flush, Amortised };

struct Config {
  Scheme scheme;
  Format state;  // eager state / replay checkpoint / dual read copy
  Kind kind;
  int interval;
  int batch;
  int variant = 0;  // replay kernel (Mamba2ReplayLaunch::variant): 1 = grouped, named replay_g / dual_g
  int heads = 0;    // variant 1: heads per CTA forced (named replay_g_hN), 0 = the launcher's choice
  int stages = 0;   // pipelined variants: stages per CTA forced (named _sN), 0 = the launcher's choice
  int ctas = 0;     // pipelined variants: CTAs per SM (named _cN), 0 = the launcher's choice (1)
  int pt = 0;       // eager variant 0 / grouped replay (one head per CTA): P-tiles forced (named .../pt:N), 0 = default
};

// The pipelined kernel of each scheme: eager variant 1, replay / dual variant 2 (named eager_p, replay_p, dual_p).
bool pipelined(const Config& c) { return c.scheme == Scheme::Eager ? c.variant == 1 : c.variant == 2; }

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Step: return "step";
    case Kind::Nonflush: return "nonflush";
    case Kind::Flush: return "flush";
    default: return "amortised";
  }
}

std::string bench_name(const Config& c) {
  std::string s = c.scheme == Scheme::Eager ? "eager" : c.scheme == Scheme::Replay ? "replay" : "dual";
  if (pipelined(c)) s += "_p";
  else if (c.variant == 1) s += "_g";
  if (c.heads > 0) s += "_h" + std::to_string(c.heads);
  if (c.stages > 0) s += "_s" + std::to_string(c.stages);
  if (c.ctas > 0) s += "_c" + std::to_string(c.ctas);
  s += "/" + (c.scheme == Scheme::Dual ? "fp32+" + format_name(c.state) : format_name(c.state));
  if (c.scheme != Scheme::Eager) s += "/K" + std::to_string(c.interval) + "/" + kind_name(c.kind);
  if (c.pt > 0) s += "/pt:" + std::to_string(c.pt);
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
  const Mamba2Params& m = g_model.mamba2;
  const int H = m.H, P = m.P, N = m.N, G = m.G, B = c.batch, K = c.interval;
  const size_t HPN = size_t(H) * P * N, HP = size_t(H) * P, GN = size_t(G) * N;
  const bool eager = c.scheme == Scheme::Eager, dual = c.scheme == Scheme::Dual;
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // Pool of `batch` slots, row r at slot batch-1-r (rows need not be in slot order).
  const size_t ck_elem = dual ? 4 : size_t(format_bytes(c.state));
  const bool scaled = dual && format_bytes(c.state) == 1;  // a block-scaled read copy: codes and row scales
  Dev<uint8_t> ck(size_t(B) * HPN * ck_elem), rd(dual ? size_t(B) * HPN * format_bytes(c.state) : 0);
  Dev<float> rscale(scaled ? size_t(B) * HP : 0);
  if (ck_elem == 4) init_dev(reinterpret_cast<float*>(ck.p), B * HPN, 1, 0.5f);
  else if (c.state == Format::FP16) init_dev(reinterpret_cast<__half*>(ck.p), B * HPN, 1, 0.5f);
  else init_dev(reinterpret_cast<__nv_bfloat16*>(ck.p), B * HPN, 1, 0.5f);
  if (scaled) {  // codes of small finite values (0x30: 0.5 in e4m3, 48 in int8), scales 2^-8
    CUDA_CHECK(cudaMemset(rd.p, 0x30, size_t(B) * HPN));
    const std::vector<float> sc(size_t(B) * HP, 1.0f / 256);
    CUDA_CHECK(cudaMemcpy(rscale.p, sc.data(), sc.size() * 4, cudaMemcpyHostToDevice));
  } else if (dual) {
    if (c.state == Format::FP16) init_dev(reinterpret_cast<__half*>(rd.p), B * HPN, 1, 0.5f);
    else init_dev(reinterpret_cast<__nv_bfloat16*>(rd.p), B * HPN, 1, 0.5f);
  }
  std::vector<int32_t> slots(B);
  for (int r = 0; r < B; ++r) slots[r] = B - 1 - r;
  Dev<int32_t> d_slot(B);
  CUDA_CHECK(cudaMemcpy(d_slot.p, slots.data(), B * sizeof(int32_t), cudaMemcpyHostToDevice));
  // Inputs (bf16) and parameters.
  Dev<__nv_bfloat16> x(B * HP), dt(size_t(B) * H), Bm(B * GN), Cm(B * GN), z(B * HP), y(B * HP);
  init_dev(x.p, B * HP, 2, 1.0f), init_dev(dt.p, size_t(B) * H, 3, 0.5f), init_dev(Bm.p, B * GN, 4, 1.0f);
  init_dev(Cm.p, B * GN, 5, 1.0f), init_dev(z.p, B * HP, 6, 1.0f);
  std::vector<float> A_log(H), dt_bias(H, -3.0f), Dh(H, 1.0f);
  for (int h = 0; h < H; ++h) A_log[h] = std::log(1.0f + 7.0f * h / H);
  Dev<float> dA(H), dBias(H), dD(H);
  CUDA_CHECK(cudaMemcpy(dA.p, A_log.data(), H * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dBias.p, dt_bias.data(), H * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dD.p, Dh.data(), H * 4, cudaMemcpyHostToDevice));
  // Ring: valid entries everywhere (Δ = 0.05, Λ falling), cursors set per step by the graph.
  const int cap = std::max(K, 1);
  Dev<uint16_t> rx(eager ? 0 : size_t(B) * cap * HP), rB(eager ? 0 : size_t(B) * cap * GN);
  Dev<float> dl(eager ? 0 : size_t(B) * cap * H * 2);
  Dev<int32_t> fill(B), arrive(B), fills_src(size_t(K) * B);
  if (!eager) {
    init_dev(reinterpret_cast<__nv_bfloat16*>(rx.p), size_t(B) * cap * HP, 7, 1.0f);
    init_dev(reinterpret_cast<__nv_bfloat16*>(rB.p), size_t(B) * cap * GN, 8, 1.0f);
    std::vector<float> h_dl(size_t(B) * cap * H * 2);
    for (size_t i = 0; i < h_dl.size() / 2; ++i) {
      const int e = static_cast<int>(i / H) % cap;
      h_dl[2 * i] = 0.05f, h_dl[2 * i + 1] = -0.1f * (e + 1);
    }
    CUDA_CHECK(cudaMemcpy(dl.p, h_dl.data(), h_dl.size() * 4, cudaMemcpyHostToDevice));
    std::vector<int32_t> f(size_t(K) * B);
    for (int k = 0; k < K; ++k) std::fill(f.begin() + size_t(k) * B, f.begin() + size_t(k + 1) * B, k);
    CUDA_CHECK(cudaMemcpy(fills_src.p, f.data(), f.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(arrive.p, 0, B * 4));
    CUDA_CHECK(cudaMemset(fill.p, 0, B * 4));
  }
  Dev<uint8_t> l2(kL2FlushBytes);

  Mamba2StepArgs a;
  a.dims = {H, P, N, G};
  a.batch = B;
  a.d_slot = d_slot.p;
  a.act_format = Format::BF16;
  a.d_x = x.p, a.d_dt = dt.p, a.d_B = Bm.p, a.d_C = Cm.p, a.d_z = g_opt.z ? z.p : nullptr;
  a.d_A_log = dA.p, a.d_dt_bias = dBias.p, a.d_D = dD.p;
  a.d_y = y.p, a.y_format = Format::BF16;
  Mamba2EagerLaunch le;
  le.step = a, le.state_format = c.state, le.d_state = ck.p;
  le.variant = c.variant, le.pipe_stages = c.stages, le.pipe_ctas = c.ctas, le.p_tiles = c.pt;
  Mamba2ReplayLaunch lr;
  lr.step = a, lr.interval = K, lr.capacity = cap, lr.ckpt_format = dual ? Format::FP32 : c.state, lr.d_ckpt = ck.p;
  lr.dual = dual, lr.read_format = c.state, lr.d_read = dual ? rd.p : nullptr;
  lr.d_read_scale = scaled ? rscale.p : nullptr;
  lr.d_ring_x = rx.p, lr.d_ring_B = rB.p, lr.d_ring_dl = dl.p, lr.d_fill = fill.p, lr.d_arrive = arrive.p;
  lr.variant = c.variant, lr.heads_per_cta = c.heads, lr.pipe_stages = c.stages, lr.pipe_ctas = c.ctas;
  if (c.pt > 0) lr.heads_per_cta = 1, lr.p_tiles = c.pt;
  lr.flush_l2_ahead = g_opt.flush_l2_ahead;

  // The step sequence of one graph: per step, the fill it starts from (-1: leave the cursor to the kernel).
  std::vector<int> seq;
  switch (c.kind) {
    case Kind::Step: seq.assign(20, -1); break;
    case Kind::Nonflush:
      while (seq.size() < 16)  // short intervals: the cycle of fills repeated
        for (int f = 0; f + 1 < K; ++f) seq.push_back(f);
      break;
    case Kind::Flush: seq.assign(20, K - 1); break;
    case Kind::Amortised:
      for (int r = 0; r < std::max(1, 20 / K); ++r)
        for (int f = 0; f < K; ++f) seq.push_back(f == 0 ? 0 : -1);  // reset at each interval start, then natural
      break;
  }
  auto capture = [&](bool with_step) {
    cudaGraph_t g;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int f : seq) {
      CUDA_CHECK(cudaMemsetAsync(l2.p, 0, kL2FlushBytes, s));
      if (f >= 0) CUDA_CHECK(cudaMemcpyAsync(fill.p, fills_src.p + size_t(f) * B, B * 4, cudaMemcpyDeviceToDevice, s));
      if (with_step) {
        if (eager) mamba2_eager_step(le, s);
        else mamba2_replay_step(lr, s);
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

  std::sort(times.begin(), times.end());
  const double med = times.empty() ? 0 : times[times.size() / 2];
  const double bytes = modelled_bytes(c);
  st.counters["bytes"] = bytes;
  st.counters["GBps"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["us_median"] = med * 1e6;
  st.counters["of_copy"] = med > 0 ? bytes / med / 1e9 / g_copy_GBps : 0;
  st.counters["of_read"] = med > 0 ? bytes / med / 1e9 / g_read_GBps : 0;
  if (pipelined(c)) {
    st.counters["p_tiles"] = 1;
  } else if (c.variant == 1) {
    int hc = 0, pt = 0;
    mamba2_grouped_shape(lr, hc, pt);
    st.counters["p_tiles"] = pt;
    st.counters["heads_per_cta"] = hc;
  } else {
    // c.state: the copy a non-flush step streams
    st.counters["p_tiles"] = c.pt > 0                     ? c.pt
                             : c.scheme == Scheme::Eager ? mamba2_eager_p_tiles({H, P, N, G}, B, c.state)
                                                         : mamba2_p_tiles({H, P, N, G}, B, c.state);
  }
}

void add(const Config& c) {
  auto* b = benchmark::RegisterBenchmark(bench_name(c).c_str(), [c](benchmark::State& st) { bm_step(st, c); });
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
  if (g_opt.once) b->Iterations(1)->Repetitions(1);
  else if (g_opt.smoke) b->Iterations(2)->Repetitions(1);
  else b->Iterations(10)->Repetitions(5)->ReportAggregatesOnly(true);
}

void add_replay_kinds(Scheme sc, Format f, int K, int batch, int variant = 0, int heads = 0, int stages = 0,
                      int ctas = 0) {
  for (Kind k : {Kind::Nonflush, Kind::Flush, Kind::Amortised}) {
    if (k == Kind::Nonflush && K == 1) continue;
    add({sc, f, k, K, batch, variant, heads, stages, ctas});
  }
}

void register_all() {
  for (bool copy : {true, false}) {
    auto* b = benchmark::RegisterBenchmark(copy ? "ceiling/copy_d2d" : "ceiling/read_only",
                                           [copy](benchmark::State& st) { bm_ceiling(st, copy); });
    b->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(1)->Repetitions(1);
  }
  if (g_opt.smoke) {
    for (int b : {1, 3}) {
      add({Scheme::Eager, Format::FP32, Kind::Step, 1, b});
      add_replay_kinds(Scheme::Replay, Format::BF16, 4, b);
      add_replay_kinds(Scheme::Dual, Format::BF16, 4, b);
      add_replay_kinds(Scheme::Replay, Format::BF16, 4, b, 1);
      add_replay_kinds(Scheme::Dual, Format::BF16, 4, b, 1);
      add({Scheme::Eager, Format::FP32, Kind::Step, 1, b, 1});
      add_replay_kinds(Scheme::Replay, Format::BF16, 4, b, 2);
      add_replay_kinds(Scheme::Dual, Format::BF16, 4, b, 2);
    }
    return;
  }
  const std::vector<int> batches = {1, 8, 64, 256, 512};
  const std::vector<Format> eager_fmts =
      g_opt.full ? std::vector<Format>{Format::FP32, Format::BF16, Format::FP16} : std::vector<Format>{Format::FP32, Format::BF16};
  for (Format f : eager_fmts)
    for (int b : batches) add({Scheme::Eager, f, Kind::Step, 1, b});
  struct S {
    Scheme sc;
    Format f;
  };
  std::vector<S> schemes = {{Scheme::Replay, Format::FP32}, {Scheme::Replay, Format::BF16}, {Scheme::Dual, Format::BF16}};
  if (g_opt.full) schemes.push_back({Scheme::Replay, Format::FP16}), schemes.push_back({Scheme::Dual, Format::FP16});
  for (int K : {4, 8, 16, 32})
    for (int b : batches) {
      if (!g_opt.full && K != 16 && b != 1 && b != 256) continue;
      for (const S& s : schemes) add_replay_kinds(s.sc, s.f, K, b);
      // Block-scaled 8-bit read copies (the per-head kernel only): interval 16 (--full: every interval).
      if (g_opt.full || K == 16)
        for (Format f : {Format::E4M3, Format::INT8}) add_replay_kinds(Scheme::Dual, f, K, b);
    }
  if (g_opt.tiles_tune) {
    // p_tiles of at least one pass of rows per CTA, the launchers' floor.
    const auto max_pt = [](Format f) {
      const Mamba2Params& m = g_model.mamba2;
      return m.P / mamba2_rows_per_pass({m.H, m.P, m.N, m.G}, f);
    };
    for (int b : {1, 8})
      for (int pt = 1; pt <= 16; pt *= 2) {
        for (Format f : {Format::FP32, Format::BF16})
          if (pt <= max_pt(f)) {
            Config c{Scheme::Eager, f, Kind::Step, 1, b};
            c.pt = pt;
            add(c);
          }
        for (const S& s : schemes)
          if (pt <= max_pt(s.f))
            for (Kind k : {Kind::Nonflush, Kind::Flush, Kind::Amortised}) {
              Config c{s.sc, s.f, k, 16, b, 1};
              c.pt = pt;
              add(c);
            }
      }
  }
  // The grouped variant (replay_g / dual_g) next to the default kernel: intervals 16 and 32 at batch 1, 64, 256
  // (every batch with --full).
  for (int K : {16, 32})
    for (int b : batches) {
      if (!g_opt.full && b != 1 && b != 64 && b != 256) continue;
      for (const S& s : schemes) add_replay_kinds(s.sc, s.f, K, b, 1);
    }
  // Its heads-per-CTA trade (fewer, longer CTAs against the tail of the last wave), fp32 at interval 16, batch 256.
  const int hpg = g_model.mamba2.H / g_model.mamba2.G;
  for (int hc : {4, 8})
    if (hpg % hc == 0) add_replay_kinds(Scheme::Replay, Format::FP32, 16, 256, 1, hc);
  // The pipelined kernels (eager_p, replay_p, dual_p) at interval 16, batch 1, 64, 256 (--full: every interval and
  // batch, and the stages / CTAs-per-SM trade at fp32, interval 16, batch 256).
  for (Format f : eager_fmts)
    for (int b : batches)
      if (g_opt.full || b == 1 || b == 64 || b == 256) add({Scheme::Eager, f, Kind::Step, 1, b, 1});
  for (int K : {4, 8, 16, 32})
    for (int b : batches) {
      if (!g_opt.full && (K != 16 || (b != 1 && b != 64 && b != 256))) continue;
      for (const S& s : schemes) add_replay_kinds(s.sc, s.f, K, b, 2);
    }
  if (g_opt.full)
    for (auto [st, ct] : {std::pair{0, 1}, std::pair{3, 1}, std::pair{2, 2}, std::pair{2, 3}}) {
      if (ct < 3) add_replay_kinds(Scheme::Replay, Format::FP32, 16, 256, 2, 0, st, ct);
      add({Scheme::Eager, Format::FP32, Kind::Step, 1, 256, 1, 0, st, ct});
    }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--flush-l2-ahead=", 0) == 0) {
      g_opt.flush_l2_ahead = integer_of("bench_mamba2_cuda", a, 17);
      if (g_opt.flush_l2_ahead < -1 || g_opt.flush_l2_ahead > 64) {
        std::fprintf(stderr, "bench_mamba2_cuda: --flush-l2-ahead must be -1 (whole heads) .. 64\n");
        return 2;
      }
      continue;
    }
    if (a.rfind("--preset=", 0) == 0) g_opt.preset = a.substr(9);
    else if (a == "--full") g_opt.full = true;
    else if (a == "--z") g_opt.z = true;
    else if (a == "--smoke") g_opt.smoke = true;
    else if (a == "--once") g_opt.once = true;
    else if (a == "--tiles_tune") g_opt.tiles_tune = true;
    else rest.push_back(argv[i]);
  }
  try {
    g_model = model_preset(g_opt.smoke ? "nemotron3-nano-4b" : g_opt.preset);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_mamba2_cuda: --preset: %s\n", e.what());
    return 2;
  }
  if (g_model.family != Family::Mamba2) {
    std::fprintf(stderr, "bench_mamba2_cuda: --preset=%s is not a Mamba-2 geometry\n", g_opt.preset.c_str());
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("bench_mamba2_cuda: no CUDA device, nothing measured\n");
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
    benchmark::AddCustomContext("preset", g_opt.smoke ? "nemotron3-nano-4b" : g_opt.preset);
    benchmark::AddCustomContext("copy_ceiling_GBps", std::to_string(g_copy_GBps));
    benchmark::AddCustomContext("read_ceiling_GBps", std::to_string(g_read_GBps));
    benchmark::AddCustomContext("grouped_flush_l2_ahead", std::to_string(g_opt.flush_l2_ahead));
    benchmark::AddCustomContext("method", "CUDA graph of n x [256 MiB memset, step] minus the graph without the step, "
                                          "per step; L2 flushed before every step; activations and output bf16");
    std::printf("bench_mamba2_cuda: %s, %s, ceilings copy %.0f GB/s, read-only %.0f GB/s\n", prop.name,
                g_model.geometry_string().c_str(), g_copy_GBps, g_read_GBps);
    register_all();
    int n = static_cast<int>(rest.size());
    benchmark::Initialize(&n, rest.data());
    if (benchmark::ReportUnrecognizedArguments(n, rest.data())) return 2;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_mamba2_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
