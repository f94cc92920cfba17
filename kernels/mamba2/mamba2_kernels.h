// Mamba-2 decode-step kernels for Hopper (sm_90): launch-parameter structs and launchers. CUDA-free header: host
// code built without nvcc may include it (it sees cudaStream_t only as an opaque pointer).
//   mamba2_eager_step:  S <- a·S + Δ·x ⊗ B, y = S·C + D·x (·z·sigmoid(z)); state stored in its format every step.
//   mamba2_replay_step: checkpoint + ring of the tokens since it (METHOD.md, output-only route), a flush folding the
//                       ring into the checkpoint when a row's ring reaches `interval`; shared or dual checkpoint.
// Launchers check the launch struct (one clear std::invalid_argument naming the field), launch one kernel on the
// stream and return: no allocation, no synchronisation. Errors of the launch itself throw rssm::CudaError.
// Arithmetic is fp32 throughout, except the replay flush's operands under flush_arith (numeric/arith.h); rounding to
// storage formats follows numeric/bits.h (round to nearest even).
//
// Serving layout. Row r of the step (r < batch) owns the state in the pool at slot[r]; slot[r] < 0 marks a padded
// row: skipped, its outputs and every pool entry left untouched. Two rows of one launch must not share a slot.
// Per-row inputs are [batch, ...] with a row stride (elements) so a row may sit inside a larger activation buffer.
#pragma once

#include <cstdint>
#include <limits>

#include "common/kernel_footprint.h"
#include "numeric/arith.h"
#include "numeric/format.h"

struct CUstream_st;
typedef CUstream_st* cudaStream_t;

