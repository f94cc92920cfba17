#include "metrics/growth.h"

#include <cmath>
#include <fmt/format.h>
#include <limits>

#include "errors.h"

namespace rssm {

double loglog_slope(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size())
    throw InternalError(fmt::format("loglog_slope: x has {} points, y has {}", x.size(), y.size()));
  // Two passes (mean, then centred sums): the one-pass formula cancels badly when log x is far from 0,
  // e.g. steps around 8192 where log x ~ 9 and the spread is small.
  double sx = 0, sy = 0;
  long long n = 0;
  auto usable = [&](size_t i) { return x[i] > 0 && y[i] > 0 && std::isfinite(x[i]) && std::isfinite(y[i]); };
  for (size_t i = 0; i < x.size(); ++i) {
    if (!usable(i)) continue;
    sx += std::log(x[i]);
    sy += std::log(y[i]);
    ++n;
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (n < 3) return nan;
  const double mx = sx / n, my = sy / n;
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!usable(i)) continue;
    const double dx = std::log(x[i]) - mx;
    sxx += dx * dx;
    sxy += dx * (std::log(y[i]) - my);
  }
  return sxx > 0 ? sxy / sxx : nan;
}

PositionProfile error_by_position(const std::vector<double>& err, int interval, long long first_step) {
  if (interval < 1) throw ConfigError(fmt::format("error_by_position: interval must be >= 1 (got {})", interval));
  if (first_step < 0) throw ConfigError(fmt::format("error_by_position: first_step must be >= 0 (got {})", first_step));
  PositionProfile pp;
  pp.mean.assign(interval, 0.0);
  pp.count.assign(interval, 0);
  long long pos = first_step % interval;
  for (size_t t = 0; t < err.size(); ++t) {
    // A non-finite error (a diverged run) would turn every later mean into NaN/inf and hide the profile; it is
    // visible in the per-step series instead.
    if (std::isfinite(err[t])) {
      pp.mean[pos] += err[t];
      ++pp.count[pos];
    }
    if (++pos == interval) pos = 0;
  }
  for (int i = 0; i < interval; ++i)
    pp.mean[i] = pp.count[i] > 0 ? pp.mean[i] / pp.count[i] : std::numeric_limits<double>::quiet_NaN();
  return pp;
}

}  // namespace rssm
