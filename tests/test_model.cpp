// The fp64 reference steps against hand-computed cases (Mamba-2) and an independently written matrix
// formulation (GDN, with Eigen), plus the decoder wrappers built on them.
#include <Eigen/Dense>
#include <catch2/catch.hpp>
#include <cmath>
#include <omp.h>
#include <random>

#include "errors.h"
#include "model/model.h"
#include "cpu/eager.h"
#include "cpu/reference.h"
#include "test_util.h"
#include "trace/trace.h"

using namespace rssm;
using Catch::Matchers::Contains;

namespace {

Model tiny_mamba2(double D = 0.5) {
  Model m;
  m.family = Family::Mamba2;
  auto& p = m.mamba2;
  p.H = 1, p.P = 1, p.N = 2, p.G = 1;
  p.A_log = {0.0};  // A = -1
  p.D = {D};
  p.dt_bias = {0.0};
  return m;
}

// Fills a memory trace with seeded Gaussian inputs (dt and gates around 0) and seeded parameters.
MemoryTrace random_trace(Model m, int steps, int seqs, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  if (m.family == Family::Mamba2) {
    auto& p = m.mamba2;
    p.A_log.resize(p.H);
    p.dt_bias.resize(p.H);
    p.D.resize(p.d_per_dim ? p.H * p.P : p.H);
    for (auto& v : p.A_log) v = std::log(1 + 15 * ud(rng));
    for (auto& v : p.dt_bias) v = -3 + 2 * ud(rng);
    for (auto& v : p.D) v = ud(rng);
  } else {
    auto& p = m.gdn;
    p.A_log.resize(p.HV);
    p.dt_bias.resize(p.HV);
    for (auto& v : p.A_log) v = std::log(1 + 15 * ud(rng));
    for (auto& v : p.dt_bias) v = -3 + 2 * ud(rng);
  }
  MemoryTrace t(m, steps, seqs);
  for (auto& in : t.inputs)
    for (auto& v : in) v = nd(rng);
  return t;
}

}  // namespace

TEST_CASE("mamba2 reference: two hand-computed steps", "[model]") {
  Model m = tiny_mamba2();
  std::vector<double> S(2, 0.0), y(1);
  // Step 1: dt + bias = 0 -> delta = ln 2, a = exp(-ln 2) = 1/2; S = ln2 * 2 * [1, 3]; y = S.C + D x.
  float x1[] = {2}, dt1[] = {0}, B1[] = {1, 3}, C1[] = {1, 1};
  mamba2_step_ref(m.mamba2, S.data(), x1, dt1, B1, C1, nullptr, y.data());
  const double ln2 = std::log(2.0);
  CHECK(S[0] == Approx(2 * ln2).epsilon(1e-15));
  CHECK(S[1] == Approx(6 * ln2).epsilon(1e-15));
  CHECK(y[0] == Approx(8 * ln2 + 1.0).epsilon(1e-15));
  // Step 2: dt = 25 > 20, softplus passes it through exactly: delta = 25, a = exp(-25).
  float x2[] = {1}, dt2[] = {25}, B2[] = {1, 0}, C2[] = {0, 1}, z2[] = {1};
  std::vector<double> S2 = S;
  mamba2_step_ref(m.mamba2, S.data(), x2, dt2, B2, C2, nullptr, y.data());
  CHECK(S[0] == Approx(25 + 2 * ln2 * std::exp(-25.0)).epsilon(1e-15));
  CHECK(S[1] == Approx(6 * ln2 * std::exp(-25.0)).epsilon(1e-15));
  CHECK(y[0] == Approx(6 * ln2 * std::exp(-25.0) + 0.5).epsilon(1e-15));
  // The z gate multiplies by z * sigmoid(z).
  m.mamba2.has_z = true;
  mamba2_step_ref(m.mamba2, S2.data(), x2, dt2, B2, C2, z2, y.data());
  CHECK(y[0] == Approx((6 * ln2 * std::exp(-25.0) + 0.5) / (1 + std::exp(-1.0))).epsilon(1e-15));
}

TEST_CASE("mamba2 reference: softplus pass-through and dt limits", "[model]") {
  CHECK(softplus_ref(20.5) == 20.5);
  CHECK(softplus_ref(0.0) == Approx(std::log(2.0)).epsilon(1e-16));
  CHECK(softplus_ref(-30) == Approx(std::exp(-30.0)).epsilon(1e-12));
  Model m = tiny_mamba2();
  m.mamba2.dt_max = 0.1;
  CHECK(mamba2_delta_ref(m.mamba2, 0, 3.0) == 0.1);
  m.mamba2.dt_min = 0.05;
  m.mamba2.dt_max = 1.0;
  CHECK(mamba2_delta_ref(m.mamba2, 0, -30.0) == 0.05);
}

