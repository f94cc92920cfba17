// Metrics library: state error per decay band, readout KL / top-1, growth fits, and the memory-traffic model,
// each against hand computations written out here. Run: replayssm_tests "[metrics]".
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "errors.h"
#include "metrics/growth.h"
#include "metrics/readout.h"
#include "metrics/state_error.h"
#include "metrics/traffic.h"
#include "model/model.h"
#include "test_util.h"

using namespace rssm;
using Catch::Matchers::Contains;

namespace {

// dt_bias giving softplus(dt_bias) = r, so that with A_log = 0 the head's decay rate is exactly r (up to rounding).
double inv_softplus(double r) { return std::log(std::expm1(r)); }

// Mamba-2, H = 3, P = 2, N = 2 (4 state elements per head), one head per band: rates 0.5, 0.05, 0.001.
Model three_band_mamba2() {
  Model m;
  m.family = Family::Mamba2;
  auto& p = m.mamba2;
  p.H = 3, p.P = 2, p.N = 2, p.G = 1;
  p.A_log = {0.0, 0.0, 0.0};
  p.D = {1.0, 1.0, 1.0};
  p.dt_bias = {inv_softplus(0.5), inv_softplus(0.05), inv_softplus(0.001)};
  return m;
}

double std_of(const std::vector<double>& v) {
  double mean = 0;
  for (double x : v) mean += x;
  mean /= v.size();
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / v.size());
}

// Identity readout (vocab = out_elems = n): the logits are the outputs themselves, so KL cases can be written
// directly as logit vectors.
Readout identity_readout(int n) {
  std::vector<float> W(static_cast<size_t>(n) * n, 0.0f);
  for (int i = 0; i < n; ++i) W[static_cast<size_t>(i) * n + i] = 1.0f;
  return Readout(W, 0, n, 0);
}

// KL(softmax(r) ‖ softmax(t)) the textbook way, in long double: an independent check for O(0.01+) divergences.
double kl_textbook(const std::vector<double>& r, const std::vector<double>& t) {
  long double mr = r[0], mt = t[0];
  for (size_t i = 0; i < r.size(); ++i) mr = std::max<long double>(mr, r[i]), mt = std::max<long double>(mt, t[i]);
  long double zr = 0, zt = 0;
  for (size_t i = 0; i < r.size(); ++i) zr += std::exp(r[i] - mr), zt += std::exp(t[i] - mt);
  long double kl = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    const long double lp = r[i] - mr - std::log(zr), lq = t[i] - mt - std::log(zt);
    kl += std::exp(lp) * (lp - lq);
  }
  return static_cast<double>(kl);
}

}  // namespace

TEST_CASE("decay rates and bands follow the head parameters", "[metrics]") {
  Model m = three_band_mamba2();
  CHECK(head_decay_rate(m, 0) == Approx(0.5).epsilon(1e-12));
  CHECK(head_decay_rate(m, 1) == Approx(0.05).epsilon(1e-12));
  CHECK(head_decay_rate(m, 2) == Approx(0.001).epsilon(1e-12));
  DecayBands b = decay_bands(m);
  CHECK(b.names == std::vector<std::string>{"fast", "medium", "slow"});
  CHECK(b.band_of_head == std::vector<int>{0, 1, 2});
  CHECK(b.count == std::vector<int>{1, 1, 1});

  SECTION("A_log scales the rate, and dt limits clamp it") {
    m.mamba2.A_log[2] = std::log(20.0);  // 20 · 0.001 = 0.02: medium
    CHECK(head_decay_rate(m, 2) == Approx(0.02).epsilon(1e-12));
    m.mamba2.dt_max = 0.01;  // clamps Δ of heads 0 and 1 (and 2's 0.001 stays)
    CHECK(head_decay_rate(m, 0) == Approx(0.01).epsilon(1e-12));
    CHECK(decay_bands(m).band_of_head == std::vector<int>{2, 2, 1});
  }
  SECTION("GDN uses the value heads") {
    Model g;
    g.family = Family::GDN;
    g.gdn.HK = 1, g.gdn.HV = 2, g.gdn.K = 2, g.gdn.V = 2;
    g.gdn.A_log = {std::log(2.0), 0.0};
    g.gdn.dt_bias = {inv_softplus(0.1), inv_softplus(0.004)};
    CHECK(head_decay_rate(g, 0) == Approx(0.2).epsilon(1e-12));
    CHECK(head_decay_rate(g, 1) == Approx(0.004).epsilon(1e-12));
    CHECK(decay_bands(g).count == std::vector<int>{1, 0, 1});
  }
  SECTION("boundaries: 0.1 is medium, 0.01 is slow") {
    m.mamba2.dt_bias = {inv_softplus(0.1 * (1 + 1e-9)), inv_softplus(0.1 * (1 - 1e-9)), inv_softplus(0.01 * (1 - 1e-9))};
    CHECK(decay_bands(m).band_of_head == std::vector<int>{0, 1, 2});
  }
}

