// GPU tests of the Mamba-2 kernels (kernels/mamba2/mamba2_kernels.h), label `gpu`; each test prints a message and
// passes when no CUDA device exists. Run: build-cuda/tests/gpu/replayssm_gpu_tests "[gpu]" (or ctest -L gpu), on
// the H200 from the dist/ bundle (scripts/gpu_run.sh).
// Every case steps a batch of rows through the kernel and, on the host, through
//   - the fp64 reference (model/mamba2.h, mamba2_step_ref on the same bf16-rounded inputs, eager in double), and
//   - a float emulation of the same scheme written here (the kernel's order of operations: lib/cpu/replay.cpp's,
//     per-row ring fills, slots), since the CPU decoders have no serving layout,
// and asserts:
//   output vs fp64: mean over steps of the per-step mean-over-rows relative 2-norm error <= rel_mean and its max
//     <= rel_max of metrics/tolerance.h for the judged format (eager: state, replay: checkpoint, dual: read copy);
//   output vs emulation: kernel error vs fp64 <= 2 x the emulation's + 1e-6 (CONVENTIONS.md's second criterion),
//     and every step's relative difference to the emulation within the judged format's rel_max (fp32: 2e-5);
//   state: the final state (eager) / last checkpoint (replay) vs fp64 within the judged format's rel_max, and vs
//     the emulation within the same bound as outputs;
//   bitwise: every active output written (outputs are NaN-poisoned before each launch), padded rows' outputs and
//     unused pool slots untouched, ring cursors (fill) equal to the emulation's after every step, buffered ring
//     entries x_j, B_j equal to the bf16 codes of the inputs, the arrival counters back at 0, and a dual read copy
//     equal to numeric/bits.h's rounding of the update copy's fp32 values, code for code (a block-scaled e4m3 / e5m2
//     / int8 copy: codes and row scales equal to numeric/scaled.h's quantisation of the update copy's rows).
// A flush arithmetic other than fp32 (tf32 / bf16 operands) is judged against its own emulation only: its error against
// fp64 is the arithmetic's, above the fp32 budget (the 2x criterion and the bounds below still hold; 3xtf32 keeps
// every fp32 bound).
// Stochastic rounding (`sr`) stores with the words of numeric/stochastic.h at each row's own position (rows start late
// and sit out steps, so positions differ within a launch); besides the bounds above, the stored codes of the final
// state / checkpoint must equal the emulation's but for the few an fp32 ulp moved across a rounding decision (a key
// off by one step or element would change about a third of them).
// Rows sit at different ring fills in one launch (staggered starts), one row sits out a step mid-run, one row is
// always padded, slots are a permutation of rows, and the ring starts NaN-poisoned (a stale entry read shows).
#include <catch2/catch.hpp>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/cuda_check.h"
#include "mamba2/mamba2_kernels.h"
#include "metrics/tolerance.h"
#include "model/mamba2.h"
#include "numeric/arith.h"
#include "numeric/bits.h"
#include "numeric/scaled.h"
#include "numeric/stochastic.h"

#include "gpu_test_util.h"

using namespace rssm;
using namespace rssm::gpu_test;

namespace {

enum class Kind { Eager, Replay, Dual };

struct Case {
  std::string geo;
  Mamba2Dims dims;
  Kind kind = Kind::Replay;
  Format state = Format::FP32;  // eager state / replay checkpoint / dual update copy (fp32)
  Format read = Format::BF16;   // dual read copy
  Format act = Format::BF16;
  Format yfmt = Format::FP32;
  int interval = 1;
  bool has_z = false, d_per_dim = false, dt_limits = false;
  int variant = 0;        // replay kernel (Mamba2ReplayLaunch::variant): 0 per head, 1 grouped, 2 pipelined;
                          // eager kernel (Mamba2EagerLaunch::variant): 0 per head, 1 pipelined
  int heads_per_cta = 0;  // variant 1: 0 = the launcher's choice
  int p_tiles = 0;        // replay variant 1 / eager variant 0: 0 = the launcher's choice
  int flush_l2 = -2;      // variant 1: Mamba2ReplayLaunch::flush_l2_ahead; -2 = the struct's
  Arith flush = Arith::FP32;  // the flush's arithmetic (Mamba2ReplayLaunch::flush_arith)
  bool sr = false;            // stochastic rounding of the stored state (Mamba2StepArgs::rounding)
  std::string name() const {
    const char* k = kind == Kind::Eager ? "eager" : kind == Kind::Replay ? "replay" : "dual";
    std::string s = fmt::format("{} {} state={}", geo, k, format_name(state));
    if (kind == Kind::Dual) s += "+" + format_name(read);
    if (kind != Kind::Eager) s += fmt::format(" K={}", interval);
    s += " act=" + format_name(act);
    if (yfmt != Format::FP32) s += " y=" + format_name(yfmt);
    if (has_z) s += " z";
    if (d_per_dim) s += " D[H,P]";
    if (dt_limits) s += " dt-limits";
    if (variant == 1 && kind != Kind::Eager)
      s += heads_per_cta > 0 ? fmt::format(" grouped(h={}{})", heads_per_cta, p_tiles > 0 ? fmt::format(",t={}", p_tiles) : "")
                             : " grouped(auto)";
    if ((variant == 2 && kind != Kind::Eager) || (variant == 1 && kind == Kind::Eager)) s += " pipelined";
    if (flush_l2 != -2) s += fmt::format(" flush-l2-ahead={}", flush_l2);
    if (kind == Kind::Eager && p_tiles > 0) s += fmt::format(" tiles={}", p_tiles);
    if (flush != Arith::FP32) s += " flush=" + arith_name(flush);
    if (sr) s += " sr";
    return s;
  }
};

// The float emulation of one slot.
struct EmuSlot {
  std::vector<float> ck, rd;              // stored values: checkpoint / eager state, dual read copy  [H, P, N]
  std::vector<float> rx, rB, rD, rL;      // ring [cap, H, P], [cap, G, N], [cap, H], [cap, H]
  int fill = 0;
  long long pos = 0;        // tokens this slot has decoded (stochastic rounding's step key)
  long long flush_pos = 0;  // the step key of the last flush
  std::vector<double> ref;                // fp64 reference state [H, P, N]
  std::vector<double> ref_at_flush;       // the reference state when the checkpoint was last written
};

float softplus_f(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }

void run_case(const Case& c, uint64_t seed) {
  if (repeats_a_kernel_config(c.name())) return;  // REPLAYSSM_GPU_TESTS=one-per-kernel (gpu_test_util.h)
  const Mamba2Dims d = c.dims;
  const int H = d.H, P = d.P, N = d.N, G = d.G, hpg = H / G, K = c.interval;
  const size_t HPN = static_cast<size_t>(H) * P * N, HP = static_cast<size_t>(H) * P, GN = static_cast<size_t>(G) * N;
  const bool eager = c.kind == Kind::Eager, dual = c.kind == Kind::Dual;
  std::mt19937_64 rng(seed);
  const uint64_t sr_seed = seed ^ 0x9E3779B97F4A7C15ull;
  // A stored value: nearest, or stochastic at (stream, step, element) of the slot's copy.
  const auto store_val = [&](Format f, float v, RandomStream stream, long long step, long long element) {
    return c.sr ? round_sr(f, v, sr_seed, stream, step, element) : round_to(f, v);
  };
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);