namespace rssm {

// Geometry of one layer: heads H, head dim P, state dim N, groups G (B, C shared by H/G consecutive heads).
struct Mamba2Dims {
  int H = 0, P = 0, N = 0, G = 1;
};

// What every step reads and writes besides the state: the step's inputs, the layer parameters and the output.
struct Mamba2StepArgs {
  Mamba2Dims dims;
  int batch = 0;              // rows in this launch
  const int32_t* d_slot = nullptr;  // [batch]: pool slot of each row, < 0 = padded row
  // Inputs, all in act_format (BF16 or FP32): rows `*_stride` elements apart.
  Format act_format = Format::BF16;
  const void* d_x = nullptr;   // [batch, H, P]
  const void* d_dt = nullptr;  // [batch, H]  raw dt (softplus and dt_bias applied inside)
  const void* d_B = nullptr;   // [batch, G, N]
  const void* d_C = nullptr;   // [batch, G, N]
  const void* d_z = nullptr;   // [batch, H, P] or nullptr: no output gate
  long long x_stride = 0, dt_stride = 0, bc_stride = 0, z_stride = 0;  // 0 = contiguous (H·P, H, G·N, H·P)
  // Layer parameters, fp32 on the device.
  const float* d_A_log = nullptr;    // [H]: A = -exp(A_log)
  const float* d_dt_bias = nullptr;  // [H]
  const float* d_D = nullptr;        // [H], or [H, P] when d_per_dim
  bool d_per_dim = false;
  float dt_min = 0.0f;       // Δ clamped to [dt_min, dt_max] after softplus
  float dt_max = std::numeric_limits<float>::infinity();
  // Output y [batch, H, P] in y_format (FP32 or BF16), rows y_stride elements apart (0 = H·P).
  void* d_y = nullptr;
  Format y_format = Format::FP32;
  long long y_stride = 0;  // Rounding of what the step stores in a 16-bit format (eager state; replay checkpoint and dual read copy at a
  // flush): nearest even, or stochastic with the words of numeric/stochastic.h (docs/fp_contract.md) keyed by `seed`,
  // the copy's stream and a step taken from d_pos [batch], the tokens each row decoded before this one (the CPU
  // decoders' step counter): an eager state draws at step d_pos, a flush at d_pos + 1 (the tokens then folded into
  // the checkpoint). A value's element index is slot · state_elems + its index within the slot. Stochastic rounding
  // runs in variant 0 of mamba2_eager_step and mamba2_replay_step (not the grouped, pipelined or verify kernels);
  // d_pos is read only then.
  Rounding rounding = Rounding::Nearest;
  uint64_t seed = 0;
  const int64_t* d_pos = nullptr;
};

// Eager: the state pool [pool, H, P, N] in state_format (FP32, BF16 or FP16), updated in place.
struct Mamba2EagerLaunch {
  Mamba2StepArgs step;
  Format state_format = Format::FP32;
  void* d_state = nullptr;  // [pool, H, P, N]
  // Which kernel runs the step (same arithmetic): 0 = one CTA per (row, head, P-tile); 1 = pipelined: persistent
  // CTAs whose producer warp bulk-copies each (row, head) tile into shared-memory stages (mamba2_pipelined.cu).
  int variant = 0;
  int pipe_stages = 0;  // variant 1: shared-memory stages per CTA, 0 = as many as fit
  int pipe_ctas = 0;    // variant 1: CTAs per SM, 0 = 2
  int p_tiles = 0;      // variant 0: CTAs per (row, head), 1..P without an empty tile; 0 = mamba2_eager_p_tiles' choice
};

// Replay: a checkpoint per slot and a ring of the tokens appended since it.
// Shared checkpoint: d_ckpt in ckpt_format (FP32, BF16, FP16), read every step, read and written at a flush.
// Dual: d_ckpt is the fp32 update copy (read and written only at a flush) and d_read the read copy in read_format
// that non-flush steps read; the flush writes both from the same registers. read_format BF16 or FP16 (every
// variant), or E4M3, E5M2, INT8 (variant 0): one byte a code, with one fp32 scale per (head, row of N) in
// d_read_scale [pool, H, P], codes and scales as numeric/scaled.h computes them from the stored update values.
// Ring, per slot, capacity entries (>= interval); entries 0 .. fill-1 are the tokens since the checkpoint:
//   d_ring_x [pool, capacity, H, P] bf16 bits, d_ring_B [pool, capacity, G, N] bf16 bits (the buffer format is
//   bf16: the CPU emulation's default), d_ring_dl [pool, capacity, H] float2 = (Δ_j, Λ_j) with Λ_j the running fp32
//   sum of A·Δ over entries 0..j (stored so a step never re-adds the prefix).
// Cursor: d_fill [pool] = entries in the ring before this step, advanced on the device (the host never reads it);
// d_arrive [pool] int32 must be zero before the first launch and is left zero after every launch (see the .cu).
// A row whose fill reaches `interval` with this token flushes in the same launch, and its fill returns to 0.
struct Mamba2ReplayLaunch {
  Mamba2StepArgs step;
  int interval = 16;
  int capacity = 16;
  Format ckpt_format = Format::FP32;
  void* d_ckpt = nullptr;        // [pool, H, P, N]
  bool dual = false;
  Format read_format = Format::BF16;
  void* d_read = nullptr;        // [pool, H, P, N] (dual only)
  float* d_read_scale = nullptr;  // [pool, H, P] (dual with a block-scaled read_format only)
  uint16_t* d_ring_x = nullptr;  // [pool, capacity, H, P]
  uint16_t* d_ring_B = nullptr;  // [pool, capacity, G, N]
  float* d_ring_dl = nullptr;    // [pool, capacity, H, 2]
  int32_t* d_fill = nullptr;     // [pool]
  int32_t* d_arrive = nullptr;   // [pool]
  // The flush's rank-`interval` update: fp32, or its operands (x·weight, B) staged in tf32, 3xtf32 (three products
  // per term) or bf16 as the CPU emulation's flush_arith (numeric/arith.h flush_operand_a / _b). Variant 0 only.
  Arith flush_arith = Arith::FP32;
  // Which kernel runs the step (same semantics, same ring and cursor): 0 = one CTA per (row, head, P-tile);
  // 1 = grouped: one CTA per (row, group, chunk of heads_per_cta heads of the group), the slot / cursor / ring
  // prologue done once per CTA and the heads' tiles streamed back to back (mamba2_replay_grouped.cu);
  // 2 = pipelined: persistent CTAs whose producer warp resolves slot and cursor for 32 items at once and bulk-copies
  // each (row, head)'s tile and ring entries into shared-memory stages (mamba2_pipelined.cu).
  int variant = 0;
  int heads_per_cta = 0;  // variant 1 only: 0 = chosen from the batch; else a divisor of H/G, at most 16
  int p_tiles = 0;        // variant 1 only: 0 = chosen from the batch; else CTAs per head (needs heads_per_cta 1)
  int pipe_stages = 0;    // variant 2 only: shared-memory stages per CTA, 0 = as many as fit
  int pipe_ctas = 0;      // variant 2 only: CTAs per SM, 0 = 2
  // Variant 1 at serving batches (heads_per_cta > 1, N = 128): how a flushing row's update copy goes into L2. -1: the
  // next head's whole tile as the fold enters a head; >= 0: a rolling window, chunk c + flush_l2_ahead + 1 of the
  // CTA's run of heads as the fold reaches chunk c (not the tensor-core fold of 16-bit checkpoints, which keeps whole
  // heads). On the H200 (Super-120B, batch 256, K16; benchmarks/experiments/README.md, "the flush's L2 window"): whole
  // heads made the fp32 flush read 1.68 GB of DRAM for a 1.07 GB checkpoint (a head ahead for every resident CTA,
  // beside the stream's writes, overruns the 50 MB L2); a window of 1 took it 808.1 -> 695.2 us, dual 963 -> 811. The
  // non-flush stream keeps whole heads: its reads match its tiles, and windows there were level or slower.
  int flush_l2_ahead = 1;
};

// Largest interval a replay launch accepts (per-entry weights live in shared memory).
constexpr int kMamba2MaxInterval = 64;

// Speculative verify (common/spec_kernels.h: window layout, ring, flush rule, commit): the step's input and output
// rows are batch·window (row r, position s at r·window + s). Checkpoint and ring as Mamba2ReplayLaunch's, except
// that the ring is circular (capacity a power of two >= hist, entry i at (base + i) & (capacity − 1)), the cursor
// is d_fill / d_base (read only: spec_commit moves them), and no per-row arrival counter is needed.
// Per row: when spec_flushes(fill, interval, window, hist), the committed entries are folded into the checkpoint
// first (dual: both copies written, the window then reads the read copy's values, as the CPU emulation does); then
// every position s gets y_s = exp(Λ_s)·(S_c·C_s) + Σ_{e <= h'+s} Δ_e·exp(Λ_s − Λ_e)·(B_e·C_s)·x_e + D·x_s (causal
// over the window), and its entry (x_s, B_s in bf16, (Δ_s, Λ_s)) is appended at entry h' + s. No state is written
// for any draft.
struct Mamba2VerifyLaunch {
  Mamba2StepArgs step;  // batch = rows; inputs and y hold batch·window rows
  int window = 4;
  int interval = 16;
  int hist = 20;      // L_hist of the flush rule (>= interval + window)
  int capacity = 32;  // ring entries per slot: a power of two >= spec_ring_capacity(hist, window)
  Format ckpt_format = Format::FP32;
  void* d_ckpt = nullptr;  // [pool, H, P, N]
  bool dual = false;
  Format read_format = Format::BF16;
  void* d_read = nullptr;        // [pool, H, P, N] (dual only)
  uint16_t* d_ring_x = nullptr;  // [pool, capacity, H, P]
  uint16_t* d_ring_B = nullptr;  // [pool, capacity, G, N]
  float* d_ring_dl = nullptr;    // [pool, capacity, H, 2]
  const int32_t* d_fill = nullptr;  // [pool] committed entries
  const int32_t* d_base = nullptr;  // [pool] ring index of entry 0
  // Heads per CTA: 0 picks (the grouped kernel at serving batches, one head per CTA below), 1 forces the per-head
  // kernel, > 1 forces the grouped kernel with that many heads of a group per CTA (a divisor of H/G, at most 16;
  // window <= 8, P >= 8). Both kernels compute every value by the same operations: the outputs are bit-identical.
  int heads_per_cta = 0;
  // The grouped kernel's flushing rows at N = 128: the update copy's next chunks into L2 as Mamba2ReplayLaunch::
  // flush_l2_ahead (-1: the next head's whole tile as the fold enters a head; >= 0: chunk c + flush_l2_ahead + 1 at
  // chunk c). On the H200 (Super-120B, batch 256, T = 4) a window of 1 took the flushing window 835.9 -> 757.5 us.
  int flush_l2_ahead = 1;
};

// The eager speculative baseline: the state pool holds `window` draft states per slot, [pool, window, H, P, N]
// in state_format; d_cur[slot] names the draft holding the current state. Every position s reads the state of
// s − 1 (the draft d_cur for s = 0), steps it as mamba2_eager_step does and stores it into draft s: `window` full
// states written per verify, as serving engines do. spec_commit (with d_cur) picks the accepted one.
struct Mamba2EagerVerifyLaunch {
  Mamba2StepArgs step;  // batch = rows; inputs and y hold batch·window rows
  int window = 4;
  Format state_format = Format::FP32;
  void* d_state = nullptr;         // [pool, window, H, P, N]
  const int32_t* d_cur = nullptr;  // [pool]
};

// Largest L_hist a verify launch accepts (per-entry weights and the fold's B live in shared memory).
constexpr int kMamba2MaxHist = 64;

void mamba2_eager_step(const Mamba2EagerLaunch& launch, cudaStream_t stream);
void mamba2_verify(const Mamba2VerifyLaunch& launch, cudaStream_t stream);
// The kernel mamba2_verify would launch for `launch` (same checks, same choice of per-head or grouped kernel): its
// shared memory, registers and resident CTAs per SM on the current device. Launches nothing.
KernelFootprint mamba2_verify_footprint(const Mamba2VerifyLaunch& launch);
void mamba2_eager_verify(const Mamba2EagerVerifyLaunch& launch, cudaStream_t stream);
void mamba2_replay_step(const Mamba2ReplayLaunch& launch, cudaStream_t stream);

// CTAs per (row, head) the launchers use for `batch` rows: the head dim is split into tiles when few rows would
// leave SMs idle. Exposed for the tests (tile edges) and the benchmark's labels.
int mamba2_p_tiles(const Mamba2Dims& dims, int batch, Format state_format);
// The eager step's split (Mamba2EagerLaunch::p_tiles = 0): tiles only while the grid fits in one wave.
int mamba2_eager_p_tiles(const Mamba2Dims& dims, int batch, Format state_format);
// Rows of one pass of a CTA over a tile (its threads over a row's N / vector lanes): the automatic splits never make
// a tile smaller than this (P when N is below one vector). The benchmarks' tile sweeps stop there too.
int mamba2_rows_per_pass(const Mamba2Dims& dims, Format state_format);

// The grouped replay variant's shape for this launch (heads per CTA, P-tiles), as its launcher picks it; throws as
// the launcher would on a forced shape it rejects. For the benchmark's labels.
void mamba2_grouped_shape(const Mamba2ReplayLaunch& l, int& heads_per_cta, int& p_tiles);

// Whether the grouped variant (variant = 1, automatic shape) runs this launch: fp32 flush arithmetic, nearest
// rounding, a read copy (dual) in bf16 or fp16, a tile of heads · P pairs and a shared-memory footprint it fits. The
// cuda decoder uses it there and the per-head kernel (variant 0) elsewhere.
bool mamba2_grouped_accepts(const Mamba2ReplayLaunch& l);

}  // namespace rssm
