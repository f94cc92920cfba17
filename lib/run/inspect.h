// `replayssm inspect` for result files: provenance, runs and the summary table as readable text.
// (Trace files are described by trace/trace_h5.h.)
#pragma once

#include <string>

namespace rssm {

// "replayssm-trace", "replayssm-result", or throws FormatError naming the file (not HDF5, no `format` attribute).
std::string file_format(const std::string& path);

// Readable description of a result file: root attributes, one line per run, per-dataset statistics of each run.
std::string describe_result_file(const std::string& path);

}  // namespace rssm
