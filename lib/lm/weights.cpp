// Reading docs/model_format.md files: attributes first (they fix every shape), then each dataset with its shape
// checked against them, so a wrong file fails on the first dataset that disagrees, named.
#include "lm/weights.h"

#include <fmt/format.h>

#include <cmath>

#include "errors.h"
#include "io/h5.h"
#include "lm/sha256.h"

namespace rssm {

std::string lm_layer_kind_name(LmLayerKind k) {
  switch (k) {
    case LmLayerKind::Mamba2:
      return "mamba2";
    case LmLayerKind::Gdn:
      return "gdn";
    case LmLayerKind::Attention:
      return "attention";
  }
  return "?";
}

namespace {

struct Reader {
  const std::string& path;
  hid_t file;

  int attr_int(const char* name, int lo, int hi) const {
    const long long v = h5::get_attr_int(file, name, path);
    if (v < lo || v > hi)
      throw FormatError(fmt::format("{}: attribute '{}' is {}, expected {}..{}", path, name, v, lo, hi));
    return static_cast<int>(v);
  }
  double attr_eps(const char* name) const {
    const double v = h5::get_attr_double(file, name, path);
    if (!(v > 0.0 && v < 1.0))
      throw FormatError(fmt::format("{}: attribute '{}' is {}, expected in (0, 1)", path, name, v));
    return v;
  }
  std::vector<double> values(const std::string& name, const std::vector<hsize_t>& want) const {
    if (!h5::exists(file, name)) throw FormatError(fmt::format("{}: dataset '{}' is missing", path, name));
    const auto got = h5::shape(file, name, path);
    if (got != want) {
      auto dims = [](const std::vector<hsize_t>& d) {
        std::string s;
        for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
        return "[" + s + "]";
      };
      throw FormatError(fmt::format("{}: dataset '{}' has shape {}, expected {}", path, name, dims(got), dims(want)));
    }
    auto v = h5::read_doubles(file, name, path);
    for (size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i]))
        throw FormatError(fmt::format("{}: dataset '{}' has a non-finite value at flat index {}", path, name, i));
    return v;
  }
  std::vector<double> vec(const std::string& name, int n) const { return values(name, {hsize_t(n)}); }
  LmMatrix mat(const std::string& name, int rows, int cols) const {
    LmMatrix m;
    m.rows = rows;
    m.cols = cols;
    m.data = values(name, {hsize_t(rows), hsize_t(cols)});
    return m;
  }
};

}  // namespace