TEST_CASE("mamba2 reference: groups, D per dim", "[model]") {
  // H = 4 heads in G = 2 groups: heads 0,1 read B/C row 0; heads 2,3 read row 1.
  Model m;
  m.family = Family::Mamba2;
  auto& p = m.mamba2;
  p.H = 4, p.P = 2, p.N = 3, p.G = 2, p.d_per_dim = true;
  p.A_log.assign(4, 0.0);
  p.dt_bias.assign(4, 0.0);
  p.D = {0, 0, 0, 0, 0, 0, 1, 2};
  m.validate("test");
  std::vector<double> S(m.state_elems(), 0.0), y(m.out_elems());
  std::vector<float> x(8, 1.0f), dt(4, 0.0f), B = {1, 0, 0, 0, 0, 1}, C = {1, 0, 0, 0, 0, 1};
  mamba2_step_ref(p, S.data(), x.data(), dt.data(), B.data(), C.data(), nullptr, y.data());
  const double ln2 = std::log(2.0);
  for (int h = 0; h < 4; ++h)
    for (int i = 0; i < 2; ++i) CHECK(y[h * 2 + i] == Approx(ln2 + p.D[h * 2 + i]).epsilon(1e-15));
  // Head 0 wrote state column 0 (B row 0), head 2 column 2 (B row 1).
  CHECK(S[0] == Approx(ln2));
  CHECK(S[2] == 0.0);
  CHECK(S[2 * 6 + 2] == Approx(ln2));
}

TEST_CASE("model validation names the parameter", "[model]") {
  Model m = tiny_mamba2();
  m.mamba2.D = {1, 2};
  CHECK_THROWS_WITH(m.validate("f.h5"), Contains("f.h5") && Contains("'D'"));
  m = tiny_mamba2();
  m.mamba2.G = 3;
  m.mamba2.H = 4;
  CHECK_THROWS_AS(m.validate("x"), FormatError);
  CHECK_THROWS_WITH(model_preset("nemotron9"), Contains("nemotron3-super-120b"));
  Model s = model_preset("nemotron3-super-120b");
  CHECK(s.mamba2.H == 128);
  CHECK(s.mamba2.P == 64);
  CHECK(s.mamba2.N == 128);
  CHECK(s.mamba2.G == 8);
  Model q = model_preset("qwen35-122b");
  CHECK(q.family == Family::GDN);
  CHECK(q.gdn.HV == 64);
}

TEST_CASE("gdn reference equals an independent matrix formulation", "[model]") {
  Model m;
  m.family = Family::GDN;
  m.gdn.HK = 2, m.gdn.HV = 4, m.gdn.K = 8, m.gdn.V = 6;
  MemoryTrace t = random_trace(m, 20, 1, 3);
  const auto& p = t.model().gdn;
  InputChunk c;
  t.read(0, 20, c);
  std::vector<double> S(t.model().state_elems(), 0.0), o(p.out_elems());
  // Independent: Eigen matrices per value head, written from METHOD.md without looking at gdn_ref.cpp's loops.
  std::vector<Eigen::MatrixXd> Sm(p.HV, Eigen::MatrixXd::Zero(p.V, p.K));
  for (int s = 0; s < 20; ++s) {
    gdn_step_ref(p, S.data(), c.at(0, s, 0), c.at(1, s, 0), c.at(2, s, 0), c.at(3, s, 0), c.at(4, s, 0), o.data());
    for (int h = 0; h < p.HV; ++h) {
      const int hk = h / (p.HV / p.HK);
      Eigen::VectorXd q(p.K), k(p.K), v(p.V);
      for (int j = 0; j < p.K; ++j) {
        q[j] = c.at(0, s, 0)[hk * p.K + j];
        k[j] = c.at(1, s, 0)[hk * p.K + j];
      }
      for (int i = 0; i < p.V; ++i) v[i] = c.at(2, s, 0)[h * p.V + i];
      q /= std::sqrt(q.squaredNorm() + 1e-6);
      q /= std::sqrt(double(p.K));
      k /= std::sqrt(k.squaredNorm() + 1e-6);
      const double a = c.at(3, s, 0)[h], b = c.at(4, s, 0)[h];
      const double sp = (a + p.dt_bias[h]) > 20 ? a + p.dt_bias[h] : std::log(1 + std::exp(a + p.dt_bias[h]));
      const double alpha = std::exp(-std::exp(p.A_log[h]) * sp), beta = 1 / (1 + std::exp(-b));
      const Eigen::VectorXd u = beta * (v - alpha * Sm[h] * k);
      Sm[h] = alpha * Sm[h] + u * k.transpose();
      const Eigen::VectorXd oo = Sm[h] * q;
      for (int i = 0; i < p.V; ++i) REQUIRE(o[h * p.V + i] == Approx(oo[i]).epsilon(1e-12).margin(1e-14));
    }
  }
  for (int h = 0; h < p.HV; ++h)
    for (int i = 0; i < p.V; ++i)
      for (int j = 0; j < p.K; ++j)
        CHECK(S[(h * p.V + i) * p.K + j] == Approx(Sm[h](i, j)).epsilon(1e-12).margin(1e-14));
}

