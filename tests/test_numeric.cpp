// Tests of the number formats (numeric/bits.h, numeric/format.h, numeric/scaled.h) against references written
// here from the format definitions alone: each format's values are enumerated with std::ldexp from (exponent
// bits, mantissa bits, bias), and nearest and stochastic rounding are recomputed by searching that sorted list
// in double arithmetic, without any bit manipulation. Run: replayssm_tests "[numeric]".
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "numeric/bits.h"
#include "numeric/format.h"
#include "numeric/scaled.h"

using namespace rssm;

namespace {

// ---------------------------------------------------------------------------------------------------------------
// The reference: a format as (exponent bits, mantissa bits, bias, special-value convention).

enum class Specials {
  IEEE,           // all-ones exponent: inf (mantissa 0) or NaN; overflow to inf (bf16, tf32, fp16)
  IEEESaturate,   // as IEEE, but finite overflow saturates to max and inf stays inf (our e5m2)
  FN,             // e4m3fn: only S.1111.111 is NaN, no inf; overflow and inf saturate to max
};

struct Ref {
  const char* name;
  Format f;
  int ebits, mbits, bias;
  Specials sp;
  std::vector<double> vals;  // every finite non-negative value, ascending; vals[i] is the value of code i
  double max = 0, ulp_max = 0;

  Ref(const char* n, Format fmt, int e, int m, int b, Specials s)
      : name(n), f(fmt), ebits(e), mbits(m), bias(b), sp(s) {
    const uint32_t codes = 1u << (ebits + mbits);
    for (uint32_t c = 0; c < codes; ++c) {
      const double v = decode(c);
      if (std::isfinite(v)) vals.push_back(v);
    }
    max = vals.back();
    ulp_max = vals.back() - vals[vals.size() - 2];
  }

  uint32_t sign_bit() const { return 1u << (ebits + mbits); }

  // Value of a code (sign bit at ebits + mbits) from the definition.
  double decode(uint32_t code) const {
    const uint32_t mag = code & (sign_bit() - 1);
    const int e = static_cast<int>(mag >> mbits), m = static_cast<int>(mag & ((1u << mbits) - 1));
    const int eall = (1 << ebits) - 1;
    double v;
    if (sp == Specials::FN && e == eall && m == (1 << mbits) - 1) {
      v = std::numeric_limits<double>::quiet_NaN();
    } else if (sp != Specials::FN && e == eall) {
      v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
    } else if (e == 0) {
      v = std::ldexp(static_cast<double>(m), 1 - bias - mbits);
    } else {
      v = std::ldexp(static_cast<double>((1 << mbits) + m), e - bias - mbits);
    }
    return (code & sign_bit()) ? -v : v;
  }

  // Index of the largest grid value <= ax (ax finite, >= 0).
  size_t floor_index(double ax) const {
    return static_cast<size_t>(std::upper_bound(vals.begin(), vals.end(), ax) - vals.begin()) - 1;
  }

  // Neighbours lo <= ax < hi on the grid with the exponent unbounded (past max the next value is max + ulp_max,
  // the first value of the next binade); for ax on the grid lo = ax. Only for ax <= max + ulp_max.
  void neighbours(double ax, double& lo, double& hi) const {
    if (ax >= max) {
      lo = ax >= max + ulp_max ? max + ulp_max : max;
      hi = lo == max ? max + ulp_max : lo;
      return;
    }
    const size_t i = floor_index(ax);
    lo = vals[i];
    hi = vals[i + 1];
  }

  double overflow(double mag) const {  // mag: a magnitude past max (or inf)
    if (sp == Specials::IEEE) return std::numeric_limits<double>::infinity();
    if (sp == Specials::IEEESaturate && std::isinf(mag)) return mag;
    return max;
  }

  // Round to nearest, ties to the even code.
  double nearest(double x) const {
    if (std::isnan(x)) return x;
    const double ax = std::fabs(x);
    double r;
    if (std::isinf(ax)) {
      r = overflow(ax);
    } else if (ax > max) {
      // Between max and max + ulp_max the tie goes to the even code, which is past max (max has an odd code).
      r = ax >= max + ulp_max / 2 ? overflow(ax) : max;
    } else {
      const size_t i = floor_index(ax);
      if (vals[i] == ax) {
        r = ax;
      } else {
        const double d_lo = ax - vals[i], d_hi = vals[i + 1] - ax;  // exact (Sterbenz)
        r = d_lo < d_hi ? vals[i] : d_hi < d_lo ? vals[i + 1] : ((i & 1) == 0 ? vals[i] : vals[i + 1]);
      }
    }
    return std::copysign(r, x);
  }

