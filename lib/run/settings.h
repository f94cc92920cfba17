// The [trace], [synth], [run] and [metrics] sections of a config, validated into typed settings: what a run reads
// before it touches any file. `run --dry-run` calls the same functions, so a config that dry-runs cleanly does not
// fail on them later.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "run/config.h"
#include "trace/synth.h"
#include "trace/trace.h"

namespace rssm {

// The [synth] section as a generator config (geometry from the preset or explicit keys).
SynthConfig synth_config(const Config& cfg);
// The trace a config names: trace.file, or the synthetic generator.
std::unique_ptr<TraceSource> open_trace(const Config& cfg);

// The [run] and [metrics] keys, validated (each bad value is a ConfigError naming its key).
struct RunSettings {
  std::string output;
  long long steps = 0, seqs = 0;  // 0 = all of the trace
  int chunk = 64, threads = 0, batch = 0, vocab = 4096, state_every = 16;
  bool save_outputs = false, kl = true, state_err = true;
  double max_output_gb = 2, logit_std = 4;
  uint64_t seed = 0;
};
RunSettings read_settings(const Config& cfg);

}  // namespace rssm
