#include "cpu/replay.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <fmt/format.h>
#include <vector>

#include "errors.h"
#include "model/formulas.h"

namespace rssm {


namespace {


// acc + a·b in the flush arithmetic; double accumulation means fp64 arithmetic.
template <class T>
T flush_mac(Arith m, T acc, T a, T b) {
  if constexpr (std::is_same_v<T, double>) {
    (void)m;
    return acc + a * b;
  } else {
    return arith_mac(m, acc, a, b);
  }
}

// The flush of one head, the same rank-E update for both families:
//   out[i][n] = decay·S[i][n] + Σ_e (w_e·X(e, i))·Y(e, n)   for i < rows, n < cols,
// X(e, i) = X[e·x_stride + i] (Mamba-2: x_e, GDN: u_e), Y(e, n) = Y[e·y_stride + n] (Mamba-2: B_e, GDN: k_e).
// The accumulator starts from the decayed checkpoint (tensor-core D = A·B + C); the operands w_e·X(e, i) and
// Y(e, n) go through the flush arithmetic, accumulated over e in order.
template <class T>
void flush_head(Arith fa, int rows, int cols, int E, T decay, const T* w, const double* S, const double* X,
                size_t x_stride, const double* Y, size_t y_stride, double* out) {
  std::vector<T> a(static_cast<size_t>(E));
  for (int i = 0; i < rows; ++i) {
    for (int e = 0; e < E; ++e) a[e] = w[e] * static_cast<T>(X[e * x_stride + i]);
    for (int n = 0; n < cols; ++n) {
      T acc = decay * static_cast<T>(S[static_cast<size_t>(i) * cols + n]);
      for (int e = 0; e < E; ++e) acc = flush_mac<T>(fa, acc, a[e], static_cast<T>(Y[e * y_stride + n]));
      out[static_cast<size_t>(i) * cols + n] = acc;
    }
  }
}

// Buffer storage: the buffer format's value; an fp64 buffer keeps the value exactly (exact replay).
inline double to_buffer(Format f, double v) { return f == Format::FP64 ? v : round_store(f, static_cast<float>(v)); }

}  // namespace

ReplayDecoder::ReplayDecoder(const ReplayOptions& opt) : opt_(opt) {
  if (opt_.interval < 1) throw ConfigError(fmt::format("config key 'scheme.interval': must be >= 1 (got {})", opt_.interval));
  if (opt_.interval > kMaxInterval)
    throw ConfigError(fmt::format("config key 'scheme.interval': at most {} (got {})", kMaxInterval, opt_.interval));
  if (opt_.window < 0 || opt_.window > kMaxSchemeWindow)
    throw ConfigError(fmt::format("config key 'spec.window': 0..{} (got {})", kMaxSchemeWindow, opt_.window));
  if (opt_.window > 0) {
    // Speculative: buffer_len is L_hist, the ring's logical size (decoder/scheme.h spec_hist).
    if (opt_.buffer_len == 0) opt_.buffer_len = opt_.interval + opt_.window;
    if (opt_.buffer_len < opt_.interval + opt_.window)
      throw ConfigError(fmt::format("config key 'scheme.buffer_len': a speculative ring of {} cannot hold an interval "
                                    "({}) plus a window ({})",
                                    opt_.buffer_len, opt_.interval, opt_.window));
    if (opt_.buffer_len > kMaxInterval)
      throw ConfigError(fmt::format("config key 'scheme.buffer_len': the CPU speculative ring holds at most {} entries "
                                    "(got {})",
                                    kMaxInterval, opt_.buffer_len));
  }
  if (opt_.buffer_len == 0) opt_.buffer_len = opt_.interval;
  if (opt_.buffer_len < opt_.interval)
    throw ConfigError(fmt::format("config key 'scheme.buffer_len': {} is less than the interval {}", opt_.buffer_len,
                                  opt_.interval));
  if (opt_.buffer_format == Format::INT8 || opt_.buffer_format == Format::E4M3 || opt_.buffer_format == Format::E5M2)
    throw ConfigError(fmt::format("config key 'scheme.buffer_format': {} needs scales, which buffers do not keep",
                                  format_name(opt_.buffer_format)));
  if (opt_.out_format != Format::FP64 && opt_.out_format != Format::FP32 && opt_.out_format != Format::BF16 &&
      opt_.out_format != Format::FP16)
    throw ConfigError(fmt::format("config key 'scheme.out_format': outputs are fp64, fp32, bf16 or fp16 (got {})",
                                  format_name(opt_.out_format)));
  exact_ = opt_.dot_arith == Arith::FP64 && opt_.flush_arith == Arith::FP64;
}

ReplayOptions replay_options(const Scheme& s, uint64_t seed) {
  if (!s.replays()) throw InternalError("replay_options: an eager scheme");
  ReplayOptions o;
  o.interval = s.interval;
  o.buffer_len = s.buffer_len;
  o.update_format = s.state_format;
  o.dual = s.dual();
  o.read_format = s.read_format;
  o.buffer_format = s.buffer_format;
  o.dot_arith = s.dot_arith;
  o.flush_arith = s.flush_arith;
  o.rounding = s.rounding;
  o.seed = seed;
  o.route = s.route;
  o.out_format = s.out_format;
  o.window = s.window;
  o.acceptance = s.acceptance;
  return o;
}

Scheme replay_scheme(const ReplayOptions& o) {
  Scheme s;
  s.backend = Backend::Cpu;
  s.decoder = o.dual ? DecoderKind::Dual : DecoderKind::Replay;
  s.interval = o.interval;
  s.buffer_len = o.buffer_len;
  s.state_format = o.update_format;
  s.read_format = o.read_format;
  s.buffer_format = o.buffer_format;
  s.dot_arith = o.dot_arith;
  s.flush_arith = o.flush_arith;
  s.rounding = o.rounding;
  s.route = o.route;
  s.out_format = o.out_format;
  s.window = o.window;
  s.acceptance = o.acceptance;
  return s;
}

std::string ReplayDecoder::name() const { return replay_scheme(opt_).decoder_name(); }

void ReplayDecoder::reset(const Model& model, int seqs) {
  model_ = model;
  seqs_ = seqs;
  cap_ = opt_.buffer_len;
  step_ = 0;
  fill_.assign(seqs, 0);
  flushed_step_.assign(seqs, 0);
  flushes_.assign(seqs, 0);
  flush_row_.assign(seqs, 0);
  win_.assign(seqs, WindowCursor{});
  if (opt_.window > 0) draw_ = AcceptanceDraw(opt_.acceptance, opt_.window, opt_.seed, model.spec_accepted);
  const long long elems = static_cast<long long>(seqs) * model.state_elems();
  const bool m2 = model.family == Family::Mamba2;
  const int row = m2 ? model.mamba2.N : model.gdn.K;
  update_.init(opt_.update_format, opt_.rounding, elems, row, RandomStream::CheckpointUpdate, opt_.seed);
  if (opt_.dual) read_.init(opt_.read_format, opt_.rounding, elems, row, RandomStream::CheckpointRead, opt_.seed);
  const size_t S = seqs, L = cap_;
  if (m2) {
    const auto& p = model.mamba2;
    bx_.assign(S * L * p.H * p.P, 0.0);
    bB_.assign(S * L * p.G * p.N, 0.0);
    delta_.assign(S * L * p.H, 0.0);
    lam_.assign(S * L * p.H, 0.0);
    dots_.assign(S * p.G * L, 0.0);
  } else {
    const auto& p = model.gdn;
    bx_.assign(S * L * p.HV * p.V, 0.0);
    bB_.assign(S * L * p.HK * p.K, 0.0);
    delta_.assign(S * L * p.HV, 0.0);
    lam_.assign(S * L * p.HV, 0.0);
    dots_.assign(S * p.HK * 2 * L, 0.0);
    qn_.assign(S * p.HK * p.K, 0.0);
    kn_.assign(qn_.size(), 0.0);
  }
}

double* ReplayDecoder::buffer_values(int q, int j) {
  const size_t per = model_.family == Family::Mamba2 ? static_cast<size_t>(model_.mamba2.H) * model_.mamba2.P
                                                      : static_cast<size_t>(model_.gdn.HV) * model_.gdn.V;
  return bx_.data() + (static_cast<size_t>(q) * cap_ + j) * per;
}

void ReplayDecoder::advance(const InputChunk& c, int s0, int n, double* y) {
  const size_t out = static_cast<size_t>(seqs_) * model_.out_elems();
  const bool spec = opt_.window > 0;
  for (int s = s0; s < s0 + n; ++s) {
    if (spec)
      for (int q = 0; q < seqs_; ++q)
        if (win_[q].at_window_start()) win_[q].begin(draw_, q);
    double* ys = y + static_cast<size_t>(s - s0) * out;
    if (model_.family == Family::Mamba2) {
      exact_ ? step_mamba2<double>(c, s, ys) : step_mamba2<float>(c, s, ys);
    } else {
      exact_ ? step_gdn<double>(c, s, ys) : step_gdn<float>(c, s, ys);
    }
    if (opt_.out_format != Format::FP64) round_nearest_inplace(opt_.out_format, ys, out);
    ++step_;
    bool any = false;
    for (int q = 0; q < seqs_; ++q) {
      ++fill_[q];
      if (!spec) {
        flush_row_[q] = fill_[q] == opt_.interval;
      } else {
        WindowCursor& w = win_[q];
        flush_row_[q] = 0;
        if (++w.pos == w.committed) {  // the window ends: its rejected drafts are rolled back, maybe a flush
          poison_rejected(q, opt_.window - w.committed);
          flush_row_[q] = spec_flushes(fill_[q], opt_.interval, opt_.window, cap_);
        }
      }
      any = any || flush_row_[q];
    }
    if (any) flush_marked();
  }
}

void ReplayDecoder::flush_marked() {
  if (model_.family == Family::Mamba2)
    exact_ ? flush_mamba2<double>() : flush_mamba2<float>();
  else
    exact_ ? flush_gdn<double>() : flush_gdn<float>();
  // The new checkpoint is in update_; the dual read copy is refreshed from it (rounded once more, from the stored
  // update values, as a kernel writing both copies from registers holding the stored value would).
  const long long se = model_.state_elems();
  for (int q = 0; q < seqs_; ++q) {
    if (!flush_row_[q]) continue;
    if (opt_.dual) read_.store_from(update_, q * se, se, step_);
    fill_[q] = 0;
    flushed_step_[q] = step_;
    ++flushes_[q];
    flush_row_[q] = 0;
  }
}

void ReplayDecoder::poison_rejected(int q, int entries) {
  const bool m2 = model_.family == Family::Mamba2;
  const int heads = m2 ? model_.mamba2.H : model_.gdn.HV, width = m2 ? model_.mamba2.P : model_.gdn.V;
  const int groups = m2 ? model_.mamba2.G : model_.gdn.HK, gwidth = m2 ? model_.mamba2.N : model_.gdn.K;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int e = fill_[q]; e < fill_[q] + entries && e < cap_; ++e) {
    const size_t qe = static_cast<size_t>(q) * cap_ + e;
    std::fill_n(bx_.begin() + qe * heads * width, static_cast<size_t>(heads) * width, nan);
    std::fill_n(bB_.begin() + qe * groups * gwidth, static_cast<size_t>(groups) * gwidth, nan);
    std::fill_n(delta_.begin() + qe * heads, heads, nan);
    std::fill_n(lam_.begin() + qe * heads, heads, nan);
  }
}

