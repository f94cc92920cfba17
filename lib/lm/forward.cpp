// LmForward: see forward.h. Activations are [features, seqs] column-major Eigen matrices (one column per sequence),
// so every projection is one matrix product over all sequences. The formulas follow scripts/train_tiny_hybrid.py
// term by term; where torch and this code could differ in the order of operations (norms, softmax), the
// difference is rounding only and the fixture test bounds it.
#include "lm/forward.h"

#include <fmt/format.h>

#include <Eigen/Dense>
#include <cmath>
#include <deque>

#include "errors.h"
#include "model/formulas.h"

namespace rssm {

std::string lm_precision_name(LmPrecision p) { return p == LmPrecision::FP64 ? "fp64" : "fp32"; }

LmPrecision parse_lm_precision(const std::string& s) {
  if (s == "fp64") return LmPrecision::FP64;
  if (s == "fp32") return LmPrecision::FP32;
  throw ConfigError(fmt::format("network precision must be fp64 or fp32 (got '{}')", s));
}

struct LmForward::Impl {
  virtual ~Impl() = default;
  virtual void step(const int* tokens, double* logits) = 0;
  long long step_ = 0;
  int seqs_ = 0;
  std::vector<std::unique_ptr<Decoder>> decoders_;
  int plant_layer_ = -1;
  long long plant_step_ = -1;
  double plant_value_ = 0;
  LmForward::InputRecorder recorder_;
};

namespace {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Act = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;  // [features, seqs]
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

template <class T>
Mat<T> to_mat(const LmMatrix& m) {
  Mat<T> out(m.rows, m.cols);
  for (int r = 0; r < m.rows; ++r)
    for (int c = 0; c < m.cols; ++c) out(r, c) = static_cast<T>(m.data[static_cast<size_t>(r) * m.cols + c]);
  return out;
}
template <class T>
Vec<T> to_vec(const std::vector<double>& v) {
  Vec<T> out(static_cast<Eigen::Index>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) out(static_cast<Eigen::Index>(i)) = static_cast<T>(v[i]);
  return out;
}

// x · rsqrt(mean(x²) + eps) · w over each group of `group` consecutive rows, per column.
template <class T>
void rms_groups(Act<T>& x, int group, T eps) {
  for (Eigen::Index s = 0; s < x.cols(); ++s)
    for (Eigen::Index g0 = 0; g0 < x.rows(); g0 += group) {
      auto seg = x.col(s).segment(g0, group);
      const T ms = seg.squaredNorm() / static_cast<T>(group);
      seg *= T(1) / std::sqrt(ms + eps);
    }
}

template <class T>
Act<T> rms_norm(const Act<T>& x, const Vec<T>& w, T eps) {
  Act<T> y = x;
  rms_groups<T>(y, static_cast<int>(x.rows()), eps);
  return w.asDiagonal() * y;
}

template <class T>
struct LayerT {
  LmLayerKind kind;
  Vec<T> norm1, norm2;
  Mat<T> mlp_up, mlp_down;
  Mat<T> in_proj, conv_w, out_proj, qkv, o;
  Vec<T> conv_b, norm_w;
  // Rolling conv inputs: the last (width - 1) pre-conv rows, oldest first, each [conv_dim, seqs].
  std::deque<Act<T>> conv_hist;
  // Attention KV cache per sequence: [t][d] keys and values.
  std::vector<std::vector<Vec<T>>> kcache, vcache;
  int decoder = -1;  // index into decoders_ (SSM layers)
  Model model;
  InputChunk chunk;
  std::vector<double> y;  // decoder outputs [1, seqs, out_elems]
};

template <class T>
class ImplT final : public LmForward::Impl {
 public:
  ImplT(const LmWeights& w, Format act) : hp_(w.hp), act_(act) {
    emb_ = to_mat<T>(w.embedding);
    head_ = to_mat<T>(w.head);
    final_norm_ = to_vec<T>(w.final_norm);
    for (size_t i = 0; i < w.layers.size(); ++i) {
      const LmLayer& L = w.layers[i];
      LayerT<T> l;
      l.kind = L.kind;
      l.norm1 = to_vec<T>(L.norm1);
      l.norm2 = to_vec<T>(L.norm2);
      l.mlp_up = to_mat<T>(L.mlp_up);
      l.mlp_down = to_mat<T>(L.mlp_down);
      if (L.kind == LmLayerKind::Attention) {
        l.qkv = to_mat<T>(L.qkv);
        l.o = to_mat<T>(L.o);
      } else {
        l.in_proj = to_mat<T>(L.in_proj);
        l.conv_w = to_mat<T>(L.conv_weight);
        l.out_proj = to_mat<T>(L.out_proj);
        l.norm_w = to_vec<T>(L.norm_weight);
        if (L.kind == LmLayerKind::Mamba2) l.conv_b = to_vec<T>(L.conv_bias);
        l.model = w.ssm_model(static_cast<int>(i));
      }
      layers_.push_back(std::move(l));
    }
  }

