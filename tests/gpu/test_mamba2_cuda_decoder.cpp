// GPU tests of the `cuda` decoder of Mamba-2 schemes (kernels/mamba2/mamba2_decoder.h) as the harness runs it: built
// by the factory (run/factory.h -> kernels/cuda_backend.h), driven by the lockstep engine (run/lockstep.h) next to
// its cpu twin and the fp64 reference, and through the runner (what `replayssm run` does) with
// scheme.backend = cpu, cuda. Label `gpu`; the cases that need a device print a message and pass without one.
// Run: build-*/tests/gpu/replayssm_gpu_tests "[decoder]" (on the H200: dist/bin/replayssm_gpu_tests, gpu_run.sh).
// Asserted for every cuda point:
//   - it runs (cuda_unavailable_reason is empty: the sweep would not skip it) and names itself decoder_name();
//   - its output error against fp64 is within metrics/tolerance.h for its judged format, as the runner's budget
//     counts it (mean over steps of the per-step mean over sequences <= rel_mean, its max over steps <= rel_max),
//     and at most 2x its cpu twin's + 1e-6 (CONVENTIONS.md's second criterion);
//   - its per-step difference from the cpu twin (backend_diff_rel_max) is within the contract: 1e-5 when judged in
//     fp32 (both are fp32 arithmetic in a different order), else the judged format's rel_max;
//   - its state copies have the cpu twin's names and steps (the lockstep engine throws otherwise), their final
//     values are within the same bound of the twin's, and a dual read copy is the rounding of its update copy.
// A tf32 / bf16 flush arithmetic adds gpu_test::flush_slack to both twin bounds (an operand's rounding may flip), and
// such schemes and stochastic ones are held to the 2x criterion, not the table (gpu_test::judged_by_table); under
// stochastic rounding the twins draw the same words, and a dual read copy is one of the two codes that
// bracket its update copy's value.
#include <catch2/catch.hpp>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cuda_backend.h"
#include "errors.h"
#include "io/h5.h"
#include "mamba2/mamba2_decoder.h"
#include "mamba2/mamba2_kernels.h"
#include "metrics/tolerance.h"
#include "numeric/bits.h"
#include "run/factory.h"
#include "run/lockstep.h"
#include "run/runner.h"
#include "trace/synth.h"

#include "gpu_test_util.h"

using namespace rssm;
using Catch::Matchers::Contains;

namespace {

using Params = std::vector<std::pair<std::string, std::string>>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Running max and mean that keep a NaN (a NaN output must fail, not vanish in std::max).
double max_of(const std::vector<double>& v) {
  double m = v.empty() ? kNaN : 0;
  for (double x : v) m = std::isnan(m) || std::isnan(x) ? kNaN : std::max(m, x);
  return m;
}
double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? kNaN : s / static_cast<double>(v.size());
}
// ||a - b|| / ||b|| over n values (NaN on a non-finite value).
double rel_norm(const double* a, const double* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return kNaN;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : (num == 0 ? 0.0 : kNaN);
}

// The contract's bound on a cuda run's difference from its cpu twin, for a copy or output read through `f`.
double twin_bound(Format f) { return f == Format::FP32 ? 1e-5 : output_tolerance(f).rel_max; }

Scheme scheme_of(const Params& p, Backend b) {
  Scheme s = parse_scheme(p);
  s.backend = b;
  return s;
}

struct Geometry {
  int H, P, N, G;
  bool has_z, d_per_dim;
  double dt_min;
};

SynthConfig synth(const Geometry& g, long long steps, int seqs) {
  SynthConfig sc;
  sc.model.family = Family::Mamba2;
  auto& m = sc.model.mamba2;
  m.H = g.H, m.P = g.P, m.N = g.N, m.G = g.G;
  m.has_z = g.has_z;
  m.d_per_dim = g.d_per_dim;
  m.dt_min = g.dt_min;
  sc.steps = steps;
  sc.seqs = seqs;
  sc.seed = 7;
  return sc;
}

}  // namespace

