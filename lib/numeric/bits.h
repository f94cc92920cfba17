// Bit-level rounding, encoding and decoding of the narrow number formats, shared by CPU emulation and CUDA kernels.
// Every function is a pure integer function of the fp32 bit pattern (plus 32 random bits for stochastic rounding),
// so the result does not depend on the floating-point environment (rounding mode, flush-to-zero, fast-math):
// a kernel that calls these functions reproduces the CPU emulation bit for bit.
// Not here: the run-time Format dispatch, double inputs and the vector helpers (numeric/format.h), block scales
// (numeric/scaled.h), the random bits (numeric/philox.h). Tested by tests/test_numeric.cpp ("[numeric]").
//
// Conventions of every format here (the precise rules, in numeric/format.h, are the contract):
// - nearest rounding is round-to-nearest, ties to even, including in the subnormal range of each format;
// - stochastic rounding rounds the magnitude away from zero iff F + r >= 2^32, where F = floor(2^32 * frac),
//   frac = (|x| - lo) / (hi - lo) for the grid neighbours lo <= |x| < hi, and r is the caller's 32 random bits;
// - a NaN input gives the canonical quiet NaN of the format with the input's sign (payloads are not kept; int8
//   has one NaN code, -128, which decodes to +NaN);
// - overflow: bf16, tf32, fp16 follow IEEE (to inf); e4m3 saturates finite values and infinities to ±448;
//   e5m2 saturates finite values to ±57344 but keeps ±inf; int8 saturates to ±127.
#pragma once

#include <cstdint>
#include <cstring>

#include "numeric/hd.h"

