// Eager decoding at a chosen state format: what a production decode kernel does. Arithmetic is fp32 (as the
// published kernels do); the state is stored in `state_format` after every step (round-to-nearest-even), so a
// low-precision state's rounding error enters every later update. With state_format = fp32 this is the usual
// fp32-state kernel.
#pragma once

#include "numeric/format.h"
#include "run/decoder.h"

namespace rssm {

class EagerDecoder : public Decoder {
 public:
  // state_format: fp32, bf16 or fp16 (an fp8/int8 state needs scales, which eager kernels do not keep).
  explicit EagerDecoder(Format state_format);
  std::string name() const override;
  void reset(const Model& model, int seqs) override;
  void advance(const InputChunk& chunk, int s0, int n, double* y) override;
  std::vector<StateCopy> state() const override;

 private:
  Format fmt_;
  Model model_;
  int seqs_ = 0;
  long long step_ = 0;
  std::vector<float> state_;     // [seqs, state_elems], values exactly representable in fmt_
  std::vector<float> qn_, kn_;   // GDN: normalised q (scaled by 1/sqrt(K)) and k, [seqs, HK, K]
};

}  // namespace rssm