TEST_CASE("cuda decoder: what the kernels do not cover is a precise skip reason", "[gpu][decoder]") {
  // Host-only: runs with or without a device.
  for (const Params& p : std::vector<Params>{{{"decoder", "eager"}, {"state_format", "fp32"}},
                                             {{"decoder", "eager"}, {"state_format", "bf16"}},
                                             {{"decoder", "eager"}, {"state_format", "fp16"}, {"act_format", "fp32"}},
                                             {{"decoder", "replay"}, {"state_format", "fp16"}, {"interval", "64"}},
                                             {{"decoder", "replay"}, {"state_format", "bf16"}, {"out_format", "bf16"}},
                                             {{"decoder", "dual"}, {"state_format", "fp32"}, {"read_format", "fp16"}},
                                             {{"decoder", "dual"}, {"state_format", "fp32"}, {"read_format", "e4m3"}},
                                             {{"decoder", "dual"}, {"state_format", "fp32"}, {"read_format", "int8"},
                                              {"rounding", "stochastic"}},
                                             {{"decoder", "eager"}, {"state_format", "bf16"}, {"rounding", "stochastic"}},
                                             {{"decoder", "dual"}, {"flush_arith", "3xtf32"}},
                                             {{"decoder", "replay"}, {"flush_arith", "bf16"}, {"rounding", "stochastic"}}}) {
    const Scheme s = scheme_of(p, Backend::Cuda);
    INFO(s.name());
    CHECK(mamba2_cuda_unsupported(s).empty());
    const std::string why = cuda_unavailable_reason(s, Family::Mamba2);
    CHECK((why.empty() || why == "no CUDA device on this machine"));
    if (why.empty()) {
      const auto d = make_decoder(s, Family::Mamba2, 1);
      CHECK(d->name() == s.decoder_name());
      CHECK(d->name().rfind("cuda:", 0) == 0);
    }
  }
  const std::vector<std::pair<Params, std::string>> missing = {
      {{{"act_format", "fp16"}}, "fp16 activations"},
      {{{"out_format", "fp16"}}, "fp16 outputs"},
      {{{"out_format", "fp64"}}, "fp64 outputs"},
      {{{"decoder", "eager"}, {"state_format", "fp64"}}, "eager Mamba-2 fp64 state"},
      {{{"decoder", "replay"}, {"state_format", "e4m3"}}, "shared Mamba-2 e4m3 checkpoint"},
      {{{"decoder", "dual"}, {"state_format", "fp64"}, {"read_format", "fp32"}}, "Mamba-2 dual update copy in fp64"},
      {{{"decoder", "replay"}, {"buffer_format", "fp32"}}, "Mamba-2 fp32 buffer"},
      {{{"decoder", "replay"}, {"dot_arith", "tf32"}}, "Mamba-2 dot_arith tf32"},
      {{{"decoder", "replay"}, {"interval", "65"}}, "at most 64 entries: interval 65"},
  };
  for (const auto& [p, reason] : missing) {
    const Scheme s = scheme_of(p, Backend::Cuda);
    INFO(s.name());
    CHECK_THAT(mamba2_cuda_unsupported(s), Contains(reason));
    const std::string why = cuda_unavailable_reason(s, Family::Mamba2);
    CHECK((why == "no CUDA device on this machine" || why == mamba2_cuda_unsupported(s)));
    CHECK(backend_unavailable_reason(s, Family::Mamba2) == why);  // the sweep skips it with this reason
    CHECK_THROWS_AS(make_decoder(s, Family::Mamba2, 1), InternalError);
    CHECK_THROWS_AS(make_mamba2_cuda_decoder(s, 1), InternalError);
  }
}

