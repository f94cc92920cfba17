// Run-time dispatch of the exact roundings of numeric/bits.h, plus the direct double -> format roundings.
// The float paths are thin switches over the header-inline bit functions (which CUDA kernels share); the double
// paths repeat the same grid arithmetic on the 64-bit pattern so a double is rounded once, never via float.
// Rules: numeric/format.h. Tests: tests/test_numeric.cpp ("[numeric]").
#include <cfloat>
#include <cstring>
#include <limits>

#include "errors.h"
#include "numeric/bits.h"
#include "numeric/format.h"

#if defined(__GNUC__)
#define RSSM_NOINLINE __attribute__((noinline))
#else
#define RSSM_NOINLINE
#endif

namespace rssm {

float round_nearest(Format f, float x) {
  switch (f) {
    case Format::FP64:
    case Format::FP32: return x;
    case Format::TF32: return round_tf32(x);
    case Format::BF16: return round_bf16(x);
    case Format::FP16: return round_fp16(x);
    case Format::E4M3: return round_e4m3(x);
    case Format::E5M2: return round_e5m2(x);
    case Format::INT8: return round_int8(x);
  }
  throw InternalError("round_nearest: unknown format");
}

float round_stochastic(Format f, float x, uint32_t r) {
  switch (f) {
    case Format::FP64:
    case Format::FP32: return x;
    case Format::TF32: return round_tf32_sr(x, r);
    case Format::BF16: return round_bf16_sr(x, r);
    case Format::FP16: return round_fp16_sr(x, r);
    case Format::E4M3: return round_e4m3_sr(x, r);
    case Format::E5M2: return round_e5m2_sr(x, r);
    case Format::INT8: return round_int8_sr(x, r);
  }
  throw InternalError("round_stochastic: unknown format");
}

double format_max(Format f) {
  switch (f) {
    case Format::FP64: return DBL_MAX;
    case Format::FP32: return FLT_MAX;
    case Format::TF32: return bits_to_f32(0x7F7FE000u);  // (2 - 2^-10) * 2^127
    case Format::BF16: return bits_to_f32(0x7F7F0000u);  // (2 - 2^-7) * 2^127
    case Format::FP16: return kFp16Max;
    case Format::E4M3: return kE4M3Max;
    case Format::E5M2: return kE5M2Max;
    case Format::INT8: return kInt8Max;
  }
  throw InternalError("format_max: unknown format");
}

namespace {

uint64_t f64_to_bits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
double bits_to_f64(uint64_t u) {
  double x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

constexpr uint64_t kF64Sign = uint64_t{1} << 63;
constexpr uint64_t kF64Inf = uint64_t{0x7FF} << 52;

// The 64-bit twin of detail::rne_magnitude / sr_magnitude: |x| bits a (not NaN) onto the grid of (M, EMIN), the
// exponent unbounded above. Path A clears the low 52 - M pattern bits; path B rounds sig * 2^(e - 1075) to a
// multiple of 2^(EMIN - M). Exact products k * 2^(EMIN - M) are built as integer-to-double plus exponent add.
template <int M, int EMIN>
int below_normal_d(uint64_t a, uint64_t& sig) {
  const int E = static_cast<int>(a >> 52);
  sig = E ? (a & ((uint64_t{1} << 52) - 1)) | (uint64_t{1} << 52) : a;
  return (EMIN - M) + 1075 - (E ? E : 1);
}

uint64_t int_times_pow2_bits_d(uint64_t k, int e) {
  return (f64_to_bits(static_cast<double>(k)) + (static_cast<uint64_t>(static_cast<int64_t>(e)) << 52)) &
         (uint64_t{0} - (k != 0));
}

template <int M, int EMIN>
inline uint64_t rne_below_d_inline(uint64_t a) {
  uint64_t sig;
  const int s = below_normal_d<M, EMIN>(a, sig);  // >= 53 - M >= 30
  return int_times_pow2_bits_d(detail::shift_rne(sig, s), EMIN - M);
}

template <int M, int EMIN>
inline uint64_t sr_below_d_inline(uint64_t a, uint32_t r) {
  uint64_t sig;
  const int s = below_normal_d<M, EMIN>(a, sig);
  return int_times_pow2_bits_d(detail::shift_sr(sig, s, r), EMIN - M);
}

// Below a float format's normal range is rare in practice: out of line, so the common path inlines into the
// loops. int8 (M = 7, EMIN = 7) lives entirely there and keeps it inline.
template <int M, int EMIN>
RSSM_NOINLINE uint64_t rne_below_d_outline(uint64_t a) { return rne_below_d_inline<M, EMIN>(a); }
template <int M, int EMIN>
RSSM_NOINLINE uint64_t sr_below_d_outline(uint64_t a, uint32_t r) { return sr_below_d_inline<M, EMIN>(a, r); }

template <int M, int EMIN>
inline uint64_t rne_below_d(uint64_t a) {
  return EMIN == 7 ? rne_below_d_inline<M, EMIN>(a) : rne_below_d_outline<M, EMIN>(a);
}
template <int M, int EMIN>
inline uint64_t sr_below_d(uint64_t a, uint32_t r) {
  return EMIN == 7 ? sr_below_d_inline<M, EMIN>(a, r) : sr_below_d_outline<M, EMIN>(a, r);
}

template <int M, int EMIN>
uint64_t rne_magnitude_d(uint64_t a) {
  constexpr int S = 52 - M;
  constexpr uint64_t kMinNormal = static_cast<uint64_t>(EMIN + 1023) << 52;
  if (a >= kMinNormal) {
    return (a + ((uint64_t{1} << (S - 1)) - 1) + ((a >> S) & 1)) & ~((uint64_t{1} << S) - 1);
  }
  return rne_below_d<M, EMIN>(a);
}

template <int M, int EMIN>
uint64_t sr_magnitude_d(uint64_t a, uint32_t r) {
  constexpr int S = 52 - M;
  constexpr uint64_t kMinNormal = static_cast<uint64_t>(EMIN + 1023) << 52;
  // shift_sr on the pattern: k = pattern >> S plus the carry, and the carry runs into the exponent field.
  if (a >= kMinNormal) return detail::shift_sr(a, S, r) << S;
  return sr_below_d<M, EMIN>(a, r);
}

// One format and mode per instantiation, so the in-place loops dispatch once and inline the rest.
template <Format F, bool SR>
double round_double_t(double x, uint32_t r) {
  const uint64_t u = f64_to_bits(x), sign = u & kF64Sign, a = u ^ sign;
  // Canonical quiet NaN with the sign kept; int8's single NaN code decodes to +NaN, as in bits.h.
  if (a > kF64Inf) return bits_to_f64((F == Format::INT8 ? 0 : sign) | (uint64_t{0x7FF8} << 48));
  constexpr int M = F == Format::FP32 ? 23 : F == Format::TF32 ? 10 : F == Format::BF16 ? 7 : F == Format::FP16 ? 10
                    : F == Format::E4M3 ? 3 : F == Format::E5M2 ? 2 : 7;
  constexpr int EMIN = F == Format::FP32 || F == Format::TF32 || F == Format::BF16 ? -126
                       : F == Format::FP16 || F == Format::E5M2 ? -14 : F == Format::E4M3 ? -6 : 7;
  constexpr uint64_t kInt8Max = 0x405FC00000000000u;  // 127.0
  const uint64_t in = F == Format::INT8 && a > kInt8Max ? kInt8Max : a;
  double m = bits_to_f64(SR ? sr_magnitude_d<M, EMIN>(in, r) : rne_magnitude_d<M, EMIN>(in));
  if constexpr (F == Format::FP32 || F == Format::TF32 || F == Format::BF16 || F == Format::FP16) {
    constexpr double kMax = F == Format::FP32   ? 0x1.fffffep127   // (2 - 2^-23) * 2^127
                            : F == Format::TF32 ? 0x1.ffcp127      // (2 - 2^-10) * 2^127
                            : F == Format::BF16 ? 0x1.fep127       // (2 - 2^-7) * 2^127
                                                : 0x1.ffcp15;      // 65504
    if (m > kMax) m = std::numeric_limits<double>::infinity();
  } else if constexpr (F == Format::E4M3) {
    if (m > 448.0) m = 448.0;
  } else if constexpr (F == Format::E5M2) {
    if (a != kF64Inf && m > 57344.0) m = 57344.0;
  }
  // The sign goes back as a bit, not through a branch: signs of state values are random, and a mispredicted
  // branch per element costs more than the rounding itself.
  const uint64_t mb = f64_to_bits(m);
  const uint64_t keep_sign = F == Format::INT8 ? uint64_t{0} - (mb != 0) : ~uint64_t{0};  // int8 has only +0
  return bits_to_f64((sign & keep_sign) | mb);
}

template <bool SR>
double round_double(Format f, double x, uint32_t r) {
  switch (f) {
    case Format::FP64: return x;
    case Format::FP32: return round_double_t<Format::FP32, SR>(x, r);
    case Format::TF32: return round_double_t<Format::TF32, SR>(x, r);
    case Format::BF16: return round_double_t<Format::BF16, SR>(x, r);
    case Format::FP16: return round_double_t<Format::FP16, SR>(x, r);
    case Format::E4M3: return round_double_t<Format::E4M3, SR>(x, r);
    case Format::E5M2: return round_double_t<Format::E5M2, SR>(x, r);
    case Format::INT8: return round_double_t<Format::INT8, SR>(x, r);
  }
  throw InternalError("round_nearest_double: unknown format");
}

template <Format F>
void round_double_inplace(double* x, size_t n, const uint32_t* r) {
  if (r == nullptr) {
    for (size_t i = 0; i < n; ++i) x[i] = round_double_t<F, false>(x[i], 0);
  } else {
    for (size_t i = 0; i < n; ++i) x[i] = round_double_t<F, true>(x[i], r[i]);
  }
}

void round_double_inplace(Format f, double* x, size_t n, const uint32_t* r) {
  switch (f) {
    case Format::FP64: return;
    case Format::FP32: return round_double_inplace<Format::FP32>(x, n, r);
    case Format::TF32: return round_double_inplace<Format::TF32>(x, n, r);
    case Format::BF16: return round_double_inplace<Format::BF16>(x, n, r);
    case Format::FP16: return round_double_inplace<Format::FP16>(x, n, r);
    case Format::E4M3: return round_double_inplace<Format::E4M3>(x, n, r);
    case Format::E5M2: return round_double_inplace<Format::E5M2>(x, n, r);
    case Format::INT8: return round_double_inplace<Format::INT8>(x, n, r);
  }
  throw InternalError("round_nearest_inplace: unknown format");
}

template <class Fn>
void for_each(float* x, size_t n, Fn fn) {
  for (size_t i = 0; i < n; ++i) x[i] = fn(x[i]);
}
template <class Fn>
void for_each_r(float* x, size_t n, const uint32_t* r, Fn fn) {
  for (size_t i = 0; i < n; ++i) x[i] = fn(x[i], r[i]);
}

}  // namespace

double round_nearest_double(Format f, double x) { return round_double<false>(f, x, 0); }
double round_stochastic_double(Format f, double x, uint32_t r) { return round_double<true>(f, x, r); }

void round_nearest_inplace(Format f, float* x, size_t n) {
  switch (f) {
    case Format::FP64:
    case Format::FP32: return;
    case Format::TF32: return for_each(x, n, [](float v) { return round_tf32(v); });
    case Format::BF16: return for_each(x, n, [](float v) { return round_bf16(v); });
    case Format::FP16: return for_each(x, n, [](float v) { return round_fp16(v); });
    case Format::E4M3: return for_each(x, n, [](float v) { return round_e4m3(v); });
    case Format::E5M2: return for_each(x, n, [](float v) { return round_e5m2(v); });
    case Format::INT8: return for_each(x, n, [](float v) { return round_int8(v); });
  }
  throw InternalError("round_nearest_inplace: unknown format");
}

void round_stochastic_inplace(Format f, float* x, size_t n, const uint32_t* r) {
  if (r == nullptr && f != Format::FP64 && f != Format::FP32)
    throw InternalError("round_stochastic_inplace: r is null");
  switch (f) {
    case Format::FP64:
    case Format::FP32: return;
    case Format::TF32: return for_each_r(x, n, r, [](float v, uint32_t b) { return round_tf32_sr(v, b); });
    case Format::BF16: return for_each_r(x, n, r, [](float v, uint32_t b) { return round_bf16_sr(v, b); });
    case Format::FP16: return for_each_r(x, n, r, [](float v, uint32_t b) { return round_fp16_sr(v, b); });
    case Format::E4M3: return for_each_r(x, n, r, [](float v, uint32_t b) { return round_e4m3_sr(v, b); });
    case Format::E5M2: return for_each_r(x, n, r, [](float v, uint32_t b) { return round_e5m2_sr(v, b); });
    case Format::INT8: return for_each_r(x, n, r, [](float v, uint32_t b) { return round_int8_sr(v, b); });
  }
  throw InternalError("round_stochastic_inplace: unknown format");
}

void round_nearest_inplace(Format f, double* x, size_t n) { round_double_inplace(f, x, n, nullptr); }

void round_stochastic_inplace(Format f, double* x, size_t n, const uint32_t* r) {
  if (r == nullptr && f != Format::FP64) throw InternalError("round_stochastic_inplace: r is null");
  // r == nullptr selects nearest inside round_double_inplace, hence the check above.
  round_double_inplace(f, x, n, r);
}

}  // namespace rssm