  // Rows and slots: row r uses slot (2r + 1) mod pool; the last row is always padded; rows start at staggered steps
  // so their rings sit at different fills in one launch; row 1 sits out one step mid-run.
  const int rows = 5, pool = 7;
  std::vector<int> slot_of(rows), start(rows);
  for (int r = 0; r < rows; ++r) slot_of[r] = r == rows - 1 ? -1 : (2 * r + 1) % pool;
  const int offs[] = {0, 1, 3, 6, 0};
  for (int r = 0; r < rows; ++r) start[r] = eager ? 0 : offs[r] % (K + 1);
  const int steps = 2 * K + 1 + 7;
  const int skip_row = 1, skip_step = K + 2;

  // Parameters: A in [-8, -0.5], Δ around 0.005..0.2, D ~ N(0, 1).
  Mamba2Params prm;
  prm.H = H, prm.P = P, prm.N = N, prm.G = G, prm.has_z = c.has_z, prm.d_per_dim = c.d_per_dim;
  if (c.dt_limits) prm.dt_min = 0.01, prm.dt_max = 0.1;
  std::vector<float> A_log(H), dt_bias(H), Dv(c.d_per_dim ? HP : H);
  for (int h = 0; h < H; ++h) {
    A_log[h] = std::log(0.5f + 7.5f * uni(rng));
    const float target = 0.005f + 0.2f * uni(rng);
    dt_bias[h] = std::log(std::expm1(target));  // softplus^-1
  }
  for (auto& v : Dv) v = normal(rng);
  prm.A_log.assign(A_log.begin(), A_log.end());
  prm.dt_bias.assign(dt_bias.begin(), dt_bias.end());
  prm.D.assign(Dv.begin(), Dv.end());
  DevBuf<float> dA(H), dB_(H), dD(Dv.size());
  dA.put(A_log), dB_.put(dt_bias), dD.put(Dv);

  // Pool: poisoned everywhere (unused slots must stay so), initial states of used slots random in the format.
  const Format sf = c.state;
  const size_t sbytes = (sf == Format::FP32 ? 4 : 2);
  const bool scaled = dual && is_scaled_format(c.read);  // codes of 1 byte with a scale per (head, row of N)
  const size_t rbytes = scaled ? 1 : 2;
  constexpr uint32_t kPoisonScale = 0xA5A5A5A5u;
  std::vector<EmuSlot> emu(pool);
  std::vector<float> init_ck(pool * HPN), init_rd(pool * HPN);
  for (size_t i = 0; i < init_ck.size(); ++i) init_ck[i] = round_to(sf, 0.5f * normal(rng));
  std::vector<uint8_t> ck_bytes = encode(sf, init_ck);
  std::vector<uint8_t> poison_ck(HPN * sbytes, 0xA5);
  for (int s = 0; s < pool; ++s) {
    bool used = false;
    for (int r = 0; r < rows; ++r) used |= slot_of[r] == s;
    if (!used) std::memcpy(&ck_bytes[s * HPN * sbytes], poison_ck.data(), poison_ck.size());
  }
  DevBuf<uint8_t> dck(ck_bytes.size());
  dck.put(ck_bytes);
  std::unique_ptr<DevBuf<uint8_t>> drd;
  std::unique_ptr<DevBuf<float>> drs;  // a block-scaled read copy's scales [pool, H, P]
  std::vector<uint8_t> rd_bytes;
  if (dual) {
    ReadCopyInit rc = initial_read_copy(c.read, init_ck, N);
    init_rd = std::move(rc.values);
    rd_bytes = std::move(rc.bytes);
    std::vector<float>& rs_init = rc.scales;
    for (int s = 0; s < pool; ++s) {
      bool used = false;
      for (int r = 0; r < rows; ++r) used |= slot_of[r] == s;
      if (used) continue;
      std::memset(&rd_bytes[s * HPN * rbytes], 0xA5, HPN * rbytes);
      if (scaled)
        for (size_t i = 0; i < HP; ++i) std::memcpy(&rs_init[s * HP + i], &kPoisonScale, 4);
    }
    drd = std::make_unique<DevBuf<uint8_t>>(rd_bytes.size());
    drd->put(rd_bytes);
    if (scaled) {
      drs = std::make_unique<DevBuf<float>>(rs_init.size());
      drs->put(rs_init);
    }
  }
  const int cap = std::max(K, 1) + 1;  // capacity above the interval: entries past it must never be touched
  for (int s = 0; s < pool; ++s) {
    EmuSlot& e = emu[s];
    e.ck.assign(init_ck.begin() + s * HPN, init_ck.begin() + (s + 1) * HPN);
    if (dual) e.rd.assign(init_rd.begin() + s * HPN, init_rd.begin() + (s + 1) * HPN);
    e.ref.assign(e.ck.begin(), e.ck.end());
    e.ref_at_flush = e.ref;
    e.rx.assign(cap * HP, 0), e.rB.assign(cap * GN, 0), e.rD.assign(cap * H, 0), e.rL.assign(cap * H, 0);
  }
  // Ring, NaN-poisoned; cursors 0; arrival counters 0.
  DevBuf<uint16_t> drx(pool * cap * HP), drB(pool * cap * GN);
  DevBuf<float> ddl(pool * cap * H * 2);
  DevBuf<int32_t> dfill(pool), darr(pool), dslot(rows);
  DevBuf<int64_t> dpos(rows);
  drx.put(std::vector<uint16_t>(drx.n, 0x7FC0));
  drB.put(std::vector<uint16_t>(drB.n, 0x7FC0));
  ddl.put(std::vector<float>(ddl.n, NAN));
  dfill.put(std::vector<int32_t>(pool, 0));
  darr.put(std::vector<int32_t>(pool, 0));

