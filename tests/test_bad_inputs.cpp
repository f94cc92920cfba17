// The malformed-input corpus, run through the real command line: every case of tests/bad_inputs/cases.txt must
// exit with its stated code, print exactly one line on stderr naming the culprit (key, file or dataset), and
// leave nothing behind in the folder it ran in (no result file, no temporary file).
// Bad configs and other small files are committed under tests/bad_inputs/; bad traces (binary HDF5) are made here
// from a valid tiny trace, one corruption each, so the repository holds no binary fixtures that could go stale.
// Run: replayssm_tests "[bad-inputs]"; one case by hand: see the command printed with a failure.
#include <hdf5.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "io/h5.h"
#include "test_util.h"
#include "trace/synth.h"
#include "trace/trace_h5.h"
#include "trace_fixtures.h"

using namespace rssm;
using test::Edit;
namespace fs = std::filesystem;

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

const std::string kInputs = std::string(REPLAYSSM_SOURCE_DIR) + "/tests/bad_inputs";

struct Case {
  int line = 0;
  int exit_code = 0;
  std::vector<std::string> culprits;  // every one must appear in the stderr line
  std::string args;                   // with $IN, $T, $OUT still in place
};

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  size_t from = 0;
  while (true) {
    const auto at = s.find(sep, from);
    out.push_back(trim(s.substr(from, at == std::string::npos ? std::string::npos : at - from)));
    if (at == std::string::npos) return out;
    from = at + sep.size();
  }
}

std::vector<Case> load_cases(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in);
  std::vector<Case> cases;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (trim(line).empty() || trim(line)[0] == '#') continue;
    const auto f = split(line + " ", " | ");  // the space lets an empty argument list end the line
    INFO(path << ":" << n << ": " << line);
    REQUIRE(f.size() == 3);
    Case c;
    c.line = n;
    c.exit_code = std::stoi(f[0]);
    c.culprits = split(f[1], " && ");
    c.args = f[2];
    cases.push_back(c);
  }
  return cases;
}

std::string substitute(std::string s, const std::map<std::string, std::string>& vars) {
  for (const auto& [k, v] : vars)
    for (size_t at = s.find(k); at != std::string::npos; at = s.find(k, at + v.size())) s.replace(at, k.size(), v);
  return s;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::set<std::string> listing(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::recursive_directory_iterator(dir)) names.insert(fs::relative(e.path(), dir).string());
  return names;
}

// ---------------------------------------------------------------------------------------------------------------
// Bad traces: the valid tiny Mamba-2 trace of trace_fixtures.h (with z, D per dim and a readout), then one
// corruption each.

