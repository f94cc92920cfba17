// Speculative decoding on the CPU (decoder/spec.h, cpu/replay.h with window > 0): the acceptance models, verify
// windows against standard replay and the fp64 reference, per-row early flushes and rollback, the eager baseline,
// and the [spec] config keys. A corrupted committed ring entry must break the match (the checks have teeth).
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>

#include "cpu/eager.h"
#include "cpu/reference.h"
#include "cpu/replay.h"
#include "errors.h"
#include "metrics/tolerance.h"
#include "metrics/traffic.h"
#include "run/factory.h"
#include "run/sweep.h"
#include "test_util.h"
#include "trace/synth.h"
#include "trace/trace_h5.h"
#include "trace_fixtures.h"

using namespace rssm;
using test::run_chunked;
using test::small_layer;
using Catch::Matchers::Contains;

namespace {

ReplayOptions fp32_opts(int interval, int window, const std::string& acceptance) {
  ReplayOptions o;
  o.interval = interval;
  o.window = window;
  o.acceptance = parse_acceptance(acceptance);
  o.seed = 11;
  o.out_format = Format::FP32;
  // The synthetic inputs here are not rounded to an activation format, so a bf16 buffer would round them a second
  // time (a bf16 error, judged by bf16's bound): an fp32 buffer keeps these schemes judged by fp32's.
  o.buffer_format = Format::FP32;
  return o;
}

ReplayOptions exact(ReplayOptions o) {
  o.update_format = o.buffer_format = Format::FP64;
  o.dot_arith = o.flush_arith = Arith::FP64;
  o.out_format = Format::FP64;
  return o;
}

// Per-step relative error (max norm over the step's outputs of all rows) of y against the reference.
std::vector<double> step_errors(const std::vector<double>& y, const std::vector<double>& ref, size_t per) {
  std::vector<double> e(y.size() / per);
  for (size_t s = 0; s < e.size(); ++s) e[s] = test::max_rel(y.data() + s * per, ref.data() + s * per, per);
  return e;
}

double mean_of(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m += x / static_cast<double>(v.size());
  return m;
}

double max_of(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = test::max_keep_nan(m, x);
  return m;
}

}  // namespace

TEST_CASE("acceptance models parse, draw reproducibly and reject bad text", "[spec]") {
  CHECK(parse_acceptance("all").kind == Acceptance::Kind::All);
  CHECK(parse_acceptance("fixed:3").fixed == 3);
  CHECK(parse_acceptance("prob:0.25").p == 0.25);
  CHECK(parse_acceptance("trace").kind == Acceptance::Kind::Trace);
  for (const char* bad : {"", "some", "fixed:0", "fixed:x", "prob:1.5", "prob:-0.1", "prob:", "prob:0.5x"})
    CHECK_THROWS_AS(parse_acceptance(bad), ConfigError);
  CHECK(parse_acceptance("prob:0.7").text() == "prob:0.7");
  CHECK(mean_committed(parse_acceptance("prob:0.5"), 3) == 1.75);
  CHECK(mean_committed(parse_acceptance("all"), 4) == 4);

  const AcceptanceDraw d(parse_acceptance("prob:0.7"), 4, 5);
  const AcceptanceDraw same(parse_acceptance("prob:0.7"), 4, 5), other(parse_acceptance("prob:0.7"), 4, 6);
  double sum = 0;
  int differ = 0;
  const int windows = 20000;
  for (int w = 0; w < windows; ++w) {
    const int t = d.tokens(w % 3, w / 3);
    REQUIRE(t >= 1);
    REQUIRE(t <= 4);
    REQUIRE(t == same.tokens(w % 3, w / 3));
    differ += t != other.tokens(w % 3, w / 3);
    sum += t;
  }
  CHECK(differ > windows / 4);  // the seed matters
  // Mean 1 + p + p² + p³ = 2.533; the standard error over 20000 windows is about 0.008.
  CHECK(std::fabs(sum / windows - mean_committed(parse_acceptance("prob:0.7"), 4)) < 0.04);

  const AcceptanceDraw tr(parse_acceptance("trace"), 4, 0, {{2, 4, 1}});
  CHECK(tr.tokens(0, 1) == 4);
  CHECK_THROWS_WITH(tr.tokens(0, 3), Contains("/spec/accepted"));
  CHECK_THROWS_WITH(tr.tokens(1, 0), Contains("/spec/accepted"));
}

