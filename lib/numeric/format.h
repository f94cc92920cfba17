// Number formats a run can choose at run time, and exact rounding into them.
// Values are carried in float (every format here is a subset of fp32 values, int8 after scaling); rounding
// returns the float that the format's bit pattern decodes to, so CPU emulation and GPU kernels agree bit for bit.
// Not here: block scales (numeric/scaled.h), the stochastic-rounding generator (numeric/philox.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rssm {

enum class Format {
  FP64,  // no rounding at all (values stay double where the caller keeps double)
  FP32,
  TF32,  // 1-8-10: fp32 with the low 13 mantissa bits rounded away (tensor-core operand format)
  BF16,
  FP16,
  E4M3,  // fp8, saturating: no infinities, overflow goes to ±448, NaN stays NaN
  E5M2,  // fp8, IEEE-like: overflow to ±inf under nearest rounding... see round_to() for the saturating choice
  INT8,  // symmetric int8 with a caller-supplied scale (see numeric/scaled.h)
};

enum class Rounding { Nearest, Stochastic };

std::string format_name(Format f);            // "fp64", "fp32", "tf32", "bf16", "fp16", "e4m3", "e5m2", "int8"
Format parse_format(const std::string& name);  // throws ConfigError listing the accepted names
std::string rounding_name(Rounding r);         // "nearest", "stochastic"
Rounding parse_rounding(const std::string& name);
int format_bytes(Format f);  // storage bytes per element: 8, 4, 4, 2, 2, 1, 1, 1

// Round-to-nearest-even into f (FP64 and FP32 return x). int8 rounds x to an integer in [-127, 127].
float round_nearest(Format f, float x);
// Stochastic rounding into f with 32 random bits r: rounds up with probability equal to the distance from the
// round-down value in units of the last place, so E[result] = x (up to saturation).
float round_stochastic(Format f, float x, uint32_t r);

}  // namespace rssm