TEST_CASE("state_error matches a hand computation per band", "[metrics]") {
  const Model m = three_band_mamba2();
  const DecayBands b = decay_bands(m);
  const int seqs = 2, E = 12;  // 3 heads × 4 elements
  std::vector<double> ref(seqs * E, 1.0), s = ref;
  s[0 * E + 0 * 4 + 0] += 0.3;  // seq 0, head 0 (fast):   d² = 0.09
  s[0 * E + 2 * 4 + 3] -= 0.4;  // seq 0, head 2 (slow):   d² = 0.16
  s[1 * E + 1 * 4 + 1] += 1.2;  // seq 1, head 1 (medium): d² = 1.44
  // Every head's reference norm² is 4, a sequence's is 12.
  const StateErrorStats st = state_error(m, b, s.data(), ref.data(), seqs);
  const double rel0 = std::sqrt(0.25 / 12), rel1 = std::sqrt(1.44 / 12);
  CHECK(st.rel_mean == Approx((rel0 + rel1) / 2).epsilon(1e-14));
  CHECK(st.rel_max == Approx(rel1).epsilon(1e-14));
  REQUIRE(st.band_rel_mean.size() == 3);
  CHECK(st.band_rel_mean[0] == Approx((0.15 + 0.0) / 2).epsilon(1e-14));  // sqrt(0.09/4) = 0.15
  CHECK(st.band_rel_mean[1] == Approx((0.0 + 0.6) / 2).epsilon(1e-14));   // sqrt(1.44/4) = 0.6
  CHECK(st.band_rel_mean[2] == Approx((0.2 + 0.0) / 2).epsilon(1e-14));   // sqrt(0.16/4) = 0.2

  SECTION("an empty band is NaN; a zero reference falls back to the absolute norm") {
    Model two_fast = m;
    two_fast.mamba2.dt_bias = {inv_softplus(0.5), inv_softplus(0.7), inv_softplus(0.0005)};
    const DecayBands b2 = decay_bands(two_fast);
    REQUIRE(b2.count == std::vector<int>{2, 0, 1});
    std::vector<double> zero(seqs * E, 0.0), t = zero;
    t[0 * E + 2 * 4 + 1] = 3.0;  // seq 0, slow head
    t[1 * E + 0 * 4 + 2] = 4.0;  // seq 1, fast head
    const StateErrorStats z = state_error(two_fast, b2, t.data(), zero.data(), seqs);
    CHECK(z.rel_mean == Approx(3.5));
    CHECK(z.rel_max == Approx(4.0));
    CHECK(z.band_rel_mean[0] == Approx(2.0));
    CHECK(std::isnan(z.band_rel_mean[1]));
    CHECK(z.band_rel_mean[2] == Approx(1.5));
  }
  SECTION("a NaN in the state is not hidden") {
    s[1 * E + 5] = std::numeric_limits<double>::quiet_NaN();
    const StateErrorStats n = state_error(m, b, s.data(), ref.data(), seqs);
    CHECK(std::isnan(n.rel_max));
    CHECK(std::isnan(n.rel_mean));
  }
}

