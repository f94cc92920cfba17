// The `replayssm` command line as a function: main.cpp hands it argv, the CLI fuzzer (tests/fuzz/fuzz_cli.cpp)
// calls it in-process. Every error of every subcommand ends here and becomes one line on stderr plus an exit
// code (2: bad command line or config, 1: bad input file or anything else); nothing below may call exit().
#include <fmt/format.h>

#include <exception>

#include "cli/cli.h"
#include "errors.h"
#include "replayssm_version.h"

namespace rssm::cli {

namespace {

const char* kUsage =
    "usage: replayssm <subcommand> [options]\n"
    "\n"
    "ReplaySSM research harness: runs SSM decoding schemes side by side with an fp64 reference recurrence over\n"
    "recorded or synthetic SSM inputs and writes the measured errors to an HDF5 result file.\n"
    "\n"
    "subcommands:\n"
    "  run CONFIG      run an experiment config (INI; comma lists in [scheme] and [spec] keys are sweep axes)\n"
    "  synth           write a synthetic trace file from the [synth] section of a config\n"
    "  inspect FILE    describe a trace or result file: geometry, steps, parameters, per-dataset statistics\n"
    "  traffic CONFIG  modelled memory traffic per decode step for every point of a config's sweep\n"
    "  merge OUT IN... join the result files of a sharded sweep (run --shard i/n) into one\n"
    "  defaults        print every config key with its default and help (the text of configs/defaults.ini)\n"
    "\n"
    "options:\n"
    "  -h, --help      this text (SUBCOMMAND --help for a subcommand's options)\n"
    "  --version       print the version and git commit\n";

}  // namespace

int main_args(const std::vector<std::string>& argv) {
  // A usage error is one line like every other error; the full text is one --help away.
  if (argv.size() < 2) {
    fmt::print(stderr, "replayssm: error: missing subcommand (run, synth, inspect, traffic, merge, defaults; see "
                       "replayssm --help)\n");
    return 2;
  }
  const std::string& sub = argv[1];
  if (sub == "-h" || sub == "--help" || sub == "help") {
    fmt::print("{}", kUsage);
    return 0;
  }
  if (sub == "--version") {
    fmt::print("replayssm {} (git {})\n", REPLAYSSM_VERSION, REPLAYSSM_GIT_COMMIT);
    return 0;
  }
  const Args args(argv.begin() + 2, argv.end());
  try {
    if (sub == "run") return cmd_run(args);
    if (sub == "synth") return cmd_synth(args);
    if (sub == "inspect") return cmd_inspect(args);
    if (sub == "traffic") return cmd_traffic(args);
    if (sub == "merge") return cmd_merge(args);
    if (sub == "defaults") return cmd_defaults(args);
    throw ConfigError(fmt::format(
        "unknown subcommand '{}' (accepted: run, synth, inspect, traffic, merge, defaults; see --help)", sub));
  } catch (const ConfigError& e) {
    fmt::print(stderr, "replayssm: error: {}\n", e.what());
    return 2;
  } catch (const InternalError& e) {
    fmt::print(stderr, "replayssm: internal error (a bug, please report it): {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "replayssm: error: {}\n", e.what());
    return 1;
  }
}

}  // namespace rssm::cli
