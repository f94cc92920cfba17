// Error-growth summaries of a run: the power-law exponent of error against step, and error against position since
// the last flush. A shared low-precision checkpoint is rounded once per flush, so its error grows like a power of
// the number of flushes (about 0.5 for unbiased rounding); a dual-precision checkpoint should give a slope near 0.
// Not here: the per-step errors themselves (metrics/output_error.h, metrics/state_error.h). See docs/metrics.md.
#pragma once

#include <vector>

namespace rssm {

// Least-squares slope of log y against log x over the points where x and y are both positive and finite.
// x, y: [n] (same length). NaN if fewer than 3 such points or if those x are all equal.
double loglog_slope(const std::vector<double>& x, const std::vector<double>& y);

struct PositionProfile {
  std::vector<double> mean;       // [interval]: mean of err over the steps at each position (NaN where count is 0)
  std::vector<long long> count;   // [interval]: number of steps averaged (non-finite errors are skipped, not counted)
};

// err: [steps], err[t] the error of run step first_step + t. Position of that step = (first_step + t) % interval:
// flushes happen after steps whose count of folded tokens is a multiple of interval, so position 0 is the first
// step after a flush and position interval − 1 the flush step itself. interval >= 1, first_step >= 0.
PositionProfile error_by_position(const std::vector<double>& err, int interval, long long first_step = 0);

}  // namespace rssm
