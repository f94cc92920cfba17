// Eager decoding at a chosen state format: what a production decode kernel does. Arithmetic is fp32 (as the
// published kernels do; fp64 when the state is fp64, which makes it the reference computed another way); the
// state is stored in `state_format` after every step (nearest-even or stochastic rounding), so a low-precision
// state's rounding error enters every later update. With state_format = fp32 this is the usual fp32-state kernel.
// The eager speculative baseline (scheme window > 0) is this decoder too: it keeps one state per draft position and
// picks the accepted one, so the state it continues from is, value for value, the state eager decoding stores after
// the same committed tokens, and its accepted outputs are eager decoding's. What it costs (T states written per
// verify) is the traffic model's and the CUDA kernel's business; the emulation only carries the name.
#pragma once

#include "numeric/format.h"
#include "decoder/decoder.h"
#include "decoder/scheme.h"

namespace rssm {

class EagerDecoder : public Decoder {
 public:
  // state_format: fp64, fp32, bf16 or fp16 (an fp8/int8 state needs scales, which eager kernels do not keep).
  // Stochastic rounding draws bits keyed by (seed, step, element) as checkpoint copies do (numeric/stochastic.h,
  // stream EagerState).
  // out_format: outputs are rounded to it (nearest-even) as a kernel storing y would; fp64 keeps them as computed.
  explicit EagerDecoder(Format state_format, Rounding rounding = Rounding::Nearest, uint64_t seed = 0,
                        Format out_format = Format::FP64);
  // The decoder of an eager scheme (its state format, rounding and output format).
  EagerDecoder(const Scheme& s, uint64_t seed) : EagerDecoder(s.state_format, s.rounding, seed, s.out_format) {
    window_ = s.window;
    acceptance_ = s.acceptance;
  }
  Scheme scheme() const;
  std::string name() const override;
  void reset(const Model& model, int seqs) override;
  void advance(const InputChunk& chunk, int s0, int n, double* y) override;
  std::vector<StateCopy> state() const override;

 private:
  template <class T>
  void step_mamba2(const InputChunk& c, int s, double* y);
  template <class T>
  void step_gdn(const InputChunk& c, int s, double* y);
  template <class T>
  T store(T v, size_t idx) const;

  Format fmt_;
  Rounding rnd_;
  Format out_fmt_;
  uint64_t seed_;
  int window_ = 0;          // speculative baseline: verify window (name only, see above)
  Acceptance acceptance_;
  Model model_;
  int seqs_ = 0;
  long long step_ = 0;
  std::vector<double> state_;   // [seqs, state_elems], values exactly representable in fmt_
  std::vector<double> qn_, kn_;  // GDN: normalised q (scaled by 1/sqrt(K)) and k, [seqs, HK, K]
};

}  // namespace rssm