  // Stochastic rounding by the stated rule: F = floor(2^32 * frac), up iff F + r >= 2^32.
  double stochastic(double x, uint32_t rbits) const {
    if (std::isnan(x)) return x;
    const double ax = std::fabs(x);
    double r;
    if (std::isinf(ax) || ax >= max + ulp_max) {
      r = overflow(ax);
    } else {
      double lo, hi;
      neighbours(ax, lo, hi);
      if (lo == ax) {
        r = ax;
      } else {
        const double F = std::floor(std::ldexp((ax - lo) / (hi - lo), 32));
        r = F + static_cast<double>(rbits) >= 4294967296.0 ? hi : lo;
        if (r > max) r = overflow(r);
      }
    }
    return std::copysign(r, x);
  }
};

const Ref& ref(Format f) {
  static const Ref bf16("bf16", Format::BF16, 8, 7, 127, Specials::IEEE);
  static const Ref tf32("tf32", Format::TF32, 8, 10, 127, Specials::IEEE);
  static const Ref fp16("fp16", Format::FP16, 5, 10, 15, Specials::IEEE);
  static const Ref e4m3("e4m3", Format::E4M3, 4, 3, 7, Specials::FN);
  static const Ref e5m2("e5m2", Format::E5M2, 5, 2, 15, Specials::IEEESaturate);
  switch (f) {
    case Format::BF16: return bf16;
    case Format::TF32: return tf32;
    case Format::FP16: return fp16;
    case Format::E4M3: return e4m3;
    default: return e5m2;
  }
}

// int8 reference: clamp, then std::nearbyint (ties to even in the default rounding mode); +0 for zero.
double int8_nearest(double x) {
  if (std::isnan(x)) return x;
  const double c = std::max(-127.0, std::min(127.0, x));
  const double r = std::nearbyint(c);
  return r == 0 ? 0.0 : r;
}
double int8_stochastic(double x, uint32_t rbits) {
  if (std::isnan(x)) return x;
  const double c = std::max(-127.0, std::min(127.0, x));
  const double ax = std::fabs(c), lo = std::floor(ax);
  const double F = std::floor(std::ldexp(ax - lo, 32));
  const double r = lo == ax ? ax : (F + static_cast<double>(rbits) >= 4294967296.0 ? lo + 1 : lo);
  return r == 0 ? 0.0 : std::copysign(r, c);
}

const Format kFloatFormats[] = {Format::BF16, Format::TF32, Format::FP16, Format::E4M3, Format::E5M2};

uint32_t fbits(float x) { return f32_to_bits(x); }
uint64_t dbits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
// Same value and same sign (so -0 != +0), or both NaN.
bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || dbits(a) == dbits(b); }

// Random float inputs aimed at a format: uniform bit patterns, random values across (and a bit beyond) the
// format's exponent range, and exact midpoints of adjacent grid values nudged by a few fp32 ulps.
float random_float_for(const Ref& R, std::mt19937& g) {
  std::uniform_int_distribution<uint32_t> bits;
  const uint32_t sign = (g() & 1) ? 0x80000000u : 0u;
  switch (g() % 4) {
    case 0: return bits_to_f32(bits(g));
    case 1: {
      const int lo_e = 1 - R.bias - R.mbits - 4, hi_e = (1 << R.ebits) - 1 - R.bias + 2;
      const int e = std::uniform_int_distribution<int>(lo_e, std::min(hi_e, 127))(g);
      const uint32_t E = static_cast<uint32_t>(std::max(e + 127, 0));
      return bits_to_f32(sign | (E << 23) | (bits(g) & 0x7FFFFFu));
    }
    default: {
      const size_t i = std::uniform_int_distribution<size_t>(0, R.vals.size() - 1)(g);
      const double hi = i + 1 < R.vals.size() ? R.vals[i + 1] : R.max + R.ulp_max;
      float m = static_cast<float>((R.vals[i] + hi) / 2);  // exact: one bit more than the format
      if (std::isinf(m)) m = FLT_MAX;
      const int k = std::uniform_int_distribution<int>(-2, 2)(g);
      for (int j = 0; j < std::abs(k); ++j) m = std::nextafter(m, k > 0 ? INFINITY : 0.0f);
      return sign ? -m : m;
    }
  }
}

double random_double_for(const Ref& R, std::mt19937_64& g) {
  const double sign = (g() & 1) ? -1.0 : 1.0;
  switch (g() % 3) {
    case 0: {
      const int lo_e = 1 - R.bias - R.mbits - 4, hi_e = (1 << R.ebits) - 1 - R.bias + 2;
      const int e = std::uniform_int_distribution<int>(lo_e, hi_e)(g);
      const double m = 1.0 + std::ldexp(static_cast<double>(g() >> 12), -52);
      return sign * std::ldexp(m, e);
    }
    default: {
      // Midpoints nudged by a few double ulps: the inputs where double -> float -> format rounds twice.
      const size_t i = std::uniform_int_distribution<size_t>(0, R.vals.size() - 1)(g);
      const double hi = i + 1 < R.vals.size() ? R.vals[i + 1] : R.max + R.ulp_max;
      double m = (R.vals[i] + hi) / 2;
      const int k = std::uniform_int_distribution<int>(-3, 3)(g);
      for (int j = 0; j < std::abs(k); ++j) m = std::nextafter(m, k > 0 ? INFINITY : 0.0);
      return sign * m;
    }
  }
}

float f(double x) { return static_cast<float>(x); }

}  // namespace

// -------------------------------------------------------------------------------------------------------------------

TEST_CASE("numeric: reference tables are the formats' published extremes", "[numeric]") {
  CHECK(ref(Format::BF16).max == static_cast<double>(bits_to_f32(0x7F7F0000u)));
  CHECK(ref(Format::FP16).max == 65504.0);
  CHECK(ref(Format::E4M3).max == 448.0);
  CHECK(ref(Format::E5M2).max == 57344.0);
  CHECK(ref(Format::FP16).vals[1] == std::ldexp(1.0, -24));
  CHECK(ref(Format::E4M3).vals[1] == std::ldexp(1.0, -9));
  CHECK(ref(Format::E5M2).vals[1] == std::ldexp(1.0, -16));
  CHECK(ref(Format::BF16).vals[1] == std::ldexp(1.0, -133));
  for (Format fm : kFloatFormats) {
    const auto& v = ref(fm).vals;
    CHECK(std::is_sorted(v.begin(), v.end()));
    CHECK(std::adjacent_find(v.begin(), v.end()) == v.end());
    CHECK(format_max(fm) == ref(fm).max);
  }
  CHECK(ref(Format::E4M3).vals.size() == 127);  // 128 non-negative codes minus the NaN
}

