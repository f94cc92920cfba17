// replayssm run CONFIG: the experiment runner (lib/run/runner.h does the work).
#include <csignal>
#include <fmt/format.h>
#include <iostream>

#include "cli/cli.h"
#include "errors.h"
#include "run/lm_run.h"
#include "run/runner.h"
#include "trace/trace_h5.h"

namespace rssm::cli {

namespace {
extern "C" void on_sigint(int) { request_stop(); }

// "i/n" -> (i, n)
std::pair<int, int> parse_shard(const std::string& s) {
  const auto slash = s.find('/');
  try {
    if (slash != std::string::npos) {
      size_t a = 0, b = 0;
      const int i = std::stoi(s.substr(0, slash), &a), n = std::stoi(s.substr(slash + 1), &b);
      if (a == slash && b == s.size() - slash - 1 && n >= 1 && i >= 0 && i < n) return {i, n};
    }
  } catch (const std::exception&) {
  }
  throw ConfigError(fmt::format("replayssm run: --shard expects i/n with 0 <= i < n (got '{}')", s));
}
}  // namespace

int cmd_run(const Args& args) {
  const std::string usage =
      "usage: replayssm run CONFIG [--set section.key=value ...] [--output FILE] [--jobs N] [--resume]\n"
      "                    [--shard i/n] [--quiet] [--dry-run]\n"
      "\n"
      "Runs the fp64 reference and every decoder of the sweep in CONFIG over its trace (trace.file, or a synthetic\n"
      "trace from [synth]) and writes run.output (HDF5: /runs/<id> per-step metrics, /summary table, provenance).\n"
      "A comma list in a sweep key ([scheme]) is a sweep axis; runs are the Cartesian product. Every key and its\n"
      "default: configs/defaults.ini or `replayssm defaults`.\n"
      "With model.weights set ([model]), every SSM layer of that language model is decoded by each scheme end to\n"
      "end, against the model in fp64 (teacher-forced KL and bits per byte, or free-running greedy divergence).\n"
      "The result file is rewritten (atomically) after every finished batch of runs. Ctrl-C stops at the next step\n"
      "boundary and keeps the finished runs; --resume then runs only what is missing.";
  po::options_description opts("options");
  opts.add_options()("config", po::value<std::string>(), "experiment config (INI)")(
      "output,o", po::value<std::string>(), "result file (same as --set run.output=FILE)")(
      "jobs,j", po::value<int>()->default_value(1), "batches of sweep points run in parallel")(
      "resume", "keep the runs already complete in the output file and run the rest")(
      "shard", po::value<std::string>(), "run every n-th point only, starting at i: i/n (join with `replayssm merge`)")(
      "quiet,q", "no progress on stderr")("dry-run", "print the resolved config and the runs, run nothing");
  add_config_options(opts);
  po::positional_options_description pos;
  pos.add("config", 1);
  po::variables_map vm;
  if (!parse_args("run", args, usage, opts, pos, vm, {"config"})) return 0;
  Config cfg = load_config(vm, "config");
  if (vm.count("output")) cfg.set("run.output=" + vm["output"].as<std::string>());
  const bool model = lm_configured(cfg);  // [model]: the whole language model instead of a trace's layer
  if (!model) probe_trace_file(cfg.str("trace.file"));  // first, while single-threaded (trace/trace_h5.h)
  RunnerOptions ro;
  ro.progress = !vm.count("quiet");
  ro.jobs = vm["jobs"].as<int>();
  if (ro.jobs < 1) throw ConfigError(fmt::format("replayssm run: --jobs must be at least 1 (got {})", ro.jobs));
  ro.resume = vm.count("resume") > 0;
  if (vm.count("shard")) std::tie(ro.shard_index, ro.shard_count) = parse_shard(vm["shard"].as<std::string>());
  if (model && (ro.resume || ro.shard_count > 1))
    throw ConfigError("replayssm run: --resume and --shard are not supported with [model] (model.weights set)");
  if (vm.count("dry-run")) {
    read_settings(cfg);  // the same checks of [run] and [metrics] as a real run
    fmt::print("{}\n", cfg.resolved_text());
    const auto src = model ? nullptr : open_trace(cfg);
    for (const auto& s : expand_sweep(cfg, model ? Family::GDN : src->model().family)) {
      if (s.index % ro.shard_count != ro.shard_index) continue;
      std::string what;
      for (const auto& [k, v] : s.params) what += fmt::format(" {}={}", k, v);
      fmt::print("{}{}{}\n", s.id, what, s.skip_reason.empty() ? "" : "  (skipped: " + s.skip_reason + ")");
    }
    return 0;
  }
  std::string cmdline = "replayssm run";
  for (const auto& a : args) cmdline += " " + a;
  ro.extra_root_attrs.emplace_back("command_line", cmdline);
  std::signal(SIGINT, on_sigint);
  std::signal(SIGTERM, on_sigint);
  try {
    if (model)
      run_lm_experiment(cfg, std::cout, ro);
    else
      run_experiment(cfg, std::cout, ro);
  } catch (const Interrupted& e) {
    fmt::print(stderr, "\nreplayssm: {}\n", e.what());
    return 130;
  }
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
