// replayssm run CONFIG: the experiment runner (lib/run/runner.h does the work).
#include <fmt/format.h>
#include <iostream>

#include "cli/cli.h"
#include "run/runner.h"

namespace rssm::cli {

int cmd_run(const Args& args) {
  const std::string usage =
      "usage: replayssm run CONFIG [--set section.key=value ...] [--output FILE] [--quiet] [--dry-run]\n"
      "\n"
      "Runs the fp64 reference and every decoder of the sweep in CONFIG over its trace (trace.file, or a synthetic\n"
      "trace from [synth]) and writes run.output (HDF5: /runs/<id> per-step metrics, /summary table, provenance).\n"
      "A comma list in a sweep key ([scheme]) is a sweep axis; runs are the Cartesian product. Every key and its\n"
      "default: configs/defaults.ini or `replayssm defaults`.";
  po::options_description opts("options");
  opts.add_options()("config", po::value<std::string>(), "experiment config (INI)")(
      "output,o", po::value<std::string>(), "result file (same as --set run.output=FILE)")(
      "quiet,q", "no progress line on stderr")("dry-run", "print the resolved config and the runs, run nothing");
  add_config_options(opts);
  po::positional_options_description pos;
  pos.add("config", 1);
  po::variables_map vm;
  if (!parse_args("run", args, usage, opts, pos, vm, {"config"})) return 0;
  Config cfg = load_config(vm, "config");
  if (vm.count("output")) cfg.set("run.output=" + vm["output"].as<std::string>());
  if (vm.count("dry-run")) {
    fmt::print("{}\n", cfg.resolved_text());
    for (const auto& s : expand_sweep(cfg)) {
      std::string what;
      for (const auto& [k, v] : s.params) what += fmt::format(" {}={}", k, v);
      fmt::print("{}{}{}\n", s.id, what, s.skip_reason.empty() ? "" : "  (skipped: " + s.skip_reason + ")");
    }
    return 0;
  }
  RunnerOptions ro;
  ro.progress = !vm.count("quiet");
  std::string cmdline = "replayssm run";
  for (const auto& a : args) cmdline += " " + a;
  ro.extra_root_attrs.emplace_back("command_line", cmdline);
  run_experiment(cfg, std::cout, ro);
  return 0;
}

int cmd_defaults(const Args& args) {
  po::options_description opts("options");
  po::positional_options_description pos;
  po::variables_map vm;
  if (!parse_args("defaults", args,
                  "usage: replayssm defaults\n\nPrints every config key with its default value and help line.", opts,
                  pos, vm, {}))
    return 0;
  fmt::print("{}", Config::defaults_text());
  return 0;
}

}  // namespace rssm::cli