TEST_CASE("cuda decoder: an untileable geometry is a config error at reset, another family's layer a bug",
          "[gpu][decoder]") {
  if (!gpu_test::have_device()) return;
  Model gdn = model_preset("qwen35-4b");
  const auto d = make_decoder(scheme_of({{"decoder", "replay"}}, Backend::Cuda), Family::Mamba2, 1);
  CHECK_THROWS_AS(d->reset(gdn, 1), InternalError);  // the backend picks the decoder by the layer's family
  SynthSource odd(synth({2, 8, 24, 1, false, false, 0.0}, 4, 1));  // N=24: 6 fp32 lanes, not a power of two
  const auto e = make_decoder(scheme_of({{"decoder", "eager"}}, Backend::Cuda), Family::Mamba2, 1);
  CHECK_THROWS_AS(e->reset(odd.model(), 1), ConfigError);
}

TEST_CASE("cuda decoder: cpu and cuda twins in lockstep, against fp64 and each other", "[gpu][decoder]") {
  if (!gpu_test::have_device()) return;
  const std::vector<Params> schemes = {
      {{"decoder", "eager"}, {"state_format", "fp32"}},
      {{"decoder", "eager"}, {"state_format", "bf16"}},
      {{"decoder", "eager"}, {"state_format", "fp16"}},
      {{"decoder", "eager"}, {"state_format", "fp32"}, {"out_format", "bf16"}},
      {{"decoder", "replay"}, {"state_format", "fp32"}, {"interval", "1"}},
      {{"decoder", "replay"}, {"state_format", "fp32"}, {"interval", "4"}},
      {{"decoder", "replay"}, {"state_format", "fp32"}, {"interval", "16"}, {"buffer_len", "20"}},
      {{"decoder", "replay"}, {"state_format", "bf16"}, {"interval", "8"}},
      {{"decoder", "replay"}, {"state_format", "fp16"}, {"interval", "16"}},
      {{"decoder", "replay"}, {"state_format", "fp32"}, {"interval", "8"}, {"out_format", "bf16"}},
      {{"decoder", "dual"}, {"state_format", "fp32"}, {"read_format", "bf16"}, {"interval", "8"}},
      {{"decoder", "dual"}, {"state_format", "fp32"}, {"read_format", "fp16"}, {"interval", "16"}},
      // Flush arithmetic (the kernel's staged operands) and stochastic rounding (numeric/stochastic.h's words).
      {{"decoder", "replay"}, {"state_format", "fp32"}, {"interval", "16"}, {"flush_arith", "tf32"}},
      {{"decoder", "replay"}, {"state_format", "fp32"}, {"interval", "8"}, {"flush_arith", "3xtf32"}},
      {{"decoder", "dual"}, {"state_format", "fp32"}, {"read_format", "bf16"}, {"interval", "4"}, {"flush_arith", "bf16"}},
      {{"decoder", "eager"}, {"state_format", "bf16"}, {"rounding", "stochastic"}},
      {{"decoder", "replay"}, {"state_format", "fp16"}, {"interval", "8"}, {"rounding", "stochastic"}},
      {{"decoder", "dual"}, {"state_format", "fp32"}, {"read_format", "bf16"}, {"interval", "16"},
       {"rounding", "stochastic"}},
      // Block-scaled 8-bit read copies (codes and a scale per state row).
      {{"decoder", "dual"}, {"state_format", "fp32"}, {"read_format", "e4m3"}, {"interval", "8"}},
      {{"decoder", "dual"}, {"state_format", "fp32"}, {"read_format", "e5m2"}, {"interval", "4"}},
      {{"decoder", "dual"}, {"state_format", "fp32"}, {"read_format", "int8"}, {"interval", "16"},
       {"rounding", "stochastic"}},
  };
  // Small heads with the gate, per-dim D and a dt floor (the recorded traces' features); and the serving N = 128
  // (fp32: 32 lanes per state row) with P split into tiles at this tiny batch.
  const std::vector<Geometry> geometries = {{8, 16, 32, 2, true, true, 1e-3}, {4, 64, 128, 2, false, false, 0.0}};
  const long long steps = 70;  // > 2 x 16 + 1: every interval flushes several times; 70 is no multiple of 4, 8, 16
  const int seqs = 3;
  for (const Geometry& g : geometries)
    for (const char* act : {"bf16", "fp32"}) {
      SynthSource src(synth(g, steps, seqs));
      const Model& model = src.model();
      LockstepSettings st;
      st.steps = steps;
      st.seqs = seqs;
      st.chunk = 24;  // chunks end off the flush grid, so advance() sees partial intervals
      st.act = parse_format(act);
      st.kl = false;
      std::vector<LockstepRun> runs;
      std::vector<Scheme> cuda_schemes;
      for (Params p : schemes) {
        p.emplace_back("act_format", act);
        for (Backend b : {Backend::Cpu, Backend::Cuda}) {
          const Scheme s = scheme_of(p, b);
          if (b == Backend::Cuda) {
            INFO(s.name());
            REQUIRE(cuda_unavailable_reason(s, Family::Mamba2).empty());  // the point runs: not skipped
            cuda_schemes.push_back(s);
          }
          LockstepRun r;
          r.dec = make_decoder(s, Family::Mamba2, 1);
          r.dec->reset(model, seqs);
          r.observe_every = s.replays() ? s.interval : 8;
          r.out_format = s.out_format;
          if (b == Backend::Cuda) r.twin = static_cast<int>(runs.size()) - 1;
          runs.push_back(std::move(r));
        }
      }
      REQUIRE(run_lockstep(st, src, runs));
      for (size_t k = 0; k < cuda_schemes.size(); ++k) {
        const Scheme& s = cuda_schemes[k];
        const LockstepRun& cpu = runs[2 * k];
        const LockstepRun& gpu = runs[2 * k + 1];
        const Format judged = judged_format(Family::Mamba2, s);
        const Tolerance tol = output_tolerance(judged);
        const std::string where = fmt::format("H={} P={} N={} G={} act {}: {}", g.H, g.P, g.N, g.G, act, s.label());
        INFO(where);
        CHECK(gpu.dec->name() == s.decoder_name());
        REQUIRE(gpu.err.size() == static_cast<size_t>(steps));
        const double gpu_mean = mean_of(gpu.err.rel_mean), cpu_mean = mean_of(cpu.err.rel_mean);
        const double gpu_worst = max_of(gpu.err.rel_mean), diff = max_of(gpu.twin_rel_max);
        INFO("error vs fp64: mean " << gpu_mean << " (cpu " << cpu_mean << "), worst step " << gpu_worst
                                    << "; vs cpu twin: " << diff << " rel, " << max_of(gpu.twin_ulps_max) << " ulps");
        if (gpu_test::judged_by_table(s)) {
          CHECK(gpu_mean <= tol.rel_mean);
          CHECK(gpu_worst <= tol.rel_max);
        }
        CHECK(gpu_mean <= 2 * cpu_mean + 1e-6);
        REQUIRE(gpu.twin_rel_max.size() == static_cast<size_t>(steps));
        CHECK(diff <= twin_bound(judged) + gpu_test::flush_slack(s.flush_arith));
        // State: observed at the same steps under the same names, and the final copies agree.
        CHECK(gpu.obs_step == cpu.obs_step);
        REQUIRE(gpu.state_series.size() == cpu.state_series.size());
        for (size_t i = 0; i < gpu.state_series.size(); ++i) {
          CHECK(gpu.state_series[i].first == cpu.state_series[i].first);
          CHECK(mean_of(gpu.state_series[i].second) <= 2 * mean_of(cpu.state_series[i].second) + 1e-6);
        }
        const std::vector<StateCopy> gs = gpu.dec->state();
        const std::vector<StateCopy> cs = cpu.dec->state();
        REQUIRE(gs.size() == cs.size());
        for (size_t i = 0; i < gs.size(); ++i) {
          INFO("copy " << gs[i].name);
          CHECK(gs[i].name == cs[i].name);
          CHECK(gs[i].step == cs[i].step);
          CHECK(gs[i].step == (s.replays() ? steps / s.interval * s.interval : steps));
          REQUIRE(gs[i].size == cs[i].size);
          const Format f = gs[i].name == "read" ? s.read_format : s.state_format;
          const double d = rel_norm(gs[i].data, cs[i].data, gs[i].size);
          INFO("final copy vs cpu twin: " << d);
          CHECK(d <= twin_bound(f) + gpu_test::flush_slack(s.flush_arith));
        }
        if (s.dual()) {
          // The read copy is the update copy rounded once, from the same registers: code for code.
          CHECK(gpu_test::read_copy_mismatches(s.read_format, s.rounding, gs[0].data, gs[1].data, gs[0].size,
                                               static_cast<size_t>(g.N)) == 0);
        }
      }
    }
}

