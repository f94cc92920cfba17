// The fp64 eager reference behind the Decoder interface: mamba2_step_ref / gdn_step_ref over sequences and
// heads, parallel over (sequence, head) with OpenMP. Every scheme is measured against it.
#pragma once

#include "decoder/decoder.h"

namespace rssm {

class ReferenceDecoder : public Decoder {
 public:
  std::string name() const override { return "ref-fp64"; }
  void reset(const Model& model, int seqs) override;
  void advance(const InputChunk& chunk, int s0, int n, double* y) override;
  std::vector<StateCopy> state() const override;
  // Direct access for tests and the benchmark. [seqs, state_elems]
  std::vector<double>& raw_state() { return state_; }

 private:
  Model model_;
  int seqs_ = 0;
  long long step_ = 0;
  std::vector<double> state_;
  std::vector<double> qn_, kn_;  // GDN: normalised q (scaled) and k, [seqs, HK, K]
};

}  // namespace rssm
