#include "cpu/reference.h"

#include <cmath>

namespace rssm {

void ReferenceDecoder::reset(const Model& model, int seqs) {
  model_ = model;
  seqs_ = seqs;
  step_ = 0;
  state_.assign(static_cast<size_t>(seqs) * model.state_elems(), 0.0);
  if (model.family == Family::GDN) {
    qn_.assign(static_cast<size_t>(seqs) * model.gdn.HK * model.gdn.K, 0.0);
    kn_.assign(qn_.size(), 0.0);
  }
}

void ReferenceDecoder::advance(const InputChunk& c, int s0, int n, double* y) {
  const int seqs = seqs_;
  const size_t out = static_cast<size_t>(model_.out_elems());
  const long long se = model_.state_elems();
  if (model_.family == Family::Mamba2) {
    const auto& p = model_.mamba2;
    const size_t head_elems = static_cast<size_t>(p.P) * p.N;
    for (int s = s0; s < s0 + n; ++s) {
      double* ys = y + static_cast<size_t>(s - s0) * seqs * out;
#pragma omp parallel for collapse(2) schedule(static)
      for (int q = 0; q < seqs; ++q)
        for (int h = 0; h < p.H; ++h)
          mamba2_head_step_ref(p, h, state_.data() + q * se + h * head_elems, c.at(0, s, q), c.at(1, s, q),
                               c.at(2, s, q), c.at(3, s, q), p.has_z ? c.at(4, s, q) : nullptr, ys + q * out);
    }
  } else {
    const auto& p = model_.gdn;
    const int K = p.K;
    const size_t head_elems = static_cast<size_t>(p.V) * K;
    const double qscale = 1.0 / std::sqrt(static_cast<double>(K));
    for (int s = s0; s < s0 + n; ++s) {
      double* ys = y + static_cast<size_t>(s - s0) * seqs * out;
      for (int q = 0; q < seqs; ++q)
        for (int hk = 0; hk < p.HK; ++hk) {
          const size_t off = (static_cast<size_t>(q) * p.HK + hk) * K;
          gdn_l2norm_ref(c.at(0, s, q) + static_cast<size_t>(hk) * K, K, p.eps, qscale, &qn_[off]);
          gdn_l2norm_ref(c.at(1, s, q) + static_cast<size_t>(hk) * K, K, p.eps, 1.0, &kn_[off]);
        }
#pragma omp parallel for collapse(2) schedule(static)
      for (int q = 0; q < seqs; ++q)
        for (int h = 0; h < p.HV; ++h) {
          const size_t off = (static_cast<size_t>(q) * p.HK + h / p.values_per_key()) * K;
          const GdnGate gt = gdn_gate_ref(p, h, c.at(3, s, q)[h], c.at(4, s, q)[h]);
          gdn_head_step_ref(p, h, state_.data() + q * se + h * head_elems, &qn_[off], &kn_[off], c.at(2, s, q), gt,
                            ys + q * out);
        }
    }
  }
  step_ += n;
}

std::vector<StateCopy> ReferenceDecoder::state() const { return {{"state", step_, state_.data(), state_.size(), {}}}; }

}  // namespace rssm