TEST_CASE("numeric: every 16-bit pattern decodes, rounds to itself and encodes back (bf16, fp16)", "[numeric]") {
  for (int which = 0; which < 2; ++which) {
    const bool is_bf16 = which == 0;
    const Ref& R = ref(is_bf16 ? Format::BF16 : Format::FP16);
    INFO(R.name);
    int bad = 0;
    for (uint32_t c = 0; c < 65536; ++c) {
      const uint16_t b = static_cast<uint16_t>(c);
      const float v = is_bf16 ? bf16_bits_to_float(b) : fp16_bits_to_float(b);
      const float back = is_bf16 ? round_bf16(v) : round_fp16(v);
      const float disp = round_nearest(R.f, v);
      const uint16_t enc = is_bf16 ? float_to_bf16_bits(v) : float_to_fp16_bits(v);
      const double expect = R.decode(c);
      bool ok = same(v, expect) && same(back, v) && same(disp, v);
      if (std::isnan(expect)) {
        const uint16_t e = enc & 0x7FFF;
        ok = ok && (is_bf16 ? (e > 0x7F80) : (e > 0x7C00));  // any NaN encodes to a NaN
      } else {
        ok = ok && enc == b;
      }
      if (!ok && ++bad <= 5) {
        UNSCOPED_INFO("code " << c << " decodes to " << v << " (expected " << expect << "), encodes to " << enc);
      }
    }
    REQUIRE(bad == 0);
  }
}

TEST_CASE("numeric: every 8-bit pattern decodes, rounds to itself and encodes back (e4m3, e5m2)", "[numeric]") {
  for (Format fm : {Format::E4M3, Format::E5M2}) {
    const Ref& R = ref(fm);
    INFO(R.name);
    for (uint32_t c = 0; c < 256; ++c) {
      const uint8_t b = static_cast<uint8_t>(c);
      const float v = fm == Format::E4M3 ? e4m3_bits_to_float(b) : e5m2_bits_to_float(b);
      const uint8_t enc = fm == Format::E4M3 ? float_to_e4m3_bits(v) : float_to_e5m2_bits(v);
      INFO("code " << c << " value " << v);
      REQUIRE(same(v, R.decode(c)));
      REQUIRE(same(round_nearest(fm, v), v));
      REQUIRE(same(decode_scaled_code(fm, b), v));
      if (std::isnan(v)) {
        REQUIRE(std::isnan(fm == Format::E4M3 ? e4m3_bits_to_float(enc) : e5m2_bits_to_float(enc)));
      } else {
        REQUIRE(enc == b);
        REQUIRE(encode_scaled_value(fm, v) == b);
      }
    }
  }
  // The single e4m3 NaN pattern: 0x7F / 0xFF; 0x7E and 0xFE are ±448.
  CHECK(std::isnan(e4m3_bits_to_float(0x7F)));
  CHECK(std::isnan(e4m3_bits_to_float(0xFF)));
  CHECK(e4m3_bits_to_float(0x7E) == 448.0f);
  CHECK(e4m3_bits_to_float(0xFE) == -448.0f);
  CHECK(std::isinf(e5m2_bits_to_float(0x7C)));
}

TEST_CASE("numeric: every tf32 value rounds to itself", "[numeric]") {
  const Ref& R = ref(Format::TF32);
  int bad = 0;
  for (double v : R.vals) {
    bad += !same(round_tf32(f(v)), f(v));
    bad += !same(round_tf32(f(-v)), f(-v));
  }
  REQUIRE(bad == 0);
}