LmWeights load_lm_weights(const std::string& path) {
  h5::silence();
  LmWeights w;
  w.path = path;
  h5::Handle f = h5::open_file(path);
  Reader r{path, f.get()};
  if (!h5::has_attr(f, "format") || h5::get_attr_string(f, "format", path) != "replayssm-lm")
    throw FormatError(
        fmt::format("{}: not a replayssm-lm weights file (attribute 'format' must be 'replayssm-lm')", path));
  const long long version = h5::get_attr_int(f, "version", path);
  if (version != 1) throw FormatError(fmt::format("{}: weights format version {} (this build reads 1)", path, version));
  w.storage = h5::has_attr(f, "storage") ? h5::get_attr_string(f, "storage", path) : "";
  w.description = h5::has_attr(f, "description") ? h5::get_attr_string(f, "description", path) : "";

  LmHyper& hp = w.hp;
  hp.layout = h5::get_attr_string(f, "layout", path);
  if (hp.layout.empty() || hp.layout.find_first_not_of("MGA") != std::string::npos)
    throw FormatError(fmt::format("{}: attribute 'layout' is '{}', expected letters M, G, A", path, hp.layout));
  constexpr int kBig = 1 << 16;
  hp.vocab = r.attr_int("vocab", 2, kBig);
  hp.d_model = r.attr_int("d_model", 1, kBig);
  hp.d_mlp = r.attr_int("d_mlp", 1, kBig);
  hp.attn_heads = r.attr_int("attn_heads", 1, kBig);
  hp.norm_eps = r.attr_eps("norm_eps");
  hp.m_H = r.attr_int("m_H", 1, kBig);
  hp.m_P = r.attr_int("m_P", 1, kBig);
  hp.m_N = r.attr_int("m_N", 1, kBig);
  hp.m_G = r.attr_int("m_G", 1, kBig);
  hp.m_conv = r.attr_int("m_conv", 1, 64);
  hp.m_norm_eps = r.attr_eps("m_norm_eps");
  hp.g_HK = r.attr_int("g_HK", 1, kBig);
  hp.g_HV = r.attr_int("g_HV", 1, kBig);
  hp.g_K = r.attr_int("g_K", 1, kBig);
  hp.g_V = r.attr_int("g_V", 1, kBig);
  hp.g_conv = r.attr_int("g_conv", 1, 64);
  hp.g_norm_eps = r.attr_eps("g_norm_eps");
  hp.g_l2_eps = r.attr_eps("g_l2_eps");
  if (hp.d_model % hp.attn_heads != 0)
    throw FormatError(
        fmt::format("{}: d_model {} is not a multiple of attn_heads {}", path, hp.d_model, hp.attn_heads));
  if (hp.m_H % hp.m_G != 0 || hp.m_inner() % hp.m_G != 0)
    throw FormatError(fmt::format("{}: m_H {} is not a multiple of m_G {}", path, hp.m_H, hp.m_G));
  if (hp.g_HV % hp.g_HK != 0)
    throw FormatError(fmt::format("{}: g_HV {} is not a multiple of g_HK {}", path, hp.g_HV, hp.g_HK));

  const int d = hp.d_model;
  w.embedding = r.mat("embedding", hp.vocab, d);
  w.final_norm = r.vec("final_norm", d);
  w.head = r.mat("head", hp.vocab, d);
  for (size_t i = 0; i < hp.layout.size(); ++i) {
    const std::string g = fmt::format("layers/{:02d}/", i);
    LmLayer L;
    const char c = hp.layout[i];
    L.kind = c == 'M' ? LmLayerKind::Mamba2 : c == 'G' ? LmLayerKind::Gdn : LmLayerKind::Attention;
    if (!h5::exists(f, g.substr(0, g.size() - 1)))
      throw FormatError(fmt::format("{}: group '{}' is missing", path, g.substr(0, g.size() - 1)));
    {
      h5::Handle grp = h5::open_group(f, g.substr(0, g.size() - 1), path);
      if (h5::has_attr(grp, "kind") && h5::get_attr_string(grp, "kind", path) != lm_layer_kind_name(L.kind))
        throw FormatError(fmt::format("{}: group '{}' has kind '{}', but layout letter {} says '{}'", path,
                                      g.substr(0, g.size() - 1), h5::get_attr_string(grp, "kind", path), i,
                                      lm_layer_kind_name(L.kind)));
    }
    L.norm1 = r.vec(g + "norm1", d);
    L.norm2 = r.vec(g + "norm2", d);
    L.mlp_up = r.mat(g + "mlp_up", 2 * hp.d_mlp, d);
    L.mlp_down = r.mat(g + "mlp_down", d, hp.d_mlp);
    if (L.kind == LmLayerKind::Mamba2) {
      const int I = hp.m_inner(), cd = hp.m_conv_dim(), H = hp.m_H;
      L.in_proj = r.mat(g + "in_proj", I + cd + H, d);
      L.conv_weight = r.mat(g + "conv_weight", cd, hp.m_conv);
      L.conv_bias = r.vec(g + "conv_bias", cd);
      L.A_log = r.vec(g + "A_log", H);
      L.D = r.vec(g + "D", H);
      L.dt_bias = r.vec(g + "dt_bias", H);
      L.norm_weight = r.vec(g + "norm_weight", I);
      L.out_proj = r.mat(g + "out_proj", d, I);
    } else if (L.kind == LmLayerKind::Gdn) {
      const int cd = hp.g_conv_dim(), HV = hp.g_HV, VV = hp.g_HV * hp.g_V;
      L.in_proj = r.mat(g + "in_proj", cd + VV + 2 * HV, d);
      L.conv_weight = r.mat(g + "conv_weight", cd, hp.g_conv);
      L.A_log = r.vec(g + "A_log", HV);
      L.dt_bias = r.vec(g + "dt_bias", HV);
      L.norm_weight = r.vec(g + "norm_weight", hp.g_V);
      L.out_proj = r.mat(g + "out_proj", d, VV);
    } else {
      L.qkv = r.mat(g + "qkv", 3 * d, d);
      L.o = r.mat(g + "o", d, d);
    }
    w.layers.push_back(std::move(L));
  }
  f.reset();
  w.sha256 = sha256_file(path);
  return w;
}

std::vector<int> LmWeights::ssm_layers() const {
  std::vector<int> v;
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i].kind != LmLayerKind::Attention) v.push_back(static_cast<int>(i));
  return v;
}

Model LmWeights::ssm_model(int layer) const {
  const LmLayer& L = layers.at(static_cast<size_t>(layer));
  Model m;
  if (L.kind == LmLayerKind::Mamba2) {
    m.family = Family::Mamba2;
    auto& p = m.mamba2;
    p.H = hp.m_H;
    p.P = hp.m_P;
    p.N = hp.m_N;
    p.G = hp.m_G;
    p.has_z = false;
    p.d_per_dim = false;
    p.A_log = L.A_log;
    p.D = L.D;
    p.dt_bias = L.dt_bias;
  } else if (L.kind == LmLayerKind::Gdn) {
    m.family = Family::GDN;
    auto& p = m.gdn;
    p.HK = hp.g_HK;
    p.HV = hp.g_HV;
    p.K = hp.g_K;
    p.V = hp.g_V;
    p.eps = hp.g_l2_eps;
    p.A_log = L.A_log;
    p.dt_bias = L.dt_bias;
  } else {
    throw InternalError(fmt::format("ssm_model: layer {} is an attention layer", layer));
  }
  m.validate(path.c_str());
  return m;
}

}  // namespace rssm
