// The decoder seam: the typed scheme (decoder/scheme.h), the factory and the backends' combination checks
// (run/factory.h, kernels/cuda_backend.h), the lockstep engine driven directly with a forced pair of twins
// (run/lockstep.h), the backend difference metric and the output format.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include "cpu/eager.h"
#include "cpu/replay.h"
#include "cuda_backend.h"
#include "decoder/scheme.h"
#include "errors.h"
#include "io/h5.h"
#include "metrics/output_error.h"
#include "numeric/bits.h"
#include "run/factory.h"
#include "run/lockstep.h"
#include "run/record.h"
#include "run/summary_table.h"
#include "run/sweep.h"
#include "test_util.h"
#include "trace_fixtures.h"
#include "trace/synth.h"

using namespace rssm;
using Catch::Matchers::Contains;

namespace {

SynthConfig tiny(Family f, long long steps, int seqs) { return test::tiny_layer(f, steps, seqs, 11); }

}  // namespace

TEST_CASE("scheme: parsed once from a point's parameters, with a unique name", "[seam]") {
  const Scheme s = parse_scheme({{"decoder", "dual"},
                                 {"state_format", "fp32"},
                                 {"read_format", "e4m3"},
                                 {"interval", "16"},
                                 {"buffer_len", "24"},
                                 {"dot_arith", "tf32"},
                                 {"rounding", "stochastic"},
                                 {"out_format", "bf16"},
                                 {"backend", "cuda"}});
  CHECK(s.decoder == DecoderKind::Dual);
  CHECK(s.read_format == Format::E4M3);
  CHECK(s.interval == 16);
  CHECK(s.buffer_len == 24);
  CHECK(s.dot_arith == Arith::TF32);
  CHECK(s.flush_arith == Arith::FP32);  // not listed: the default
  CHECK(s.rounding == Rounding::Stochastic);
  CHECK(s.out_format == Format::BF16);
  CHECK(s.backend == Backend::Cuda);
  CHECK(s.name() == "cuda:dual-fp32+e4m3-K16-buf_bf16-dot_tf32-flush_fp32-route_inner-sr-out_bf16-act_bf16");
  CHECK(s.label() == "cuda:dual-fp32+e4m3-K16-dot_tf32-sr");  // non-fp32 arithmetic named: it changes the numbers
  CHECK(s.with_backend(Backend::Cpu).name().rfind("cpu:dual-", 0) == 0);
  // Every parameter that changes outputs changes the name.
  for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{{"decoder", "replay"},
                                                                            {"state_format", "bf16"},
                                                                            {"read_format", "int8"},
                                                                            {"buffer_format", "fp32"},
                                                                            {"act_format", "fp16"},
                                                                            {"out_format", "fp16"},
                                                                            {"dot_arith", "bf16"},
                                                                            {"flush_arith", "3xtf32"},
                                                                            {"rounding", "nearest"},
                                                                            {"interval", "8"},
                                                                            {"route", "reconstruct"},
                                                                            {"backend", "cpu"}}) {
    Scheme t = s;
    check_scheme_value(k, v);
    t = parse_scheme({{"decoder", "dual"}, {"state_format", "fp32"}, {"read_format", "e4m3"}, {"interval", "16"},
                      {"buffer_len", "24"}, {"dot_arith", "tf32"}, {"rounding", "stochastic"}, {"out_format", "bf16"},
                      {"backend", "cuda"}, {k, v}});
    INFO(k << "=" << v);
    CHECK(t.name() != s.name());
  }
  CHECK_THROWS_WITH(parse_scheme({{"backend", "tpu"}}), Contains("scheme.backend") && Contains("tpu"));
  CHECK_THROWS_WITH(parse_scheme({{"out_format", "e4m3"}}), Contains("scheme.out_format"));
  CHECK_THROWS_WITH(parse_scheme({{"interval", "8x"}}), Contains("scheme.interval") && Contains("8x"));
  CHECK_THROWS_WITH(parse_scheme({{"act_format", "fp64"}}), Contains("scheme.act_format"));
}