TEST_CASE("a corrupted slow-band entry moves only the slow band", "[metrics]") {
  // Larger heads and several sequences so the parallel path is exercised; 5 heads: fast, fast, medium, slow, slow.
  Model m;
  m.family = Family::Mamba2;
  auto& p = m.mamba2;
  p.H = 5, p.P = 8, p.N = 16, p.G = 1;
  p.A_log.assign(5, 0.0);
  p.D.assign(5, 1.0);
  p.dt_bias = {inv_softplus(0.3), inv_softplus(0.9), inv_softplus(0.03), inv_softplus(0.002), inv_softplus(0.008)};
  const DecayBands b = decay_bands(m);
  REQUIRE(b.count == std::vector<int>{2, 1, 2});
  const int seqs = 3;
  const long long E = m.state_elems();
  std::mt19937 rng(7);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> ref(seqs * E), s(seqs * E);
  for (long long i = 0; i < seqs * E; ++i) ref[i] = nd(rng), s[i] = ref[i] * (1 + 1e-4 * nd(rng));
  const StateErrorStats before = state_error(m, b, s.data(), ref.data(), seqs);
  s[1 * E + 3 * (8 * 16) + 77] += 5.0;  // seq 1, head 3 (slow)
  const StateErrorStats after = state_error(m, b, s.data(), ref.data(), seqs);
  CHECK(after.band_rel_mean[0] == before.band_rel_mean[0]);  // exactly: same sums in the same order
  CHECK(after.band_rel_mean[1] == before.band_rel_mean[1]);
  CHECK(after.band_rel_mean[2] > 10 * before.band_rel_mean[2]);
  CHECK(after.rel_max > before.rel_max);
}

TEST_CASE("KL and top-1 through the readout", "[metrics]") {
  const int n = 3;
  Readout r = identity_readout(n);
  REQUIRE(!r.synthesized());
  REQUIRE(r.vocab() == 3);
  const std::vector<double> y_ref = {1.0, 2.0, 3.0};
  std::vector<double> ref_logits;
  r.logits(y_ref.data(), 1, ref_logits);
  REQUIRE(ref_logits == y_ref);
  double kl = -1, top1 = -1;

  SECTION("identical outputs: KL 0, top-1 agrees") {
    r.compare(ref_logits, y_ref.data(), y_ref.data(), 1, &kl, &top1);
    CHECK(kl == 0.0);
    CHECK(top1 == 1.0);
  }
  SECTION("a hand-computed 3-word case") {
    // p = softmax(1, 2, 3), q = softmax(1, 2.5, 2): KL = Σ p log(p/q) = 0.23940136113977084 (computed by hand in
    // double: p = (0.0900306, 0.2447285, 0.6652410), q = (0.1221961, 0.5465493, 0.3312546)). The argmax moves.
    const std::vector<double> y = {1.0, 2.5, 2.0};
    r.compare(ref_logits, y.data(), y_ref.data(), 1, &kl, &top1);
    CHECK(kl == Approx(0.23940136113977084).epsilon(1e-13));
    CHECK(top1 == 0.0);
  }
  SECTION("invariant to a constant added to all test logits") {
    const std::vector<double> y = {1.25, 1.5, 3.0};
    r.compare(ref_logits, y.data(), y_ref.data(), 1, &kl, &top1);
    CHECK(top1 == 1.0);
    const std::vector<double> y_shift = {1.25 + 5, 1.5 + 5, 3.0 + 5};
    double kl_shift = -1, top1_shift = -1;
    r.compare(ref_logits, y_shift.data(), y_ref.data(), 1, &kl_shift, &top1_shift);
    CHECK(kl_shift == Approx(kl).epsilon(1e-13));
    CHECK(top1_shift == 1.0);
    CHECK(kl == Approx(kl_textbook(y_ref, y)).epsilon(1e-12));
  }
  SECTION("far-apart distributions (the non-series and overflow paths)") {
    const std::vector<double> y = {1.0, 12.0, -4.0};
    r.compare(ref_logits, y.data(), y_ref.data(), 1, &kl, &top1);
    CHECK(kl == Approx(kl_textbook(y_ref, y)).epsilon(1e-12));
    const std::vector<double> y_huge = {1.0, 900.0, 3.0};
    r.compare(ref_logits, y_huge.data(), y_ref.data(), 1, &kl, &top1);
    CHECK(kl == Approx(kl_textbook(y_ref, y_huge)).epsilon(1e-12));
    CHECK(top1 == 0.0);
  }
  SECTION("ties go to the first index") {
    const std::vector<double> y = {3.0, 3.0, 0.0};  // test argmax 0 (tie with 1); reference argmax 2
    r.compare(ref_logits, y.data(), y_ref.data(), 1, &kl, &top1);
    CHECK(top1 == 0.0);
    const std::vector<double> tied_ref = {1.0, 3.0, 3.0}, y2 = {1.0, 3.0, 2.0};
    std::vector<double> tied_logits;
    r.logits(tied_ref.data(), 1, tied_logits);
    r.compare(tied_logits, y2.data(), tied_ref.data(), 1, &kl, &top1);
    CHECK(top1 == 1.0);  // reference tie resolved to index 1, which the test's unique argmax matches
    r.compare(tied_logits, tied_ref.data(), tied_ref.data(), 1, &kl, &top1);
    CHECK(top1 == 1.0);
    const std::vector<double> y3 = {1.0, 3.0, 3.5};
    r.compare(tied_logits, y3.data(), tied_ref.data(), 1, &kl, &top1);
    CHECK(top1 == 0.0);
  }
  SECTION("a NaN output gives NaN KL and no agreement") {
    const std::vector<double> y = {1.0, std::numeric_limits<double>::quiet_NaN(), 3.0};
    r.compare(ref_logits, y.data(), y_ref.data(), 1, &kl, &top1);
    CHECK(std::isnan(kl));
    CHECK(top1 == 0.0);
  }
}

