#include "numeric/format.h"

#include <fmt/format.h>

#include "errors.h"

namespace rssm {

namespace {
struct FormatInfo {
  Format f;
  const char* name;
  int bytes;
};
const FormatInfo kFormats[] = {
    {Format::FP64, "fp64", 8}, {Format::FP32, "fp32", 4}, {Format::TF32, "tf32", 4}, {Format::BF16, "bf16", 2},
    {Format::FP16, "fp16", 2}, {Format::E4M3, "e4m3", 1}, {Format::E5M2, "e5m2", 1}, {Format::INT8, "int8", 1},
};
}  // namespace

std::string format_name(Format f) {
  for (const auto& i : kFormats)
    if (i.f == f) return i.name;
  return "?";
}

Format parse_format(const std::string& name) {
  for (const auto& i : kFormats)
    if (name == i.name) return i.f;
  std::vector<std::string> names;
  for (const auto& i : kFormats) names.emplace_back(i.name);
  throw ConfigError(fmt::format("unknown number format '{}' (accepted: {})", name, fmt::join(names, ", ")));
}

int format_bytes(Format f) {
  for (const auto& i : kFormats)
    if (i.f == f) return i.bytes;
  return 0;
}

std::string rounding_name(Rounding r) { return r == Rounding::Nearest ? "nearest" : "stochastic"; }

Rounding parse_rounding(const std::string& name) {
  if (name == "nearest") return Rounding::Nearest;
  if (name == "stochastic") return Rounding::Stochastic;
  throw ConfigError(fmt::format("unknown rounding '{}' (accepted: nearest, stochastic)", name));
}

}  // namespace rssm
