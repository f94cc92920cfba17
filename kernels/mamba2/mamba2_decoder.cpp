// The `cuda` decoder of Mamba-2 schemes (mamba2_decoder.h): host C++ over the launchers of mamba2_kernels.h.
// Per advance() over n steps: the n steps' inputs go to the device in one copy per input (converted to the act
// format's codes; the runner has already rounded them to it, so the conversion is exact), n launches on the
// decoder's stream (one step each, in order: the state or the ring carries each step into the next), then one copy
// of the n steps' outputs back and a conversion to double. The host waits once per advance(), never per step.
// The device keeps the ring cursor per row; the host mirrors it (every row advances every step, so all rows share
// one fill) only to stamp state copies with the step of the last flush, as the CPU decoder does.
#include "mamba2/mamba2_decoder.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <vector>

#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "errors.h"
#include "mamba2/mamba2_kernels.h"

namespace rssm {

namespace {

bool plain16(Format f) { return f == Format::BF16 || f == Format::FP16; }
bool kernel_state_format(Format f) { return f == Format::FP32 || plain16(f); }

// The streamed state's layout rule of the kernels (16-byte vectors, one state row within a warp), checked with the
// layer known so a geometry the kernels cannot tile is a clear config error instead of a failed launch.
void check_rows(const Model& model, Format f, const char* copy) {
  const int N = model.mamba2.N, vec = f == Format::FP32 ? 4 : 8;
  const int lanes = N / vec;
  if (N % vec != 0 || lanes < 1 || lanes > 32 || (lanes & (lanes - 1)) != 0)
    throw ConfigError(fmt::format("scheme.backend = cuda: the Mamba-2 kernels need the state dim N to be {} times a "
                                  "power of two up to 32 for a {} {} (16-byte vectors, a state row within a warp), "
                                  "got N={} ({})",
                                  vec, format_name(f), copy, N, model.geometry_string()));
}

class Mamba2CudaDecoder final : public Decoder {
 public:
  Mamba2CudaDecoder(const Scheme& s, uint64_t seed) : s_(s), seed_(seed) {}
  ~Mamba2CudaDecoder() override {
    if (stream_) (void)cudaStreamDestroy(stream_);
  }
  Mamba2CudaDecoder(const Mamba2CudaDecoder&) = delete;
  Mamba2CudaDecoder& operator=(const Mamba2CudaDecoder&) = delete;

  std::string name() const override { return s_.decoder_name(); }
  void reset(const Model& model, int seqs) override;
  void advance(const InputChunk& chunk, int s0, int n, double* y) override;
  // Eager: "state" after the last step. Replay: "checkpoint" (the shared checkpoint, or the dual update copy) and,
  // dual, "read", both as of the last flush (the device copies change only there).
  std::vector<StateCopy> state() const override;

 private:
  int inputs() const { return model_.mamba2.has_z ? 5 : 4; }
  void stage(const InputChunk& c, int s0, int n);
  void launch(int k);  // step k of the staged steps
  void fetch(const DeviceBuffer& d, Format f, std::vector<double>& out) const;

  Scheme s_;
  uint64_t seed_ = 0;  // stochastic rounding's key (numeric/stochastic.h), the run's seed as the CPU decoders take it
  Model model_;
  Mamba2Dims dims_;
  int seqs_ = 0, capacity_ = 0, fill_ = 0;
  long long step_ = 0, flushed_step_ = 0;
  size_t act_bytes_ = 2, y_bytes_ = 4;
  cudaStream_t stream_ = nullptr;
  // Device: slots [seqs] (slot = row), layer parameters (fp32), the pool [seqs, H, P, N] (eager state, or the
  // checkpoint / dual update copy) and the dual read copy (a block-scaled one with its scales [seqs, H, P]), the ring
  // and its cursors (replay), the staged inputs in_[i] [n, seqs, elems_i] in act_format and the outputs
  // [n, seqs, H·P] in out_format.
  DeviceBuffer slot_, A_log_, dt_bias_, D_, state_, read_, read_scale_;
  DeviceBuffer ring_x_, ring_B_, ring_dl_, fill_d_, arrive_;
  DeviceBuffer pos_;                // [n, seqs] each staged step's position (stochastic rounding's step key)
  std::vector<int64_t> pos_host_;   // its host copy, kept while the copy is in flight
  DeviceBuffer in_[5], y_;
  // Host: bf16 codes of each input while its copy is in flight (one vector per input: none is reused before the
  // stream is waited for), the outputs' codes, and the dequantised state copies state() points into.
  std::vector<uint16_t> codes_[5];
  std::vector<uint8_t> y_host_;
  mutable std::vector<uint8_t> raw_;
  mutable std::vector<float> raw_scales_;
  mutable std::vector<double> host_state_, host_read_;
};

void Mamba2CudaDecoder::reset(const Model& model, int seqs) {
  if (model.family != Family::Mamba2)  // the backend picks the decoder by family: this is a caller's mistake
    throw InternalError(fmt::format("{}: the Mamba-2 cuda decoder reset with a {} layer", s_.decoder_name(),
                                    family_name(model.family)));
  if (seqs < 1) throw InternalError("Mamba2CudaDecoder::reset: seqs < 1");
  const Mamba2Params& p = model.mamba2;
  if (s_.dual()) {
    check_rows(model, s_.state_format, "update copy");
    check_rows(model, s_.read_format, "read copy");
  } else {
    check_rows(model, s_.state_format, s_.replays() ? "checkpoint" : "state");
  }
  if (s_.replays() && p.N % 8 != 0)
    throw ConfigError(fmt::format("scheme.backend = cuda: the Mamba-2 replay kernel needs N a multiple of 8 (16-byte "
                                  "loads of the buffered B), got N={} ({})",
                                  p.N, model.geometry_string()));
  model_ = model;
  seqs_ = seqs;
  dims_ = Mamba2Dims{p.H, p.P, p.N, p.G};
  step_ = flushed_step_ = 0;
  fill_ = 0;
  act_bytes_ = s_.act_format == Format::FP32 ? 4 : 2;
  y_bytes_ = s_.out_format == Format::FP32 ? 4 : 2;
  if (!stream_) CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));