  void bind(int seqs) {
    int d = 0;
    for (auto& l : layers_) {
      if (l.kind == LmLayerKind::Attention) {
        l.kcache.assign(static_cast<size_t>(seqs), {});
        l.vcache.assign(static_cast<size_t>(seqs), {});
        continue;
      }
      l.decoder = d;
      decoders_[static_cast<size_t>(d)]->reset(l.model, seqs);
      ++d;
      const int width = static_cast<int>(l.conv_w.cols());
      l.conv_hist.assign(static_cast<size_t>(width - 1), Act<T>::Zero(l.conv_w.rows(), seqs));
      l.y.assign(static_cast<size_t>(seqs) * l.model.out_elems(), 0.0);
    }
  }

  void step(const int* tokens, double* logits) override {
    const int d = hp_.d_model, S = seqs_;
    Act<T> x(d, S);
    for (int s = 0; s < S; ++s) {
      if (tokens[s] < 0 || tokens[s] >= hp_.vocab)
        throw ConfigError(fmt::format("token {} of sequence {} at step {} is outside the vocabulary (0..{})", tokens[s],
                                      s, step_, hp_.vocab - 1));
      x.col(s) = emb_.row(tokens[s]).transpose();
    }
    const T eps = static_cast<T>(hp_.norm_eps);
    for (size_t i = 0; i < layers_.size(); ++i) {
      LayerT<T>& l = layers_[i];
      Act<T> h = rms_norm<T>(x, l.norm1, eps);
      Act<T> m = l.kind == LmLayerKind::Mamba2 ? mamba2(l, h)
                 : l.kind == LmLayerKind::Gdn  ? gdn(l, h)
                                               : attention(l, h);
      if (static_cast<int>(i) == plant_layer_ && step_ == plant_step_) m(0, 0) += static_cast<T>(plant_value_);
      check(m, i, "mixer");
      x += m;
      h = rms_norm<T>(x, l.norm2, eps);
      const Act<T> up = l.mlp_up * h;
      const int f = hp_.d_mlp;
      Act<T> gated(f, S);
      for (int s = 0; s < S; ++s)
        for (int r = 0; r < f; ++r) gated(r, s) = silu<T>(up(r, s)) * up(r + f, s);
      x += l.mlp_down * gated;
      check(x, i, "MLP");
    }
    const Act<T> out = head_ * rms_norm<T>(x, final_norm_, eps);
    for (int s = 0; s < S; ++s)
      for (int v = 0; v < hp_.vocab; ++v) {
        const double lv = static_cast<double>(out(v, s));
        if (!std::isfinite(lv))
          throw LmNumericError(fmt::format("logit {} of sequence {} is not finite at step {}", v, s, step_));
        logits[static_cast<size_t>(s) * hp_.vocab + v] = lv;
      }
    ++step_;
  }

 private:
  void check(const Act<T>& m, size_t layer, const char* part) const {
    for (Eigen::Index s = 0; s < m.cols(); ++s)
      for (Eigen::Index r = 0; r < m.rows(); ++r)
        if (!std::isfinite(m(r, s)))
          throw LmNumericError(fmt::format("layer {} ({}) {} output is not finite at step {} (sequence {}, element {})",
                                           layer, lm_layer_kind_name(layers_[layer].kind), part, step_, s, r));
  }