  // Step inputs.
  const size_t aw = c.act == Format::BF16 ? 2 : 4;
  DevBuf<uint8_t> dx(rows * HP * aw), ddt(rows * H * aw), dBm(rows * GN * aw), dCm(rows * GN * aw), dz(rows * HP * aw);
  const size_t yw = c.yfmt == Format::FP32 ? 4 : 2;
  DevBuf<uint8_t> dy(rows * HP * yw);
  auto upload = [&](DevBuf<uint8_t>& buf, const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * aw);
    for (size_t i = 0; i < v.size(); ++i) {
      if (aw == 2) {
        const uint16_t u = float_to_bf16_bits(v[i]);
        std::memcpy(&b[2 * i], &u, 2);
      } else {
        std::memcpy(&b[4 * i], &v[i], 4);
      }
    }
    buf.put(b);
  };

  Mamba2StepArgs a;
  a.dims = d;
  a.batch = rows;
  a.d_slot = dslot.p;
  a.act_format = c.act;
  a.d_x = dx.p, a.d_dt = ddt.p, a.d_B = dBm.p, a.d_C = dCm.p, a.d_z = c.has_z ? dz.p : nullptr;
  a.d_A_log = dA.p, a.d_dt_bias = dB_.p, a.d_D = dD.p, a.d_per_dim = c.d_per_dim;
  a.dt_min = static_cast<float>(prm.dt_min), a.dt_max = static_cast<float>(prm.dt_max);
  a.d_y = dy.p, a.y_format = c.yfmt;
  if (c.sr) a.rounding = Rounding::Stochastic, a.seed = sr_seed, a.d_pos = dpos.p;
  Mamba2EagerLaunch le;
  Mamba2ReplayLaunch lr;
  if (eager) {
    le.step = a, le.state_format = sf, le.d_state = dck.p, le.variant = c.variant, le.p_tiles = c.p_tiles;
  } else {
    lr.step = a, lr.interval = K, lr.capacity = cap, lr.ckpt_format = sf, lr.d_ckpt = dck.p, lr.dual = dual;
    lr.read_format = c.read, lr.d_read = dual ? drd->p : nullptr, lr.d_read_scale = scaled ? drs->p : nullptr;
    lr.d_ring_x = drx.p, lr.d_ring_B = drB.p, lr.d_ring_dl = ddl.p, lr.d_fill = dfill.p, lr.d_arrive = darr.p;
    lr.variant = c.variant, lr.heads_per_cta = c.heads_per_cta, lr.p_tiles = c.p_tiles, lr.flush_arith = c.flush;
    if (c.flush_l2 != -2) lr.flush_l2_ahead = c.flush_l2;
  }

  const Format judged = eager ? sf : dual ? c.read : sf;
  const Tolerance tol = output_tolerance(judged);
  // Kernel and emulation stage the same flush operands except where the device's expf moved a weight across an
  // operand rounding boundary: such a term moves by one operand ulp (2u), and the trajectories part by that much.
  const double flush_u = c.flush == Arith::TF32 ? 0x1p-11 : c.flush == Arith::BF16 ? 0x1p-8 : 0.0;
  const bool fp64_budget = flush_u == 0.0;  // tf32 / bf16 operands: judged against their emulation, not the fp32 budget
  const double diff_bound = std::max(judged == Format::FP32 ? 2e-5 : tol.rel_max, 4.0 * flush_u);
  double ker_sum = 0, emu_sum = 0, ker_max = 0, diff_max = 0;
  int measured = 0;
  long long unwritten = 0, padded_touched = 0, fill_mismatch = 0;

  std::vector<float> x(rows * HP), dt(rows * H), Bm(rows * GN), Cm(rows * GN), z(rows * HP);
  std::vector<double> yref(HP), yemu(HP), yker(HP);
  for (int step = 0; step < steps; ++step) {
    // Inputs: x and B on the bf16 grid whatever the activation format (the buffer keeps bf16: the reference then
    // sees what the kernel folds in); dt, C, z on the activation grid.
    const bool a16 = c.act == Format::BF16;
    for (auto& v : x) v = round_bf16(normal(rng));
    for (auto& v : Bm) v = round_bf16(normal(rng));
    for (auto& v : Cm) v = a16 ? round_bf16(normal(rng)) : normal(rng);
    for (auto& v : dt) v = a16 ? round_bf16(0.5f * normal(rng)) : 0.5f * normal(rng);
    for (auto& v : z) v = a16 ? round_bf16(normal(rng)) : normal(rng);
    upload(dx, x), upload(ddt, dt), upload(dBm, Bm), upload(dCm, Cm), upload(dz, z);
    std::vector<int32_t> slots(rows);
    for (int r = 0; r < rows; ++r)
      slots[r] = (step < start[r] || (r == skip_row && step == skip_step)) ? -1 : slot_of[r];
    dslot.put(slots);
    std::vector<int64_t> pos(rows, -1);
    for (int r = 0; r < rows; ++r)
      if (slots[r] >= 0) pos[r] = emu[slots[r]].pos;
    dpos.put(pos);
    CUDA_CHECK(cudaMemset(dy.p, 0xFF, dy.n));  // NaN in fp32 and bf16
    if (eager)
      mamba2_eager_step(le, nullptr);
    else
      mamba2_replay_step(lr, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint8_t> ybytes = dy.get();
    const std::vector<int32_t> fills = eager ? std::vector<int32_t>() : dfill.get();

    double step_ker = 0, step_emu = 0;
    int active = 0;
    for (int r = 0; r < rows; ++r) {
      const int s = slots[r];
      if (s < 0) {
        for (size_t i = 0; i < HP * yw; ++i) padded_touched += ybytes[r * HP * yw + i] != 0xFF;
        continue;
      }
      ++active;
      EmuSlot& e = emu[s];
      const float* xr = &x[r * HP];
      const float* dtr = &dt[r * H];
      const float* Br = &Bm[r * GN];
      const float* Cr = &Cm[r * GN];
      const float* zr = c.has_z ? &z[r * HP] : nullptr;
      // fp64 reference.
      mamba2_step_ref(prm, e.ref.data(), xr, dtr, Br, Cr, zr, yref.data());
      // Kernel output.
      for (size_t i = 0; i < HP; ++i) {
        if (yw == 4) {
          float v;
          std::memcpy(&v, &ybytes[(r * HP + i) * 4], 4);
          yker[i] = v;
        } else {
          uint16_t u;
          std::memcpy(&u, &ybytes[(r * HP + i) * 2], 2);
          yker[i] = bf16_bits_to_float(u);
        }
        unwritten += std::isnan(yker[i]);
      }
      // Emulation.
      const int j = e.fill;
      const bool flush = !eager && j + 1 == K;
      for (int h = 0; h < H; ++h) {
        const int g = h / hpg;
        const float* B = Br + g * N;
        const float* C = Cr + g * N;
        float delta = softplus_f(dtr[h] + dt_bias[h]);
        delta = std::fmin(std::fmax(delta, a.dt_min), a.dt_max);
        const float A = -std::exp(A_log[h]);
        if (eager) {
          const float dec = std::exp(A * delta);
          for (int p = 0; p < P; ++p) {
            float* S = &e.ck[(h * P + p) * N];
            float acc = 0;
            for (int n = 0; n < N; ++n) {
              S[n] = store_val(sf, dec * S[n] + delta * xr[h * P + p] * B[n], RandomStream::EagerState, e.pos,
                               static_cast<long long>(s) * HPN + (h * P + p) * N + n);
              acc += S[n] * C[n];
            }
            const float dd = c.d_per_dim ? Dv[h * P + p] : Dv[h];
            float o = acc + dd * xr[h * P + p];
            if (zr) o *= zr[h * P + p] / (1.0f + std::exp(-zr[h * P + p]));
            yemu[h * P + p] = round_to(c.yfmt, o);  // the kernel stores y in its output format
          }
          continue;
        }
        const float lam_t = (j > 0 ? e.rL[(j - 1) * H + h] : 0.0f) + A * delta;
        // Entry j = this token (its buffered copy; x and B are on the bf16 grid already).
        std::vector<float> w(j + 1), wf(j + 1);
        for (int q = 0; q <= j; ++q) {
          const float* Bq = q < j ? &e.rB[q * GN + g * N] : B;
          float dot = 0;
          for (int n = 0; n < N; ++n) dot += Bq[n] * C[n];
          const float dq = q < j ? e.rD[q * H + h] : delta, lq = q < j ? e.rL[q * H + h] : lam_t;
          wf[q] = dq * std::exp(lam_t - lq);
          w[q] = wf[q] * dot;
        }
        const float dec = std::exp(lam_t);
        const std::vector<float>& src = dual && !flush ? e.rd : e.ck;
        for (int p = 0; p < P; ++p) {
          const float* S = &src[(h * P + p) * N];
          float sdot = 0;
          for (int n = 0; n < N; ++n) sdot += S[n] * C[n];
          float acc = dec * sdot;
          for (int q = 0; q <= j; ++q) acc += w[q] * (q < j ? e.rx[q * HP + h * P + p] : xr[h * P + p]);
          const float dd = c.d_per_dim ? Dv[h * P + p] : Dv[h];
          acc += dd * xr[h * P + p];
          if (zr) acc *= zr[h * P + p] / (1.0f + std::exp(-zr[h * P + p]));
          yemu[h * P + p] = round_to(c.yfmt, acc);
        }
        if (flush) {
          for (int p = 0; p < P; ++p) {
            for (int n = 0; n < N; ++n) {
              const size_t i = (h * P + p) * N + n;
              float v = dec * e.ck[i];
              for (int q = 0; q <= j; ++q) {
                const float xq = q < j ? e.rx[q * HP + h * P + p] : xr[h * P + p];
                const float bq = q < j ? e.rB[q * GN + g * N + n] : B[n];
                v = arith_mac(c.flush, v, wf[q] * xq, bq);
              }
              const long long el = static_cast<long long>(s) * HPN + i;
              e.ck[i] = store_val(sf, v, RandomStream::CheckpointUpdate, e.pos + 1, el);
              if (dual && !scaled) e.rd[i] = store_val(c.read, e.ck[i], RandomStream::CheckpointRead, e.pos + 1, el);
            }
            if (scaled) {  // the row's scale needs all of its stored update values
              const size_t r0 = static_cast<size_t>(h * P + p) * N;
              std::vector<uint8_t> codes(N);
              scaled_row(c.read, c.sr, &e.ck[r0], N, sr_seed, e.pos + 1, static_cast<long long>(s) * HPN + r0,
                         codes.data(), &e.rd[r0]);
            }
          }
        } else {
          for (int p = 0; p < P; ++p) e.rx[j * HP + h * P + p] = xr[h * P + p];
          e.rD[j * H + h] = delta, e.rL[j * H + h] = lam_t;
          if (h % hpg == 0)
            for (int n = 0; n < N; ++n) e.rB[j * GN + g * N + n] = B[n];
        }
      }
      if (!eager) {
        e.fill = flush ? 0 : j + 1;
        if (flush) e.ref_at_flush = e.ref, e.flush_pos = e.pos + 1;
        fill_mismatch += fills[s] != e.fill;
      }
      ++e.pos;
      const double ek = rel_rms(yker.data(), yref.data(), HP), ee = rel_rms(yemu.data(), yref.data(), HP);
      step_ker += ek, step_emu += ee;
      diff_max = max_nan(diff_max, rel_rms(yker.data(), yemu.data(), HP));
    }
    if (active > 0) {
      ker_sum += step_ker / active, emu_sum += step_emu / active;
      ker_max = max_nan(ker_max, step_ker / active);
      ++measured;
    }
  }
  const double ker_mean = ker_sum / measured, emu_mean = emu_sum / measured;

  // Final state: eager state / last checkpoint, against the emulation and fp64; untouched slots; dual read copy.
  const std::vector<float> ck_now = decode(sf, dck.get());
  const std::vector<uint8_t> ck_now_bytes = dck.get();
  double st_ref = 0, st_emu = 0, st_emu_ref = 0;
  long long code_mismatch = 0, codes = 0;  // stored values of the final state / checkpoint unlike the emulation's
  long long untouched_bad = 0, read_copy_bad = 0, ring_bad = 0, scaled_catches = 0;
  std::vector<double> a64(HPN), b64(HPN), r64(HPN);
  const std::vector<uint8_t> rd_now = dual ? drd->get() : std::vector<uint8_t>();
  const std::vector<float> rs_now = scaled ? drs->get() : std::vector<float>();
  const std::vector<uint16_t> rx_now = eager ? std::vector<uint16_t>() : drx.get();
  const std::vector<uint16_t> rB_now = eager ? std::vector<uint16_t>() : drB.get();
  for (int s = 0; s < pool; ++s) {
    bool used = false;
    for (int r = 0; r < rows; ++r) used |= slot_of[r] == s;
    if (!used) {
      untouched_bad += std::memcmp(&ck_now_bytes[s * HPN * sbytes], poison_ck.data(), poison_ck.size()) != 0;
      if (dual)
        for (size_t i = 0; i < HPN * rbytes; ++i) untouched_bad += rd_now[s * HPN * rbytes + i] != 0xA5;
      if (scaled)
        for (size_t i = 0; i < HP; ++i) untouched_bad += std::memcmp(&rs_now[s * HP + i], &kPoisonScale, 4) != 0;
      if (!eager) {
        for (size_t i = 0; i < cap * HP; ++i) untouched_bad += rx_now[s * cap * HP + i] != 0x7FC0;
        for (size_t i = 0; i < cap * GN; ++i) untouched_bad += rB_now[s * cap * GN + i] != 0x7FC0;
      }
      continue;
    }
    const EmuSlot& e = emu[s];
    const std::vector<double>& ref = eager ? e.ref : e.ref_at_flush;
    for (size_t i = 0; i < HPN; ++i) a64[i] = ck_now[s * HPN + i], b64[i] = e.ck[i], r64[i] = ref[i];
    st_ref = max_nan(st_ref, rel_rms(a64.data(), r64.data(), HPN));
    st_emu = max_nan(st_emu, rel_rms(a64.data(), b64.data(), HPN));
    st_emu_ref = max_nan(st_emu_ref, rel_rms(b64.data(), r64.data(), HPN));
    for (size_t i = 0; i < HPN; ++i) code_mismatch += ck_now[s * HPN + i] != e.ck[i], codes += 1;
    if (scaled) {  // codes and scale of every row: the quantisation of the update copy's stored row, exactly
      const auto args = std::make_tuple(c.read, c.sr, &ck_now[s * HPN], &rd_now[s * HPN], &rs_now[s * HP], HP, N,
                                        sr_seed, e.flush_pos, static_cast<long long>(s * HPN));
      read_copy_bad += std::apply(scaled_copy_mismatches, args);
      scaled_catches += std::apply(scaled_check_catches, args) ? 0 : 1;
    } else if (dual) {
      for (size_t i = 0; i < HPN; ++i) {
        uint16_t u;
        std::memcpy(&u, &rd_now[(s * HPN + i) * 2], 2);
        const float upd = ck_now[s * HPN + i];
        const float want = store_val(c.read, upd, RandomStream::CheckpointRead, e.flush_pos, static_cast<long long>(s * HPN + i));
        read_copy_bad += u != (c.read == Format::BF16 ? float_to_bf16_bits(want) : float_to_fp16_bits(want));
      }
    }
    if (!eager) {  // live ring entries: the bf16 codes of the inputs, exactly
      for (int q = 0; q < e.fill; ++q) {
        for (size_t i = 0; i < HP; ++i) ring_bad += rx_now[(s * cap + q) * HP + i] != float_to_bf16_bits(e.rx[q * HP + i]);
        for (size_t i = 0; i < GN; ++i) ring_bad += rB_now[(s * cap + q) * GN + i] != float_to_bf16_bits(e.rB[q * GN + i]);
      }
    }
  }
  long long arrive_bad = 0;
  if (!eager)
    for (int32_t v : darr.get()) arrive_bad += v != 0;

  const double state_bound = sf == Format::FP32 ? 1e-5 : output_tolerance(sf).rel_max;
  fmt::print("{:<58} out err mean {:.2e} (emu {:.2e}, {:.0f}% of budget) max {:.2e} | vs emu {:.1e} | state vs fp64 "
             "{:.1e} vs emu {:.1e}\n",
             c.name(), ker_mean, emu_mean, 100.0 * ker_mean / tol.rel_mean, ker_max, diff_max, st_ref, st_emu);
  INFO(c.name() << ": kernel error mean " << ker_mean << " max " << ker_max << ", emulation mean " << emu_mean
                << ", max difference to the emulation " << diff_max << ", state vs fp64 " << st_ref << " vs emulation "
                << st_emu << ", stored codes unlike the emulation's " << code_mismatch << " of " << codes);
  CHECK(unwritten == 0);
  CHECK(padded_touched == 0);
  CHECK(untouched_bad == 0);
  CHECK(fill_mismatch == 0);
  CHECK(arrive_bad == 0);
  CHECK(ring_bad == 0);
  CHECK(read_copy_bad == 0);
  CHECK(scaled_catches == 0);  // the read-copy check counts a corrupted code and scale
  if (fp64_budget) {
    CHECK(ker_mean <= tol.rel_mean);
    CHECK(ker_max <= tol.rel_max);
  }
  CHECK(ker_mean <= 2.0 * emu_mean + 1e-6);
  CHECK(diff_max <= diff_bound);
  // Stochastic rounding draws the emulation's words: the stored codes agree but where an fp32 ulp of difference moved
  // a value across a rounding decision (about steps · 2^-13 per element in fp16, far less in bf16).
  if (c.sr && sf != Format::FP32) CHECK(static_cast<double>(code_mismatch) <= 0.02 * static_cast<double>(codes));
  CHECK(st_emu <= std::max(sf == Format::FP32 ? 2e-5 : output_tolerance(sf).rel_max, 4.0 * flush_u));
  // The state bound: the checkpoint's own rounding (bf16: 2^-9 per element) plus the fp32 error of the steps; with
  // tf32 / bf16 flush operands, 2x the emulation's own state error (+1e-6).
  if (fp64_budget)
    CHECK(st_ref <= state_bound);
  else
    CHECK(st_ref <= 2.0 * st_emu_ref + 1e-6);
}

