#include "run/sweep.h"

#include <fmt/format.h>

#include "errors.h"
#include "numeric/format.h"
#include "replay/eager.h"

namespace rssm {

const std::string& RunSpec::get(const std::string& key) const {
  for (const auto& [k, v] : params)
    if (k == key) return v;
  throw InternalError("run parameter missing: " + key);
}

namespace {

// Why a combination cannot run, or "" when it can. Value-by-value checks happen before this.
std::string combination_problem(const RunSpec& s) {
  const std::string& dec = s.get("decoder");
  const Format sf = parse_format(s.get("state_format"));
  if (dec == "eager" && sf != Format::FP32 && sf != Format::BF16 && sf != Format::FP16)
    return fmt::format("eager decoding keeps no scales, so state_format {} is not supported (use fp32, bf16, fp16)",
                       format_name(sf));
  return "";
}

void check_value(const std::string& key, const std::string& v) {
  if (key == "scheme.decoder") {
    if (v != "eager") throw ConfigError(fmt::format("config key '{}': expected one of eager, got '{}'", key, v));
  } else if (key == "scheme.state_format") {
    try {
      parse_format(v);
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("config key '{}': {}", key, e.what()));
    }
  }
}

}  // namespace

std::vector<RunSpec> expand_sweep(const Config& cfg) {
  std::vector<std::pair<std::string, std::vector<std::string>>> axes;
  for (const auto& k : config_keys()) {
    if (!k.sweep) continue;
    auto vals = cfg.list(k.key);
    for (const auto& v : vals) check_value(k.key, v);
    axes.emplace_back(k.key.substr(k.key.find('.') + 1), vals);
  }
  std::vector<RunSpec> out;
  std::vector<size_t> idx(axes.size(), 0);
  while (true) {
    RunSpec s;
    s.index = static_cast<int>(out.size());
    s.id = fmt::format("run_{:04d}", s.index);
    for (size_t a = 0; a < axes.size(); ++a) s.params.emplace_back(axes[a].first, axes[a].second[idx[a]]);
    s.skip_reason = combination_problem(s);
    out.push_back(std::move(s));
    // Odometer increment, last axis fastest.
    size_t a = axes.size();
    while (a > 0) {
      --a;
      if (++idx[a] < axes[a].second.size()) break;
      idx[a] = 0;
      if (a == 0) return out;
    }
    if (axes.empty()) return out;
  }
}

std::unique_ptr<Decoder> make_decoder(const RunSpec& s) {
  const std::string& dec = s.get("decoder");
  if (dec == "eager") return std::make_unique<EagerDecoder>(parse_format(s.get("state_format")));
  throw ConfigError(fmt::format("config key 'scheme.decoder': unknown decoder '{}'", dec));
}

}  // namespace rssm
