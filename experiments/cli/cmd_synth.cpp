// replayssm synth: writes a synthetic trace file (trace format v1) from the [synth] section of a config.
#include <fmt/format.h>

#include "cli/cli.h"
#include "errors.h"
#include "run/runner.h"
#include "trace/synth.h"
#include "trace/trace_h5.h"

namespace rssm::cli {

int cmd_synth(const Args& args) {
  const std::string usage =
      "usage: replayssm synth [CONFIG] --output FILE [--set synth.key=value ...] [--storage fp32|bf16]\n"
      "\n"
      "Writes a synthetic trace (docs/trace_format.md) following METHOD.md's recipe: Mamba-2 initialisation ranges,\n"
      "x/B/C as SiLU of a short causal convolution over correlated Gaussians, persistent outlier channels, rare dt\n"
      "spikes; GDN q, k, v, a, b with some heads of almost no decay. The same seed and keys give a byte-identical\n"
      "file. Keys: the [synth] section of configs/defaults.ini.";
  po::options_description opts("options");
  opts.add_options()("config", po::value<std::string>(), "config whose [synth] section describes the trace")(
      "output,o", po::value<std::string>(), "trace file to write (HDF5)")(
      "storage", po::value<std::string>()->default_value("fp32"), "input storage: fp32 or bf16")(
      "chunk", po::value<int>()->default_value(64), "steps per HDF5 chunk");
  add_config_options(opts);
  po::positional_options_description pos;
  pos.add("config", 1);
  po::variables_map vm;
  if (!parse_args("synth", args, usage, opts, pos, vm, {"output"})) return 0;
  Config cfg = load_config(vm, "config");
  const InputStorage storage = parse_input_storage(vm["storage"].as<std::string>());
  const int chunk = vm["chunk"].as<int>();
  if (chunk < 1) throw ConfigError(fmt::format("replayssm synth: --chunk must be at least 1 (got {})", chunk));
  SynthSource src(synth_config(cfg));
  const std::string out = vm["output"].as<std::string>();
  write_trace(out, src, storage, chunk);
  fmt::print("wrote {}: {}\n", out, src.describe());
  return 0;
}

}  // namespace rssm::cli
