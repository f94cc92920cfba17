// The HDF5 result file of one `replayssm run`.
//   /                 attributes: format = "replayssm-result", version, git_commit, created (UTC), host, device,
//                     config (the full resolved INI text), trace (one line naming the trace), plus caller's extras
//   /runs/<id>/       one group per run: every run parameter as an attribute; per-step datasets over `step`
//   /runs/<id>/step   the step index, a dimension scale attached to dimension 0 of every per-step dataset
//   /summary/<col>    one 1-D dataset per column, one row per run (xarray/pandas load it directly)
// The file is written under a temporary name (<path>.tmp.<pid>) and renamed over <path> only by commit(); a writer
// destroyed without commit (an exception, a failed run) removes the temporary, so no half-written file remains.
#pragma once

#include <map>
#include <string>
#include <variant>
#include <vector>

#include "io/h5.h"

namespace rssm {

using AttrValue = std::variant<std::string, long long, double>;
using AttrMap = std::vector<std::pair<std::string, AttrValue>>;

class ResultsWriter {
 public:
  ResultsWriter(const std::string& path, const AttrMap& root_attrs);
  ~ResultsWriter();
  ResultsWriter(const ResultsWriter&) = delete;
  ResultsWriter& operator=(const ResultsWriter&) = delete;

  // Creates /runs/<id> with attributes and per-step series (all the same length) over steps `steps`.
  void write_run(const std::string& id, const AttrMap& attrs, const std::vector<long long>& steps,
                 const std::vector<std::pair<std::string, std::vector<double>>>& series);
  // Adds a further per-step (or per-flush) series with its own index scale, e.g. state error at flushes.
  void write_series(const std::string& id, const std::string& index_name, const std::vector<long long>& index,
                    const std::vector<std::pair<std::string, std::vector<double>>>& series);

  // Raw outputs of a decoder: a dataset `name` [steps, seqs, out_elems] float64 under group `group` (created if
  // needed), filled chunk by chunk with append_outputs().
  void create_outputs(const std::string& group, const std::string& name, long long steps, int seqs, int out_elems);
  void append_outputs(const std::string& group, const std::string& name, long long step0, int n, const double* y);

  // /summary: columns of equal length.
  void write_summary(const std::vector<std::pair<std::string, std::vector<AttrValue>>>& columns);

  // Closes the file and renames it into place. After commit the writer does nothing more.
  void commit();
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }

 private:
  std::string path_, tmp_;
  h5::Handle file_;
  bool committed_ = false;
  std::map<std::string, int> out_dims_;  // group/name -> seqs·out_elems per step (for append checks)
};

void set_attrs(hid_t obj, const AttrMap& attrs);

}  // namespace rssm