Mamba2Dims small() { return {4, 8, 16, 2}; }
Mamba2Dims nano4b() { return {96, 80, 128, 8}; }
Mamba2Dims super120b() { return {128, 64, 128, 8}; }

uint64_t seed_for(const Case& c) { return std::hash<std::string>{}(c.name()) ^ Catch::rngSeed(); }

}  // namespace

TEST_CASE("mamba2 cuda eager: every state and activation format, small geometry", "[gpu][mamba2][eager]") {
  if (!have_device()) return;
  for (Format s : {Format::FP32, Format::BF16, Format::FP16})
    for (Format act : {Format::BF16, Format::FP32})
      for (int variant : {0, 1}) {
        Case c;
        c.geo = "small", c.dims = small(), c.kind = Kind::Eager, c.state = s, c.act = act, c.variant = variant;
        c.has_z = act == Format::FP32, c.d_per_dim = s == Format::BF16, c.dt_limits = s == Format::FP16;
        run_case(c, seed_for(c));
      }
}

TEST_CASE("mamba2 cuda eager: Nemotron-3 geometries", "[gpu][mamba2][eager]") {
  if (!have_device()) return;
  for (auto [geo, dims] : {std::pair{"nano-4b", nano4b()}, std::pair{"super-120b", super120b()}})
    for (Format s : {Format::FP32, Format::BF16})
      for (int variant : {0, 1})
        for (int tiles : {0, 4}) {  // 4: split heads (the batch-1 shape; the launcher's choice for 4 rows is 1)
          if (variant == 1 && tiles > 0) continue;
          Case c;
          c.geo = geo, c.dims = dims, c.kind = Kind::Eager, c.state = s, c.has_z = true, c.variant = variant;
          c.p_tiles = tiles;
          run_case(c, seed_for(c));
        }
}