  // Depthwise causal convolution over the last `width` inputs (the history plus `in`), then SiLU.
  Act<T> conv_silu(LayerT<T>& l, const Act<T>& in) {
    const int width = static_cast<int>(l.conv_w.cols());
    Act<T> out = in.array().colwise() * l.conv_w.col(width - 1).array();
    for (int w = 0; w < width - 1; ++w)
      out.array() += l.conv_hist[static_cast<size_t>(w)].array().colwise() * l.conv_w.col(w).array();
    if (l.conv_b.size() > 0) out.colwise() += l.conv_b;
    if (width > 1) {
      l.conv_hist.pop_front();
      l.conv_hist.push_back(in);
    }
    return out.unaryExpr([](T v) { return silu<T>(v); });
  }

  float act(T v) const {
    const float f = static_cast<float>(v);
    return (act_ == Format::FP64 || act_ == Format::FP32) ? f : round_nearest(act_, f);
  }

  // Runs the layer's decoder over one step whose inputs `fill` writes (input index, sequence, destination).
  template <class Fill>
  void decode(LayerT<T>& l, Fill fill) {
    l.chunk.shape(l.model, step_, 1, seqs_);
    for (size_t k = 0; k < l.chunk.data.size(); ++k)
      for (int s = 0; s < seqs_; ++s) fill(static_cast<int>(k), s, l.chunk.at(static_cast<int>(k), 0, s));
    if (recorder_) recorder_(l.decoder, l.chunk);
    decoders_[static_cast<size_t>(l.decoder)]->advance(l.chunk, 0, 1, l.y.data());
  }

  Act<T> mamba2(LayerT<T>& l, const Act<T>& h) {
    const int H = hp_.m_H, P = hp_.m_P, N = hp_.m_N, G = hp_.m_G, I = H * P, cd = hp_.m_conv_dim();
    const Act<T> proj = l.in_proj * h;
    const Act<T> xbc = conv_silu(l, proj.middleRows(I, cd));
    // inputs in Model::inputs() order: x [H,P], dt [H], B [G,N], C [G,N]
    decode(l, [&](int k, int s, float* dst) {
      if (k == 0)
        for (int r = 0; r < I; ++r) dst[r] = act(xbc(r, s));
      else if (k == 1)
        for (int r = 0; r < H; ++r) dst[r] = act(proj(I + cd + r, s));
      else
        for (int r = 0; r < G * N; ++r) dst[r] = act(xbc(I + (k - 2) * G * N + r, s));
    });
    Act<T> y(I, seqs_);
    for (int s = 0; s < seqs_; ++s)
      for (int r = 0; r < I; ++r) y(r, s) = static_cast<T>(l.y[static_cast<size_t>(s) * I + r]) * silu<T>(proj(r, s));
    rms_groups<T>(y, I / G, static_cast<T>(hp_.m_norm_eps));
    return l.out_proj * (l.norm_w.asDiagonal() * y);
  }

  Act<T> gdn(LayerT<T>& l, const Act<T>& h) {
    const int HK = hp_.g_HK, HV = hp_.g_HV, K = hp_.g_K, V = hp_.g_V, cd = hp_.g_conv_dim(), VV = HV * V;
    const Act<T> proj = l.in_proj * h;
    const Act<T> qkv = conv_silu(l, proj.topRows(cd));
    // inputs: q [HK,K], k [HK,K], v [HV,V], a [HV], b [HV]; the projection's rows are q, k, v, z, b, a
    decode(l, [&](int k, int s, float* dst) {
      if (k == 0 || k == 1)
        for (int r = 0; r < HK * K; ++r) dst[r] = act(qkv(k * HK * K + r, s));
      else if (k == 2)
        for (int r = 0; r < VV; ++r) dst[r] = act(qkv(2 * HK * K + r, s));
      else if (k == 3)
        for (int r = 0; r < HV; ++r) dst[r] = act(proj(cd + VV + HV + r, s));
      else
        for (int r = 0; r < HV; ++r) dst[r] = act(proj(cd + VV + r, s));
    });
    Act<T> o(VV, seqs_);
    for (int s = 0; s < seqs_; ++s)
      for (int r = 0; r < VV; ++r) o(r, s) = static_cast<T>(l.y[static_cast<size_t>(s) * VV + r]);
    rms_groups<T>(o, V, static_cast<T>(hp_.g_norm_eps));
    for (int s = 0; s < seqs_; ++s)
      for (int r = 0; r < VV; ++r) o(r, s) *= l.norm_w(r % V) * silu<T>(proj(cd + r, s));
    return l.out_proj * o;
  }

