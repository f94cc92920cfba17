#include "decoder/input_chunk.h"

namespace rssm {

void InputChunk::shape(const Model& model, long long step0_, int steps_, int seqs_) {
  step0 = step0_;
  steps = steps_;
  seqs = seqs_;
  const auto specs = model.inputs();
  elems.resize(specs.size());
  data.resize(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    elems[i] = specs[i].elems();
    data[i].resize(static_cast<size_t>(steps) * seqs * elems[i]);
  }
}

}  // namespace rssm
