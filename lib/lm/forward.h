// The decode-time forward of the tiny hybrid language model (docs/model_format.md; the torch definition is
// scripts/train_tiny_hybrid.py): one byte per step for `seqs` sequences at once, with the recurrence of every SSM
// layer delegated to a Decoder (lib/decoder/decoder.h), so any scheme, CPU emulation or CUDA kernel, drops in.
// Everything else (embedding, RMSNorms, in-projections, causal convolutions with their rolling state, gated norms,
// out-projections, attention with its KV cache, SwiGLU MLPs, the head) runs here through Eigen, in fp64 for the
// reference run and fp32 for a scheme under test. Not here: which decoders, the metrics (run/lm_run.h).
#pragma once

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "decoder/decoder.h"
#include "lm/weights.h"
#include "numeric/format.h"

namespace rssm {

// A non-finite value in the residual stream: names the layer and the step (the run stops; no NaN reaches a result).
struct LmNumericError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class LmPrecision { FP64, FP32 };
std::string lm_precision_name(LmPrecision p);          // "fp64", "fp32"
LmPrecision parse_lm_precision(const std::string& s);  // throws ConfigError

class LmForward {
 public:
  // decoders: one per SSM layer, in weights.ssm_layers() order; reset here to their layer and `seqs` sequences.
  // act_format: the SSM inputs (x, dt, B, C / q, k, v, a, b) are rounded to it before the decoder sees them
  // (nearest-even; FP64 and FP32 leave them as fp32 values, the InputChunk's type).
  LmForward(const LmWeights& weights, LmPrecision precision, Format act_format,
            std::vector<std::unique_ptr<Decoder>> decoders, int seqs);
  ~LmForward();
  LmForward(const LmForward&) = delete;
  LmForward& operator=(const LmForward&) = delete;

  // One step: tokens [seqs] (bytes 0..vocab-1) in, next-byte logits [seqs, vocab] out.
  // Throws LmNumericError "layer 3 (mamba2) output is not finite at step 17 (sequence 0)" on the first
  // non-finite value after a mixer or an MLP, and ConfigError for a token outside the vocabulary.
  void step(const int* tokens, double* logits);
  long long steps_done() const;
  int seqs() const;
  const std::vector<std::unique_ptr<Decoder>>& decoders() const;

  // Called with every SSM layer's step inputs (index into decoders(), the one-step chunk as the decoder sees it):
  // the per-layer readout proxy replays the reference's inputs through each scheme (run/lm_run.cpp).
  using InputRecorder = std::function<void(int ssm_index, const InputChunk& chunk)>;
  void record_inputs(InputRecorder recorder);

  // Tests: adds `value` to element 0 of sequence 0's mixer output of block `layer` at step `step` (a planted fault).
  void plant(int layer, long long step, double value);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace rssm