// name -> how to spoil a copy of the good trace (fp32 inputs unless the name says bf16).
const std::vector<std::pair<std::string, std::function<void(const std::string&)>>>& corruptions() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  static const std::vector<std::pair<std::string, std::function<void(const std::string&)>>> all = {
      {"missing_input.h5", [](const std::string& p) { Edit(p).drop("/inputs/B"); }},
      {"missing_inputs_group.h5", [](const std::string& p) { Edit(p).drop("/inputs"); }},
      {"missing_params_group.h5", [](const std::string& p) { Edit(p).drop("/params"); }},
      {"missing_param.h5", [](const std::string& p) { Edit(p).drop("/params/dt_bias"); }},
      {"wrong_shape.h5", [](const std::string& p) { Edit(p).replace("/inputs/x", H5T_IEEE_F32LE, {37, 3, 4, 9}); }},
      {"wrong_rank.h5", [](const std::string& p) { Edit(p).replace("/inputs/dt", H5T_IEEE_F32LE, {37, 12}); }},
      {"int_dtype.h5", [](const std::string& p) { Edit(p).replace("/inputs/dt", H5T_STD_I32LE, {37, 3, 4}); }},
      {"float64_input.h5",
       [](const std::string& p) { Edit(p).replace("/inputs/C", H5T_IEEE_F64LE, {37, 3, 2, 16}); }},
      {"uint16_no_encoding.h5",
       [](const std::string& p) { Edit(p).replace("/inputs/z", H5T_STD_U16LE, {37, 3, 4, 8}); }},
      {"bf16_bad_encoding.h5",
       [](const std::string& p) {
         Edit e(p);
         h5::Handle ds(H5Dopen2(e.f, "/inputs/B", H5P_DEFAULT));
         h5::set_attr(ds, "encoding", std::string("float16"));
       }},
      {"string_param.h5",
       [](const std::string& p) {
         Edit e(p);
         e.drop("/params/A_log");
         h5::Handle g(H5Gopen2(e.f, "/params", H5P_DEFAULT));
         h5::write_strings(g, "A_log", {"a", "b", "c", "d"});
       }},
      {"param_shape.h5", [](const std::string& p) { Edit(p).replace("/params/D", H5T_IEEE_F64LE, {4}); }},
      // Step 21 lies inside the file's third chunk and the run's third chunk: the run has started when it fails.
      {"nan_input.h5",
       [nan](const std::string& p) { Edit(p).poke("/inputs/C", {21, 1, 1, 3}, H5T_NATIVE_FLOAT, &nan); }},
      {"bf16_inf_input.h5",
       [](const std::string& p) {
         const uint16_t inf = 0x7F80;  // bf16 +inf
         Edit(p).poke("/inputs/x", {30, 2, 3, 7}, H5T_NATIVE_UINT16, &inf);
       }},
      {"nan_param.h5",
       [nan](const std::string& p) {
         const double dnan = nan;
         Edit(p).poke("/params/A_log", {2}, H5T_NATIVE_DOUBLE, &dnan);
       }},
      {"nan_readout.h5",
       [nan](const std::string& p) { Edit(p).poke("/readout", {1, 5}, H5T_NATIVE_FLOAT, &nan); }},
      {"bad_readout.h5", [](const std::string& p) { Edit(p).replace("/readout", H5T_IEEE_F32LE, {5, 31}); }},
      {"zero_steps.h5",
       [](const std::string& p) {
         Edit e(p);
         e.replace("/inputs/x", H5T_IEEE_F32LE, {0, 3, 4, 8});
         e.replace("/inputs/dt", H5T_IEEE_F32LE, {0, 3, 4});
         e.replace("/inputs/B", H5T_IEEE_F32LE, {0, 3, 2, 16});
         e.replace("/inputs/C", H5T_IEEE_F32LE, {0, 3, 2, 16});
         e.replace("/inputs/z", H5T_IEEE_F32LE, {0, 3, 4, 8});
         e.attr("steps", 0LL);
       }},
      {"zero_seqs.h5", [](const std::string& p) { Edit(p).replace("/inputs/x", H5T_IEEE_F32LE, {37, 0, 4, 8}); }},
      {"steps_differ.h5", [](const std::string& p) { Edit(p).replace("/inputs/dt", H5T_IEEE_F32LE, {36, 3, 4}); }},
      {"seqs_differ.h5", [](const std::string& p) { Edit(p).replace("/inputs/C", H5T_IEEE_F32LE, {37, 2, 2, 16}); }},
      {"steps_attr_mismatch.h5", [](const std::string& p) { Edit(p).attr("steps", 40LL); }},
      {"wrong_version.h5", [](const std::string& p) { Edit(p).attr("version", 2LL); }},
      {"string_version.h5", [](const std::string& p) { Edit(p).attr("version", std::string("1")); }},
      {"no_format.h5", [](const std::string& p) { Edit(p).drop_attr("format"); }},
      {"result_not_trace.h5", [](const std::string& p) { Edit(p).attr("format", std::string("replayssm-result")); }},
      {"unknown_family.h5", [](const std::string& p) { Edit(p).attr("family", std::string("mamba3")); }},
      {"missing_geometry.h5", [](const std::string& p) { Edit(p).drop_attr("N"); }},
      // H = 6 is still a multiple of G = 2, so only the parameters' size shows the disagreement.
      {"geometry_mismatch.h5", [](const std::string& p) { Edit(p).attr("H", 6LL); }},
      {"huge_dim.h5", [](const std::string& p) { Edit(p).attr("H", 1LL << 31); }},
      {"negative_dim.h5", [](const std::string& p) { Edit(p).attr("P", -8LL); }},
      {"bad_flag.h5", [](const std::string& p) { Edit(p).attr("has_z", 2LL); }},
      {"truncated.h5",
       [](const std::string& p) {
         const std::string bytes = test::read_text(p);
         test::write_text(p, bytes.substr(0, bytes.size() / 2));
       }},
      {"garbage_tail.h5",
       [](const std::string& p) {
         // The superblock survives; everything after the first 2 KiB is overwritten with a fixed pattern.
         std::string bytes = test::read_text(p);
         for (size_t i = 2048; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 131) ^ 0x5A);
         test::write_text(p, bytes);
       }},
  };
  return all;
}