// Replay kernels every replay/dual case runs through: variant 0 (one CTA per head), variant 1 with every head of a
// group in one CTA (heads_per_cta = H/G: the serving-batch shape) and, where `more`, variant 1 as the launcher
// shapes it for these 4 rows, with one whole head per CTA (the batch-8 shape), and with one head per CTA split in
// P-tiles (the batch-1 shape: the kernel that reads the ring ahead of the cursor; Nano-4B's 20-row tiles take the
// unaligned ring path, the small geometry's 4-row tiles a part-filled 8-pair chunk); and variant 2 (pipelined).
// Where `more` and N = 128, the serving-batch shape once more with the flush's other L2 prefetch (Mamba2ReplayLaunch::
// flush_l2_ahead): a rolling window of one chunk when the struct's default is whole heads, else whole heads.
struct VariantRun {
  int variant, heads, tiles, flush_l2 = -2;
};
std::vector<VariantRun> replay_variants(const Mamba2Dims& d, bool more) {
  std::vector<VariantRun> v = {{0, 0, 0}, {1, d.H / d.G, 0}, {2, 0, 0}};
  if (more) {
    v.push_back({1, 0, 0});
    v.push_back({1, 1, 1});
    v.push_back({1, 1, d.P >= 32 ? 4 : 2});
    if (d.N == 128) {  // the window is compiled into the N = 128 kernels only
      const Mamba2ReplayLaunch dflt;
      v.push_back({1, d.H / d.G, 0, dflt.flush_l2_ahead < 0 ? 0 : -1});
    }
  }
  return v;
}

