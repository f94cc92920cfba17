// Per-step output error of a decoder against the fp64 reference.
// Relative error is norm-wise per sequence, ‖y − y_ref‖₂ / ‖y_ref‖₂ over one sequence's output vector of a step
// (a zero reference norm falls back to the absolute norm), then reduced over sequences as mean and max.
#pragma once

#include <cstddef>
#include <vector>

namespace rssm {

struct StepError {
  double rel_mean = 0;  // mean over sequences of the norm-wise relative error
  double rel_max = 0;   // max over sequences
  double abs_max = 0;   // max |y − y_ref| over sequences and elements
  double rel_rms = 0;   // sqrt(Σ (y − y_ref)² / Σ y_ref²) over all sequences together
};

// y, y_ref: [seqs, out_elems] of one step.
StepError step_error(const double* y, const double* y_ref, int seqs, int out_elems);

// Accumulates per-step errors of a run.
struct OutputErrorSeries {
  std::vector<double> rel_mean, rel_max, abs_max, rel_rms;  // [steps]
  void push(const StepError& e);
  size_t size() const { return rel_mean.size(); }
};

}  // namespace rssm
