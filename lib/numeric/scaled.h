// Block-scaled 8-bit copies of the state: e4m3, e5m2 or int8 codes with one fp32 scale per (head, row).
// A row is a contiguous run of state values (for Mamba-2 the N values of one (head, p) row); its scale maps the
// row's largest finite magnitude amax onto the format's largest finite value, so the whole row fits without
// saturation and uses the format's full range. Not here: rounding rules (numeric/format.h, numeric/bits.h).
// Tests: tests/test_numeric.cpp ("[numeric]").
//
// The arithmetic is fixed so that a kernel can reproduce it bit for bit (fp32, round-to-nearest operations:
// __fdiv_rn / __fmul_rn, not fast-math):
//   amax   = max |x_i| over the finite x_i of the row (NaN and ±inf are encoded as themselves, see below);
//   scale  = 1 if amax == 0; otherwise s0 = amax / fmax (fp32 division for float rows; for double rows the double
//            quotient converted to fp32), clamped to [FLT_MIN, FLT_MAX]; then while amax / scale > fmax (division
//            in the row's precision) and scale < FLT_MAX, scale = the next fp32 above scale. The fix-up (one step,
//            in practice) guarantees |x_i| / scale <= fmax for every finite x_i, so no finite value saturates
//            (double rows beyond fmax * FLT_MAX excepted).
//   fmax   = 448 (e4m3), 57344 (e5m2), 127 (int8).
//   code_i = encode(round(x_i / scale)), the quotient in the row's precision (fp32 for float rows, double for
//            double rows), round nearest-even or stochastic with the element's 32 random bits r[i] (format.h).
//   value  = decode(code_i) * scale: one fp32 multiply for float output; exact (double) for double output.
// Codes: e4m3 and e5m2 bit patterns; int8 as two's complement in a uint8_t, where 0x80 (-128) is the NaN code.
// Non-finite inputs: NaN -> the NaN code; ±inf -> ±448 (e4m3), ±inf (e5m2), ±127 (int8).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "numeric/format.h"
#include "numeric/hd.h"

namespace rssm {

// E4M3, E5M2 and INT8: the formats stored with block scales.
bool is_scaled_format(Format f);
// fmax above; throws ConfigError naming the format for formats without block scales.
float scaled_format_max(Format f);

// The scale rule above from a row's largest finite magnitude, in fp32 as a kernel computes it (shared with the
// kernels: docs/fp_contract.md). fmax: scaled_format_max of the format.
RSSM_HD inline float block_scale_from_amax(float amax, float fmax) {
  if (amax == 0.0f) return 1.0f;
  float s = amax / fmax;
  if (s < FLT_MIN) s = FLT_MIN;
  // The quotient may round down so that amax / s exceeds fmax by an ulp: step the scale up until it does not.
  while (amax / s > fmax && s < FLT_MAX) s = std::nextafter(s, FLT_MAX);
  return s;
}

// The scale rule above for one row of n values.
float block_scale(Format f, const float* row, size_t n);
float block_scale(Format f, const double* row, size_t n);

// One code <-> value (value without the scale).
uint8_t encode_scaled_value(Format f, float v);  // v on the format's grid (a result of round_nearest/round_stochastic)
float decode_scaled_code(Format f, uint8_t code);

// Quantise row[0..n) with a given scale into codes[0..n). r: n random words, required for Rounding::Stochastic and
// ignored (may be null) for Rounding::Nearest.
void quantize_row_with_scale(Format f, Rounding rnd, const float* row, size_t n, float scale, uint8_t* codes,
                             const uint32_t* r = nullptr);
void quantize_row_with_scale(Format f, Rounding rnd, const double* row, size_t n, float scale, uint8_t* codes,
                             const uint32_t* r = nullptr);
// block_scale, then quantize_row_with_scale; returns the scale.
float quantize_row(Format f, Rounding rnd, const float* row, size_t n, uint8_t* codes, const uint32_t* r = nullptr);
float quantize_row(Format f, Rounding rnd, const double* row, size_t n, uint8_t* codes, const uint32_t* r = nullptr);

// out[i] = decode(codes[i]) * scale (fp32 multiply for float out, exact for double out).
void dequantize_row(Format f, const uint8_t* codes, size_t n, float scale, float* out);
void dequantize_row(Format f, const uint8_t* codes, size_t n, float scale, double* out);

// A whole state of `rows` contiguous rows of row_len values: codes[rows * row_len], scales[rows]; r (stochastic)
// holds rows * row_len words, element i of row j using r[j * row_len + i].
void quantize_rows(Format f, Rounding rnd, const float* x, size_t rows, size_t row_len, uint8_t* codes,
                   float* scales, const uint32_t* r = nullptr);
void quantize_rows(Format f, Rounding rnd, const double* x, size_t rows, size_t row_len, uint8_t* codes,
                   float* scales, const uint32_t* r = nullptr);
void dequantize_rows(Format f, const uint8_t* codes, const float* scales, size_t rows, size_t row_len, float* out);
void dequantize_rows(Format f, const uint8_t* codes, const float* scales, size_t rows, size_t row_len, double* out);

// Emulation in place: x <- dequantize(quantize(x)) with the row's own block scale; returns the scale.
float fake_quantize_row(Format f, Rounding rnd, float* x, size_t n, const uint32_t* r = nullptr);
float fake_quantize_row(Format f, Rounding rnd, double* x, size_t n, const uint32_t* r = nullptr);

}  // namespace rssm
