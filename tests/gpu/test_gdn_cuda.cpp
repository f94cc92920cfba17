// GPU tests of the Gated DeltaNet kernels (kernels/gdn/gdn_kernels.h), label `gpu`; each test prints a message and
// passes when no CUDA device exists. Run: build-cuda/tests/gpu/replayssm_gpu_tests "[gdn]" (or ctest -L gpu), on the
// H200 from the dist/ bundle (scripts/gpu_run.sh).
// Every case steps a batch of rows through the kernel and, on the host, through
//   - the fp64 reference (model/gdn.h, gdn_step_ref on the same inputs, eager in double), and
//   - a float emulation of the same scheme and route written here (the kernel's order of operations, which is
//     lib/cpu/replay.cpp's step_gdn / flush_gdn where the kernel follows it; per-row ring fills and slots, which the
//     CPU decoders do not have),
// and asserts:
//   output vs fp64: mean over steps of the per-step mean-over-rows relative 2-norm error <= rel_mean and its max
//     <= rel_max of metrics/tolerance.h for the judged format (eager: the state's; replay and dual: bf16, the
//     buffer format of u and k, which is never wider than a checkpoint here);
//   output vs emulation: kernel error vs fp64 <= 2 x the emulation's + 1e-6 (CONVENTIONS.md's second criterion),
//     and every step's relative difference to the emulation within `diff_bound` (fp32 eager: 2e-5; fp32 replay:
//     1e-3, since a last-bit difference of a dot can flip the bf16 rounding of a buffered u; otherwise the judged
//     format's rel_max);
//   state: the final state (eager) / last checkpoint (replay) vs fp64 and vs the emulation;
//   ring: the live entries u_j, k_j (bf16) and G_j (fp32) finite and equal to the emulation's within the same
//     bounds (u, k are computed values: a flipped bf16 rounding is allowed, a stale or missing entry is not);
//   bitwise: every active output written (outputs are NaN-poisoned before each launch), padded rows' outputs and
//     unused pool slots untouched, ring cursors (fill) equal to the emulation's after every step, the arrival
//     counters back at 0, and a dual read copy equal to numeric/bits.h's rounding of the update copy, code for code
//     (a block-scaled e4m3 / e5m2 / int8 copy: codes and row scales equal to numeric/scaled.h's quantisation of the
//     update copy's rows; its outputs are judged by the read format, and since u_t is computed from the read copy,
//     the checkpoint's error against fp64 by twice the emulation's).
// Rows sit at different ring fills in one launch (staggered starts), one row sits out a step mid-run, one row is
// always padded, slots are a permutation of rows, and the ring starts NaN-poisoned (a stale entry read shows).
#include <catch2/catch.hpp>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/cuda_check.h"
#include "gdn/gdn_kernels.h"
#include "metrics/tolerance.h"
#include "model/formulas.h"
#include "model/gdn.h"
#include "numeric/arith.h"
#include "numeric/bits.h"
#include "numeric/scaled.h"

#include "gpu_test_util.h"

using namespace rssm;
using namespace rssm::gpu_test;

