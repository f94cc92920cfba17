// ReplaySSM CPU decoders against eager decoding and the fp64 reference: exactness where the arithmetic is exact,
// rounding-level agreement at interval 1, a corrupted buffer entry caught (the comparison has teeth), and a
// decoder planting one NaN per step failing every comparison these cases make.
// The long-horizon numerics facts are in test_replay_facts.cpp.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "errors.h"
#include "metrics/tolerance.h"
#include "cpu/eager.h"
#include "cpu/reference.h"
#include "cpu/replay.h"
#include "test_util.h"
#include "trace/synth.h"
#include "trace_fixtures.h"

using namespace rssm;
using test::run_chunked;
using test::small_layer;

namespace {

using test::max_rel;

// The fp64 reference state after the first `steps` steps of src: [seqs, state_elems].
std::vector<double> reference_state(TraceSource& src, long long steps) {
  ReferenceDecoder ref;
  run_chunked(ref, src, steps);
  return ref.raw_state();
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
    SynthSource src(small_layer(fam, 100, 2, 3));
    EagerDecoder eager(Format::FP64);
    const auto ye = run_chunked(eager, src, 100);
    ReferenceDecoder ref;
    CHECK(max_rel(run_chunked(ref, src, 100), ye) < 1e-13);  // fp64 eager is the reference computed another way
    for (GdnRoute route : {GdnRoute::Inner, GdnRoute::Reconstruct}) {
      if (fam == Family::Mamba2 && route == GdnRoute::Reconstruct) continue;
      for (int interval : {1, 2, 3, 8, 16, 64})
        for (int extra : {0, 4}) {
          ReplayOptions o = exact_opts(interval, interval + extra);
          o.route = route;
          ReplayDecoder rd(o);
          const auto yr = run_chunked(rd, src, 100);
          INFO(family_name(fam) << " route " << gdn_route_name(route) << " interval " << interval << " buffer "
                                << interval + extra);
          CHECK(max_rel(yr, ye) < output_tolerance(Format::FP64).rel_max);
          // The checkpoint after the last flush equals the reference state at that step.
          const auto st = rd.state();
          const long long flushed = (100 / interval) * interval;
          REQUIRE(st[0].step == flushed);
          CHECK(max_rel(st[0].to_vector(), reference_state(src, flushed)) < output_tolerance(Format::FP64).rel_max);
        }
    }
  }
}

TEST_CASE("replay checkpoint equals the reference state at the flush step", "[replay]") {
  for (Family fam : {Family::Mamba2, Family::GDN}) {
    SynthSource src(small_layer(fam, 48, 2, 5));
    ReplayDecoder rd(exact_opts(16, 0));
    run_chunked(rd, src, 48);
    ReferenceDecoder ref;
    run_chunked(ref, src, 48);
    const auto a = rd.state()[0].to_vector();
    const auto b = ref.raw_state();
    CHECK(max_rel(a, b) < output_tolerance(Format::FP64).rel_max);
  }
}