void make_traces(const std::string& dir) {
  test::write_tiny_trace(dir + "/good.h5", InputStorage::FP32);
  test::write_tiny_trace(dir + "/good_bf16.h5", InputStorage::BF16);
  for (const auto& [name, spoil] : corruptions()) {
    const std::string from = dir + (name.rfind("bf16", 0) == 0 ? "/good_bf16.h5" : "/good.h5");
    fs::copy_file(from, dir + "/" + name);
    spoil(dir + "/" + name);
  }
}

struct Outcome {
  int code = -1;
  std::string out, err, command;
};

// Runs replayssm with `args` (already substituted, split on spaces) inside `cwd`, with stdout and stderr captured in
// `capture_dir`. A case that tries to allocate absurd amounts must fail, not take the machine down: the address
// space is capped (ASan reserves terabytes of shadow memory, so there the allocator's own cap is used instead).
Outcome run_in(const std::string& cwd, const std::string& args, const std::string& capture_dir) {
  std::string cmd = "cd " + shell_quote(cwd) + " && ";
  if (kAsan) {
    const char* prev = std::getenv("ASAN_OPTIONS");
    cmd += "ASAN_OPTIONS=" +
           shell_quote(std::string(prev ? prev : "") + ":max_allocation_size_mb=4096:allocator_may_return_null=1") +
           " ";
  } else {
    cmd += "ulimit -v 8388608 && ";
  }
  std::string quoted;
  std::istringstream words(args);
  for (std::string w; words >> w;) quoted += " " + shell_quote(w);
  Outcome o;
  o.command = std::string(REPLAYSSM_CLI) + quoted;
  cmd += "timeout -k 5 60 " + o.command + " >" + capture_dir + "/stdout 2>" + capture_dir + "/stderr </dev/null";
  const int status = std::system(cmd.c_str());
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  o.out = test::read_text(capture_dir + "/stdout");
  o.err = test::read_text(capture_dir + "/stderr");
  return o;
}

}  // namespace

TEST_CASE("bad inputs: every case fails with one line naming the culprit and leaves nothing behind",
          "[bad-inputs][cli]") {
  const auto cases = load_cases(kInputs + "/cases.txt");
  CHECK(cases.size() >= 30);
  test::TempDir traces, capture;
  make_traces(traces.path());
  const auto traces_before = listing(traces.path());

  const std::map<std::string, std::string> base_vars = {{"$IN", kInputs}, {"$T", traces.path()}};

  // The base of the trace cases runs, so each failure below is the corruption's doing.
  for (const char* good : {"good.h5", "good_bf16.h5"}) {
    test::TempDir out;
    const Outcome ok = run_in(out.path(),
                              "run " + kInputs + "/configs/tiny.ini --quiet -o " + out.path() +
                                  "/r.h5 --set trace.file=" + traces.path() + "/" + good,
                              capture.path());
    INFO(ok.command << "\n" << ok.err);
    REQUIRE(ok.code == 0);
    REQUIRE(fs::exists(out.path() + "/r.h5"));
  }

  for (const Case& c : cases) {
    test::TempDir out;
    auto vars = base_vars;
    vars["$OUT"] = out.path();
    const std::string args = substitute(c.args, vars);
    const Outcome o = run_in(out.path(), args, capture.path());
    INFO("tests/bad_inputs/cases.txt:" << c.line << ": replayssm " << args << "\n  (ran in " << out.path()
                                       << ")\n  exit " << o.code << ", stderr:\n" << o.err);
    CHECK(o.code == c.exit_code);
    const auto lines = std::count(o.err.begin(), o.err.end(), '\n');
    CHECK(lines == 1);
    CHECK((!o.err.empty() && o.err.back() == '\n'));
    for (const auto& culprit : c.culprits) CHECK_THAT(o.err, Catch::Matchers::Contains(substitute(culprit, vars)));
    const auto left = listing(out.path());
    INFO("left behind: " << left.size() << " file(s), e.g. " << (left.empty() ? "" : *left.begin()));
    CHECK(left.empty());
  }
  // Inputs are read, never modified or added to.
  CHECK(listing(traces.path()) == traces_before);
}
