// fp64 eager Gated DeltaNet step: see gdn.h.
#include <cmath>
#include <fmt/format.h>
#include <vector>

#include "errors.h"
#include "model/gdn.h"
#include "model/formulas.h"

namespace rssm {

void GdnParams::validate(const char* where) const {
  if (HK <= 0 || HV <= 0 || K <= 0 || V <= 0)
    throw FormatError(fmt::format("{}: GDN geometry must be positive (HK={} HV={} K={} V={})", where, HK, HV, K, V));
  if (HV % HK != 0)
    throw FormatError(fmt::format("{}: GDN value heads HV={} must be a multiple of key heads HK={}", where, HV, HK));
  if (A_log.size() != static_cast<size_t>(HV))
    throw FormatError(fmt::format("{}: parameter 'A_log' has {} values, geometry needs {}", where, A_log.size(), HV));
  if (dt_bias.size() != static_cast<size_t>(HV))
    throw FormatError(
        fmt::format("{}: parameter 'dt_bias' has {} values, geometry needs {}", where, dt_bias.size(), HV));
  for (int i = 0; i < HV; ++i)
    if (!std::isfinite(A_log[i]) || !std::isfinite(dt_bias[i]))
      throw FormatError(fmt::format("{}: parameter A_log or dt_bias is not finite at head {}", where, i));
  if (!(eps > 0.0)) throw FormatError(fmt::format("{}: GDN eps must be positive (got {})", where, eps));
}

GdnGate gdn_gate_ref(const GdnParams& p, int h, double a_raw, double b_raw) {
  GdnGate gt;
  gt.g = gdn_log_gate<double>(p.A_log[h], a_raw, p.dt_bias[h]);
  gt.alpha = std::exp(gt.g);
  gt.beta = sigmoid<double>(b_raw);
  return gt;
}

void gdn_l2norm_ref(const float* v, int K, double eps, double scale, double* out) {
  double ss = 0.0;
  for (int i = 0; i < K; ++i) ss += static_cast<double>(v[i]) * v[i];
  const double inv = l2norm_factor<double>(ss, eps, scale);
  for (int i = 0; i < K; ++i) out[i] = v[i] * inv;
}

void gdn_head_step_ref(const GdnParams& p, int h, double* state, const double* qn, const double* kn, const float* v,
                       const GdnGate& gate, double* o) {
  const int K = p.K, V = p.V;
  for (int i = 0; i < V; ++i) {
    double* S = state + static_cast<size_t>(i) * K;
    double kv = 0.0;
#pragma omp simd reduction(+ : kv)
    for (int j = 0; j < K; ++j) {
      S[j] *= gate.alpha;
      kv += S[j] * kn[j];
    }
    const double u = gate.beta * (static_cast<double>(v[static_cast<size_t>(h) * V + i]) - kv);
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (int j = 0; j < K; ++j) {
      S[j] += u * kn[j];
      acc += S[j] * qn[j];
    }
    o[static_cast<size_t>(h) * V + i] = acc;
  }
}

void gdn_step_ref(const GdnParams& p, double* state, const float* q, const float* k, const float* v, const float* a,
                  const float* b, double* o) {
  const int K = p.K;
  std::vector<double> qn(static_cast<size_t>(p.HK) * K), kn(static_cast<size_t>(p.HK) * K);
  const double qscale = 1.0 / std::sqrt(static_cast<double>(K));
  for (int hk = 0; hk < p.HK; ++hk) {
    gdn_l2norm_ref(q + static_cast<size_t>(hk) * K, K, p.eps, qscale, &qn[static_cast<size_t>(hk) * K]);
    gdn_l2norm_ref(k + static_cast<size_t>(hk) * K, K, p.eps, 1.0, &kn[static_cast<size_t>(hk) * K]);
  }
  const size_t head_elems = static_cast<size_t>(p.V) * K;
  for (int h = 0; h < p.HV; ++h) {
    const int hk = h / p.values_per_key();
    const GdnGate gt = gdn_gate_ref(p, h, a[h], b[h]);
    gdn_head_step_ref(p, h, state + h * head_elems, &qn[static_cast<size_t>(hk) * K], &kn[static_cast<size_t>(hk) * K],
                      v, gt, o);
  }
}

}  // namespace rssm
