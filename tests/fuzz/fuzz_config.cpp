// libFuzzer target: the INI config parser and every validation path behind it.
// The input is an INI file. It is loaded with Config::load_file, and separately each of its lines is applied as a
// `--set` override; then every typed getter runs on every key, and the validators a run goes through
// (synth_config, expand_sweep for both families, make_decoder, traffic_params) run on the result.
// The contract under test: bad input throws ConfigError (one line naming the key or file); any other exception,
// a sanitizer report, a hang or a huge allocation is a bug. Build and run: scripts/fuzz.sh.
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "errors.h"
#include "fuzz_util.h"
#include "metrics/traffic.h"
#include "run/config.h"
#include "run/runner.h"
#include "run/factory.h"
#include "run/sweep.h"

using namespace rssm;

namespace {

// Config errors are the expected outcome of bad input; they must be a single line.
template <class F>
void expect_config_errors(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    if (msg.empty() || msg.find('\n') != std::string::npos)
      fuzz::violated("ConfigError message is empty or spans lines: " + msg);
  }
}

void validate(const Config& cfg) {
  for (const KeyDef& k : config_keys()) {
    (void)cfg.str(k.key);
    expect_config_errors([&] { (void)cfg.integer(k.key, 0, std::numeric_limits<long long>::max()); });
    expect_config_errors([&] { (void)cfg.integer(k.key, -5, 5); });
    expect_config_errors([&] { (void)cfg.real(k.key, 0.0, std::numeric_limits<double>::infinity()); });
    expect_config_errors([&] { (void)cfg.real(k.key, -1.0, 1.0); });
    expect_config_errors([&] { (void)cfg.boolean(k.key); });
    expect_config_errors([&] { (void)cfg.choice(k.key, {"fp32", "bf16", ""}); });
    expect_config_errors([&] { (void)cfg.list(k.key); });
  }
  (void)cfg.resolved_text();
  expect_config_errors([&] { (void)synth_config(cfg); });
  for (Family fam : {Family::Mamba2, Family::GDN}) {
    expect_config_errors([&] {
      const auto specs = expand_sweep(cfg, fam);
      // A few decoders per input: constructing one validates its parameters without allocating states.
      int made = 0;
      for (const RunSpec& s : specs) {
        if (!s.skip_reason.empty()) continue;
        (void)traffic_params(s.scheme, 1);
        (void)make_decoder(s.scheme, fam, 1);
        if (++made == 4) break;
      }
    });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::scratch_dir() + "/input.ini";
  fuzz::write_bytes(path, data, size);

  Config from_file;
  bool loaded = false;
  expect_config_errors([&] {
    from_file.load_file(path);
    loaded = true;
  });
  if (loaded) validate(from_file);

  // The same text as command-line overrides, line by line ("[run]" headers simply fail).
  Config from_set;
  std::istringstream lines(std::string(reinterpret_cast<const char*>(data), size));
  std::string line;
  while (std::getline(lines, line)) expect_config_errors([&] { from_set.set(line); });
  validate(from_set);
  return 0;
}