TEST_CASE("replay with interval 1 in fp32 equals fp32 eager to rounding", "[replay]") {
  for (Family fam : {Family::Mamba2, Family::GDN}) {
    SynthSource src(small_layer(fam, 200, 2, 7));
    EagerDecoder eager(Format::FP32);
    ReplayOptions o;
    o.interval = 1;
    o.update_format = Format::FP32;
    o.buffer_format = Format::FP32;
    ReplayDecoder rd(o);
    ReferenceDecoder ref;
    const auto yr = run_chunked(ref, src, 200), ye = run_chunked(eager, src, 200), yp = run_chunked(rd, src, 200);
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

TEST_CASE("a corrupted buffer entry makes the outputs diverge and leave the tolerance", "[replay]") {
  ReplayOptions fp32;
  fp32.interval = 8;
  fp32.update_format = Format::FP32;
  fp32.buffer_format = Format::FP32;
  for (Family fam : {Family::Mamba2, Family::GDN})
    for (const ReplayOptions& o : {exact_opts(8, 0), fp32}) {
      SynthSource src(small_layer(fam, 40, 1, 9));
      ReplayDecoder good(o), bad(o);
      ReferenceDecoder ref;
      good.reset(src.model(), 1);
      bad.reset(src.model(), 1);
      ref.reset(src.model(), 1);
      InputChunk c;
      src.read(0, 40, c);
      const int out = src.model().out_elems();
      const size_t per = static_cast<size_t>(out);
      std::vector<double> yg(40 * per), yb(40 * per), yr(40 * per);
      ref.advance(c, 0, 40, yr.data());
      good.advance(c, 0, 12, yg.data());
      bad.advance(c, 0, 12, yb.data());
      REQUIRE(bad.buffered() == 4);
      // One ring entry spoiled: its buffered x (u for GDN), [H, P] or [HV, V], that is out_elems values, each off
      // by 0.5. (A single element off by 0.5 stays inside the fp32 bound for Mamba-2: 8.6e-5 against 3e-4.)
      double* entry = bad.buffer_values(0, 2);
      for (int i = 0; i < out; ++i) entry[i] += 0.5;
      good.advance(c, 12, 28, yg.data() + 12 * per);
      bad.advance(c, 12, 28, yb.data() + 12 * per);
      std::vector<double> a(yg.begin() + 12 * per, yg.end()), b(yb.begin() + 12 * per, yb.end());
      // Judged format (metrics/tolerance.h): the checkpoint's, here also the buffer's.
      const double tol = output_tolerance(o.update_format).rel_max;
      const double e_good = test::worst_step_rel(yg, yr, 0, 40, 1, out);
      const double e_bad = test::worst_step_rel(yb, yr, 12, 40, 1, out);
      INFO(family_name(fam) << " update " << format_name(o.update_format) << ": worst step error good " << e_good
                            << ", corrupted " << e_bad << ", bound " << tol);
      CHECK(max_rel(b, a) > 1e-6);  // the next outputs and, after the flush at step 16, the checkpoint carry it
      CHECK(max_rel(bad.state()[0].to_vector(), good.state()[0].to_vector()) > 1e-9);
      // Judged as a run is: the intact decoder within its scheme's bound, the corrupted one far outside it.
      CHECK(e_good < tol);
      CHECK(e_bad > 10 * tol);
    }
}

namespace {

// Wraps a decoder and overwrites one output element per step with NaN, a different element each step (as a kernel
// with one bad lane would).
class NanPlanting : public Decoder {
 public:
  explicit NanPlanting(Decoder& inner) : inner_(inner) {}
  std::string name() const override { return inner_.name() + "+nan"; }
  void reset(const Model& model, int seqs) override {
    inner_.reset(model, seqs);
    per_ = static_cast<size_t>(seqs) * model.out_elems();
    step_ = 0;
  }
  void advance(const InputChunk& chunk, int s0, int n, double* y) override {
    inner_.advance(chunk, s0, n, y);
    for (int s = 0; s < n; ++s, ++step_) y[s * per_ + static_cast<size_t>(step_ * 37) % per_] = test::kNaN;
  }
  std::vector<StateCopy> state() const override { return inner_.state(); }

 private:
  Decoder& inner_;
  size_t per_ = 0;
  long long step_ = 0;
};

}  // namespace

TEST_CASE("a decoder emitting one NaN per step fails every comparison (the old max_rel passed it)", "[replay][nan]") {
  // max_rel as this file had it before issue 9, kept to document the bug: std::max(num, NaN) returns num, so NaN
  // outputs were dropped and the finite rest judged. A decoder emitting one NaN per step passed all [replay] cases.
  auto old_max_rel = [](const std::vector<double>& a, const std::vector<double>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      num = std::max(num, std::fabs(a[i] - b[i]));
      den = std::max(den, std::fabs(b[i]));
    }
    return num / den;
  };
  // The same bug in a worst-step loop: a NaN step error is dropped by std::max.
  auto old_worst_step = [](const std::vector<double>& y, const std::vector<double>& y_ref, int seqs, int out) {
    const size_t per = static_cast<size_t>(seqs) * out;
    double worst = 0;
    for (size_t s = 0; s * per < y.size(); ++s)
      worst = std::max(worst, test::step_rel_mean(&y[s * per], &y_ref[s * per], seqs, out));
    return worst;
  };
  const double tol64 = output_tolerance(Format::FP64).rel_max, tol32 = output_tolerance(Format::FP32).rel_max;
  for (Family fam : {Family::Mamba2, Family::GDN}) {
    INFO(family_name(fam));
    SynthSource src(small_layer(fam, 100, 2, 3));
    const int out = src.model().out_elems();
    ReferenceDecoder ref;
    EagerDecoder eager64(Format::FP64), eager32(Format::FP32), eager16(Format::BF16);
    const auto yr = run_chunked(ref, src, 100), ye = run_chunked(eager64, src, 100),
               ye32 = run_chunked(eager32, src, 100);
    ReplayDecoder exact(exact_opts(8, 0));
    NanPlanting planted_exact(exact);
    const auto yn = run_chunked(planted_exact, src, 100);
    REQUIRE(std::count_if(yn.begin(), yn.end(), [](double v) { return std::isnan(v); }) == 100);

    // Agreement with the reference, NaN on either side: the old helper passes, the new one fails.
    CHECK(old_max_rel(yn, ye) < tol64);
    CHECK_FALSE(max_rel(yn, ye) < tol64);
    CHECK(old_max_rel(ye, yn) < tol64);
    CHECK_FALSE(max_rel(ye, yn) < tol64);
    // The worst per-step error, the quantity the tolerance table bounds.
    CHECK(old_worst_step(yn, yr, 2, out) < tol64);
    CHECK_FALSE(test::worst_step_rel(yn, yr, 0, 100, 2, out) < tol64);
    CHECK_FALSE(test::rel_rms(yn, yr) < tol64);

    // fp32 replay at interval 1 against fp32 eager: "close, but not a copy" held for the planted decoder.
    ReplayOptions o;
    o.interval = 1;
    o.update_format = Format::FP32;
    o.buffer_format = Format::FP32;
    ReplayDecoder rd32(o);
    NanPlanting planted32(rd32);
    const auto yp = run_chunked(planted32, src, 100);
    const double d_old = old_max_rel(yp, ye32), d_new = max_rel(yp, ye32);
    CHECK((d_old < tol32 && d_old < 2e-5 && d_old > 0));
    CHECK_FALSE(d_new < tol32);
    CHECK_FALSE(d_new > 0);

    // "Diverges": a NaN-emitting bf16 decoder passed a check that it differs, the new helper refuses to judge it.
    NanPlanting planted16(eager16);
    const auto y16 = run_chunked(planted16, src, 100);
    CHECK(old_max_rel(y16, ye) > 1e-6);
    CHECK_FALSE(max_rel(y16, ye) > 1e-6);

    // A state comparison with one NaN in the checkpoint.
    std::vector<double> st = exact.state()[0].to_vector();
    const auto st_ref = reference_state(src, exact.state()[0].step);
    REQUIRE(max_rel(st, st_ref) < tol64);
    st[st.size() / 3] = test::kNaN;
    CHECK(old_max_rel(st, st_ref) < tol64);
    CHECK_FALSE(max_rel(st, st_ref) < tol64);
    // An inf is refused like a NaN, on either side.
    st[st.size() / 3] = std::numeric_limits<double>::infinity();
    CHECK_FALSE(max_rel(st, st_ref) < tol64);
    CHECK_FALSE(max_rel(st_ref, st) < tol64);
    CHECK(std::isnan(test::max_keep_nan(0.5, test::kNaN)));
    CHECK(std::isnan(test::max_keep_nan(test::kNaN, 0.5)));
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
