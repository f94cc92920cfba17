#include "run/sweep.h"

#include <algorithm>
#include <fmt/format.h>

#include "errors.h"
#include "numeric/arith.h"
#include "numeric/format.h"
#include "cpu/eager.h"
#include "cpu/replay.h"
#include "metrics/traffic.h"

namespace rssm {

const std::string& RunSpec::get(const std::string& key) const {
  for (const auto& [k, v] : params)
    if (k == key) return v;
  throw InternalError("run parameter missing: " + key);
}

namespace {

// Which decoders a scheme key means something to. For the others, only the key's first listed value runs (the
// rest would repeat the same run) and the duplicates are skipped with a reason.
struct KeyUse {
  const char* key;
  std::vector<std::string> decoders;
  bool gdn_only;
};
const KeyUse kUses[] = {
    {"read_format", {"dual"}, false},       {"buffer_format", {"replay", "dual"}, false},
    {"interval", {"replay", "dual"}, false}, {"buffer_len", {"replay", "dual"}, false},
    {"dot_arith", {"replay", "dual"}, false}, {"flush_arith", {"replay", "dual"}, false},
    {"route", {"replay", "dual"}, true},
};

const std::vector<std::string> kDecoders = {"eager", "replay", "dual"};

[[noreturn]] void bad_value(const std::string& key, const std::string& v, const std::string& what) {
  throw ConfigError(fmt::format("config key 'scheme.{}': {} (got '{}')", key, what, v));
}

long long to_int(const std::string& key, const std::string& v, long long lo, long long hi) {
  size_t pos = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &pos);
  } catch (const std::exception&) {
    bad_value(key, v, fmt::format("expected an integer in [{}, {}]", lo, hi));
  }
  if (pos != v.size() || x < lo || x > hi) bad_value(key, v, fmt::format("expected an integer in [{}, {}]", lo, hi));
  return x;
}

void check_value(const std::string& key, const std::string& v) {
  auto wrap = [&](auto fn) {
    try {
      fn();
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("config key 'scheme.{}': {}", key, e.what()));
    }
  };
  if (key == "decoder") {
    if (std::find(kDecoders.begin(), kDecoders.end(), v) == kDecoders.end())
      bad_value(key, v, "expected one of eager, replay, dual");
  } else if (key == "state_format" || key == "read_format" || key == "buffer_format" || key == "act_format") {
    wrap([&] { parse_format(v); });
    if (key == "act_format" && v != "fp32" && v != "bf16" && v != "fp16")
      bad_value(key, v, "activations are fp32, bf16 or fp16");
    if (key == "buffer_format" && v != "fp64" && v != "fp32" && v != "bf16" && v != "fp16")
      bad_value(key, v, "buffers are fp64, fp32, bf16 or fp16 (no scales)");
    if (v == "tf32" && key != "state_format") bad_value(key, v, "tf32 is an arithmetic, not a storage format here");
  } else if (key == "dot_arith" || key == "flush_arith") {
    wrap([&] { parse_arith(v); });
  } else if (key == "rounding") {
    wrap([&] { parse_rounding(v); });
  } else if (key == "route") {
    wrap([&] { parse_gdn_route(v); });
  } else if (key == "interval") {
    to_int(key, v, 1, kMaxInterval);
  } else if (key == "buffer_len") {
    to_int(key, v, 0, 1 << 20);
  }
}

// Why a combination cannot run, or "" when it can. Value-by-value checks happen before this.
std::string combination_problem(const RunSpec& s) {
  const std::string& dec = s.get("decoder");
  const Format sf = parse_format(s.get("state_format"));
  if (dec == "eager" && sf != Format::FP64 && sf != Format::FP32 && sf != Format::BF16 && sf != Format::FP16)
    return fmt::format("eager decoding keeps no scales, so state_format {} is not supported (fp64, fp32, bf16, fp16)",
                       format_name(sf));
  if (sf == Format::TF32) return "tf32 is an arithmetic, not a state format";
  if (dec != "eager") {
    const int interval = std::stoi(s.get("interval"));
    const int blen = std::stoi(s.get("buffer_len"));
    if (blen != 0 && blen < interval)
      return fmt::format("buffer_len {} is less than interval {} (the buffer must hold a whole interval)", blen,
                         interval);
  }
  if (dec == "dual") {
    const Format rf = parse_format(s.get("read_format"));
    if (rf == sf) return fmt::format("a dual read copy in the update format ({}) is the shared replay checkpoint",
                                     format_name(rf));
    if (format_bytes(rf) >= format_bytes(sf))
      return fmt::format("the dual read copy ({}) must be narrower than the update copy ({})", format_name(rf),
                         format_name(sf));
  }
  if (parse_rounding(s.get("rounding")) == Rounding::Stochastic && dec == "eager" && sf == Format::FP64)
    return "stochastic rounding of an fp64 state does nothing";
  return "";
}

}  // namespace