TEST_CASE("KL stays accurate for tiny logit differences, over many rows", "[metrics]") {
  // At fp32-level differences (δ ~ 1e-7) KL ~ 1e-15: the textbook formula returns rounding noise there. The
  // second-order expansion KL = ½ Var_p(δ) − ⅙ E_p[(δ − E δ)³] + O(δ⁴) is exact to ~1e-7 relative at this size.
  const int V = 64, rows = 40;
  Readout r = identity_readout(V);
  std::mt19937 rng(3);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> y_ref(rows * V), y(rows * V);
  for (int i = 0; i < rows * V; ++i) {
    y_ref[i] = static_cast<float>(2.0 * nd(rng));  // representable in float: the identity GEMM is then exact
    y[i] = y_ref[i] + static_cast<float>(1e-7 * nd(rng)) * (i % 7 == 0 ? 1.0 : 0.0);
  }
  std::vector<double> ref_logits;
  r.logits(y_ref.data(), rows, ref_logits);
  std::vector<double> kl(rows), top1(rows);
  r.compare(ref_logits, y.data(), y_ref.data(), rows, kl.data(), top1.data());
  for (int row = 0; row < rows; ++row) {
    const double* l = &ref_logits[row * V];
    double mx = l[0], z = 0;
    for (int i = 0; i < V; ++i) mx = std::max(mx, l[i]);
    std::vector<double> p(V), d(V);
    for (int i = 0; i < V; ++i) p[i] = std::exp(l[i] - mx), z += p[i];
    double md = 0;
    for (int i = 0; i < V; ++i) p[i] /= z, d[i] = static_cast<double>(static_cast<float>(y[row * V + i] - y_ref[row * V + i])), md += p[i] * d[i];
    double var = 0, skew = 0;
    for (int i = 0; i < V; ++i) var += p[i] * (d[i] - md) * (d[i] - md), skew += p[i] * std::pow(d[i] - md, 3);
    const double expect = 0.5 * var - skew / 6;
    CHECK(kl[row] == Approx(expect).epsilon(1e-6));
    CHECK(kl[row] > 0);
    CHECK(top1[row] == 1.0);
  }
}

