// The runner: one `replayssm run` from a resolved config to a committed result file.
//   trace (file or synthesised) -> chunk of inputs -> fp64 reference + every decoder under test, in lockstep
//   -> per-step metrics -> /runs/<id> groups and /summary -> rename into place.
// The reference runs once per chunk and is shared by all runs of the sweep.
#pragma once

#include <iosfwd>
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

struct RunnerOptions {
  bool progress = true;  // progress line on stderr
  AttrMap extra_root_attrs;  // e.g. the command line
};

// Runs every point of the sweep and writes run.output. Prints the summary table to `out`. Returns the result path.
std::string run_experiment(const Config& cfg, std::ostream& out, const RunnerOptions& opts);

// Bytes a run will hold in memory (states of every decoder plus chunk buffers); checked against the machine
// before anything is allocated.
long long estimate_run_bytes(const Model& model, int seqs, int chunk, int decoders);
long long available_memory_bytes();  // MemAvailable from /proc/meminfo, or -1 when unknown

// Provenance shared by every file we write: version, git commit, UTC time, host, device.
AttrMap provenance_attrs();

}  // namespace rssm
