// A linear readout from SSM outputs to vocabulary logits, and the KL / top-1 comparison through it.
// The KL divergence between the next-token distributions a decoder and the fp64 reference would produce is the
// quantity a user of the model cares about, but one SSM layer has no language-model head. The readout is a proxy
// for a model's next-token distribution: logits = W·y with y one token's layer output flattened over heads
// ([H·P] or [HV·V]) and W [vocab, out_elems] taken from the trace when it has one, otherwise a seeded Gaussian
// scaled so the reference logits have a chosen standard deviation (the default 4 gives a peaked but not one-hot
// softmax over 4096 words). See docs/metrics.md for what the proxy does and does not capture.
// Not here: norm-wise output error (metrics/output_error.h).
#pragma once

#include <cstdint>
#include <vector>

namespace rssm {

class Readout {
 public:
  // W_or_empty: [vocab, out_elems] row-major (a trace's readout), or empty to synthesize W [vocab_if_synth,
  // out_elems] from seeded standard normals (Philox4x32 keyed by seed: the same seed gives the same W on any
  // machine and thread count). With a trace's W, vocab = W.size() / out_elems and vocab_if_synth is ignored.
  // Throws ConfigError on sizes that do not fit.
  Readout(const std::vector<float>& W_or_empty, int vocab_if_synth, int out_elems, uint64_t seed);

  // y_ref: [rows, out_elems], the first rows of the reference outputs. A synthesized W is scaled (one scalar) so
  // that the std of all rows·vocab reference logits equals target_logit_std; a trace's W is used as is and its
  // measured std is only recorded. Throws ConfigError when the reference logits have zero or non-finite std.
  void calibrate(const double* y_ref, int rows, double target_logit_std);

  // Logits of rows outputs. y: [rows, out_elems]; out is resized to [rows, vocab] (row-major).
  // Float GEMM (see readout.cpp for why this is accurate enough for the reference logits).
  void logits(const double* y, int rows, std::vector<double>& out) const;

  // Per row (a (step, sequence) pair): kl[r] = KL(p_ref ‖ p_test) with p = softmax(logits), and top1[r] = 1 when
  // argmax agrees (first index on ties), else 0. ref_logits: [rows, vocab] from logits(y_ref); y, y_ref:
  // [rows, out_elems]; kl, top1: [rows]. Test logits are ref_logits + W·(y − y_ref), so rounding in the GEMM scales
  // with the difference, not with the logits. KL is computed in double and never negative (rounding-level
  // negatives are clamped to 0); a non-finite test output gives kl = NaN and top1 = 0.
  void compare(const std::vector<double>& ref_logits, const double* y, const double* y_ref, int rows, double* kl,
               double* top1) const;
  // The same on a pointer: ref_logits [rows, vocab], e.g. a slice of a larger chunk's reference logits.
  void compare(const double* ref_logits, const double* y, const double* y_ref, int rows, double* kl,
               double* top1) const;

  int vocab() const { return vocab_; }
  int out_elems() const { return out_elems_; }
  bool synthesized() const { return synthesized_; }
  uint64_t seed() const { return seed_; }
  // The scalar every stored W entry is multiplied by: for a synthesized W, W = scale·Z with Z standard normal
  // (1/sqrt(out_elems) before calibrate); for a trace's W, 1.
  double scale() const { return scale_; }
  // Std of the reference logits at the last calibrate, with the W in use (after scaling); NaN before calibrate.
  double measured_std() const { return measured_std_; }
  // The same std before scaling (equal to measured_std for a trace's W); NaN before calibrate.
  double unscaled_std() const { return unscaled_std_; }
  int calibration_rows() const { return calibration_rows_; }

 private:
  // logits_raw[r] = Z·y[r] without the scale, float GEMM, rows in blocks of kBlockRows.
  void gemm(const float* y, int rows, float* out) const;

  int vocab_ = 0, out_elems_ = 0;
  bool synthesized_ = false;
  uint64_t seed_ = 0;
  std::vector<float> W_;  // [vocab, out_elems]: Z (synthesized) or the trace's W
  double scale_ = 1.0;
  double measured_std_, unscaled_std_;
  int calibration_rows_ = 0;
};

}  // namespace rssm