TEST_CASE("factory: backend limits are skip reasons, cuda never runs on the CPU", "[seam]") {
  for (Family fam : {Family::Mamba2, Family::GDN}) {
    INFO(family_name(fam));
    Scheme s;
    s.decoder = DecoderKind::Replay;
    s.interval = kMaxInterval + 1;
    CHECK_THAT(backend_unavailable_reason(s, fam), Contains("interval") && Contains(std::to_string(kMaxInterval)));
    CHECK_THROWS_AS(make_decoder(s, fam, 1), InternalError);
    s.interval = kMaxInterval;
    CHECK(backend_unavailable_reason(s, fam).empty());
    CHECK(make_decoder(s, fam, 1)->name() == s.decoder_name());

    Scheme c;
    c.backend = Backend::Cuda;
    const std::string why = cuda_unavailable_reason(c, fam);
    CHECK(backend_unavailable_reason(c, fam) == why);
    if (!why.empty()) {
      // Either no CUDA in this build, no device, or no kernel for the scheme: each says so.
      CHECK_THAT(why, Contains("CUDA"));
      CHECK_THROWS_AS(make_decoder(c, fam, 1), InternalError);
    }
  }
}

TEST_CASE("cli: cuda points are skipped with the backend's reason, the cpu points run", "[seam][cli]") {
  Scheme probe;
  probe.backend = Backend::Cuda;
  const std::string why = cuda_unavailable_reason(probe, Family::Mamba2);  // quickstart.ini is a Mamba-2 layer
  if (why.empty()) {
    WARN("a CUDA kernel runs here: the skip path is not exercised");
    return;
  }
  test::TempDir d;
  const std::string out = d / "q.h5";
  const auto r = test::run_cli(std::string("run ") + REPLAYSSM_SOURCE_DIR + "/configs/quickstart.ini -o " + out +
                                   " --set scheme.backend=cpu,cuda --set run.steps=16 --quiet",
                               d);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  // The reason names the scheme when it is "no kernel": match its stable start.
  const std::string stem = why.substr(0, why.find(" for "));
  CHECK_THAT(r.err, Contains("backend=cuda): " + stem));
  CHECK_THAT(r.out, Contains("skipped: " + stem));
  CHECK_THAT(r.out, Contains("eager-fp32") && Contains("dual-fp32+bf16-K8"));
  h5::Handle f = h5::open_file(out, "result");
  const auto backend = h5::read_strings(f, "summary/backend", out);
  const auto status = h5::read_strings(f, "summary/status", out);
  REQUIRE(backend.size() == status.size());
  int ran = 0;
  for (size_t i = 0; i < backend.size(); ++i) {
    if (backend[i] == "cuda") CHECK(status[i] == "skipped");
    if (status[i] == "ok") {
      CHECK(backend[i] == "cpu");
      ++ran;
    }
  }
  CHECK(ran == 5);
}

TEST_CASE("cli: a GDN layer with backend = cpu, cuda runs its cpu points; a cuda point runs or is skipped", "[seam][cli]") {
  // The skip check sees the layer's family: a cuda point of a GDN layer is never handed to another family's kernels
  // (which would refuse it at reset with a config error and stop the run).
  test::TempDir d;
  const std::string out = d / "g.h5";
  const auto r = test::run_cli(std::string("run ") + REPLAYSSM_SOURCE_DIR + "/configs/quickstart.ini -o " + out +
                                   " --set synth.preset=custom --set synth.family=gdn --set synth.HK=1 --set synth.HV=2"
                                   " --set synth.K=16 --set synth.V=8 --set run.steps=12 --set scheme.interval=4"
                                   " --set scheme.route=inner,reconstruct --set scheme.backend=cpu,cuda --quiet",
                               d);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  Scheme probe;
  probe.backend = Backend::Cuda;
  const std::string why = cuda_unavailable_reason(probe, Family::GDN);
  h5::Handle f = h5::open_file(out, "result");
  const auto backend = h5::read_strings(f, "summary/backend", out);
  const auto status = h5::read_strings(f, "summary/status", out);
  const auto reason = h5::read_strings(f, "summary/skip_reason", out);
  REQUIRE(backend.size() == status.size());
  int cpu_ran = 0, cuda_ran = 0;
  for (size_t i = 0; i < backend.size(); ++i) {
    INFO(backend[i] << " " << status[i] << " " << reason[i]);
    if (status[i] != "ok") {
      if (backend[i] == "cuda" && reason[i].find("CUDA") != std::string::npos && !why.empty())
        CHECK_THAT(reason[i], Contains(why.substr(0, why.find(" for "))));
      continue;
    }
    (backend[i] == "cpu" ? cpu_ran : cuda_ran) += 1;
  }
  CHECK(cpu_ran == 8);  // eager fp32/bf16; replay fp32/bf16 and dual fp32+bf16, each on both routes
  CHECK(cuda_ran == (why.empty() ? cpu_ran : 0));
}

