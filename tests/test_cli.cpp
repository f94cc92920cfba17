// End to end through the command line: synth -> run -> inspect, then the result file opened with the HDF5 API
// and its numbers recomputed independently from the saved raw outputs.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <hdf5_hl.h>

#include "io/h5.h"
#include "io/results.h"
#include "test_util.h"

using namespace rssm;
using Catch::Matchers::Contains;

namespace {
const char* kTinySynth =
    "--set synth.preset=custom --set synth.family=mamba2 --set synth.H=4 --set synth.P=8 --set synth.N=16 "
    "--set synth.G=2 --set synth.steps=40 --set synth.seqs=3 --set synth.seed=5";
}

TEST_CASE("cli: --help, --version and usage errors", "[cli]") {
  test::TempDir d;
  auto r = test::run_cli("--help", d);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Contains("run CONFIG") && Contains("synth") && Contains("inspect"));
  r = test::run_cli("--version", d);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Contains("replayssm"));
  for (const char* sub : {"run", "synth", "inspect", "defaults"}) {
    r = test::run_cli(std::string(sub) + " --help", d);
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Contains("usage: replayssm"));
  }
  r = test::run_cli("frobnicate", d);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Contains("unknown subcommand 'frobnicate'"));
  r = test::run_cli("run", d);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Contains("missing argument config"));
  r = test::run_cli("run x.ini --bogus", d);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Contains("--bogus"));
  r = test::run_cli("synth", d);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Contains("output"));
}

TEST_CASE("cli: synth -> run -> inspect, result structure and values", "[cli]") {
  test::TempDir d;
  const std::string trace = d / "t.h5", result = d.path() + "/out/r.h5";
  auto r = test::run_cli(std::string("synth -o ") + trace + " " + kTinySynth, d);
  REQUIRE(r.code == 0);
  r = test::run_cli("inspect " + trace, d);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("mamba2") && Contains("H=4 P=8 N=16 G=2") && Contains("/inputs/x"));

  test::write_text(d / "exp.ini",
                   "[run]\nsave_outputs = true\nchunk = 7\n[trace]\nfile = " + trace +
                       "\n[scheme]\nstate_format = fp32, bf16, e5m2\n");
  r = test::run_cli("run " + (d / "exp.ini") + " --quiet -o " + result, d);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("eager-fp32") && Contains("eager-bf16") && Contains("skipped"));
  CHECK_THAT(r.err, Contains("skipping run_0002"));
  CHECK(test::count_files_containing(d.path() + "/out", ".tmp") == 0);

  h5::Handle f = h5::open_file(result);
  CHECK(h5::get_attr_string(f, "format", result) == "replayssm-result");
  for (const char* a : {"git_commit", "created", "host", "device", "config", "trace", "replayssm_version"})
    CHECK(h5::has_attr(f, a));
  CHECK_THAT(h5::get_attr_string(f, "config", result), Contains("state_format = fp32, bf16, e5m2"));
  // Summary: one row per sweep point, the skipped one marked with its reason.
  const auto status = h5::read_strings(f, "summary/status", result);
  REQUIRE(status == std::vector<std::string>{"ok", "ok", "skipped"});
  CHECK_THAT(h5::read_strings(f, "summary/skip_reason", result)[2], Contains("e5m2"));
  const auto mean_err = h5::read_doubles(f, "summary/out_rel_err_mean", result);
  CHECK(mean_err[0] < 1e-5);            // fp32 state: fp32 rounding
  CHECK(mean_err[1] > 10 * mean_err[0]);  // bf16 state: far worse
  CHECK(std::isnan(mean_err[2]));
  CHECK_FALSE(h5::exists(f, "runs/run_0002"));

  // Per-step series over a `step` dimension scale.
  const auto steps = h5::read_ints(f, "runs/run_0000/step", result);
  REQUIRE(steps.size() == 40);
  CHECK(steps.back() == 39);
  h5::Handle ds(H5Dopen2(f, "runs/run_0000/out_rel_err_mean", H5P_DEFAULT));
  h5::Handle sc(H5Dopen2(f, "runs/run_0000/step", H5P_DEFAULT));
  CHECK(H5DSis_attached(ds, sc, 0) > 0);
  h5::Handle g(H5Gopen2(f, "runs/run_0001", H5P_DEFAULT));
  CHECK(h5::get_attr_string(g, "decoder_name", result) == "cpu:eager-bf16-rn-out_fp32");
  CHECK(h5::get_attr_string(g, "decoder_label", result) == "eager-bf16");
  CHECK(h5::get_attr_string(g, "decoder", result) == "eager");
  CHECK(h5::read_strings(f, "summary/decoder_name", result).size() == 3);
  CHECK(h5::get_attr_string(g, "state_format", result) == "bf16");
  // Counts are stored as integers, formats as text, in /summary and the run attributes (issue 13): a notebook
  // selects and plots against the interval without casting.
  auto type_class = [](hid_t obj_type) {
    h5::Handle t(obj_type);
    return H5Tget_class(t);
  };
  for (const char* col : {"interval", "buffer_len"}) {
    h5::Handle c(H5Dopen2(f, (std::string("summary/") + col).c_str(), H5P_DEFAULT));
    CHECK(type_class(H5Dget_type(c)) == H5T_INTEGER);
    h5::Handle a(H5Aopen(g, col, H5P_DEFAULT));
    CHECK(type_class(H5Aget_type(a)) == H5T_INTEGER);
  }
  CHECK(h5::read_ints(f, "summary/interval", result) == std::vector<long long>{8, 8, 8});
  CHECK(h5::get_attr_int(g, "interval", result) == 8);
  {
    h5::Handle c(H5Dopen2(f, "summary/state_format", H5P_DEFAULT));
    CHECK(type_class(H5Dget_type(c)) == H5T_STRING);
  }

  // Recompute the stored per-step error of run_0001 from the saved raw outputs.
  const auto yr = h5::read_doubles(f, "reference/bf16/outputs", result);
  const auto y = h5::read_doubles(f, "runs/run_0001/outputs", result);
  const auto stored = h5::read_doubles(f, "runs/run_0001/out_rel_err_mean", result);
  REQUIRE(yr.size() == 40 * 3 * 32);
  REQUIRE(y.size() == yr.size());
  for (int s = 0; s < 40; ++s)
    CHECK(stored[s] == Approx(test::step_rel_mean(&y[s * 3 * 32], &yr[s * 3 * 32], 3, 32)).epsilon(1e-12));

  r = test::run_cli("inspect " + result, d);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("run_0001") && Contains("eager-bf16") && Contains("out_rel_err_mean"));
}

