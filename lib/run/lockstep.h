// The lockstep engine: the fp64 reference and a batch of decoders advance over the same chunks of a trace, step
// for step, and every measurement is taken as they go: per-step output error against the reference (and KL /
// top-1 through the readout), the state error of every copy whenever a run observes its state (at its flushes),
// and, for a run paired with a twin (the same scheme on another backend), the per-step difference between the
// two. Nothing here knows about configs, sweeps or files: the runner builds the decoders and the records.
// Chunks are split wherever any run observes its state, so checkpoints meet the reference state of the same step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "decoder/decoder.h"
#include "metrics/output_error.h"
#include "numeric/format.h"
#include "trace/trace.h"

namespace rssm {

struct LockstepSettings {
  long long steps = 0;  // steps [0, steps) of the trace
  int seqs = 1;         // sequences [0, seqs)
  int chunk = 64;       // steps read at once
  Format act = Format::BF16;  // inputs are rounded to it (nearest-even) before the reference and every decoder
  bool kl = true;             // KL / top-1 through the readout (metrics/readout.h)
  int vocab = 4096;           // readout rows when the trace has no readout
  double logit_std = 4;       // calibration of a synthesised readout
  uint64_t seed = 0;          // synthesised readout
  bool state_err = true;      // observe states
  bool save_outputs = false;  // keep every output of every run (and the reference's through ref_outputs)
};

// One decoder under test and what the engine measures for it.
struct LockstepRun {
  std::unique_ptr<Decoder> dec;  // reset by the caller
  int observe_every = 16;        // tokens between state observations (the interval for replay/dual)
  // Index (in the same vector) of the run this one is compared with step by step, or -1. Twins run the same
  // scheme on different backends; the difference is counted in ulps of out_format.
  int twin = -1;
  Format out_format = Format::FP32;

  OutputErrorSeries err;                              // [steps] against the fp64 reference
  std::vector<double> kl_mean, kl_max, top1;          // [steps] when kl
  std::vector<long long> obs_step;                    // tokens folded at each observation
  std::vector<std::pair<std::string, std::vector<double>>> state_series;  // state_rel_err_<copy>[_<band>]
  std::vector<double> twin_rel_max, twin_ulps_max, twin_bitwise;          // [steps] when twin >= 0 (bitwise: 0/1)
  std::vector<double> outputs;                        // [steps, seqs, out] when save_outputs
  double seconds = 0;  // wall time inside dec->advance() on this host (CPU emulation time, not a kernel's speed)
  std::vector<double> ychunk;  // scratch: this chunk's outputs [n, seqs, out]
};

// Runs every decoder of `runs` over the trace in lockstep with a fresh fp64 reference. Reads from `src` under
// `src_mutex` when given (HDF5 is not thread-safe). `progress` is called with the number of run-steps done after
// each chunk. ref_outputs, when given, receives the reference outputs [steps, seqs, out]. Returns false when a stop
// was requested (stop_requested()), leaving the runs half-measured.
bool run_lockstep(const LockstepSettings& st, TraceSource& src, std::vector<LockstepRun>& runs,
                  std::mutex* src_mutex = nullptr, std::vector<double>* ref_outputs = nullptr,
                  const std::function<void(long long)>& progress = {});

// Asks running experiments to stop at the next step boundary (async-signal-safe: sets a flag).
void request_stop();
bool stop_requested();

}  // namespace rssm