TEST_CASE("mamba2 cuda replay: shared checkpoint, every interval, small geometry", "[gpu][mamba2][replay]") {
  if (!have_device()) return;
  for (int K : {1, 4, 8, 16, 32})
    for (Format s : {Format::FP32, Format::BF16, Format::FP16})
      for (Format act : {Format::BF16, Format::FP32})
        for (VariantRun vr : replay_variants(small(), true)) {
          Case c;
          c.geo = "small", c.dims = small(), c.kind = Kind::Replay, c.state = s, c.act = act, c.interval = K;
          c.has_z = K % 8 == 0, c.d_per_dim = act == Format::FP32, c.dt_limits = K == 4;
          c.yfmt = (K == 8 && s == Format::BF16) ? Format::BF16 : Format::FP32;
          c.variant = vr.variant, c.heads_per_cta = vr.heads, c.p_tiles = vr.tiles, c.flush_l2 = vr.flush_l2;
          run_case(c, seed_for(c));
        }
}

TEST_CASE("mamba2 cuda dual: fp32 update + bf16/fp16 read copy, every interval, small geometry", "[gpu][mamba2][dual]") {
  if (!have_device()) return;
  for (int K : {1, 4, 8, 16, 32})
    for (Format r : {Format::BF16, Format::FP16})
      for (VariantRun vr : replay_variants(small(), true)) {
        Case c;
        c.geo = "small", c.dims = small(), c.kind = Kind::Dual, c.read = r, c.interval = K, c.has_z = K == 16;
        c.variant = vr.variant, c.heads_per_cta = vr.heads, c.p_tiles = vr.tiles, c.flush_l2 = vr.flush_l2;
        run_case(c, seed_for(c));
      }
}