TEST_CASE("numeric: ties to even, subnormals, overflow and signed zero by hand", "[numeric]") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto p2 = [](int e) { return std::ldexp(1.0f, e); };

  SECTION("bf16") {
    CHECK(round_bf16(1 + p2(-8)) == 1.0f);                      // tie, 1 is even
    CHECK(round_bf16(1 + 3 * p2(-8)) == 1 + p2(-6));            // tie, 1 + 2^-7 is odd: up
    CHECK(round_bf16(-(1 + p2(-8))) == -1.0f);
    CHECK(round_bf16(-(1 + 3 * p2(-8))) == -(1 + p2(-6)));
    CHECK(round_bf16(std::nextafter(1 + p2(-8), 2.0f)) == 1 + p2(-7));
    CHECK(fbits(round_bf16(bits_to_f32(0x00008000u))) == 0u);           // fp32 subnormal tie to 0
    CHECK(fbits(round_bf16(bits_to_f32(0x00018000u))) == 0x00020000u);  // tie to the even subnormal
    CHECK(fbits(round_bf16(bits_to_f32(0x00008001u))) == 0x00010000u);
    const float mx = bits_to_f32(0x7F7F0000u);
    CHECK(round_bf16(bits_to_f32(0x7F7F7FFFu)) == mx);
    CHECK(round_bf16(bits_to_f32(0x7F7F8000u)) == inf);  // max + half ulp: tie goes to the even code, inf
    CHECK(round_bf16(FLT_MAX) == inf);
    CHECK(round_bf16(-inf) == -inf);
    CHECK(std::signbit(round_bf16(-0.0f)));
    CHECK(std::isnan(round_bf16(nan)));
    CHECK(float_to_bf16_bits(-0.0f) == 0x8000);
  }
  SECTION("tf32") {
    CHECK(round_tf32(1 + p2(-11)) == 1.0f);
    CHECK(round_tf32(1 + 3 * p2(-11)) == 1 + p2(-9));
    CHECK(round_tf32(FLT_MAX) == inf);
    CHECK(round_tf32(bits_to_f32(0x7F7FE000u)) == bits_to_f32(0x7F7FE000u));
    CHECK(fbits(round_tf32(bits_to_f32(0x00001000u))) == 0u);
    CHECK(fbits(round_tf32(bits_to_f32(0x00003000u))) == 0x00004000u);
    CHECK(std::signbit(round_tf32(-0.0f)));
  }
  SECTION("fp16") {
    CHECK(round_fp16(1 + p2(-11)) == 1.0f);
    CHECK(round_fp16(1 + 3 * p2(-11)) == 1 + p2(-9));
    CHECK(round_fp16(p2(-25)) == 0.0f);                    // half the smallest subnormal: tie to 0
    CHECK(std::signbit(round_fp16(-p2(-25))));             // ... keeping the sign
    CHECK(round_fp16(std::nextafter(p2(-25), 1.0f)) == p2(-24));
    CHECK(round_fp16(3 * p2(-25)) == p2(-23));             // tie between codes 1 and 2: 2
    CHECK(round_fp16(5 * p2(-25)) == p2(-23));             // tie between codes 2 and 3: 2
    CHECK(round_fp16(p2(-14) - p2(-25)) == p2(-14));       // largest subnormal (odd) vs smallest normal
    CHECK(round_fp16(p2(-14) - 3 * p2(-25)) == p2(-14) - p2(-23));
    CHECK(float_to_fp16_bits(p2(-24)) == 0x0001);
    CHECK(float_to_fp16_bits(p2(-14)) == 0x0400);
    CHECK(round_fp16(65504.0f) == 65504.0f);
    CHECK(round_fp16(std::nextafter(65520.0f, 0.0f)) == 65504.0f);
    CHECK(round_fp16(65520.0f) == inf);
    CHECK(round_fp16(-65520.0f) == -inf);
    CHECK(float_to_fp16_bits(1e9f) == 0x7C00);
    CHECK(float_to_fp16_bits(-inf) == 0xFC00);
    CHECK(std::isnan(round_fp16(nan)));
    CHECK((float_to_fp16_bits(nan) & 0x7FFF) > 0x7C00);
    CHECK(float_to_fp16_bits(-0.0f) == 0x8000);
    CHECK(float_to_fp16_bits(-1e-30f) == 0x8000);
  }
  SECTION("e4m3") {
    CHECK(round_e4m3(1 + p2(-4)) == 1.0f);
    CHECK(round_e4m3(1 + 3 * p2(-4)) == 1.25f);
    CHECK(round_e4m3(p2(-10)) == 0.0f);
    CHECK(round_e4m3(3 * p2(-10)) == p2(-8));
    CHECK(round_e4m3(p2(-6) - p2(-10)) == p2(-6));  // 7 * 2^-9 (odd) vs 2^-6
    CHECK(float_to_e4m3_bits(p2(-9)) == 0x01);
    CHECK(round_e4m3(448.0f) == 448.0f);
    CHECK(round_e4m3(464.0f) == 448.0f);   // tie; 448's mantissa 110 is even
    CHECK(round_e4m3(470.0f) == 448.0f);   // would be 480: saturates
    CHECK(round_e4m3(1e30f) == 448.0f);
    CHECK(round_e4m3(inf) == 448.0f);
    CHECK(round_e4m3(-inf) == -448.0f);
    CHECK(float_to_e4m3_bits(inf) == 0x7E);
    CHECK(float_to_e4m3_bits(-inf) == 0xFE);
    CHECK((float_to_e4m3_bits(nan) & 0x7F) == 0x7F);
    CHECK(std::isnan(round_e4m3(nan)));
    CHECK(float_to_e4m3_bits(-0.0f) == 0x80);
    CHECK(std::signbit(round_e4m3(-1e-9f)));
  }
  SECTION("e5m2") {
    CHECK(round_e5m2(1 + p2(-3)) == 1.0f);
    CHECK(round_e5m2(1 + 3 * p2(-3)) == 1.5f);
    CHECK(round_e5m2(p2(-17)) == 0.0f);
    CHECK(round_e5m2(3 * p2(-17)) == p2(-15));
    CHECK(float_to_e5m2_bits(p2(-16)) == 0x01);
    CHECK(round_e5m2(57344.0f) == 57344.0f);
    CHECK(round_e5m2(61440.0f) == 57344.0f);  // the tie would go to 65536: saturates
    CHECK(round_e5m2(1e30f) == 57344.0f);
    CHECK(round_e5m2(-1e30f) == -57344.0f);
    CHECK(round_e5m2(inf) == inf);
    CHECK(round_e5m2(-inf) == -inf);
    CHECK(float_to_e5m2_bits(inf) == 0x7C);
    CHECK(float_to_e5m2_bits(1e30f) == 0x7B);
    CHECK(std::isnan(round_e5m2(nan)));
    CHECK(float_to_e5m2_bits(-0.0f) == 0x80);
  }
  SECTION("int8") {
    CHECK(round_int8(0.5f) == 0.0f);
    CHECK(round_int8(1.5f) == 2.0f);
    CHECK(round_int8(2.5f) == 2.0f);
    CHECK(round_int8(-2.5f) == -2.0f);
    CHECK(round_int8(-3.5f) == -4.0f);
    CHECK(round_int8(126.5f) == 126.0f);
    CHECK(round_int8(127.4f) == 127.0f);
    CHECK(round_int8(200.0f) == 127.0f);
    CHECK(round_int8(-inf) == -127.0f);
    CHECK(round_int8(1e-40f) == 0.0f);
    CHECK(!std::signbit(round_int8(-0.3f)));  // int8 has one zero
    CHECK(std::isnan(round_int8(nan)));
    CHECK(float_to_int8(nan) == -128);
    CHECK(float_to_int8(-127.6f) == -127);
    CHECK(round_nearest(Format::INT8, 3.5f) == 4.0f);
  }
  SECTION("fp32 and fp64 are identities") {
    CHECK(round_nearest(Format::FP32, 0.1f) == 0.1f);
    CHECK(round_stochastic(Format::FP64, 0.1f, 123u) == 0.1f);
    CHECK(round_nearest_double(Format::FP64, 0.1) == 0.1);
    CHECK(round_nearest_double(Format::FP32, 0.1) == static_cast<double>(0.1f));
  }
}