TEST_CASE("readout: synthesized W, GEMM accuracy and calibration", "[metrics]") {
  const int V = 300, O = 200, rows = 70;
  Readout r({}, V, O, 12345);
  REQUIRE(r.synthesized());
  REQUIRE(r.vocab() == V);
  std::mt19937 rng(11);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> y(rows * O);
  for (auto& v : y) v = 0.3 * nd(rng) + 0.1;
  std::vector<double> lg;

  SECTION("calibrate hits the target std within 1%") {
    r.calibrate(y.data(), rows, 4.0);
    r.logits(y.data(), rows, lg);
    CHECK(std_of(lg) == Approx(4.0).epsilon(0.01));
    CHECK(r.measured_std() == Approx(4.0).epsilon(1e-12));
    CHECK(r.scale() == Approx(4.0 / r.unscaled_std()).epsilon(1e-12));
    CHECK(r.calibration_rows() == rows);
    // Calibrating on the first rows only, then looking at all of them: the same scale law holds.
    r.calibrate(y.data(), 10, 2.0);
    std::vector<double> first;
    r.logits(y.data(), 10, first);
    CHECK(std_of(first) == Approx(2.0).epsilon(0.01));
  }
  SECTION("the float GEMM agrees with a double dot product, and W is deterministic in the seed") {
    r.logits(y.data(), rows, lg);
    Readout same({}, V, O, 12345), other({}, V, O, 54321);
    std::vector<double> lg_same, lg_other;
    same.logits(y.data(), rows, lg_same);
    other.logits(y.data(), rows, lg_other);
    CHECK(lg_same == lg);
    CHECK(lg_other != lg);
    // Independent check of the synthesized entries' distribution through the logits: W = Z / sqrt(O) before
    // calibration, so logit std ≈ rms(y) = sqrt(0.3² + 0.1²) ≈ 0.316 (a few % sampling error at 21000 logits).
    CHECK(std_of(lg) == Approx(std::sqrt(0.09 + 0.01)).epsilon(0.05));
  }
  SECTION("a trace's W is used as is") {
    std::vector<float> W(static_cast<size_t>(V) * O);
    for (auto& w : W) w = static_cast<float>(nd(rng));
    Readout t(W, 999, O, 1);
    REQUIRE(!t.synthesized());
    t.calibrate(y.data(), rows, 4.0);
    CHECK(t.scale() == 1.0);
    t.logits(y.data(), rows, lg);
    CHECK(t.measured_std() == Approx(std_of(lg)).epsilon(1e-9));
    double max_rel = 0;
    for (int q = 0; q < rows; ++q)
      for (int v = 0; v < V; ++v) {
        double exact = 0, mag = 0;
        for (int i = 0; i < O; ++i) {
          exact += static_cast<double>(W[static_cast<size_t>(v) * O + i]) * y[q * O + i];
          mag += std::fabs(W[static_cast<size_t>(v) * O + i] * y[q * O + i]);
        }
        max_rel = test::max_keep_nan(max_rel, std::fabs(lg[q * V + v] - exact) / mag);
      }
    // Worst-case float dot-product bound relative to Σ|w·y|: (O + 1)·2^-24 ≈ 1.2e-5 at O = 200 (y rounded to
    // float, then O accumulations); typical errors are ~sqrt(O) times smaller.
    CHECK(max_rel < 1.3e-5);
  }
  SECTION("bad sizes and zero outputs are rejected with a message") {
    CHECK_THROWS_AS(Readout(std::vector<float>(7), 0, 2, 0), ConfigError);
    CHECK_THROWS_AS(Readout({}, 0, 2, 0), ConfigError);
    std::vector<double> zeros(rows * O, 0.0);
    CHECK_THROWS_WITH(r.calibrate(zeros.data(), rows, 4.0), Contains("std"));
  }
}