TEST_CASE("[spec] keys: parsed into the scheme, named in errors, bad combinations skipped", "[spec]") {
  Scheme s = parse_scheme({{"decoder", "replay"}, {"interval", "8"}, {"window", "4"}, {"acceptance", "fixed:3"}});
  CHECK(s.speculative());
  CHECK(s.spec_hist() == 12);
  CHECK_THAT(s.name(), Contains("spec_T4_L12_fixed:3"));
  CHECK_THAT(s.label(), Contains("-T4"));
  CHECK_THROWS_WITH(parse_scheme({{"window", "-1"}}), Contains("config key 'spec.window'"));
  CHECK_THROWS_WITH(parse_scheme({{"acceptance", "maybe"}}), Contains("config key 'spec.acceptance'"));
  CHECK_THROWS_WITH(parse_scheme({{"window", "65"}}), Contains("spec.window"));

  Config cfg;
  cfg.set("scheme.decoder=eager, replay");
  cfg.set("scheme.buffer_len=0, 10");
  cfg.set("spec.window=0, 4");
  cfg.set("spec.acceptance=prob:0.7, fixed:5");
  const auto runs = expand_sweep(cfg, Family::Mamba2);
  int ran = 0;
  bool fixed_too_many = false, ring_too_small = false, acceptance_unused = false;
  for (const auto& r : runs) {
    ran += r.skip_reason.empty();
    fixed_too_many = fixed_too_many || r.skip_reason.find("commits more tokens") != std::string::npos;
    ring_too_small = ring_too_small || r.skip_reason.find("cannot hold an interval") != std::string::npos;
    acceptance_unused = acceptance_unused || r.skip_reason.find("spec.acceptance does not apply") != std::string::npos;
  }
  CHECK(fixed_too_many);
  CHECK(ring_too_small);
  CHECK(acceptance_unused);
  CHECK(ran > 0);
}

TEST_CASE("speculative replay with every draft accepted and aligned flushes equals standard replay bit for bit",
          "[spec]") {
  // interval 8, window 4, L_hist 12: windows of 4 land the fill on 4 then 8 (the interval): the flushes coincide.
  for (Family fam : {Family::Mamba2, Family::GDN}) {
    SynthSource src(small_layer(fam, 70, 2, 3));
    ReplayOptions std_opt = fp32_opts(8, 0, "all");
    ReplayDecoder standard(std_opt), spec(fp32_opts(8, 4, "all"));
    const auto a = run_chunked(standard, src, 70), b = run_chunked(spec, src, 70);
    CHECK(a == b);
    CHECK(spec.flushes(0) == standard.flushes(0));
  }
}

TEST_CASE("speculative verify outputs equal standard replay of the same tokens within the fp32 budget, at every fill "
          "level up to the early-flush edge",
          "[spec]") {
  const long long steps = 300;
  for (Family fam : {Family::Mamba2, Family::GDN})
    for (GdnRoute route : {GdnRoute::Inner, GdnRoute::Reconstruct}) {
      if (fam == Family::Mamba2 && route == GdnRoute::Reconstruct) continue;
      for (int T : {1, 2, 4, 6}) {
        CAPTURE(family_name(fam), gdn_route_name(route), T);
        SynthSource src(small_layer(fam, steps, 3, 7));
        const size_t per = static_cast<size_t>(src.seqs()) * src.model().out_elems();
        ReplayOptions so = fp32_opts(8, T, "prob:0.7");
        so.route = route;
        ReplayOptions st = fp32_opts(8, 0, "all");
        st.route = route;
        ReplayDecoder spec(so), standard(st);
        ReferenceDecoder ref;
        const auto ys = run_chunked(spec, src, steps), yt = run_chunked(standard, src, steps),
                   yr = run_chunked(ref, src, steps);
        const Tolerance tol = output_tolerance(Format::FP32);
        const auto vs_std = step_errors(ys, yt, per), vs_ref = step_errors(ys, yr, per);
        CHECK(mean_of(vs_std) < tol.rel_mean);
        CHECK(max_of(vs_std) < tol.rel_max);
        CHECK(mean_of(vs_ref) < tol.rel_mean);
        CHECK(max_of(vs_ref) < tol.rel_max);
        if (T > 1) CHECK(spec.flushes(0) != standard.flushes(0));  // the schedules really differ
      }
    }
}