TEST_CASE("lockstep: twins are compared step by step next to their error against fp64", "[seam][lockstep]") {
  for (Family fam : {Family::Mamba2, Family::GDN}) {
    SynthSource src(tiny(fam, 40, 2));
    LockstepSettings st;
    st.steps = 40;
    st.seqs = 2;
    st.chunk = 16;
    st.act = Format::BF16;
    st.kl = true;
    st.vocab = 64;
    // Two cpu decoders forced into a pair: the same scheme twice (bitwise equal), and an fp32 replay decoder at
    // interval 1 against fp32 eager (equal up to rounding, not bitwise).
    std::vector<LockstepRun> runs(4);
    runs[0].dec = std::make_unique<EagerDecoder>(Format::FP32, Rounding::Nearest, 1, Format::FP32);
    runs[1].dec = std::make_unique<EagerDecoder>(Format::FP32, Rounding::Nearest, 1, Format::FP32);
    runs[1].twin = 0;
    ReplayOptions o;
    o.interval = 1;
    o.buffer_format = Format::FP32;
    o.out_format = Format::FP32;
    runs[2].dec = std::make_unique<ReplayDecoder>(o);
    runs[2].twin = 0;
    runs[2].observe_every = 1;
    runs[3].dec = std::make_unique<EagerDecoder>(Format::BF16, Rounding::Nearest, 1, Format::BF16);
    runs[3].twin = 0;
    runs[3].out_format = Format::FP32;  // ulps counted in fp32 (the coarser twin is on the bf16 grid, fp32's too)
    for (auto& r : runs) r.dec->reset(src.model(), st.seqs);
    long long work = 0;
    std::vector<double> ref_out;
    REQUIRE(run_lockstep(st, src, runs, nullptr, &ref_out, [&](long long w) { work += w; }));
    CHECK(work == 40 * 4);
    CHECK(ref_out.size() == static_cast<size_t>(40) * 2 * src.model().out_elems());
    for (const auto& r : runs) {
      CHECK(r.err.size() == 40);
      CHECK(r.kl_mean.size() == 40);
    }
    CHECK(runs[0].twin_rel_max.empty());
    REQUIRE(runs[1].twin_rel_max.size() == 40);
    for (int s = 0; s < 40; ++s) {
      CHECK(runs[1].twin_bitwise[s] == 1.0);
      CHECK(runs[1].twin_ulps_max[s] == 0.0);
      CHECK(runs[1].twin_rel_max[s] == 0.0);
    }
    // The twin difference is the difference of the two runs' outputs: it stays within their errors' sum.
    double worst_rel = 0, worst_ulps = 0, bitwise_steps = 0;
    for (int s = 0; s < 40; ++s) {
      worst_rel = test::max_keep_nan(worst_rel, runs[2].twin_rel_max[s]);
      worst_ulps = test::max_keep_nan(worst_ulps, runs[2].twin_ulps_max[s]);
      bitwise_steps += runs[2].twin_bitwise[s];
      CHECK(runs[2].twin_rel_max[s] <= (runs[2].err.rel_max[s] + runs[0].err.rel_max[s]) * 1.01 + 1e-15);
    }
    INFO(family_name(fam) << ": replay K1 vs eager fp32: rel " << worst_rel << ", ulps " << worst_ulps);
    CHECK(worst_rel < 2e-5);
    CHECK(worst_ulps >= 1);
    CHECK(bitwise_steps < 40);
    double bf_rel = 0;
    for (int s = 0; s < 40; ++s) bf_rel = test::max_keep_nan(bf_rel, runs[3].twin_rel_max[s]);
    CHECK(bf_rel > 1e-4);  // a bf16 state is visibly not the fp32 one
    CHECK(bf_rel < 1e-1);
    // State observed at every flush of the interval-1 replay run.
    CHECK(runs[2].obs_step.size() == 40);
  }
}

