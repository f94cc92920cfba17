// Philox4x32-10 and the synthetic trace generator: known-answer vectors, determinism (seed, chunking, thread
// count, byte-identical files) and statistics of the recipe in METHOD.md (dt spikes, outlier channels, slow GDN
// heads, parameter ranges). Run: replayssm_tests "[synth]".
#include <omp.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>

#include "errors.h"
#include "numeric/philox.h"
#include "test_util.h"
#include "trace/synth.h"
#include "trace/trace_h5.h"

using namespace rssm;
using Catch::Matchers::Contains;

namespace {

SynthConfig mamba2_config(long long steps, int seqs, uint64_t seed = 3) {
  SynthConfig c;
  c.model.family = Family::Mamba2;
  c.model.mamba2.H = 40;  // 5% of 40 heads = 2 spike heads
  c.model.mamba2.P = 16;
  c.model.mamba2.N = 16;
  c.model.mamba2.G = 2;
  c.model.mamba2.has_z = true;
  c.steps = steps;
  c.seqs = seqs;
  c.seed = seed;
  return c;
}

SynthConfig gdn_config(long long steps, int seqs, uint64_t seed = 3) {
  SynthConfig c;
  c.model.family = Family::GDN;
  c.model.gdn.HK = 4;
  c.model.gdn.HV = 16;  // 12.5% of 16 value heads = 2 slow heads
  c.model.gdn.K = 16;
  c.model.gdn.V = 16;
  c.steps = steps;
  c.seqs = seqs;
  c.seed = seed;
  return c;
}

std::vector<std::vector<float>> read_all(TraceSource& src, long long step0, int n, int piece) {
  std::vector<std::vector<float>> all(src.model().inputs().size());
  InputChunk c;
  for (long long s = step0; s < step0 + n; s += piece) {
    const int m = static_cast<int>(std::min<long long>(piece, step0 + n - s));
    src.read(s, m, c);
    for (size_t i = 0; i < all.size(); ++i) all[i].insert(all[i].end(), c.data[i].begin(), c.data[i].end());
  }
  return all;
}

double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }

}  // namespace

