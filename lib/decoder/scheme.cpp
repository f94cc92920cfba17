#include "decoder/scheme.h"

#include <cctype>
#include <fmt/format.h>

#include "errors.h"

namespace rssm {

std::string backend_name(Backend b) { return b == Backend::Cuda ? "cuda" : "cpu"; }

Backend parse_backend(const std::string& s) {
  if (s == "cpu") return Backend::Cpu;
  if (s == "cuda") return Backend::Cuda;
  throw ConfigError(fmt::format("unknown backend '{}' (cpu, cuda)", s));
}

std::string decoder_kind_name(DecoderKind k) {
  switch (k) {
    case DecoderKind::Eager: return "eager";
    case DecoderKind::Replay: return "replay";
    default: return "dual";
  }
}

DecoderKind parse_decoder_kind(const std::string& s) {
  if (s == "eager") return DecoderKind::Eager;
  if (s == "replay") return DecoderKind::Replay;
  if (s == "dual") return DecoderKind::Dual;
  throw ConfigError(fmt::format("unknown decoder '{}' (eager, replay, dual)", s));
}

std::string gdn_route_name(GdnRoute r) { return r == GdnRoute::Inner ? "inner" : "reconstruct"; }

GdnRoute parse_gdn_route(const std::string& s) {
  if (s == "inner") return GdnRoute::Inner;
  if (s == "reconstruct") return GdnRoute::Reconstruct;
  throw ConfigError(fmt::format("unknown GDN route '{}' (inner, reconstruct)", s));
}

std::string Scheme::label() const {
  std::string l = decoder_kind_name(decoder) + "-" + format_name(state_format);
  if (dual()) l += "+" + format_name(read_format);
  if (replays()) l += fmt::format("-K{}", interval);
  // Arithmetic other than fp32 changes the numbers, so two such points must not share a label in a table.
  if (replays() && dot_arith != Arith::FP32) l += "-dot_" + arith_name(dot_arith);
  if (replays() && flush_arith != Arith::FP32) l += "-flush_" + arith_name(flush_arith);
  if (rounding == Rounding::Stochastic) l += "-sr";
  if (speculative()) l += fmt::format("-T{}", window);
  return backend == Backend::Cpu ? l : backend_name(backend) + ":" + l;
}

std::string Scheme::decoder_name() const {
  std::string n = backend_name(backend) + ":" + decoder_kind_name(decoder) + "-" + format_name(state_format);
  if (dual()) n += "+" + format_name(read_format);
  if (replays())
    n += fmt::format("-K{}-buf_{}-dot_{}-flush_{}-route_{}", interval, format_name(buffer_format),
                     arith_name(dot_arith), arith_name(flush_arith), gdn_route_name(route));
  n += rounding == Rounding::Stochastic ? "-sr" : "-rn";
  n += "-out_" + format_name(out_format);
  if (speculative())
    n += replays() ? fmt::format("-spec_T{}_L{}_{}", window, spec_hist(), acceptance.text())
                   : fmt::format("-spec_T{}_{}", window, acceptance.text());
  return n;
}

std::string Scheme::name() const { return decoder_name() + "-act_" + format_name(act_format); }

std::string scheme_config_key(const std::string& key) {
  return key == "window" || key == "acceptance" ? "spec." + key : "scheme." + key;
}

namespace {

[[noreturn]] void bad_value(const std::string& key, const std::string& v, const std::string& what) {
  throw ConfigError(fmt::format("config key '{}': {} (got '{}')", scheme_config_key(key), what, v));
}

long long to_int(const std::string& key, const std::string& v, long long lo, long long hi) {
  long long x = 0;
  size_t pos = 0;
  bool ok = !v.empty() && (std::isdigit(static_cast<unsigned char>(v[0])) || v[0] == '-');
  if (ok) {
    try {
      x = std::stoll(v, &pos);
    } catch (const std::exception&) {
      ok = false;
    }
  }
  if (!ok || pos != v.size() || x < lo || x > hi)
    bad_value(key, v, fmt::format("expected an integer in [{}, {}]", lo, hi));
  return x;
}

// Runs a parser, prefixing its ConfigError with the key.
template <class Fn>
auto keyed(const std::string& key, Fn fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("config key '{}': {}", scheme_config_key(key), e.what()));
  }
}

Format storage_format(const std::string& key, const std::string& v) {
  const Format f = keyed(key, [&] { return parse_format(v); });
  if (f == Format::TF32 && key != "state_format") bad_value(key, v, "tf32 is an arithmetic, not a storage format here");
  const bool plain = f == Format::FP64 || f == Format::FP32 || f == Format::BF16 || f == Format::FP16;
  if (key == "act_format" && !(plain && f != Format::FP64)) bad_value(key, v, "activations are fp32, bf16 or fp16");
  if (key == "buffer_format" && !plain) bad_value(key, v, "buffers are fp64, fp32, bf16 or fp16 (no scales)");
  if (key == "out_format" && !plain) bad_value(key, v, "outputs are fp64, fp32, bf16 or fp16 (no scales)");
  return f;
}

void apply(Scheme& s, const std::string& key, const std::string& v) {
  if (key == "backend") s.backend = keyed(key, [&] { return parse_backend(v); });
  else if (key == "decoder") s.decoder = keyed(key, [&] { return parse_decoder_kind(v); });
  else if (key == "state_format") s.state_format = storage_format(key, v);
  else if (key == "read_format") s.read_format = storage_format(key, v);
  else if (key == "buffer_format") s.buffer_format = storage_format(key, v);
  else if (key == "act_format") s.act_format = storage_format(key, v);
  else if (key == "out_format") s.out_format = storage_format(key, v);
  else if (key == "dot_arith") s.dot_arith = keyed(key, [&] { return parse_arith(v); });
  else if (key == "flush_arith") s.flush_arith = keyed(key, [&] { return parse_arith(v); });
  else if (key == "rounding") s.rounding = keyed(key, [&] { return parse_rounding(v); });
  else if (key == "route") s.route = keyed(key, [&] { return parse_gdn_route(v); });
  else if (key == "interval") s.interval = static_cast<int>(to_int(key, v, 1, kMaxSchemeInterval));
  else if (key == "buffer_len") s.buffer_len = static_cast<int>(to_int(key, v, 0, kMaxSchemeBufferLen));
  else if (key == "window") s.window = static_cast<int>(to_int(key, v, 0, kMaxSchemeWindow));
  else if (key == "acceptance") s.acceptance = keyed(key, [&] { return parse_acceptance(v); });
  else throw InternalError("scheme key not known to parse_scheme: " + key);
}

}  // namespace

void check_scheme_value(const std::string& key, const std::string& value) {
  Scheme s;
  apply(s, key, value);
}

Scheme parse_scheme(const std::vector<std::pair<std::string, std::string>>& params) {
  Scheme s;
  for (const auto& [k, v] : params) apply(s, k, v);
  return s;
}

}  // namespace rssm
