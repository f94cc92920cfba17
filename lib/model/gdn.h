// Gated DeltaNet decode: parameters and the fp64 eager reference step.
// The reference follows the order of operations of a naive recurrent GDN step (decay, read, correct, write,
// read out), in double, one value head at a time.
#pragma once

#include <vector>

namespace rssm {

struct GdnParams {
  int HK = 0;  // key heads
  int HV = 0;  // value heads (a multiple of HK; value head h uses key head h / (HV / HK))
  int K = 0;   // key dim
  int V = 0;   // value dim
  double eps = 1e-6;            // L2-normalisation epsilon for q and k
  std::vector<double> A_log;    // [HV]
  std::vector<double> dt_bias;  // [HV]

  int values_per_key() const { return HV / HK; }
  long long state_elems() const { return static_cast<long long>(HV) * V * K; }  // per sequence
  int out_elems() const { return HV * V; }
  void validate(const char* where) const;
};

// Per-step scalars of value head h: g = -exp(A_log)·softplus(a + dt_bias), α = exp(g), β = sigmoid(b).
struct GdnGate {
  double g, alpha, beta;
};
GdnGate gdn_gate_ref(const GdnParams& p, int h, double a_raw, double b_raw);

// L2-normalise one key-head vector in double: out = v / sqrt(sum v^2 + eps)·scale. v, out: [K]
void gdn_l2norm_ref(const float* v, int K, double eps, double scale, double* out);

// One fp64 eager step for value head h of one sequence, with q and k already normalised (qn includes
// the 1/sqrt(K) scale):  S <- α·S;  u = β·(v − S·k);  S <- S + u ⊗ k;  o = S·q.
// state: [V, K] of head h (in/out)   qn, kn: [K] of key head h / (HV/HK)   v: [HV, V]   o: [HV, V] (row h)
void gdn_head_step_ref(const GdnParams& p, int h, double* state, const double* qn, const double* kn, const float* v,
                       const GdnGate& gate, double* o);

// One fp64 eager step for all heads of one sequence, normalisation included.
// state: [HV, V, K]  q, k: [HK, K]  v: [HV, V]  a, b: [HV]  o: [HV, V]
void gdn_step_ref(const GdnParams& p, double* state, const float* q, const float* k, const float* v, const float* a,
                  const float* b, double* o);

}  // namespace rssm