TEST_CASE("fp64 speculative replay and the eager baseline equal the fp64 reference to 1e-12", "[spec]") {
  for (Family fam : {Family::Mamba2, Family::GDN}) {
    SynthSource src(small_layer(fam, 120, 3, 5));
    ReferenceDecoder ref;
    const auto yr = run_chunked(ref, src, 120);
    for (int T : {2, 4, 8}) {
      ReplayDecoder spec(exact(fp32_opts(4, T, "prob:0.6")));
      CHECK(test::max_rel(run_chunked(spec, src, 120), yr) < 1e-12);
      Scheme e;
      e.state_format = Format::FP64;
      e.out_format = Format::FP64;
      e.window = T;
      auto eager = make_decoder(e, fam, 1);
      CHECK(test::max_rel(run_chunked(*eager, src, 120), yr) < 1e-12);
    }
  }
}

TEST_CASE("the eager speculative baseline's accepted outputs are eager decoding's, bit for bit", "[spec]") {
  for (Family fam : {Family::Mamba2, Family::GDN}) {
    SynthSource src(small_layer(fam, 60, 2, 9));
    Scheme e;
    e.state_format = Format::BF16;
    auto plain = make_decoder(e, fam, 1);
    e.window = 4;
    auto spec = make_decoder(e, fam, 1);
    CHECK(run_chunked(*plain, src, 60) == run_chunked(*spec, src, 60));
    CHECK(plain->name() != spec->name());
  }
}

TEST_CASE("rows flush at their own fill levels, early when the next window might not fit", "[spec]") {
  // fixed:3 with interval 8, window 4, L_hist 12: fills 3, 6; 6 + 8 > 12, so every row flushes early at 6 tokens.
  SynthSource src(small_layer(Family::Mamba2, 60, 2, 3));
  ReplayDecoder fixed3(fp32_opts(8, 4, "fixed:3"));
  run_chunked(fixed3, src, 60);
  CHECK(fixed3.flushes(0) == 10);
  // The same with a larger ring (L_hist 20): 6 + 8 <= 20, 9 >= 8: flushes at 9 tokens.
  ReplayOptions wide = fp32_opts(8, 4, "fixed:3");
  wide.buffer_len = 20;
  ReplayDecoder wide3(wide);
  run_chunked(wide3, src, 60);
  CHECK(wide3.flushes(0) == 6);
  // Random acceptance: rows end up at different fill levels and flush counts.
  SynthSource many(small_layer(Family::GDN, 200, 6, 3));
  ReplayDecoder rnd(fp32_opts(16, 4, "prob:0.5"));
  run_chunked(rnd, many, 157);
  std::vector<int> fills;
  for (int q = 0; q < 6; ++q) fills.push_back(rnd.buffered(q));
  std::sort(fills.begin(), fills.end());
  CHECK(std::unique(fills.begin(), fills.end()) - fills.begin() > 1);
  CHECK(fills.back() <= rnd.hist());
}

