// State error of a decoder's checkpoint against the fp64 reference state, overall and per decay band.
// Heads are grouped by how long they remember (their per-step log-decay at zero raw input): an error in a slowly
// decaying head is not forgotten and accumulates over flushes, while a fast head forgets it within a few steps, so
// an average over all heads would hide the growth the method's precision claims are about.
// Not here: the output error (metrics/output_error.h). Definitions: docs/metrics.md.
#pragma once

#include <string>
#include <vector>

#include "model/model.h"

namespace rssm {

// Typical per-step log-decay magnitude |log a| of head h (Mamba-2) or value head h (GDN) at zero raw input:
//   Mamba-2: exp(A_log[h])·Δ(dt = 0), with Δ = softplus(dt_bias[h]) clamped to [dt_min, dt_max];
//   GDN:     exp(A_log[h])·softplus(dt_bias[h]).
// 1 / rate is the head's memory length in steps.
double head_decay_rate(const Model& m, int h);

// Three fixed bands of decay rate: "fast" (rate > 0.1), "medium" (0.01 < rate <= 0.1), "slow" (rate <= 0.01).
// Bands may be empty (count 0).
struct DecayBands {
  std::vector<std::string> names;  // [3]: "fast", "medium", "slow"
  std::vector<int> band_of_head;   // [H] (Mamba-2) or [HV] (GDN): index into names
  std::vector<int> count;          // [3]: heads per band
};

// Band thresholds, exposed so tests and docs quote the same numbers.
inline constexpr double kFastDecayRate = 0.1;
inline constexpr double kSlowDecayRate = 0.01;

DecayBands decay_bands(const Model& m);

struct StateErrorStats {
  double rel_mean = 0;                // mean over sequences of ‖S − S_ref‖_F / ‖S_ref‖_F (all heads)
  double rel_max = 0;                 // max over sequences of the same (NaN propagates)
  std::vector<double> band_rel_mean;  // [bands]: the same mean, restricted to each band's heads; NaN if empty
};

// S, S_ref: [seqs, state_elems] with one contiguous block per head (Mamba-2 [H, P, N], GDN [HV, V, K]).
// A zero reference norm falls back to the absolute norm ‖S − S_ref‖_F (as step_error does for outputs).
// One pass over both arrays, parallel over (sequence, head) blocks.
StateErrorStats state_error(const Model& m, const DecayBands& bands, const double* S, const double* S_ref, int seqs);

}  // namespace rssm