TEST_CASE("records: host wall time is cpu_emulation_seconds on cpu, host_wall_seconds on cuda; the table shows "
          "cpu us/step for cpu rows only", "[seam]") {
  SynthSource src(tiny(Family::GDN, 8, 1));
  LockstepSettings st;
  st.steps = 8;
  st.seqs = 1;
  st.chunk = 8;
  st.kl = false;
  // One cpu decoder measured twice: stored once as a cpu point and once as its cuda twin (the record only reads the
  // scheme's backend, so no device is needed).
  std::vector<LockstepRun> runs(1);
  runs[0].dec = std::make_unique<EagerDecoder>(Format::FP32, Rounding::Nearest, 1, Format::FP32);
  runs[0].dec->reset(src.model(), 1);
  REQUIRE(run_lockstep(st, src, runs));
  REQUIRE(runs[0].seconds > 0);
  RecordContext ctx;
  ctx.model = src.model();
  ctx.steps = 8;
  ctx.seqs = 1;
  ctx.kl = false;
  std::vector<RunRecord> recs;
  for (const char* backend : {"cpu", "cuda"}) {
    RunSpec spec;
    spec.index = static_cast<int>(recs.size());
    spec.id = fmt::format("run_{:04d}", spec.index);
    spec.params = {{"decoder", "eager"}, {"backend", backend}};
    spec.scheme = parse_scheme(spec.params);
    recs.push_back(make_run_record(ctx, spec, runs[0], ""));
  }
  auto has = [](const AttrMap& m, const std::string& key) {
    for (const auto& kv : m)
      if (kv.first == key) return true;
    return false;
  };
  for (const AttrMap* m : {&recs[0].attrs, &recs[0].summary}) {
    CHECK(has(*m, "cpu_emulation_seconds"));
    CHECK_FALSE(has(*m, "host_wall_seconds"));
  }
  for (const AttrMap* m : {&recs[1].attrs, &recs[1].summary}) {
    CHECK(has(*m, "host_wall_seconds"));
    CHECK_FALSE(has(*m, "cpu_emulation_seconds"));
  }
  // A cuda row from a file written before the rename: its time is still not shown.
  RunRecord old = recs[1];
  old.id = "run_0002";
  for (auto& kv : old.summary) {
    if (kv.first == "host_wall_seconds") kv.first = "cpu_emulation_seconds";
    if (kv.first == "run") kv.second = std::string("run_0002");
  }
  recs.push_back(old);
  std::ostringstream table;
  print_table(table, recs, false);
  INFO(table.str());
  std::istringstream lines(table.str());
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("run_", 0) != 0) continue;
    ++rows;
    const std::string last = line.substr(line.find_last_not_of(' ') == std::string::npos ? 0 : line.rfind(' ') + 1);
    if (line.find(" cuda ") != std::string::npos) {
      CHECK(last == "-");
    } else {
      CHECK(last != "-");
      CHECK(std::isfinite(std::stod(last)));
    }
  }
  CHECK(rows == 3);
}

TEST_CASE("backend twins: a cuda point pairs with the cpu point of the same scheme", "[seam]") {
  Scheme a;
  Scheme b = a;
  b.state_format = Format::BF16;
  Scheme c = a;
  c.out_format = Format::BF16;  // differs in more than the backend: no twin
  std::vector<Scheme> v = {a, a.with_backend(Backend::Cuda), b, c.with_backend(Backend::Cuda),
                           b.with_backend(Backend::Cuda)};
  CHECK(backend_twins(v) == std::vector<int>{-1, 0, -1, -1, 2});
  CHECK(twin_key(a) == twin_key(a.with_backend(Backend::Cuda)));
  CHECK(twin_key(a) != twin_key(c));
}