TEST_CASE("results: a summary column mixing text and integer cells (a resumed older file) keeps its values",
          "[results]") {
  test::TempDir d;
  ResultSet rs;
  auto row = [](const std::string& id, AttrValue interval, AttrValue fmt_) {
    RunRecord r;
    r.id = id;
    r.summary = {{"run", id}, {"interval", std::move(interval)}, {"state_format", std::move(fmt_)}};
    return r;
  };
  rs.runs = {row("run_0000", std::string("8"), std::string("fp32")), row("run_0001", 16LL, std::string("bf16"))};
  const std::string path = d / "mixed.h5";
  write_result_file(path, rs);
  {
    h5::Handle f = h5::open_file(path);
    CHECK(h5::read_ints(f, "summary/interval", path) == std::vector<long long>{8, 16});
    CHECK(h5::read_strings(f, "summary/state_format", path) == std::vector<std::string>{"fp32", "bf16"});
  }
  // Text that is not an integer keeps the whole column as text, numbers written out.
  rs.runs = {row("run_0000", std::string("eight"), std::string("fp32")), row("run_0001", 16LL, std::string("bf16"))};
  write_result_file(path, rs);
  h5::Handle f2 = h5::open_file(path);
  CHECK(h5::read_strings(f2, "summary/interval", path) == std::vector<std::string>{"eight", "16"});
}

TEST_CASE("cli: bad runs fail with one line and leave no file", "[cli]") {
  test::TempDir d;
  const std::string result = d / "r.h5";
  auto r = test::run_cli(std::string("run /nonexistent.ini -o ") + result, d);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Contains("/nonexistent.ini"));
  test::write_text(d / "long.ini", "[synth]\nsteps = 16\n[run]\nsteps = 17\n");
  r = test::run_cli("run " + (d / "long.ini") + " --quiet -o " + result, d);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Contains("run.steps") && Contains("has 16"));
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  r = test::run_cli("run " + (d / "long.ini") + " --set trace.file=" + (d / "none.h5") + " -o " + result, d);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Contains("none.h5"));
  CHECK(test::count_files_containing(d.path(), "r.h5") == 0);
}