  Act<T> attention(LayerT<T>& l, const Act<T>& h) {
    const int d = hp_.d_model, nh = hp_.attn_heads, hd = d / nh;
    const Act<T> qkv = l.qkv * h;
    const T scale = T(1) / std::sqrt(static_cast<T>(hd));
    Act<T> y(d, seqs_);
    for (int s = 0; s < seqs_; ++s) {
      auto& kc = l.kcache[static_cast<size_t>(s)];
      auto& vc = l.vcache[static_cast<size_t>(s)];
      kc.push_back(qkv.col(s).segment(d, d));
      vc.push_back(qkv.col(s).segment(2 * d, d));
      const size_t n = kc.size();
      Vec<T> sc(static_cast<Eigen::Index>(n));
      for (int hh = 0; hh < nh; ++hh) {
        const auto q = qkv.col(s).segment(hh * hd, hd);
        for (size_t t = 0; t < n; ++t) sc(static_cast<Eigen::Index>(t)) = q.dot(kc[t].segment(hh * hd, hd)) * scale;
        const T mx = sc.maxCoeff();
        sc = (sc.array() - mx).exp();
        sc /= sc.sum();
        Vec<T> acc = Vec<T>::Zero(hd);
        for (size_t t = 0; t < n; ++t) acc += sc(static_cast<Eigen::Index>(t)) * vc[t].segment(hh * hd, hd);
        y.col(s).segment(hh * hd, hd) = acc;
      }
    }
    return l.o * y;
  }

  LmHyper hp_;
  Format act_;
  Mat<T> emb_, head_;
  Vec<T> final_norm_;
  std::vector<LayerT<T>> layers_;
};

}  // namespace

LmForward::LmForward(const LmWeights& weights, LmPrecision precision, Format act_format,
                     std::vector<std::unique_ptr<Decoder>> decoders, int seqs) {
  if (seqs <= 0) throw ConfigError(fmt::format("the model needs at least one sequence (got {})", seqs));
  if (decoders.size() != weights.ssm_layers().size())
    throw InternalError(
        fmt::format("LmForward: {} decoders for {} SSM layers", decoders.size(), weights.ssm_layers().size()));
  if (precision == LmPrecision::FP64) {
    auto p = std::make_unique<ImplT<double>>(weights, act_format);
    p->decoders_ = std::move(decoders);
    p->seqs_ = seqs;
    p->bind(seqs);
    impl_ = std::move(p);
  } else {
    auto p = std::make_unique<ImplT<float>>(weights, act_format);
    p->decoders_ = std::move(decoders);
    p->seqs_ = seqs;
    p->bind(seqs);
    impl_ = std::move(p);
  }
}

LmForward::~LmForward() = default;

void LmForward::step(const int* tokens, double* logits) { impl_->step(tokens, logits); }
long long LmForward::steps_done() const { return impl_->step_; }
int LmForward::seqs() const { return impl_->seqs_; }
const std::vector<std::unique_ptr<Decoder>>& LmForward::decoders() const { return impl_->decoders_; }

void LmForward::record_inputs(InputRecorder recorder) { impl_->recorder_ = std::move(recorder); }

void LmForward::plant(int layer, long long step, double value) {
  impl_->plant_layer_ = layer;
  impl_->plant_step_ = step;
  impl_->plant_value_ = value;
}

}  // namespace rssm