TEST_CASE("loglog_slope recovers power-law exponents", "[metrics]") {
  // 200 log-spaced points over x in [1, 8192] with 5% multiplicative lognormal noise: the slope's standard error
  // is about 0.05 / (sd(log x) · sqrt(200)) ≈ 0.0014, so a tolerance of 0.01 (7 standard errors) cannot flake
  // with this fixed seed yet catches any formula error (those are off by O(0.1) or more).
  std::mt19937 rng(5);
  std::normal_distribution<double> nd(0.0, 0.05);
  for (double alpha : {0.0, 0.5, 1.0}) {
    std::vector<double> x, y;
    for (int i = 0; i < 200; ++i) {
      const double xi = std::pow(8192.0, i / 199.0);
      x.push_back(xi);
      y.push_back(3e-4 * std::pow(xi, alpha) * std::exp(nd(rng)));
    }
    CHECK(loglog_slope(x, y) == Approx(alpha).margin(0.01));
  }
  // Points with non-positive or non-finite coordinates are skipped; fewer than 3 usable points give NaN.
  CHECK(loglog_slope({1, 2, 4, 0, 8, -1}, {1, 4, 16, 5, 64, 1}) == Approx(2.0).epsilon(1e-12));
  CHECK(loglog_slope({1, 2, 4, 8}, {1, 4, std::numeric_limits<double>::infinity(), 64}) == Approx(2.0).epsilon(1e-12));
  CHECK(std::isnan(loglog_slope({1, 2, 4}, {1, 0, 3})));
  CHECK(std::isnan(loglog_slope({2, 2, 2}, {1, 2, 3})));
}

TEST_CASE("error_by_position on a periodic sawtooth", "[metrics]") {
  const int K = 8;
  // A run whose error is 1 right after a flush and grows by 1 per step until the flush: err = pos + 1.
  for (long long first : {0LL, 3LL, 19LL}) {
    std::vector<double> err;
    const int steps = 5 * K + 3;  // a partial interval at the end
    for (int t = 0; t < steps; ++t) err.push_back(static_cast<double>((first + t) % K) + 1.0);
    const PositionProfile pp = error_by_position(err, K, first);
    REQUIRE(pp.mean.size() == static_cast<size_t>(K));
    long long total = 0;
    for (int i = 0; i < K; ++i) {
      CHECK(pp.mean[i] == i + 1.0);
      total += pp.count[i];
    }
    CHECK(total == steps);
  }
  // Counts: 10 steps from 0 with interval 4 hit positions 0 and 1 three times, 2 and 3 twice.
  const PositionProfile c = error_by_position(std::vector<double>(10, 1.0), 4);
  CHECK(c.count == std::vector<long long>{3, 3, 2, 2});
  // A position never visited is NaN; interval must be positive.
  CHECK(std::isnan(error_by_position({1.0, 2.0}, 4).mean[3]));
  CHECK_THROWS_AS(error_by_position({1.0}, 0), ConfigError);
}

