// Gated DeltaNet decode-step kernels for Hopper (sm_90): launch-parameter structs and launchers. CUDA-free header:
// host code built without nvcc may include it (it sees cudaStream_t only as an opaque pointer).
//   gdn_eager_step:  S <- α·S + u ⊗ k with u = β·(v − α·S·k), o = S·q; the state stored in its format every step.
//   gdn_replay_step: checkpoint + ring of (u, normalised k, G) since it (METHOD.md "ReplaySSM standard decoding",
//                    GDN), inner-product or reconstruct route, a flush folding the ring into the checkpoint when a
//                    row's ring reaches `interval`; shared or dual checkpoint.
// Both take the trace's raw inputs: q, k are L2-normalised inside (eps, q scaled by 1/sqrt(K)), the gate is
// g = −exp(A_log)·softplus(a + dt_bias), α = exp(g), β = sigmoid(b) (model/formulas.h, shared with the CPU).
// Value head h reads key head h / (HV / HK).
// Launchers check the launch struct (one clear std::invalid_argument naming the field), launch one kernel on the
// stream and return: no allocation, no synchronisation. Errors of the launch itself throw rssm::CudaError.
// Arithmetic is fp32 throughout; rounding to storage formats follows numeric/bits.h (round to nearest even).
//
// Serving layout (as the Mamba-2 kernels'). Row r of the step (r < batch) owns the state in the pool at slot[r];
// slot[r] < 0 marks a padded row: skipped, its outputs and every pool entry left untouched. Two rows of one launch
// must not share a slot. Per-row inputs are [batch, ...] with a row stride (elements) so a row may sit inside a
// larger activation buffer.
#pragma once

#include <cstdint>

#include "common/kernel_footprint.h"
#include "decoder/scheme.h"  // GdnRoute (an enum only: nothing of rssm_decoder is linked)
#include "numeric/arith.h"
#include "numeric/format.h"

struct CUstream_st;
typedef CUstream_st* cudaStream_t;