TEST_CASE("numeric: nearest rounding of random floats matches the exhaustive reference", "[numeric]") {
  std::mt19937 g(20240611u);
  for (Format fm : kFloatFormats) {
    const Ref& R = ref(fm);
    const int n = (fm == Format::BF16 || fm == Format::FP16) ? 3000000 : 1000000;
    int bad = 0;
    for (int i = 0; i < n; ++i) {
      const float x = random_float_for(R, g);
      const double expect = R.nearest(x);
      const float got = round_nearest(fm, x);
      if (!same(got, f(expect)) && ++bad <= 5)
        UNSCOPED_INFO(R.name << ": x = " << x << " (0x" << std::hex << fbits(x) << std::dec << ") gave " << got
                             << ", expected " << expect);
    }
    INFO(R.name << ": " << n << " inputs");
    REQUIRE(bad == 0);
  }
  int bad = 0;
  for (int i = 0; i < 1000000; ++i) {
    const float x = i % 2 ? bits_to_f32(g()) : std::ldexp(static_cast<float>(g() % 100000) / 256.0f, -int(g() % 4));
    bad += !same(round_int8(x), f(int8_nearest(x)));
  }
  REQUIRE(bad == 0);
}

TEST_CASE("numeric: codes of random floats match the reference's codes", "[numeric]") {
  std::mt19937 g(7u);
  for (Format fm : {Format::BF16, Format::FP16, Format::E4M3, Format::E5M2}) {
    const Ref& R = ref(fm);
    int bad = 0;
    for (int i = 0; i < 300000; ++i) {
      const float x = random_float_for(R, g);
      uint32_t code = 0;
      switch (fm) {
        case Format::BF16: code = float_to_bf16_bits(x); break;
        case Format::FP16: code = float_to_fp16_bits(x); break;
        case Format::E4M3: code = float_to_e4m3_bits(x); break;
        default: code = float_to_e5m2_bits(x); break;
      }
      bad += !same(R.decode(code), R.nearest(x));
    }
    INFO(R.name);
    REQUIRE(bad == 0);
  }
}

TEST_CASE("numeric: round_nearest_double rounds once, matching the exhaustive reference", "[numeric]") {
  std::mt19937_64 g(99u);
  for (Format fm : kFloatFormats) {
    const Ref& R = ref(fm);
    int bad = 0, twice_differs = 0;
    for (int i = 0; i < 1000000; ++i) {
      const double x = random_double_for(R, g);
      const double expect = R.nearest(x);
      const double got = round_nearest_double(fm, x);
      if (!same(got, expect) && ++bad <= 5)
        UNSCOPED_INFO(R.name << ": x = " << x << " gave " << got << " expected " << expect);
      twice_differs += !same(static_cast<double>(round_nearest(fm, static_cast<float>(x))), expect);
    }
    INFO(R.name);
    REQUIRE(bad == 0);
    // The inputs include doubles just off midpoints, where going through float rounds twice; if that never
    // differed, this test would not be exercising the single rounding.
    CHECK(twice_differs > 0);
  }
  // fp32 through the same machinery must agree with the hardware conversion.
  int bad = 0;
  for (int i = 0; i < 1000000; ++i) {
    double x;
    const uint64_t u = g();
    std::memcpy(&x, &u, sizeof x);
    if (i % 2) x = std::ldexp(1.0 + std::ldexp(double(g() >> 12), -52), int(g() % 320) - 170);
    bad += !same(round_nearest_double(Format::FP32, x), static_cast<double>(static_cast<float>(x)));
  }
  REQUIRE(bad == 0);
  bad = 0;
  for (int i = 0; i < 300000; ++i) {
    const double x = (std::ldexp(double(g() % 60000), -8) - 117.0) * ((g() & 1) ? 1.0 : 1.0 + 1e-12);
    bad += !same(round_nearest_double(Format::INT8, x), int8_nearest(x));
  }
  REQUIRE(bad == 0);

  // Special values take the same path from double as from float (infinities, NaN, signed zero, overflow).
  const double dinf = std::numeric_limits<double>::infinity(), dnan = std::numeric_limits<double>::quiet_NaN();
  for (Format fm : {Format::FP32, Format::TF32, Format::BF16, Format::FP16, Format::E4M3, Format::E5M2, Format::INT8}) {
    // All exact in float, so both paths see the same input.
    for (double v : {dinf, -dinf, dnan, -dnan, 0.0, -0.0, 0x1p100, -0x1p100, 70000.0, 65520.0, 61440.0, 464.0,
                     -127.625, double(FLT_MAX), double(FLT_MIN), 0x1p-149}) {
      INFO(format_name(fm) << ", x = " << v);
      const float fv = static_cast<float>(v);
      CHECK(same(round_nearest_double(fm, v), round_nearest(fm, fv)));
      CHECK(same(round_stochastic_double(fm, v, 0x9E3779B9u), round_stochastic(fm, fv, 0x9E3779B9u)));
    }
    // Beyond float's range, from double only.
    CHECK(same(round_nearest_double(fm, -1e300), fm == Format::E4M3   ? -448.0
                                                 : fm == Format::E5M2 ? -57344.0
                                                 : fm == Format::INT8 ? -127.0
                                                                      : -dinf));
    CHECK(same(round_nearest_double(fm, -1e-300), fm == Format::INT8 ? 0.0 : -0.0));
  }

  // A concrete double rounding: 1 + 2^-8 + 2^-40 is above the bf16 midpoint; via float it lands on the midpoint.
  const double x = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  CHECK(round_nearest_double(Format::BF16, x) == 1.0 + std::ldexp(1.0, -7));
  CHECK(round_nearest(Format::BF16, static_cast<float>(x)) == 1.0f);
  // The in-place double helper uses the single rounding.
  std::vector<double> v{x, -x, 0.1, 1e300, -1e-300};
  round_nearest_inplace(Format::BF16, v.data(), v.size());
  CHECK(v[0] == 1.0 + std::ldexp(1.0, -7));
  CHECK(v[1] == -(1.0 + std::ldexp(1.0, -7)));
  CHECK(v[2] == static_cast<double>(round_bf16(0.1f)));
  CHECK(std::isinf(v[3]));
  CHECK((v[4] == 0.0 && std::signbit(v[4])));
}

