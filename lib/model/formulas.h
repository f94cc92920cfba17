// The scalar formulas of both families, one copy for the fp64 reference (T = double), the CPU emulation of the
// kernels (T = float) and the CUDA kernels themselves (RSSM_HD): part of the floating-point contract
// (docs/fp_contract.md). With the same T and the same libm-style functions these give the same results wherever the
// platforms' exp/log1p/sqrt agree; the contract says where they may not (device exp is not correctly rounded).
// Not here: the recurrences (model/*_ref.cpp, cpu/, kernels/), which call these.
#pragma once

#include <cmath>

#include "numeric/hd.h"

namespace rssm {

// softplus with pass-through above 20, as the published kernels do (log1p(exp(x)) == x in fp32 there).
template <class T>
RSSM_HD inline T softplus(T x) {
  return x > T(20) ? x : std::log1p(std::exp(x));
}

// Mamba-2's step size: Δ = softplus(dt + dt_bias), clamped to [dt_min, dt_max] (mamba_ssm's dt_limit).
template <class T>
RSSM_HD inline T mamba2_delta(T dt_raw, T dt_bias, T dt_min, T dt_max) {
  const T d = softplus<T>(dt_raw + dt_bias);
  return d < dt_min ? dt_min : (d > dt_max ? dt_max : d);
}

// Mamba-2's per-step log-decay A·Δ with A = -exp(A_log).
template <class T>
RSSM_HD inline T mamba2_log_decay(T A_log, T delta) {
  return -std::exp(A_log) * delta;
}

// SiLU, z·sigmoid(z), written as z / (1 + exp(-z)) (one exp, no division by a tiny sigmoid).
template <class T>
RSSM_HD inline T silu(T z) {
  return z / (T(1) + std::exp(-z));
}

// The output gate y·silu(z); kernels that precompute silu(z) per element multiply by it in the same order.
template <class T>
RSSM_HD inline T silu_gate(T y, T z) {
  return y * silu<T>(z);
}

// GDN's log-gate g = -exp(A_log)·softplus(a + dt_bias); the decay is α = exp(g).
template <class T>
RSSM_HD inline T gdn_log_gate(T A_log, T a_raw, T dt_bias) {
  return -std::exp(A_log) * softplus<T>(a_raw + dt_bias);
}

// GDN's write strength β = sigmoid(b).
template <class T>
RSSM_HD inline T sigmoid(T b) {
  return T(1) / (T(1) + std::exp(-b));
}

// The factor of an L2 normalisation: scale / sqrt(Σv² + eps) (q uses scale = 1/sqrt(K), k uses 1).
template <class T>
RSSM_HD inline T l2norm_factor(T sum_squares, T eps, T scale) {
  return scale / std::sqrt(sum_squares + eps);
}

}  // namespace rssm
