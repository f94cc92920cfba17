// The `cuda` decoder of GDN schemes (gdn_decoder.h): host C++ over the launchers of gdn_kernels.h, built as the
// Mamba-2 one (kernels/mamba2/mamba2_decoder.cpp). Per advance() over n steps: the n steps' raw q, k, v, a, b go to
// the device in one copy per input (as act-format codes; the runner has already rounded them to it, so the
// conversion is exact), n launches on the decoder's stream (one step each, in order: the state or the ring carries
// each step into the next), then one copy of the n steps' outputs back and a conversion to double. The host waits
// once per advance(), never per step. The device keeps the ring cursor per row; the host mirrors it (every row
// advances every step, so all rows share one fill) only to stamp state copies with the step of the last flush, as
// the CPU decoder does.
#include "gdn/gdn_decoder.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "errors.h"
#include "gdn/gdn_kernels.h"

namespace rssm {

namespace {

constexpr int kInputs = 5;  // q, k, v, a, b (model/model.h)

bool plain16(Format f) { return f == Format::BF16 || f == Format::FP16; }
bool kernel_state_format(Format f) { return f == Format::FP32 || plain16(f); }

// The kernels' row layout (16-byte vectors of a K-long state row, the row within one warp), checked with the layer
// known so a geometry they cannot tile is a clear config error instead of a failed launch.
void check_rows(const Model& model, Format f, const char* copy) {
  const int K = model.gdn.K, vec = f == Format::FP32 ? 4 : 8;
  const int lanes = K / vec;
  if (K % vec != 0 || lanes < 1 || lanes > 32 || (lanes & (lanes - 1)) != 0)
    throw ConfigError(fmt::format("scheme.backend = cuda: the GDN kernels need the key dim K to be {} times a power "
                                  "of two up to 32 for a {} {} (16-byte vectors, a state row within a warp), got "
                                  "K={} ({})",
                                  vec, format_name(f), copy, K, model.geometry_string()));
}

class GdnCudaDecoder final : public Decoder {
 public:
  GdnCudaDecoder(const Scheme& s, uint64_t seed) : s_(s), seed_(seed) {}
  ~GdnCudaDecoder() override {
    if (stream_) (void)cudaStreamDestroy(stream_);
  }
  GdnCudaDecoder(const GdnCudaDecoder&) = delete;
  GdnCudaDecoder& operator=(const GdnCudaDecoder&) = delete;

  std::string name() const override { return s_.decoder_name(); }
  void reset(const Model& model, int seqs) override;
  void advance(const InputChunk& chunk, int s0, int n, double* y) override;
  // Eager: "state" after the last step. Replay: "checkpoint" (the shared checkpoint, or the dual update copy) and,
  // dual, "read", both as of the last flush (the device copies change only there).
  std::vector<StateCopy> state() const override;

 private:
  void stage(const InputChunk& c, int s0, int n);
  void launch(int k);  // step k of the staged steps
  void fetch(const DeviceBuffer& d, Format f, std::vector<double>& out) const;

  Scheme s_;
  uint64_t seed_ = 0;  // stochastic rounding's key (numeric/stochastic.h), the run's seed as the CPU decoders take it
  Model model_;
  GdnDims dims_;
  int seqs_ = 0, capacity_ = 0, fill_ = 0;
  long long step_ = 0, flushed_step_ = 0;
  size_t act_bytes_ = 2, y_bytes_ = 4;
  cudaStream_t stream_ = nullptr;
  // Device: slots [seqs] (slot = row), layer parameters (fp32), the pool [seqs, HV, V, K] (eager state, or the
  // checkpoint / dual update copy) and the dual read copy (a block-scaled one with its scales [seqs, HV, V]), the ring (u [seqs, cap, HV, V] and k [seqs, cap, HK, K]
  // as bf16 codes, G [seqs, cap, HV] fp32) and its cursors (replay), the staged inputs in_[i] [n, seqs, elems_i] in
  // act_format and the outputs [n, seqs, HV·V] in out_format.
  DeviceBuffer slot_, A_log_, dt_bias_, state_, read_, read_scale_;
  DeviceBuffer ring_u_, ring_k_, ring_G_, fill_d_, arrive_;
  DeviceBuffer pos_;                // [n, seqs] each staged step's position (stochastic rounding's step key)
  std::vector<int64_t> pos_host_;   // its host copy, kept while the copy is in flight
  DeviceBuffer in_[kInputs], y_;
  // Host: bf16 codes of each input while its copy is in flight (one vector per input: none is reused before the
  // stream is waited for), the outputs' codes, and the dequantised state copies state() points into.
  std::vector<uint16_t> codes_[kInputs];
  std::vector<uint8_t> y_host_;
  mutable std::vector<uint8_t> raw_;
  mutable std::vector<float> raw_scales_;
  mutable std::vector<double> host_state_, host_read_;
};

void GdnCudaDecoder::reset(const Model& model, int seqs) {
  if (model.family != Family::GDN)  // the backend picks the decoder by family: this is a caller's mistake
    throw InternalError(fmt::format("{}: the GDN cuda decoder reset with a {} layer", s_.decoder_name(),
                                    family_name(model.family)));
  if (seqs < 1) throw InternalError("GdnCudaDecoder::reset: seqs < 1");
  const GdnParams& p = model.gdn;
  if (s_.dual()) {
    check_rows(model, s_.state_format, "update copy");
    check_rows(model, s_.read_format, "read copy");
  } else {
    check_rows(model, s_.state_format, s_.replays() ? "checkpoint" : "state");
  }
  if (s_.replays() && p.K % 8 != 0)
    throw ConfigError(fmt::format("scheme.backend = cuda: the GDN replay kernel needs K a multiple of 8 (16-byte "
                                  "loads of the buffered keys), got K={} ({})",
                                  p.K, model.geometry_string()));
  model_ = model;
  seqs_ = seqs;
  dims_ = GdnDims{p.HK, p.HV, p.K, p.V};
  step_ = flushed_step_ = 0;
  fill_ = 0;
  act_bytes_ = s_.act_format == Format::FP32 ? 4 : 2;
  y_bytes_ = s_.out_format == Format::FP32 ? 4 : 2;
  if (!stream_) CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));