TEST_CASE("numeric: in-place float helpers equal the scalar calls", "[numeric]") {
  std::mt19937 g(5u);
  std::vector<float> x(10000);
  std::vector<uint32_t> r(x.size());
  for (Format fm : {Format::FP32, Format::TF32, Format::BF16, Format::FP16, Format::E4M3, Format::E5M2, Format::INT8}) {
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = std::ldexp(static_cast<float>(static_cast<int32_t>(g())), -int(g() % 60));
      r[i] = g();
    }
    std::vector<float> a = x, b = x;
    round_nearest_inplace(fm, a.data(), a.size());
    round_stochastic_inplace(fm, b.data(), b.size(), r.data());
    int bad = 0;
    for (size_t i = 0; i < x.size(); ++i)
      bad += !same(a[i], round_nearest(fm, x[i])) + !same(b[i], round_stochastic(fm, x[i], r[i]));
    INFO(format_name(fm));
    REQUIRE(bad == 0);
  }
}

TEST_CASE("numeric: stochastic rounding follows the stated rule exactly", "[numeric]") {
  std::mt19937 g(31337u);
  for (Format fm : kFloatFormats) {
    const Ref& R = ref(fm);
    int bad = 0;
    for (int i = 0; i < 400000; ++i) {
      const float x = random_float_for(R, g);
      // Random bits, and the two bit patterns either side of the threshold 2^32 - F.
      uint32_t rb = g();
      double lo, hi;
      const double ax = std::fabs(static_cast<double>(x));
      if (i % 3 && std::isfinite(ax) && ax < R.max + R.ulp_max) {
        R.neighbours(ax, lo, hi);
        const double F = std::floor(std::ldexp((ax - lo) / (hi - lo), 32));
        if (F > 0) rb = static_cast<uint32_t>(4294967296.0 - F) - (i % 3 == 1 ? 0u : 1u);
      }
      const double expect = R.stochastic(x, rb);
      const float got = round_stochastic(fm, x, rb);
      if (!same(got, f(expect)) && ++bad <= 5)
        UNSCOPED_INFO(R.name << ": x = " << x << " r = " << rb << " gave " << got << " expected " << expect);
      // The double path follows the same rule on the same input.
      if (!same(round_stochastic_double(fm, x, rb), expect) && ++bad <= 5)
        UNSCOPED_INFO(R.name << " (double path): x = " << x << " r = " << rb);
    }
    INFO(R.name);
    REQUIRE(bad == 0);
  }
  // Double inputs carry up to 53 bits, so F uses the low bits of r too (float inputs leave F a multiple of 2^9).
  std::mt19937_64 g64(8u);
  for (Format fm : kFloatFormats) {
    const Ref& R = ref(fm);
    int bad = 0;
    for (int i = 0; i < 300000; ++i) {
      const double x = random_double_for(R, g64);
      uint32_t rb = static_cast<uint32_t>(g64());
      const double ax = std::fabs(x);
      if (i % 3 && ax < R.max + R.ulp_max) {
        double lo, hi;
        R.neighbours(ax, lo, hi);
        const double F = std::floor(std::ldexp((ax - lo) / (hi - lo), 32));
        if (F > 0) rb = static_cast<uint32_t>(4294967296.0 - F) - (i % 3 == 1 ? 0u : 1u);
      }
      const double expect = R.stochastic(x, rb), got = round_stochastic_double(fm, x, rb);
      if (!same(got, expect) && ++bad <= 5)
        UNSCOPED_INFO(R.name << " (double input): x = " << x << " r = " << rb << " gave " << got << " expected "
                             << expect);
    }
    INFO(R.name);
    REQUIRE(bad == 0);
  }
  int bad = 0;
  for (int i = 0; i < 300000; ++i) {
    const float x = std::ldexp(static_cast<float>(static_cast<int32_t>(g() % 80000) - 40000), -8);
    const uint32_t rb = g();
    bad += !same(round_int8_sr(x, rb), f(int8_stochastic(x, rb)));
    bad += !same(round_stochastic_double(Format::INT8, x, rb), int8_stochastic(x, rb));
  }
  REQUIRE(bad == 0);
}

