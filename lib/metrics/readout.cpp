#include "metrics/readout.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <limits>

#include "errors.h"
#include "numeric/philox.h"

namespace rssm {

namespace {

// Rows per GEMM call: large enough that the GEMM runs at full speed (each call streams all of W, 64 MiB at
// 4096 x 4096, so a few hundred rows amortise it), small enough that the [rows, vocab] float scratch stays
// in the tens of MiB whatever chunk the caller passes.
constexpr int kBlockRows = 256;

// Philox counter word 2 names the stream, so the readout never shares random bits with the synthetic trace
// generator even when the caller uses the same seed for both. ("READ" in ASCII.)
constexpr uint32_t kReadoutStream = 0x52454144u;

using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// φ(x) = e^x − 1 − x, accurate to rounding for every x: a Taylor series (Horner, terms to x^16/16!) for |x| <= 1/2,
// where expm1(x) − x would lose log10(2/|x|) digits to cancellation; expm1(x) − x above, where it loses none.
// The series' truncation error at |x| = 1/2 is 0.5^17/17! < 1e-19, far below rounding relative to φ ≈ x²/2.
inline double phi_series(double x) {
  double s = 1.0 / 20922789888000.0;  // 1/16!
  s = s * x + 1.0 / 1307674368000.0;  // 1/15!
  s = s * x + 1.0 / 87178291200.0;
  s = s * x + 1.0 / 6227020800.0;
  s = s * x + 1.0 / 479001600.0;
  s = s * x + 1.0 / 39916800.0;
  s = s * x + 1.0 / 3628800.0;
  s = s * x + 1.0 / 362880.0;
  s = s * x + 1.0 / 40320.0;
  s = s * x + 1.0 / 5040.0;
  s = s * x + 1.0 / 720.0;
  s = s * x + 1.0 / 120.0;
  s = s * x + 1.0 / 24.0;
  s = s * x + 1.0 / 6.0;
  s = s * x + 0.5;
  return s * x * x;
}

// KL(p ‖ q) where q ∝ p·e^δ, p a normalised distribution. With δ' = δ − Σ p δ (a shift of the test logits, which
// leaves q unchanged):  KL = log Σ p e^{δ'} − Σ p δ' = log1p(m + u) − m,  m = Σ p δ' (zero up to rounding),
// u = Σ p φ(δ') >= 0. Every term of u is computed without cancellation, so the result keeps full relative accuracy
// even when KL ~ 1e-14 (fp32-level output differences), where the textbook Σ p (log p − log q) or
// lse(ref + δ) − lse(ref) − Σ p δ loses everything to cancellation between O(1) or O(|δ|) terms.
double kl_from_shift(const double* p, const double* delta, int V) {
  double mean = 0;
#pragma omp simd reduction(+ : mean)
  for (int i = 0; i < V; ++i) mean += p[i] * delta[i];
  double m = 0, u = 0, dmax = -std::numeric_limits<double>::infinity(), amax = 0;
  for (int i = 0; i < V; ++i) {
    const double d = delta[i] - mean;
    dmax = std::max(dmax, d);
    amax = std::max(amax, std::fabs(d));
  }
  if (amax <= 0.5) {
#pragma omp simd reduction(+ : m, u)
    for (int i = 0; i < V; ++i) {
      const double d = delta[i] - mean;
      m += p[i] * d;
      u += p[i] * phi_series(d);
    }
  } else if (dmax < 700.0) {
    for (int i = 0; i < V; ++i) {
      const double d = delta[i] - mean;
      m += p[i] * d;
      u += p[i] * (std::fabs(d) <= 0.5 ? phi_series(d) : std::expm1(d) - d);
    }
  } else {
    // e^{δ'} would overflow: the distributions are far apart and plain log-sum-exp has no cancellation to fear.
    double lse_max = -std::numeric_limits<double>::infinity();
    for (int i = 0; i < V; ++i)
      if (p[i] > 0) lse_max = std::max(lse_max, std::log(p[i]) + delta[i] - mean);
    double z = 0;
    for (int i = 0; i < V; ++i)
      if (p[i] > 0) z += std::exp(std::log(p[i]) + delta[i] - mean - lse_max);
    for (int i = 0; i < V; ++i) m += p[i] * (delta[i] - mean);
    return lse_max + std::log(z) - m;
  }
  return std::log1p(m + u) - m;
}

}  // namespace

Readout::Readout(const std::vector<float>& W_or_empty, int vocab_if_synth, int out_elems, uint64_t seed)
    : out_elems_(out_elems),
      seed_(seed),
      measured_std_(std::numeric_limits<double>::quiet_NaN()),
      unscaled_std_(std::numeric_limits<double>::quiet_NaN()) {
  if (out_elems <= 0) throw ConfigError(fmt::format("readout: out_elems must be positive (got {})", out_elems));
  Eigen::setNbThreads(1);  // see gemm(): our threads, fixed slices, thread-count independent results
  if (!W_or_empty.empty()) {
    if (W_or_empty.size() % static_cast<size_t>(out_elems) != 0)
      throw ConfigError(fmt::format("readout: the trace's readout has {} values, not a multiple of out_elems = {} "
                                    "(expected shape [vocab, out_elems])",
                                    W_or_empty.size(), out_elems));
    vocab_ = static_cast<int>(W_or_empty.size() / out_elems);
    W_ = W_or_empty;
    synthesized_ = false;
    scale_ = 1.0;
    return;
  }
  if (vocab_if_synth <= 0)
    throw ConfigError(fmt::format("readout: vocabulary must be positive (got {})", vocab_if_synth));
  vocab_ = vocab_if_synth;
  synthesized_ = true;
  const size_t n = static_cast<size_t>(vocab_) * out_elems;
  W_.resize(n);
  const uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  const long long blocks = static_cast<long long>((n + 3) / 4);
  // Each block of four entries is a pure function of (seed, block index): the same W at any thread count.
#pragma omp parallel for schedule(static)
  for (long long b = 0; b < blocks; ++b) {
    const PhiloxBlock bits = philox4x32_10(
        PhiloxBlock{{static_cast<uint32_t>(b), static_cast<uint32_t>(static_cast<uint64_t>(b) >> 32), kReadoutStream, 0u}},
        k0, k1);
    double z[4];
    normals4(bits, z);
    for (int j = 0; j < 4; ++j) {
      const size_t i = static_cast<size_t>(b) * 4 + j;
      if (i < n) W_[i] = static_cast<float>(z[j]);
    }
  }
  // Until calibrated, logits have about the rms of y as their std (a unit-variance row dotted with y).
  scale_ = 1.0 / std::sqrt(static_cast<double>(out_elems));
}

// Why float GEMM. At vocab 4096 x out_elems 4096 the readout is 33.5 MFLOP per row and a run has steps·seqs rows
// per decoder; float GEMM runs at about twice the speed of double and W (64 MiB in float) stays half the size.
// Float is accurate enough where it is used:
//  * reference logits: each has a relative error of about 1e-7·sqrt(out_elems)-ish in the worst case, i.e. the
//    reference distribution is evaluated at a point ~1e-6 away from the exact one. KL and top-1 are then measured
//    around that point; this moves the operating point, not the measured difference.
//  * test logits are never formed as W·y (whose float error, ~1e-6·|logit|, would swamp the ~1e-6 logit
//    differences of fp32-accurate decoders); compare() forms W·(y − y_ref), whose rounding error is relative to
//    the difference itself (the difference is taken in double, then rounded once to float: 6e-8 relative).
//  * results must not depend on the thread count (a sweep run with --jobs must equal one run without): Eigen's own
//    threading splits the product differently for different thread counts, so it is off (setNbThreads(1) in the
//    constructor) and the threads here take fixed slices of the vocabulary, each a single-threaded product of the
//    same shape whatever the number of threads.
void Readout::gemm(const float* y, int rows, float* out) const {
  constexpr int kVocabSlice = 256;
  Eigen::Map<const RowMatF> Wm(W_.data(), vocab_, out_elems_);
  Eigen::Map<const RowMatF> Ym(y, rows, out_elems_);
  Eigen::Map<RowMatF> Lm(out, rows, vocab_);
  const int slices = (vocab_ + kVocabSlice - 1) / kVocabSlice;
#pragma omp parallel for schedule(static)
  for (int sl = 0; sl < slices; ++sl) {
    const int v0 = sl * kVocabSlice, nv = std::min(kVocabSlice, vocab_ - v0);
    Lm.middleCols(v0, nv).noalias() = Ym * Wm.middleRows(v0, nv).transpose();
  }
}

void Readout::logits(const double* y, int rows, std::vector<double>& out) const {
  const int V = vocab_, O = out_elems_;
  out.resize(static_cast<size_t>(rows) * V);
  std::vector<float> yf(static_cast<size_t>(kBlockRows) * O), lf(static_cast<size_t>(kBlockRows) * V);
  for (int r0 = 0; r0 < rows; r0 += kBlockRows) {
    const int nr = std::min(kBlockRows, rows - r0);
    const double* src = y + static_cast<size_t>(r0) * O;
    const long long ny = static_cast<long long>(nr) * O;
#pragma omp parallel for simd schedule(static)
    for (long long i = 0; i < ny; ++i) yf[i] = static_cast<float>(src[i]);
    gemm(yf.data(), nr, lf.data());
    double* dst = out.data() + static_cast<size_t>(r0) * V;
    const long long nl = static_cast<long long>(nr) * V;
    const double s = scale_;
#pragma omp parallel for simd schedule(static)
    for (long long i = 0; i < nl; ++i) dst[i] = s * static_cast<double>(lf[i]);
  }
}

void Readout::calibrate(const double* y_ref, int rows, double target_logit_std) {
  if (!(target_logit_std > 0) || !std::isfinite(target_logit_std))
    throw ConfigError(fmt::format("readout: target logit std must be positive and finite (got {})", target_logit_std));
  if (rows <= 0) throw ConfigError(fmt::format("readout: calibration needs at least one row (got {})", rows));
  const int V = vocab_, O = out_elems_;
  std::vector<float> yf(static_cast<size_t>(kBlockRows) * O), lf(static_cast<size_t>(kBlockRows) * V);
  // Per-block mean and centred sum of squares, merged with Chan et al.'s pairwise update: no one-pass
  // Σx² − n·mean² cancellation, and no need to keep every logit.
  double n_tot = 0, mean_tot = 0, m2_tot = 0;
  for (int r0 = 0; r0 < rows; r0 += kBlockRows) {
    const int nr = std::min(kBlockRows, rows - r0);
    const double* src = y_ref + static_cast<size_t>(r0) * O;
    const long long ny = static_cast<long long>(nr) * O;
    for (long long i = 0; i < ny; ++i) yf[i] = static_cast<float>(src[i]);
    gemm(yf.data(), nr, lf.data());
    const long long nl = static_cast<long long>(nr) * V;
    // Serial sums: a parallel reduction's order (and so its rounding) would depend on the thread count.
    double sum = 0;
    for (long long i = 0; i < nl; ++i) sum += lf[i];
    const double mean = sum / nl;
    double m2 = 0;
    for (long long i = 0; i < nl; ++i) {
      const double d = lf[i] - mean;
      m2 += d * d;
    }
    const double n_new = n_tot + nl;
    const double delta = mean - mean_tot;
    m2_tot += m2 + delta * delta * n_tot * nl / n_new;
    mean_tot += delta * nl / n_new;
    n_tot = n_new;
  }
  const double raw = std::sqrt(m2_tot / n_tot);  // std of the logits with the unscaled stored W
  if (!(raw > 0) || !std::isfinite(raw))
    throw ConfigError(fmt::format("readout: cannot calibrate, the reference logits of the first {} rows have std {} "
                                  "(all-zero or non-finite reference outputs?)",
                                  rows, raw));
  calibration_rows_ = rows;
  unscaled_std_ = raw;
  if (synthesized_) {
    scale_ = target_logit_std / raw;
    measured_std_ = scale_ * raw;
  } else {
    scale_ = 1.0;
    measured_std_ = raw;
  }
}

void Readout::compare(const std::vector<double>& ref_logits, const double* y, const double* y_ref, int rows, double* kl,
                      double* top1) const {
  if (ref_logits.size() != static_cast<size_t>(rows) * vocab_)
    throw InternalError(fmt::format("readout compare: ref_logits has {} values, expected rows·vocab = {}·{}",
                                    ref_logits.size(), rows, vocab_));
  compare(ref_logits.data(), y, y_ref, rows, kl, top1);
}

void Readout::compare(const double* ref_logits, const double* y, const double* y_ref, int rows, double* kl,
                      double* top1) const {
  const int V = vocab_, O = out_elems_;
  std::vector<float> df(static_cast<size_t>(kBlockRows) * O), lf(static_cast<size_t>(kBlockRows) * V);
  for (int r0 = 0; r0 < rows; r0 += kBlockRows) {
    const int nr = std::min(kBlockRows, rows - r0);
    const size_t off = static_cast<size_t>(r0) * O;
    const long long ny = static_cast<long long>(nr) * O;
    // The difference is exact-ish in double (both near the same value) and rounded once to float.
#pragma omp parallel for simd schedule(static)
    for (long long i = 0; i < ny; ++i) df[i] = static_cast<float>(y[off + i] - y_ref[off + i]);
    gemm(df.data(), nr, lf.data());

#pragma omp parallel
    {
      std::vector<double> p(V), delta(V);
#pragma omp for schedule(static)
      for (int r = 0; r < nr; ++r) {
        const double* ref = ref_logits + static_cast<size_t>(r0 + r) * V;
        const float* dl = lf.data() + static_cast<size_t>(r) * V;
        bool finite = true;
        for (int i = 0; i < V; ++i) {
          delta[i] = scale_ * static_cast<double>(dl[i]);
          finite = finite && std::isfinite(delta[i]);
        }
        if (!finite) {
          kl[r0 + r] = std::numeric_limits<double>::quiet_NaN();
          top1[r0 + r] = 0.0;
          continue;
        }
        // Reference softmax with the max subtracted (log-sum-exp), normalised in double.
        int am_ref = 0, am_test = 0;
        double best_test = ref[0] + delta[0];
        for (int i = 1; i < V; ++i) {
          if (ref[i] > ref[am_ref]) am_ref = i;
          const double t = ref[i] + delta[i];
          if (t > best_test) best_test = t, am_test = i;
        }
        const double mx = ref[am_ref];
        double z = 0;
        for (int i = 0; i < V; ++i) {
          p[i] = std::exp(ref[i] - mx);
          z += p[i];
        }
        const double iz = 1.0 / z;
        for (int i = 0; i < V; ++i) p[i] *= iz;
        // KL >= 0 exactly; the computed value can dip below by rounding (about 1e-16 relative to the terms
        // of log1p(m + u) − m): clamp so downstream logs and geometric means stay defined.
        const double d = kl_from_shift(p.data(), delta.data(), V);
        kl[r0 + r] = d > 0 ? d : 0.0;
        top1[r0 + r] = am_ref == am_test ? 1.0 : 0.0;
      }
    }
  }
}

}  // namespace rssm