TEST_CASE("spec_schedule: the flush share and folded fill of the flush rule, exact on periodic schedules and equal to "
          "what the CPU decoder does under random acceptance",
          "[spec]") {
  const auto sched = [](const char* acc, int T, int K, int hist) { return spec_schedule(parse_acceptance(acc), T, K, hist); };
  // Every draft accepted, T 4, interval 16: fills 4, 8, 12, 16 (12 + 8 <= 20 fits, 16 reaches the interval).
  SpecSchedule s = sched("all", 4, 16, 20);
  CHECK(s.mean_committed == 4.0);
  CHECK(s.flush_share == Approx(0.25).margin(1e-3));
  CHECK(s.mean_folded == Approx(16).margin(1e-2));
  CHECK(s.mean_fill == Approx(10).margin(1e-2));
  // One token a window: L_hist 20 flushes early at 13 (13 + 8 > 20); a 32-entry ring waits for the interval.
  s = sched("prob:0", 4, 16, 20);
  CHECK(s.flush_share == Approx(1.0 / 13).margin(1e-3));
  CHECK(s.mean_folded == Approx(13).margin(1e-2));
  s = sched("prob:0", 4, 16, 32);
  CHECK(s.flush_share == Approx(1.0 / 16).margin(1e-3));
  CHECK(s.mean_folded == Approx(16).margin(1e-2));
  // fixed:3: 3 .. 15 then early (15 + 8 > 20): 1 in 5; in 32 entries 3 .. 18 (18 >= 16): 1 in 6.
  CHECK(sched("fixed:3", 4, 16, 20).flush_share == Approx(0.2).margin(1e-3));
  CHECK(sched("fixed:3", 4, 16, 20).mean_fill == Approx(9).margin(1e-2));
  CHECK(sched("fixed:3", 4, 16, 32).mean_folded == Approx(18).margin(1e-2));
  // A cycle longer than a power iteration's steps could average exactly: one token a window, fills 1 .. 4000, the
  // last reaching the interval (4000 + 4 <= 4004 fits); at L_hist 4002 the early flush comes at 3999 instead.
  CHECK(sched("prob:0", 2, 4000, 4002).flush_share == Approx(1.0 / 3999).epsilon(1e-12));
  s = sched("prob:0", 2, 4000, 4004);
  CHECK(s.flush_share == Approx(1.0 / 4000).epsilon(1e-12));
  CHECK(s.mean_fill == Approx(4001 / 2.0).epsilon(1e-12));

  // Random acceptance: the CPU decoder's own draws (AcceptanceDraw) give the flush count the schedule predicts, per
  // committed token (flush_share / mean_committed), for L_hist 20 and a 32-entry ring; the two differ by 18%, so the
  // check tells one rule from the other.
  const int rows = 16, steps = 1500, T = 4, K = 16;
  SynthSource src(small_layer(Family::GDN, steps, rows, 7));
  double measured[2] = {0, 0}, predicted[2] = {0, 0};
  const int hists[2] = {20, 32};
  for (int v = 0; v < 2; ++v) {
    ReplayOptions o = fp32_opts(K, T, "prob:0.7");
    o.buffer_len = hists[v];
    ReplayDecoder d(o);
    run_chunked(d, src, steps);
    long long flushes = 0;
    for (int q = 0; q < rows; ++q) flushes += d.flushes(q);
    measured[v] = static_cast<double>(flushes) / (static_cast<double>(rows) * steps);
    const SpecSchedule p = sched("prob:0.7", T, K, hists[v]);
    predicted[v] = p.flush_share / p.mean_committed;
  }
  CHECK(predicted[0] == Approx(0.0711).margin(5e-4));  // 0.180 of the windows flush, 2.533 tokens a window
  CHECK(predicted[1] == Approx(0.0586).margin(5e-4));  // 0.148 of the windows
  // About 1700 and 1400 flushes, each within 0.5% of the prediction at this seed; 5% leaves room for another draw.
  CHECK(measured[0] == Approx(predicted[0]).epsilon(0.05));
  CHECK(measured[1] == Approx(predicted[1]).epsilon(0.05));
  CHECK_FALSE(measured[0] == Approx(predicted[1]).epsilon(0.05));
  CHECK_FALSE(measured[1] == Approx(predicted[0]).epsilon(0.05));

  // The largest fill the chain reaches is spec_max_committed, what the verify kernels size their committed entries
  // by: two derivations of one number, at tight and roomy rings, an interval of 1, and a ring under 2T.
  for (const auto& [w, k, hist] : std::vector<std::array<int, 3>>{
           {4, 16, 20}, {4, 16, 32}, {2, 16, 18}, {8, 16, 24}, {8, 16, 32}, {3, 5, 40}, {4, 1, 5}, {6, 4, 10}}) {
    CAPTURE(w, k, hist);
    CHECK(sched("prob:0.5", w, k, hist).max_fill == spec_max_committed(w, k, hist));
  }
  CHECK(spec_max_committed(4, 16, 20) == 16);
  CHECK(spec_max_committed(4, 16, 32) == 19);

  CHECK_THROWS_WITH(sched("trace", 4, 16, 20), Contains("no model"));
  CHECK_THROWS_WITH(sched("all", 4, 16, 19), Contains("hist >= interval + window"));
}