TEST_CASE("mamba2 cuda dual: fp32 update + block-scaled e4m3 / e5m2 / int8 read copy", "[gpu][mamba2][dual][scaled]") {
  if (!have_device()) return;
  for (Format r : {Format::E4M3, Format::E5M2, Format::INT8}) {
    for (int K : {1, 4, 8, 16, 32})
      for (Format act : {Format::BF16, Format::FP32}) {
        Case c;
        c.geo = "small", c.dims = small(), c.kind = Kind::Dual, c.read = r, c.act = act, c.interval = K;
        c.has_z = K == 16, c.d_per_dim = act == Format::FP32;
        run_case(c, seed_for(c));
      }
    for (auto [geo, dims] : {std::pair{"nano-4b", nano4b()}, std::pair{"super-120b", super120b()}})
      for (int K : {4, 16}) {
        Case c;
        c.geo = geo, c.dims = dims, c.kind = Kind::Dual, c.read = r, c.interval = K, c.has_z = true;
        run_case(c, seed_for(c));
      }
    for (int K : {4, 16}) {  // stochastic codes with the emulation's words
      Case c;
      c.geo = "super-120b", c.dims = super120b(), c.kind = Kind::Dual, c.read = r, c.interval = K, c.sr = true;
      run_case(c, seed_for(c));
    }
  }
}

TEST_CASE("mamba2 cuda replay and dual: Nemotron-3 Nano-4B and Super-120B", "[gpu][mamba2][replay][dual]") {
  if (!have_device()) return;
  for (auto [geo, dims] : {std::pair{"nano-4b", nano4b()}, std::pair{"super-120b", super120b()}})
    for (int K : {1, 4, 8, 16, 32})
      for (VariantRun vr : replay_variants(dims, K == 16)) {
        for (Format s : {Format::FP32, Format::BF16}) {
          Case c;
          c.geo = geo, c.dims = dims, c.kind = Kind::Replay, c.state = s, c.interval = K, c.has_z = true;
          c.variant = vr.variant, c.heads_per_cta = vr.heads, c.p_tiles = vr.tiles, c.flush_l2 = vr.flush_l2;
          run_case(c, seed_for(c));
        }
        Case c;
        c.geo = geo, c.dims = dims, c.kind = Kind::Dual, c.read = Format::BF16, c.interval = K, c.has_z = true;
        c.variant = vr.variant, c.heads_per_cta = vr.heads, c.p_tiles = vr.tiles, c.flush_l2 = vr.flush_l2;
        run_case(c, seed_for(c));
      }
}

TEST_CASE("mamba2 cuda replay and dual: flush arithmetic tf32, 3xtf32, bf16 operands", "[gpu][mamba2][replay][dual][arith]") {
  if (!have_device()) return;
  for (Arith m : {Arith::TF32, Arith::TF32x3, Arith::BF16})
    for (int K : {1, 4, 16, 64}) {
      for (Kind kind : {Kind::Replay, Kind::Dual}) {
        Case c;
        c.geo = "small", c.dims = small(), c.kind = kind, c.interval = K, c.has_z = K == 16, c.flush = m;
        run_case(c, seed_for(c));
      }
      if (K == 16) {  // the serving geometry, shared fp32 and bf16 checkpoints
        for (Format s : {Format::FP32, Format::BF16}) {
          Case c;
          c.geo = "super-120b", c.dims = super120b(), c.kind = Kind::Replay, c.state = s, c.interval = K, c.flush = m;
          run_case(c, seed_for(c));
        }
      }
    }
}

TEST_CASE("mamba2 cuda: stochastic rounding of the eager state, the checkpoint and the read copy", "[gpu][mamba2][sr]") {
  if (!have_device()) return;
  for (auto [geo, dims] : {std::pair{"small", small()}, std::pair{"super-120b", super120b()}}) {
    for (Format s : {Format::BF16, Format::FP16}) {
      Case c;
      c.geo = geo, c.dims = dims, c.kind = Kind::Eager, c.state = s, c.sr = true, c.has_z = true;
      run_case(c, seed_for(c));
      for (int K : {1, 4, 16}) {
        Case r;
        r.geo = geo, r.dims = dims, r.kind = Kind::Replay, r.state = s, r.interval = K, r.sr = true;
        run_case(r, seed_for(r));
        Case d;
        d.geo = geo, d.dims = dims, d.kind = Kind::Dual, d.read = s, d.interval = K, d.sr = true;
        run_case(d, seed_for(d));
      }
    }
  }
}

