// The runner: one `replayssm run` from a resolved config to a result file.
//   trace (file or synthesised) -> chunk of inputs -> rounded to the run's activation format -> the fp64 reference
//   and every decoder of a batch, in lockstep -> per-step output error and KL, state error at every flush
//   -> run records -> the result file, rewritten whole after every batch (io/results.h).
// Sweep points are grouped by activation format and cut into batches; one reference serves a batch. `jobs`
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
#include "run/sweep.h"
#include "trace/synth.h"
#include "trace/trace.h"

namespace rssm {

// The [synth] section as a generator config (geometry from the preset or explicit keys).
SynthConfig synth_config(const Config& cfg);
// The trace a config names: trace.file, or the synthetic generator.
std::unique_ptr<TraceSource> open_trace(const Config& cfg);

// The [run] and [metrics] keys, validated (each bad value is a ConfigError naming its key). `run --dry-run` checks
// them too, so a config that dry-runs cleanly does not fail on them later.
struct RunSettings {
  std::string output;
  long long steps = 0, seqs = 0;  // 0 = all of the trace
  int chunk = 64, threads = 0, batch = 0, vocab = 4096, state_every = 16;
  bool save_outputs = false, kl = true, state_err = true;
  double max_output_gb = 2, logit_std = 4;
  uint64_t seed = 0;
};
RunSettings read_settings(const Config& cfg);

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

// Asks running experiments to stop at the next step boundary (async-signal-safe: sets a flag).
void request_stop();
bool stop_requested();

// Bytes a run will hold in memory (states of every decoder plus chunk buffers); checked against the machine
// before anything is allocated.
long long estimate_run_bytes(const Model& model, int seqs, int chunk, int decoders, int readout_vocab);
long long available_memory_bytes();  // MemAvailable from /proc/meminfo, or -1 when unknown

// Provenance shared by every file we write: version, git commit, UTC time, host, device.
AttrMap provenance_attrs();

}  // namespace rssm