namespace {

enum class Kind { Eager, Replay, Dual };

struct Case {
  std::string geo;
  GdnDims dims;
  Kind kind = Kind::Replay;
  GdnRoute route = GdnRoute::Inner;
  Format state = Format::FP32;  // eager state / replay checkpoint (dual: the update copy is fp32)
  Format read = Format::BF16;   // dual read copy
  Format act = Format::BF16;
  Format ofmt = Format::FP32;
  int interval = 1;
  Arith flush = Arith::FP32;  // the inner flush's arithmetic (GdnReplayLaunch::flush_arith)
  bool sr = false;            // stochastic rounding of the stored state (GdnStepArgs::rounding)
  int hpc = 0;                // eager: GdnEagerLaunch::heads_per_cta (0: the launcher's choice)
  std::optional<int> l2;      // l2_ahead of either launch (unset: the launch struct's default)
  int vt = 0;                 // v_tiles of either launch (1: a CTA streams whole heads, several chunks, even at 5 rows)
  std::string name() const {
    const char* k = kind == Kind::Eager ? "eager" : kind == Kind::Replay ? "replay" : "dual";
    std::string s = fmt::format("{} {}", geo, k);
    if (kind != Kind::Eager) s += route == GdnRoute::Inner ? " inner" : " reconstruct";
    s += " state=" + (kind == Kind::Dual ? "fp32+" + format_name(read) : format_name(state));
    if (kind != Kind::Eager) s += fmt::format(" K={}", interval);
    s += " act=" + format_name(act);
    if (ofmt != Format::FP32) s += " o=" + format_name(ofmt);
    if (flush != Arith::FP32) s += " flush=" + arith_name(flush);
    if (sr) s += " sr";
    if (hpc != 0) s += fmt::format(" heads/cta={}", hpc);
    if (l2) s += fmt::format(" l2_ahead={}", *l2);
    if (vt) s += fmt::format(" v_tiles={}", vt);
    return s;
  }
};

// The float emulation of one slot.
struct EmuSlot {
  std::vector<float> ck, rd;      // stored values: checkpoint / eager state, dual read copy  [HV, V, K]
  std::vector<float> ru, rk, rG;  // ring [cap, HV, V], [cap, HK, K], [cap, HV]
  int fill = 0;
  long long pos = 0;        // tokens this slot has decoded (stochastic rounding's step key)
  long long flush_pos = 0;  // the step key of the last flush
  std::vector<double> ref;           // fp64 reference state [HV, V, K]
  std::vector<double> ref_at_flush;  // the reference state when the checkpoint was last written
};

float dotf(const float* a, const float* b, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void run_case(const Case& c, uint64_t seed) {
  if (repeats_a_kernel_config(c.name())) return;  // REPLAYSSM_GPU_TESTS=one-per-kernel (gpu_test_util.h)
  const GdnDims d = c.dims;
  const int HK = d.HK, HV = d.HV, K = d.K, V = d.V, vpk = HV / HK, KI = c.interval;
  const size_t SE = static_cast<size_t>(HV) * V * K, OUT = static_cast<size_t>(HV) * V,
               QK = static_cast<size_t>(HK) * K;
  const bool eager = c.kind == Kind::Eager, dual = c.kind == Kind::Dual;
  const bool inner = c.route == GdnRoute::Inner;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const uint64_t sr_seed = seed ^ 0x9E3779B97F4A7C15ull;
  // A stored value: nearest, or stochastic at (stream, step, element) of the slot's copy.
  const auto store_val = [&](Format f, float x, RandomStream stream, long long step, long long element) {
    return c.sr ? round_sr(f, x, sr_seed, stream, step, element) : round_to(f, x);
  };
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);

  // Rows and slots: row r uses slot (2r + 1) mod pool; the last row is always padded; rows start at staggered steps
  // so their rings sit at different fills in one launch; row 1 sits out one step mid-run.
  const int rows = 5, pool = 7;
  std::vector<int> slot_of(rows), start(rows);
  for (int r = 0; r < rows; ++r) slot_of[r] = r == rows - 1 ? -1 : (2 * r + 1) % pool;
  const int offs[] = {0, 1, 3, 6, 0};
  for (int r = 0; r < rows; ++r) start[r] = eager ? 0 : offs[r] % (KI + 1);
  const int steps = 2 * KI + 1 + 7;
  const int skip_row = 1, skip_step = KI + 2;

  // Parameters (METHOD.md's realistic ranges): A_log = log U(1, 16), dt_bias = softplus^-1 of a log-uniform dt in
  // [1e-3, 1e-1]; one head with almost no decay.
  GdnParams prm;
  prm.HK = HK, prm.HV = HV, prm.K = K, prm.V = V, prm.eps = 1e-6;
  std::vector<float> A_log(HV), dt_bias(HV);
  for (int h = 0; h < HV; ++h) {
    A_log[h] = std::log(1.0f + 15.0f * uni(rng));
    const float dt = std::exp(std::log(1e-3f) + uni(rng) * (std::log(1e-1f) - std::log(1e-3f)));
    dt_bias[h] = std::log(std::expm1(dt));
  }
  A_log[HV - 1] = std::log(1e-3f);
  prm.A_log.assign(A_log.begin(), A_log.end());
  prm.dt_bias.assign(dt_bias.begin(), dt_bias.end());
  const float eps = static_cast<float>(prm.eps);
  DevBuf<float> dA(HV), dBias(HV);
  dA.put(A_log), dBias.put(dt_bias);

  // Pool: poisoned everywhere (unused slots must stay so), initial states of used slots random in the format.
  const Format sf = dual ? Format::FP32 : c.state;
  const size_t sb = width(sf);
  const bool scaled = dual && is_scaled_format(c.read);  // codes of 1 byte with a scale per (value head, row of K)
  const size_t rbytes = scaled ? 1 : 2;
  constexpr uint32_t kPoisonScale = 0xA5A5A5A5u;
  auto used = [&](int s) {
    for (int r = 0; r < rows; ++r)
      if (slot_of[r] == s) return true;
    return false;
  };
  std::vector<float> init_ck(pool * SE);
  for (auto& v : init_ck) v = round_to(sf, 0.3f * normal(rng));
  std::vector<uint8_t> ck_bytes = encode(sf, init_ck);
  for (int s = 0; s < pool; ++s)
    if (!used(s)) std::memset(&ck_bytes[s * SE * sb], 0xA5, SE * sb);
  DevBuf<uint8_t> dck(ck_bytes.size());
  dck.put(ck_bytes);
  std::unique_ptr<DevBuf<uint8_t>> drd;
  std::unique_ptr<DevBuf<float>> drs;  // a block-scaled read copy's scales [pool, HV, V]
  std::vector<float> init_rd;
  if (dual) {
    ReadCopyInit rc = initial_read_copy(c.read, init_ck, K);
    init_rd = std::move(rc.values);
    std::vector<uint8_t>& rd_bytes = rc.bytes;
    std::vector<float>& rs_init = rc.scales;
    for (int s = 0; s < pool; ++s) {
      if (used(s)) continue;
      std::memset(&rd_bytes[s * SE * rbytes], 0xA5, SE * rbytes);
      if (scaled)
        for (size_t i = 0; i < OUT; ++i) std::memcpy(&rs_init[s * OUT + i], &kPoisonScale, 4);
    }
    drd = std::make_unique<DevBuf<uint8_t>>(rd_bytes.size());
    drd->put(rd_bytes);
    if (scaled) {
      drs = std::make_unique<DevBuf<float>>(rs_init.size());
      drs->put(rs_init);
    }
  }
  const int cap = KI + 1;  // capacity above the interval: entries past it must never be touched
  std::vector<EmuSlot> emu(pool);
  for (int s = 0; s < pool; ++s) {
    EmuSlot& e = emu[s];
    e.ck.assign(init_ck.begin() + s * SE, init_ck.begin() + (s + 1) * SE);
    if (dual) e.rd.assign(init_rd.begin() + s * SE, init_rd.begin() + (s + 1) * SE);
    e.ref.assign(e.ck.begin(), e.ck.end());
    e.ref_at_flush = e.ref;
    e.ru.assign(cap * OUT, 0), e.rk.assign(cap * QK, 0), e.rG.assign(cap * HV, 0);
  }
  // Ring, NaN-poisoned; cursors 0; arrival counters 0.
  DevBuf<uint16_t> dru(pool * cap * OUT), drk(pool * cap * QK);
  DevBuf<float> drG(pool * cap * HV);
  DevBuf<int32_t> dfill(pool), darr(pool), dslot(rows);
  DevBuf<int64_t> dpos(rows);
  dru.put(std::vector<uint16_t>(dru.n, 0x7FC0));
  drk.put(std::vector<uint16_t>(drk.n, 0x7FC0));
  drG.put(std::vector<float>(drG.n, NAN));
  dfill.put(std::vector<int32_t>(pool, 0));
  darr.put(std::vector<int32_t>(pool, 0));

  // Step inputs, in the activation format.
  const size_t aw = width(c.act);
  DevBuf<uint8_t> dq(rows * QK * aw), dk(rows * QK * aw), dv(rows * OUT * aw), da(rows * HV * aw), db(rows * HV * aw);
  const size_t ow = width(c.ofmt);
  DevBuf<uint8_t> dout(rows * OUT * ow);
  auto upload = [&](DevBuf<uint8_t>& buf, const std::vector<float>& v) { buf.put(encode(c.act, v)); };

  GdnStepArgs a;
  a.dims = d;
  a.batch = rows;
  a.d_slot = dslot.p;
  a.act_format = c.act;
  a.d_q = dq.p, a.d_k = dk.p, a.d_v = dv.p, a.d_a = da.p, a.d_b = db.p;
  a.d_A_log = dA.p, a.d_dt_bias = dBias.p, a.eps = eps;
  a.d_o = dout.p, a.o_format = c.ofmt;
  if (c.sr) a.rounding = Rounding::Stochastic, a.seed = sr_seed, a.d_pos = dpos.p;
  GdnEagerLaunch le;
  GdnReplayLaunch lr;
  if (eager) {
    le.step = a, le.state_format = sf, le.d_state = dck.p;
    le.heads_per_cta = c.hpc, le.v_tiles = c.vt;
    if (c.l2) le.l2_ahead = *c.l2;
  } else {
    lr.step = a, lr.interval = KI, lr.capacity = cap, lr.route = c.route, lr.ckpt_format = sf, lr.d_ckpt = dck.p;
    lr.dual = dual, lr.read_format = c.read, lr.d_read = dual ? drd->p : nullptr;
    lr.d_read_scale = scaled ? drs->p : nullptr;
    lr.d_ring_u = dru.p, lr.d_ring_k = drk.p, lr.d_ring_G = drG.p, lr.d_fill = dfill.p, lr.d_arrive = darr.p;
    lr.flush_arith = c.flush;
    if (c.l2) lr.l2_ahead = *c.l2;
    lr.v_tiles = c.vt;
  }

  Format judged = eager ? sf : scaled ? c.read : Format::BF16;
  if (c.ofmt == Format::BF16) judged = Format::BF16;
  const Tolerance tol = output_tolerance(judged);
  const bool all_fp32 = sf == Format::FP32 && !dual && c.ofmt == Format::FP32;
  // tf32 / bf16 flush operands: kernel and emulation stage the same operands except where the device's expf moved a
  // weight across an operand rounding boundary (one operand ulp, 2u, on that term); judged against the emulation, not
  // the fp64 budget (3xtf32 keeps every bound).
  const double flush_u = c.flush == Arith::TF32 ? 0x1p-11 : c.flush == Arith::BF16 ? 0x1p-8 : 0.0;
  const bool fp64_budget = flush_u == 0.0 && !scaled;
  const double diff_bound = std::max(all_fp32 ? (eager ? 2e-5 : 1e-3) : tol.rel_max, 4.0 * flush_u);
  double ker_sum = 0, emu_sum = 0, ker_max = 0, diff_max = 0;
  int measured = 0;
  long long unwritten = 0, padded_touched = 0, fill_mismatch = 0;

  std::vector<float> q(rows * QK), k(rows * QK), v(rows * OUT), ag(rows * HV), bg(rows * HV);
  std::vector<double> oref(OUT), oker(OUT);
  std::vector<float> oemu(OUT), qn(QK), kn(QK), kb(QK), r(K), r2(K);
  const float qscale = 1.0f / std::sqrt(static_cast<float>(K));
  for (int step = 0; step < steps; ++step) {
    const bool a16 = c.act == Format::BF16;
    auto gen = [&](std::vector<float>& x, float scale, float shift) {
      for (auto& e : x) e = a16 ? round_bf16(shift + scale * normal(rng)) : shift + scale * normal(rng);
    };
    gen(q, 1.0f, 0.0f), gen(k, 1.0f, 0.0f), gen(v, 1.0f, 0.0f), gen(ag, 1.0f, 0.0f), gen(bg, 1.0f, 0.0f);
    upload(dq, q), upload(dk, k), upload(dv, v), upload(da, ag), upload(db, bg);
    std::vector<int32_t> slots(rows);
    for (int rr = 0; rr < rows; ++rr)
      slots[rr] = (step < start[rr] || (rr == skip_row && step == skip_step)) ? -1 : slot_of[rr];
    dslot.put(slots);
    std::vector<int64_t> pos(rows, -1);
    for (int rr = 0; rr < rows; ++rr)
      if (slots[rr] >= 0) pos[rr] = emu[slots[rr]].pos;
    dpos.put(pos);
    CUDA_CHECK(cudaMemset(dout.p, 0xFF, dout.n));  // NaN in fp32 and bf16
    if (eager)
      gdn_eager_step(le, nullptr);
    else
      gdn_replay_step(lr, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint8_t> obytes = dout.get();
    const std::vector<int32_t> fills = eager ? std::vector<int32_t>() : dfill.get();

    double step_ker = 0, step_emu = 0;
    int active = 0;
    for (int rr = 0; rr < rows; ++rr) {
      const int s = slots[rr];
      if (s < 0) {
        for (size_t i = 0; i < OUT * ow; ++i) padded_touched += obytes[rr * OUT * ow + i] != 0xFF;
        continue;
      }
      ++active;
      EmuSlot& e = emu[s];
      const float* qr = &q[rr * QK];
      const float* kr = &k[rr * QK];
      const float* vr = &v[rr * OUT];
      const float* ar = &ag[rr * HV];
      const float* br = &bg[rr * HV];
      gdn_step_ref(prm, e.ref.data(), qr, kr, vr, ar, br, oref.data());
      for (size_t i = 0; i < OUT; ++i) {
        if (ow == 4) {
          float x;
          std::memcpy(&x, &obytes[(rr * OUT + i) * 4], 4);
          oker[i] = x;
        } else {
          uint16_t u;
          std::memcpy(&u, &obytes[(rr * OUT + i) * 2], 2);
          oker[i] = bf16_bits_to_float(u);
        }
        unwritten += std::isnan(oker[i]);
      }
      // Emulation: normalised q (scaled), k, and the buffered key bf16(k).
      for (int hk = 0; hk < HK; ++hk) {
        const float* qi = qr + hk * K;
        const float* ki = kr + hk * K;
        float sq = 0, sk = 0;
        for (int i = 0; i < K; ++i) sq += qi[i] * qi[i], sk += ki[i] * ki[i];
        const float iq = l2norm_factor<float>(sq, eps, qscale), ik = l2norm_factor<float>(sk, eps, 1.0f);
        for (int i = 0; i < K; ++i) {
          qn[hk * K + i] = qi[i] * iq;
          kn[hk * K + i] = ki[i] * ik;
          kb[hk * K + i] = round_bf16(kn[hk * K + i]);
        }
      }
      const int j = e.fill;
      const bool flush = !eager && j + 1 == KI;
      for (int h = 0; h < HV; ++h) {
        const int hk = h / vpk;
        const float* kh = &kn[hk * K];
        const float* qh = &qn[hk * K];
        const float* kbh = &kb[hk * K];
        const float g = gdn_log_gate<float>(A_log[h], ar[h], dt_bias[h]);
        const float alpha = std::exp(g), beta = sigmoid<float>(br[h]);
        if (eager) {
          for (int i = 0; i < V; ++i) {
            float* S = &e.ck[(static_cast<size_t>(h) * V + i) * K];
            const float kv = dotf(S, kh, K);
            const float u = beta * (vr[h * V + i] - alpha * kv);
            for (int n = 0; n < K; ++n)
              S[n] = store_val(sf, alpha * S[n] + u * kh[n], RandomStream::EagerState, e.pos,
                               static_cast<long long>(s) * SE + (static_cast<long long>(h) * V + i) * K + n);
            oemu[h * V + i] = round_to(c.ofmt, dotf(S, qh, K));
          }
          continue;
        }
        const float G_prev = j > 0 ? e.rG[(j - 1) * HV + h] : 0.0f, G_t = G_prev + g;
        const float dprev = std::exp(G_prev), dt = std::exp(G_t);
        auto key = [&](int x) { return x < j ? &e.rk[(x * HK + hk) * K] : kbh; };
        auto Gof = [&](int x) { return x < j ? e.rG[x * HV + h] : G_t; };
        std::vector<float> wk(j + 1), wq(j + 1), wf(j + 1);
        for (int x = 0; x <= j; ++x) {
          wk[x] = x < j ? std::exp(G_prev - Gof(x)) * (inner ? dotf(key(x), kh, K) : 1.0f) : 0.0f;
          wq[x] = std::exp(G_t - Gof(x)) * dotf(key(x), qh, K);
          wf[x] = std::exp(G_t - Gof(x));
        }
        const std::vector<float>& src = dual && !flush ? e.rd : e.ck;
        std::vector<float> newrows(flush ? static_cast<size_t>(V) * K : 0);
        for (int i = 0; i < V; ++i) {
          const float* S = &src[(static_cast<size_t>(h) * V + i) * K];
          auto u_at = [&](int x) { return e.ru[(x * HV + h) * V + i]; };
          float uj, o;
          if (inner) {
            float rk = 0, rq = 0;
            for (int x = 0; x < j; ++x) rk += wk[x] * u_at(x), rq += wq[x] * u_at(x);
            uj = round_bf16(beta * (vr[h * V + i] - alpha * (dprev * dotf(S, kh, K) + rk)));
            o = dt * dotf(S, qh, K) + rq + wq[j] * uj;
            if (flush) {
              for (int n = 0; n < K; ++n) {
                float acc = dt * S[n];
                for (int x = 0; x < j; ++x) acc = arith_mac(c.flush, acc, wf[x] * u_at(x), key(x)[n]);
                acc = arith_mac(c.flush, acc, wf[j] * uj, kbh[n]);
                newrows[static_cast<size_t>(i) * K + n] = acc;
              }
            }
          } else {
            for (int n = 0; n < K; ++n) r[n] = dprev * S[n];
            for (int x = 0; x < j; ++x) {
              const float w = wk[x] * u_at(x);
              for (int n = 0; n < K; ++n) r[n] += w * key(x)[n];
            }
            uj = round_bf16(beta * (vr[h * V + i] - alpha * dotf(r.data(), kh, K)));
            for (int n = 0; n < K; ++n) r2[n] = alpha * r[n] + uj * kbh[n];
            o = dotf(r2.data(), qh, K);
            if (flush) std::copy(r2.begin(), r2.end(), newrows.begin() + static_cast<size_t>(i) * K);
          }
          oemu[h * V + i] = round_to(c.ofmt, o);
          if (!flush) e.ru[(j * HV + h) * V + i] = uj;
        }
        if (flush) {
          for (size_t x = 0; x < newrows.size(); ++x) {
            const size_t at = static_cast<size_t>(h) * V * K + x;
            const long long el = static_cast<long long>(s) * SE + at;
            e.ck[at] = store_val(sf, newrows[x], RandomStream::CheckpointUpdate, e.pos + 1, el);
            if (dual && !scaled) e.rd[at] = store_val(c.read, e.ck[at], RandomStream::CheckpointRead, e.pos + 1, el);
          }
          if (scaled) {  // a row's scale needs all of its stored update values
            std::vector<uint8_t> codes(K);
            for (int i = 0; i < V; ++i) {
              const size_t r0 = (static_cast<size_t>(h) * V + i) * K;
              scaled_row(c.read, c.sr, &e.ck[r0], K, sr_seed, e.pos + 1, static_cast<long long>(s) * SE + r0,
                         codes.data(), &e.rd[r0]);
            }
          }
        } else {
          e.rG[j * HV + h] = G_t;
          if (h % vpk == 0) std::copy(kbh, kbh + K, e.rk.begin() + (j * HK + hk) * K);
        }
      }
      if (!eager) {
        e.fill = flush ? 0 : j + 1;
        if (flush) e.ref_at_flush = e.ref, e.flush_pos = e.pos + 1;
        fill_mismatch += fills[s] != e.fill;
      }
      ++e.pos;
      step_ker += rel_rms(oker.data(), oref.data(), OUT);
      step_emu += rel_rms(oemu.data(), oref.data(), OUT);
      diff_max = max_nan(diff_max, rel_rms(oker.data(), oemu.data(), OUT));
    }
    if (active > 0) {
      ker_sum += step_ker / active, emu_sum += step_emu / active;
      ker_max = max_nan(ker_max, step_ker / active);
      ++measured;
    }
  }
  const double ker_mean = ker_sum / measured, emu_mean = emu_sum / measured;

  // Final state: eager state / last checkpoint, against the emulation and fp64; untouched slots; dual read copy;
  // the live ring entries.
  const std::vector<uint8_t> ck_now_bytes = dck.get();
  const std::vector<float> ck_now = decode(sf, ck_now_bytes);
  const std::vector<uint8_t> rd_now = dual ? drd->get() : std::vector<uint8_t>();
  const std::vector<float> rs_now = scaled ? drs->get() : std::vector<float>();
  const std::vector<uint16_t> ru_now = eager ? std::vector<uint16_t>() : dru.get();
  const std::vector<uint16_t> rk_now = eager ? std::vector<uint16_t>() : drk.get();
  const std::vector<float> rG_now = eager ? std::vector<float>() : drG.get();
  double st_ref = 0, st_emu = 0, st_emu_ref = 0, ring_u_diff = 0, ring_k_diff = 0, ring_G_diff = 0;
  long long untouched_bad = 0, read_copy_bad = 0, scaled_catches = 0;
  for (int s = 0; s < pool; ++s) {
    if (!used(s)) {
      for (size_t i = 0; i < SE * sb; ++i) untouched_bad += ck_now_bytes[s * SE * sb + i] != 0xA5;
      if (dual)
        for (size_t i = 0; i < SE * rbytes; ++i) untouched_bad += rd_now[s * SE * rbytes + i] != 0xA5;
      if (scaled)
        for (size_t i = 0; i < OUT; ++i) untouched_bad += std::memcmp(&rs_now[s * OUT + i], &kPoisonScale, 4) != 0;
      if (!eager) {
        for (size_t i = 0; i < cap * OUT; ++i) untouched_bad += ru_now[s * cap * OUT + i] != 0x7FC0;
        for (size_t i = 0; i < cap * QK; ++i) untouched_bad += rk_now[s * cap * QK + i] != 0x7FC0;
        for (size_t i = 0; i < static_cast<size_t>(cap) * HV; ++i) untouched_bad += !std::isnan(rG_now[s * cap * HV + i]);
      }
      continue;
    }
    const EmuSlot& e = emu[s];
    const std::vector<double>& ref = eager ? e.ref : e.ref_at_flush;
    st_ref = max_nan(st_ref, rel_rms(&ck_now[s * SE], ref.data(), SE));
    st_emu = max_nan(st_emu, rel_rms(&ck_now[s * SE], e.ck.data(), SE));
    st_emu_ref = max_nan(st_emu_ref, rel_rms(e.ck.data(), ref.data(), SE));
    if (scaled) {  // codes and scale of every row: the quantisation of the update copy's stored row, exactly
      const auto args = std::make_tuple(c.read, c.sr, &ck_now[s * SE], &rd_now[s * SE], &rs_now[s * OUT], OUT, K,
                                        sr_seed, e.flush_pos, static_cast<long long>(s * SE));
      read_copy_bad += std::apply(scaled_copy_mismatches, args);
      scaled_catches += std::apply(scaled_check_catches, args) ? 0 : 1;
    } else if (dual) {
      for (size_t i = 0; i < SE; ++i) {
        uint16_t u;
        std::memcpy(&u, &rd_now[(s * SE + i) * 2], 2);
        const float upd = ck_now[s * SE + i];
        const float want = store_val(c.read, upd, RandomStream::CheckpointRead, e.flush_pos, static_cast<long long>(s * SE + i));
        read_copy_bad += u != (c.read == Format::BF16 ? float_to_bf16_bits(want) : float_to_fp16_bits(want));
      }
    }
    if (!eager && e.fill > 0) {  // live entries 0 .. fill-1
      const size_t nu = e.fill * OUT, nk = e.fill * QK, ng = static_cast<size_t>(e.fill) * HV;
      std::vector<float> u_k(nu), k_k(nk);
      for (size_t i = 0; i < nu; ++i) u_k[i] = bf16_bits_to_float(ru_now[s * cap * OUT + i]);
      for (size_t i = 0; i < nk; ++i) k_k[i] = bf16_bits_to_float(rk_now[s * cap * QK + i]);
      ring_u_diff = max_nan(ring_u_diff, rel_rms(u_k.data(), e.ru.data(), nu));
      ring_k_diff = max_nan(ring_k_diff, rel_rms(k_k.data(), e.rk.data(), nk));
      ring_G_diff = max_nan(ring_G_diff, rel_rms(&rG_now[s * cap * HV], e.rG.data(), ng));
    }
  }
  long long arrive_bad = 0;
  if (!eager)
    for (int32_t x : darr.get()) arrive_bad += x != 0;

  // State bounds: eager fp32 as the outputs; a replay checkpoint carries the bf16 rounding of every buffered u.
  const double state_ref_bound =
      eager ? (sf == Format::FP32 ? 1e-5 : output_tolerance(sf).rel_max) : output_tolerance(Format::BF16).rel_max;
  const double state_emu_bound =
      std::max(sf == Format::FP32 ? (eager ? 2e-5 : 1e-3) : output_tolerance(sf).rel_max, 4.0 * flush_u);
  fmt::print("{:<60} out err mean {:.2e} (emu {:.2e}, {:.0f}% of budget) max {:.2e} | vs emu {:.1e} | state vs fp64 "
             "{:.1e} vs emu {:.1e} | ring u {:.1e} k {:.1e} G {:.1e}\n",
             c.name(), ker_mean, emu_mean, 100.0 * ker_mean / tol.rel_mean, ker_max, diff_max, st_ref, st_emu,
             ring_u_diff, ring_k_diff, ring_G_diff);
  INFO(c.name() << ": kernel error mean " << ker_mean << " max " << ker_max << ", emulation mean " << emu_mean
                << ", max difference to the emulation " << diff_max << " (bound " << diff_bound << "), state vs fp64 "
                << st_ref << " vs emulation " << st_emu << ", ring u " << ring_u_diff << " k " << ring_k_diff << " G "
                << ring_G_diff);
  CHECK(unwritten == 0);
  CHECK(padded_touched == 0);
  CHECK(untouched_bad == 0);
  CHECK(fill_mismatch == 0);
  CHECK(arrive_bad == 0);
  CHECK(read_copy_bad == 0);
  CHECK(scaled_catches == 0);  // the read-copy check counts a corrupted code and scale
  CHECK(ring_u_diff <= 1e-3);
  CHECK(ring_k_diff <= 1e-3);
  CHECK(ring_G_diff <= 1e-5);
  if (fp64_budget) {
    CHECK(ker_mean <= tol.rel_mean);
    CHECK(ker_max <= tol.rel_max);
  }
  CHECK(ker_mean <= 2.0 * emu_mean + 1e-6);
  CHECK(diff_max <= diff_bound);
  CHECK(st_emu <= state_emu_bound);
  if (fp64_budget)
    CHECK(st_ref <= state_ref_bound);
  else
    CHECK(st_ref <= 2.0 * st_emu_ref + 1e-6);
}

GdnDims small() { return {2, 4, 16, 16}; }
GdnDims qwen4b() { return {16, 32, 128, 128}; }
GdnDims qwen122b() { return {16, 64, 128, 128}; }

uint64_t seed_for(const Case& c) { return std::hash<std::string>{}(c.name()) ^ Catch::rngSeed(); }

}  // namespace

TEST_CASE("gdn cuda eager: every state and activation format, small geometry", "[gpu][gdn][eager]") {
  if (!have_device()) return;
  for (Format s : {Format::FP32, Format::BF16, Format::FP16})
    for (Format act : {Format::BF16, Format::FP32}) {
      Case c;
      c.geo = "small", c.dims = small(), c.kind = Kind::Eager, c.state = s, c.act = act;
      c.ofmt = s == Format::BF16 && act == Format::BF16 ? Format::BF16 : Format::FP32;
      run_case(c, seed_for(c));
    }
}

TEST_CASE("gdn cuda eager: Qwen3.5 geometries", "[gpu][gdn][eager]") {
  if (!have_device()) return;
  for (auto [geo, dims] : {std::pair{"qwen35-4b", qwen4b()}, std::pair{"qwen35-122b", qwen122b()}})
    for (Format s : {Format::FP32, Format::BF16}) {
      Case c;
      c.geo = geo, c.dims = dims, c.kind = Kind::Eager, c.state = s;
      run_case(c, seed_for(c));
    }
}

// The eager kernel's tunables change which CTA streams which rows and when they are prefetched, never a value: every
// combination is held to the same bounds. Small geometry: one chunk per head, rows past the value dim; Qwen3.5-4B at
// 5 rows: V split into tiles, each CTA streaming a tile of both value heads of a key head.
TEST_CASE("gdn cuda eager: heads per CTA and L2 prefetch distance", "[gpu][gdn][eager]") {
  if (!have_device()) return;
  for (auto [geo, dims] : {std::pair{"small", small()}, std::pair{"qwen35-4b", qwen4b()}})
    for (Format s : {Format::FP32, Format::BF16})
      for (auto [hpc, l2] : {std::pair{2, -1}, std::pair{2, 0}, std::pair{1, -1}, std::pair{2, 3}}) {
        Case c;
        c.geo = geo, c.dims = dims, c.kind = Kind::Eager, c.state = s, c.hpc = hpc, c.l2 = l2;
        c.sr = s == Format::BF16 && l2 == 3;
        run_case(c, seed_for(c));
        c.vt = 1;  // whole heads: several chunks per head, the stream crossing from one head to the next
        run_case(c, seed_for(c));
      }
}

// The eager launcher's tile rule at serving batch (gdn_eager_v_tiles): fp32 states split each head in two (the shape
// the case above runs at 5 rows, c.vt = 0), 16-bit states keep whole heads; small batches keep gdn_v_tiles' split.
TEST_CASE("gdn cuda eager: v_tiles at serving batch", "[gpu][gdn][eager]") {
  if (!have_device()) return;
  const GdnDims d = qwen4b();
  for (int batch : {64, 256, 512}) {
    CHECK(gdn_eager_v_tiles(d, batch, Format::FP32) == 2);
    CHECK(gdn_eager_v_tiles(d, batch, Format::BF16) == 1);
    CHECK(gdn_v_tiles(d, batch, Format::FP32) == 1);  // what the replay and verify launchers keep
  }
  for (int batch : {1, 5, 8}) CHECK(gdn_eager_v_tiles(d, batch, Format::FP32) == gdn_v_tiles(d, batch, Format::FP32));
  // The replay launcher's small-batch prologue goes with split value dims only at a small batch (on 132 SMs up to 8
  // rows of 32 value heads), never at serving batch, whatever v_tiles is forced.
  for (int batch : {1, 5}) CHECK(gdn_small_batch(d, batch));
  for (int batch : {64, 256}) CHECK_FALSE(gdn_small_batch(d, batch));
}

TEST_CASE("gdn cuda replay: L2 prefetch distance, both routes, shared and dual", "[gpu][gdn][replay]") {
  if (!have_device()) return;
  for (int l2 : {0, 2})
    for (Kind kind : {Kind::Replay, Kind::Dual})
      for (GdnRoute route : {GdnRoute::Inner, GdnRoute::Reconstruct}) {
        Case c;
        c.geo = "qwen35-4b", c.dims = qwen4b(), c.kind = kind, c.route = route, c.interval = 4, c.l2 = l2, c.vt = 1;
        run_case(c, seed_for(c));
      }
}

// Split value dims with bf16 activations at K = 128 run the small-batch kernel (gdn_replay_small_kernel), which
// reads the first chunk and every entry that may be live (poisoned past the fill here) before it knows the cursor:
// 8 tiles (one chunk each, the batch-1 shape) and 32 (4 rows, less than a pass of a 16-bit copy) here; 2 (several
// chunks per tile) is the launcher's choice for the 5 rows of the Qwen3.5-4B case below. Interval 64: entries past
// the 16 it holds in registers.
// One test case per tile count and a section per interval: under compute-sanitizer's racecheck the 24 runs took longer
// than a device call's 600 s together, so a call runs them a part at a time (gpu_sanitize.sh passes `-c "interval 16"`).
static void small_batch_kernel_case(int vt) {
  if (!have_device()) return;
  for (int K : {16, 64})
    DYNAMIC_SECTION("interval " << K) {
      for (GdnRoute route : {GdnRoute::Inner, GdnRoute::Reconstruct}) {
        Case c;
        c.geo = "qwen35-4b", c.dims = qwen4b(), c.route = route, c.interval = K, c.vt = vt;
        for (Format f : {Format::FP32, Format::BF16}) {
          c.kind = Kind::Replay, c.state = f;
          run_case(c, seed_for(c));
        }
        c.kind = Kind::Dual, c.state = Format::FP32, c.read = Format::BF16;
        run_case(c, seed_for(c));
      }
    }
}

TEST_CASE("gdn cuda replay: small-batch kernel, 8 value tiles, both routes, shared and dual", "[gpu][gdn][replay]") {
  small_batch_kernel_case(8);
}

TEST_CASE("gdn cuda replay: small-batch kernel, 32 value tiles, both routes, shared and dual", "[gpu][gdn][replay]") {
  small_batch_kernel_case(32);
}

TEST_CASE("gdn cuda replay: shared checkpoint, both routes, every interval, small geometry", "[gpu][gdn][replay]") {
  if (!have_device()) return;
  for (int K : {1, 4, 16, 32})
    for (GdnRoute route : {GdnRoute::Inner, GdnRoute::Reconstruct})
      for (Format s : {Format::FP32, Format::BF16, Format::FP16}) {
        Case c;
        c.geo = "small", c.dims = small(), c.kind = Kind::Replay, c.route = route, c.state = s, c.interval = K;
        c.act = (K == 4 || K == 32) ? Format::FP32 : Format::BF16;
        c.ofmt = (K == 16 && s == Format::BF16) ? Format::BF16 : Format::FP32;
        run_case(c, seed_for(c));
      }
}

TEST_CASE("gdn cuda dual: fp32 update + bf16/fp16 read copy, both routes, every interval, small geometry",
          "[gpu][gdn][dual]") {
  if (!have_device()) return;
  for (int K : {1, 4, 16, 32})
    for (GdnRoute route : {GdnRoute::Inner, GdnRoute::Reconstruct})
      for (Format r : {Format::BF16, Format::FP16}) {
        Case c;
        c.geo = "small", c.dims = small(), c.kind = Kind::Dual, c.route = route, c.read = r, c.interval = K;
        c.act = K == 4 ? Format::FP32 : Format::BF16;
        run_case(c, seed_for(c));
      }
}

TEST_CASE("gdn cuda dual: fp32 update + block-scaled e4m3 / e5m2 / int8 read copy, both routes",
          "[gpu][gdn][dual][scaled]") {
  if (!have_device()) return;
  for (Format r : {Format::E4M3, Format::E5M2, Format::INT8})
    for (GdnRoute route : {GdnRoute::Inner, GdnRoute::Reconstruct}) {
      for (int K : {1, 4, 16, 32}) {
        Case c;
        c.geo = "small", c.dims = small(), c.kind = Kind::Dual, c.route = route, c.read = r, c.interval = K;
        c.act = K == 4 ? Format::FP32 : Format::BF16;
        run_case(c, seed_for(c));
      }
      Case q;
      q.geo = "qwen35-4b", q.dims = qwen4b(), q.kind = Kind::Dual, q.route = route, q.read = r, q.interval = 16;
      run_case(q, seed_for(q));
      q.interval = 4, q.sr = true;  // stochastic codes with the emulation's words
      run_case(q, seed_for(q));
    }
  for (int K : {4, 16}) {  // the inner route's staged flush operands
    Case c;
    c.geo = "small", c.dims = small(), c.kind = Kind::Dual, c.read = Format::E4M3, c.interval = K, c.flush = Arith::TF32;
    run_case(c, seed_for(c));
  }
}

TEST_CASE("gdn cuda replay and dual: Qwen3.5-4B and Qwen3.5-122B, both routes", "[gpu][gdn][replay][dual]") {
  if (!have_device()) return;
  for (auto [geo, dims] : {std::pair{"qwen35-4b", qwen4b()}, std::pair{"qwen35-122b", qwen122b()}})
    for (int K : {1, 4, 16, 32})
      for (GdnRoute route : {GdnRoute::Inner, GdnRoute::Reconstruct}) {
        Case c;
        c.geo = geo, c.dims = dims, c.kind = Kind::Replay, c.route = route, c.state = Format::FP32, c.interval = K;
        run_case(c, seed_for(c));
        if (K == 16) {
          c.state = Format::BF16;
          run_case(c, seed_for(c));
        }
        Case dcase = c;
        dcase.kind = Kind::Dual, dcase.state = Format::FP32, dcase.read = Format::BF16;
        run_case(dcase, seed_for(dcase));
      }
}

// The inner route's flush folds the ring on tensor cores at K = 128 (GdnReplayLaunch::mma_fold): bf16 mma with each
// weight w_e·u_e split in three bf16 pieces, which keeps fp32 accuracy. The emulation comparisons above allow 1e-3
// (a flipped bf16 rounding of u), too loose to see a lost piece of the split (about 1e-5 relative) or a tile-order
// slip; here one flush step from identical checkpoints and rings runs through both folds and the stored rows must
// agree to fp32 rounding: at most 1% of state rows (a row whose u_t rounds to the other bf16 neighbour under the two
// kernels' dot orders) above 2e-6 relative, none above 1e-2. A corrupted ring entry in one run must break that.
TEST_CASE("gdn cuda replay: the tensor-core flush against the FFMA flush (Qwen3.5-4B, fp32, bf16 and dual)",
          "[gpu][gdn][replay][dual]") {
  if (!have_device()) return;
  const GdnDims d = qwen4b();
  const int HK = d.HK, HV = d.HV, K = d.K, V = d.V, rows = 6, pool = 8;
  const size_t SE = static_cast<size_t>(HV) * V * K, OUT = static_cast<size_t>(HV) * V,
               QK = static_cast<size_t>(HK) * K;
  struct Run {
    int interval, vt;
    Format state;
    bool dual, corrupt;
  };
  for (Run run : {Run{16, 1, Format::FP32, false, false}, Run{16, 0, Format::FP32, false, false},
                  Run{32, 1, Format::FP32, false, false}, Run{16, 1, Format::FP32, true, false},
                  Run{16, 1, Format::BF16, false, false}, Run{16, 0, Format::FP32, true, false},
                  Run{16, 1, Format::FP32, false, true}}) {
    const int KI = run.interval, cap = KI, j = KI - 1;  // every row flushes: fill interval − 1
    const std::string name = fmt::format("K={} v_tiles={} state={}{}{}", KI, run.vt, format_name(run.state),
                                         run.dual ? "+bf16" : "", run.corrupt ? " corrupted ring" : "");
    std::mt19937_64 rng(std::hash<std::string>{}(name) ^ Catch::rngSeed());
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const Format sf = run.dual ? Format::FP32 : run.state;
    std::vector<float> ck(pool * SE);
    for (auto& x : ck) x = round_to(sf, 0.3f * normal(rng));
    std::vector<uint16_t> ru(pool * cap * OUT, 0x7FC0), rk(pool * cap * QK, 0x7FC0);
    std::vector<float> rG(pool * cap * HV, NAN);
    for (int s = 0; s < pool; ++s)
      for (int e = 0; e < j; ++e) {
        for (size_t i = 0; i < OUT; ++i) ru[(s * cap + e) * OUT + i] = float_to_bf16_bits(0.5f * normal(rng));
        for (int hk = 0; hk < HK; ++hk) {
          std::vector<float> kv(K);
          float ss = 0;
          for (auto& x : kv) x = normal(rng), ss += x * x;
          for (int n = 0; n < K; ++n) rk[((s * cap + e) * HK + hk) * K + n] = float_to_bf16_bits(kv[n] / std::sqrt(ss));
        }
        for (int h = 0; h < HV; ++h)
          rG[(s * cap + e) * HV + h] = (e ? rG[(s * cap + e - 1) * HV + h] : 0.0f) - 0.05f * std::fabs(normal(rng));
      }
    const size_t aw = 2;
    std::vector<float> q(rows * QK), k(rows * QK), v(rows * OUT), ag(rows * HV), bg(rows * HV);
    for (auto* x : {&q, &k, &v, &ag, &bg})
      for (auto& e : *x) e = round_bf16(normal(rng));
    std::vector<int32_t> slots = {3, 0, 7, -1, 5, 2};  // one padded row; slots a permutation
    // Two independent copies of everything a step writes; A folds on tensor cores, B with FFMA.
    struct Copy {
      DevBuf<uint8_t> ck, rd;
      DevBuf<uint16_t> ru, rk;
      DevBuf<float> rG;
      DevBuf<int32_t> fill, arr;
      DevBuf<uint8_t> out;
      Copy(size_t ckb, size_t rdb, size_t nu, size_t nk, size_t ng, int pool, size_t outb)
          : ck(ckb), rd(rdb), ru(nu), rk(nk), rG(ng), fill(pool), arr(pool), out(outb) {}
    };
    const size_t ckb = pool * SE * width(sf), rdb = run.dual ? pool * SE * 2 : 1;
    Copy A(ckb, rdb, ru.size(), rk.size(), rG.size(), pool, rows * OUT * 4),
        B(ckb, rdb, ru.size(), rk.size(), rG.size(), pool, rows * OUT * 4);
    DevBuf<int32_t> dslot(rows);
    dslot.put(slots);
    DevBuf<uint8_t> dq(rows * QK * aw), dk(rows * QK * aw), dv(rows * OUT * aw), da(rows * HV * aw),
        db(rows * HV * aw);
    dq.put(encode(Format::BF16, q)), dk.put(encode(Format::BF16, k)), dv.put(encode(Format::BF16, v));
    da.put(encode(Format::BF16, ag)), db.put(encode(Format::BF16, bg));
    std::vector<float> A_log(HV), dt_bias(HV);
    for (int h = 0; h < HV; ++h) A_log[h] = 0.5f * normal(rng), dt_bias[h] = 0.5f * normal(rng);
    DevBuf<float> dA(HV), dBias(HV);
    dA.put(A_log), dBias.put(dt_bias);
    for (Copy* c : {&A, &B}) {
      c->ck.put(encode(sf, ck));
      c->ru.put(ru), c->rk.put(rk), c->rG.put(rG);
      c->fill.put(std::vector<int32_t>(pool, j));
      c->arr.put(std::vector<int32_t>(pool, 0));
      CUDA_CHECK(cudaMemset(c->out.p, 0xFF, c->out.n));
    }
    if (run.corrupt) {  // one u entry of row 0's slot, value head 5, in B only
      std::vector<uint16_t> bad = ru;
      for (int i = 0; i < V; ++i) bad[(static_cast<size_t>(slots[0]) * cap + 3) * OUT + 5 * V + i] = float_to_bf16_bits(8.0f);
      B.ru.put(bad);
    }
    for (Copy* c : {&A, &B}) {
      GdnReplayLaunch l;
      l.step.dims = d, l.step.batch = rows, l.step.d_slot = dslot.p, l.step.act_format = Format::BF16;
      l.step.d_q = dq.p, l.step.d_k = dk.p, l.step.d_v = dv.p, l.step.d_a = da.p, l.step.d_b = db.p;
      l.step.d_A_log = dA.p, l.step.d_dt_bias = dBias.p, l.step.eps = 1e-6f;
      l.step.d_o = c->out.p, l.step.o_format = Format::FP32;
      l.interval = KI, l.capacity = cap, l.route = GdnRoute::Inner, l.ckpt_format = sf, l.d_ckpt = c->ck.p;
      l.dual = run.dual, l.read_format = Format::BF16, l.d_read = run.dual ? c->rd.p : nullptr;
      l.d_ring_u = c->ru.p, l.d_ring_k = c->rk.p, l.d_ring_G = c->rG.p, l.d_fill = c->fill.p, l.d_arrive = c->arr.p;
      l.v_tiles = run.vt;
      l.mma_fold = c == &A;
      gdn_replay_step(l, nullptr);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    // Checkpoint rows (and the dual read copy's) of the active slots; padded slots untouched.
    const auto decode = [&](const std::vector<uint8_t>& b, Format f) {
      std::vector<float> x(b.size() / width(f));
      for (size_t i = 0; i < x.size(); ++i) {
        if (f == Format::FP32) {
          std::memcpy(&x[i], &b[4 * i], 4);
        } else {
          uint16_t u;
          std::memcpy(&u, &b[2 * i], 2);
          x[i] = bf16_bits_to_float(u);
        }
      }
      return x;
    };
    const std::vector<float> cA = decode(A.ck.get(), sf), cB = decode(B.ck.get(), sf);
    const double row_tol = sf == Format::FP32 ? 2e-6 : 5e-3;  // a 16-bit row: one element a bf16 step apart
    int over = 0, total = 0;
    double worst = 0, changed = 0;
    for (int r = 0; r < rows; ++r) {
      if (slots[r] < 0) continue;
      for (size_t row = 0; row < OUT; ++row, ++total) {
        const size_t o = static_cast<size_t>(slots[r]) * SE + row * K;
        double num = 0, den = 0, dif = 0;
        for (int n = 0; n < K; ++n) {
          num += (cA[o + n] - cB[o + n]) * double(cA[o + n] - cB[o + n]), den += double(cB[o + n]) * cB[o + n];
          dif += std::fabs(cB[o + n] - ck[o + n]);
        }
        double rel = std::sqrt(num / std::max(den, 1e-30));
        if (!std::isfinite(rel)) rel = INFINITY;  // a NaN row must count, not slip through the comparisons
        over += rel > row_tol, worst = std::max(worst, rel), changed += dif;
      }
    }
    std::vector<float> oA = decode(A.out.get(), Format::FP32), oB = decode(B.out.get(), Format::FP32);
    double onum = 0, oden = 0;
    long long unwritten = 0;
    for (int r = 0; r < rows; ++r)
      for (size_t i = 0; i < OUT; ++i) {
        const float a = oA[r * OUT + i], b = oB[r * OUT + i];
        if (slots[r] < 0) {
          unwritten += !std::isnan(a) || !std::isnan(b);  // padded rows' outputs stay poisoned
          continue;
        }
        unwritten += std::isnan(a) || std::isnan(b);
        onum += double(a - b) * (a - b), oden += double(b) * b;
      }
    fmt::print("tensor-core vs FFMA flush, {:<40} state rows over {:.0e}: {}/{}, worst {:.2e}; outputs {:.2e}\n", name,
               row_tol, over, total, worst, std::sqrt(onum / oden));
    INFO(name << ": " << over << " of " << total << " state rows over " << row_tol << ", worst " << worst);
    CHECK(changed > 0);  // the flush wrote the checkpoint
    CHECK(unwritten == 0);
    if (run.corrupt) {
      CHECK(worst > 1e-2);  // the comparison can fail
      continue;
    }
    CHECK(over <= total / 100);
    CHECK(worst <= 1e-2);
    CHECK(std::sqrt(onum / oden) <= 1e-5);  // false for NaN too
    if (run.dual) {  // the read copies: the update copies' rows rounded, so equal wherever those are
      const std::vector<float> dA16 = decode(A.rd.get(), Format::BF16), dB16 = decode(B.rd.get(), Format::BF16);
      long long differ = 0, unrounded = 0;
      for (int r = 0; r < rows; ++r)
        if (slots[r] >= 0)
          for (size_t i = 0; i < SE; ++i) {
            const size_t o = static_cast<size_t>(slots[r]) * SE + i;
            differ += dA16[o] != dB16[o];
            unrounded += dA16[o] != round_bf16(cA[o]);
          }
      CHECK(unrounded == 0);
      CHECK(differ <= static_cast<long long>(5 * SE / 1000));
    }
  }
}

TEST_CASE("gdn cuda replay and dual: flush arithmetic tf32, 3xtf32, bf16 operands (inner route)", "[gpu][gdn][arith]") {
  if (!have_device()) return;
  for (Arith m : {Arith::TF32, Arith::TF32x3, Arith::BF16})
    for (int K : {1, 4, 16, 64}) {
      for (Kind kind : {Kind::Replay, Kind::Dual}) {
        Case c;
        c.geo = "small", c.dims = small(), c.kind = kind, c.interval = K, c.flush = m;
        run_case(c, seed_for(c));
      }
      if (K == 16) {
        Case c;
        c.geo = "qwen35-4b", c.dims = qwen4b(), c.kind = Kind::Replay, c.interval = K, c.flush = m;
        run_case(c, seed_for(c));
      }
    }
}

TEST_CASE("gdn cuda: stochastic rounding of the eager state, the checkpoint and the read copy, both routes",
          "[gpu][gdn][sr]") {
  if (!have_device()) return;
  for (auto [geo, dims] : {std::pair{"small", small()}, std::pair{"qwen35-4b", qwen4b()}}) {
    for (Format s : {Format::BF16, Format::FP16}) {
      Case c;
      c.geo = geo, c.dims = dims, c.kind = Kind::Eager, c.state = s, c.sr = true;
      run_case(c, seed_for(c));
      for (GdnRoute route : {GdnRoute::Inner, GdnRoute::Reconstruct})
        for (int K : {1, 4, 16}) {
          Case r;
          r.geo = geo, r.dims = dims, r.kind = Kind::Replay, r.route = route, r.state = s, r.interval = K, r.sr = true;
          run_case(r, seed_for(r));
          Case d = r;
          d.kind = Kind::Dual, d.state = Format::FP32, d.read = s;
          run_case(d, seed_for(d));
        }
    }
  }
}

TEST_CASE("gdn cuda launchers reject bad launch structs with a message naming the field", "[gpu][gdn]") {
  if (!have_device()) return;
  GdnReplayLaunch l;
  l.step.dims = small();
  l.step.batch = 1;
  CHECK_THROWS_WITH(gdn_replay_step(l, nullptr), Catch::Contains("d_slot"));
  l.route = GdnRoute::Reconstruct, l.flush_arith = Arith::TF32;
  CHECK_THROWS_WITH(gdn_replay_step(l, nullptr), Catch::Contains("flush_arith tf32 needs route inner"));
  {  // a block-scaled read copy needs its scales
    int32_t* buf = nullptr;
    CUDA_CHECK(cudaMalloc(&buf, 64));
    GdnReplayLaunch d;
    d.step.dims = small();
    d.step.batch = 1;
    d.step.d_slot = buf, d.step.d_q = buf, d.step.d_k = buf, d.step.d_v = buf, d.step.d_a = buf, d.step.d_b = buf;
    d.step.d_o = buf, d.step.d_A_log = reinterpret_cast<float*>(buf), d.step.d_dt_bias = d.step.d_A_log;
    d.d_ckpt = buf, d.d_ring_u = reinterpret_cast<uint16_t*>(buf), d.d_ring_k = d.d_ring_u;
    d.d_ring_G = reinterpret_cast<float*>(buf), d.d_fill = buf, d.d_arrive = buf;
    d.dual = true, d.read_format = Format::INT8, d.d_read = buf;
    CHECK_THROWS_WITH(gdn_replay_step(d, nullptr), Catch::Contains("d_read_scale"));
    d.read_format = Format::FP64;
    CHECK_THROWS_WITH(gdn_replay_step(d, nullptr), Catch::Contains("read_format"));
    cudaFree(buf);
  }
  GdnEagerLaunch e;
  e.step.dims = {3, 4, 16, 16};
  e.step.batch = 1;
  CHECK_THROWS_WITH(gdn_eager_step(e, nullptr), Catch::Contains("multiple of HK"));
  e.step.dims = small();
  e.step.batch = 0;  // the tunables are checked before an empty launch returns
  e.heads_per_cta = 3;
  CHECK_THROWS_WITH(gdn_eager_step(e, nullptr), Catch::Contains("heads_per_cta"));
  e.heads_per_cta = 0, e.v_tiles = 17;
  CHECK_THROWS_WITH(gdn_eager_step(e, nullptr), Catch::Contains("v_tiles"));
  l.route = GdnRoute::Inner, l.flush_arith = Arith::FP32, l.step.batch = 0;
  l.v_tiles = 17;
  CHECK_THROWS_WITH(gdn_replay_step(l, nullptr), Catch::Contains("v_tiles"));
}
