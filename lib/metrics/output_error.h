// Per-step output error of a decoder against the fp64 reference.
// Relative error is norm-wise per sequence, ‖y − y_ref‖₂ / ‖y_ref‖₂ over one sequence's output vector of a step
// (a zero reference norm falls back to the absolute norm), then reduced over sequences as mean and max.
#pragma once

#include <cstddef>
#include <vector>

#include "numeric/format.h"

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

// Distance in units in the last place of format f between two values on f's grid (fp64, fp32, bf16, fp16): the
// number of representable values from one to the other (0 when equal, +0 and -0 included). NaN when either is NaN
// or not on the grid.
double ulp_distance(Format f, double a, double b);

// Per-step difference between two decoders running the same scheme on different backends (a against b):
// rel_max: max over sequences of ‖y_a − y_b‖₂ / ‖y_b‖₂ (as step_error); ulps_max: the largest ulp_distance over
// all outputs, in the scheme's output format (both decoders store their outputs in it); bitwise: every output
// has the same bits.
struct BackendDiff {
  double rel_max = 0;
  double ulps_max = 0;
  bool bitwise = true;
};
BackendDiff backend_diff(const double* y_a, const double* y_b, int seqs, int out_elems, Format out_format);

}  // namespace rssm