  // Host copies of what goes up once; they must outlive the asynchronous copies, hence the wait at the end.
  std::vector<int32_t> slots(static_cast<size_t>(seqs));
  for (int r = 0; r < seqs; ++r) slots[r] = r;
  const std::vector<float> A_log(p.A_log.begin(), p.A_log.end()), dt_bias(p.dt_bias.begin(), p.dt_bias.end());
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
  const size_t elems = static_cast<size_t>(seqs) * static_cast<size_t>(p.state_elems());
  zeroed(state_, elems * static_cast<size_t>(format_bytes(s_.state_format)));
  if (s_.dual())
    zeroed(read_, elems * static_cast<size_t>(format_bytes(s_.read_format)));
  else
    read_.release();
  reset_row_scales(read_scale_, s_.dual() ? s_.read_format : Format::FP32, elems / static_cast<size_t>(p.K));
  if (s_.replays()) {
    // buffer_len only changes memory and traffic: the ring is sized by it as a serving engine's would be.
    capacity_ = std::max(s_.interval, s_.buffer_len);
    const size_t rows_cap = static_cast<size_t>(seqs) * static_cast<size_t>(capacity_);
    zeroed(ring_u_, rows_cap * static_cast<size_t>(p.HV) * p.V * sizeof(uint16_t));
    zeroed(ring_k_, rows_cap * static_cast<size_t>(p.HK) * p.K * sizeof(uint16_t));
    zeroed(ring_G_, rows_cap * static_cast<size_t>(p.HV) * sizeof(float));
    zeroed(fill_d_, static_cast<size_t>(seqs) * sizeof(int32_t));
    zeroed(arrive_, static_cast<size_t>(seqs) * sizeof(int32_t));  // the launcher's contract: zero before the first
  } else {
    for (DeviceBuffer* d : {&ring_u_, &ring_k_, &ring_G_, &fill_d_, &arrive_}) d->release();
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void GdnCudaDecoder::stage(const InputChunk& c, int s0, int n) {
  if (c.seqs != seqs_ || static_cast<int>(c.data.size()) < kInputs)
    throw InternalError(fmt::format("{}: a chunk of {} sequences and {} inputs, expected {} and {}", name(), c.seqs,
                                    c.data.size(), seqs_, kInputs));
  const auto specs = model_.inputs();
  for (int i = 0; i < kInputs; ++i) {
    if (c.elems[i] != specs[i].elems())
      throw InternalError(fmt::format("{}: input {} has {} values per token, expected {}", name(), specs[i].name,
                                      c.elems[i], specs[i].elems()));
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

void GdnCudaDecoder::launch(int k) {
  const GdnParams& p = model_.gdn;
  const size_t rows = static_cast<size_t>(k) * seqs_;  // rows of the staged inputs before step k
  auto input = [&](int i, size_t elems) { return static_cast<const void*>(in_[i].at(rows * elems * act_bytes_)); };
  const size_t QK = static_cast<size_t>(p.HK) * p.K, HVV = static_cast<size_t>(p.HV) * p.V;
  GdnStepArgs a;
  a.dims = dims_;
  a.batch = seqs_;
  a.d_slot = slot_.as<const int32_t>();
  a.act_format = s_.act_format;
  a.d_q = input(0, QK);
  a.d_k = input(1, QK);
  a.d_v = input(2, HVV);
  a.d_a = input(3, static_cast<size_t>(p.HV));
  a.d_b = input(4, static_cast<size_t>(p.HV));
  a.d_A_log = A_log_.as<const float>();
  a.d_dt_bias = dt_bias_.as<const float>();
  a.eps = static_cast<float>(p.eps);  // the CPU decoders normalise in float with the same epsilon
  a.d_o = y_.at(rows * HVV * y_bytes_);
  a.o_format = s_.out_format;
  a.rounding = s_.rounding;
  a.seed = seed_;
  a.d_pos = s_.rounding == Rounding::Stochastic ? pos_.as<const int64_t>() + static_cast<size_t>(k) * seqs_ : nullptr;
  if (!s_.replays()) {
    GdnEagerLaunch l;
    l.step = a;
    l.state_format = s_.state_format;
    l.d_state = state_.as();
    gdn_eager_step(l, stream_);
    return;
  }
  GdnReplayLaunch l;
  l.step = a;
  l.interval = s_.interval;
  l.capacity = capacity_;
  l.route = s_.route;
  l.ckpt_format = s_.state_format;
  l.d_ckpt = state_.as();
  l.dual = s_.dual();
  l.flush_arith = s_.flush_arith;
  l.read_format = s_.read_format;
  l.d_read = s_.dual() ? read_.as() : nullptr;
  l.d_read_scale = read_scale_.bytes() ? read_scale_.as<float>() : nullptr;
  l.d_ring_u = ring_u_.as<uint16_t>();
  l.d_ring_k = ring_k_.as<uint16_t>();
  l.d_ring_G = ring_G_.as<float>();
  l.d_fill = fill_d_.as<int32_t>();
  l.d_arrive = arrive_.as<int32_t>();
  gdn_replay_step(l, stream_);
}

void GdnCudaDecoder::advance(const InputChunk& c, int s0, int n, double* y) {
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

void GdnCudaDecoder::fetch(const DeviceBuffer& d, Format f, std::vector<double>& out) const {
  const size_t n = static_cast<size_t>(seqs_) * static_cast<size_t>(model_.state_elems());
  fetch_copy(d, read_scale_, f, n, static_cast<size_t>(model_.gdn.K), stream_, raw_, raw_scales_, out);
}

std::vector<StateCopy> GdnCudaDecoder::state() const {
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

std::string gdn_cuda_unsupported(const Scheme& s) {
  if (s.speculative()) return "a speculative scheme (common/spec_decoder.h runs those)";
  if (s.act_format != Format::BF16 && s.act_format != Format::FP32)
    return fmt::format("no CUDA kernel for {} activations yet (the GDN kernels read bf16 or fp32)",
                       format_name(s.act_format));
  if (s.out_format != Format::BF16 && s.out_format != Format::FP32)
    return fmt::format("no CUDA kernel stores {} outputs yet (the GDN kernels write o in fp32 or bf16)",
                       format_name(s.out_format));
  const Format sf = s.state_format;
  if (!s.replays()) {
    if (!kernel_state_format(sf))
      return fmt::format("no CUDA kernel for an eager GDN {} state (the eager kernel stores fp32, bf16 or fp16)",
                         format_name(sf));
    return "";
  }
  if (s.dual()) {
    if (sf != Format::FP32)
      return fmt::format("no CUDA kernel for a GDN dual update copy in {} yet (fp32 only)", format_name(sf));
    if (!plain16(s.read_format) && !is_scaled_format(s.read_format))
      return fmt::format("no CUDA kernel for a GDN dual {} read copy yet (bf16, fp16, e4m3, e5m2 or int8)",
                         format_name(s.read_format));
  } else if (!kernel_state_format(sf)) {
    return fmt::format("no CUDA kernel for a shared GDN {} checkpoint yet (fp32, bf16 or fp16)", format_name(sf));
  }
  if (s.buffer_format != Format::BF16)
    return fmt::format("no CUDA kernel for a GDN {} buffer yet (the ring keeps u and k in bf16)",
                       format_name(s.buffer_format));
  if (s.dot_arith != Arith::FP32)
    return fmt::format("no CUDA kernel for GDN dot_arith {} yet (fp32 only)", arith_name(s.dot_arith));
  if (s.flush_arith != Arith::FP32 && s.route != GdnRoute::Inner)
    return fmt::format("no CUDA kernel for GDN flush_arith {} on the reconstruct route (its flush is the fp32 rebuild "
                       "of S; route inner has it)", arith_name(s.flush_arith));
  if (s.interval > kGdnMaxInterval)
    return fmt::format("the CUDA GDN replay kernel keeps per-entry weights and the flush's keys in shared memory, at "
                       "most {} entries: interval {} is more",
                       kGdnMaxInterval, s.interval);
  return "";
}

std::unique_ptr<Decoder> make_gdn_cuda_decoder(const Scheme& s, uint64_t seed) {
  if (s.backend != Backend::Cuda) throw InternalError("make_gdn_cuda_decoder(" + s.name() + "): not a cuda scheme");
  const std::string why = gdn_cuda_unsupported(s);
  if (!why.empty()) throw InternalError("make_gdn_cuda_decoder(" + s.name() + "): " + why);
  return std::make_unique<GdnCudaDecoder>(s, seed);
}

}  // namespace rssm
