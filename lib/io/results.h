// The HDF5 result file of one `replayssm run`, written whole from memory every time a batch of runs completes, so
// the file on disk is always complete: written under <path>.tmp.<pid> and renamed over <path> (an interrupted or
// killed run leaves the previous complete file, or none, never a half-written one).
//   /                 attributes: format = "replayssm-result", version, replayssm_version, git_commit, created (UTC),
//                     host, device, config (the full resolved INI text), trace, ... (provenance)
//   /runs/<id>/       one group per completed run: every run parameter and derived scalar as an attribute;
//                     series datasets, each over an index dataset attached as its dimension scale:
//                     `step` (per decode step), `flush_step` (per flush), `position` (steps since the last flush)
//   /runs/<id>/outputs    optional raw outputs [step, seq, out] (run.save_outputs)
//   /reference/<act>/outputs  optional fp64 reference outputs per activation format
//   /summary/<col>    one 1-D dataset per column, one row per sweep point (skipped points included with status and
//                     reason), so xarray/pandas load it directly
#pragma once

#include <map>
#include <string>
#include <variant>
#include <vector>

#include "io/h5.h"

namespace rssm {

using AttrValue = std::variant<std::string, long long, double>;
using AttrMap = std::vector<std::pair<std::string, AttrValue>>;
using Series = std::pair<std::string, std::vector<double>>;

// Series sharing one index (its name is the dataset name of the index: "step", "flush_step", "position").
struct SeriesGroup {
  std::string index_name;
  std::vector<long long> index;
  std::vector<Series> series;
};

struct RunRecord {
  std::string id;
  AttrMap attrs;                    // written as attributes of /runs/<id>
  std::vector<SeriesGroup> groups;  // per-step, per-flush, per-position series
  AttrMap summary;                  // this run's row of /summary (column -> value)
  std::vector<long long> output_dims;  // [steps, seqs, out] when outputs are saved
  std::vector<double> outputs;
  bool completed() const { return !groups.empty(); }
};

struct ResultSet {
  AttrMap root;
  std::vector<RunRecord> runs;  // completed runs and skipped points, in sweep order
  // Reference outputs per activation format (act format -> [steps, seqs, out]), when saved.
  std::map<std::string, std::vector<double>> reference_outputs;
  std::vector<long long> reference_dims;
};

void set_attrs(hid_t obj, const AttrMap& attrs);
// Every string, integer or float attribute of an object (dimension-scale bookkeeping attributes skipped).
AttrMap read_attrs(hid_t obj, const std::string& file_for_errors);

// Writes `rs` to <path>.tmp.<pid> and renames it over <path>. Creates the parent folder. On any error the temporary
// file is removed and <path> is untouched.
void write_result_file(const std::string& path, const ResultSet& rs);

// Reads a result file back (for --resume and `replayssm merge`): root attributes, summary rows, run groups with
// their attributes, series and saved outputs. Throws FormatError naming the file and the object at fault.
ResultSet read_result_file(const std::string& path);

// Removes <path>.tmp.<pid> files left by processes that no longer exist (a SIGKILLed run). Returns how many.
int remove_stale_temporaries(const std::string& path);

}  // namespace rssm
