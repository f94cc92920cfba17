// ReplaySSM decoders on the CPU: a checkpoint plus a buffer of the inputs since it (METHOD.md, "ReplaySSM standard
// decoding"), for Mamba-2 (output-only route) and GDN (reconstruct and inner-product routes), with a single shared
// checkpoint or a dual-precision pair (an update copy that flushes read and write, and a read copy refreshed at
// each flush that every step reads for its output).
// Every precision is a run-time choice: checkpoint formats, buffer format, arithmetic of the dots and of the flush
// GEMM (numeric/arith.h), rounding mode. Arithmetic runs in double when both dot and flush arithmetic are fp64
// (exact replay), otherwise in fp32 as a kernel does.
// Emulation choices a kernel must share to match bit for bit:
//  - the current token enters the output through its buffered (buffer-format) copy, like every earlier entry;
//  - Λ / G are running fp32 sums of A·Δ / g over the buffer; weights are exp(Λ_t − Λ_j);
//  - a flush happens right after the step that fills the buffer to `interval` entries, so the checkpoint after a
//    flush at step t holds t + 1 folded tokens; the next step reads it through an empty buffer.
// Speculative replay (window > 0, METHOD.md "Speculative decoding"): each row walks its own verify windows
// (decoder/spec.h). A window's position s reads the checkpoint and the ring up to its own entry (the causal mask),
// which is exactly a replay step at fill h + s, so the emulation computes the committed positions one trace step at
// a time with per-row fills; no state is written for any draft. At a window's end the rejected drafts' entries are
// written past the fill as NaN (any read of them would show in the outputs: rollback is only the fill not moving
// over them), and the row flushes its committed entries when spec_flushes(h, interval, window, L_hist) says so
// (h >= interval, or early when h + 2·window > L_hist). A verify kernel computes the same window in one launch from
// the same checkpoint and entries (and defers that flush into the next launch: the same values).
#pragma once

#include "numeric/arith.h"
#include "numeric/format.h"
#include "cpu/checkpoint.h"
#include "decoder/decoder.h"
#include "decoder/scheme.h"
#include "decoder/spec.h"

namespace rssm {

// Per-entry weights live on the stack of each (sequence, head) task: the CPU backend's largest interval. A CPU
// property, not a config bound: the factory's CPU combination check (cpu_unavailable_reason) skips larger ones.
constexpr int kMaxInterval = 1024;

struct ReplayOptions {
  int interval = 8;        // flush every `interval` steps (K in METHOD.md)
  int buffer_len = 0;      // ring capacity (0: equal to interval); >= interval. Changes memory and traffic only.
  Format update_format = Format::FP32;  // the checkpoint flushes read and write
  bool dual = false;                    // keep a separate read copy
  Format read_format = Format::BF16;    // dual only: the copy every step reads for its output
  Format buffer_format = Format::BF16;  // buffered x, B (Mamba-2) / u, k (GDN); Δ and g stay in the arithmetic
  Arith dot_arith = Arith::FP32;        // S·C, B·C (Mamba-2); S·k, S·q, k·k, k·q (GDN)
  Arith flush_arith = Arith::FP32;      // the rank-K update of the flush
  Rounding rounding = Rounding::Nearest;  // checkpoint stores
  uint64_t seed = 0;                      // stochastic rounding
  GdnRoute route = GdnRoute::Inner;
  int window = 0;          // speculative verify windows (0: standard decoding)
  Acceptance acceptance;   // speculative: tokens committed per window
  // Outputs are rounded to it (nearest-even) as a kernel storing y would; fp64 (the default of a decoder built
  // directly, in tests) keeps them as computed. Runs take it from scheme.out_format (default fp32).
  Format out_format = Format::FP64;
};

// The options of a replay / dual scheme (the scheme's decoder must not be eager), and back.
ReplayOptions replay_options(const Scheme& s, uint64_t seed);
Scheme replay_scheme(const ReplayOptions& o);

class ReplayDecoder : public Decoder {
 public:
  explicit ReplayDecoder(const ReplayOptions& opt);
  std::string name() const override;
  void reset(const Model& model, int seqs) override;
  void advance(const InputChunk& chunk, int s0, int n, double* y) override;
  // "checkpoint" (the update copy) and, for dual decoders, "read"; both at the last flush (speculative: each row at
  // its own last flush, StateCopy::row_step).
  std::vector<StateCopy> state() const override;

  const ReplayOptions& options() const { return opt_; }
  int buffered(int q = 0) const { return fill_[q]; }  // entries in row q's buffer now
  int flushes(int q = 0) const { return flushes_[q]; }  // flushes of row q so far
  // Speculative: L_hist, the ring's logical size the early-flush rule reads.
  int hist() const { return cap_; }
  // Test hook: the buffered x (Mamba-2) or u (GDN) of entry j of sequence q, [H, P] or [HV, V].
  double* buffer_values(int q, int j);
  // Test hook: the update copy.
  CheckpointCopy& checkpoint() { return update_; }

 private:
  template <class T>
  void step_mamba2(const InputChunk& c, int s, double* y);
  template <class T>
  void flush_mamba2();
  template <class T>
  void step_gdn(const InputChunk& c, int s, double* y);
  template <class T>
  void flush_gdn();
  void flush_marked();  // flushes the rows with flush_row_ set (every row at once in standard decoding)
  void poison_rejected(int q, int entries);  // speculative: NaN entries past row q's fill

  ReplayOptions opt_;
  Model model_;
  int seqs_ = 0, cap_ = 0;
  long long step_ = 0;
  std::vector<int> fill_;                  // [seqs] entries in each row's buffer
  std::vector<long long> flushed_step_;    // [seqs] tokens folded into each row's checkpoint
  std::vector<int> flushes_;               // [seqs]
  std::vector<char> flush_row_;            // [seqs] rows the next flush folds
  std::vector<WindowCursor> win_;          // [seqs] speculative window schedule
  AcceptanceDraw draw_;
  bool exact_ = false;  // arithmetic in double
  CheckpointCopy update_, read_;
  // Buffers, per sequence, entries 0..cap_-1 (the ring's live part; a flush resets the write position).
  // Mamba-2: bx [seqs, cap, H, P], bB [seqs, cap, G, N], delta / lam [seqs, cap, H]
  // GDN:     bx = u [seqs, cap, HV, V], bB = k [seqs, cap, HK, K], delta = g / lam = G [seqs, cap, HV]
  std::vector<double> bx_, bB_;  // values exactly representable in the buffer format
  std::vector<double> delta_, lam_;
  std::vector<double> dots_;    // Mamba-2: B_j·C_t [seqs, G, cap]; GDN: k_j·k_t and k_j·q_t [seqs, HK, 2, cap]
  std::vector<double> qn_, kn_;  // GDN: normalised q (scaled) and k of the current step [seqs, HK, K]
};

}  // namespace rssm
