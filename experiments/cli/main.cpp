// replayssm: run decoding experiments (fp64 reference vs schemes under test), synthesise and inspect traces.
// `replayssm --help` lists the subcommands; `replayssm SUBCOMMAND --help` documents each.
#include <fmt/format.h>

#include <cstring>
#include <exception>

#include "cli/cli.h"
#include "errors.h"
#include "replayssm_version.h"

namespace {

const char* kUsage =
    "usage: replayssm <subcommand> [options]\n"
    "\n"
    "ReplaySSM research harness: runs SSM decoding schemes side by side with an fp64 reference recurrence over\n"
    "recorded or synthetic SSM inputs and writes the measured errors to an HDF5 result file.\n"
    "\n"
    "subcommands:\n"
    "  run CONFIG      run an experiment config (INI; comma lists in [scheme] keys are sweep axes)\n"
    "  synth           write a synthetic trace file from the [synth] section of a config\n"
    "  inspect FILE    describe a trace or result file: geometry, steps, parameters, per-dataset statistics\n"
    "  defaults        print every config key with its default and help (the text of configs/defaults.ini)\n"
    "\n"
    "options:\n"
    "  -h, --help      this text (SUBCOMMAND --help for a subcommand's options)\n"
    "  --version       print the version and git commit\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace rssm;
  if (argc < 2) {
    fmt::print(stderr, "{}", kUsage);
    return 2;
  }
  const std::string sub = argv[1];
  if (sub == "-h" || sub == "--help" || sub == "help") {
    fmt::print("{}", kUsage);
    return 0;
  }
  if (sub == "--version") {
    fmt::print("replayssm {} (git {})\n", REPLAYSSM_VERSION, REPLAYSSM_GIT_COMMIT);
    return 0;
  }
  cli::Args args(argv + 2, argv + argc);
  try {
    if (sub == "run") return cli::cmd_run(args);
    if (sub == "synth") return cli::cmd_synth(args);
    if (sub == "inspect") return cli::cmd_inspect(args);
    if (sub == "defaults") return cli::cmd_defaults(args);
    throw ConfigError(fmt::format("unknown subcommand '{}' (accepted: run, synth, inspect, defaults; see --help)", sub));
  } catch (const ConfigError& e) {
    fmt::print(stderr, "replayssm: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "replayssm: error: {}\n", e.what());
    return 1;
  }
}
