#include "metrics/output_error.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "numeric/bits.h"

namespace rssm {

StepError step_error(const double* y, const double* y_ref, int seqs, int out_elems) {
  StepError e;
  double tot_d2 = 0, tot_r2 = 0;
  for (int q = 0; q < seqs; ++q) {
    const double* a = y + static_cast<size_t>(q) * out_elems;
    const double* r = y_ref + static_cast<size_t>(q) * out_elems;
    double d2 = 0, r2 = 0, amax = 0;
    for (int i = 0; i < out_elems; ++i) {
      const double d = a[i] - r[i];
      d2 += d * d;
      r2 += r[i] * r[i];
      // NaN must not be hidden by max(): propagate it.
      const double ad = std::fabs(d);
      if (!(ad <= amax)) amax = ad;
    }
    const double rel = r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2);
    e.rel_mean += rel;
    if (!(rel <= e.rel_max)) e.rel_max = rel;
    if (!(amax <= e.abs_max)) e.abs_max = amax;
    tot_d2 += d2;
    tot_r2 += r2;
  }
  e.rel_mean /= std::max(1, seqs);
  e.rel_rms = tot_r2 > 0 ? std::sqrt(tot_d2 / tot_r2) : std::sqrt(tot_d2);
  return e;
}

void OutputErrorSeries::push(const StepError& e) {
  rel_mean.push_back(e.rel_mean);
  rel_max.push_back(e.rel_max);
  abs_max.push_back(e.abs_max);
  rel_rms.push_back(e.rel_rms);
}

namespace {

// Bit patterns mapped to integers that order like the values (negative patterns mirrored below zero), so the
// difference of two is the count of representable values between them.
long long ordered(long long bits, long long sign_bit) { return (bits & sign_bit) ? -(bits & (sign_bit - 1)) : bits; }

}  // namespace

double ulp_distance(Format f, double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  if (a == b) return 0;
  long long oa = 0, ob = 0;
  switch (f) {
    case Format::FP64: {
      int64_t ia = 0, ib = 0;
      std::memcpy(&ia, &a, 8);
      std::memcpy(&ib, &b, 8);
      // Mirrored like the narrow formats; across zero the distance is the sum of the magnitudes' (it can exceed
      // long long's range, so it is summed in double there).
      const int64_t ma = ia & INT64_MAX, mb = ib & INT64_MAX;
      if ((ia < 0) != (ib < 0)) return static_cast<double>(ma) + static_cast<double>(mb);
      return static_cast<double>(ma > mb ? ma - mb : mb - ma);
    }
    case Format::FP32:
    case Format::BF16: {
      const float fa = static_cast<float>(a), fb = static_cast<float>(b);
      if (fa != a || fb != b) return std::numeric_limits<double>::quiet_NaN();
      uint32_t ua = 0, ub = 0;
      std::memcpy(&ua, &fa, 4);
      std::memcpy(&ub, &fb, 4);
      if (f == Format::BF16) {
        if ((ua & 0xFFFFu) || (ub & 0xFFFFu)) return std::numeric_limits<double>::quiet_NaN();
        ua >>= 16;
        ub >>= 16;
        oa = ordered(ua, 0x8000), ob = ordered(ub, 0x8000);
      } else {
        oa = ordered(ua, 0x80000000LL), ob = ordered(ub, 0x80000000LL);
      }
      break;
    }
    case Format::FP16: {
      const float fa = static_cast<float>(a), fb = static_cast<float>(b);
      if (round_nearest(Format::FP16, fa) != fa || round_nearest(Format::FP16, fb) != fb || fa != a || fb != b)
        return std::numeric_limits<double>::quiet_NaN();
      oa = ordered(float_to_fp16_bits(fa), 0x8000), ob = ordered(float_to_fp16_bits(fb), 0x8000);
      break;
    }
    default: return std::numeric_limits<double>::quiet_NaN();  // scaled formats are never output formats
  }
  return static_cast<double>(oa > ob ? oa - ob : ob - oa);
}

BackendDiff backend_diff(const double* y_a, const double* y_b, int seqs, int out_elems, Format out_format) {
  BackendDiff d;
  d.rel_max = step_error(y_a, y_b, seqs, out_elems).rel_max;
  const size_t n = static_cast<size_t>(seqs) * out_elems;
  d.bitwise = std::memcmp(y_a, y_b, n * sizeof(double)) == 0;
  if (d.bitwise) return d;
  for (size_t i = 0; i < n; ++i) {
    const double u = ulp_distance(out_format, y_a[i], y_b[i]);
    if (!(u <= d.ulps_max)) d.ulps_max = u;  // NaN wins
  }
  return d;
}

}  // namespace rssm
