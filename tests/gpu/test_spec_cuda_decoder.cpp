// GPU tests of the `cuda` decoder of speculative schemes (kernels/common/spec_decoder.h) as the harness runs it:
// built by the factory, driven by the lockstep engine next to its cpu twin (the CPU speculative emulation, which
// walks the same per-row windows: same seed, same acceptance draws) and the fp64 reference, in chunks that cut
// windows (the decoder's lookahead and its outputs computed ahead are exercised). Label `gpu`; skipped with a
// message without a device. Asserted for every cuda point:
//   - it runs (not skipped) and names itself decoder_name();
//   - its output error against fp64 is within metrics/tolerance.h for its judged format;
//   - its per-step difference from the cpu twin is within the contract's allowance: 1e-5 for Mamba-2 judged in fp32
//     (same arithmetic, another order), the judged format's rel_max otherwise (GDN's u is re-rounded to the bf16
//     buffer from values that differ in the last fp32 bits, so a flip of one bf16 step is allowed);
//   - the eager baseline's outputs equal its cpu twin's (eager decoding's) within 1e-5 (fp32) or bitwise (bf16
//     state: the state rounding decides).
#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/spec_decoder.h"
#include "cuda_backend.h"
#include "metrics/tolerance.h"
#include "run/factory.h"
#include "run/lockstep.h"
#include "trace/synth.h"

#include "gpu_test_util.h"

using namespace rssm;
using Catch::Matchers::Contains;

namespace {

using Params = std::vector<std::pair<std::string, std::string>>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

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

Scheme scheme_of(const Params& p, Backend b) {
  Scheme s = parse_scheme(p);
  s.backend = b;
  return s;
}

SynthConfig synth(Family f, long long steps, int seqs) {
  SynthConfig sc;
  sc.model.family = f;
  if (f == Family::Mamba2) {
    auto& m = sc.model.mamba2;
    m.H = 8, m.P = 16, m.N = 32, m.G = 2;
    m.has_z = true;
  } else {
    auto& g = sc.model.gdn;
    g.HK = 2, g.HV = 4, g.K = 32, g.V = 32;
  }
  sc.steps = steps;
  sc.seqs = seqs;
  sc.seed = 5;
  sc.slow_head_frac = 0.25;
  return sc;
}

}  // namespace

TEST_CASE("spec cuda decoder: what the verify kernels do not cover is a precise skip reason", "[gpu][spec][decoder]") {
  const std::vector<std::pair<Params, std::string>> missing = {
      {{{"decoder", "replay"}, {"window", "17"}}, "at most 16 positions"},
      {{{"decoder", "replay"}, {"window", "4"}, {"buffer_format", "fp32"}}, "fp32 buffer"},
      {{{"decoder", "dual"}, {"window", "4"}, {"read_format", "e4m3"}}, "e4m3 read copy"},
      {{{"decoder", "replay"}, {"window", "4"}, {"rounding", "stochastic"}}, "stochastic"},
      {{{"decoder", "replay"}, {"window", "4"}, {"interval", "62"}}, "L_hist 66"},
  };
  for (const auto& [p, reason] : missing) {
    const Scheme s = scheme_of(p, Backend::Cuda);
    INFO(s.name());
    CHECK_THAT(spec_cuda_unsupported(s, Family::Mamba2), Contains(reason));
  }
  const Scheme recon = scheme_of({{"decoder", "replay"}, {"window", "4"}, {"route", "reconstruct"}}, Backend::Cuda);
  CHECK_THAT(spec_cuda_unsupported(recon, Family::GDN), Contains("route inner"));
  CHECK(spec_cuda_unsupported(recon, Family::Mamba2).empty());  // Mamba-2 has one route
}

TEST_CASE("spec cuda decoder: cpu and cuda twins in lockstep over windows cut by chunks, against fp64 and each other",
          "[gpu][spec][decoder]") {
  if (!gpu_test::have_device()) return;
  const std::vector<Params> schemes = {
      {{"decoder", "eager"}, {"state_format", "fp32"}, {"window", "4"}},
      {{"decoder", "eager"}, {"state_format", "bf16"}, {"window", "3"}, {"acceptance", "prob:0.5"}},
      {{"decoder", "replay"}, {"state_format", "fp32"}, {"interval", "16"}, {"window", "4"}},
      {{"decoder", "replay"}, {"state_format", "fp32"}, {"interval", "8"}, {"window", "4"}, {"acceptance", "all"}},
      {{"decoder", "replay"}, {"state_format", "fp32"}, {"interval", "4"}, {"window", "8"}, {"acceptance", "fixed:3"}},
      {{"decoder", "replay"}, {"state_format", "bf16"}, {"interval", "8"}, {"window", "2"}},
      {{"decoder", "replay"}, {"state_format", "fp32"}, {"interval", "16"}, {"window", "6"}, {"buffer_len", "40"}},
      {{"decoder", "dual"}, {"state_format", "fp32"}, {"read_format", "bf16"}, {"interval", "16"}, {"window", "4"}},
  };
  const long long steps = 150;
  const int seqs = 5;
  for (Family fam : {Family::Mamba2, Family::GDN})
    for (const char* out : {"fp32", "bf16"}) {
      SynthSource src(synth(fam, steps, seqs));
      LockstepSettings st;
      st.steps = steps;
      st.seqs = seqs;
      st.chunk = 23;  // windows straddle chunk ends
      st.act = Format::BF16;
      st.kl = false;
      st.state_err = true;
      std::vector<LockstepRun> runs;
      std::vector<Scheme> cuda_schemes;
      for (Params p : schemes) {
        p.emplace_back("out_format", out);
        for (Backend b : {Backend::Cpu, Backend::Cuda}) {
          const Scheme s = scheme_of(p, b);
          if (b == Backend::Cuda) {
            INFO(s.name());
            REQUIRE(cuda_unavailable_reason(s, fam).empty());
            cuda_schemes.push_back(s);
          }
          LockstepRun r;
          r.dec = make_decoder(s, fam, 3);
          r.dec->reset(src.model(), seqs);
          r.observe_every = s.replays() ? 1 : 8;
          r.out_format = s.out_format;
          if (b == Backend::Cuda) {
            CHECK(r.dec->name() == s.decoder_name());
            r.twin = static_cast<int>(runs.size()) - 1;
          }
          runs.push_back(std::move(r));
        }
      }
      REQUIRE(run_lockstep(st, src, runs));
      for (size_t k = 0; k < cuda_schemes.size(); ++k) {
        const Scheme& s = cuda_schemes[k];
        const LockstepRun& cuda = runs[2 * k + 1];
        const LockstepRun& cpu = runs[2 * k];
        INFO(s.name());
        const Format judged = judged_format(fam, s);
        const Tolerance tol = output_tolerance(judged);
        const std::vector<double>& mean_err = cuda.err.rel_mean;
        const std::vector<double>& cpu_mean_err = cpu.err.rel_mean;
        CHECK(mean_of(mean_err) <= tol.rel_mean);
        CHECK(max_of(mean_err) <= tol.rel_max);
        CHECK(mean_of(mean_err) <= 2 * mean_of(cpu_mean_err) + 1e-6);
        const bool tight = fam == Family::Mamba2 && judged == Format::FP32 && s.out_format == Format::FP32;
        const double allow = tight ? 1e-5 : tol.rel_max;
        CHECK(max_of(cuda.twin_rel_max) <= allow);
        REQUIRE(cuda.twin_rel_max.size() == static_cast<size_t>(steps));
        if (s.speculative() && s.replays()) CHECK(!cpu.obs_step.empty());  // the emulation saw rows flush
      }
    }
}
