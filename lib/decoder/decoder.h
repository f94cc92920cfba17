// The one interface every decoder implements, CPU or GPU: the runner drives decoders only through it.
// A decoder owns the recurrent state of `seqs` sequences of one layer and advances it over chunks of steps.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "decoder/input_chunk.h"
#include "model/model.h"

namespace rssm {

// A view of one copy of a decoder's state (replay decoders may keep several: update and read copies), as plain
// host memory: dequantised values in double, [seqs, state_elems] as Model::state_elems() lays it out. It is valid
// until the decoder's next advance(), reset() or state() call. A CPU decoder points into its own storage (observing
// the state every flush copies nothing); a GPU decoder fills a host buffer it owns when state() is called
// (copying and dequantising its device copy) and points there.
struct StateCopy {
  std::string name;             // "state", "checkpoint", "read", ...
  long long step = 0;           // number of trace steps folded into it
  const double* data = nullptr;  // [seqs, state_elems]
  size_t size = 0;               // seqs * state_elems
  // Speculative decoders, whose rows flush at different steps: row q holds row_step[q] folded tokens (`step` is
  // then the largest). Empty: every row holds `step`.
  std::vector<long long> row_step;
  std::vector<double> to_vector() const { return {data, data + size}; }  // an owned copy (tests)
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Short, unique, stable name, used as the run's `decoder` attribute ("ref-fp64", "eager-fp32", ...).
  virtual std::string name() const = 0;
  // Binds the decoder to a layer and a number of sequences and zeroes its state (step 0).
  virtual void reset(const Model& model, int seqs) = 0;
  // Advances over steps [s0, s0 + n) of `chunk` (chunk-local indices; steps arrive in trace order, none skipped)
  // and writes the outputs of those steps to y: [n, seqs, out_elems].
  virtual void advance(const InputChunk& chunk, int s0, int n, double* y) = 0;
  // Steps past s0 + n whose inputs advance() may read from the chunk (the runner keeps that many more in it, fewer
  // at the trace's end): a speculative GPU decoder verifies a whole window at once, reaching past the span's end.
  virtual int lookahead() const { return 0; }
  // The state copies as they stand now (views, see StateCopy).
  virtual std::vector<StateCopy> state() const = 0;
};

}  // namespace rssm
