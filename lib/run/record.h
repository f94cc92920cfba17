// Record building: a finished run's measurements (run/lockstep.h) as the stored record of the result file
// (io/results.h): attributes (every sweep parameter, the scheme's names, growth slopes, the traffic model, host wall
// time under a name saying what it is), series per step / flush / position, and its summary row. Skipped and pending points get a
// placeholder summary row.
#pragma once

#include <string>

#include "io/results.h"
#include "model/model.h"
#include "run/lockstep.h"
#include "run/sweep.h"

namespace rssm {

struct RecordContext {
  Model model;
  long long steps = 0;
  int seqs = 0;
  bool kl = true, save_outputs = false;
  double eager_fp32_bytes = 1;  // modelled bytes per step of fp32 eager decoding (bytes_vs_eager_fp32)
};

// The attribute and summary column holding a run's host wall time inside advance(): "cpu_emulation_seconds" on the
// cpu backend (the emulation's time), "host_wall_seconds" on cuda (the adapter's host time around its kernels: not a
// GPU speed, which only the benchmarks measure). The summary table shows the first only.
inline const char* wall_seconds_key(Backend b) {
  return b == Backend::Cpu ? "cpu_emulation_seconds" : "host_wall_seconds";
}

// twin_id: the id of the run `run.twin` points to (stored as backend_twin), ignored when run.twin < 0.
// Moves the run's saved outputs into the record.
RunRecord make_run_record(const RecordContext& ctx, const RunSpec& spec, LockstepRun& run, const std::string& twin_id);

// The summary row of a point that has not run: skipped (with its reason) or pending (not finished yet).
RunRecord placeholder_record(const RunSpec& s);

}  // namespace rssm
