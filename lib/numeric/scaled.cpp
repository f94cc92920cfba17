// Block scales for the 8-bit read copies: the rules are in numeric/scaled.h; rounding is numeric/bits.h's.
#include "numeric/scaled.h"

#include <cfloat>
#include <cmath>
#include <fmt/format.h>

#include "errors.h"
#include "numeric/bits.h"

namespace rssm {

bool is_scaled_format(Format f) { return f == Format::E4M3 || f == Format::E5M2 || f == Format::INT8; }

float scaled_format_max(Format f) {
  switch (f) {
    case Format::E4M3: return kE4M3Max;
    case Format::E5M2: return kE5M2Max;
    case Format::INT8: return kInt8Max;
    default: break;
  }
  throw ConfigError(fmt::format("format '{}' has no block scale (accepted: e4m3, e5m2, int8)", format_name(f)));
}

namespace {

template <class T>
T finite_amax(const T* row, size_t n) {
  T amax = 0;
  for (size_t i = 0; i < n; ++i) {
    const T a = std::fabs(row[i]);
    if (std::isfinite(a) && a > amax) amax = a;
  }
  return amax;
}

// The quotient precision is the row's: a float row divides in fp32 (what a kernel does), a double row in double.
template <class T>
float scale_from_amax(Format f, T amax) {
  const T fmax = static_cast<T>(scaled_format_max(f));
  if (amax == 0) return 1.0f;
  const T q = amax / fmax;
  float s = q > static_cast<T>(FLT_MAX) ? FLT_MAX : static_cast<float>(q);
  if (s < FLT_MIN) s = FLT_MIN;
  while (amax / static_cast<T>(s) > fmax && s < FLT_MAX) s = std::nextafter(s, FLT_MAX);
  return s;
}

void require_bits(Rounding rnd, const uint32_t* r) {
  if (rnd == Rounding::Stochastic && r == nullptr)
    throw InternalError("stochastic block quantisation needs random bits (r is null)");
}

}  // namespace

float block_scale(Format f, const float* row, size_t n) {
  return block_scale_from_amax(finite_amax(row, n), scaled_format_max(f));
}
float block_scale(Format f, const double* row, size_t n) { return scale_from_amax(f, finite_amax(row, n)); }

uint8_t encode_scaled_value(Format f, float v) {
  switch (f) {
    case Format::E4M3: return e4m3_encode_value(v);
    case Format::E5M2: return e5m2_encode_value(v);
    case Format::INT8: return static_cast<uint8_t>(std::isnan(v) ? int8_t{-128} : static_cast<int8_t>(v));
    default: break;
  }
  scaled_format_max(f);  // throws the ConfigError
  return 0;
}

float decode_scaled_code(Format f, uint8_t code) {
  switch (f) {
    case Format::E4M3: return e4m3_bits_to_float(code);
    case Format::E5M2: return e5m2_bits_to_float(code);
    case Format::INT8: return int8_to_float(static_cast<int8_t>(code));
    default: break;
  }
  scaled_format_max(f);
  return 0;
}

void quantize_row_with_scale(Format f, Rounding rnd, const float* row, size_t n, float scale, uint8_t* codes,
                             const uint32_t* r) {
  require_bits(rnd, r);
  // Dispatched once per row so each loop is the inlined bit-level code.
  const bool sr = rnd == Rounding::Stochastic;
  switch (f) {
    case Format::E4M3:
      for (size_t i = 0; i < n; ++i)
        codes[i] = sr ? float_to_e4m3_bits_sr(row[i] / scale, r[i]) : float_to_e4m3_bits(row[i] / scale);
      return;
    case Format::E5M2:
      for (size_t i = 0; i < n; ++i)
        codes[i] = sr ? float_to_e5m2_bits_sr(row[i] / scale, r[i]) : float_to_e5m2_bits(row[i] / scale);
      return;
    case Format::INT8:
      for (size_t i = 0; i < n; ++i)
        codes[i] = static_cast<uint8_t>(sr ? float_to_int8_sr(row[i] / scale, r[i]) : float_to_int8(row[i] / scale));
      return;
    default: break;
  }
  scaled_format_max(f);
}

void quantize_row_with_scale(Format f, Rounding rnd, const double* row, size_t n, float scale, uint8_t* codes,
                             const uint32_t* r) {
  require_bits(rnd, r);
  scaled_format_max(f);  // rejects formats without scales before the loop
  const double s = scale;
  for (size_t i = 0; i < n; ++i) {
    const double y = row[i] / s;
    // One rounding from double; the result is on the format's grid, hence an exact float.
    const double v = rnd == Rounding::Stochastic ? round_stochastic_double(f, y, r[i]) : round_nearest_double(f, y);
    codes[i] = encode_scaled_value(f, static_cast<float>(v));
  }
}

float quantize_row(Format f, Rounding rnd, const float* row, size_t n, uint8_t* codes, const uint32_t* r) {
  const float scale = block_scale(f, row, n);
  quantize_row_with_scale(f, rnd, row, n, scale, codes, r);
  return scale;
}

float quantize_row(Format f, Rounding rnd, const double* row, size_t n, uint8_t* codes, const uint32_t* r) {
  const float scale = block_scale(f, row, n);
  quantize_row_with_scale(f, rnd, row, n, scale, codes, r);
  return scale;
}

void dequantize_row(Format f, const uint8_t* codes, size_t n, float scale, float* out) {
  switch (f) {
    case Format::E4M3:
      for (size_t i = 0; i < n; ++i) out[i] = e4m3_bits_to_float(codes[i]) * scale;
      return;
    case Format::E5M2:
      for (size_t i = 0; i < n; ++i) out[i] = e5m2_bits_to_float(codes[i]) * scale;
      return;
    case Format::INT8:
      for (size_t i = 0; i < n; ++i) out[i] = int8_to_float(static_cast<int8_t>(codes[i])) * scale;
      return;
    default: break;
  }
  scaled_format_max(f);
}

void dequantize_row(Format f, const uint8_t* codes, size_t n, float scale, double* out) {
  scaled_format_max(f);
  // A code has at most 8 significant bits and the scale 24, so the double product is exact.
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<double>(decode_scaled_code(f, codes[i])) * scale;
}

void quantize_rows(Format f, Rounding rnd, const float* x, size_t rows, size_t row_len, uint8_t* codes,
                   float* scales, const uint32_t* r) {
  require_bits(rnd, r);
  for (size_t j = 0; j < rows; ++j)
    scales[j] = quantize_row(f, rnd, x + j * row_len, row_len, codes + j * row_len, r ? r + j * row_len : nullptr);
}

void quantize_rows(Format f, Rounding rnd, const double* x, size_t rows, size_t row_len, uint8_t* codes,
                   float* scales, const uint32_t* r) {
  require_bits(rnd, r);
  for (size_t j = 0; j < rows; ++j)
    scales[j] = quantize_row(f, rnd, x + j * row_len, row_len, codes + j * row_len, r ? r + j * row_len : nullptr);
}

void dequantize_rows(Format f, const uint8_t* codes, const float* scales, size_t rows, size_t row_len, float* out) {
  for (size_t j = 0; j < rows; ++j) dequantize_row(f, codes + j * row_len, row_len, scales[j], out + j * row_len);
}

void dequantize_rows(Format f, const uint8_t* codes, const float* scales, size_t rows, size_t row_len, double* out) {
  for (size_t j = 0; j < rows; ++j) dequantize_row(f, codes + j * row_len, row_len, scales[j], out + j * row_len);
}

// Without materialising codes: decode(encode(v)) == v for every value the roundings return, so the round trip is
// the rounded quotient times the scale, with the same operations (and results) as quantize + dequantize.
float fake_quantize_row(Format f, Rounding rnd, float* x, size_t n, const uint32_t* r) {
  require_bits(rnd, r);
  const float scale = block_scale(f, x, n);
  if (rnd == Rounding::Stochastic) {
    for (size_t i = 0; i < n; ++i) x[i] = round_stochastic(f, x[i] / scale, r[i]) * scale;
  } else {
    for (size_t i = 0; i < n; ++i) x[i] = round_nearest(f, x[i] / scale) * scale;
  }
  return scale;
}

float fake_quantize_row(Format f, Rounding rnd, double* x, size_t n, const uint32_t* r) {
  require_bits(rnd, r);
  const float scale = block_scale(f, x, n);
  const double s = scale;
  if (rnd == Rounding::Stochastic) {
    for (size_t i = 0; i < n; ++i) x[i] = round_stochastic_double(f, x[i] / s, r[i]) * s;
  } else {
    for (size_t i = 0; i < n; ++i) x[i] = round_nearest_double(f, x[i] / s) * s;
  }
  return scale;
}

}  // namespace rssm