std::vector<StateCopy> ReplayDecoder::state() const {
  const long long last = seqs_ > 0 ? *std::max_element(flushed_step_.begin(), flushed_step_.end()) : 0;
  std::vector<StateCopy> v = {{"checkpoint", last, update_.all().data(), update_.all().size(), {}}};
  if (opt_.dual) v.push_back({"read", last, read_.all().data(), read_.all().size(), {}});
  if (opt_.window > 0)
    for (auto& c : v) c.row_step = flushed_step_;
  return v;
}

// ---------------------------------------------------------------------------------------------------------------
// Mamba-2, output-only route:
//   y_t = exp(Λ_t)·(S_c·C_t) + Σ_j Δ_j·exp(Λ_t − Λ_j)·(B_j·C_t)·x_j + D·x_t
template <class T>
void ReplayDecoder::step_mamba2(const InputChunk& c, int s, double* y) {
  const auto& p = model_.mamba2;
  const int H = p.H, P = p.P, N = p.N, G = p.G, hpg = p.heads_per_group(), L = cap_;
  const long long se = model_.state_elems();
  const CheckpointCopy& rd = opt_.dual ? read_ : update_;
  const Format bf = opt_.buffer_format;
  const Arith da = opt_.dot_arith;
  // Append B_t per group and form B_j·C_t for every buffered entry (shared by the group's heads).
#pragma omp parallel for collapse(2) schedule(static)
  for (int q = 0; q < seqs_; ++q)
    for (int g = 0; g < G; ++g) {
      const int j = fill_[q];  // this token's entry
      const float* Bt = c.at(2, s, q) + static_cast<size_t>(g) * N;
      const float* Ct = c.at(3, s, q) + static_cast<size_t>(g) * N;
      double* Bj = bB_.data() + ((static_cast<size_t>(q) * L + j) * G + g) * N;
      for (int n = 0; n < N; ++n) Bj[n] = to_buffer(bf, Bt[n]);
      double* bc = dots_.data() + (static_cast<size_t>(q) * G + g) * L;
      for (int e = 0; e <= j; ++e)
        bc[e] = static_cast<T>(dot(da, bB_.data() + ((static_cast<size_t>(q) * L + e) * G + g) * N, Ct, N));
    }
  const size_t out = static_cast<size_t>(H) * P;
#pragma omp parallel for collapse(2) schedule(static)
  for (int q = 0; q < seqs_; ++q)
    for (int h = 0; h < H; ++h) {
      const int j = fill_[q];
      const float* xt = c.at(0, s, q) + static_cast<size_t>(h) * P;
      const float* Ct = c.at(3, s, q) + static_cast<size_t>(h / hpg) * N;
      const size_t lh = static_cast<size_t>(q) * L * H + h;  // + e * H for entry e
      const T d = mamba2_delta<T>(static_cast<T>(c.at(1, s, q)[h]), static_cast<T>(p.dt_bias[h]),
                                  static_cast<T>(p.dt_min), static_cast<T>(p.dt_max));
      const T lam_t = (j > 0 ? static_cast<T>(lam_[lh + static_cast<size_t>(j - 1) * H]) : T(0)) +
                      mamba2_log_decay<T>(static_cast<T>(p.A_log[h]), d);
      delta_[lh + static_cast<size_t>(j) * H] = d;
      lam_[lh + static_cast<size_t>(j) * H] = lam_t;
      double* xj = bx_.data() + ((static_cast<size_t>(q) * L + j) * H + h) * P;
      for (int i = 0; i < P; ++i) xj[i] = to_buffer(bf, xt[i]);
      // Per-entry weights Δ_j·exp(Λ_t − Λ_j)·(B_j·C_t).
      T w[kMaxInterval];
      const double* bc = dots_.data() + (static_cast<size_t>(q) * G + h / hpg) * L;
      for (int e = 0; e <= j; ++e) {
        const size_t le = lh + static_cast<size_t>(e) * H;
        w[e] = static_cast<T>(delta_[le]) * std::exp(lam_t - static_cast<T>(lam_[le])) * static_cast<T>(bc[e]);
      }
      const T decay = std::exp(lam_t);
      const double* S = rd.values() + q * se + static_cast<size_t>(h) * P * N;
      double* yq = y + q * out + static_cast<size_t>(h) * P;
      for (int i = 0; i < P; ++i) {
        T acc = decay * static_cast<T>(dot(da, S + static_cast<size_t>(i) * N, Ct, N));
        for (int e = 0; e <= j; ++e) acc += w[e] * static_cast<T>(bx_[((static_cast<size_t>(q) * L + e) * H + h) * P + i]);
        acc += static_cast<T>(p.d_at(h, i)) * static_cast<T>(xt[i]);
        if (p.has_z) {
          acc = silu_gate<T>(acc, c.at(4, s, q)[static_cast<size_t>(h) * P + i]);
        }
        yq[i] = acc;
      }
    }
}

