// The `cuda` decoder of GDN schemes (gdn_decoder.h): host C++ over the launchers of gdn_kernels.h. What it shares
// with the Mamba-2 decoder (staging, one wait per advance(), the host's mirror of the ring cursor, state copies) is
// common/cuda_step_decoder.h; here are the GDN checks, buffers and launch.
#include "gdn/gdn_decoder.h"

#include <fmt/format.h>

#include <vector>

#include "common/cuda_step_decoder.h"
#include "errors.h"
#include "gdn/gdn_kernels.h"

namespace rssm {

namespace {

constexpr int kInputs = 5;  // q, k, v, a, b (model/model.h)

class GdnCudaDecoder final : public CudaStepDecoder {
 public:
  using CudaStepDecoder::CudaStepDecoder;
  void reset(const Model& model, int seqs) override;

 private:
  int inputs() const override { return kInputs; }
  void launch(int k) override;
  static void check(const Model& m, Format f, const char* copy) {
    check_rows(m, f, copy, m.gdn.K, "the GDN kernels", "the key dim K");
  }

  GdnDims dims_;
  // Device: layer parameters (fp32) and the ring (u [seqs, cap, HV, V] and k [seqs, cap, HK, K] as bf16 codes, G
  // [seqs, cap, HV] fp32; replay). Host: the parameters' fp32 copies while their upload is in flight.
  DeviceBuffer A_log_, dt_bias_, ring_u_, ring_k_, ring_G_;
  std::vector<float> A_log_h_, dt_bias_h_;
};

void GdnCudaDecoder::reset(const Model& model, int seqs) {
  if (model.family != Family::GDN)  // the backend picks the decoder by family: this is a caller's mistake
    throw InternalError(fmt::format("{}: the GDN cuda decoder reset with a {} layer", s_.decoder_name(),
                                    family_name(model.family)));
  const GdnParams& p = model.gdn;
  if (s_.dual()) {
    check(model, s_.state_format, "update copy");
    check(model, s_.read_format, "read copy");
  } else {
    check(model, s_.state_format, s_.replays() ? "checkpoint" : "state");
  }
  if (s_.replays() && p.K % 8 != 0)
    throw ConfigError(fmt::format("scheme.backend = cuda: the GDN replay kernel needs K a multiple of 8 (16-byte "
                                  "loads of the buffered keys), got K={} ({})",
                                  p.K, model.geometry_string()));
  begin_reset(model, seqs, p.K);
  dims_ = GdnDims{p.HK, p.HV, p.K, p.V};
  A_log_h_.assign(p.A_log.begin(), p.A_log.end());
  dt_bias_h_.assign(p.dt_bias.begin(), p.dt_bias.end());
  upload(A_log_, A_log_h_.data(), A_log_h_.size() * sizeof(float));
  upload(dt_bias_, dt_bias_h_.data(), dt_bias_h_.size() * sizeof(float));
  if (s_.replays()) {
    const size_t rows_cap = static_cast<size_t>(seqs) * static_cast<size_t>(capacity_);
    zeroed(ring_u_, rows_cap * static_cast<size_t>(p.HV) * p.V * sizeof(uint16_t));
    zeroed(ring_k_, rows_cap * static_cast<size_t>(p.HK) * p.K * sizeof(uint16_t));
    zeroed(ring_G_, rows_cap * static_cast<size_t>(p.HV) * sizeof(float));
  } else {
    for (DeviceBuffer* d : {&ring_u_, &ring_k_, &ring_G_}) d->release();
  }
  end_reset();
}

void GdnCudaDecoder::launch(int k) {
  const GdnParams& p = model_.gdn;
  const size_t QK = static_cast<size_t>(p.HK) * p.K, HVV = static_cast<size_t>(p.HV) * p.V;
  GdnStepArgs a;
  step_fields(a, k);
  a.dims = dims_;
  a.d_q = input(k, 0, QK);
  a.d_k = input(k, 1, QK);
  a.d_v = input(k, 2, HVV);
  a.d_a = input(k, 3, static_cast<size_t>(p.HV));
  a.d_b = input(k, 4, static_cast<size_t>(p.HV));
  a.d_A_log = A_log_.as<const float>();
  a.d_dt_bias = dt_bias_.as<const float>();
  a.eps = static_cast<float>(p.eps);  // the CPU decoders normalise in float with the same epsilon
  a.d_o = output(k);
  a.o_format = s_.out_format;
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
  replay_fields(l);
  l.route = s_.route;
  l.d_ring_u = ring_u_.as<uint16_t>();
  l.d_ring_k = ring_k_.as<uint16_t>();
  l.d_ring_G = ring_G_.as<float>();
  gdn_replay_step(l, stream_);
}

}  // namespace

std::string gdn_cuda_unsupported(const Scheme& s) {
  const std::string why = step_cuda_unsupported(
      s, {"GDN", "o", "u and k", kGdnMaxInterval, "keeps per-entry weights and the flush's keys in shared memory"});
  if (!why.empty() || !s.replays()) return why;
  if (s.flush_arith != Arith::FP32 && s.route != GdnRoute::Inner)
    return fmt::format("no CUDA kernel for GDN flush_arith {} on the reconstruct route (its flush is the fp32 rebuild "
                       "of S; route inner has it)", arith_name(s.flush_arith));
  return "";
}

std::unique_ptr<Decoder> make_gdn_cuda_decoder(const Scheme& s, uint64_t seed) {
  if (s.backend != Backend::Cuda) throw InternalError("make_gdn_cuda_decoder(" + s.name() + "): not a cuda scheme");
  const std::string why = gdn_cuda_unsupported(s);
  if (!why.empty()) throw InternalError("make_gdn_cuda_decoder(" + s.name() + "): " + why);
  return std::make_unique<GdnCudaDecoder>(s, seed);
}

}  // namespace rssm