TEST_CASE("numeric: stochastic rounding in bit form (bf16: add r >> 16, truncate)", "[numeric]") {
  std::mt19937 g(11u);
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t u = g() % 0x7F800001u;  // non-negative, finite or +inf (the carry may reach inf, as the rule says)
    const uint32_t rb = g();
    const uint32_t expect = (u + (rb >> 16)) & 0xFFFF0000u;
    if (fbits(round_bf16_sr(bits_to_f32(u), rb)) != expect) FAIL("bf16 rule broken at u = " << u << " r = " << rb);
    const uint32_t expect_tf32 = (u + (rb >> 19)) & 0xFFFFE000u;
    if (fbits(round_tf32_sr(bits_to_f32(u), rb)) != expect_tf32) FAIL("tf32 rule broken at u = " << u);
  }
}

TEST_CASE("numeric: stochastic rounding keeps grid values, picks a neighbour, and is unbiased", "[numeric]") {
  std::mt19937 g(2024u);
  // Grid values map to themselves for every r.
  for (Format fm : kFloatFormats) {
    const Ref& R = ref(fm);
    int bad = 0;
    for (size_t i = 0; i < R.vals.size(); i += (R.vals.size() > 4096 ? 37 : 1)) {
      const float v = f(R.vals[i]);
      for (int k = 0; k < 8; ++k) {
        const uint32_t rb = k == 0 ? 0u : k == 1 ? 0xFFFFFFFFu : g();
        bad += !same(round_stochastic(fm, v, rb), v) + !same(round_stochastic(fm, -v, rb), -v);
      }
    }
    INFO(R.name);
    REQUIRE(bad == 0);
  }

  auto check_unbiased = [&](Format fm, float x, double lo, double hi) {
    const int n = 100000;
    std::mt19937 rng(static_cast<uint32_t>(fbits(x)));
    double sum = 0;
    int bad = 0;
    for (int i = 0; i < n; ++i) {
      const uint32_t rb = rng();
      const float y = round_stochastic(fm, x, rb);
      bad += !(static_cast<double>(y) == lo || static_cast<double>(y) == hi);
      bad += !same(y, round_stochastic(fm, x, rb));  // deterministic for fixed r
      sum += (static_cast<double>(y) - static_cast<double>(x)) / (hi - lo);
    }
    const double mean = sum / n;
    INFO(format_name(fm) << ": x = " << x << " in [" << lo << ", " << hi << "], mean error " << mean << " ulp");
    REQUIRE(bad == 0);
    // Each draw's error in ulps has standard deviation <= 1/2, so 5/sqrt(n) is a 10-sigma bound.
    REQUIRE(std::fabs(mean) < 5.0 / std::sqrt(double(n)));
  };
  for (Format fm : kFloatFormats) {
    const Ref& R = ref(fm);
    // Subnormal steps (indices 1..3), normal values (around 1.0 and high), each at several fractions.
    const size_t one = R.floor_index(1.0);
    for (size_t i : {size_t{0}, size_t{1}, size_t{3}, one, one + 5, R.vals.size() - 3}) {
      for (double frac : {0.1, 0.5, 0.73, 0.96}) {
        const double lo = R.vals[i], hi = R.vals[i + 1];
        const float x = f(lo + frac * (hi - lo));
        check_unbiased(fm, x, lo, hi);
        check_unbiased(fm, -x, -hi, -lo);
      }
    }
  }
  for (double x : {0.3, 2.5, -7.77, 126.01}) {
    const double lo = std::floor(x);
    check_unbiased(Format::INT8, f(x), lo, lo + 1);
  }
  // Saturation: past the largest value e4m3 and e5m2 stay at max for every r, as int8 stays at 127.
  for (int k = 0; k < 1000; ++k) {
    const uint32_t rb = g();
    CHECK(round_e4m3_sr(470.0f, rb) == 448.0f);
    CHECK(round_e4m3_sr(std::numeric_limits<float>::infinity(), rb) == 448.0f);
    CHECK(round_e5m2_sr(-60000.0f, rb) == -57344.0f);
    CHECK(std::isinf(round_e5m2_sr(std::numeric_limits<float>::infinity(), rb)));
    CHECK(round_int8_sr(127.9f, rb) == 127.0f);
    CHECK(std::isnan(round_fp16_sr(std::numeric_limits<float>::quiet_NaN(), rb)));
  }
}

// -------------------------------------------------------------------------------------------------------------------
// Block scales.