TEST_CASE("a 2000-step speculative run stays within the fp32 budget, and every committed checkpoint matches the fp64 "
          "state at the same folded-token count",
          "[spec]") {
  for (Family fam : {Family::Mamba2, Family::GDN}) {
    CAPTURE(family_name(fam));
    const long long steps = 2000;
    SynthSource src(small_layer(fam, steps, 3, 21));
    const Model& m = src.model();
    const int seqs = src.seqs();
    const size_t per = static_cast<size_t>(seqs) * m.out_elems(), se = static_cast<size_t>(m.state_elems());
    ReplayDecoder spec(fp32_opts(16, 4, "prob:0.7"));
    ReferenceDecoder ref;
    spec.reset(m, seqs);
    ref.reset(m, seqs);
    std::vector<double> y(per), yr(per);
    std::vector<double> errs;
    InputChunk c;
    long long compared = 0;
    double worst_state = 0;
    for (long long s = 0; s < steps; ++s) {
      src.read(s, 1, c);
      spec.advance(c, 0, 1, y.data());
      ref.advance(c, 0, 1, yr.data());
      errs.push_back(test::max_rel(y, yr));
      for (const auto& copy : spec.state()) {
        REQUIRE(copy.row_step.size() == static_cast<size_t>(seqs));
        for (int q = 0; q < seqs; ++q)
          if (copy.row_step[q] == s + 1) {  // row q flushed at this step: its checkpoint holds s + 1 tokens
            worst_state = test::max_keep_nan(
                worst_state, test::rel_rms(copy.data + q * se, ref.raw_state().data() + q * se, se));
            ++compared;
          }
      }
    }
    const Tolerance tol = output_tolerance(Format::FP32);
    CHECK(mean_of(errs) < tol.rel_mean);
    CHECK(max_of(errs) < tol.rel_max);
    CHECK(compared > 3 * 2000 / 16);  // every row flushed at least every interval
    // fp32 checkpoint against fp64 after up to 2000 folded tokens: rounding level (measured ~1e-6).
    CHECK(worst_state < 1e-4);
  }
}

TEST_CASE("speculative replay: a corrupted committed ring entry breaks the match, rejected entries are never read",
          "[spec]") {
  for (Family fam : {Family::Mamba2, Family::GDN}) {
    SynthSource src(small_layer(fam, 40, 2, 3));
    const size_t per = static_cast<size_t>(src.seqs()) * src.model().out_elems();
    ReplayDecoder a(fp32_opts(16, 4, "prob:0.6")), b(fp32_opts(16, 4, "prob:0.6"));
    a.reset(src.model(), src.seqs());
    b.reset(src.model(), src.seqs());
    InputChunk c;
    src.read(0, 40, c);
    std::vector<double> ya(10 * per), yb(10 * per);
    a.advance(c, 0, 10, ya.data());
    b.advance(c, 0, 10, yb.data());
    REQUIRE(ya == yb);
    // Rejected drafts' entries past the fill hold NaN; outputs stay finite, so nothing read them.
    for (double v : ya) REQUIRE(std::isfinite(v));
    REQUIRE(b.buffered(0) > 0);
    b.buffer_values(0, b.buffered(0) - 1)[0] += 1.0;  // the last committed entry of row 0
    a.advance(c, 10, 1, ya.data());
    b.advance(c, 10, 1, yb.data());
    CHECK(test::max_rel(yb.data(), ya.data(), per) > 1e-6);
  }
}