TEST_CASE("lockstep: a bad twin index is an internal error", "[seam][lockstep]") {
  SynthSource src(tiny(Family::Mamba2, 4, 1));
  LockstepSettings st;
  st.steps = 4;
  st.seqs = 1;
  std::vector<LockstepRun> runs(1);
  runs[0].dec = std::make_unique<EagerDecoder>(Format::FP32);
  runs[0].dec->reset(src.model(), 1);
  runs[0].twin = 0;
  CHECK_THROWS_AS(run_lockstep(st, src, runs), InternalError);
}

TEST_CASE("ulp distance in an output format", "[seam]") {
  CHECK(ulp_distance(Format::FP32, 1.0, 1.0) == 0);
  CHECK(ulp_distance(Format::FP32, 1.0, std::nextafter(1.0f, 2.0f)) == 1);
  CHECK(ulp_distance(Format::FP32, -0.0, 0.0) == 0);
  CHECK(ulp_distance(Format::FP32, -std::nextafter(0.0f, 1.0f), std::nextafter(0.0f, 1.0f)) == 2);
  CHECK(ulp_distance(Format::BF16, 1.0, 1.0078125) == 1);  // 1 + 2^-7
  CHECK(ulp_distance(Format::BF16, -1.0, -1.0078125) == 1);
  CHECK(ulp_distance(Format::FP16, 1.0, 1.0 + std::ldexp(1.0, -10) * 3) == 3);
  CHECK(ulp_distance(Format::FP64, 1.0, std::nextafter(1.0, 2.0)) == 1);
  CHECK(std::isnan(ulp_distance(Format::BF16, 1.0, 1.0 + std::ldexp(1.0, -12))));  // not on the grid
  CHECK(std::isnan(ulp_distance(Format::FP32, 1.0, std::nan(""))));
  const double a[2] = {1.0, 2.0}, b[2] = {1.0, std::nan("")};
  const BackendDiff d = backend_diff(a, b, 1, 2, Format::FP32);
  CHECK(!d.bitwise);
  CHECK(std::isnan(d.ulps_max));
}

TEST_CASE("out_format: every CPU decoder rounds its outputs to it", "[seam]") {
  for (Family fam : {Family::Mamba2, Family::GDN})
    for (Format of : {Format::BF16, Format::FP16}) {
      SynthSource src(tiny(fam, 12, 2));
      InputChunk c;
      src.read(0, 12, c);
      for (auto& d : c.data) round_nearest_inplace(Format::BF16, d.data(), d.size());
      Scheme e;
      e.out_format = of;
      Scheme r = e;
      r.decoder = DecoderKind::Replay;
      r.interval = 4;
      Scheme dl = r;
      dl.decoder = DecoderKind::Dual;
      for (const Scheme& s : {e, r, dl}) {
        auto dec = make_decoder(s, fam, 1);
        auto wide = make_decoder([&] {
          Scheme w = s;
          w.out_format = Format::FP64;
          return w;
        }(), fam, 1);
        dec->reset(src.model(), 2);
        wide->reset(src.model(), 2);
        const size_t n = static_cast<size_t>(12) * 2 * src.model().out_elems();
        std::vector<double> y(n), yw(n);
        dec->advance(c, 0, 12, y.data());
        wide->advance(c, 0, 12, yw.data());
        INFO(s.name());
        CHECK_THAT(dec->name(), Contains("out_" + format_name(of)));
        size_t off_grid = 0, mismatched = 0;
        for (size_t i = 0; i < n; ++i) {
          off_grid += round_nearest_double(of, y[i]) != y[i];
          mismatched += round_nearest_double(of, yw[i]) != y[i];  // nearest-even of what the decoder computed
        }
        CHECK(off_grid == 0);
        CHECK(mismatched == 0);
      }
    }
}
