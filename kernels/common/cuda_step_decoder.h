// What the two families' `cuda` decoders (kernels/mamba2/mamba2_decoder.cpp, kernels/gdn/gdn_decoder.cpp) do alike
// on the host, in one place. Per advance() over n steps: the n steps' inputs go to the device in one copy per input
// (as act-format codes; the runner has already rounded them to it, so the conversion is exact), n launches on the
// decoder's stream (one step each, in order: the state or the ring carries each step into the next), then one copy
// of the n steps' outputs back and a conversion to double. The host waits once per advance(), never per step. The
// device keeps the ring cursor per row; the host mirrors it (every row advances every step, so all rows share one
// fill) only to stamp state copies with the step of the last flush, as the CPU decoders do.
// A family supplies its checks and buffers (reset(), around begin_reset / end_reset) and its step's launch.
// Host C++ against the CUDA runtime: include it from CUDA-linked code only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/device_buffer.h"
#include "decoder/decoder.h"
#include "decoder/scheme.h"
#include "model/model.h"

namespace rssm {

// What a family's step kernels take, for step_cuda_unsupported's messages and bound.
struct StepKernelLimits {
  const char* family;        // "GDN", "Mamba-2"
  const char* out;           // its output's name: "o", "y"
  const char* ring;          // what its ring keeps in bf16: "u and k", "x and B"
  int max_interval;          // the replay kernels' largest interval
  const char* interval_why;  // why: "keeps per-entry weights in shared memory"
};

// Why no step kernel of the family runs `s` ("" when one does): the checks both families' kernels share (activation,
// output, state, read-copy and buffer formats, dot arithmetic, interval). A family adds its own after them
// (gdn_cuda_unsupported: the reconstruct route's flush arithmetic).
std::string step_cuda_unsupported(const Scheme& s, const StepKernelLimits& k);

class CudaStepDecoder : public Decoder {
 public:
  CudaStepDecoder(const Scheme& s, uint64_t seed) : s_(s), seed_(seed) {}
  ~CudaStepDecoder() override;
  CudaStepDecoder(const CudaStepDecoder&) = delete;
  CudaStepDecoder& operator=(const CudaStepDecoder&) = delete;

  std::string name() const override { return s_.decoder_name(); }
  void advance(const InputChunk& chunk, int s0, int n, double* y) final;
  // Eager: "state" after the last step. Replay: "checkpoint" (the shared checkpoint, or the dual update copy) and,
  // dual, "read", both as of the last flush (the device copies change only there).
  std::vector<StateCopy> state() const final;

 protected:
  static constexpr int kMaxInputs = 5;

  // The kernels' row layout (16-byte vectors of a `len`-long state row, the row within one warp), checked with the
  // layer known so that a geometry they cannot tile is a clear config error instead of a failed launch. `kernels`
  // and `dim` name them in the message ("the GDN kernels", "the key dim K").
  static void check_rows(const Model& model, Format f, const char* copy, int len, const char* kernels,
                         const char* dim);

  // reset()'s shared part, after the family's checks: the run's sizes, the stream, the slots, the state pool
  // [seqs, state_elems] in state_format (zeroed), the dual read copy and its row scales (rows of `row_len`), and for
  // replay the ring's capacity and the device cursors. The family then sizes its parameters and ring with upload()
  // and zeroed(), and calls end_reset(), which waits for the copies (their host sources must live until then).
  void begin_reset(const Model& model, int seqs, int row_len);
  void upload(DeviceBuffer& d, const void* src, size_t bytes);
  void zeroed(DeviceBuffer& d, size_t bytes);
  void end_reset();

  // Step k of the staged steps: the family's launch. input(i, elems) is input i's codes at step k.
  virtual int inputs() const = 0;
  virtual void launch(int k) = 0;
  const void* input(int k, int i, size_t elems) const {
    return in_[i].at(static_cast<size_t>(k) * seqs_ * elems * act_bytes_);
  }
  void* output(int k) const { return y_.at(static_cast<size_t>(k) * seqs_ * model_.out_elems() * y_bytes_); }
  const int64_t* positions(int k) const {  // stochastic rounding's step key of step k's rows, else null
    return s_.rounding == Rounding::Stochastic ? pos_.as<const int64_t>() + static_cast<size_t>(k) * seqs_ : nullptr;
  }
  // The fields of a family's step arguments (Mamba2StepArgs, GdnStepArgs) that come from the scheme and the shared
  // buffers, for step k; the family sets its inputs, parameters and output.
  template <class Args>
  void step_fields(Args& a, int k) const {
    a.batch = seqs_;
    a.d_slot = slot_.as<const int32_t>();
    a.act_format = s_.act_format;
    a.rounding = s_.rounding;
    a.seed = seed_;
    a.d_pos = positions(k);
  }
  // The same for a replay launch (Mamba2ReplayLaunch, GdnReplayLaunch): interval, ring capacity and cursors, the
  // checkpoint and the dual read copy; the family sets its ring.
  template <class Launch>
  void replay_fields(Launch& l) const {
    l.interval = s_.interval;
    l.capacity = capacity_;
    l.ckpt_format = s_.state_format;
    l.d_ckpt = state_.as();
    l.dual = s_.dual();
    l.flush_arith = s_.flush_arith;
    l.read_format = s_.read_format;
    l.d_read = s_.dual() ? read_.as() : nullptr;
    l.d_read_scale = read_scale_.bytes() ? read_scale_.as<float>() : nullptr;
    l.d_fill = fill_d_.as<int32_t>();
    l.d_arrive = arrive_.as<int32_t>();
  }

  Scheme s_;
  uint64_t seed_ = 0;  // stochastic rounding's key (numeric/stochastic.h), the run's seed as the CPU decoders take it
  Model model_;
  int seqs_ = 0, capacity_ = 0;
  cudaStream_t stream_ = nullptr;
  // Device: slots [seqs] (slot = row), the pool [seqs, state_elems] (eager state, or the checkpoint / dual update
  // copy) and the dual read copy (a block-scaled one with its scales, one per row of row_len), the ring's cursors
  // (replay).
  DeviceBuffer slot_, state_, read_, read_scale_, fill_d_, arrive_;

 private:
  void stage(const InputChunk& c, int s0, int n);
  void fetch(const DeviceBuffer& d, Format f, std::vector<double>& out) const;

  std::vector<int32_t> slots_host_;  // begin_reset()'s source of slot_, kept until end_reset()
  int row_len_ = 0, fill_ = 0;
  long long step_ = 0, flushed_step_ = 0;
  size_t act_bytes_ = 2, y_bytes_ = 4;
  // The staged inputs in_[i] [n, seqs, elems_i] in act_format, the outputs [n, seqs, out_elems] in out_format, and
  // each staged step's position [n, seqs] (stochastic rounding) with its host copy, kept while the copy is in flight.
  DeviceBuffer in_[kMaxInputs], y_, pos_;
  std::vector<int64_t> pos_host_;
  // Host: bf16 codes of each input while its copy is in flight (one vector per input: none is reused before the
  // stream is waited for), the outputs' codes, and the dequantised state copies state() points into.
  std::vector<uint16_t> codes_[kMaxInputs];
  std::vector<uint8_t> y_host_;
  mutable std::vector<uint8_t> raw_;
  mutable std::vector<float> raw_scales_;
  mutable std::vector<double> host_state_, host_read_;
};

}  // namespace rssm
