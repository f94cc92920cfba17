// The runner: one `replayssm run` from a resolved config to a result file (the orchestration: points, batches,
// workers, the file; the parts live in settings.h, memory.h, provenance.h, lockstep.h, record.h, summary_table.h).
//   trace (file or synthesised) -> chunk of inputs -> rounded to the run's activation format -> the fp64 reference
//   and every decoder of a batch, in lockstep -> per-step output error and KL, state error at every flush
//   -> run records -> the result file, rewritten whole after every batch (io/results.h).
// Sweep points are grouped by activation format and cut into batches, never between backend twins (sweep.h);
// one reference serves a batch. `jobs`
// batches run at once (threads, each with its share of the OpenMP threads). A completed batch is in the file at
// once, so an interrupted sweep keeps what it finished and --resume runs only the rest; a run's numbers do not
// depend on which batch it ran in.
#pragma once

#include <atomic>
#include <iosfwd>
#include <stdexcept>
#include <memory>
#include <string>

#include "io/results.h"
#include "run/config.h"
#include "run/lockstep.h"    // request_stop, stop_requested
#include "run/memory.h"      // estimate_run_bytes, available_memory_bytes
#include "run/provenance.h"  // provenance_attrs
#include "run/settings.h"    // synth_config, open_trace, RunSettings, read_settings
#include "run/sweep.h"

namespace rssm {

struct RunnerOptions {
  bool progress = true;      // progress line on stderr
  AttrMap extra_root_attrs;  // e.g. the command line
  int jobs = 1;              // batches in parallel
  bool resume = false;       // keep the runs already complete in the output file, run the rest
  int shard_index = 0;       // run only the points whose index % shard_count == shard_index
  int shard_count = 1;
};

// Thrown when a stop was requested (SIGINT): the result file holds every batch completed before it.
struct Interrupted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs the sweep and writes run.output. Prints the summary table to `out`. Returns the result path.
std::string run_experiment(const Config& cfg, std::ostream& out, const RunnerOptions& opts);

}  // namespace rssm
