#include "metrics/tolerance.h"

#include <string>

namespace rssm {

Tolerance output_tolerance(Format f) {
  switch (f) {
    case Format::FP64: return {1e-12, 1e-12};
    case Format::FP32:
    case Format::TF32: return {2e-5, 3e-4};
    case Format::FP16: return {5e-3, 1e-2};
    case Format::BF16: return {1e-2, 5e-2};
    default: return {1.6e-1, 8e-1};  // e4m3, e5m2, int8 with row scales
  }
}

namespace {
// Unit roundoff order, widest first, for picking the narrower of two formats.
int coarseness(Format f) {
  switch (f) {
    case Format::FP64: return 0;
    case Format::FP32: return 1;
    case Format::TF32: return 2;
    case Format::FP16: return 3;
    case Format::BF16: return 4;
    default: return 5;
  }
}
Format narrower(Format a, Format b) { return coarseness(a) >= coarseness(b) ? a : b; }
}  // namespace

Format judged_format(Family family, const Scheme& s) {
  Format f = s.dual() ? s.read_format : s.state_format;
  // GDN buffers computed values (u, normalised k); Mamba-2 buffers its inputs, which the buffer rounds again only
  // when it is narrower than the activation format (act fp32 with a bf16 buffer: the buffer's error is the output's).
  if (s.replays() && (family == Family::GDN || coarseness(s.buffer_format) > coarseness(s.act_format)))
    f = narrower(f, s.buffer_format);
  return narrower(f, s.out_format);
}

}  // namespace rssm
