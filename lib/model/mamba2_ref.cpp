// fp64 eager Mamba-2 step: see mamba2.h. Plain loops; the only concession to speed is an `omp simd`
// reduction on the output dot (it lets the compiler vectorise the sum, changing only its order).
#include <cmath>
#include <fmt/format.h>

#include "errors.h"
#include "model/mamba2.h"

namespace rssm {

namespace {
void check_size(const char* where, const char* name, size_t got, size_t want) {
  if (got != want)
    throw FormatError(fmt::format("{}: parameter '{}' has {} values, geometry needs {}", where, name, got, want));
}
}  // namespace

void Mamba2Params::validate(const char* where) const {
  if (H <= 0 || P <= 0 || N <= 0 || G <= 0)
    throw FormatError(fmt::format("{}: Mamba-2 geometry must be positive (H={} P={} N={} G={})", where, H, P, N, G));
  if (H % G != 0)
    throw FormatError(fmt::format("{}: Mamba-2 heads H={} must be a multiple of groups G={}", where, H, G));
  check_size(where, "A_log", A_log.size(), H);
  check_size(where, "dt_bias", dt_bias.size(), H);
  check_size(where, "D", D.size(), d_per_dim ? static_cast<size_t>(H) * P : static_cast<size_t>(H));
  for (size_t i = 0; i < A_log.size(); ++i)
    if (!std::isfinite(A_log[i]) || !std::isfinite(dt_bias[i]))
      throw FormatError(fmt::format("{}: parameter A_log or dt_bias is not finite at head {}", where, i));
  for (size_t i = 0; i < D.size(); ++i)
    if (!std::isfinite(D[i])) throw FormatError(fmt::format("{}: parameter D is not finite at index {}", where, i));
  if (!(dt_min >= 0.0) || !(dt_max > dt_min))
    throw FormatError(fmt::format("{}: dt limits need 0 <= dt_min < dt_max (got {} and {})", where, dt_min, dt_max));
}

double mamba2_delta_ref(const Mamba2Params& p, int h, double dt_raw) {
  return mamba2_delta<double>(dt_raw, p.dt_bias[h], p.dt_min, p.dt_max);
}

void mamba2_head_step_ref(const Mamba2Params& p, int h, double* state, const float* x, const float* dt,
                          const float* B, const float* C, const float* z, double* y) {
  const int P = p.P, N = p.N;
  const int g = h / p.heads_per_group();
  const float* Bg = B + static_cast<size_t>(g) * N;
  const float* Cg = C + static_cast<size_t>(g) * N;
  const double delta = mamba2_delta_ref(p, h, dt[h]);
  const double A = -std::exp(p.A_log[h]);
  const double a = std::exp(A * delta);
  for (int i = 0; i < P; ++i) {
    double* S = state + static_cast<size_t>(i) * N;
    const double xi = x[static_cast<size_t>(h) * P + i];
    const double dx = delta * xi;
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (int n = 0; n < N; ++n) {
      const double s = a * S[n] + dx * static_cast<double>(Bg[n]);
      S[n] = s;
      acc += s * static_cast<double>(Cg[n]);
    }
    double out = acc + p.d_at(h, i) * xi;
    if (z != nullptr) {
      const double zi = z[static_cast<size_t>(h) * P + i];
      out = silu_gate(out, zi);
    }
    y[static_cast<size_t>(h) * P + i] = out;
  }
}

void mamba2_step_ref(const Mamba2Params& p, double* state, const float* x, const float* dt, const float* B,
                     const float* C, const float* z, double* y) {
  const size_t head_elems = static_cast<size_t>(p.P) * p.N;
  for (int h = 0; h < p.H; ++h) mamba2_head_step_ref(p, h, state + h * head_elems, x, dt, B, C, z, y);
}

}  // namespace rssm
