#include "numeric/arith.h"

#include <fmt/format.h>

#include "errors.h"

namespace rssm {

std::string arith_name(Arith a) {
  switch (a) {
    case Arith::FP64: return "fp64";
    case Arith::FP32: return "fp32";
    case Arith::TF32: return "tf32";
    case Arith::TF32x3: return "3xtf32";
    case Arith::BF16: return "bf16";
  }
  return "?";
}

Arith parse_arith(const std::string& name) {
  for (Arith a : {Arith::FP64, Arith::FP32, Arith::TF32, Arith::TF32x3, Arith::BF16})
    if (arith_name(a) == name) return a;
  throw ConfigError(fmt::format("unknown arithmetic '{}' (accepted: fp64, fp32, tf32, 3xtf32, bf16)", name));
}

}  // namespace rssm
