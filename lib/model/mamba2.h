// Mamba-2 (SSD) decode: parameters and the fp64 eager reference step.
// The reference is the plainest loop in double, following METHOD.md line by line; it is the yardstick every
// other decoder is measured against, so clarity beats speed here (the decoder wrapper parallelises it).
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include "model/formulas.h"

namespace rssm {

// One POD-like parameter struct per family, filled once (from a preset, a config or a trace file) and
// consumed by the reference, the CPU decoders and the kernels.
struct Mamba2Params {
  int H = 0;  // heads
  int P = 0;  // head dim
  int N = 0;  // state dim
  int G = 1;  // groups: B and C are shared by H/G consecutive heads
  bool d_per_dim = false;  // D is [H, P] instead of [H]
  bool has_z = false;      // output gate y <- y * z * sigmoid(z)
  // Limits on Δ after softplus (mamba_ssm's dt_limit); the defaults disable the clamp.
  double dt_min = 0.0;
  double dt_max = std::numeric_limits<double>::infinity();
  std::vector<double> A_log;    // [H]; A = -exp(A_log)
  std::vector<double> D;        // [H] or [H, P]
  std::vector<double> dt_bias;  // [H]

  int heads_per_group() const { return H / G; }
  long long state_elems() const { return static_cast<long long>(H) * P * N; }  // per sequence
  int out_elems() const { return H * P; }
  double d_at(int h, int p) const { return d_per_dim ? D[static_cast<size_t>(h) * P + p] : D[h]; }
  // Throws FormatError when sizes disagree with the geometry or values are out of range; `where` names the source.
  void validate(const char* where) const;
};

// softplus (model/formulas.h, shared with the kernels) in double.
inline double softplus_ref(double x) { return softplus<double>(x); }

// Δ for head h from the raw dt input: softplus(dt + dt_bias), clamped to [dt_min, dt_max].
double mamba2_delta_ref(const Mamba2Params& p, int h, double dt_raw);

// One fp64 eager step for one head of one sequence:
//   Δ = softplus(dt + dt_bias), a = exp(A·Δ), S <- a·S + Δ·x ⊗ B, y = S·C + D·x, y <- y·z·sigmoid(z).
// state: [P, N] of head h (in/out)   x: [H, P]   dt: [H]   B, C: [G, N]   z: [H, P] or nullptr
// y: [H, P] (only row h is written)
void mamba2_head_step_ref(const Mamba2Params& p, int h, double* state, const float* x, const float* dt,
                          const float* B, const float* C, const float* z, double* y);

// One fp64 eager step for all heads of one sequence. state: [H, P, N]; other shapes as above.
void mamba2_step_ref(const Mamba2Params& p, double* state, const float* x, const float* dt, const float* B,
                     const float* C, const float* z, double* y);

}  // namespace rssm