TEST_CASE("speculative traffic: per committed token, replay verify beats the eager baseline", "[spec]") {
  const Model m = model_preset("nemotron3-super-120b");
  Scheme e;
  e.window = 4;
  e.acceptance = parse_acceptance("prob:0.7");
  const TrafficParams pe = traffic_params(e, 256);
  CHECK(pe.scheme == "spec-eager");
  CHECK(pe.acceptance.text() == "prob:0.7");
  Scheme r = e;
  r.decoder = DecoderKind::Replay;
  r.interval = 16;
  const Traffic te = traffic(m, pe), tr = traffic(m, traffic_params(r, 256));
  CHECK(te.tokens_per_step == Approx(mean_committed(e.acceptance, 4)));
  CHECK(tr.tokens_per_step == te.tokens_per_step);
  // The windows between flushes are the flush schedule's (1 / 0.180 at L_hist 20), and the amortised verify is the
  // schedule's mix of the two kinds.
  const SpecSchedule sc = spec_schedule(r.acceptance, 4, 16, 20);
  CHECK(tr.steps_per_flush == Approx(1 / sc.flush_share));
  CHECK(tr.batch_amortised == Approx((1 - sc.flush_share) * tr.batch_nonflush + sc.flush_share * tr.batch_flush));
  // Trace acceptance is modelled as every draft accepted.
  Scheme t = r;
  t.acceptance = parse_acceptance("trace");
  CHECK(traffic(m, traffic_params(t, 256)).tokens_per_step == 4);
  // Modelled: 3.9x fewer bytes per verify at this geometry (the published kernels measure 4.2x).
  CHECK(tr.batch_amortised < te.batch_amortised / 3.5);
  Scheme d = r;
  d.decoder = DecoderKind::Dual;
  d.read_format = Format::BF16;
  const Traffic td = traffic(m, traffic_params(d, 256));
  CHECK(td.batch_nonflush < tr.batch_nonflush);  // windows read the bf16 copy
  CHECK(td.batch_flush > tr.batch_flush);        // the flush also writes it
}

TEST_CASE("acceptance = trace: /spec/accepted is read, checked and replayed", "[spec]") {
  test::TempDir dir;
  const std::string p = dir.path() + "/spec.h5";
  test::write_tiny_trace(p);  // 37 steps, 3 sequences
  {
    test::Edit e(p);
    REQUIRE(H5Gcreate2(e.f, "spec", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) >= 0);
    e.replace("spec/accepted", H5T_NATIVE_INT, {3, 40});
    for (hsize_t q = 0; q < 3; ++q)
      for (hsize_t w = 0; w < 40; ++w) {
        const int v = static_cast<int>(1 + (q + w) % 3);
        e.poke("spec/accepted", {q, w}, H5T_NATIVE_INT, &v);
      }
  }
  H5TraceSource src(p);
  REQUIRE(src.model().spec_accepted.size() == 3);
  CHECK(src.model().spec_accepted[1][0] == 2);
  ReplayOptions o = fp32_opts(4, 3, "trace");
  ReplayDecoder traced(o), fixed(fp32_opts(4, 3, "fixed:2"));
  const auto y = run_chunked(traced, src, 37);
  for (double v : y) REQUIRE(std::isfinite(v));
  // Windows of 1, 2, 3 tokens in turn flush at other steps than windows of 2.
  run_chunked(fixed, src, 37);
  CHECK(traced.flushes(0) != fixed.flushes(0));
  {
    test::Edit e(p);
    const int bad = 0;
    e.poke("spec/accepted", {2, 5}, H5T_NATIVE_INT, &bad);
  }
  CHECK_THROWS_WITH(H5TraceSource(p), Contains("/spec/accepted") && Contains("at least one token"));
  {
    test::Edit e(p);
    e.replace("spec/accepted", H5T_NATIVE_INT, {2, 4});
  }
  CHECK_THROWS_WITH(H5TraceSource(p), Contains("/spec/accepted") && Contains("shape"));
}
