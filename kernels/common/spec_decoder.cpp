// The `cuda` decoder of speculative schemes (spec_decoder.h). The runner hands every decoder the same trace steps in
// lockstep, while each row of a speculative decoder walks verify windows of its own (decoder/spec.h): a row's window
// starts at its first uncommitted step and commits AcceptanceDraw's count of tokens. So advance() runs rounds: every
// row that still owes outputs below the span's end contributes its next window (T positions: the committed tokens'
// recorded inputs, then rejected drafts whose inputs are the true ones negated, so a rollback bug shows), the others
// sit the round out as padded rows (slot −1); one verify launch, one commit launch with each row's count, one copy of
// the outputs back. Positions past the span's end are kept and handed out by the next advance(); the runner reads
// window − 1 steps ahead (lookahead()) so a window's committed inputs are always in the chunk. The host draws the
// counts and uploads them; it never reads a cursor back (the device moves the ring and draft cursors itself).
// state() returns no copies: rows flush at steps of their own, inside the next verify, and the CPU emulation
// (compared step by step with this decoder's outputs) is where checkpoint error at each flush is measured.
#include "common/spec_decoder.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "common/spec_kernels.h"
#include "errors.h"
#include "gdn/gdn_kernels.h"
#include "mamba2/mamba2_kernels.h"

namespace rssm {

namespace {

class SpecCudaDecoder final : public Decoder {
 public:
  SpecCudaDecoder(const Scheme& s, Family family, uint64_t seed) : s_(s), family_(family), seed_(seed) {}
  ~SpecCudaDecoder() override {
    if (stream_) (void)cudaStreamDestroy(stream_);
  }
  SpecCudaDecoder(const SpecCudaDecoder&) = delete;
  SpecCudaDecoder& operator=(const SpecCudaDecoder&) = delete;

  std::string name() const override { return s_.decoder_name(); }
  int lookahead() const override { return s_.window - 1; }
  void reset(const Model& model, int seqs) override;
  void advance(const InputChunk& chunk, int s0, int n, double* y) override;
  std::vector<StateCopy> state() const override { return {}; }

 private:
  bool m2() const { return family_ == Family::Mamba2; }
  int inputs() const { return m2() ? (model_.mamba2.has_z ? 5 : 4) : 5; }
  void launch_round();
  // The launch fields both families' verify launches share (their structs differ only in the ring's names).
  template <class Launch, class Args>
  void replay_fields(Launch& l, const Args& a) const {
    l.step = a;
    l.window = T_;
    l.interval = s_.interval;
    l.hist = hist_;
    l.capacity = capacity_;
    l.ckpt_format = s_.state_format;
    l.d_ckpt = ckpt_.as();
    l.dual = s_.dual();
    l.read_format = s_.read_format;
    l.d_read = s_.dual() ? read_.as() : nullptr;
    l.d_fill = fill_.as<const int32_t>();
    l.d_base = base_.as<const int32_t>();
  }
  template <class Launch, class Args>
  void eager_fields(Launch& l, const Args& a) const {
    l.step = a;
    l.window = T_;
    l.state_format = s_.state_format;
    l.d_state = ckpt_.as();
    l.d_cur = cur_.as<const int32_t>();
  }