namespace {

// Grid step around y in the (unscaled) format: hi - lo of its neighbours, 0 on the grid.
double grid_step(Format fm, double y) {
  const double ay = std::fabs(y);
  if (fm == Format::INT8) return ay == std::floor(ay) ? 0.0 : 1.0;
  double lo, hi;
  ref(fm).neighbours(ay, lo, hi);
  return lo == ay ? 0.0 : hi - lo;
}

template <class T>
void check_block_row(Format fm, Rounding rnd, const std::vector<T>& row, std::mt19937& g) {
  const size_t n = row.size();
  std::vector<uint32_t> r(n);
  for (auto& b : r) b = g();
  std::vector<uint8_t> codes(n);
  const float scale = quantize_row(fm, rnd, row.data(), n, codes.data(), r.data());
  REQUIRE(scale == block_scale(fm, row.data(), n));
  const double fmax = scaled_format_max(fm);
  std::vector<T> deq(n);
  dequantize_row(fm, codes.data(), n, scale, deq.data());
  const bool is_float = sizeof(T) == sizeof(float);
  for (size_t i = 0; i < n; ++i) {
    const T y = row[i] / static_cast<T>(scale);  // the quotient in the row's precision, as the rule states
    INFO(format_name(fm) << " " << rounding_name(rnd) << (is_float ? " float" : " double") << " row, x = " << row[i]
                         << ", scale = " << scale << ", y = " << y << ", dequantised " << deq[i]);
    REQUIRE(std::fabs(static_cast<double>(y)) <= fmax);  // never saturates
    // Half a grid step (a whole one, stochastic) of the format times the scale, plus the rounding of the fp32
    // quotient and product (float rows) or of the double quotient (double rows).
    const double step = grid_step(fm, static_cast<double>(row[i]) / scale);
    const double step_y = grid_step(fm, static_cast<double>(y));
    const double allowed = (rnd == Rounding::Nearest ? 0.5 : 1.0) * std::max(step, step_y) * scale +
                           (is_float ? std::ldexp(1.0, -22) : std::ldexp(1.0, -51)) *
                               (std::fabs(double(row[i])) + std::fabs(double(deq[i]))) +
                           // a float row with a scale near FLT_MIN dequantises into fp32's subnormals
                           (is_float ? std::ldexp(1.0, -149) : 0.0);
    REQUIRE(std::fabs(static_cast<double>(deq[i]) - static_cast<double>(row[i])) <= allowed);
  }
  // The round trip helper gives the same values as quantize + dequantize.
  std::vector<T> fake = row;
  REQUIRE(fake_quantize_row(fm, rnd, fake.data(), n, r.data()) == scale);
  for (size_t i = 0; i < n; ++i) REQUIRE(same(static_cast<double>(fake[i]), static_cast<double>(deq[i])));
}

}  // namespace

TEST_CASE("numeric: block-scaled rows round within half a scaled step and never saturate", "[numeric]") {
  std::mt19937 g(424242u);
  for (Format fm : {Format::E4M3, Format::E5M2, Format::INT8}) {
    for (Rounding rnd : {Rounding::Nearest, Rounding::Stochastic}) {
      for (int trial = 0; trial < 300; ++trial) {
        const size_t n = 1 + g() % 128;
        // Row magnitudes from 1e-38 to 1e38, entries spread over ~12 binades below the row's top.
        const double top = std::pow(10.0, -38.0 + 76.0 * (g() / 4294967296.0));
        std::vector<float> rf(n);
        std::vector<double> rd(n);
        for (size_t i = 0; i < n; ++i) {
          const double v = top * std::ldexp(g() / 4294967296.0, -int(g() % 12)) * ((g() & 1) ? 1 : -1);
          rd[i] = v;
          rf[i] = static_cast<float>(v);
        }
        check_block_row(fm, rnd, rf, g);
        check_block_row(fm, rnd, rd, g);
      }
    }
  }
}

TEST_CASE("numeric: block-scale edge cases", "[numeric]") {
  std::vector<float> zeros(16, 0.0f);
  std::vector<uint8_t> codes(16, 0xAA);
  for (Format fm : {Format::E4M3, Format::E5M2, Format::INT8}) {
    INFO(format_name(fm));
    CHECK(quantize_row(fm, Rounding::Nearest, zeros.data(), zeros.size(), codes.data()) == 1.0f);
    std::vector<float> out(16, 1.0f);
    dequantize_row(fm, codes.data(), codes.size(), 1.0f, out.data());
    for (float v : out) CHECK(v == 0.0f);

    // A row whose amax maps exactly to fmax, and one whose fp32 quotient would overshoot without the fix-up.
    for (float amax : {448.0f, 1.0f, 3.0f, 0.1f, 1e-30f, 3.4e38f, 1e-44f}) {
      std::vector<float> row{amax, -amax, amax / 3};
      const float s = block_scale(fm, row.data(), row.size());
      CHECK(amax / s <= scaled_format_max(fm));
      CHECK(s >= FLT_MIN);
    }
    // Non-finite values do not set the scale; NaN keeps a NaN code.
    std::vector<float> row{1.0f, std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()};
    std::vector<uint8_t> c(3);
    const float s = quantize_row(fm, Rounding::Nearest, row.data(), row.size(), c.data());
    CHECK(s == block_scale(fm, std::vector<float>{1.0f}.data(), 1));
    std::vector<float> d(3);
    dequantize_row(fm, c.data(), 3, s, d.data());
    CHECK(std::isnan(d[1]));
    if (fm == Format::E5M2) CHECK(d[2] == -std::numeric_limits<float>::infinity());
    else CHECK(d[2] == -scaled_format_max(fm) * s);
  }
  CHECK_THROWS(scaled_format_max(Format::BF16));
  CHECK_THROWS(quantize_row(Format::E4M3, Rounding::Stochastic, zeros.data(), zeros.size(), codes.data(), nullptr));

  // The whole-state helpers lay rows out contiguously with one scale each.
  std::mt19937 g(3u);
  const size_t rows = 6, len = 10;
  std::vector<double> x(rows * len);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(double(g()) - 2147483648.0, -int(i / len) * 7 - 31);
  std::vector<uint8_t> cs(x.size());
  std::vector<float> scales(rows);
  quantize_rows(Format::E4M3, Rounding::Nearest, x.data(), rows, len, cs.data(), scales.data());
  std::vector<double> back(x.size());
  dequantize_rows(Format::E4M3, cs.data(), scales.data(), rows, len, back.data());
  for (size_t j = 0; j < rows; ++j) {
    CHECK(scales[j] == block_scale(Format::E4M3, x.data() + j * len, len));
    for (size_t i = 0; i < len; ++i)
      CHECK(std::fabs(back[j * len + i] - x[j * len + i]) <= std::ldexp(1.0, -4) * 448.0 * scales[j]);
  }
}
