// Synthetic traces: realistic SSM decode inputs and parameters generated from a seed, on demand, chunk by chunk.
// The recipe is METHOD.md's ("Realistic synthetic inputs"): Mamba-2 initialisation for the parameters, SiLU of a
// causal convolution for x, B, C (and GDN's v) with a few persistent outlier channels, rare dt spikes on a few
// heads, and GDN heads that almost never decay.
// Every value is a pure function of (seed, stream, step, sequence, channel) through Philox4x32-10
// (numeric/philox.h): read(step0, n) may be called in any order and with any chunking, on any number of OpenMP
// threads, and always returns the same numbers. Values depend on the platform's libm (log, cos, exp), so files
// are byte-identical per machine/toolchain, not necessarily across them.
//
// What each tensor is (shapes as read() returns them):
//   Mamba-2  x [step, seq, H, P], B, C [step, seq, G, N]: SiLU(causal conv of correlated Gaussians) x outlier factors
//            dt [step, seq, H]: N(0, dt_std^2), plus spike_size on spikes;  z [step, seq, H, P]: N(0, 1)
//            A_log [H] = log U(1, 16);  dt_bias [H] = softplus^-1(log-uniform in [1e-3, 1e-1]);  D [H] or [H, P] = 1
//   GDN      q, k [step, seq, HK, K]: correlated Gaussians (the decoders L2-normalise them)
//            v [step, seq, HV, V]: like x
//            a, b [step, seq, HV]: N(0, 1);  A_log [HV] as above except slow heads;  dt_bias [HV] as above
// Not here: writing to disk (trace_h5.h's write_trace does it for any TraceSource).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model.h"
#include "trace/trace.h"

namespace rssm {

struct SynthConfig {
  Model model;  // family, geometry and flags (has_z, d_per_dim, dt limits, eps); parameter vectors are ignored
  long long steps = 0;
  int seqs = 0;
  uint64_t seed = 1;

  // Persistent outlier channels: in every row of the inputs fed by the SiLU-conv path (each head of x and GDN v,
  // each group of B and C) this many channels are multiplied, at every step, by a factor drawn log-uniformly from
  // [outlier_scale_min, outlier_scale_max] (LLM activations show a few such channels, 10-100x the rest). Per row,
  // not per tensor, so that every head's dots and updates meet an outlier.
  int outlier_channels = 4;
  double outlier_scale_min = 10.0;
  double outlier_scale_max = 100.0;

  // Mamba-2 dt spikes: this share of heads (at least one when > 0) gets +spike_size added to the raw dt on about
  // spike_token_frac of its tokens, so Δ jumps and the state is nearly reset, the hard case for replay.
  double spike_head_frac = 0.05;
  double spike_token_frac = 0.005;
  double spike_size = 6.0;
  double dt_std = 0.5;  // raw dt ~ N(0, dt_std^2) outside spikes

  // This share of heads (GDN: value heads; at least one when > 0) gets A_log = log(slow_head_a), so the per-step
  // log-decay is slow_head_a·softplus(·) (Mamba-2: slow_head_a·Δ), below about 1e-4: the state then remembers the
  // whole trace. METHOD.md names such heads for GDN; trained Mamba-2 layers have them too.
  double slow_head_frac = 0.125;
  double slow_head_a = 1e-3;

  // Channel correlation of the Gaussian pre-activations: each channel is sqrt(c)·(shared rank-corr_rank factor)
  // + sqrt(1 - c)·(own noise), with unit variance; real activations are far from independent across channels.
  double channel_corr = 0.5;
  int corr_rank = 4;

  int conv_width = 4;  // causal depthwise convolution before SiLU (Mamba-2's d_conv); earlier steps are zero

  // Readout matrix W [readout_vocab, out_elems] ~ N(0, 1/out_elems) for the KL metric; 0 for none.
  int readout_vocab = 0;
  // Target logit standard deviation. The generator does not use it: the metrics code rescales the logits.
  double readout_logit_std = 4.0;

  // Throws ConfigError naming the field ("synth.<field>") when a value is out of range.
  void validate() const;
};

class SynthSource : public TraceSource {
 public:
  // Draws the parameters (and the readout) from the seed; inputs are generated in read().
  explicit SynthSource(const SynthConfig& config);

  const Model& model() const override { return model_; }
  long long steps() const override { return cfg_.steps; }
  int seqs() const override { return cfg_.seqs; }
  // Any [step0, step0 + nsteps) inside the trace, in any order. Parallel over (step, sequence) with OpenMP.
  void read(long long step0, int nsteps, InputChunk& out) override;
  const std::vector<float>& readout() const override { return readout_; }
  int readout_vocab() const override { return cfg_.readout_vocab; }
  std::string describe() const override;

  const SynthConfig& config() const { return cfg_; }
  // Which heads carry dt spikes (Mamba-2) / decay slowly (GDN), and the outlier channels (flat index into the
  // tensor) with their factors, per input index of Model::inputs(). Exposed for tests.
  const std::vector<int>& spike_heads() const { return spike_heads_; }
  const std::vector<int>& slow_heads() const { return slow_heads_; }
  const std::vector<std::pair<int, float>>& outliers(int input) const { return tensors_[input].outliers; }

 private:
  enum class Kind { SiluConv, CorrGauss, Dt, Gauss };
  struct Tensor {
    Kind kind = Kind::Gauss;
    int elems = 0;
    uint32_t stream = 0;                          // Philox stream of this tensor's per-token draws
    std::vector<float> conv;                      // [conv_width, elems]: tap j applies to step t - j
    std::vector<float> loadings;                  // [elems, corr_rank], already times sqrt(channel_corr)
    std::vector<float> scale;                     // [elems], 1 except outlier channels
    std::vector<std::pair<int, float>> outliers;  // (channel, factor)
    std::vector<uint8_t> spike;                   // Dt: [elems] 1 for spike heads
  };

  void draw_parameters();
  void setup_tensor(int input, const InputSpec& spec);
  // Unit-variance channel-correlated Gaussians of one token. out: [elems]
  void pre_activation(const Tensor& t, long long step, int seq, float* out) const;
  void fill_token(const Tensor& t, long long step, int seq, const float* pre_window, float* out) const;

  SynthConfig cfg_;
  Model model_;
  std::vector<Tensor> tensors_;  // one per Model::inputs() entry
  std::vector<int> spike_heads_, slow_heads_;
  std::vector<float> readout_;  // [vocab, out_elems]
  std::vector<float> pre_;      // scratch: [steps + conv_width - 1, seqs, elems] of the SiLU-conv tensor in work
};

}  // namespace rssm
