// InputChunk: the SSM inputs of a run of consecutive steps, the one thing a decoder reads. Split out of the trace
// sources so that a decoder (CPU or CUDA) depends on the model and this struct only, never on how traces are read.
#pragma once

#include <vector>

#include "model/model.h"

namespace rssm {

// Inputs of `steps` consecutive steps starting at `step0`, for all sequences.
// data[i] holds input i of Model::inputs(), laid out [steps, seqs, elems_i] (elems_i = InputSpec::elems()).
// Values are float: every stored format (fp32, bf16, and the activation formats runs round to) fits exactly.
struct InputChunk {
  long long step0 = 0;
  int steps = 0;
  int seqs = 0;
  std::vector<int> elems;               // elems[i] per token of input i
  std::vector<std::vector<float>> data;  // data[i]: [steps, seqs, elems[i]]

  // Sizes the chunk for `model`'s inputs (reusing capacity).
  void shape(const Model& model, long long step0, int steps, int seqs);
  // Input i of one token; s is the step index within the chunk.
  const float* at(int i, int s, int seq) const {
    return data[i].data() + (static_cast<size_t>(s) * seqs + seq) * elems[i];
  }
  float* at(int i, int s, int seq) { return data[i].data() + (static_cast<size_t>(s) * seqs + seq) * elems[i]; }
};

}  // namespace rssm