TEST_CASE("mamba2 cuda launchers reject bad launch structs with a message naming the field", "[gpu][mamba2]") {
  if (!have_device()) return;
  Mamba2ReplayLaunch l;
  l.step.dims = {4, 8, 16, 2};
  l.step.batch = 1;
  CHECK_THROWS_WITH(mamba2_replay_step(l, nullptr), Catch::Contains("d_slot"));
  {  // the grouped variant's head count must divide H/G
    int32_t* slot = nullptr;
    CUDA_CHECK(cudaMalloc(&slot, 64));
    Mamba2ReplayLaunch g;
    g.step.dims = {4, 8, 16, 2};
    g.step.batch = 1;
    g.step.d_slot = slot, g.step.d_x = slot, g.step.d_dt = slot, g.step.d_B = slot, g.step.d_C = slot;
    g.step.d_y = slot, g.step.d_A_log = reinterpret_cast<float*>(slot), g.step.d_dt_bias = g.step.d_A_log;
    g.step.d_D = g.step.d_A_log;
    g.d_ckpt = slot, g.d_ring_x = reinterpret_cast<uint16_t*>(slot), g.d_ring_B = g.d_ring_x;
    g.d_ring_dl = reinterpret_cast<float*>(slot), g.d_fill = slot, g.d_arrive = slot;
    Mamba2EagerLaunch pe;  // P = 8 in 6 tiles of 2 rows: the last tile would be empty
    pe.step = g.step, pe.d_state = slot, pe.p_tiles = 6;
    CHECK_THROWS_WITH(mamba2_eager_step(pe, nullptr), Catch::Contains("p_tiles"));
    pe.p_tiles = 2, pe.variant = 1;  // a valid split, but the pipelined variant has none: not silently ignored
    CHECK_THROWS_WITH(mamba2_eager_step(pe, nullptr), Catch::Contains("variant 0 only"));
    g.variant = 1, g.heads_per_cta = 3;
    CHECK_THROWS_WITH(mamba2_replay_step(g, nullptr), Catch::Contains("heads_per_cta"));
    g.heads_per_cta = 0, g.flush_l2_ahead = -2;  // the L2 window: -1 .. 64 chunks
    CHECK_THROWS_WITH(mamba2_replay_step(g, nullptr), Catch::Contains("flush_l2_ahead"));
    g.flush_l2_ahead = 65;
    CHECK_THROWS_WITH(mamba2_replay_step(g, nullptr), Catch::Contains("flush_l2_ahead"));
    g.flush_l2_ahead = 1, g.variant = 3;
    CHECK_THROWS_WITH(mamba2_replay_step(g, nullptr), Catch::Contains("variant"));
    g.variant = 1, g.heads_per_cta = 0, g.flush_arith = Arith::TF32;  // staged flush operands: variant 0 only
    CHECK_THROWS_WITH(mamba2_replay_step(g, nullptr), Catch::Contains("flush_arith tf32"));
    g.variant = 0, g.flush_arith = Arith::FP64;
    CHECK_THROWS_WITH(mamba2_replay_step(g, nullptr), Catch::Contains("flush_arith"));
    g.flush_arith = Arith::FP32, g.step.rounding = Rounding::Stochastic;  // stochastic rounding needs positions
    CHECK_THROWS_WITH(mamba2_replay_step(g, nullptr), Catch::Contains("d_pos"));
    g.step.d_pos = reinterpret_cast<const int64_t*>(slot), g.variant = 1;  // and variant 0
    CHECK_THROWS_WITH(mamba2_replay_step(g, nullptr), Catch::Contains("stochastic"));
    g.step.rounding = Rounding::Nearest, g.dual = true, g.read_format = Format::E4M3, g.d_read = slot;
    CHECK_THROWS_WITH(mamba2_replay_step(g, nullptr), Catch::Contains("variant 0 only"));  // block scales: variant 0
    g.variant = 0;
    CHECK_THROWS_WITH(mamba2_replay_step(g, nullptr), Catch::Contains("d_read_scale"));
    g.read_format = Format::FP64;
    CHECK_THROWS_WITH(mamba2_replay_step(g, nullptr), Catch::Contains("read_format"));
    cudaFree(slot);
  }
  {  // what the cuda decoder asks before it picks the grouped variant
    Mamba2ReplayLaunch q;
    q.step.dims = super120b();
    q.step.batch = 256;
    q.interval = 16;
    CHECK(mamba2_grouped_accepts(q));
    q.flush_arith = Arith::TF32;
    CHECK_FALSE(mamba2_grouped_accepts(q));
    q.flush_arith = Arith::FP32, q.step.rounding = Rounding::Stochastic;
    CHECK_FALSE(mamba2_grouped_accepts(q));
    q.step.rounding = Rounding::Nearest, q.dual = true, q.read_format = Format::INT8;  // block-scaled read copy
    CHECK_FALSE(mamba2_grouped_accepts(q));
    q.read_format = Format::BF16;
    CHECK(mamba2_grouped_accepts(q));
    q.dual = false;
    q.step.rounding = Rounding::Nearest, q.step.dims.P = 4096;  // more (head, row) pairs than one CTA holds
    CHECK_FALSE(mamba2_grouped_accepts(q));
  }
  Mamba2EagerLaunch e;
  e.step.dims = {4, 8, 16, 3};
  e.step.batch = 1;
  CHECK_THROWS_WITH(mamba2_eager_step(e, nullptr), Catch::Contains("multiple of G"));
}

// Host-only: needs no device, so it runs wherever the GPU test binary builds.
TEST_CASE("gpu tests' one-per-kernel scope: the interval read as a class, other fields kept, a bad scope refused",
          "[gpu][scope]") {
  CHECK(kernel_config_key("super-120b replay state=fp32 K=16 act=bf16 z") == "super-120b replay state=fp32 K=8|16 act=bf16 z");
  CHECK(kernel_config_key("super-120b replay state=fp32 K=32 act=bf16 z") == "super-120b replay state=fp32 K>1 act=bf16 z");
  CHECK(kernel_config_key("small replay state=fp32 K=160") == "small replay state=fp32 K>1");
  CHECK(kernel_config_key("small dual state=fp32+bf16 K=1 act=bf16") == "small dual state=fp32+bf16 K=1 act=bf16");
  CHECK(kernel_config_key("small eager state=bf16 act=fp32") == "small eager state=bf16 act=fp32");
  const char* before = std::getenv("REPLAYSSM_GPU_TESTS");
  const std::string saved = before ? before : "";
  const auto restore = [&] {
    if (before) setenv("REPLAYSSM_GPU_TESTS", saved.c_str(), 1); else unsetenv("REPLAYSSM_GPU_TESTS");
  };
  unsetenv("REPLAYSSM_GPU_TESTS");
  CHECK_FALSE(repeats_a_kernel_config("scope-test replay state=fp32 K=4"));
  CHECK_FALSE(repeats_a_kernel_config("scope-test replay state=fp32 K=4"));  // every case runs by default
  setenv("REPLAYSSM_GPU_TESTS", "one-per-kernel", 1);
  CHECK_FALSE(repeats_a_kernel_config("scope-test replay state=fp32 K=4"));
  CHECK(repeats_a_kernel_config("scope-test replay state=fp32 K=32"));
  CHECK_FALSE(repeats_a_kernel_config("scope-test replay state=fp32 K=8"));  // the register-B flush's class
  CHECK(repeats_a_kernel_config("scope-test replay state=fp32 K=16"));
  CHECK_FALSE(repeats_a_kernel_config("scope-test replay state=fp32 K=1"));
  CHECK_FALSE(repeats_a_kernel_config("scope-test replay state=bf16 K=16"));
  CHECK_FALSE(repeats_a_kernel_config("scope-test replay state=fp32 K=16 grouped(h=16)"));
  setenv("REPLAYSSM_GPU_TESTS", "one_per_kernel", 1);
  CHECK_THROWS_WITH(repeats_a_kernel_config("scope-test replay state=fp32 K=8"), Catch::Contains("REPLAYSSM_GPU_TESTS"));
  restore();
}