TEST_CASE("philox4x32-10 matches the published known-answer vectors", "[synth]") {
  // Random123's kat_vectors for philox4x32_10 (counter, key -> output).
  using A4 = std::array<uint32_t, 4>;
  CHECK(Philox4x32::generate(A4{0, 0, 0, 0}, {0, 0}) == A4{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(Philox4x32::generate(A4{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}) ==
        A4{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(Philox4x32::generate(A4{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}) ==
        A4{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
  // Usable at compile time (so also in constant expressions of kernels).
  constexpr auto r = Philox4x32::generate(A4{0, 0, 0, 0}, {0, 0});
  STATIC_REQUIRE(r[0] == 0x6627e8d5u);
}

TEST_CASE("philox uniforms and normals have the right range and moments", "[synth]") {
  CHECK(uniform01(0u) > 0.0f);
  CHECK(uniform01(0xffffffffu) < 1.0f);
  CHECK(uniform01_double(0u) > 0.0);
  CHECK(uniform01_double(0xffffffffu) < 1.0);
  const int n = 50000;
  double s1 = 0, s2 = 0, u1 = 0;
  double v[4];
  for (int i = 0; i < n; ++i) {
    const PhiloxBlock b = philox4x32_10(PhiloxBlock{{static_cast<uint32_t>(i), 7, 0, 0}}, 11, 12);
    normals4(b, v);
    for (double x : v) {
      s1 += x;
      s2 += x * x;
    }
    u1 += uniform01(b.v[0]);
  }
  const double m = s1 / (4.0 * n), var = s2 / (4.0 * n) - m * m;
  CHECK(std::fabs(m) < 0.01);  // 4 sigma of the sample mean is 0.009
  CHECK(std::fabs(var - 1.0) < 0.02);
  CHECK(std::fabs(u1 / n - 0.5) < 0.006);
}

TEST_CASE("synth: same config gives byte-identical files, another seed a different one", "[synth][trace]") {
  test::TempDir d;
  auto cfg = mamba2_config(50, 2);
  cfg.readout_vocab = 7;
  SynthSource a(cfg), b(cfg);
  write_trace(d / "a.h5", a, InputStorage::FP32, 16);
  write_trace(d / "b.h5", b, InputStorage::FP32, 16);
  const std::string fa = test::read_text(d / "a.h5");
  REQUIRE(fa.size() > 1000);
  CHECK(fa == test::read_text(d / "b.h5"));
  cfg.seed = 4;
  SynthSource c(cfg);
  write_trace(d / "c.h5", c, InputStorage::FP32, 16);
  CHECK(fa != test::read_text(d / "c.h5"));
  // A different seed changes every tensor and parameter, not only some.
  H5TraceSource ra(d / "a.h5"), rc(d / "c.h5");
  CHECK(ra.model().mamba2.A_log != rc.model().mamba2.A_log);
  InputChunk ca, cc;
  ra.read(0, 50, ca);
  rc.read(0, 50, cc);
  for (size_t i = 0; i < ca.data.size(); ++i) CHECK(ca.data[i] != cc.data[i]);
  CHECK(ra.readout() != rc.readout());
}

TEST_CASE("synth: values do not depend on chunking, read order or thread count", "[synth]") {
  for (auto cfg : {mamba2_config(90, 3), gdn_config(90, 3)}) {
    cfg.conv_width = 5;
    SynthSource src(cfg);
    const auto whole = read_all(src, 0, 90, 90);
    CHECK(read_all(src, 0, 90, 7) == whole);
    // A window in the middle, read on its own (random access): the causal conv must see the same history.
    const auto mid = read_all(src, 33, 20, 20);
    for (size_t i = 0; i < whole.size(); ++i) {
      const size_t per_step = whole[i].size() / 90;
      const std::vector<float> expect(whole[i].begin() + 33 * per_step, whole[i].begin() + 53 * per_step);
      CHECK(mid[i] == expect);
    }
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const auto one = read_all(src, 0, 90, 90);
    omp_set_num_threads(3);
    const auto three = read_all(src, 0, 90, 13);
    omp_set_num_threads(saved);
    CHECK(one == whole);
    CHECK(three == whole);
  }
}

TEST_CASE("synth: Mamba-2 parameters follow the initialisation ranges", "[synth]") {
  auto cfg = mamba2_config(4, 1);
  cfg.model.mamba2.d_per_dim = true;
  SynthSource src(cfg);
  const auto& m = src.model().mamba2;
  REQUIRE(m.A_log.size() == 40);
  REQUIRE(m.D.size() == 40u * 16u);
  // 12.5% of 40 heads = 5 heads of almost no decay (A_log = log 1e-3); the rest follow log U(1, 16).
  REQUIRE(src.slow_heads().size() == 5);
  for (int h = 0; h < m.H; ++h) {
    const bool slow = std::count(src.slow_heads().begin(), src.slow_heads().end(), h) > 0;
    if (slow) {
      CHECK(m.A_log[h] == std::log(1e-3));
    } else {
      CHECK(m.A_log[h] >= 0.0);
      CHECK(m.A_log[h] <= std::log(16.0));
    }
    const double dt = softplus(m.dt_bias[h]);
    CHECK(dt >= 1e-3 * (1 - 1e-9));
    CHECK(dt <= 1e-1 * (1 + 1e-9));
  }
  for (double d : m.D) CHECK(d == 1.0);
  // Spread over the whole range, not collapsed to a point.
  std::vector<double> normal;
  for (int h = 0; h < m.H; ++h)
    if (std::count(src.slow_heads().begin(), src.slow_heads().end(), h) == 0) normal.push_back(m.A_log[h]);
  const auto [lo, hi] = std::minmax_element(normal.begin(), normal.end());
  CHECK(*hi - *lo > 1.0);
  CHECK_THAT(src.describe(), Contains("seed=3") && Contains("mamba2") && Contains("H=40") && Contains("steps=4"));
}

TEST_CASE("synth: Mamba-2 dt spikes and outlier channels", "[synth]") {
  const long long steps = 4000;
  const int seqs = 2;
  SynthSource src(mamba2_config(steps, seqs));
  const auto& m = src.model().mamba2;
  InputChunk c;
  src.read(0, static_cast<int>(steps), c);
  const double tokens = static_cast<double>(steps) * seqs;

  // dt: inputs are x, dt, B, C, z. Outside spikes dt ~ N(0, 0.5), so dt > 3 (6 sigma) only happens on spikes.
  REQUIRE(src.spike_heads().size() == 2);
  std::vector<double> spikes(m.H, 0), sum(m.H, 0), sq(m.H, 0);
  for (long long s = 0; s < steps; ++s)
    for (int q = 0; q < seqs; ++q)
      for (int h = 0; h < m.H; ++h) {
        const float v = c.at(1, static_cast<int>(s), q)[h];
        if (v > 3.0f) ++spikes[h];
        sum[h] += v;
        sq[h] += double(v) * v;
      }
  for (int h = 0; h < m.H; ++h) {
    const bool spiky = std::count(src.spike_heads().begin(), src.spike_heads().end(), h) > 0;
    if (spiky) {
      // Expected 0.005 x 8000 = 40 spikes; [20, 65] is beyond 3.5 sigma either way.
      CHECK(spikes[h] >= 20);
      CHECK(spikes[h] <= 65);
    } else {
      CHECK(spikes[h] == 0);
      const double mean = sum[h] / tokens, sd = std::sqrt(sq[h] / tokens - mean * mean);
      CHECK(std::fabs(sd - 0.5) < 0.03);
    }
  }

  // Outliers: 4 per row (head of x, group of B and C), each channel's typical magnitude is its factor times that of
  // an ordinary channel.
  for (int input : {0, 2, 3}) {
    const int E = c.elems[input];
    const int rows = input == 0 ? m.H : m.G, row_len = E / rows;
    const auto& outliers = src.outliers(input);
    REQUIRE(outliers.size() == static_cast<size_t>(4 * rows));
    std::vector<double> mean_abs(E, 0);
    for (long long s = 0; s < steps; ++s)
      for (int q = 0; q < seqs; ++q) {
        const float* p = c.at(input, static_cast<int>(s), q);
        for (int e = 0; e < E; ++e) mean_abs[e] += std::fabs(p[e]) / tokens;
      }
    std::vector<char> is_out(E, 0);
    for (const auto& [ch, f] : outliers) {
      is_out[ch] = 1;
      CHECK(f >= 10.0f);
      CHECK(f <= 100.0f);
    }
    std::vector<double> normal;
    for (int e = 0; e < E; ++e)
      if (!is_out[e]) normal.push_back(mean_abs[e]);
    std::nth_element(normal.begin(), normal.begin() + normal.size() / 2, normal.end());
    const double typical = normal[normal.size() / 2];
    CHECK(typical > 0.2);  // SiLU of a unit Gaussian: E|silu(u)| is about 0.4
    CHECK(typical < 0.8);
    for (const auto& [ch, f] : outliers) {
      const double ratio = mean_abs[ch] / typical;
      CHECK(ratio > 0.8 * f);
      CHECK(ratio < 1.25 * f);
    }
    for (int r = 0; r < rows; ++r)
      CHECK(std::count(is_out.begin() + r * row_len, is_out.begin() + (r + 1) * row_len, 1) == 4);
    // Ordinary channels never reach outlier size.
    CHECK(*std::max_element(normal.begin(), normal.end()) < 2.0 * typical);
  }
}

TEST_CASE("synth: GDN slow heads keep alpha close to 1, other heads decay", "[synth]") {
  const long long steps = 2000;
  const int seqs = 2;
  SynthSource src(gdn_config(steps, seqs));
  const auto& g = src.model().gdn;
  REQUIRE(src.slow_heads().size() == 2);
  InputChunk c;
  src.read(0, static_cast<int>(steps), c);
  // inputs: q, k, v, a, b
  std::vector<double> alpha_sum(g.HV, 0), b_sum(g.HV, 0), b_sq(g.HV, 0);
  for (long long s = 0; s < steps; ++s)
    for (int q = 0; q < seqs; ++q)
      for (int h = 0; h < g.HV; ++h) {
        const GdnGate gate = gdn_gate_ref(g, h, c.at(3, static_cast<int>(s), q)[h], c.at(4, static_cast<int>(s), q)[h]);
        alpha_sum[h] += gate.alpha;
        const double b = c.at(4, static_cast<int>(s), q)[h];
        b_sum[h] += b;
        b_sq[h] += b * b;
      }
  const double tokens = double(steps) * seqs;
  for (int h = 0; h < g.HV; ++h) {
    const bool slow = std::count(src.slow_heads().begin(), src.slow_heads().end(), h) > 0;
    const double mean_alpha = alpha_sum[h] / tokens;
    if (slow) {
      CHECK(mean_alpha > 0.999);
      CHECK(mean_alpha < 1.0);
    } else {
      CHECK(mean_alpha < 0.999);
    }
    CHECK(std::fabs(b_sum[h] / tokens) < 0.1);
    CHECK(std::fabs(b_sq[h] / tokens - 1.0) < 0.1);
  }
}

TEST_CASE("synth: channel correlation follows channel_corr", "[synth]") {
  // q is the plain correlated-Gaussian path: unit variance, mean |pairwise correlation| grows with channel_corr.
  auto mean_abs_corr = [](double corr) {
    auto cfg = gdn_config(3000, 1);
    cfg.channel_corr = corr;
    SynthSource src(cfg);
    InputChunk c;
    src.read(0, 3000, c);
    const int K = 16;  // first key head's channels
    std::vector<double> s(K, 0), ss(K, 0), cross(K * K, 0);
    for (int t = 0; t < 3000; ++t) {
      const float* p = c.at(0, t, 0);
      for (int i = 0; i < K; ++i) {
        s[i] += p[i];
        ss[i] += double(p[i]) * p[i];
        for (int j = 0; j < K; ++j) cross[i * K + j] += double(p[i]) * p[j];
      }
    }
    double acc = 0, var_err = 0;
    for (int i = 0; i < K; ++i) {
      const double vi = ss[i] / 3000 - (s[i] / 3000) * (s[i] / 3000);
      var_err = test::max_keep_nan(var_err, std::fabs(vi - 1.0));
      for (int j = 0; j < i; ++j) {
        const double cov = cross[i * K + j] / 3000 - (s[i] / 3000) * (s[j] / 3000);
        const double vj = ss[j] / 3000 - (s[j] / 3000) * (s[j] / 3000);
        acc += std::fabs(cov / std::sqrt(vi * vj));
      }
    }
    CHECK(var_err < 0.1);
    return acc / (K * (K - 1) / 2);
  };
  const double none = mean_abs_corr(0.0), half = mean_abs_corr(0.5), most = mean_abs_corr(0.9);
  CHECK(none < 0.04);  // sampling noise only: about 0.8/sqrt(3000)
  CHECK(half > 0.1);
  CHECK(most > half);
}

TEST_CASE("synth: readout is N(0, 1/out_elems) and seeded", "[synth]") {
  auto cfg = gdn_config(2, 1);
  cfg.readout_vocab = 300;
  SynthSource a(cfg), b(cfg);
  const int E = a.model().out_elems();
  REQUIRE(a.readout_vocab() == 300);
  REQUIRE(a.readout().size() == static_cast<size_t>(300) * E);
  CHECK(a.readout() == b.readout());
  double s2 = 0;
  for (float w : a.readout()) s2 += double(w) * w;
  CHECK(std::fabs(s2 / a.readout().size() * E - 1.0) < 0.02);
  cfg.readout_vocab = 0;
  CHECK(SynthSource(cfg).readout().empty());
}

TEST_CASE("synth: bad configuration values name the field", "[synth]") {
  auto cfg = mamba2_config(10, 1);
  cfg.seqs = 0;
  CHECK_THROWS_AS(SynthSource(cfg), ConfigError);
  CHECK_THROWS_WITH(SynthSource(cfg), Contains("synth.seqs"));
  cfg = mamba2_config(10, 1);
  cfg.spike_token_frac = 1.5;
  CHECK_THROWS_WITH(SynthSource(cfg), Contains("synth.spike_token_frac"));
  cfg = mamba2_config(10, 1);
  cfg.model.mamba2.G = 3;
  CHECK_THROWS_WITH(SynthSource(cfg), Contains("synth.model") && Contains("G=3"));
  cfg = mamba2_config(10, 1);
  cfg.model.mamba2.dt_min = 0.5;
  cfg.model.mamba2.dt_max = 0.1;
  CHECK_THROWS_AS(SynthSource(cfg), ConfigError);  // a user error, not a broken invariant
  CHECK_THROWS_WITH(SynthSource(cfg), Contains("synth.dt_min"));
  cfg = mamba2_config(10, 1);
  SynthSource ok(cfg);
  InputChunk c;
  CHECK_THROWS_WITH(ok.read(5, 6, c), Contains("outside"));
}

// Not run by default: how long the quick-start trace (Nemotron-3 Nano 30B, 2 sequences, 1024 steps) takes.
TEST_CASE("synth: quick-start generation speed", "[.][synth][perf]") {
  SynthConfig cfg;
  cfg.model = model_preset("nemotron3-nano-30b");
  cfg.steps = 1024;
  cfg.seqs = 2;
  cfg.seed = 1;
  SynthSource src(cfg);
  InputChunk c;
  const double t0 = omp_get_wtime();
  for (long long s = 0; s < cfg.steps; s += 64) src.read(s, 64, c);
  const double t1 = omp_get_wtime();
  WARN("generated 1024 steps x 2 seqs of " << src.model().geometry_string() << " in " << (t1 - t0) << " s on "
                                           << omp_get_max_threads() << " threads");
}
