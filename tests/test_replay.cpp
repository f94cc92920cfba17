// ReplaySSM CPU decoders against eager decoding and the fp64 reference: exactness where the arithmetic is exact,
// rounding-level agreement at interval 1, and a corrupted buffer entry caught (the comparison has teeth).
// The long-horizon numerics facts are in test_replay_facts.cpp.
#include <catch2/catch.hpp>
#include <cmath>

#include "errors.h"
#include "metrics/tolerance.h"
#include "cpu/eager.h"
#include "cpu/reference.h"
#include "cpu/replay.h"
#include "trace/synth.h"

using namespace rssm;

namespace {

SynthConfig small(Family f, long long steps, int seqs, uint64_t seed) {
  SynthConfig sc;
  sc.model.family = f;
  if (f == Family::Mamba2) {
    sc.model.mamba2.H = 8, sc.model.mamba2.P = 8, sc.model.mamba2.N = 16, sc.model.mamba2.G = 2;
    sc.model.mamba2.has_z = true;
  } else {
    sc.model.gdn.HK = 2, sc.model.gdn.HV = 4, sc.model.gdn.K = 16, sc.model.gdn.V = 8;
  }
  sc.steps = steps;
  sc.seqs = seqs;
  sc.seed = seed;
  sc.slow_head_frac = 0.25;
  return sc;
}

std::vector<double> run(Decoder& d, TraceSource& src, long long steps, int chunk = 13) {
  d.reset(src.model(), src.seqs());
  const size_t per = static_cast<size_t>(src.seqs()) * src.model().out_elems();
  std::vector<double> y(static_cast<size_t>(steps) * per);
  InputChunk c;
  for (long long s0 = 0; s0 < steps; s0 += chunk) {
    const int n = static_cast<int>(std::min<long long>(chunk, steps - s0));
    src.read(s0, n, c);
    d.advance(c, 0, n, y.data() + s0 * per);
  }
  return y;
}

double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0, worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  worst = num / den;
  return worst;
}

ReplayOptions exact_opts(int interval, int buffer_len) {
  ReplayOptions o;
  o.interval = interval;
  o.buffer_len = buffer_len;
  o.update_format = Format::FP64;
  o.buffer_format = Format::FP64;
  o.dot_arith = Arith::FP64;
  o.flush_arith = Arith::FP64;
  return o;
}

}  // namespace

TEST_CASE("replay in fp64 equals eager fp64 to 1e-12 for every interval and buffer length", "[replay]") {
  for (Family fam : {Family::Mamba2, Family::GDN}) {
    SynthSource src(small(fam, 100, 2, 3));
    EagerDecoder eager(Format::FP64);
    const auto ye = run(eager, src, 100);
    ReferenceDecoder ref;
    CHECK(max_rel(run(ref, src, 100), ye) < 1e-13);  // fp64 eager is the reference computed another way
    for (GdnRoute route : {GdnRoute::Inner, GdnRoute::Reconstruct}) {
      if (fam == Family::Mamba2 && route == GdnRoute::Reconstruct) continue;
      for (int interval : {1, 2, 3, 8, 16, 64})
        for (int extra : {0, 4}) {
          ReplayOptions o = exact_opts(interval, interval + extra);
          o.route = route;
          ReplayDecoder rd(o);
          const auto yr = run(rd, src, 100);
          INFO(family_name(fam) << " route " << gdn_route_name(route) << " interval " << interval << " buffer "
                                << interval + extra);
          CHECK(max_rel(yr, ye) < output_tolerance(Format::FP64).rel_max);
          // The checkpoint after the last flush equals the reference state at that step.
          const auto st = rd.state();
          REQUIRE(st[0].step == (100 / interval) * interval);
        }
    }
  }
}

TEST_CASE("replay checkpoint equals the reference state at the flush step", "[replay]") {
  for (Family fam : {Family::Mamba2, Family::GDN}) {
    SynthSource src(small(fam, 48, 2, 5));
    ReplayDecoder rd(exact_opts(16, 0));
    run(rd, src, 48);
    ReferenceDecoder ref;
    run(ref, src, 48);
    const auto a = *rd.state()[0].value;
    const auto b = ref.raw_state();
    CHECK(max_rel(a, b) < output_tolerance(Format::FP64).rel_max);
  }
}

TEST_CASE("replay with interval 1 in fp32 equals fp32 eager to rounding", "[replay]") {
  for (Family fam : {Family::Mamba2, Family::GDN}) {
    SynthSource src(small(fam, 200, 2, 7));
    EagerDecoder eager(Format::FP32);
    ReplayOptions o;
    o.interval = 1;
    o.update_format = Format::FP32;
    o.buffer_format = Format::FP32;
    ReplayDecoder rd(o);
    ReferenceDecoder ref;
    const auto yr = run(ref, src, 200), ye = run(eager, src, 200), yp = run(rd, src, 200);
    const double d_pair = max_rel(yp, ye), d_eager = max_rel(ye, yr);
    INFO(family_name(fam) << ": replay-vs-eager " << d_pair << ", eager-vs-fp64 " << d_eager);
    // fp32 rounding: both sit a few ulps of fp32 (1.2e-7) from each other, and from the fp64 reference: within the
    // table's fp32 bound, and in fact 15x inside it over these 200 steps.
    CHECK(d_pair < output_tolerance(Format::FP32).rel_max);
    CHECK(d_eager < output_tolerance(Format::FP32).rel_max);
    CHECK(d_pair < 2e-5);
    CHECK(d_eager < 2e-5);
    CHECK(d_pair > 0);  // different operation order: not bitwise equal, and the check would notice a copy
  }
}

TEST_CASE("a corrupted buffer entry makes the outputs diverge", "[replay]") {
  for (Family fam : {Family::Mamba2, Family::GDN}) {
    SynthSource src(small(fam, 40, 1, 9));
    ReplayDecoder good(exact_opts(8, 0)), bad(exact_opts(8, 0));
    good.reset(src.model(), 1);
    bad.reset(src.model(), 1);
    InputChunk c;
    src.read(0, 40, c);
    const size_t per = src.model().out_elems();
    std::vector<double> yg(40 * per), yb(40 * per);
    good.advance(c, 0, 12, yg.data());
    bad.advance(c, 0, 12, yb.data());
    REQUIRE(bad.buffered() == 4);
    bad.buffer_values(0, 2)[3] += 0.5f;  // one element of one buffered x (u for GDN)
    good.advance(c, 12, 28, yg.data() + 12 * per);
    bad.advance(c, 12, 28, yb.data() + 12 * per);
    std::vector<double> a(yg.begin() + 12 * per, yg.end()), b(yb.begin() + 12 * per, yb.end());
    INFO(family_name(fam));
    CHECK(max_rel(b, a) > 1e-6);  // the next outputs and, after the flush at step 16, the checkpoint carry it
    CHECK(max_rel(*bad.state()[0].value, *good.state()[0].value) > 1e-9);
  }
}

TEST_CASE("replay rejects impossible options with the key named", "[replay]") {
  ReplayOptions o;
  o.interval = 8;
  o.buffer_len = 4;
  CHECK_THROWS_WITH(ReplayDecoder(o), Catch::Contains("scheme.buffer_len"));
  o.buffer_len = 0;
  o.interval = 0;
  CHECK_THROWS_WITH(ReplayDecoder(o), Catch::Contains("scheme.interval"));
  o.interval = 4;
  o.buffer_format = Format::E4M3;
  CHECK_THROWS_WITH(ReplayDecoder(o), Catch::Contains("scheme.buffer_format"));
}