namespace rssm {

RSSM_HD inline uint32_t f32_to_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

RSSM_HD inline float bits_to_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// Largest finite magnitudes as fp32 bit patterns (and values).
constexpr uint32_t kFp32InfBits = 0x7F800000u;
constexpr uint32_t kFp16MaxBits = 0x477FE000u;  // 65504 = (2 - 2^-10) * 2^15
constexpr uint32_t kE4M3MaxBits = 0x43E00000u;  // 448 = 1.75 * 2^8 (exponent field 15 is finite in E4M3FN)
constexpr uint32_t kE5M2MaxBits = 0x47600000u;  // 57344 = 1.75 * 2^15
constexpr uint32_t kInt8MaxBits = 0x42FE0000u;  // 127
constexpr float kFp16Max = 65504.0f;
constexpr float kE4M3Max = 448.0f;
constexpr float kE5M2Max = 57344.0f;
constexpr float kInt8Max = 127.0f;

namespace detail {

// A binary format is described by M (explicit mantissa bits) and EMIN (unbiased exponent of its smallest normal
// number); its grid below 2^EMIN is uniform with step 2^(EMIN - M). int8 magnitudes up to 127 are the subnormal
// range of M = 7, EMIN = 7 (step 1), which lets one routine serve every format. The exponent is unbounded above:
// overflow is each format's own rule, applied afterwards.

RSSM_HD inline uint32_t sign_of(uint32_t u) { return u & 0x80000000u; }
RSSM_HD inline uint32_t quiet_nan_bits(uint32_t sign) { return sign | 0x7FC00000u; }

// k * 2^e as fp32 bits, for 0 <= k < 2^24 and a normal result: built from integer-to-float conversion (exact) and
// an exponent add, so no floating-point multiply (and no flush-to-zero mode) is involved.
// Zero is masked rather than branched on: whether a small value rounds to 0 is data-dependent and unpredictable.
RSSM_HD inline uint32_t int_times_pow2_bits(uint32_t k, int e) {
  return (f32_to_bits(static_cast<float>(k)) + static_cast<uint32_t>(e * (1 << 23))) & (0u - (k != 0));
}

// k = sig / 2^s rounded to nearest, ties to even; s >= 1, sig < 2^53 (so every s > 62 gives 0).
RSSM_HD inline uint64_t shift_rne(uint64_t sig, int s) {
  if (s > 62) return 0;
  const uint64_t k = sig >> s;
  const uint64_t rem = sig & ((uint64_t{1} << s) - 1);
  const uint64_t half = uint64_t{1} << (s - 1);
  return k + static_cast<uint64_t>((rem > half) | ((rem == half) & (k & 1)));
}

// k = sig / 2^s rounded stochastically: F = floor(2^32 * rem / 2^s), up iff F + r >= 2^32. F is exact whenever
// s <= 32; beyond that the fraction is truncated to 32 bits (a bias below 2^-32 of a grid step). s >= 0.
RSSM_HD inline uint64_t shift_sr(uint64_t sig, int s, uint32_t r) {
  const uint64_t k = s < 64 ? sig >> s : 0;
  const uint64_t rem = s < 64 ? sig & ((uint64_t{1} << s) - 1) : sig;
  const uint64_t F = s <= 32 ? rem << (32 - s) : (s < 96 ? rem >> (s - 32) : 0);
  return k + ((F + r) >> 32);
}

// Significand (hidden bit included) and shift for |x| = sig * 2^(effE - 150) onto the grid step 2^(EMIN - M).
template <int M, int EMIN>
RSSM_HD inline void below_normal(uint32_t a, uint32_t& sig, int& s) {
  const int E = static_cast<int>(a >> 23);
  sig = E ? (a & 0x7FFFFFu) | 0x800000u : a;
  s = (EMIN - M) + 150 - (E ? E : 1);
}

// Rounded magnitude (fp32 bits) of a = |x| bits, a not NaN; infinity stays infinity.
// In the format's normal range the grid is the fp32 pattern with its low 23 - M bits cleared, so rounding is an
// integer add on the pattern whose carry runs into the exponent; formats with fp32's exponent range (bf16, tf32)
// take this path also for fp32 subnormals, where the pattern grid is still uniform.
template <int M, int EMIN>
RSSM_HD inline uint32_t rne_magnitude(uint32_t a) {
  constexpr int S = 23 - M;
  constexpr uint32_t kMinNormal = static_cast<uint32_t>(EMIN + 127) << 23;
  if (EMIN <= -126 || a >= kMinNormal) {
    return (a + ((1u << (S - 1)) - 1u) + ((a >> S) & 1u)) & ~((1u << S) - 1u);
  }
  uint32_t sig;
  int s;
  below_normal<M, EMIN>(a, sig, s);
  return int_times_pow2_bits(static_cast<uint32_t>(shift_rne(sig, s)), EMIN - M);
}

template <int M, int EMIN>
RSSM_HD inline uint32_t sr_magnitude(uint32_t a, uint32_t r) {
  constexpr int S = 23 - M;
  constexpr uint32_t kMinNormal = static_cast<uint32_t>(EMIN + 127) << 23;
  if (EMIN <= -126 || a >= kMinNormal) {
    // The S dropped bits are the fraction in units of 2^-S; adding the top S bits of r carries exactly when
    // F + r >= 2^32 (F = dropped bits << (32 - S)). Infinity: the add stays below the next exponent.
    return (a + (r >> (32 - S))) & ~((1u << S) - 1u);
  }
  uint32_t sig;
  int s;
  below_normal<M, EMIN>(a, sig, s);
  return int_times_pow2_bits(static_cast<uint32_t>(shift_sr(sig, s, r)), EMIN - M);
}

// Code (without sign) of an on-grid finite magnitude a (fp32 bits) in a format with bias 1 - EMIN.
template <int M, int EMIN>
RSSM_HD inline uint32_t encode_magnitude(uint32_t a) {
  constexpr uint32_t kMinNormal = static_cast<uint32_t>(EMIN + 127) << 23;
  if (a >= kMinNormal) return (a - (static_cast<uint32_t>(EMIN + 126) << 23)) >> (23 - M);
  if (a == 0) return 0;
  uint32_t sig;
  int s;
  below_normal<M, EMIN>(a, sig, s);  // on-grid nonzero: 1 <= s <= 23, exact shift
  return sig >> s;
}

// Magnitude (fp32 bits) of a finite code without sign.
template <int M, int EMIN>
RSSM_HD inline uint32_t decode_magnitude(uint32_t c) {
  const uint32_t e = c >> M, m = c & ((1u << M) - 1u);
  if (e) return ((e + static_cast<uint32_t>(EMIN + 126)) << 23) | (m << (23 - M));
  return int_times_pow2_bits(m, EMIN - M);
}

// Post-rounding overflow rules on magnitudes (a: input magnitude, m: rounded magnitude).
RSSM_HD inline uint32_t fp16_overflow(uint32_t m) { return m > kFp16MaxBits ? kFp32InfBits : m; }
RSSM_HD inline uint32_t e4m3_saturate(uint32_t m) { return m > kE4M3MaxBits ? kE4M3MaxBits : m; }
RSSM_HD inline uint32_t e5m2_saturate(uint32_t a, uint32_t m) {
  return a == kFp32InfBits ? kFp32InfBits : (m > kE5M2MaxBits ? kE5M2MaxBits : m);
}

}  // namespace detail

// ---- Rounding to the value grid (float in, float out: the value the format's code decodes to). ----
// *_sr variants take 32 random bits r; see the rule at the top of this file and in numeric/format.h.

RSSM_HD inline float round_bf16(float x) {
  const uint32_t u = f32_to_bits(x), s = detail::sign_of(u), a = u ^ s;
  return bits_to_f32(a > kFp32InfBits ? detail::quiet_nan_bits(s) : s | detail::rne_magnitude<7, -126>(a));
}
RSSM_HD inline float round_bf16_sr(float x, uint32_t r) {
  const uint32_t u = f32_to_bits(x), s = detail::sign_of(u), a = u ^ s;
  return bits_to_f32(a > kFp32InfBits ? detail::quiet_nan_bits(s) : s | detail::sr_magnitude<7, -126>(a, r));
}

// tf32 (1-8-10) keeps fp32's exponent range. CUDA's cvt.rna.tf32.f32 (behind wmma::__float_to_tf32) rounds ties
// away from zero; this rounds ties to even, so kernels that must match the emulation call this function.
RSSM_HD inline float round_tf32(float x) {
  const uint32_t u = f32_to_bits(x), s = detail::sign_of(u), a = u ^ s;
  return bits_to_f32(a > kFp32InfBits ? detail::quiet_nan_bits(s) : s | detail::rne_magnitude<10, -126>(a));
}
RSSM_HD inline float round_tf32_sr(float x, uint32_t r) {
  const uint32_t u = f32_to_bits(x), s = detail::sign_of(u), a = u ^ s;
  return bits_to_f32(a > kFp32InfBits ? detail::quiet_nan_bits(s) : s | detail::sr_magnitude<10, -126>(a, r));
}

RSSM_HD inline float round_fp16(float x) {
  const uint32_t u = f32_to_bits(x), s = detail::sign_of(u), a = u ^ s;
  const uint32_t m = detail::fp16_overflow(detail::rne_magnitude<10, -14>(a));
  return bits_to_f32(a > kFp32InfBits ? detail::quiet_nan_bits(s) : s | m);
}
RSSM_HD inline float round_fp16_sr(float x, uint32_t r) {
  const uint32_t u = f32_to_bits(x), s = detail::sign_of(u), a = u ^ s;
  const uint32_t m = detail::fp16_overflow(detail::sr_magnitude<10, -14>(a, r));
  return bits_to_f32(a > kFp32InfBits ? detail::quiet_nan_bits(s) : s | m);
}

RSSM_HD inline float round_e4m3(float x) {
  const uint32_t u = f32_to_bits(x), s = detail::sign_of(u), a = u ^ s;
  const uint32_t m = detail::e4m3_saturate(detail::rne_magnitude<3, -6>(a));
  return bits_to_f32(a > kFp32InfBits ? detail::quiet_nan_bits(s) : s | m);
}
RSSM_HD inline float round_e4m3_sr(float x, uint32_t r) {
  const uint32_t u = f32_to_bits(x), s = detail::sign_of(u), a = u ^ s;
  const uint32_t m = detail::e4m3_saturate(detail::sr_magnitude<3, -6>(a, r));
  return bits_to_f32(a > kFp32InfBits ? detail::quiet_nan_bits(s) : s | m);
}

RSSM_HD inline float round_e5m2(float x) {
  const uint32_t u = f32_to_bits(x), s = detail::sign_of(u), a = u ^ s;
  const uint32_t m = detail::e5m2_saturate(a, detail::rne_magnitude<2, -14>(a));
  return bits_to_f32(a > kFp32InfBits ? detail::quiet_nan_bits(s) : s | m);
}
RSSM_HD inline float round_e5m2_sr(float x, uint32_t r) {
  const uint32_t u = f32_to_bits(x), s = detail::sign_of(u), a = u ^ s;
  const uint32_t m = detail::e5m2_saturate(a, detail::sr_magnitude<2, -14>(a, r));
  return bits_to_f32(a > kFp32InfBits ? detail::quiet_nan_bits(s) : s | m);
}

// ---- Codes. float_to_X_bits rounds (nearest or stochastic) and encodes; X_bits_to_float decodes exactly. ----

// bf16: the top half of the fp32 pattern; canonical NaN 0x7FC0 | sign.
RSSM_HD inline uint16_t float_to_bf16_bits(float x) { return static_cast<uint16_t>(f32_to_bits(round_bf16(x)) >> 16); }
RSSM_HD inline uint16_t float_to_bf16_bits_sr(float x, uint32_t r) {
  return static_cast<uint16_t>(f32_to_bits(round_bf16_sr(x, r)) >> 16);
}
RSSM_HD inline float bf16_bits_to_float(uint16_t b) { return bits_to_f32(static_cast<uint32_t>(b) << 16); }

// fp16 (IEEE binary16, bias 15, subnormals down to 2^-24); canonical NaN 0x7E00 | sign.
RSSM_HD inline uint16_t fp16_encode_value(float v) {  // v already on the fp16 grid (or inf/NaN)
  const uint32_t u = f32_to_bits(v), s = detail::sign_of(u) >> 16, a = u & 0x7FFFFFFFu;
  const uint32_t c = a > kFp32InfBits ? 0x7E00u : (a == kFp32InfBits ? 0x7C00u : detail::encode_magnitude<10, -14>(a));
  return static_cast<uint16_t>(s | c);
}
RSSM_HD inline uint16_t float_to_fp16_bits(float x) { return fp16_encode_value(round_fp16(x)); }
RSSM_HD inline uint16_t float_to_fp16_bits_sr(float x, uint32_t r) { return fp16_encode_value(round_fp16_sr(x, r)); }
RSSM_HD inline float fp16_bits_to_float(uint16_t b) {
  const uint32_t s = static_cast<uint32_t>(b & 0x8000u) << 16, c = b & 0x7FFFu;
  const uint32_t m = c >= 0x7C00u ? (c == 0x7C00u ? kFp32InfBits : 0x7FC00000u) : detail::decode_magnitude<10, -14>(c);
  return bits_to_f32(s | m);
}

// e4m3 (OCP FP8 E4M3FN, bias 7, subnormals down to 2^-9, max 448, no infinities, NaN only S.1111.111).
RSSM_HD inline uint8_t e4m3_encode_value(float v) {  // v already on the e4m3 grid (or NaN)
  const uint32_t u = f32_to_bits(v), s = detail::sign_of(u) >> 24, a = u & 0x7FFFFFFFu;
  return static_cast<uint8_t>(s | (a > kE4M3MaxBits ? 0x7Fu : detail::encode_magnitude<3, -6>(a)));
}
RSSM_HD inline uint8_t float_to_e4m3_bits(float x) { return e4m3_encode_value(round_e4m3(x)); }
RSSM_HD inline uint8_t float_to_e4m3_bits_sr(float x, uint32_t r) { return e4m3_encode_value(round_e4m3_sr(x, r)); }
RSSM_HD inline float e4m3_bits_to_float(uint8_t b) {
  const uint32_t s = static_cast<uint32_t>(b & 0x80u) << 24, c = b & 0x7Fu;
  return bits_to_f32(s | (c == 0x7Fu ? 0x7FC00000u : detail::decode_magnitude<3, -6>(c)));
}

// e5m2 (bias 15, subnormals down to 2^-16, max 57344, inf 0x7C, canonical NaN 0x7E | sign). Finite overflow
// saturates (a choice for read copies, see numeric/format.h); infinities stay infinite.
RSSM_HD inline uint8_t e5m2_encode_value(float v) {  // v already on the e5m2 grid (or inf/NaN)
  const uint32_t u = f32_to_bits(v), s = detail::sign_of(u) >> 24, a = u & 0x7FFFFFFFu;
  const uint32_t c = a > kFp32InfBits ? 0x7Eu : (a == kFp32InfBits ? 0x7Cu : detail::encode_magnitude<2, -14>(a));
  return static_cast<uint8_t>(s | c);
}
RSSM_HD inline uint8_t float_to_e5m2_bits(float x) { return e5m2_encode_value(round_e5m2(x)); }
RSSM_HD inline uint8_t float_to_e5m2_bits_sr(float x, uint32_t r) { return e5m2_encode_value(round_e5m2_sr(x, r)); }
RSSM_HD inline float e5m2_bits_to_float(uint8_t b) {
  const uint32_t s = static_cast<uint32_t>(b & 0x80u) << 24, c = b & 0x7Fu;
  const uint32_t m = c >= 0x7Cu ? (c == 0x7Cu ? kFp32InfBits : 0x7FC00000u) : detail::decode_magnitude<2, -14>(c);
  return bits_to_f32(s | m);
}

// int8, symmetric: x (already divided by its scale) rounded to an integer in [-127, 127]; ±inf saturate. The code
// -128 is never produced by a number: it is the NaN code, so a NaN stays visible through a quantised copy.
// Zero is +0 (int8 has one zero).
namespace detail {
RSSM_HD inline int8_t int8_from_magnitude(uint32_t s, uint64_t k) {
  const int neg = static_cast<int>(s >> 31), v = static_cast<int>(k);
  return static_cast<int8_t>((v ^ -neg) + neg);  // two's-complement negation without a branch on the sign
}
}  // namespace detail
RSSM_HD inline int8_t float_to_int8(float x) {
  const uint32_t u = f32_to_bits(x), s = detail::sign_of(u), a0 = u ^ s;
  const uint32_t a = a0 > kInt8MaxBits ? kInt8MaxBits : a0;
  uint32_t sig;
  int sh;
  detail::below_normal<7, 7>(a, sig, sh);
  return a0 > kFp32InfBits ? int8_t{-128} : detail::int8_from_magnitude(s, detail::shift_rne(sig, sh));
}
RSSM_HD inline int8_t float_to_int8_sr(float x, uint32_t r) {
  const uint32_t u = f32_to_bits(x), s = detail::sign_of(u), a0 = u ^ s;
  const uint32_t a = a0 > kInt8MaxBits ? kInt8MaxBits : a0;
  uint32_t sig;
  int sh;
  detail::below_normal<7, 7>(a, sig, sh);
  return a0 > kFp32InfBits ? int8_t{-128} : detail::int8_from_magnitude(s, detail::shift_sr(sig, sh, r));
}
RSSM_HD inline float int8_to_float(int8_t c) {
  return c == -128 ? bits_to_f32(0x7FC00000u) : static_cast<float>(c);
}
RSSM_HD inline float round_int8(float x) { return int8_to_float(float_to_int8(x)); }
RSSM_HD inline float round_int8_sr(float x, uint32_t r) { return int8_to_float(float_to_int8_sr(x, r)); }

}  // namespace rssm
