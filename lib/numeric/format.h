// Number formats a run can choose at run time, and exact rounding into them.
// Values are carried in float (every format here is a subset of fp32 values, int8 after scaling); rounding
// returns the float that the format's bit pattern decodes to, so CPU emulation and GPU kernels agree bit for bit.
// Not here: block scales (numeric/scaled.h), the stochastic-rounding generator (numeric/philox.h).
#pragma once

#include <cstddef>
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
  E5M2,  // fp8, IEEE-like (has ±inf and NaN), but finite overflow saturates to ±57344: see "Rules" below
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

// ---- Rules (implemented in numeric/rounding.cpp on top of numeric/bits.h, which kernels include directly) ----
//
// Grids. tf32: fp32 with 10 explicit mantissa bits. bf16: 7 bits, fp32's exponent range (subnormals like fp32's).
// fp16: IEEE binary16, 10 bits, bias 15, subnormal step 2^-24. e4m3: OCP FP8 E4M3FN, 3 bits, bias 7, subnormal
// step 2^-9, max 448, no infinities, NaN = S.1111.111 only. e5m2: 2 bits, bias 15, subnormal step 2^-16,
// max 57344, ±inf and NaN. int8: the integers -127..127 (the code -128 is the NaN code).
//
// Nearest: the nearest grid value, ties to the even code (even last mantissa bit; for int8, the even integer).
// Signs are kept, -0 included (int8 has only +0). NaN -> a quiet NaN (canonical, sign kept; payload dropped).
// Overflow, for values beyond the largest finite magnitude max:
//   bf16, tf32, fp16: IEEE, to ±inf when |x| rounds past max (fp16: |x| >= 65520); ±inf stays ±inf.
//   e4m3: saturates: every |x| > 448, ±inf included, gives ±448.
//   e5m2: saturates finite values to ±57344, and ±inf stays ±inf. Saturation, not IEEE's overflow to inf, because
//         e5m2 here stores scaled read copies: a value past max means a scale slightly too small, and ±57344 is
//         the nearer answer; a real infinity in the state is a bug we want to see, so it stays inf.
//   int8: saturates to ±127 (±inf too).
//
// Stochastic, with 32 random bits r: let lo <= |x| < hi be the grid neighbours of |x| (exponent unbounded above)
// and frac = (|x| - lo) / (hi - lo). Let F = floor(2^32 * frac). The magnitude becomes hi iff F + r >= 2^32
// (the carry out of a 32-bit add), else lo; then the sign and the overflow rule above apply (e4m3/e5m2/int8
// saturate; bf16/tf32/fp16 go to inf when hi is past max). So P(hi) = F / 2^32 = frac exactly whenever at most 32
// bits are dropped: for every fp32 input in a format's normal range, and below it while x's fp32 ulp is at least
// 2^-32 of the grid step 2^q, i.e. |x| >= 2^(q - 9). Smaller fp32 inputs, and double inputs (53 bits), have frac
// truncated to 32 bits: P(hi) is low by less than 2^-32.
// Values on the grid map to themselves for every r. As operations on the fp32 bit pattern u of |x|:
//   bf16 (all of it, fp32 subnormals included): u += r >> 16, then clear the low 16 bits.
//   tf32 (all of it): u += r >> 19, clear 13.   fp16 normal range (|x| >= 2^-14): u += r >> 19, clear 13.
//   e4m3 normal range (|x| >= 2^-6): u += r >> 12, clear 20.
//   e5m2 normal range (|x| >= 2^-14): u += r >> 11, clear 21.
//   Below the normal range (and int8 everywhere, after clamping |x| to 127): |x| = sig * 2^e, where sig is the
//   significand with its hidden bit (e = biased exponent - 150; sig = the fraction and e = -149 for fp32
//   subnormals); with grid step 2^q (fp16 q = -24, e4m3 -9, e5m2 -16, int8 0) and s = q - e >= 1 bits dropped:
//   k = (sig >> s) + carry (sig >> s is 0 when s >= 24), carry = (F + r) >> 32 in 64-bit arithmetic,
//   F = (sig mod 2^s) << (32 - s) if s <= 32, else (sig mod 2^s) >> (s - 32); the result is k * 2^q.
//
// fp32 and fp64 are identities in round_nearest and round_stochastic.

// Rounds a double directly into f with one rounding (same rules as above; FP64 returns x, FP32 gives (float)x).
// Going through float first (double -> float -> f) rounds twice and can differ: a double just above a midpoint of
// f's grid can round to the midpoint in float, which then ties to even, in the wrong direction.
double round_nearest_double(Format f, double x);
// Stochastic rounding of a double directly into f, same rule (F uses the top 32 bits of the exact fraction).
double round_stochastic_double(Format f, double x, uint32_t r);

// In-place rounding of n values, dispatched once per call so the loop is the inlined bit-level rounding.
void round_nearest_inplace(Format f, float* x, size_t n);
// The double variant rounds each x[i] with round_nearest_double: a single rounding, not double -> float -> f
// (a double -> float conversion is itself round-to-nearest-even, so that path would round twice). The results are
// values of f, hence exactly representable in float (FP64 leaves x unchanged).
void round_nearest_inplace(Format f, double* x, size_t n);
// r[i]: the random bits for x[i].
void round_stochastic_inplace(Format f, float* x, size_t n, const uint32_t* r);
void round_stochastic_inplace(Format f, double* x, size_t n, const uint32_t* r);

// Largest finite value of f (FP64: DBL_MAX; INT8: 127).
double format_max(Format f);

}  // namespace rssm