TEST_CASE("traffic model: hand computations at the Nemotron-3 Super geometry", "[metrics]") {
  const Model m = model_preset("nemotron3-super-120b");  // H 128, P 64, N 128, G 8: 16 heads per group
  TrafficParams e;
  e.scheme = "eager";
  e.state_bytes = 4;
  e.act_bytes = 2;
  e.batch = 1;
  const Traffic te = traffic(m, e);
  // Per head: read + write the fp32 state 2·4·64·128 = 65536, inputs x (2·64 = 128) + dt (2), B and C
  // (2·2·128 = 512 per group, /16 heads = 32): 65536 + 130 + 32 = 65698.
  CHECK(te.per_head_nonflush == 65698.0);
  CHECK(te.per_head_flush == 65698.0);
  CHECK(te.per_head_amortised == 65698.0);
  // Batch of 1: 128 heads · (65536 + 130) + 8 groups · 512 = 8409344 = 65698 · 128.
  CHECK(te.batch_amortised == 8409344.0);
  e.batch = 256;
  CHECK(traffic(m, e).batch_amortised == 256 * 8409344.0);

  TrafficParams r;
  r.scheme = "replay";
  r.state_bytes = 4;
  r.act_bytes = 2;
  r.buffer_bytes = 2;
  r.interval = 8;
  const Traffic tr = traffic(m, r);
  // Buffer entry per head: x (2·64) + Δ (4) + B (2·128 / 16) = 148. Mean buffered entries over an interval of 8:
  // 4.5. Non-flush: state read 32768 + 4.5·148 + inputs 162 + appended entry 148 = 33744.
  CHECK(tr.per_head_nonflush == 33744.0);
  // Flush step: read + write 65536 + all 8 entries 1184 + 162 + 148 = 67030.
  CHECK(tr.per_head_flush == 67030.0);
  // Amortised: non-flush + the state write spread over 8 steps: 33744 + 4096 = 37840.
  CHECK(tr.per_head_amortised == 37840.0);
  CHECK(tr.per_head_amortised < te.per_head_amortised);
  CHECK(tr.batch_amortised == Approx(tr.per_head_amortised * 128));
  CHECK(tr.steps_per_flush == 8);

  SECTION("replay bytes versus interval fall, then rise (bell-shaped speed-up)") {
    std::vector<double> bytes;
    for (int K = 1; K <= 64; ++K) {
      r.interval = K;
      bytes.push_back(traffic(m, r).per_head_amortised);
    }
    const size_t best = std::min_element(bytes.begin(), bytes.end()) - bytes.begin();
    INFO("best interval " << best + 1);
    CHECK(best > 0);
    CHECK(best + 1 < bytes.size());
    for (size_t i = 0; i < best; ++i) CHECK(bytes[i] > bytes[i + 1]);
    for (size_t i = best; i + 1 < bytes.size(); ++i) CHECK(bytes[i] < bytes[i + 1]);
    CHECK(bytes.front() > te.per_head_amortised);  // interval 1 pays the buffer on top of eager's state traffic
  }
  SECTION("dual precision reads the cheap copy between flushes") {
    TrafficParams d = r;
    d.scheme = "dual";
    d.read_bytes = 2;
    const Traffic td = traffic(m, d);
    // Non-flush: 2·8192 + 666 + 162 + 148 = 17360. Flush: read + write fp32 65536, write bf16 16384, 1184 + 310.
    CHECK(td.per_head_nonflush == 17360.0);
    CHECK(td.per_head_flush == 65536.0 + 16384.0 + 1184.0 + 310.0);
    // Amortised = mean of 7 ordinary steps (h = 1..7) and the flush.
    double sum = td.per_head_flush;
    for (int h = 1; h <= 7; ++h) sum += 16384.0 + h * 148.0 + 310.0;
    CHECK(td.per_head_amortised == Approx(sum / 8).epsilon(1e-15));
    // fp8 read copy: 1 byte plus a 4-byte scale per row of 128: 1.03125 bytes per element.
    d.read_bytes = 1;
    CHECK(traffic(m, d).per_head_nonflush == 1.03125 * 8192 + 666 + 310);
  }
  SECTION("speculative decoding: eager writes T states, replay writes none between flushes") {
    TrafficParams s = r;
    s.window = 4;
    s.scheme = "spec-eager";
    const Traffic se = traffic(m, s);
    CHECK(se.per_head_amortised == 5 * 32768.0 + 4 * 162.0);
    CHECK(se.tokens_per_step == 4);
    s.scheme = "spec-replay";
    const Traffic sr = traffic(m, s);
    // L = 8 + 4 = 12, every draft accepted: windows start from fills 4 and 8, and the one at 8 (the interval)
    // folds them first. Each reads its fill and its own 4 entries: 4 + 4, and 8 + 4 with the flush.
    CHECK(sr.steps_per_flush == Approx(2).epsilon(1e-6));
    const double fixed = 32768.0 + 4 * 148.0 + 4 * 162.0;
    CHECK(sr.per_head_nonflush == Approx(fixed + 8 * 148.0).epsilon(1e-9));
    CHECK(sr.per_head_flush == Approx(fixed + 12 * 148.0 + 32768.0).epsilon(1e-9));
    CHECK(sr.per_head_amortised == Approx(fixed + 10 * 148.0 + 32768.0 / 2).epsilon(1e-9));
    // fixed:3, L = 20, K = 16: fills 3, 6, 9, 12 do not flush, 15 does (15 + 8 > 20): one flush in 5 windows.
    s.interval = 16;
    s.buffer_len = 20;
    s.acceptance = parse_acceptance("fixed:3");
    const Traffic s3 = traffic(m, s);
    CHECK(s3.tokens_per_step == 3);
    CHECK(s3.steps_per_flush == Approx(5).epsilon(1e-6));
    CHECK(s3.per_head_nonflush == Approx(fixed + (7.5 + 4) * 148.0).epsilon(1e-9));
    CHECK(s3.per_head_flush == Approx(fixed + (15 + 4) * 148.0 + 32768.0).epsilon(1e-9));
    // Four windows of 11.5 entries and one of 19 with the fold: (4·11.5 + 19) / 5 = 13 entries a window.
    CHECK(s3.per_head_amortised == Approx(fixed + 13 * 148.0 + 32768.0 / 5).epsilon(1e-9));
    s.buffer_len = 19;
    CHECK_THROWS_WITH(traffic(m, s), Contains("buffer_len"));
    s.buffer_len = 20;
    s.acceptance = parse_acceptance("fixed:5");
    CHECK_THROWS_WITH(traffic(m, s), Contains("fixed:5"));
    CHECK(sr.per_head_amortised < se.per_head_amortised);
  }
  SECTION("group terms are per group: one group costs less per head than eight") {
    Model g1 = model_preset("granite4-h-small");  // same as Super but G = 1
    CHECK(traffic(g1, e).per_head_amortised == 65536.0 + 130.0 + 512.0 / 128);
  }
  SECTION("bad parameters name the field") {
    TrafficParams bad = r;
    bad.scheme = "lazy";
    CHECK_THROWS_WITH(traffic(m, bad), Contains("unknown scheme"));
    bad = r;
    bad.interval = 0;
    CHECK_THROWS_WITH(traffic(m, bad), Contains("interval"));
    bad = r;
    bad.scheme = "dual";
    bad.read_bytes = 0;
    CHECK_THROWS_WITH(traffic(m, bad), Contains("read_bytes"));
  }
}