namespace rssm {

// Geometry of one layer: HK key heads of dim K, HV value heads of dim V (HV a multiple of HK).
struct GdnDims {
  int HK = 0, HV = 0, K = 0, V = 0;
};

// What every step reads and writes besides the state: the step's raw inputs, the layer parameters and the output.
struct GdnStepArgs {
  GdnDims dims;
  int batch = 0;                    // rows in this launch
  const int32_t* d_slot = nullptr;  // [batch]: pool slot of each row, < 0 = padded row
  // Inputs, all in act_format (BF16 or FP32): rows `*_stride` elements apart.
  Format act_format = Format::BF16;
  const void* d_q = nullptr;  // [batch, HK, K]  raw (normalised inside)
  const void* d_k = nullptr;  // [batch, HK, K]  raw (normalised inside)
  const void* d_v = nullptr;  // [batch, HV, V]
  const void* d_a = nullptr;  // [batch, HV]  raw gate input (softplus and dt_bias applied inside)
  const void* d_b = nullptr;  // [batch, HV]  raw write-strength input (sigmoid inside)
  long long qk_stride = 0, v_stride = 0, ab_stride = 0;  // 0 = contiguous (HK·K, HV·V, HV)
  // Layer parameters, fp32 on the device.
  const float* d_A_log = nullptr;    // [HV]
  const float* d_dt_bias = nullptr;  // [HV]
  float eps = 1e-6f;                 // L2-normalisation epsilon (GdnParams::eps)
  // Output o [batch, HV, V] in o_format (FP32 or BF16), rows o_stride elements apart (0 = HV·V).
  void* d_o = nullptr;
  Format o_format = Format::FP32;
  long long o_stride = 0;  // Rounding of what the step stores in a 16-bit format (eager state; replay checkpoint and dual read copy at a
  // flush): nearest even, or stochastic with the words of numeric/stochastic.h (docs/fp_contract.md) keyed by `seed`,
  // the copy's stream and a step taken from d_pos [batch], the tokens each row decoded before this one (the CPU
  // decoders' step counter): an eager state draws at step d_pos, a flush at d_pos + 1 (the tokens then folded into
  // the checkpoint). A value's element index is slot · state_elems + its index within the slot. Stochastic rounding
  // runs in gdn_eager_step and gdn_replay_step (not in the verify kernels); d_pos is read only then.
  Rounding rounding = Rounding::Nearest;
  uint64_t seed = 0;
  const int64_t* d_pos = nullptr;
};

// Eager: the state pool [pool, HV, V, K] in state_format (FP32, BF16 or FP16), updated in place.
struct GdnEagerLaunch {
  GdnStepArgs step;
  Format state_format = Format::FP32;
  void* d_state = nullptr;  // [pool, HV, V, K]
  // Tunables. heads_per_cta: value heads one CTA streams, a divisor of HV / HK (they share a key head, normalised
  // once), at most 8; 0 = the launcher's choice (gdn_eager_heads_per_cta). l2_ahead: chunks of the state prefetched
  // into L2 beyond the two chunks in registers, rolling; < 0 = the CTA's whole tile before the prologue. On the H200
  // (Qwen3.5-4B, batch 256) 1 is fastest: fp32 326 us with the whole tile, 303 with none, 282 at 1, 302 at 4
  // (benchmarks/experiments/gdn_l2_ahead.h200.json): whole tiles for every resident CTA overrun the 50 MB L2.
  int heads_per_cta = 0;
  int l2_ahead = 1;
  int v_tiles = 0;  // CTAs per (row, head group), 1..V; 0 = gdn_eager_v_tiles' choice
};

// Replay: a checkpoint per slot and a ring of the tokens appended since it.
// Shared checkpoint: d_ckpt in ckpt_format (FP32, BF16, FP16), read every step, read and written at a flush.
// Dual: d_ckpt is the fp32 update copy (read and written only at a flush) and d_read the read copy in read_format
// that non-flush steps read; the flush writes both from the same registers. read_format BF16 or FP16, or E4M3, E5M2,
// INT8: one byte a code, with one fp32 scale per (value head, row of K) in d_read_scale [pool, HV, V], codes and
// scales as numeric/scaled.h computes them from the stored update values (the flush folds with FFMA for them).
// Ring, per slot, capacity entries (>= interval); entries 0 .. fill-1 are the tokens since the checkpoint:
//   d_ring_u [pool, capacity, HV, V] bf16 bits: the corrected updates u_j = β_j·(v_j − α_j·S_{j−1}·k_j);
//   d_ring_k [pool, capacity, HK, K] bf16 bits: the normalised keys (once per key head);
//   d_ring_G [pool, capacity, HV] fp32: G_j, the running fp32 sum of the log-gates g over entries 0..j (what the
//   weights e^{G_t − G_j} need; stored so a step never re-adds the prefix). The buffer format is bf16, the CPU
//   emulation's default.
// Cursor: d_fill [pool] = entries in the ring before this step, advanced on the device (the host never reads it);
// d_arrive [pool] int32 must be zero before the first launch and is left zero after every launch (the protocol of
// the Mamba-2 replay kernel, see gdn_replay.cu). A row whose fill reaches `interval` with this token flushes in the
// same launch, and its fill returns to 0.
// Routes (METHOD.md): Inner reads the checkpoint once against both k_t and q_t and adds the ring as dots
// (S_{t−1}·k_t = e^{G_{t−1}}·(S_c·k_t) + Σ_j e^{G_{t−1}−G_j}·(k_j·k_t)·u_j, the same with q_t at G_t); Reconstruct
// rebuilds S_{t−1} row by row from the checkpoint and the ring, then reads it against k_t and q_t.
struct GdnReplayLaunch {
  GdnStepArgs step;
  int interval = 16;
  int capacity = 16;
  GdnRoute route = GdnRoute::Inner;
  Format ckpt_format = Format::FP32;
  void* d_ckpt = nullptr;  // [pool, HV, V, K]
  bool dual = false;
  Format read_format = Format::BF16;
  void* d_read = nullptr;        // [pool, HV, V, K] (dual only)
  float* d_read_scale = nullptr;  // [pool, HV, V] (dual with a block-scaled read_format only)
  uint16_t* d_ring_u = nullptr;  // [pool, capacity, HV, V]
  uint16_t* d_ring_k = nullptr;  // [pool, capacity, HK, K]
  float* d_ring_G = nullptr;     // [pool, capacity, HV]
  int32_t* d_fill = nullptr;     // [pool]
  int32_t* d_arrive = nullptr;   // [pool]
  // The flush's rank-`interval` update: fp32, or its operands (weight·u, k) staged in tf32, 3xtf32 (three products
  // per term) or bf16 as the CPU emulation's flush_arith (numeric/arith.h flush_operand_a / _b). Inner route only:
  // the reconstruct route's flush is its fp32 rebuild of S.
  Arith flush_arith = Arith::FP32;
  // Tunable: the streamed copy's chunks prefetched into L2: the first l2_ahead + 2 before the prologue, then chunk
  // c + l2_ahead + 1 as the stream reaches chunk c (not on the inner route's non-flush steps of an fp32 checkpoint,
  // shared or dual: there only the first ones, gdn_replay.cu); < 0 = the CTA's whole tile before the prologue. On
  // the H200 (Qwen3.5-4B, batch 256, K16 amortised) 0 is fastest: inner fp32 227 us with whole tiles, 205 at 0, 218
  // at 4; reconstruct 297 -> 259; dual 169 -> 159 (benchmarks/experiments/gdn_l2_ahead.h200.json).
  int l2_ahead = 0;
  int v_tiles = 0;  // CTAs per (row, value head), 1..V; 0 = gdn_replay_v_tiles' choice
  // Tunable: the inner route's fp32 flush folds the ring on tensor cores (bf16 mma, the weights split in three bf16
  // pieces: fp32 accuracy) where K = 128; false: the FFMA fold, run by the kernels compiled for any K (slower at every
  // step; the tests hold the two folds to each other). On the H200 (Qwen3.5-4B, batch 256, K16 flush, against the
  // FFMA kernels of 3c6da85 in one process): fp32 402 -> 368 us, bf16 335 -> 245 (benchmarks/experiments/README.md).
  bool mma_fold = true;
};

// Largest interval a replay launch accepts (per-entry weights and the flush's keys live in shared memory).
constexpr int kGdnMaxInterval = 64;

void gdn_eager_step(const GdnEagerLaunch& launch, cudaStream_t stream);
void gdn_replay_step(const GdnReplayLaunch& launch, cudaStream_t stream);

// CTAs per (row, value head) the launchers use for `batch` rows: the value dim is split into tiles when few rows
// would leave SMs idle, into no more CTAs than fit in one wave (gdn_eager.cu says how it was chosen). Exposed for the
// tests and the benchmark's labels.
int gdn_v_tiles(const GdnDims& dims, int batch, Format state_format);
// Whether `batch` rows are a small batch: whole-head CTAs fill at most half of a wave of 4 per SM, the first split
// gdn_v_tiles makes. Split value dims there take the small-batch replay prologue (every read that may be needed
// issued at once, ring entries sent to L2); split value dims at serving batch (a forced v_tiles) do not.
bool gdn_small_batch(const GdnDims& dims, int batch);
// Rows of one pass of a CTA over a tile (its threads over a row's K / vector lanes): gdn_v_tiles never makes a tile
// smaller than this (V when K is below one vector). The benchmark's tile sweep stops there too.
int gdn_rows_per_pass(const GdnDims& dims, Format state_format);
// CTAs per (row, value head) of gdn_eager_step when GdnEagerLaunch::v_tiles is 0: gdn_v_tiles, and two where that
// leaves an fp32 state whole (serving batch: a shorter last wave; gdn_eager.cu gives the H200's numbers).
int gdn_eager_v_tiles(const GdnDims& dims, int batch, Format state_format);
// CTAs per (row, value head) of gdn_replay_step (launch.v_tiles when set; its streamed copy decides the row layout).
int gdn_replay_v_tiles(const GdnReplayLaunch& launch);
// Value heads per CTA of gdn_eager_step when GdnEagerLaunch::heads_per_cta is 0: 16-bit states, whose CTAs are short
// (a 32 KiB head at 4 CTAs per SM), share the key head's prologue among the HV / HK heads while the launch keeps
// >= 2048 CTAs (bf16, batch 256: 160 -> 152 us on the H200); fp32 states and split value dims: 1.
int gdn_eager_heads_per_cta(const GdnDims& dims, int batch, Format state_format);

// ---- Speculative decoding (issue 12). Window, ring and draft conventions: common/spec_kernels.h. ----
// Both verify launches take `window` (T) positions per row: step.batch = rows, d_slot [batch], and every input and
// output row is a position: position s of row r is input row r·T + s (q, k, v, a, b, o and their strides per
// position row). Padded rows (slot < 0) read and write nothing. The commit (spec_commit) runs after the verify.

// Replay verify, inner-product route only. Per row: h = d_fill[slot]; if spec_flushes(h, interval, T, hist) the h
// committed entries are first folded into the checkpoint (the deferred flush: fp32 order of gdn_replay_step's flush;
// a dual checkpoint writes both copies) and the window's G restarts at 0. Then the T positions are solved from the
// checkpoint (read once for the whole window) plus the ring: u_s depends on u_j (j < s) through the strictly
// lower-triangular T×T system, solved by forward substitution per state row; o_s reads the ring up to its own
// position. Position s appends (u_s, bf16 k_s, G_s) at ring index (base + h + s) & (capacity − 1) (entry h + s,
// or entry s of the new checkpoint after a flush). No per-draft state is written; d_fill, d_base are only read.
// Ring as GdnReplayLaunch's, but circular: [pool, capacity, ...] with entry e at (d_base[slot] + e) & (capacity − 1);
// d_ring_G holds G relative to the current checkpoint. A dual window reads the read copy (after a flush: the
// update copy's values rounded to the read format, which is what the launch writes there).
struct GdnVerifyLaunch {
  GdnStepArgs step;  // batch = rows; inputs and outputs [batch·window, ...]
  int window = 4;    // T, 1 .. kMaxSpecWindow
  int interval = 16;
  int hist = 20;      // L_hist, >= interval + window
  int capacity = 32;  // ring entries per slot: a power of two >= hist
  Format ckpt_format = Format::FP32;
  void* d_ckpt = nullptr;  // [pool, HV, V, K]
  bool dual = false;
  Format read_format = Format::BF16;
  void* d_read = nullptr;          // [pool, HV, V, K] (dual only)
  uint16_t* d_ring_u = nullptr;    // [pool, capacity, HV, V] bf16 bits
  uint16_t* d_ring_k = nullptr;    // [pool, capacity, HK, K] bf16 bits
  float* d_ring_G = nullptr;       // [pool, capacity, HV]
  const int32_t* d_fill = nullptr;  // [pool] committed entries
  const int32_t* d_base = nullptr;  // [pool] ring index of entry 0
  int l2_ahead = 0;  // as GdnReplayLaunch::l2_ahead (the streamed copy's chunks prefetched into L2)
  // Tunable, as GdnReplayLaunch::mma_fold: a flushing window folds its committed entries on tensor cores where
  // K = 128; false: the FFMA fold of the kernels compiled for any K (the tests hold the two folds to each other).
  bool mma_fold = true;
};

// Eager speculative baseline: draft states [pool, window, HV, V, K] in state_format (FP32, BF16 or FP16). Per row the
// state is draft d_cur[slot]; position s computes o_s and writes the state after it into draft s (draft d_cur is
// read before it is overwritten: each state row is read, then written, by the same threads).
struct GdnEagerVerifyLaunch {
  GdnStepArgs step;  // batch = rows; inputs and outputs [batch·window, ...]
  int window = 4;
  Format state_format = Format::FP32;
  void* d_state = nullptr;         // [pool, window, HV, V, K]
  const int32_t* d_cur = nullptr;  // [pool] draft holding the current state, 0 .. window − 1
  int l2_ahead = 0;  // chunks of draft d_cur prefetched into L2: the first l2_ahead + 2 before the prologue, then
                     // rolling; < 0 = the CTA's whole tile before the prologue
};

void gdn_verify(const GdnVerifyLaunch& launch, cudaStream_t stream);
// The kernel gdn_verify would launch for `launch` (same checks, same choice): its shared memory, registers and
// resident CTAs per SM on the current device. Launches nothing.
KernelFootprint gdn_verify_footprint(const GdnVerifyLaunch& launch);
void gdn_eager_verify(const GdnEagerVerifyLaunch& launch, cudaStream_t stream);

}  // namespace rssm