  Scheme s_;
  Family family_;
  uint64_t seed_;
  Model model_;
  AcceptanceDraw draw_;
  int seqs_ = 0, T_ = 1, hist_ = 0, capacity_ = 0, out_elems_ = 0;
  size_t act_bytes_ = 2, y_bytes_ = 4;
  cudaStream_t stream_ = nullptr;
  // Per row: the next step without an output, windows begun, outputs computed ahead of the span [step][out_elems].
  std::vector<long long> pos_, windows_;
  std::vector<long long> ahead_step_;
  std::vector<std::vector<double>> ahead_;
  // Per round, host side: slots (row or −1), committed counts, the window's inputs [seqs·T, elems_i] (act codes).
  std::vector<int32_t> slot_h_, acc_h_;
  std::vector<std::vector<float>> win_;
  std::vector<std::vector<uint16_t>> codes_;
  std::vector<uint8_t> y_host_;
  std::vector<double> y_round_;
  // Device: layer parameters, checkpoint (+ read copy) or draft states, ring and cursors, per-round buffers.
  DeviceBuffer A_log_, dt_bias_, D_, ckpt_, read_, ring_a_, ring_b_, ring_c_, fill_, base_, cur_;
  DeviceBuffer slot_, acc_, in_[5], y_;
};

void SpecCudaDecoder::reset(const Model& model, int seqs) {
  if (model.family != family_)
    throw InternalError(fmt::format("{}: reset with a {} layer", name(), family_name(model.family)));
  if (seqs < 1) throw InternalError("SpecCudaDecoder::reset: seqs < 1");
  const int row = m2() ? model.mamba2.N : model.gdn.K;
  for (Format f : {s_.state_format, s_.dual() ? s_.read_format : s_.state_format}) {
    const int vec = f == Format::FP32 ? 4 : 8, lanes = row / vec;
    if (row % 8 != 0 || lanes < 1 || lanes > 32 || (lanes & (lanes - 1)) != 0)
      throw ConfigError(fmt::format("scheme.backend = cuda: the speculative kernels need the state row ({}) to be {} "
                                    "times a power of two up to 32 and a multiple of 8 ({})",
                                    row, vec, model.geometry_string()));
  }
  model_ = model;
  seqs_ = seqs;
  T_ = s_.window;
  hist_ = s_.spec_hist();
  capacity_ = spec_ring_capacity(hist_, T_);
  out_elems_ = model.out_elems();
  act_bytes_ = s_.act_format == Format::FP32 ? 4 : 2;
  y_bytes_ = s_.out_format == Format::FP32 ? 4 : 2;
  draw_ = AcceptanceDraw(s_.acceptance, T_, seed_, model.spec_accepted);
  pos_.assign(seqs, 0);
  windows_.assign(seqs, 0);
  ahead_step_.assign(seqs, 0);
  ahead_.assign(seqs, {});
  if (!stream_) CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));

