#include "run/sweep.h"

#include <algorithm>
#include <map>
#include <fmt/format.h>

#include "errors.h"
#include "numeric/format.h"
#include "run/factory.h"

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

// Why a combination cannot run, or "" when it can. Value-by-value checks happen before this; the backend's own
// limits come last, so a point that is wrong on every backend says so rather than "no CUDA"; they depend on the
// layer's family (each family has its own kernels).
std::string combination_problem(const Scheme& s, Family family) {
  const Format sf = s.state_format;
  if (s.decoder == DecoderKind::Eager && sf != Format::FP64 && sf != Format::FP32 && sf != Format::BF16 &&
      sf != Format::FP16)
    return fmt::format("eager decoding keeps no scales, so state_format {} is not supported (fp64, fp32, bf16, fp16)",
                       format_name(sf));
  if (sf == Format::TF32) return "tf32 is an arithmetic, not a state format";
  if (s.replays() && s.buffer_len != 0 && s.buffer_len < s.interval)
    return fmt::format("buffer_len {} is less than interval {} (the buffer must hold a whole interval)", s.buffer_len,
                       s.interval);
  if (s.dual()) {
    const Format rf = s.read_format;
    if (rf == sf) return fmt::format("a dual read copy in the update format ({}) is the shared replay checkpoint",
                                     format_name(rf));
    if (format_bytes(rf) >= format_bytes(sf))
      return fmt::format("the dual read copy ({}) must be narrower than the update copy ({})", format_name(rf),
                         format_name(sf));
  }
  if (s.speculative()) {
    if (s.acceptance.kind == Acceptance::Kind::Fixed && s.acceptance.fixed > s.window)
      return fmt::format("spec.acceptance {} commits more tokens than a window of {} holds", s.acceptance.text(),
                         s.window);
    if (s.replays() && s.buffer_len != 0 && s.buffer_len < s.interval + s.window)
      return fmt::format("a speculative ring of buffer_len {} cannot hold an interval ({}) plus a window ({})",
                         s.buffer_len, s.interval, s.window);
  }
  if (s.rounding == Rounding::Stochastic && s.decoder == DecoderKind::Eager && sf == Format::FP64)
    return "stochastic rounding of an fp64 state does nothing";
  return backend_unavailable_reason(s, family);
}

}  // namespace

bool integer_sweep_key(const std::string& key) {
  static const char* const kKeys[] = {"interval", "buffer_len", "batch", "seed", "seeds", "window"};
  for (const char* k : kKeys)
    if (key == k) return true;
  return false;
}

std::vector<RunSpec> expand_sweep(const Config& cfg, Family family) {
  std::vector<std::pair<std::string, std::vector<std::string>>> axes;
  for (const auto& k : config_keys()) {
    if (!k.sweep) continue;
    const std::string name = k.key.substr(k.key.find('.') + 1);
    auto vals = cfg.list(k.key);
    for (const auto& v : vals) check_scheme_value(name, v);
    axes.emplace_back(name, vals);
  }
  long long points = 1;
  std::string sizes;
  for (const auto& [name, vals] : axes) {
    points *= static_cast<long long>(vals.size());
    if (vals.size() > 1) sizes += fmt::format("{}{} ({})", sizes.empty() ? "" : " x ", scheme_config_key(name), vals.size());
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
    s.scheme = parse_scheme(s.params);
    // Keys that do not apply to this decoder (or family) run only at their first value.
    const std::string dec = decoder_kind_name(s.scheme.decoder);
    for (size_t a = 0; a < axes.size() && s.skip_reason.empty(); ++a)
      for (const auto& u : kUses)
        if (axes[a].first == u.key && idx[a] != 0) {
          const bool applies = std::find(u.decoders.begin(), u.decoders.end(), dec) != u.decoders.end() &&
                               (!u.gdn_only || family == Family::GDN);
          if (!applies)
            s.skip_reason = fmt::format("{} does not apply to {}{} (only its first value runs)", u.key, dec,
                                        u.gdn_only && family != Family::GDN ? " on Mamba-2" : "");
        }
    for (size_t a = 0; a < axes.size() && s.skip_reason.empty(); ++a)
      if (axes[a].first == "acceptance" && idx[a] != 0 && !s.scheme.speculative())
        s.skip_reason = "spec.acceptance does not apply without spec.window (only its first value runs)";
    if (s.skip_reason.empty()) s.skip_reason = combination_problem(s.scheme, family);
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

std::string twin_key(const Scheme& s) { return fmt::format("{}/{}", s.with_backend(Backend::Cpu).name(), s.buffer_len); }

std::vector<int> backend_twins(const std::vector<Scheme>& schemes) {
  std::map<std::string, int> cpu_of;
  for (size_t i = 0; i < schemes.size(); ++i)
    if (schemes[i].backend == Backend::Cpu) cpu_of.emplace(twin_key(schemes[i]), static_cast<int>(i));
  std::vector<int> twin(schemes.size(), -1);
  for (size_t i = 0; i < schemes.size(); ++i)
    if (schemes[i].backend != Backend::Cpu) {
      const auto it = cpu_of.find(twin_key(schemes[i]));
      if (it != cpu_of.end()) twin[i] = it->second;
    }
  return twin;
}

}  // namespace rssm
