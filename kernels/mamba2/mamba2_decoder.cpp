// The `cuda` decoder of Mamba-2 schemes (mamba2_decoder.h): host C++ over the launchers of mamba2_kernels.h. What it
// shares with the GDN decoder (staging, one wait per advance(), the host's mirror of the ring cursor, state copies) is
// common/cuda_step_decoder.h; here are the Mamba-2 checks, buffers and launch.
#include "mamba2/mamba2_decoder.h"

#include <fmt/format.h>

#include <vector>

#include "common/cuda_step_decoder.h"
#include "errors.h"
#include "mamba2/mamba2_kernels.h"

namespace rssm {

namespace {

class Mamba2CudaDecoder final : public CudaStepDecoder {
 public:
  using CudaStepDecoder::CudaStepDecoder;
  void reset(const Model& model, int seqs) override;

 private:
  int inputs() const override { return model_.mamba2.has_z ? 5 : 4; }
  void launch(int k) override;
  static void check(const Model& m, Format f, const char* copy) {
    check_rows(m, f, copy, m.mamba2.N, "the Mamba-2 kernels", "the state dim N");
  }

  Mamba2Dims dims_;
  // Device: layer parameters (fp32) and the ring (x [seqs, cap, H, P] and B [seqs, cap, G, N] as bf16 codes,
  // (Δ, Λ) [seqs, cap, H] fp32; replay). Host: the parameters' fp32 copies while their upload is in flight.
  DeviceBuffer A_log_, dt_bias_, D_, ring_x_, ring_B_, ring_dl_;
  std::vector<float> A_log_h_, dt_bias_h_, D_h_;
};

void Mamba2CudaDecoder::reset(const Model& model, int seqs) {
  if (model.family != Family::Mamba2)  // the backend picks the decoder by family: this is a caller's mistake
    throw InternalError(fmt::format("{}: the Mamba-2 cuda decoder reset with a {} layer", s_.decoder_name(),
                                    family_name(model.family)));
  const Mamba2Params& p = model.mamba2;
  if (s_.dual()) {
    check(model, s_.state_format, "update copy");
    check(model, s_.read_format, "read copy");
  } else {
    check(model, s_.state_format, s_.replays() ? "checkpoint" : "state");
  }
  if (s_.replays() && p.N % 8 != 0)
    throw ConfigError(fmt::format("scheme.backend = cuda: the Mamba-2 replay kernel needs N a multiple of 8 (16-byte "
                                  "loads of the buffered B), got N={} ({})",
                                  p.N, model.geometry_string()));
  begin_reset(model, seqs, p.N);
  dims_ = Mamba2Dims{p.H, p.P, p.N, p.G};
  A_log_h_.assign(p.A_log.begin(), p.A_log.end());
  dt_bias_h_.assign(p.dt_bias.begin(), p.dt_bias.end());
  D_h_.assign(p.D.begin(), p.D.end());
  upload(A_log_, A_log_h_.data(), A_log_h_.size() * sizeof(float));
  upload(dt_bias_, dt_bias_h_.data(), dt_bias_h_.size() * sizeof(float));
  upload(D_, D_h_.data(), D_h_.size() * sizeof(float));
  if (s_.replays()) {
    const size_t rows_cap = static_cast<size_t>(seqs) * static_cast<size_t>(capacity_);
    zeroed(ring_x_, rows_cap * static_cast<size_t>(p.H) * p.P * sizeof(uint16_t));
    zeroed(ring_B_, rows_cap * static_cast<size_t>(p.G) * p.N * sizeof(uint16_t));
    zeroed(ring_dl_, rows_cap * static_cast<size_t>(p.H) * 2 * sizeof(float));
  } else {
    for (DeviceBuffer* d : {&ring_x_, &ring_B_, &ring_dl_}) d->release();
  }
  end_reset();
}

void Mamba2CudaDecoder::launch(int k) {
  const Mamba2Params& p = model_.mamba2;
  const size_t HP = static_cast<size_t>(p.H) * p.P, GN = static_cast<size_t>(p.G) * p.N;
  Mamba2StepArgs a;
  step_fields(a, k);
  a.dims = dims_;
  a.d_x = input(k, 0, HP);
  a.d_dt = input(k, 1, static_cast<size_t>(p.H));
  a.d_B = input(k, 2, GN);
  a.d_C = input(k, 3, GN);
  a.d_z = p.has_z ? input(k, 4, HP) : nullptr;
  a.d_A_log = A_log_.as<const float>();
  a.d_dt_bias = dt_bias_.as<const float>();
  a.d_D = D_.as<const float>();
  a.d_per_dim = p.d_per_dim;
  a.dt_min = static_cast<float>(p.dt_min);  // the CPU decoders clamp in float too
  a.dt_max = static_cast<float>(p.dt_max);
  a.d_y = output(k);
  a.y_format = s_.out_format;
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
  replay_fields(l);
  l.d_ring_x = ring_x_.as<uint16_t>();
  l.d_ring_B = ring_B_.as<uint16_t>();
  l.d_ring_dl = ring_dl_.as<float>();
  // The grouped kernel wherever it runs the scheme: faster amortised than the per-head one at batch 64 and 256 in
  // every format on the H200 (fp32 K16 at batch 256: 331.7 against 404.8 us), and at batch 1 for an fp32 checkpoint
  // (10.4 against 16.4). At batch 1 it is not the fastest for bf16 and dual checkpoints (K16 amortised 10.4 / 9.9;
  // per-head 9.9 / 9.6, pipelined 9.6 / 9.4: benchmarks/runs/mamba2-bench.86dc5ce.h200.json); one rule is kept until
  // a per-batch choice has been run through the decoder tests on the GPU. The per-head kernel runs flush arithmetic,
  // stochastic rounding and the shapes the grouped one refuses.
  l.variant = mamba2_grouped_accepts(l) ? 1 : 0;
  mamba2_replay_step(l, stream_);
}

}  // namespace

std::string mamba2_cuda_unsupported(const Scheme& s) {
  return step_cuda_unsupported(s, {"Mamba-2", "y", "x and B", kMamba2MaxInterval,
                                   "keeps per-entry weights in shared memory"});
}

std::unique_ptr<Decoder> make_mamba2_cuda_decoder(const Scheme& s, uint64_t seed) {
  if (s.backend != Backend::Cuda) throw InternalError("make_mamba2_cuda_decoder(" + s.name() + "): not a cuda scheme");
  const std::string why = mamba2_cuda_unsupported(s);
  if (!why.empty()) throw InternalError("make_mamba2_cuda_decoder(" + s.name() + "): " + why);
  return std::make_unique<Mamba2CudaDecoder>(s, seed);
}

}  // namespace rssm
