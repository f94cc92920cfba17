#include "metrics/state_error.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <fmt/format.h>
#include <limits>

#include "errors.h"
#include "model/mamba2.h"

namespace rssm {

namespace {

int head_count(const Model& m) { return m.family == Family::Mamba2 ? m.mamba2.H : m.gdn.HV; }

long long head_elems(const Model& m) {
  return m.family == Family::Mamba2 ? static_cast<long long>(m.mamba2.P) * m.mamba2.N
                                    : static_cast<long long>(m.gdn.V) * m.gdn.K;
}

double norm_ratio(double d2, double r2) { return r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2); }

}  // namespace

double head_decay_rate(const Model& m, int h) {
  if (h < 0 || h >= head_count(m))
    throw InternalError(fmt::format("head_decay_rate: head {} out of range [0, {})", h, head_count(m)));
  if (m.family == Family::Mamba2) {
    const auto& p = m.mamba2;
    if (static_cast<int>(p.A_log.size()) != p.H || static_cast<int>(p.dt_bias.size()) != p.H)
      throw InternalError("head_decay_rate: Mamba-2 parameters A_log / dt_bias are not filled in (expected [H])");
    // Through mamba2_delta_ref so the dt limits apply exactly as in the decoders.
    return std::exp(p.A_log[h]) * mamba2_delta_ref(p, h, 0.0);
  }
  const auto& g = m.gdn;
  if (static_cast<int>(g.A_log.size()) != g.HV || static_cast<int>(g.dt_bias.size()) != g.HV)
    throw InternalError("head_decay_rate: GDN parameters A_log / dt_bias are not filled in (expected [HV])");
  return std::exp(g.A_log[h]) * softplus_ref(g.dt_bias[h]);
}

DecayBands decay_bands(const Model& m) {
  DecayBands b;
  b.names = {"fast", "medium", "slow"};
  b.count.assign(3, 0);
  const int H = head_count(m);
  b.band_of_head.resize(H);
  for (int h = 0; h < H; ++h) {
    const double r = head_decay_rate(m, h);
    // A NaN rate (corrupt parameters) lands in "slow": the band where an error would be most visible.
    const int band = r > kFastDecayRate ? 0 : (r > kSlowDecayRate ? 1 : 2);
    b.band_of_head[h] = band;
    ++b.count[band];
  }
  return b;
}

StateErrorStats state_error(const Model& m, const DecayBands& bands, const double* S, const double* S_ref, int seqs) {
  const int H = head_count(m);
  const long long E = head_elems(m);
  const int nb = static_cast<int>(bands.names.size());
  if (static_cast<int>(bands.band_of_head.size()) != H)
    throw InternalError(fmt::format("state_error: bands cover {} heads, model has {}", bands.band_of_head.size(), H));

  // Per-(sequence, head) squared norms first: each block is one streaming pass over E contiguous doubles, and the
  // blocks are independent, so the parallel loop needs no reduction across threads. The small [seqs, H] tables
  // are reduced afterwards in a fixed order, so results do not depend on the thread count.
  const long long blocks = static_cast<long long>(seqs) * H;
  std::vector<double> d2(blocks), r2(blocks);
#pragma omp parallel for schedule(static)
  for (long long qb = 0; qb < blocks; ++qb) {
    const double* a = S + qb * E;
    const double* r = S_ref + qb * E;
    double sd = 0, sr = 0;
#pragma omp simd reduction(+ : sd, sr)
    for (long long i = 0; i < E; ++i) {
      const double d = a[i] - r[i];
      sd += d * d;
      sr += r[i] * r[i];
    }
    d2[qb] = sd;
    r2[qb] = sr;
  }

  StateErrorStats st;
  st.band_rel_mean.assign(nb, 0.0);
  std::vector<double> bd(nb), br(nb);
  for (int q = 0; q < seqs; ++q) {
    double td = 0, tr = 0;
    std::fill(bd.begin(), bd.end(), 0.0);
    std::fill(br.begin(), br.end(), 0.0);
    for (int h = 0; h < H; ++h) {
      const size_t i = static_cast<size_t>(q) * H + h;
      td += d2[i];
      tr += r2[i];
      bd[bands.band_of_head[h]] += d2[i];
      br[bands.band_of_head[h]] += r2[i];
    }
    const double rel = norm_ratio(td, tr);
    st.rel_mean += rel;
    if (!(rel <= st.rel_max)) st.rel_max = rel;  // keeps a NaN visible
    for (int b = 0; b < nb; ++b) st.band_rel_mean[b] += norm_ratio(bd[b], br[b]);
  }
  const double inv = seqs > 0 ? 1.0 / seqs : 0.0;
  st.rel_mean *= inv;
  for (int b = 0; b < nb; ++b) {
    const bool empty = b >= static_cast<int>(bands.count.size()) || bands.count[b] == 0;
    st.band_rel_mean[b] = empty ? std::numeric_limits<double>::quiet_NaN() : st.band_rel_mean[b] * inv;
  }
  return st;
}

}  // namespace rssm
