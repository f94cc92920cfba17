// Sweep expansion: every sweep key's comma list is an axis; runs are the Cartesian product, in a stable order
// (the first sweep key of config_keys() varies slowest), so a run's id names the same point in every invocation
// of the same config (what --resume and --shard rely on).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "decoder/scheme.h"
#include "model/family.h"
#include "run/config.h"

namespace rssm {

// Sweeps with more points than this are refused before they are expanded.
constexpr long long kMaxSweepPoints = 100000;

struct RunSpec {
  int index = 0;                                           // position in the full expansion
  std::string id;                                          // "run_0007"
  std::vector<std::pair<std::string, std::string>> params;  // sweep key (without "scheme.") -> value, as written
  Scheme scheme;                                           // params parsed once (decoder/scheme.h)
  std::string skip_reason;                                 // non-empty: an invalid combination, not run
  const std::string& get(const std::string& key) const;    // a param's text (InternalError when absent)
};

// Every value of every sweep key is checked (a bad value is a ConfigError naming the key); combinations that are
// valid value by value but not together, that repeat another run (a key that does not apply to the decoder or
// the family), or that the scheme's backend cannot run here (run/factory.h) get a skip_reason.
std::vector<RunSpec> expand_sweep(const Config& cfg, Family family);

// Sweep keys whose values are counts (interval, buffer_len, and the batch, seed and window keys as they become sweep
// axes): the result file stores them as integers in /summary and the run attributes, so a notebook selects and plots
// against them without casting. Every other key (formats, names) stays text.
bool integer_sweep_key(const std::string& key);

// Backend twins: points whose schemes differ only in backend. twin_key is equal for twins (the scheme on the cpu
// backend, with its buffer_len); backend_twins gives, for each scheme of a batch, the index of the cpu scheme it is
// compared with step by step, or -1 (cpu schemes themselves, and points without a cpu twin in the batch).
std::string twin_key(const Scheme& s);
std::vector<int> backend_twins(const std::vector<Scheme>& schemes);

}  // namespace rssm
