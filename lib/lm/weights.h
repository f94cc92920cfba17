// The tiny hybrid language model's weights file (docs/model_format.md), read into plain row-major arrays.
// Every hyper-parameter comes from the file's attributes, so test models of any size load through the same code.
// Not here: the forward (lm/forward.h), which casts these to its own precision once.
#pragma once

#include <string>
#include <vector>

#include "model/model.h"

namespace rssm {

enum class LmLayerKind { Mamba2, Gdn, Attention };
std::string lm_layer_kind_name(LmLayerKind k);  // "mamba2", "gdn", "attention"

struct LmHyper {
  std::string layout;  // one letter per block: M (Mamba-2), G (GDN), A (attention)
  int vocab = 0, d_model = 0, d_mlp = 0, attn_heads = 0;
  double norm_eps = 0;
  int m_H = 0, m_P = 0, m_N = 0, m_G = 0, m_conv = 0;    // Mamba-2 mixers
  double m_norm_eps = 0;                                 // their gated RMSNorm
  int g_HK = 0, g_HV = 0, g_K = 0, g_V = 0, g_conv = 0;  // GDN mixers
  double g_norm_eps = 0, g_l2_eps = 0;                   // their output RMSNorm, the q/k L2 normalisation
  int m_inner() const { return m_H * m_P; }
  int m_conv_dim() const { return m_H * m_P + 2 * m_G * m_N; }
  int g_conv_dim() const { return 2 * g_HK * g_K + g_HV * g_V; }
};

// A row-major matrix: data[r * cols + c].
struct LmMatrix {
  int rows = 0, cols = 0;
  std::vector<double> data;
};

struct LmLayer {
  LmLayerKind kind = LmLayerKind::Attention;
  std::vector<double> norm1, norm2;  // [d_model] pre-norms of the mixer and the MLP
  LmMatrix mlp_up;                   // [2 d_mlp, d_model]: rows gate then value
  LmMatrix mlp_down;                 // [d_model, d_mlp]
  // Mamba-2: in_proj [H*P + conv_dim + H, d] rows z, x, B, C, dt; conv_weight [conv_dim, m_conv]; conv_bias
  //          [conv_dim]; A_log, D, dt_bias [H]; norm_weight [H*P]; out_proj [d, H*P]
  // GDN:     in_proj [conv_dim + HV*V + 2 HV, d] rows q, k, v, z, b, a; conv_weight [conv_dim, g_conv] (no bias);
  //          A_log, dt_bias [HV]; norm_weight [V]; out_proj [d, HV*V]
  LmMatrix in_proj, conv_weight, out_proj;
  std::vector<double> conv_bias, A_log, D, dt_bias, norm_weight;
  // Attention: qkv [3 d, d] rows q, k, v (heads of d / attn_heads consecutive); o [d, d]
  LmMatrix qkv, o;
};

struct LmWeights {
  std::string path;
  std::string sha256;       // of the file's bytes
  std::string storage;      // "fp16" or "fp32": how the matrices were stored
  std::string description;  // the file's description attribute ("" when absent)
  LmHyper hp;
  LmMatrix embedding;              // [vocab, d_model]
  std::vector<double> final_norm;  // [d_model]
  LmMatrix head;                   // [vocab, d_model]
  std::vector<LmLayer> layers;     // one per layout letter

  // The SSM layer `layer` as a decoder's Model (Mamba-2 without z: the gate sits in the mixer's gated norm; no dt
  // clamp; GDN eps = g_l2_eps). Throws InternalError for an attention layer.
  Model ssm_model(int layer) const;
  std::vector<int> ssm_layers() const;  // indices of the Mamba-2 and GDN blocks, in order
};

// Reads and checks a weights file. A missing or malformed file, attribute or dataset, a shape that disagrees with
// the hyper-parameters, or a non-finite value throws FormatError with one line naming the file and the dataset.
LmWeights load_lm_weights(const std::string& path);

}  // namespace rssm
