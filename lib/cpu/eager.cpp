#include "cpu/eager.h"

#include <cmath>
#include <fmt/format.h>

#include "errors.h"
#include "model/formulas.h"
#include "numeric/arith.h"
#include "cpu/checkpoint.h"

namespace rssm {

EagerDecoder::EagerDecoder(Format state_format, Rounding rounding, uint64_t seed, Format out_format)
    : fmt_(state_format), rnd_(rounding), out_fmt_(out_format), seed_(seed) {
  if (out_fmt_ != Format::FP64 && out_fmt_ != Format::FP32 && out_fmt_ != Format::BF16 && out_fmt_ != Format::FP16)
    throw ConfigError(fmt::format("config key 'scheme.out_format': outputs are fp64, fp32, bf16 or fp16 (got {})",
                                  format_name(out_fmt_)));
  if (fmt_ != Format::FP64 && fmt_ != Format::FP32 && fmt_ != Format::BF16 && fmt_ != Format::FP16)
    throw ConfigError(fmt::format(
        "config key 'scheme.state_format': eager decoding supports fp64, fp32, bf16 or fp16 states (got {})",
        format_name(fmt_)));
}

Scheme EagerDecoder::scheme() const {
  Scheme s;
  s.backend = Backend::Cpu;
  s.decoder = DecoderKind::Eager;
  s.state_format = fmt_;
  s.rounding = rnd_;
  s.out_format = out_fmt_;
  s.window = window_;
  s.acceptance = acceptance_;
  return s;
}

std::string EagerDecoder::name() const { return scheme().decoder_name(); }

void EagerDecoder::reset(const Model& model, int seqs) {
  model_ = model;
  seqs_ = seqs;
  step_ = 0;
  state_.assign(static_cast<size_t>(seqs) * model.state_elems(), 0.0);
  if (model.family == Family::GDN) {
    qn_.assign(static_cast<size_t>(seqs) * model.gdn.HK * model.gdn.K, 0.0);
    kn_.assign(qn_.size(), 0.0);
  }
}

template <class T>
T EagerDecoder::store(T v, size_t idx) const {
  if constexpr (std::is_same_v<T, double>) {
    return v;  // fp64 state
  } else {
    if (fmt_ == Format::FP32) return v;
    if (rnd_ == Rounding::Stochastic) return round_stochastic(fmt_, v, state_random_bits(seed_, RandomStream::EagerState, step_, static_cast<long long>(idx)));
    return round_store(fmt_, v);
  }
}

void EagerDecoder::advance(const InputChunk& c, int s0, int n, double* y) {
  const size_t out = static_cast<size_t>(seqs_) * model_.out_elems();
  const bool exact = fmt_ == Format::FP64;
  for (int s = s0; s < s0 + n; ++s) {
    double* ys = y + static_cast<size_t>(s - s0) * out;
    if (model_.family == Family::Mamba2)
      exact ? step_mamba2<double>(c, s, ys) : step_mamba2<float>(c, s, ys);
    else
      exact ? step_gdn<double>(c, s, ys) : step_gdn<float>(c, s, ys);
    if (out_fmt_ != Format::FP64) round_nearest_inplace(out_fmt_, ys, out);
    ++step_;
  }
}

template <class T>
void EagerDecoder::step_mamba2(const InputChunk& c, int s, double* y) {
  const auto& p = model_.mamba2;
  const int P = p.P, N = p.N, hpg = p.heads_per_group();
  const size_t out = static_cast<size_t>(model_.out_elems());
  const long long se = model_.state_elems();
#pragma omp parallel for collapse(2) schedule(static)
  for (int q = 0; q < seqs_; ++q)
    for (int h = 0; h < p.H; ++h) {
      const float* x = c.at(0, s, q) + static_cast<size_t>(h) * P;
      const float* B = c.at(2, s, q) + static_cast<size_t>(h / hpg) * N;
      const float* C = c.at(3, s, q) + static_cast<size_t>(h / hpg) * N;
      const float* z = p.has_z ? c.at(4, s, q) + static_cast<size_t>(h) * P : nullptr;
      const T delta = mamba2_delta<T>(static_cast<T>(c.at(1, s, q)[h]), static_cast<T>(p.dt_bias[h]),
                                      static_cast<T>(p.dt_min), static_cast<T>(p.dt_max));
      const T a = std::exp(mamba2_log_decay<T>(static_cast<T>(p.A_log[h]), delta));
      const size_t base = q * se + static_cast<size_t>(h) * P * N;
      double* S = state_.data() + base;
      for (int i = 0; i < P; ++i, S += N) {
        const T dx = delta * static_cast<T>(x[i]);
        T acc = 0;
        for (int j = 0; j < N; ++j) {
          const T v = store<T>(a * static_cast<T>(S[j]) + dx * static_cast<T>(B[j]), base + static_cast<size_t>(i) * N + j);
          S[j] = v;
          acc += v * static_cast<T>(C[j]);
        }
        T o = acc + static_cast<T>(p.d_at(h, i)) * static_cast<T>(x[i]);
        if (z) o = silu_gate<T>(o, static_cast<T>(z[i]));
        y[q * out + static_cast<size_t>(h) * P + i] = o;
      }
    }
}

template <class T>
void EagerDecoder::step_gdn(const InputChunk& c, int s, double* y) {
  const auto& p = model_.gdn;
  const int K = p.K, V = p.V;
  const size_t out = static_cast<size_t>(model_.out_elems());
  const long long se = model_.state_elems();
  const T qscale = T(1) / std::sqrt(static_cast<T>(K));
  for (int q = 0; q < seqs_; ++q)
    for (int hk = 0; hk < p.HK; ++hk) {
      const size_t off = (static_cast<size_t>(q) * p.HK + hk) * K;
      const float* qi = c.at(0, s, q) + static_cast<size_t>(hk) * K;
      const float* ki = c.at(1, s, q) + static_cast<size_t>(hk) * K;
      T sq = 0, sk = 0;
      for (int j = 0; j < K; ++j) {
        sq += static_cast<T>(qi[j]) * static_cast<T>(qi[j]);
        sk += static_cast<T>(ki[j]) * static_cast<T>(ki[j]);
      }
      const T iq = l2norm_factor<T>(sq, static_cast<T>(p.eps), qscale);
      const T ik = l2norm_factor<T>(sk, static_cast<T>(p.eps), T(1));
      for (int j = 0; j < K; ++j) {
        qn_[off + j] = static_cast<T>(qi[j]) * iq;
        kn_[off + j] = static_cast<T>(ki[j]) * ik;
      }
    }
#pragma omp parallel for collapse(2) schedule(static)
  for (int q = 0; q < seqs_; ++q)
    for (int h = 0; h < p.HV; ++h) {
      const size_t off = (static_cast<size_t>(q) * p.HK + h / p.values_per_key()) * K;
      const double* kn = &kn_[off];
      const double* qn = &qn_[off];
      const T g = gdn_log_gate<T>(static_cast<T>(p.A_log[h]), static_cast<T>(c.at(3, s, q)[h]),
                                  static_cast<T>(p.dt_bias[h]));
      const T alpha = std::exp(g);
      const T beta = sigmoid<T>(static_cast<T>(c.at(4, s, q)[h]));
      const float* v = c.at(2, s, q) + static_cast<size_t>(h) * V;
      const size_t base = q * se + static_cast<size_t>(h) * V * K;
      double* S = state_.data() + base;
      for (int i = 0; i < V; ++i, S += K) {
        T kv = 0;
        for (int j = 0; j < K; ++j) kv += static_cast<T>(S[j]) * static_cast<T>(kn[j]);
        const T u = beta * (static_cast<T>(v[i]) - alpha * kv);
        T acc = 0;
        for (int j = 0; j < K; ++j) {
          const T w = store<T>(alpha * static_cast<T>(S[j]) + u * static_cast<T>(kn[j]), base + static_cast<size_t>(i) * K + j);
          S[j] = w;
          acc += w * static_cast<T>(qn[j]);
        }
        y[q * out + static_cast<size_t>(h) * V + i] = acc;
      }
    }
}

std::vector<StateCopy> EagerDecoder::state() const { return {{"state", step_, state_.data(), state_.size(), {}}}; }

}  // namespace rssm
