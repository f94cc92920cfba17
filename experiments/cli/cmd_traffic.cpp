// replayssm traffic CONFIG: the memory-traffic model (metrics/traffic.h) for every point of a config's sweep.
#include <fmt/format.h>

#include "cli/cli.h"
#include "errors.h"
#include "metrics/traffic.h"
#include "run/runner.h"
#include "trace/trace_h5.h"

namespace rssm::cli {

int cmd_traffic(const Args& args) {
  const std::string usage =
      "usage: replayssm traffic CONFIG [--set section.key=value ...] [--batch N]\n"
      "\n"
      "Prints the modelled bytes per decode step of one layer (METHOD.md, 'Memory traffic per step'; the formulas:\n"
      "docs/metrics.md) for every runnable point of CONFIG's sweep: per head and for the batch, on non-flush and\n"
      "flush steps and amortised over the interval. Geometry comes from the config's trace (or [synth]).";
  po::options_description opts("options");
  opts.add_options()("config", po::value<std::string>(), "experiment config (INI)")(
      "batch", po::value<int>(), "sequences in the batch (default: the run's sequences)");
  add_config_options(opts);
  po::positional_options_description pos;
  pos.add("config", 1);
  po::variables_map vm;
  if (!parse_args("traffic", args, usage, opts, pos, vm, {"config"})) return 0;
  Config cfg = load_config(vm, "config");
  probe_trace_file(cfg.str("trace.file"));  // trace/trace_h5.h
  const auto src = open_trace(cfg);
  int batch = static_cast<int>(cfg.integer("run.seqs", 0, 1 << 20));
  if (batch == 0) batch = src->seqs();
  if (vm.count("batch")) batch = vm["batch"].as<int>();
  if (batch < 1) throw ConfigError(fmt::format("replayssm traffic: --batch must be at least 1 (got {})", batch));
  std::vector<TrafficParams> rows;
  for (const auto& s : expand_sweep(cfg, src->model().family))
    if (s.skip_reason.empty()) rows.push_back(traffic_params(s.scheme, batch));
  fmt::print("{} {}, batch {}\n{}", family_name(src->model().family), src->model().geometry_string(), batch,
             traffic_table(src->model(), rows));
  return 0;
}

}  // namespace rssm::cli
