// replayssm inspect FILE: describes a trace file (geometry, steps, parameters, per-dataset statistics) or a result
// file (provenance, runs, per-step series statistics, summary columns).
#include <fmt/format.h>

#include "cli/cli.h"
#include "run/inspect.h"
#include "trace/trace_h5.h"

namespace rssm::cli {

int cmd_inspect(const Args& args) {
  const std::string usage =
      "usage: replayssm inspect FILE\n"
      "\n"
      "Describes a replayssm trace file (geometry, steps, parameters, per-dataset statistics, computed chunk by\n"
      "chunk) or result file (provenance, resolved config, runs and their per-step series, summary columns).";
  po::options_description opts("options");
  opts.add_options()("file", po::value<std::string>(), "trace or result file");
  po::positional_options_description pos;
  pos.add("file", 1);
  po::variables_map vm;
  if (!parse_args("inspect", args, usage, opts, pos, vm, {"file"})) return 0;
  const std::string path = vm["file"].as<std::string>();
  probe_trace_file(path);  // before any libhdf5 call on the file: a crafted file stops us with one line, not a crash
  if (file_format(path) == "replayssm-trace") {
    for (const auto& line : format_trace_info(inspect_trace(path))) fmt::print("{}\n", line);
  } else {
    fmt::print("{}", describe_result_file(path));
  }
  return 0;
}

}  // namespace rssm::cli