TEST_CASE("gdn reference catches a wrong key head (the comparison has teeth)", "[model]") {
  // Same as above but the independent side deliberately uses key head 0 for every value head: must differ.
  Model m;
  m.family = Family::GDN;
  m.gdn.HK = 2, m.gdn.HV = 4, m.gdn.K = 4, m.gdn.V = 3;
  MemoryTrace t = random_trace(m, 2, 1, 9);
  InputChunk c;
  t.read(0, 2, c);
  const auto& p = t.model().gdn;
  std::vector<double> S(t.model().state_elems(), 0.0), o(p.out_elems()), o_wrong(p.out_elems());
  gdn_step_ref(p, S.data(), c.at(0, 0, 0), c.at(1, 0, 0), c.at(2, 0, 0), c.at(3, 0, 0), c.at(4, 0, 0), o.data());
  // Copy key head 0 over key head 1 and recompute: heads 2,3 must change.
  std::vector<float> q(c.at(0, 0, 0), c.at(0, 0, 0) + 8), k(c.at(1, 0, 0), c.at(1, 0, 0) + 8);
  std::copy(q.begin(), q.begin() + 4, q.begin() + 4);
  std::copy(k.begin(), k.begin() + 4, k.begin() + 4);
  std::fill(S.begin(), S.end(), 0.0);
  gdn_step_ref(p, S.data(), q.data(), k.data(), c.at(2, 0, 0), c.at(3, 0, 0), c.at(4, 0, 0), o_wrong.data());
  CHECK(o_wrong[0] == o[0]);
  CHECK(o_wrong[2 * p.V] != o[2 * p.V]);
}

TEST_CASE("reference decoder equals the step function and does not depend on thread count", "[model]") {
  for (Family fam : {Family::Mamba2, Family::GDN}) {
    Model m;
    m.family = fam;
    if (fam == Family::Mamba2) {
      m.mamba2.H = 4, m.mamba2.P = 8, m.mamba2.N = 16, m.mamba2.G = 2, m.mamba2.has_z = true;
    } else {
      m.gdn.HK = 2, m.gdn.HV = 4, m.gdn.K = 16, m.gdn.V = 8;
    }
    MemoryTrace t = random_trace(m, 12, 3, 5);
    InputChunk c;
    t.read(0, 12, c);
    const int out = t.model().out_elems();
    std::vector<double> y1(12 * 3 * out), y2(y1.size());
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    ReferenceDecoder a;
    a.reset(t.model(), 3);
    a.advance(c, 0, 12, y1.data());
    omp_set_num_threads(2);
    ReferenceDecoder b;
    b.reset(t.model(), 3);
    b.advance(c, 0, 5, y2.data());  // in two calls: chunking must not matter either
    b.advance(c, 5, 7, y2.data() + 5 * 3 * out);
    omp_set_num_threads(saved);
    CHECK(y1 == y2);
    // Sequence 1 of step 3 by the plain step function.
    std::vector<double> S(t.model().state_elems(), 0.0), y(out);
    for (int s = 0; s <= 3; ++s) {
      if (fam == Family::Mamba2)
        mamba2_step_ref(t.model().mamba2, S.data(), c.at(0, s, 1), c.at(1, s, 1), c.at(2, s, 1), c.at(3, s, 1),
                        c.at(4, s, 1), y.data());
      else
        gdn_step_ref(t.model().gdn, S.data(), c.at(0, s, 1), c.at(1, s, 1), c.at(2, s, 1), c.at(3, s, 1),
                     c.at(4, s, 1), y.data());
    }
    for (int i = 0; i < out; ++i) CHECK(y1[(3 * 3 + 1) * out + i] == y[i]);
  }
}

TEST_CASE("fp32 eager stays at fp32 rounding; a bf16 state is much worse", "[model]") {
  for (Family fam : {Family::Mamba2, Family::GDN}) {
    Model m;
    m.family = fam;
    if (fam == Family::Mamba2) {
      m.mamba2.H = 4, m.mamba2.P = 8, m.mamba2.N = 16, m.mamba2.G = 1;
    } else {
      m.gdn.HK = 1, m.gdn.HV = 2, m.gdn.K = 16, m.gdn.V = 8;
    }
    MemoryTrace t = random_trace(m, 64, 2, 11);
    InputChunk c;
    t.read(0, 64, c);
    const int out = t.model().out_elems();
    std::vector<double> yr(64 * 2 * out), y32(yr.size()), y16(yr.size());
    ReferenceDecoder r;
    r.reset(t.model(), 2);
    r.advance(c, 0, 64, yr.data());
    EagerDecoder e32(Format::FP32), e16(Format::BF16);
    e32.reset(t.model(), 2);
    e16.reset(t.model(), 2);
    e32.advance(c, 0, 64, y32.data());
    e16.advance(c, 0, 64, y16.data());
    const double e_32 = test::rel_rms(y32, yr), e_16 = test::rel_rms(y16, yr);
    INFO("family " << family_name(fam) << " fp32 rel rms " << e_32 << " bf16 rel rms " << e_16);
    CHECK(e_32 < 1e-5);
    CHECK(e_16 > 10 * e_32);
    CHECK(e_16 < 5e-2);
  }
  CHECK_THROWS_AS(EagerDecoder(Format::E4M3), ConfigError);
}