TEST_CASE("cuda decoder: a cpu,cuda sweep through the runner stores both backends and their difference",
          "[gpu][decoder][runner]") {
  if (!gpu_test::have_device()) return;
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() /
                       fmt::format("rssm_cuda_decoder_{}", std::chrono::steady_clock::now().time_since_epoch().count());
  fs::create_directories(dir);
  const std::string out = (dir / "cpu_vs_cuda.h5").string();
  Config cfg;
  for (const char* kv : {"synth.preset=custom", "synth.family=mamba2", "synth.H=8", "synth.P=32", "synth.N=64",
                         "synth.G=2", "synth.has_z=true", "synth.steps=48", "synth.seqs=2", "metrics.vocab=256",
                         "scheme.decoder=eager,replay,dual", "scheme.state_format=fp32,bf16", "scheme.read_format=bf16",
                         "scheme.interval=8", "scheme.backend=cpu,cuda"})
    cfg.set(kv);
  cfg.set("run.output=" + out);
  RunnerOptions opts;
  opts.progress = false;
  std::ostringstream table;
  REQUIRE_NOTHROW(run_experiment(cfg, table, opts));
  INFO(table.str());
  h5::Handle f = h5::open_file(out);
  const auto backend = h5::read_strings(f, "summary/backend", out);
  const auto status = h5::read_strings(f, "summary/status", out);
  const auto reason = h5::read_strings(f, "summary/skip_reason", out);
  const auto name = h5::read_strings(f, "summary/decoder_name", out);
  const auto judged = h5::read_strings(f, "summary/judged_format", out);
  const auto diff = h5::read_doubles(f, "summary/backend_diff_rel_max", out);
  const auto budget = h5::read_doubles(f, "summary/budget_used", out);
  const auto budget_max = h5::read_doubles(f, "summary/budget_used_max", out);
  REQUIRE(backend.size() == status.size());
  int cpu_ok = 0, cuda_ok = 0;
  for (size_t i = 0; i < backend.size(); ++i) {
    INFO(name[i] << " " << status[i] << " " << reason[i]);
    if (status[i] != "ok") {
      CHECK_THAT(reason[i], !Contains("CUDA"));  // only combinations invalid on every backend are skipped
      continue;
    }
    CHECK(budget[i] <= 1.0);
    CHECK(budget_max[i] <= 1.0);
    if (backend[i] == "cpu") {
      ++cpu_ok;
      continue;
    }
    ++cuda_ok;
    CHECK(name[i].rfind("cuda:", 0) == 0);
    CHECK(diff[i] <= twin_bound(parse_format(judged[i])));
  }
  CHECK(cpu_ok == 5);  // eager fp32/bf16, replay fp32/bf16, dual fp32+bf16 (dual bf16+bf16 is skipped)
  CHECK(cuda_ok == cpu_ok);
  std::error_code ec;
  fs::remove_all(dir, ec);
}