TEST_CASE("traffic model: GDN hand computation and the table", "[metrics]") {
  const Model m = model_preset("qwen35-4b");  // HK 16, HV 32, K 128, V 128: 2 value heads per key head
  TrafficParams e;
  e.scheme = "eager";
  e.state_bytes = 4;
  e.act_bytes = 2;
  // Per value head: 2·4·128·128 = 131072, v (256) + a, b (4), q and k (2·2·128 = 512 per key head, /2 = 256).
  CHECK(traffic(m, e).per_head_amortised == 131072.0 + 260.0 + 256.0);
  TrafficParams r = e;
  r.scheme = "replay";
  r.interval = 16;
  r.buffer_bytes = 2;
  // Entry (u, g, k): 256 + 4 + 256/2 = 388. Non-flush: 65536 + 8.5·388 + 516 + 388.
  const Traffic tr = traffic(m, r);
  CHECK(tr.per_head_nonflush == 65536.0 + 8.5 * 388 + 516 + 388);
  CHECK(tr.per_head_amortised == tr.per_head_nonflush + 65536.0 / 16);
  CHECK(tr.batch_amortised == Approx(tr.per_head_amortised * 32));

  const std::string table = traffic_table(m, {e, r});
  INFO(table);
  CHECK_THAT(table, Contains("scheme"));
  CHECK_THAT(table, Contains("replay"));
  CHECK_THAT(table, Contains("1.000"));  // eager fp32 against itself
  CHECK_THAT(table, Contains("HK=16 HV=32 K=128 V=128"));
}
