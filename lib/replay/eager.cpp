#include "replay/eager.h"

#include <cmath>
#include <fmt/format.h>

#include "errors.h"

namespace rssm {

namespace {
inline float softplus_f(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
inline float store(Format f, float v) { return f == Format::FP32 ? v : round_nearest(f, v); }
}  // namespace

EagerDecoder::EagerDecoder(Format state_format) : fmt_(state_format) {
  if (fmt_ != Format::FP32 && fmt_ != Format::BF16 && fmt_ != Format::FP16)
    throw ConfigError(fmt::format("scheme.state_format: eager decoding supports fp32, bf16 or fp16 states (got {})",
                                  format_name(fmt_)));
}

std::string EagerDecoder::name() const { return "eager-" + format_name(fmt_); }

void EagerDecoder::reset(const Model& model, int seqs) {
  model_ = model;
  seqs_ = seqs;
  step_ = 0;
  state_.assign(static_cast<size_t>(seqs) * model.state_elems(), 0.0f);
  if (model.family == Family::GDN) {
    qn_.assign(static_cast<size_t>(seqs) * model.gdn.HK * model.gdn.K, 0.0f);
    kn_.assign(qn_.size(), 0.0f);
  }
}

void EagerDecoder::advance(const InputChunk& c, int s0, int n, double* y) {
  const int seqs = seqs_;
  const size_t out = static_cast<size_t>(model_.out_elems());
  const long long se = model_.state_elems();
  const Format f = fmt_;
  if (model_.family == Family::Mamba2) {
    const auto& p = model_.mamba2;
    const int P = p.P, N = p.N, hpg = p.heads_per_group();
    for (int s = s0; s < s0 + n; ++s) {
      double* ys = y + static_cast<size_t>(s - s0) * seqs * out;
#pragma omp parallel for collapse(2) schedule(static)
      for (int q = 0; q < seqs; ++q)
        for (int h = 0; h < p.H; ++h) {
          const float* x = c.at(0, s, q) + static_cast<size_t>(h) * P;
          const float* B = c.at(2, s, q) + static_cast<size_t>(h / hpg) * N;
          const float* C = c.at(3, s, q) + static_cast<size_t>(h / hpg) * N;
          const float* z = p.has_z ? c.at(4, s, q) + static_cast<size_t>(h) * P : nullptr;
          float delta = softplus_f(c.at(1, s, q)[h] + static_cast<float>(p.dt_bias[h]));
          delta = std::fmin(std::fmax(delta, static_cast<float>(p.dt_min)), static_cast<float>(p.dt_max));
          const float a = std::exp(-std::exp(static_cast<float>(p.A_log[h])) * delta);
          float* S = state_.data() + q * se + static_cast<size_t>(h) * P * N;
          for (int i = 0; i < P; ++i, S += N) {
            const float dx = delta * x[i];
            float acc = 0.0f;
            for (int j = 0; j < N; ++j) {
              const float v = store(f, a * S[j] + dx * B[j]);
              S[j] = v;
              acc += v * C[j];
            }
            float o = acc + static_cast<float>(p.d_at(h, i)) * x[i];
            if (z) o *= z[i] / (1.0f + std::exp(-z[i]));
            ys[q * out + static_cast<size_t>(h) * P + i] = o;
          }
        }
    }
  } else {
    const auto& p = model_.gdn;
    const int K = p.K, V = p.V;
    const float qscale = 1.0f / std::sqrt(static_cast<float>(K));
    for (int s = s0; s < s0 + n; ++s) {
      double* ys = y + static_cast<size_t>(s - s0) * seqs * out;
      for (int q = 0; q < seqs; ++q)
        for (int hk = 0; hk < p.HK; ++hk) {
          const size_t off = (static_cast<size_t>(q) * p.HK + hk) * K;
          const float* qi = c.at(0, s, q) + static_cast<size_t>(hk) * K;
          const float* ki = c.at(1, s, q) + static_cast<size_t>(hk) * K;
          float sq = 0, sk = 0;
          for (int j = 0; j < K; ++j) {
            sq += qi[j] * qi[j];
            sk += ki[j] * ki[j];
          }
          const float iq = qscale / std::sqrt(sq + static_cast<float>(p.eps));
          const float ik = 1.0f / std::sqrt(sk + static_cast<float>(p.eps));
          for (int j = 0; j < K; ++j) {
            qn_[off + j] = qi[j] * iq;
            kn_[off + j] = ki[j] * ik;
          }
        }
#pragma omp parallel for collapse(2) schedule(static)
      for (int q = 0; q < seqs; ++q)
        for (int h = 0; h < p.HV; ++h) {
          const size_t off = (static_cast<size_t>(q) * p.HK + h / p.values_per_key()) * K;
          const float* kn = &kn_[off];
          const float* qn = &qn_[off];
          const float g = -std::exp(static_cast<float>(p.A_log[h])) *
                          softplus_f(c.at(3, s, q)[h] + static_cast<float>(p.dt_bias[h]));
          const float alpha = std::exp(g);
          const float beta = 1.0f / (1.0f + std::exp(-c.at(4, s, q)[h]));
          const float* v = c.at(2, s, q) + static_cast<size_t>(h) * V;
          float* S = state_.data() + q * se + static_cast<size_t>(h) * V * K;
          for (int i = 0; i < V; ++i, S += K) {
            float kv = 0.0f;
            for (int j = 0; j < K; ++j) kv += S[j] * kn[j];
            const float u = beta * (v[i] - alpha * kv);
            float acc = 0.0f;
            for (int j = 0; j < K; ++j) {
              const float w = store(f, alpha * S[j] + u * kn[j]);
              S[j] = w;
              acc += w * qn[j];
            }
            ys[q * out + static_cast<size_t>(h) * V + i] = acc;
          }
        }
    }
  }
  step_ += n;
}

std::vector<StateCopy> EagerDecoder::state() const {
  return {{"state", step_, std::vector<double>(state_.begin(), state_.end())}};
}

}  // namespace rssm