  // Host copies of what goes up once; they must outlive the asynchronous copies, hence the wait at the end.
  std::vector<int32_t> slots(static_cast<size_t>(seqs));
  for (int r = 0; r < seqs; ++r) slots[r] = r;
  const std::vector<float> A_log(p.A_log.begin(), p.A_log.end()), dt_bias(p.dt_bias.begin(), p.dt_bias.end()),
      D(p.D.begin(), p.D.end());
  auto upload = [&](DeviceBuffer& d, const void* src, size_t bytes) {
    d.assign(bytes);
    CUDA_CHECK(cudaMemcpyAsync(d.as(), src, bytes, cudaMemcpyHostToDevice, stream_));
  };
  auto zeroed = [&](DeviceBuffer& d, size_t bytes) {
    d.assign(bytes);
    if (bytes) CUDA_CHECK(cudaMemsetAsync(d.as(), 0, bytes, stream_));  // zero is 0.0 in fp32, bf16 and fp16
  };
  upload(slot_, slots.data(), slots.size() * sizeof(int32_t));
  upload(A_log_, A_log.data(), A_log.size() * sizeof(float));
  upload(dt_bias_, dt_bias.data(), dt_bias.size() * sizeof(float));
  upload(D_, D.data(), D.size() * sizeof(float));
  const size_t elems = static_cast<size_t>(seqs) * static_cast<size_t>(p.state_elems());
  zeroed(state_, elems * static_cast<size_t>(format_bytes(s_.state_format)));
  if (s_.dual())
    zeroed(read_, elems * static_cast<size_t>(format_bytes(s_.read_format)));
  else
    read_.release();
  reset_row_scales(read_scale_, s_.dual() ? s_.read_format : Format::FP32, elems / static_cast<size_t>(p.N));
  if (s_.replays()) {
    // buffer_len only changes memory and traffic: the ring is sized by it as a serving engine's would be.
    capacity_ = std::max(s_.interval, s_.buffer_len);
    const size_t rows_cap = static_cast<size_t>(seqs) * static_cast<size_t>(capacity_);
    zeroed(ring_x_, rows_cap * static_cast<size_t>(p.H) * p.P * sizeof(uint16_t));
    zeroed(ring_B_, rows_cap * static_cast<size_t>(p.G) * p.N * sizeof(uint16_t));
    zeroed(ring_dl_, rows_cap * static_cast<size_t>(p.H) * 2 * sizeof(float));
    zeroed(fill_d_, static_cast<size_t>(seqs) * sizeof(int32_t));
    zeroed(arrive_, static_cast<size_t>(seqs) * sizeof(int32_t));  // the launcher's contract: zero before the first
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void Mamba2CudaDecoder::stage(const InputChunk& c, int s0, int n) {
  if (c.seqs != seqs_ || static_cast<int>(c.data.size()) < inputs())
    throw InternalError(fmt::format("{}: a chunk of {} sequences and {} inputs, expected {} and {}", name(), c.seqs,
                                    c.data.size(), seqs_, inputs()));
  const auto specs = model_.inputs();
  for (int i = 0; i < inputs(); ++i) {
    if (c.elems[i] != specs[i].elems())
      throw InternalError(fmt::format("{}: input {} has {} values per token, expected {}", name(), i, c.elems[i],
                                      specs[i].elems()));
    const size_t count = static_cast<size_t>(n) * seqs_ * c.elems[i];
    const float* src = c.at(i, s0, 0);  // steps s0 .. s0+n-1 of input i are contiguous: [steps, seqs, elems]
    in_[i].reserve(count * act_bytes_);
    if (s_.act_format == Format::FP32) {
      CUDA_CHECK(cudaMemcpyAsync(in_[i].as(), src, count * sizeof(float), cudaMemcpyHostToDevice, stream_));
    } else {
      std::vector<uint16_t>& h = codes_[i];
      bf16_codes(src, count, h);
      CUDA_CHECK(cudaMemcpyAsync(in_[i].as(), h.data(), count * sizeof(uint16_t), cudaMemcpyHostToDevice, stream_));
    }
  }
  y_.reserve(static_cast<size_t>(n) * seqs_ * model_.out_elems() * y_bytes_);
  if (s_.rounding == Rounding::Stochastic) stage_positions(pos_, pos_host_, step_, n, seqs_, stream_);
}

void Mamba2CudaDecoder::launch(int k) {
  const Mamba2Params& p = model_.mamba2;
  const size_t rows = static_cast<size_t>(k) * seqs_;  // rows of the staged inputs before step k
  auto input = [&](int i, size_t elems) { return static_cast<const void*>(in_[i].at(rows * elems * act_bytes_)); };
  const size_t HP = static_cast<size_t>(p.H) * p.P, GN = static_cast<size_t>(p.G) * p.N;
  Mamba2StepArgs a;
  a.dims = dims_;
  a.batch = seqs_;
  a.d_slot = slot_.as<const int32_t>();
  a.act_format = s_.act_format;
  a.d_x = input(0, HP);
  a.d_dt = input(1, static_cast<size_t>(p.H));
  a.d_B = input(2, GN);
  a.d_C = input(3, GN);
  a.d_z = p.has_z ? input(4, HP) : nullptr;
  a.d_A_log = A_log_.as<const float>();
  a.d_dt_bias = dt_bias_.as<const float>();
  a.d_D = D_.as<const float>();
  a.d_per_dim = p.d_per_dim;
  a.dt_min = static_cast<float>(p.dt_min);  // the CPU decoders clamp in float too
  a.dt_max = static_cast<float>(p.dt_max);
  a.d_y = y_.at(rows * HP * y_bytes_);
  a.y_format = s_.out_format;
  a.rounding = s_.rounding;
  a.seed = seed_;
  a.d_pos = s_.rounding == Rounding::Stochastic ? pos_.as<const int64_t>() + static_cast<size_t>(k) * seqs_ : nullptr;
  if (!s_.replays()) {
    Mamba2EagerLaunch l;
    l.step = a;
    l.state_format = s_.state_format;
    l.d_state = state_.as();
    mamba2_eager_step(l, stream_);
    return;
  }
  Mamba2ReplayLaunch l;
  l.step = a;
  l.interval = s_.interval;
  l.capacity = capacity_;
  l.ckpt_format = s_.state_format;
  l.d_ckpt = state_.as();
  l.dual = s_.dual();
  l.flush_arith = s_.flush_arith;
  l.read_format = s_.read_format;
  l.d_read = s_.dual() ? read_.as() : nullptr;
  l.d_read_scale = read_scale_.bytes() ? read_scale_.as<float>() : nullptr;
  l.d_ring_x = ring_x_.as<uint16_t>();
  l.d_ring_B = ring_B_.as<uint16_t>();
  l.d_ring_dl = ring_dl_.as<float>();
  l.d_fill = fill_d_.as<int32_t>();
  l.d_arrive = arrive_.as<int32_t>();
  // The grouped kernel wherever it runs the scheme: faster amortised than the per-head one at batch 64 and 256 in
  // every format on the H200 (fp32 K16 at batch 256: 331.7 against 404.8 us), and at batch 1 for an fp32 checkpoint
  // (10.4 against 16.4). At batch 1 it is not the fastest for bf16 and dual checkpoints (K16 amortised 10.4 / 9.9;
  // per-head 9.9 / 9.6, pipelined 9.6 / 9.4: benchmarks/runs/mamba2-bench.86dc5ce.h200.json); one rule is kept until
  // a per-batch choice has been run through the decoder tests on the GPU. The per-head kernel runs flush arithmetic,
  // stochastic rounding and the shapes the grouped one refuses.
  l.variant = mamba2_grouped_accepts(l) ? 1 : 0;
  mamba2_replay_step(l, stream_);
}

void Mamba2CudaDecoder::advance(const InputChunk& c, int s0, int n, double* y) {
  if (seqs_ == 0) throw InternalError(name() + ": advance() before reset()");
  if (n <= 0) return;
  stage(c, s0, n);
  for (int k = 0; k < n; ++k) launch(k);
  const size_t count = static_cast<size_t>(n) * seqs_ * model_.out_elems();
  y_host_.resize(count * y_bytes_);
  CUDA_CHECK(cudaMemcpyAsync(y_host_.data(), y_.as(), count * y_bytes_, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  dequantise_codes(s_.out_format, y_host_.data(), count, y);
  for (int k = 0; k < n; ++k) {
    ++step_;
    // The kernel flushes on the step that fills the ring to `interval` (as lib/cpu/replay.cpp does).
    if (s_.replays() && ++fill_ == s_.interval) {
      fill_ = 0;
      flushed_step_ = step_;
    }
  }
}

void Mamba2CudaDecoder::fetch(const DeviceBuffer& d, Format f, std::vector<double>& out) const {
  const size_t n = static_cast<size_t>(seqs_) * static_cast<size_t>(model_.state_elems());
  fetch_copy(d, read_scale_, f, n, static_cast<size_t>(model_.mamba2.N), stream_, raw_, raw_scales_, out);
}

std::vector<StateCopy> Mamba2CudaDecoder::state() const {
  if (seqs_ == 0) return {};
  fetch(state_, s_.state_format, host_state_);
  if (!s_.replays()) return {{"state", step_, host_state_.data(), host_state_.size(), {}}};
  std::vector<StateCopy> v = {{"checkpoint", flushed_step_, host_state_.data(), host_state_.size(), {}}};
  if (s_.dual()) {
    fetch(read_, s_.read_format, host_read_);
    v.push_back({"read", flushed_step_, host_read_.data(), host_read_.size(), {}});
  }
  return v;
}

}  // namespace

std::string mamba2_cuda_unsupported(const Scheme& s) {
  if (s.speculative()) return "a speculative scheme (common/spec_decoder.h runs those)";
  if (s.act_format != Format::BF16 && s.act_format != Format::FP32)
    return fmt::format("no CUDA kernel for {} activations yet (the Mamba-2 kernels read bf16 or fp32)",
                       format_name(s.act_format));
  if (s.out_format != Format::BF16 && s.out_format != Format::FP32)
    return fmt::format("no CUDA kernel stores {} outputs yet (the Mamba-2 kernels write y in fp32 or bf16)",
                       format_name(s.out_format));
  const Format sf = s.state_format;
  if (!s.replays()) {
    if (!kernel_state_format(sf))
      return fmt::format("no CUDA kernel for an eager {} state (the eager kernel stores fp32, bf16 or fp16)",
                         format_name(sf));
    return "";
  }
  if (s.dual()) {
    if (sf != Format::FP32)
      return fmt::format("no CUDA kernel for a dual update copy in {} yet (fp32 only)", format_name(sf));
    if (!plain16(s.read_format) && !is_scaled_format(s.read_format))
      return fmt::format("no CUDA kernel for a dual {} read copy yet (bf16, fp16, e4m3, e5m2 or int8)",
                         format_name(s.read_format));
  } else if (!kernel_state_format(sf)) {
    return fmt::format("no CUDA kernel for a shared {} checkpoint yet (fp32, bf16 or fp16)", format_name(sf));
  }
  if (s.buffer_format != Format::BF16)
    return fmt::format("no CUDA kernel for a {} buffer yet (the ring keeps x and B in bf16)",
                       format_name(s.buffer_format));
  if (s.dot_arith != Arith::FP32)
    return fmt::format("no CUDA kernel for dot_arith {} yet (fp32 only)", arith_name(s.dot_arith));
  if (s.interval > kMamba2MaxInterval)
    return fmt::format("the CUDA replay kernel keeps per-entry weights in shared memory, at most {} entries: interval "
                       "{} is more",
                       kMamba2MaxInterval, s.interval);
  return "";
}

std::unique_ptr<Decoder> make_mamba2_cuda_decoder(const Scheme& s, uint64_t seed) {
  if (s.backend != Backend::Cuda) throw InternalError("make_mamba2_cuda_decoder(" + s.name() + "): not a cuda scheme");
  const std::string why = mamba2_cuda_unsupported(s);
  if (!why.empty()) throw InternalError("make_mamba2_cuda_decoder(" + s.name() + "): " + why);
  return std::make_unique<Mamba2CudaDecoder>(s, seed);
}

}  // namespace rssm
