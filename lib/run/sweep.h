// Sweep expansion: every sweep key's comma list is an axis; runs are the Cartesian product, in a stable order
// (the first sweep key of config_keys() varies slowest), so a run's id names the same point in every invocation
// of the same config (what --resume and --shard rely on).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "run/config.h"
#include "run/decoder.h"

namespace rssm {

struct RunSpec {
  int index = 0;                                           // position in the full expansion
  std::string id;                                          // "run_0007"
  std::vector<std::pair<std::string, std::string>> params;  // sweep key (without "scheme.") -> value
  std::string skip_reason;                                 // non-empty: an invalid combination, not run
  const std::string& get(const std::string& key) const;
};

// Every value of every sweep key is checked (a bad value is a ConfigError naming the key); combinations that are
// valid value by value but not together get a skip_reason.
std::vector<RunSpec> expand_sweep(const Config& cfg);

// The decoder a run specifies. Throws ConfigError for a bad value (already caught by expand_sweep).
std::unique_ptr<Decoder> make_decoder(const RunSpec& spec);

}  // namespace rssm
