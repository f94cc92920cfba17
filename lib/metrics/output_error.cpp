#include "metrics/output_error.h"

#include <algorithm>
#include <cmath>

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

}  // namespace rssm