// S_{c+K} = exp(Λ_K)·S_c + Σ_j Δ_j·exp(Λ_K − Λ_j)·x_j ⊗ B_j  (accumulator initialised with the decayed checkpoint)
template <class T>
void ReplayDecoder::flush_mamba2() {
  const auto& p = model_.mamba2;
  const int H = p.H, P = p.P, N = p.N, G = p.G, hpg = p.heads_per_group(), L = cap_;
  const long long se = model_.state_elems();
  const Arith fa = opt_.flush_arith;
  const long long step = step_;
#pragma omp parallel for collapse(2) schedule(static)
  for (int q = 0; q < seqs_; ++q)
    for (int h = 0; h < H; ++h) {
      if (!flush_row_[q]) continue;
      const int K = fill_[q];
      const size_t lh = static_cast<size_t>(q) * L * H + h;
      const T lamK = static_cast<T>(lam_[lh + static_cast<size_t>(K - 1) * H]);
      const T decay = std::exp(lamK);
      T w[kMaxInterval];
      for (int e = 0; e < K; ++e)
        w[e] = static_cast<T>(delta_[lh + static_cast<size_t>(e) * H]) *
               std::exp(lamK - static_cast<T>(lam_[lh + static_cast<size_t>(e) * H]));
      const long long off = q * se + static_cast<long long>(h) * P * N;
      std::vector<double> row(static_cast<size_t>(P) * N);
      flush_head<T>(fa, P, N, K, decay, w, update_.values() + off,
                    bx_.data() + (static_cast<size_t>(q) * L * H + h) * P, static_cast<size_t>(H) * P,
                    bB_.data() + (static_cast<size_t>(q) * L * G + h / hpg) * N, static_cast<size_t>(G) * N,
                    row.data());
      update_.store(row.data(), off, static_cast<long long>(P) * N, step);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// GDN: buffer u_j, k_j, g_j; S_t = α_t·S_{t-1} + u_t ⊗ k_t with u_t = β_t·(v_t − α_t·S_{t-1}·k_t).
template <class T>
void ReplayDecoder::step_gdn(const InputChunk& c, int s, double* y) {
  const auto& p = model_.gdn;
  const int HK = p.HK, HV = p.HV, K = p.K, V = p.V, vpk = p.values_per_key(), L = cap_;
  const long long se = model_.state_elems();
  const CheckpointCopy& rd = opt_.dual ? read_ : update_;
  const Format bf = opt_.buffer_format;
  const Arith da = opt_.dot_arith;
  const T qscale = T(1) / std::sqrt(static_cast<T>(K));
  // Normalise q_t, k_t (in the arithmetic, as the eager kernel does), append k_t, and form k_e·k_t, k_e·q_t.
#pragma omp parallel for collapse(2) schedule(static)
  for (int q = 0; q < seqs_; ++q)
    for (int hk = 0; hk < HK; ++hk) {
      const int j = fill_[q];  // this token's entry
      const float* qi = c.at(0, s, q) + static_cast<size_t>(hk) * K;
      const float* ki = c.at(1, s, q) + static_cast<size_t>(hk) * K;
      T sq = 0, sk = 0;
      for (int i = 0; i < K; ++i) {
        sq += static_cast<T>(qi[i]) * static_cast<T>(qi[i]);
        sk += static_cast<T>(ki[i]) * static_cast<T>(ki[i]);
      }
      const T iq = l2norm_factor<T>(sq, static_cast<T>(p.eps), qscale);
      const T ik = l2norm_factor<T>(sk, static_cast<T>(p.eps), T(1));
      double* qn = qn_.data() + (static_cast<size_t>(q) * HK + hk) * K;
      double* kn = kn_.data() + (static_cast<size_t>(q) * HK + hk) * K;
      double* kj = bB_.data() + ((static_cast<size_t>(q) * L + j) * HK + hk) * K;
      for (int i = 0; i < K; ++i) {
        qn[i] = static_cast<T>(qi[i]) * iq;
        kn[i] = static_cast<T>(ki[i]) * ik;
        kj[i] = to_buffer(bf, kn[i]);
      }
      double* kk = dots_.data() + ((static_cast<size_t>(q) * HK + hk) * 2) * L;
      double* kq = kk + L;
      for (int e = 0; e <= j; ++e) {
        const double* ke = bB_.data() + ((static_cast<size_t>(q) * L + e) * HK + hk) * K;
        kk[e] = static_cast<T>(dot(da, ke, kn, K));
        kq[e] = static_cast<T>(dot(da, ke, qn, K));
      }
    }
  const size_t out = static_cast<size_t>(HV) * V;
#pragma omp parallel for collapse(2) schedule(static)
  for (int q = 0; q < seqs_; ++q)
    for (int h = 0; h < HV; ++h) {
      const int j = fill_[q];
      const int hk = h / vpk;
      const size_t lh = static_cast<size_t>(q) * L * HV + h;
      const T g = gdn_log_gate<T>(static_cast<T>(p.A_log[h]), static_cast<T>(c.at(3, s, q)[h]),
                                  static_cast<T>(p.dt_bias[h]));
      const T alpha = std::exp(g);
      const T beta = sigmoid<T>(static_cast<T>(c.at(4, s, q)[h]));
      const T G_prev = j > 0 ? static_cast<T>(lam_[lh + static_cast<size_t>(j - 1) * HV]) : T(0);
      const T G_t = G_prev + g;
      delta_[lh + static_cast<size_t>(j) * HV] = g;
      lam_[lh + static_cast<size_t>(j) * HV] = G_t;
      const double* kk = dots_.data() + ((static_cast<size_t>(q) * HK + hk) * 2) * L;
      const double* kq = kk + L;
      const double* kn = kn_.data() + (static_cast<size_t>(q) * HK + hk) * K;
      const double* qn = qn_.data() + (static_cast<size_t>(q) * HK + hk) * K;
      const float* v = c.at(2, s, q) + static_cast<size_t>(h) * V;
      const double* S = rd.values() + q * se + static_cast<size_t>(h) * V * K;
      auto u_at = [&](int e, int i) {
        return static_cast<T>(bx_[((static_cast<size_t>(q) * L + e) * HV + h) * V + i]);
      };
      auto k_at = [&](int e) { return bB_.data() + ((static_cast<size_t>(q) * L + e) * HK + hk) * K; };
      double* uj = bx_.data() + ((static_cast<size_t>(q) * L + j) * HV + h) * V;
      double* yq = y + q * out + static_cast<size_t>(h) * V;
      const T dprev = std::exp(G_prev), dt_ = std::exp(G_t);
      T wk[kMaxInterval], wq[kMaxInterval];
      for (int e = 0; e <= j; ++e) {
        const T Ge = static_cast<T>(lam_[lh + static_cast<size_t>(e) * HV]);
        wk[e] = e < j ? std::exp(G_prev - Ge) * static_cast<T>(kk[e]) : T(0);
        wq[e] = std::exp(G_t - Ge) * static_cast<T>(kq[e]);
      }
      if (opt_.route == GdnRoute::Inner) {
        // S_{t-1}·k_t = e^{G_{t-1}}·(S_c·k_t) + Σ_{e<j} e^{G_{t-1}−G_e}·(k_e·k_t)·u_e, and the same with q_t at G_t.
        for (int i = 0; i < V; ++i) {
          const double* Si = S + static_cast<size_t>(i) * K;
          T skt = dprev * static_cast<T>(dot(da, Si, kn, K));
          for (int e = 0; e < j; ++e) skt += wk[e] * u_at(e, i);
          uj[i] = to_buffer(bf, beta * (static_cast<T>(v[i]) - alpha * skt));
        }
        for (int i = 0; i < V; ++i) {
          T o = dt_ * static_cast<T>(dot(da, S + static_cast<size_t>(i) * K, qn, K));
          for (int e = 0; e <= j; ++e) o += wq[e] * u_at(e, i);
          yq[i] = o;
        }
      } else {
        // Rebuild S_{t-1} row by row in registers, read it against k_t, update it, read it against q_t.
        std::vector<T> R(K);
        std::vector<double> Rd(K);
        for (int i = 0; i < V; ++i) {
          const double* Si = S + static_cast<size_t>(i) * K;
          for (int n = 0; n < K; ++n) R[n] = dprev * static_cast<T>(Si[n]);
          for (int e = 0; e < j; ++e) {
            const T we = std::exp(G_prev - static_cast<T>(lam_[lh + static_cast<size_t>(e) * HV])) * u_at(e, i);
            const double* ke = k_at(e);
            for (int n = 0; n < K; ++n) R[n] += we * static_cast<T>(ke[n]);
          }
          for (int n = 0; n < K; ++n) Rd[n] = R[n];
          const T skt = static_cast<T>(dot(da, Rd.data(), kn, K));
          uj[i] = to_buffer(bf, beta * (static_cast<T>(v[i]) - alpha * skt));
          const T ui = uj[i];
          const double* kt = k_at(j);
          for (int n = 0; n < K; ++n) Rd[n] = alpha * R[n] + ui * static_cast<T>(kt[n]);
          yq[i] = static_cast<T>(dot(da, Rd.data(), qn, K));
        }
      }
    }
}

// S_{c+K} = e^{G_K}·S_c + Σ_j e^{G_K − G_j}·u_j ⊗ k_j
template <class T>
void ReplayDecoder::flush_gdn() {
  const auto& p = model_.gdn;
  const int HK = p.HK, HV = p.HV, K = p.K, V = p.V, vpk = p.values_per_key(), L = cap_;
  const long long se = model_.state_elems();
  const Arith fa = opt_.flush_arith;
  const long long step = step_;
#pragma omp parallel for collapse(2) schedule(static)
  for (int q = 0; q < seqs_; ++q)
    for (int h = 0; h < HV; ++h) {
      if (!flush_row_[q]) continue;
      const int E = fill_[q];
      const int hk = h / vpk;
      const size_t lh = static_cast<size_t>(q) * L * HV + h;
      const T GK = static_cast<T>(lam_[lh + static_cast<size_t>(E - 1) * HV]);
      const T decay = std::exp(GK);
      T w[kMaxInterval];
      for (int e = 0; e < E; ++e) w[e] = std::exp(GK - static_cast<T>(lam_[lh + static_cast<size_t>(e) * HV]));
      const long long off = q * se + static_cast<long long>(h) * V * K;
      std::vector<double> row(static_cast<size_t>(V) * K);
      flush_head<T>(fa, V, K, E, decay, w, update_.values() + off,
                    bx_.data() + (static_cast<size_t>(q) * L * HV + h) * V, static_cast<size_t>(HV) * V,
                    bB_.data() + (static_cast<size_t>(q) * L * HK + hk) * K, static_cast<size_t>(HK) * K,
                    row.data());
      update_.store(row.data(), off, static_cast<long long>(V) * K, step);
    }
}

}  // namespace rssm