  auto upload = [&](DeviceBuffer& d, const std::vector<float>& v) {
    d.assign(v.size() * sizeof(float));
    CUDA_CHECK(cudaMemcpyAsync(d.as(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
  };
  auto zeroed = [&](DeviceBuffer& d, size_t bytes) {
    d.assign(bytes);
    if (bytes) CUDA_CHECK(cudaMemsetAsync(d.as(), 0, bytes, stream_));  // 0.0 in every format, cursors 0
  };
  std::vector<float> A_log, dt_bias, D;
  if (m2()) {
    const auto& p = model.mamba2;
    A_log.assign(p.A_log.begin(), p.A_log.end());
    dt_bias.assign(p.dt_bias.begin(), p.dt_bias.end());
    D.assign(p.D.begin(), p.D.end());
  } else {
    A_log.assign(model.gdn.A_log.begin(), model.gdn.A_log.end());
    dt_bias.assign(model.gdn.dt_bias.begin(), model.gdn.dt_bias.end());
  }
  upload(A_log_, A_log);
  upload(dt_bias_, dt_bias);
  if (m2()) upload(D_, D);
  const size_t S = static_cast<size_t>(seqs), elems = S * static_cast<size_t>(model.state_elems());
  if (!s_.replays()) {
    zeroed(ckpt_, elems * T_ * format_bytes(s_.state_format));  // T draft states per row, all zero: draft 0 is current
    zeroed(cur_, S * sizeof(int32_t));
  } else {
    zeroed(ckpt_, elems * format_bytes(s_.state_format));
    if (s_.dual()) zeroed(read_, elems * format_bytes(s_.read_format));
    const size_t C = S * capacity_;
    if (m2()) {
      const auto& p = model.mamba2;
      zeroed(ring_a_, C * p.H * p.P * sizeof(uint16_t));
      zeroed(ring_b_, C * p.G * p.N * sizeof(uint16_t));
      zeroed(ring_c_, C * p.H * 2 * sizeof(float));
    } else {
      const auto& p = model.gdn;
      zeroed(ring_a_, C * p.HV * p.V * sizeof(uint16_t));
      zeroed(ring_b_, C * p.HK * p.K * sizeof(uint16_t));
      zeroed(ring_c_, C * p.HV * sizeof(float));
    }
    zeroed(fill_, S * sizeof(int32_t));
    zeroed(base_, S * sizeof(int32_t));
  }
  slot_.assign(S * sizeof(int32_t));
  acc_.assign(S * sizeof(int32_t));
  slot_h_.assign(S, -1);
  acc_h_.assign(S, 1);
  const auto specs = model.inputs();
  win_.assign(inputs(), {});
  codes_.assign(inputs(), {});
  for (int i = 0; i < inputs(); ++i) {
    win_[i].assign(S * T_ * specs[i].elems(), 0.0f);
    in_[i].assign(win_[i].size() * act_bytes_);
  }
  zeroed(y_, S * T_ * out_elems_ * y_bytes_);  // rows sitting a round out leave theirs unwritten; it is copied back
  y_host_.resize(y_.bytes());
  y_round_.resize(S * T_ * out_elems_);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void SpecCudaDecoder::launch_round() {
  for (int i = 0; i < inputs(); ++i) {
    const size_t count = win_[i].size();
    if (s_.act_format == Format::FP32) {
      CUDA_CHECK(cudaMemcpyAsync(in_[i].as(), win_[i].data(), count * sizeof(float), cudaMemcpyHostToDevice, stream_));
    } else {
      bf16_codes(win_[i].data(), count, codes_[i]);
      CUDA_CHECK(cudaMemcpyAsync(in_[i].as(), codes_[i].data(), count * sizeof(uint16_t), cudaMemcpyHostToDevice,
                                 stream_));
    }
  }
  CUDA_CHECK(cudaMemcpyAsync(slot_.as(), slot_h_.data(), slot_h_.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                             stream_));
  CUDA_CHECK(cudaMemcpyAsync(acc_.as(), acc_h_.data(), acc_h_.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  SpecCommitLaunch c;
  c.batch = seqs_;
  c.d_slot = slot_.as<const int32_t>();
  c.d_accepted = acc_.as<const int32_t>();
  c.window = T_;
  c.interval = s_.interval;
  c.hist = hist_;
  c.capacity = capacity_;
  if (m2()) {
    const auto& p = model_.mamba2;
    Mamba2StepArgs a;
    a.dims = Mamba2Dims{p.H, p.P, p.N, p.G};
    a.batch = seqs_;
    a.d_slot = slot_.as<const int32_t>();
    a.act_format = s_.act_format;
    a.d_x = in_[0].as();
    a.d_dt = in_[1].as();
    a.d_B = in_[2].as();
    a.d_C = in_[3].as();
    a.d_z = p.has_z ? in_[4].as() : nullptr;
    a.d_A_log = A_log_.as<const float>();
    a.d_dt_bias = dt_bias_.as<const float>();
    a.d_D = D_.as<const float>();
    a.d_per_dim = p.d_per_dim;
    a.dt_min = static_cast<float>(p.dt_min);
    a.dt_max = static_cast<float>(p.dt_max);
    a.d_y = y_.as();
    a.y_format = s_.out_format;
    if (!s_.replays()) {
      Mamba2EagerVerifyLaunch l;
      eager_fields(l, a);
      mamba2_eager_verify(l, stream_);
    } else {
      Mamba2VerifyLaunch l;
      replay_fields(l, a);
      l.d_ring_x = ring_a_.as<uint16_t>();
      l.d_ring_B = ring_b_.as<uint16_t>();
      l.d_ring_dl = ring_c_.as<float>();
      mamba2_verify(l, stream_);
    }
  } else {
    const auto& p = model_.gdn;
    GdnStepArgs a;
    a.dims = GdnDims{p.HK, p.HV, p.K, p.V};
    a.batch = seqs_;
    a.d_slot = slot_.as<const int32_t>();
    a.act_format = s_.act_format;
    a.d_q = in_[0].as();
    a.d_k = in_[1].as();
    a.d_v = in_[2].as();
    a.d_a = in_[3].as();
    a.d_b = in_[4].as();
    a.d_A_log = A_log_.as<const float>();
    a.d_dt_bias = dt_bias_.as<const float>();
    a.eps = static_cast<float>(p.eps);
    a.d_o = y_.as();
    a.o_format = s_.out_format;
    if (!s_.replays()) {
      GdnEagerVerifyLaunch l;
      eager_fields(l, a);
      gdn_eager_verify(l, stream_);
    } else {
      GdnVerifyLaunch l;
      replay_fields(l, a);
      l.d_ring_u = ring_a_.as<uint16_t>();
      l.d_ring_k = ring_b_.as<uint16_t>();
      l.d_ring_G = ring_c_.as<float>();
      gdn_verify(l, stream_);
    }
  }
  if (s_.replays()) {
    c.d_fill = fill_.as<int32_t>();
    c.d_base = base_.as<int32_t>();
  } else {
    c.d_cur = cur_.as<int32_t>();
  }
  spec_commit(c, stream_);
  CUDA_CHECK(cudaMemcpyAsync(y_host_.data(), y_.as(), y_.bytes(), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  dequantise_codes(s_.out_format, y_host_.data(), y_round_.size(), y_round_.data());
}

void SpecCudaDecoder::advance(const InputChunk& c, int s0, int n, double* y) {
  if (seqs_ == 0) throw InternalError(name() + ": advance() before reset()");
  if (c.seqs != seqs_ || static_cast<int>(c.data.size()) < inputs())
    throw InternalError(fmt::format("{}: a chunk of {} sequences and {} inputs, expected {} and {}", name(), c.seqs,
                                    c.data.size(), seqs_, inputs()));
  if (n <= 0) return;
  const long long first = c.step0 + s0, end = first + n, avail = c.step0 + c.steps;
  const size_t out = static_cast<size_t>(out_elems_);
  // Outputs computed ahead by the last round of the previous call.
  for (int q = 0; q < seqs_; ++q) {
    auto& a = ahead_[q];
    size_t k = 0;
    for (; k * out < a.size() && ahead_step_[q] + static_cast<long long>(k) < end; ++k) {
      const long long st = ahead_step_[q] + static_cast<long long>(k);
      if (st < first) throw InternalError(name() + ": a step's output was computed ahead and never handed out");
      std::copy_n(a.begin() + k * out, out, y + (static_cast<size_t>(st - first) * seqs_ + q) * out);
    }
    a.erase(a.begin(), a.begin() + k * out);
    ahead_step_[q] += static_cast<long long>(k);
  }
  const auto specs = model_.inputs();
  while (true) {
    bool any = false;
    for (int q = 0; q < seqs_; ++q) {
      slot_h_[q] = -1;
      if (pos_[q] >= end) continue;
      any = true;
      slot_h_[q] = q;
      // The committed tokens must be in the chunk; only the trace's end can cut a window short.
      const long long want = draw_.tokens(q, windows_[q]++);
      const long long have = std::min<long long>(want, avail - pos_[q]);
      if (have < 1) throw InternalError(name() + ": a window starts past the chunk (lookahead too short)");
      acc_h_[q] = static_cast<int32_t>(have);
      for (int i = 0; i < inputs(); ++i) {
        const int e = specs[i].elems();
        for (int j = 0; j < T_; ++j) {
          float* dst = win_[i].data() + (static_cast<size_t>(q) * T_ + j) * e;
          const long long st = std::min<long long>(pos_[q] + j, avail - 1);
          const float* src = c.at(i, static_cast<int>(st - c.step0), q);
          if (j < have) {
            std::copy_n(src, e, dst);
          } else {
            for (int k = 0; k < e; ++k) dst[k] = -src[k];  // a rejected draft: not the true continuation
          }
        }
      }
    }
    if (!any) break;
    launch_round();
    for (int q = 0; q < seqs_; ++q) {
      if (slot_h_[q] < 0) continue;
      for (int j = 0; j < acc_h_[q]; ++j) {
        const long long st = pos_[q] + j;
        const double* src = y_round_.data() + (static_cast<size_t>(q) * T_ + j) * out;
        if (st < end) {
          std::copy_n(src, out, y + (static_cast<size_t>(st - first) * seqs_ + q) * out);
        } else {
          if (ahead_[q].empty()) ahead_step_[q] = st;
          ahead_[q].insert(ahead_[q].end(), src, src + out);
        }
      }
      pos_[q] += acc_h_[q];
    }
  }
}

}  // namespace

std::string spec_cuda_unsupported(const Scheme& s, Family family) {
  if (s.act_format != Format::BF16 && s.act_format != Format::FP32)
    return fmt::format("no CUDA verify kernel for {} activations (bf16 or fp32)", format_name(s.act_format));
  if (s.out_format != Format::BF16 && s.out_format != Format::FP32)
    return fmt::format("no CUDA verify kernel stores {} outputs (fp32 or bf16)", format_name(s.out_format));
  if (s.rounding == Rounding::Stochastic) return "no CUDA verify kernel for stochastic rounding yet";
  if (s.window > kMaxSpecWindow)
    return fmt::format("the CUDA verify kernels take windows of at most {} positions (got {})", kMaxSpecWindow, s.window);
  if (!s.replays()) {
    if (!kernel_state_format(s.state_format))
      return fmt::format("no CUDA eager verify kernel for a {} state (fp32, bf16 or fp16)", format_name(s.state_format));
    return "";
  }
  if (s.dual()) {
    if (s.state_format != Format::FP32)
      return fmt::format("no CUDA verify kernel for a dual update copy in {} (fp32 only)", format_name(s.state_format));
    if (!plain16(s.read_format))
      return fmt::format("no CUDA verify kernel for a dual {} read copy (bf16 or fp16)", format_name(s.read_format));
  } else if (!kernel_state_format(s.state_format)) {
    return fmt::format("no CUDA verify kernel for a shared {} checkpoint (fp32, bf16 or fp16)", format_name(s.state_format));
  }
  if (s.buffer_format != Format::BF16)
    return fmt::format("no CUDA verify kernel for a {} buffer (the ring is bf16)", format_name(s.buffer_format));
  if (s.dot_arith != Arith::FP32 || s.flush_arith != Arith::FP32)
    return "no CUDA verify kernel for dot or flush arithmetic other than fp32";
  if (family == Family::Mamba2) {
    if (s.spec_hist() > kMamba2MaxHist)
      return fmt::format("the Mamba-2 verify kernel keeps at most {} ring entries in shared memory (L_hist {})",
                         kMamba2MaxHist, s.spec_hist());
  } else {
    if (s.route != GdnRoute::Inner)
      return "the GDN verify kernel solves the window from inner products (route inner); no reconstruct-route verify";
    if (s.interval > kGdnMaxInterval)
      return fmt::format("the GDN verify kernel takes intervals up to {} (got {})", kGdnMaxInterval, s.interval);
  }
  return "";
}

std::unique_ptr<Decoder> make_spec_cuda_decoder(const Scheme& s, Family family, uint64_t seed) {
  const std::string why = spec_cuda_unsupported(s, family);
  if (!why.empty()) throw InternalError("make_spec_cuda_decoder(" + s.name() + "): " + why);
  return std::make_unique<SpecCudaDecoder>(s, family, seed);
}

}  // namespace rssm
