// Traces: the SSM inputs of every decode step of a few sequences, plus the layer's parameters.
// A run never holds a whole trace: decoders pull consecutive chunks of steps from a TraceSource, which is an
// HDF5 file (trace_h5.h), the synthetic generator (synth.h), or an in-memory trace (tests, small files).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "decoder/input_chunk.h"
#include "model/model.h"

namespace rssm {

class TraceSource {
 public:
  virtual ~TraceSource() = default;
  virtual const Model& model() const = 0;  // family, geometry, parameters
  virtual long long steps() const = 0;
  virtual int seqs() const = 0;
  // Reads steps [step0, step0 + nsteps) for every sequence into `out`. Throws FormatError naming the source and
  // dataset on a read failure or a non-finite input (with its step, sequence and index).
  virtual void read(long long step0, int nsteps, InputChunk& out) = 0;
  // Readout matrix W [vocab, out_elems] for the KL metric, or empty when the source has none.
  virtual const std::vector<float>& readout() const = 0;
  virtual int readout_vocab() const = 0;
  // One line naming the source, stored as run provenance ("trace file x.h5", "synth seed=1 preset=...").
  virtual std::string describe() const = 0;
};

// A whole trace in memory: for tests and small files.
class MemoryTrace : public TraceSource {
 public:
  Model model_;
  long long steps_ = 0;
  int seqs_ = 0;
  std::vector<std::vector<float>> inputs;  // inputs[i]: [steps, seqs, elems_i]
  std::vector<float> readout_;             // [vocab, out_elems] or empty
  int vocab_ = 0;
  std::string description = "in-memory trace";

  // Empty trace with zeroed inputs of the right size.
  MemoryTrace(Model model, long long steps, int seqs);
  // Reads every step of `src` into memory.
  static std::unique_ptr<MemoryTrace> load_all(TraceSource& src);

  const Model& model() const override { return model_; }
  long long steps() const override { return steps_; }
  int seqs() const override { return seqs_; }
  void read(long long step0, int nsteps, InputChunk& out) override;
  const std::vector<float>& readout() const override { return readout_; }
  int readout_vocab() const override { return vocab_; }
  std::string describe() const override { return description; }
};

// Throws FormatError naming `where` and `dataset` if any value of data ([steps, seqs, elems]) is NaN or Inf;
// the message gives the first bad (global) step, sequence and index.
void check_finite(const std::string& where, const std::string& dataset, const float* data, long long step0,
                  int steps, int seqs, int elems);

}  // namespace rssm
