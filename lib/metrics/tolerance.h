// The one tolerance table: how far a scheme's outputs may sit from the fp64 reference, by the narrowest format
// its outputs are read through. Every test that compares a scheme with the reference takes its bound from here,
// and every run reports the share of its budget used (summary columns budget_used, budget_used_max).
//
// Where the numbers come from (CONVENTIONS.md: start from published peer values, tighten with evidence):
//   fp64  exact arithmetic up to operation order: 1e-12 (measured <= 1e-13 over 100 steps, tests [replay]).
//   fp32  mamba_ssm's fp32 tolerance is rtol 3e-4; measured over 8192 steps: mean 2.3e-6, max 5.5e-5 (eager),
//         so mean 2e-5 and max 3e-4 leave ~10x headroom for longer or harder traces.
//   fp16  mamba_ssm: 5e-3 / 1e-2, kept (measured 4.8e-4 mean, 1.3e-3 max, quick start geometry, eager).
//   bf16  mamba_ssm: 1e-2 / 5e-2, kept (measured 3.9e-3 mean, 1.3e-2 max, quick start, eager).
//   e4m3, e5m2, int8 (with row scales): no peer value; bf16's bound times 2^4, the ratio of the unit roundoffs of
//         bf16 (8-bit significand) and e4m3 (4-bit): 1.6e-1 / 8e-1.
// The budget is fixed, not grown with the step count: a shared low-precision checkpoint whose error grows with
// the number of flushes is meant to run out of budget on a long trace, and the growth exponent says how fast.
// A judged format is: eager, its state format; replay, its checkpoint format; dual, its read copy's format; for GDN
// replay/dual also the buffer format, since the buffered u and k are computed values, not rounded inputs; for
// Mamba-2 the buffered x and B are inputs, so its buffer format counts only when it is narrower than the
// activation format (act fp32 with a bf16 buffer rounds the inputs a second time).
#pragma once

#include "decoder/scheme.h"
#include "model/family.h"
#include "numeric/format.h"

namespace rssm {

struct Tolerance {
  double rel_mean;  // bound on the mean over steps of the per-step output relative error (mean over sequences)
  double rel_max;   // bound on its maximum over steps
};

Tolerance output_tolerance(Format judged);

// The format a scheme is judged by (see above), and never wider than its output format: an fp64 scheme whose
// outputs are stored in fp32 is held to fp32's bound.
Format judged_format(Family family, const Scheme& scheme);

}  // namespace rssm