std::vector<RunSpec> expand_sweep(const Config& cfg, Family family) {
  std::vector<std::pair<std::string, std::vector<std::string>>> axes;
  for (const auto& k : config_keys()) {
    if (!k.sweep) continue;
    const std::string name = k.key.substr(k.key.find('.') + 1);
    auto vals = cfg.list(k.key);
    for (const auto& v : vals) check_value(name, v);
    axes.emplace_back(name, vals);
  }
  long long points = 1;
  std::string sizes;
  for (const auto& [name, vals] : axes) {
    points *= static_cast<long long>(vals.size());
    if (vals.size() > 1) sizes += fmt::format("{}scheme.{} ({})", sizes.empty() ? "" : " x ", name, vals.size());
    if (points > kMaxSweepPoints)
      throw ConfigError(fmt::format("the sweep {} has more than {} points: shorten these lists", sizes, kMaxSweepPoints));
  }
  std::vector<RunSpec> out;
  std::vector<size_t> idx(axes.size(), 0);
  while (true) {
    RunSpec s;
    s.index = static_cast<int>(out.size());
    s.id = fmt::format("run_{:04d}", s.index);
    for (size_t a = 0; a < axes.size(); ++a) s.params.emplace_back(axes[a].first, axes[a].second[idx[a]]);
    // Keys that do not apply to this decoder (or family) run only at their first value.
    const std::string& dec = s.get("decoder");
    for (size_t a = 0; a < axes.size() && s.skip_reason.empty(); ++a)
      for (const auto& u : kUses)
        if (axes[a].first == u.key && idx[a] != 0) {
          const bool applies = std::find(u.decoders.begin(), u.decoders.end(), dec) != u.decoders.end() &&
                               (!u.gdn_only || family == Family::GDN);
          if (!applies)
            s.skip_reason = fmt::format("{} does not apply to {}{} (only its first value runs)", u.key, dec,
                                        u.gdn_only && family != Family::GDN ? " on Mamba-2" : "");
        }
    if (s.skip_reason.empty()) s.skip_reason = combination_problem(s);
    out.push_back(std::move(s));
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

std::unique_ptr<Decoder> make_decoder(const RunSpec& s, uint64_t seed) {
  const std::string& dec = s.get("decoder");
  const Format sf = parse_format(s.get("state_format"));
  const Rounding rnd = parse_rounding(s.get("rounding"));
  if (dec == "eager") return std::make_unique<EagerDecoder>(sf, rnd, seed);
  ReplayOptions o;
  o.interval = std::stoi(s.get("interval"));
  o.buffer_len = std::stoi(s.get("buffer_len"));
  o.update_format = sf;
  o.dual = dec == "dual";
  o.read_format = parse_format(s.get("read_format"));
  o.buffer_format = parse_format(s.get("buffer_format"));
  o.dot_arith = parse_arith(s.get("dot_arith"));
  o.flush_arith = parse_arith(s.get("flush_arith"));
  o.rounding = rnd;
  o.seed = seed;
  o.route = parse_gdn_route(s.get("route"));
  return std::make_unique<ReplayDecoder>(o);
}

TrafficParams traffic_params(const RunSpec& s, int batch) {
  TrafficParams t;
  const std::string& dec = s.get("decoder");
  t.scheme = dec;
  t.state_bytes = format_bytes(parse_format(s.get("state_format")));
  t.act_bytes = format_bytes(parse_format(s.get("act_format")));
  t.batch = batch;
  if (dec != "eager") {
    t.buffer_bytes = format_bytes(parse_format(s.get("buffer_format")));
    t.interval = std::stoi(s.get("interval"));
    t.buffer_len = std::stoi(s.get("buffer_len"));
  }
  if (dec == "dual") t.read_bytes = format_bytes(parse_format(s.get("read_format")));
  t.label = dec == "dual" ? s.get("state_format") + "/" + s.get("read_format") : s.get("state_format");
  return t;
}

}  // namespace rssm
