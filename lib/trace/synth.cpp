// Synthetic trace generator (see synth.h for the recipe and the determinism contract).
//
// Counter layout. Every draw is philox4x32_10(counter, key = seed) with counter words (a, b, c, d):
//   per-token draws (streams >= kTokenStreamBase): a = channel block (4 values per block), b = low 32 bits of the
//     step, c = sequence, d = stream | (bits 32..47 of the step) << 16;
//   set-up draws (streams < kTokenStreamBase): a = channel or head, b = input index, c = block, d = stream.
// Distinct streams keep every quantity independent of every other, and nothing depends on the order of calls.
#include "trace/synth.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "errors.h"
#include "numeric/philox.h"

namespace rssm {

namespace {

enum : uint32_t {
  kStreamHeads = 1,     // per head: A_log, dt, spike-head key, slow-head key
  kStreamChannels = 2,  // per channel of an input: outlier key, outlier factor
  kStreamConv = 3,      // per channel: conv taps (normals)
  kStreamLoadings = 4,  // per channel: low-rank loadings (normals)
  kStreamReadout = 5,   // readout matrix
  kTokenStreamBase = 16,
  kStreamsPerInput = 4,  // +0 channel noise, +1 shared factors, +2 spike coins
};

// Steps are split over two counter words; 48 bits is far beyond any trace.
constexpr long long kMaxSteps = 1LL << 47;

// Below this many generated values a loop runs on one thread: waking a team costs more than the work (and on a
// loaded machine a spinning team can cost milliseconds per region).
constexpr long long kParallelMin = 1 << 15;

PhiloxBlock draw(uint64_t seed, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return philox4x32_10(PhiloxBlock{{a, b, c, d}}, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

PhiloxBlock draw_token(uint64_t seed, uint32_t stream, long long step, int seq, uint32_t block) {
  const auto s = static_cast<uint64_t>(step);
  return draw(seed, block, static_cast<uint32_t>(s), static_cast<uint32_t>(seq),
              stream | (static_cast<uint32_t>(s >> 32) << 16));
}

// n standard normals of one token, four per Philox block.
void token_normals(uint64_t seed, uint32_t stream, long long step, int seq, int n, float* out) {
  double v[4];
  for (int blk = 0; blk * 4 < n; ++blk) {
    normals4(draw_token(seed, stream, step, seq, static_cast<uint32_t>(blk)), v);
    const int m = std::min(4, n - blk * 4);
    for (int j = 0; j < m; ++j) out[blk * 4 + j] = static_cast<float>(v[j]);
  }
}

// n set-up normals for (item, input), four per block.
void setup_normals(uint64_t seed, uint32_t stream, uint32_t item, uint32_t input, int n, double* out) {
  double v[4];
  for (int blk = 0; blk * 4 < n; ++blk) {
    normals4(draw(seed, item, input, static_cast<uint32_t>(blk), stream), v);
    for (int j = 0; j < std::min(4, n - blk * 4); ++j) out[blk * 4 + j] = v[j];
  }
}

// How many of n items a share selects: none for 0, at least one otherwise, so tiny test geometries still
// exercise the feature.
int share_count(double frac, int n) {
  if (frac <= 0.0 || n <= 0) return 0;
  return std::clamp(static_cast<int>(std::lround(frac * n)), 1, n);
}

// The k items with the smallest random keys, ascending by index: a seeded choice without replacement.
std::vector<int> pick_smallest(const std::vector<uint32_t>& keys, int k) {
  std::vector<int> idx(keys.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int>(i);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int x, int y) { return keys[x] != keys[y] ? keys[x] < keys[y] : x < y; });
  idx.resize(static_cast<size_t>(k));
  std::sort(idx.begin(), idx.end());
  return idx;
}

double log_uniform(double u, double lo, double hi) {
  return std::exp(std::log(lo) + u * (std::log(hi) - std::log(lo)));
}

// Inverse of softplus, so that softplus(dt_bias) is the drawn Δ when the raw dt input is zero.
double inverse_softplus(double y) { return y + std::log(-std::expm1(-y)); }

float silu(float x) { return x / (1.0f + std::exp(-x)); }

[[noreturn]] void bad(const std::string& field, const std::string& what) {
  throw ConfigError(fmt::format("synth.{}: {}", field, what));
}

}  // namespace

void SynthConfig::validate() const {
  if (steps <= 0 || steps > kMaxSteps) bad("steps", fmt::format("must be in [1, 2^47] (got {})", steps));
  if (seqs <= 0) bad("seqs", fmt::format("must be positive (got {})", seqs));
  if (outlier_channels < 0) bad("outlier_channels", fmt::format("must be >= 0 (got {})", outlier_channels));
  if (!(outlier_scale_min > 0.0) || !(outlier_scale_max >= outlier_scale_min) || !std::isfinite(outlier_scale_max))
    bad("outlier_scale_min", fmt::format("need 0 < outlier_scale_min <= outlier_scale_max < inf (got {} and {})",
                                         outlier_scale_min, outlier_scale_max));
  auto share = [](const char* name, double v) {
    if (!(v >= 0.0 && v <= 1.0)) bad(name, fmt::format("must be in [0, 1] (got {})", v));
  };
  share("spike_head_frac", spike_head_frac);
  share("spike_token_frac", spike_token_frac);
  share("slow_head_frac", slow_head_frac);
  share("channel_corr", channel_corr);
  if (!std::isfinite(spike_size)) bad("spike_size", "must be finite");
  if (!(dt_std >= 0.0) || !std::isfinite(dt_std)) bad("dt_std", fmt::format("must be >= 0 (got {})", dt_std));
  if (!(slow_head_a > 0.0) || !std::isfinite(slow_head_a))
    bad("slow_head_a", fmt::format("must be positive (got {})", slow_head_a));
  if (corr_rank < 0 || corr_rank > 64) bad("corr_rank", fmt::format("must be in [0, 64] (got {})", corr_rank));
  if (conv_width < 1 || conv_width > 64) bad("conv_width", fmt::format("must be in [1, 64] (got {})", conv_width));
  if (readout_vocab < 0) bad("readout_vocab", fmt::format("must be >= 0 (got {})", readout_vocab));

  // Geometry: the same rules as Model::validate, raised as configuration errors before any parameter exists.
  long long max_elems = 0;
  if (model.family == Family::Mamba2) {
    const auto& m = model.mamba2;
    if (m.H <= 0 || m.P <= 0 || m.N <= 0 || m.G <= 0 || m.H % m.G != 0)
      bad("model", fmt::format("Mamba-2 geometry needs positive H, P, N, G with H a multiple of G (got {})",
                               model.geometry_string()));
    max_elems = std::max(static_cast<long long>(m.H) * m.P, static_cast<long long>(m.G) * m.N);
    if (!(m.dt_min >= 0.0) || !(m.dt_max > m.dt_min))
      bad("dt_min", fmt::format("need 0 <= dt_min < dt_max (got {} and {})", m.dt_min, m.dt_max));
  } else {
    const auto& g = model.gdn;
    if (g.HK <= 0 || g.HV <= 0 || g.K <= 0 || g.V <= 0 || g.HV % g.HK != 0)
      bad("model", fmt::format("GDN geometry needs positive HK, HV, K, V with HV a multiple of HK (got {})",
                               model.geometry_string()));
    max_elems = std::max(static_cast<long long>(g.HK) * g.K, static_cast<long long>(g.HV) * g.V);
    if (!(g.eps > 0.0)) bad("eps", fmt::format("must be positive (got {})", g.eps));
  }
  if (max_elems > (1LL << 30)) bad("model", fmt::format("geometry {} is too large", model.geometry_string()));
}

SynthSource::SynthSource(const SynthConfig& config) : cfg_(config), model_(config.model) {
  cfg_.validate();
  draw_parameters();
  const auto specs = model_.inputs();
  tensors_.resize(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) setup_tensor(static_cast<int>(i), specs[i]);

  if (cfg_.readout_vocab > 0) {
    const int E = model_.out_elems();
    const double sd = 1.0 / std::sqrt(static_cast<double>(E));
    readout_.resize(static_cast<size_t>(cfg_.readout_vocab) * E);
#pragma omp parallel for schedule(static) if (static_cast <long long>(cfg_.readout_vocab) * E > kParallelMin)
    for (int r = 0; r < cfg_.readout_vocab; ++r) {
      double v[4];
      float* row = readout_.data() + static_cast<size_t>(r) * E;
      for (int blk = 0; blk * 4 < E; ++blk) {
        normals4(draw(cfg_.seed, static_cast<uint32_t>(blk), static_cast<uint32_t>(r), 0, kStreamReadout), v);
        for (int j = 0; j < std::min(4, E - blk * 4); ++j) row[blk * 4 + j] = static_cast<float>(v[j] * sd);
      }
    }
  }
}

void SynthSource::draw_parameters() {
  const bool mamba = model_.family == Family::Mamba2;
  const int heads = mamba ? model_.mamba2.H : model_.gdn.HV;
  std::vector<double> A_log(heads), dt_bias(heads);
  std::vector<uint32_t> spike_keys(heads), slow_keys(heads);
  for (int h = 0; h < heads; ++h) {
    const PhiloxBlock b = draw(cfg_.seed, static_cast<uint32_t>(h), 0, 0, kStreamHeads);
    A_log[h] = std::log(1.0 + 15.0 * uniform01_double(b.v[0]));  // log U(1, 16)
    dt_bias[h] = inverse_softplus(log_uniform(uniform01_double(b.v[1]), 1e-3, 1e-1));
    spike_keys[h] = b.v[2];
    slow_keys[h] = b.v[3];
  }
  // Heads of almost no decay in both families: METHOD.md names them for GDN; trained Mamba-2 layers have them too
  // (A_log learned small), and they are where a checkpoint's rounding error is never forgotten.
  slow_heads_ = pick_smallest(slow_keys, share_count(cfg_.slow_head_frac, heads));
  for (int h : slow_heads_) A_log[h] = std::log(cfg_.slow_head_a);
  if (mamba) {
    auto& m = model_.mamba2;
    spike_heads_ = pick_smallest(spike_keys, share_count(cfg_.spike_head_frac, heads));
    m.A_log = A_log;
    m.dt_bias = dt_bias;
    m.D.assign(m.d_per_dim ? static_cast<size_t>(m.H) * m.P : static_cast<size_t>(m.H), 1.0);
  } else {
    auto& g = model_.gdn;
    g.A_log = A_log;
    g.dt_bias = dt_bias;
  }
  try {
    model_.validate("synth");
  } catch (const FormatError& e) {
    throw InternalError(std::string("synthetic parameters are invalid: ") + e.what());
  }
}

void SynthSource::setup_tensor(int input, const InputSpec& spec) {
  Tensor& t = tensors_[input];
  t.elems = spec.elems();
  t.stream = kTokenStreamBase + kStreamsPerInput * static_cast<uint32_t>(input);
  const std::string& n = spec.name;
  if (n == "x" || n == "B" || n == "C" || n == "v")
    t.kind = Kind::SiluConv;
  else if (n == "q" || n == "k")
    t.kind = Kind::CorrGauss;
  else if (n == "dt")
    t.kind = Kind::Dt;
  else
    t.kind = Kind::Gauss;  // z, a, b
  const int E = t.elems;
  const auto in = static_cast<uint32_t>(input);

  if (t.kind == Kind::SiluConv || t.kind == Kind::CorrGauss) {
    const int R = cfg_.corr_rank;
    const double w_shared = std::sqrt(cfg_.channel_corr);
    t.loadings.resize(static_cast<size_t>(E) * R);
    std::vector<double> l(static_cast<size_t>(R));
    for (int c = 0; c < E && R > 0; ++c) {
      // A unit loading vector keeps every channel at unit variance whatever the rank.
      setup_normals(cfg_.seed, kStreamLoadings, static_cast<uint32_t>(c), in, R, l.data());
      double norm = 0.0;
      for (double x : l) norm += x * x;
      norm = std::sqrt(norm);
      for (int k = 0; k < R; ++k)
        t.loadings[static_cast<size_t>(c) * R + k] = static_cast<float>(w_shared * l[k] / norm);
    }
  }

  if (t.kind == Kind::SiluConv) {
    // Taps normalised to unit L2 norm: the pre-activations are white in time, so the convolution keeps unit
    // variance and only adds short-range temporal correlation, as the real conv1d does.
    const int W = cfg_.conv_width;
    t.conv.resize(static_cast<size_t>(W) * E);
    std::vector<double> w(static_cast<size_t>(W));
    for (int c = 0; c < E; ++c) {
      setup_normals(cfg_.seed, kStreamConv, static_cast<uint32_t>(c), in, W, w.data());
      double norm = 0.0;
      for (double x : w) norm += x * x;
      norm = std::sqrt(norm);
      for (int j = 0; j < W; ++j) t.conv[static_cast<size_t>(j) * E + c] = static_cast<float>(w[j] / norm);
    }
    t.scale.assign(static_cast<size_t>(E), 1.0f);
    std::vector<uint32_t> keys(static_cast<size_t>(E));
    std::vector<double> u(static_cast<size_t>(E));
    for (int c = 0; c < E; ++c) {
      const PhiloxBlock b = draw(cfg_.seed, static_cast<uint32_t>(c), in, 0, kStreamChannels);
      keys[c] = b.v[0];
      u[c] = uniform01_double(b.v[1]);
    }
    const int rows = spec.dims.empty() ? 1 : spec.dims[0], row_len = E / rows;
    for (int r = 0; r < rows; ++r) {
      const std::vector<uint32_t> row_keys(keys.begin() + r * row_len, keys.begin() + (r + 1) * row_len);
      for (int j : pick_smallest(row_keys, std::min(cfg_.outlier_channels, row_len))) {
        const int c = r * row_len + j;
        const auto f = static_cast<float>(log_uniform(u[c], cfg_.outlier_scale_min, cfg_.outlier_scale_max));
        t.scale[c] = f;
        t.outliers.emplace_back(c, f);
      }
    }
  }

  if (t.kind == Kind::Dt) {
    t.spike.assign(static_cast<size_t>(E), 0);
    for (int h : spike_heads_) t.spike[h] = 1;
  }
}

void SynthSource::pre_activation(const Tensor& t, long long step, int seq, float* out) const {
  const int E = t.elems, R = cfg_.corr_rank;
  token_normals(cfg_.seed, t.stream, step, seq, E, out);
  const auto w_own = static_cast<float>(std::sqrt(1.0 - cfg_.channel_corr));
  if (R == 0 || cfg_.channel_corr == 0.0) {
    for (int c = 0; c < E; ++c) out[c] *= w_own;
    return;
  }
  float f[64];
  token_normals(cfg_.seed, t.stream + 1, step, seq, R, f);
  for (int c = 0; c < E; ++c) {
    const float* l = t.loadings.data() + static_cast<size_t>(c) * R;
    float shared = 0.0f;
    for (int k = 0; k < R; ++k) shared += l[k] * f[k];
    out[c] = shared + w_own * out[c];
  }
}

void SynthSource::read(long long step0, int nsteps, InputChunk& out) {
  if (step0 < 0 || nsteps < 0 || step0 + nsteps > cfg_.steps)
    throw FormatError(fmt::format("{}: steps [{}, {}) are outside the trace's {} steps", describe(), step0,
                                  step0 + nsteps, cfg_.steps));
  const int S = cfg_.seqs;
  out.shape(model_, step0, nsteps, S);
  const long long tokens = static_cast<long long>(nsteps) * S;

  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    const int E = t.elems;
    float* dst = out.data[i].data();
    const bool par = tokens * E > kParallelMin;
    switch (t.kind) {
      case Kind::SiluConv: {
        // Pre-activations of the window [step0 - W + 1, step0 + nsteps): the steps before step0 are regenerated
        // rather than carried over, which is what makes random access exact. Steps before 0 are the zero padding.
        const int W = cfg_.conv_width;
        const long long rows = static_cast<long long>(nsteps + W - 1) * S;
        pre_.resize(static_cast<size_t>(rows) * E);
#pragma omp parallel for schedule(static) if (par)
        for (long long r = 0; r < rows; ++r) {
          const long long step = step0 - (W - 1) + r / S;
          float* p = pre_.data() + static_cast<size_t>(r) * E;
          if (step < 0)
            std::fill_n(p, E, 0.0f);
          else
            pre_activation(t, step, static_cast<int>(r % S), p);
        }
#pragma omp parallel for schedule(static) if (par)
        for (long long r = 0; r < tokens; ++r) {
          float* o = dst + static_cast<size_t>(r) * E;
          std::fill_n(o, E, 0.0f);
          for (int j = 0; j < W; ++j) {
            // Tap j reads step s - j, which sits (W - 1 - j) rows of S tokens after the window start.
            const float* p = pre_.data() + static_cast<size_t>(r + static_cast<long long>(W - 1 - j) * S) * E;
            const float* w = t.conv.data() + static_cast<size_t>(j) * E;
            for (int c = 0; c < E; ++c) o[c] += w[c] * p[c];
          }
          for (int c = 0; c < E; ++c) o[c] = t.scale[c] * silu(o[c]);
        }
        break;
      }
      case Kind::CorrGauss:
#pragma omp parallel for schedule(static) if (par)
        for (long long r = 0; r < tokens; ++r)
          pre_activation(t, step0 + r / S, static_cast<int>(r % S), dst + static_cast<size_t>(r) * E);
        break;
      case Kind::Dt: {
        const auto sd = static_cast<float>(cfg_.dt_std);
        const auto coin = static_cast<float>(cfg_.spike_token_frac);
        const auto size = static_cast<float>(cfg_.spike_size);
        const bool spikes = !spike_heads_.empty() && cfg_.spike_token_frac > 0.0;
#pragma omp parallel for schedule(static) if (par)
        for (long long r = 0; r < tokens; ++r) {
          const long long step = step0 + r / S;
          const int seq = static_cast<int>(r % S);
          float* o = dst + static_cast<size_t>(r) * E;
          token_normals(cfg_.seed, t.stream, step, seq, E, o);
          for (int h = 0; h < E; ++h) o[h] *= sd;
          if (!spikes) continue;
          for (int h : spike_heads_) {
            const PhiloxBlock b = draw_token(cfg_.seed, t.stream + 2, step, seq, static_cast<uint32_t>(h / 4));
            if (uniform01(b.v[h % 4]) < coin) o[h] += size;
          }
        }
        break;
      }
      case Kind::Gauss:
#pragma omp parallel for schedule(static) if (par)
        for (long long r = 0; r < tokens; ++r)
          token_normals(cfg_.seed, t.stream, step0 + r / S, static_cast<int>(r % S), E,
                        dst + static_cast<size_t>(r) * E);
        break;
    }
  }
}

std::string SynthSource::describe() const {
  return fmt::format("synth seed={} family={} {} steps={} seqs={}", cfg_.seed, family_name(model_.family),
                     model_.geometry_string(), cfg_.steps, cfg_.seqs);
}

}  // namespace rssm
