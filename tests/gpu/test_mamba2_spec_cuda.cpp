// GPU tests of the Mamba-2 speculative-decoding kernels (mamba2_verify, mamba2_eager_verify with the shared
// spec_commit; common/spec_kernels.h), label `gpu`; each test prints a message and passes when no CUDA device exists.
// Run: replayssm_gpu_tests "[mamba2][spec]".
// Every case drives windows of T positions per row: position 0 and the accepted drafts carry the row's true token
// stream, rejected drafts carry other random inputs (a rollback that keeps them shows), the accepted count is drawn
// per row and window, and the commit advances the rows on the device. Cases:
//   (a) all drafts accepted, T | interval, hist = interval + T: the verify's deferred flushes fold exactly the tokens
//       the standard step's flushes fold, so verify + commit must give mamba2_replay_step's outputs token by token
//       and the same checkpoint after every flush; fp32 within the table's fp32 bound, a bf16 or dual checkpoint
//       within the read format's (a dual flush step of the standard kernel reads the fp32 copy, the window the read
//       copy); the bit-equal share is printed;
//   (b) random accepted counts, rows at different fills (staggered start, a row sitting out windows), a padded row,
//       tightest hist (interval + T: early flushes) and a roomy one with a ring larger than needed: committed outputs
//       against the fp64 reference of the committed stream within metrics/tolerance.h, checkpoints after every flush
//       against the fp64 state at the same folded count (and a dual read copy equal to the rounding of the update
//       copy, code for code), d_fill and d_base equal to a host model of the commit, outputs NaN-poisoned before
//       each launch (every committed output written, padded and sitting-out rows untouched), an unused slot
//       untouched;
//   (c) the eager baseline against mamba2_eager_step run token by token on the committed stream: bitwise equal
//       outputs, final state and d_cur;
//   (d) a corrupted committed ring entry (x of the newest) changes that row's next outputs and nothing else;
//   (e) bad launch structs are rejected with a message naming the field;
//   (f) the grouped verify kernel (heads_per_cta > 1, what mamba2_verify picks at serving batches) through (a), (b)
//       and (d), and bit for bit against the per-head kernel (outputs, checkpoints, read copies, rings, over random
//       acceptance with early flushes, a padded row and a row sitting out).
#include <catch2/catch.hpp>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/spec_kernels.h"
#include "mamba2/mamba2_kernels.h"
#include "metrics/tolerance.h"
#include "model/mamba2.h"
#include "numeric/bits.h"

#include "gpu_test_util.h"

using namespace rssm;
using namespace rssm::gpu_test;

namespace {

struct Geo {
  const char* name;
  Mamba2Dims dims;
  bool has_z;  // the small geometry gates its outputs, Super-120B runs the ungated path
};
const Geo kSmall{"small", {8, 16, 32, 2}, true};
const Geo kSuper{"super-120b", {128, 64, 128, 8}, false};
const Geo kGeos[] = {kSmall, kSuper};

// One token's raw inputs of one row, already on the activation grid.
struct Tok {
  std::vector<float> x, dt, B, C, z;
};

// The layer (parameters on host and device), the token generator, and the window input buffers [rows·T, ...].
struct Layer {
  Mamba2Dims d;
  bool has_z;
  Format act = Format::BF16;
  int rows = 0, T = 1;
  size_t HP, GN;
  Mamba2Params prm;
  std::unique_ptr<DevBuf<float>> dA, dBias, dD;
  std::unique_ptr<DevBuf<uint8_t>> dx, ddt, dB, dC, dz;
  std::mt19937_64 rng;
  std::normal_distribution<float> normal{0.0f, 1.0f};
  std::uniform_real_distribution<float> uni{0.0f, 1.0f};

  Layer(const Geo& g, int rows_, int T_, uint64_t seed) : d(g.dims), has_z(g.has_z), rows(rows_), T(T_), rng(seed) {
    HP = static_cast<size_t>(d.H) * d.P, GN = static_cast<size_t>(d.G) * d.N;
    prm.H = d.H, prm.P = d.P, prm.N = d.N, prm.G = d.G, prm.has_z = has_z;
    // The ranges test_mamba2_cuda uses (A in [-8, -0.5], Δ about 0.005..0.2), plus one head that barely decays so
    // Λ runs over many entries without reaching the exp floor.
    std::vector<float> A_log(d.H), dt_bias(d.H), D(d.H);
    for (int h = 0; h < d.H; ++h) {
      A_log[h] = std::log(0.5f + 7.5f * uni(rng));
      dt_bias[h] = std::log(std::expm1(0.005f + 0.2f * uni(rng)));
      D[h] = normal(rng);
    }
    A_log[d.H - 1] = std::log(1e-3f);
    prm.A_log.assign(A_log.begin(), A_log.end());
    prm.dt_bias.assign(dt_bias.begin(), dt_bias.end());
    prm.D.assign(D.begin(), D.end());
    dA = std::make_unique<DevBuf<float>>(d.H), dBias = std::make_unique<DevBuf<float>>(d.H);
    dD = std::make_unique<DevBuf<float>>(d.H);
    dA->put(A_log), dBias->put(dt_bias), dD->put(D);
    const size_t n = static_cast<size_t>(rows) * T, aw = width(act);
    dx = std::make_unique<DevBuf<uint8_t>>(n * HP * aw), dz = std::make_unique<DevBuf<uint8_t>>(n * HP * aw);
    ddt = std::make_unique<DevBuf<uint8_t>>(n * d.H * aw);
    dB = std::make_unique<DevBuf<uint8_t>>(n * GN * aw), dC = std::make_unique<DevBuf<uint8_t>>(n * GN * aw);
  }
  Tok token() {
    auto gen = [&](size_t n, float scale) {
      std::vector<float> v(n);
      for (auto& e : v) e = round_to(act, scale * normal(rng));
      return v;
    };
    Tok t;
    t.x = gen(HP, 1.0f), t.dt = gen(d.H, 0.5f), t.B = gen(GN, 1.0f), t.C = gen(GN, 1.0f);
    if (has_z) t.z = gen(HP, 1.0f);
    return t;
  }
  // Uploads window inputs: pos[r][s] is row r's position s.
  void upload(const std::vector<std::vector<Tok>>& pos) {
    const size_t n = static_cast<size_t>(rows) * T;
    std::vector<float> x(n * HP), dt(n * d.H), B(n * GN), C(n * GN), z(n * HP);
    for (int r = 0; r < rows; ++r)
      for (int s = 0; s < T; ++s) {
        const Tok& t = pos[r][s];
        const size_t i = static_cast<size_t>(r) * T + s;
        std::copy(t.x.begin(), t.x.end(), x.begin() + i * HP), std::copy(t.dt.begin(), t.dt.end(), dt.begin() + i * d.H);
        std::copy(t.B.begin(), t.B.end(), B.begin() + i * GN), std::copy(t.C.begin(), t.C.end(), C.begin() + i * GN);
        if (has_z) std::copy(t.z.begin(), t.z.end(), z.begin() + i * HP);
      }
    dx->put(encode(act, x)), ddt->put(encode(act, dt)), dB->put(encode(act, B)), dC->put(encode(act, C));
    if (has_z) dz->put(encode(act, z));
  }
  // Step args over the window buffers; pos_only >= 0 views only position pos_only of every row (a standard step
  // over that position: row strides of T positions).
  Mamba2StepArgs args(const int32_t* d_slot, void* d_y, Format yfmt, int pos_only = -1) const {
    Mamba2StepArgs a;
    a.dims = d, a.batch = rows, a.d_slot = d_slot, a.act_format = act;
    const size_t aw = width(act), s = pos_only < 0 ? 0 : static_cast<size_t>(pos_only);
    a.d_x = dx->p + s * HP * aw, a.d_dt = ddt->p + s * d.H * aw, a.d_B = dB->p + s * GN * aw;
    a.d_C = dC->p + s * GN * aw, a.d_z = has_z ? dz->p + s * HP * aw : nullptr;
    if (pos_only >= 0) {
      a.x_stride = static_cast<long long>(T) * HP, a.z_stride = a.x_stride, a.y_stride = a.x_stride;
      a.dt_stride = static_cast<long long>(T) * d.H, a.bc_stride = static_cast<long long>(T) * GN;
      d_y = static_cast<uint8_t*>(d_y) + s * HP * width(yfmt);
    }
    a.d_A_log = dA->p, a.d_dt_bias = dBias->p, a.d_D = dD->p;
    a.d_y = d_y, a.y_format = yfmt;
    return a;
  }
};

// Checkpoint configuration of a replay verify case.
struct Ckpt {
  Format fmt = Format::FP32;  // shared checkpoint format, or the update copy's (fp32) when dual
  bool dual = false;
  Format read = Format::BF16;
  std::string name() const { return dual ? "fp32+" + format_name(read) : format_name(fmt); }
  Format judged() const { return dual ? read : fmt; }
};

// Heads per CTA of every verify launch of the cases (Mamba2VerifyLaunch::heads_per_cta; 0: the launcher's pick, which
// is the per-head kernel at these cases' few rows). Case (f) sets it; launch() and the case names read it.
int g_heads = 0;
std::string heads_tag() { return g_heads > 0 ? fmt::format(" heads={}", g_heads) : std::string(); }
// Mamba2VerifyLaunch::flush_l2_ahead of every verify launch (the grouped kernel's flushing rows); case (f) runs the
// launch struct's default and, at N = 128 (where the kernel has the window), once the other setting.
int g_flush_l2 = Mamba2VerifyLaunch{}.flush_l2_ahead;

constexpr uint16_t kRingPoison = 0x7FC0;  // a bf16 NaN: a stale ring entry read shows in the outputs

// Device state of the replay verify (or of the standard replay step, which uses the same buffers with a linear ring):
// checkpoint (and read copy), ring, cursors.
struct VerifyState {
  int pool, cap;
  size_t SE, HP, GN;
  int H;
  Ckpt ck;
  std::unique_ptr<DevBuf<uint8_t>> dck, drd;
  std::unique_ptr<DevBuf<uint16_t>> drx, drB;
  std::unique_ptr<DevBuf<float>> ddl;
  std::unique_ptr<DevBuf<int32_t>> dfill, dbase;
  std::vector<int32_t> base0;
  VerifyState(const Mamba2Dims& d, int pool_, int cap_, Ckpt c, const std::vector<float>& init, int unused_slot)
      : pool(pool_), cap(cap_), H(d.H), ck(c) {
    SE = static_cast<size_t>(d.H) * d.P * d.N, HP = static_cast<size_t>(d.H) * d.P, GN = static_cast<size_t>(d.G) * d.N;
    std::vector<uint8_t> b = encode(ck.fmt, init);
    if (unused_slot >= 0) std::memset(&b[unused_slot * SE * width(ck.fmt)], 0xA5, SE * width(ck.fmt));
    dck = std::make_unique<DevBuf<uint8_t>>(b.size());
    dck->put(b);
    if (ck.dual) {
      std::vector<float> r(init.size());
      for (size_t i = 0; i < r.size(); ++i) r[i] = round_to(ck.read, init[i]);
      std::vector<uint8_t> rb = encode(ck.read, r);
      if (unused_slot >= 0) std::memset(&rb[unused_slot * SE * 2], 0xA5, SE * 2);
      drd = std::make_unique<DevBuf<uint8_t>>(rb.size());
      drd->put(rb);
    }
    drx = std::make_unique<DevBuf<uint16_t>>(pool * cap * HP), drB = std::make_unique<DevBuf<uint16_t>>(pool * cap * GN);
    ddl = std::make_unique<DevBuf<float>>(pool * cap * H * 2);
    drx->put(std::vector<uint16_t>(drx->n, kRingPoison)), drB->put(std::vector<uint16_t>(drB->n, kRingPoison));
    ddl->put(std::vector<float>(ddl->n, NAN));
    dfill = std::make_unique<DevBuf<int32_t>>(pool), dbase = std::make_unique<DevBuf<int32_t>>(pool);
    dfill->put(std::vector<int32_t>(pool, 0));
    // Bases start away from 0 so the ring wraps early.
    base0.resize(pool);
    for (int s = 0; s < pool; ++s) base0[s] = (3 * s + 1) & (cap - 1);
    dbase->put(base0);
  }
  Mamba2VerifyLaunch launch(const Mamba2StepArgs& a, int T, int interval, int hist) const {
    Mamba2VerifyLaunch l;
    l.step = a, l.window = T, l.interval = interval, l.hist = hist, l.capacity = cap;
    l.ckpt_format = ck.fmt, l.d_ckpt = dck->p, l.dual = ck.dual, l.read_format = ck.read;
    l.d_read = ck.dual ? drd->p : nullptr;
    l.d_ring_x = drx->p, l.d_ring_B = drB->p, l.d_ring_dl = ddl->p, l.d_fill = dfill->p, l.d_base = dbase->p;
    l.heads_per_cta = g_heads, l.flush_l2_ahead = g_flush_l2;
    return l;
  }
  SpecCommitLaunch commit(int rows, const int32_t* d_slot, const int32_t* d_acc, int T, int interval, int hist) const {
    SpecCommitLaunch c;
    c.batch = rows, c.d_slot = d_slot, c.d_accepted = d_acc, c.window = T, c.interval = interval, c.hist = hist;
    c.capacity = cap, c.d_fill = dfill->p, c.d_base = dbase->p;
    return c;
  }
  // The checkpoint (update copy) of one slot as floats.
  std::vector<float> slot_ckpt(int s) const {
    const size_t w = width(ck.fmt);
    std::vector<uint8_t> b(SE * w);
    CUDA_CHECK(cudaMemcpy(b.data(), dck->p + s * SE * w, b.size(), cudaMemcpyDeviceToHost));
    std::vector<float> v(SE);
    for (size_t i = 0; i < SE; ++i) v[i] = decode_at(ck.fmt, b.data(), i);
    return v;
  }
  void copy_from(const VerifyState& o) {
    dck->copy_from(*o.dck), drx->copy_from(*o.drx), drB->copy_from(*o.drB), ddl->copy_from(*o.ddl);
    dfill->copy_from(*o.dfill), dbase->copy_from(*o.dbase);
    if (ck.dual) drd->copy_from(*o.drd);
  }
};

std::vector<float> random_state(std::mt19937_64& rng, size_t n, Format f) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& e : v) e = round_to(f, 0.5f * normal(rng));
  return v;
}

uint64_t seed_of(const std::string& name) { return std::hash<std::string>{}(name) ^ Catch::rngSeed(); }

// test_mamba2_cuda's bound on an fp32 checkpoint against fp64 (the fold's fp32 error over one interval, with
// headroom); a narrow checkpoint is held to its format's output bound, its rounding dominating.
double state_bound(Format f) { return f == Format::FP32 ? 1e-5 : output_tolerance(f).rel_max; }

// ---- (a) all accepted: verify + commit equals the standard replay step ----
void run_all_accepted(const Geo& g, int T, int interval, Ckpt ck) {
  const std::string name =
      fmt::format("{} all-accepted T={} K={} ckpt={}{}", g.name, T, interval, ck.name(), heads_tag());
  const int rows = 3, pool = 4, hist = interval + T, cap = spec_ring_capacity(hist, T), windows = 3 * interval / T + 2;
  const Mamba2Dims d = g.dims;
  Layer L(g, rows, T, seed_of(name));
  const size_t SE = static_cast<size_t>(d.H) * d.P * d.N, HP = L.HP;
  const std::vector<int32_t> slots = {2, 0, 3};
  const std::vector<float> init = random_state(L.rng, pool * SE, ck.fmt);
  VerifyState vs(d, pool, cap, ck, init, 1);
  // The standard replay step over the same tokens: its own checkpoint and ring (capacity = interval, no wrap).
  VerifyState rs(d, pool, interval, ck, init, 1);
  DevBuf<int32_t> darr(pool), dslot(rows), dacc(rows);
  darr.put(std::vector<int32_t>(pool, 0));
  dslot.put(slots);
  dacc.put(std::vector<int32_t>(rows, T));
  DevBuf<float> dov(rows * T * HP), dor(rows * T * HP);
  Mamba2ReplayLaunch rl;
  rl.interval = interval, rl.capacity = interval, rl.ckpt_format = ck.fmt, rl.d_ckpt = rs.dck->p;
  rl.dual = ck.dual, rl.read_format = ck.read, rl.d_read = ck.dual ? rs.drd->p : nullptr;
  rl.d_ring_x = rs.drx->p, rl.d_ring_B = rs.drB->p, rl.d_ring_dl = rs.ddl->p, rl.d_fill = rs.dfill->p;
  rl.d_arrive = darr.p;
  const bool fp32 = ck.fmt == Format::FP32 && !ck.dual;
  const double bound = output_tolerance(fp32 ? Format::FP32 : ck.judged()).rel_max;
  double out_diff = 0, ck_diff = 0;
  long long equal = 0, total = 0, ck_compared = 0;
  int fill = 0;  // every row's committed fill (all rows advance together)
  for (int w = 0; w < windows; ++w) {
    std::vector<std::vector<Tok>> pos(rows);
    for (int r = 0; r < rows; ++r)
      for (int s = 0; s < T; ++s) pos[r].push_back(L.token());
    L.upload(pos);
    CUDA_CHECK(cudaMemset(dov.p, 0xFF, dov.n * 4));
    CUDA_CHECK(cudaMemset(dor.p, 0xFF, dor.n * 4));
    const bool flush = spec_flushes(fill, interval, T, hist);
    mamba2_verify(vs.launch(L.args(dslot.p, dov.p, Format::FP32), T, interval, hist), nullptr);
    spec_commit(vs.commit(rows, dslot.p, dacc.p, T, interval, hist), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    fill = flush ? T : fill + T;
    if (flush) {  // the standard step flushed on the previous window's last token: both folded the same tokens
      for (int r = 0; r < rows; ++r) {
        const std::vector<float> a = vs.slot_ckpt(slots[r]), b = rs.slot_ckpt(slots[r]);
        ck_diff = max_nan(ck_diff, rel_rms(a.data(), b.data(), SE));
      }
      ++ck_compared;
    }
    for (int s = 0; s < T; ++s) {
      rl.step = L.args(dslot.p, dor.p, Format::FP32, s);
      mamba2_replay_step(rl, nullptr);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> ov = dov.get(), orr = dor.get();
    for (int x = 0; x < rows * T; ++x) {
      out_diff = max_nan(out_diff, rel_rms(&ov[x * HP], &orr[x * HP], HP));
      for (size_t i = 0; i < HP; ++i) equal += std::memcmp(&ov[x * HP + i], &orr[x * HP + i], 4) == 0;
      total += HP;
    }
  }
  fmt::print("{:<60} vs replay step: out diff {:.1e} ({:.2f}% bit-equal), checkpoint diff {:.1e} at {} flushes\n", name,
             out_diff, 100.0 * equal / total, ck_diff, ck_compared);
  INFO(name << ": max output difference to mamba2_replay_step " << out_diff << " (bound " << bound << "), bit-equal "
            << equal << " of " << total << ", checkpoint difference " << ck_diff);
  CHECK(ck_compared >= 2);
  CHECK(out_diff <= bound);
  CHECK(ck_diff <= bound);
}

// ---- (b) random acceptance against the fp64 reference of the committed stream ----
// roomy: hist 2·interval + T and a ring twice the size needed (flushes only at the interval; masks of a larger ring).
void run_random(const Geo& g, int T, int interval, Ckpt ck, Format yfmt = Format::FP32, bool roomy = false) {
  const std::string name = fmt::format("{} random T={} K={} ckpt={}{}{}{}", g.name, T, interval, ck.name(),
                                       yfmt == Format::BF16 ? " y=bf16" : "", roomy ? " roomy" : "", heads_tag());
  // Row 3 is always padded; row 1 starts late; row 2 sits out some windows; slot 1 is never used.
  const int rows = 4, pool = 5;
  const int hist = roomy ? 2 * interval + T : interval + T;
  const int cap = roomy ? 2 * spec_ring_capacity(hist, T) : spec_ring_capacity(hist, T);
  const std::vector<int32_t> slot_of = {4, 2, 0, -1};
  const int need = 2 * interval + 1 + T;
  const Mamba2Dims d = g.dims;
  Layer L(g, rows, T, seed_of(name));
  const size_t SE = static_cast<size_t>(d.H) * d.P * d.N, HP = L.HP, yw = width(yfmt);
  const std::vector<float> init = random_state(L.rng, pool * SE, ck.fmt);
  VerifyState vs(d, pool, cap, ck, init, 1);
  DevBuf<int32_t> dslot(rows), dacc(rows);
  DevBuf<uint8_t> dout(rows * T * HP * yw);
  std::vector<std::vector<double>> ref(pool);
  for (int s = 0; s < pool; ++s) ref[s].assign(init.begin() + s * SE, init.begin() + (s + 1) * SE);
  std::vector<int> fill(pool, 0), base(vs.base0.begin(), vs.base0.end()), committed(rows, 0);
  std::uniform_int_distribution<int> acc_dist(1, T);
  const Format judged = yfmt == Format::BF16 ? Format::BF16 : ck.judged();
  const Tolerance tol = output_tolerance(judged);
  double err_sum = 0, err_max = 0, st_max = 0;
  long long tokens = 0, unwritten = 0, padded_touched = 0, cursor_bad = 0, flushes = 0, early = 0, read_copy_bad = 0;
  std::vector<double> yref(HP), yk(HP);
  for (int w = 0; w < 400; ++w) {
    bool done = true;
    for (int r = 0; r < rows; ++r) done = done && (slot_of[r] < 0 || committed[r] >= need);
    if (done) break;
    std::vector<int32_t> slots(rows), acc(rows);
    std::vector<std::vector<Tok>> pos(rows), truth(rows);
    for (int r = 0; r < rows; ++r) {
      const bool out = slot_of[r] < 0 || (r == 1 && w < 3) || (r == 2 && w % 5 == 4) || committed[r] >= need;
      slots[r] = out ? -1 : slot_of[r];
      acc[r] = acc_dist(L.rng);
      for (int s = 0; s < T; ++s) {
        truth[r].push_back(L.token());
        pos[r].push_back(s < acc[r] ? truth[r][s] : L.token());  // a rejected draft: other inputs
      }
    }
    L.upload(pos);
    dslot.put(slots), dacc.put(acc);
    CUDA_CHECK(cudaMemset(dout.p, 0xFF, dout.n));
    mamba2_verify(vs.launch(L.args(dslot.p, dout.p, yfmt), T, interval, hist), nullptr);
    spec_commit(vs.commit(rows, dslot.p, dacc.p, T, interval, hist), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint8_t> ob = dout.get();
    const std::vector<int32_t> dfill = vs.dfill->get(), dbase = vs.dbase->get();
    for (int r = 0; r < rows; ++r) {
      const int s = slots[r];
      if (s < 0) {
        for (size_t i = 0; i < T * HP * yw; ++i) padded_touched += ob[r * T * HP * yw + i] != 0xFF;
        continue;
      }
      const bool flush = spec_flushes(fill[s], interval, T, hist);
      if (flush) {  // the checkpoint now holds every committed token: compare with fp64 at that count
        ++flushes, early += fill[s] < interval;
        const std::vector<float> c = vs.slot_ckpt(s);
        st_max = max_nan(st_max, rel_rms(c.data(), ref[s].data(), SE));
        if (ck.dual) {  // written from the same registers as the update copy: its rounding, code for code
          std::vector<uint16_t> rd(SE);
          CUDA_CHECK(cudaMemcpy(rd.data(), vs.drd->p + s * SE * 2, SE * 2, cudaMemcpyDeviceToHost));
          for (size_t i = 0; i < SE; ++i)
            read_copy_bad += rd[i] != (ck.read == Format::BF16 ? float_to_bf16_bits(c[i]) : float_to_fp16_bits(c[i]));
        }
        base[s] = (base[s] + fill[s]) & (cap - 1);
      }
      fill[s] = (flush ? 0 : fill[s]) + acc[r];
      cursor_bad += dfill[s] != fill[s];
      cursor_bad += dbase[s] != base[s];
      for (int p = 0; p < acc[r]; ++p) {
        const Tok& t = truth[r][p];
        mamba2_step_ref(L.prm, ref[s].data(), t.x.data(), t.dt.data(), t.B.data(), t.C.data(),
                        g.has_z ? t.z.data() : nullptr, yref.data());
        for (size_t i = 0; i < HP; ++i) {
          yk[i] = decode_at(yfmt, ob.data(), (static_cast<size_t>(r) * T + p) * HP + i);
          unwritten += std::isnan(yk[i]);
        }
        const double e = rel_rms(yk.data(), yref.data(), HP);
        err_sum += e, err_max = max_nan(err_max, e), ++tokens;
      }
      committed[r] += acc[r];
    }
  }
  // Slot 1 was never used: its checkpoint and ring untouched.
  long long untouched_bad = 0;
  {
    const size_t w = width(ck.fmt);
    std::vector<uint8_t> b(SE * w);
    CUDA_CHECK(cudaMemcpy(b.data(), vs.dck->p + SE * w, b.size(), cudaMemcpyDeviceToHost));
    for (uint8_t x : b) untouched_bad += x != 0xA5;
    const std::vector<uint16_t> rx = vs.drx->get(), rB = vs.drB->get();
    for (size_t i = 0; i < cap * HP; ++i) untouched_bad += rx[cap * HP + i] != kRingPoison;
    for (size_t i = 0; i < cap * L.GN; ++i) untouched_bad += rB[cap * L.GN + i] != kRingPoison;
  }
  const double mean = tokens ? err_sum / tokens : NAN;
  const double sb = state_bound(ck.fmt);
  fmt::print("{:<60} {} tokens, {} flushes ({} early): out err mean {:.2e} ({:.0f}% of budget) max {:.2e} | "
             "checkpoint vs fp64 {:.1e}\n",
             name, tokens, flushes, early, mean, 100.0 * mean / tol.rel_mean, err_max, st_max);
  INFO(name << ": error mean " << mean << " max " << err_max << " (" << format_name(judged) << " budget "
            << tol.rel_mean << " / " << tol.rel_max << "), checkpoint vs fp64 " << st_max << " (bound " << sb << ")");
  for (int r = 0; r < rows; ++r)
    if (slot_of[r] >= 0) CHECK(committed[r] >= need);
  CHECK(flushes >= 2);
  CHECK(unwritten == 0);
  CHECK(padded_touched == 0);
  CHECK(untouched_bad == 0);
  CHECK(cursor_bad == 0);
  CHECK(read_copy_bad == 0);
  CHECK(mean <= tol.rel_mean);
  CHECK(err_max <= tol.rel_max);
  CHECK(st_max <= sb);
}

// ---- (c) the eager baseline against mamba2_eager_step on the committed stream ----
void run_eager(const Geo& g, int T, Format sf) {
  const std::string name = fmt::format("{} eager-verify T={} state={}", g.name, T, format_name(sf));
  const int rows = 3, pool = 4, windows = 6;
  const std::vector<int32_t> slot_of = {1, 3, -1};
  const Mamba2Dims d = g.dims;
  Layer L(g, rows, T, seed_of(name));
  const size_t SE = static_cast<size_t>(d.H) * d.P * d.N, HP = L.HP, sw = width(sf);
  const std::vector<float> init = random_state(L.rng, pool * SE, sf);
  // Drafts [pool, T, state]: draft 0 holds the state, the others NaN-poisoned (a read of a stale draft shows).
  std::vector<uint8_t> drafts(pool * T * SE * sw, 0xFF);
  const std::vector<uint8_t> ib = encode(sf, init);
  for (int s = 0; s < pool; ++s) std::memcpy(&drafts[s * T * SE * sw], &ib[s * SE * sw], SE * sw);
  DevBuf<uint8_t> dst(drafts.size()), dstep(ib.size());
  dst.put(drafts), dstep.put(ib);
  DevBuf<int32_t> dcur(pool), dslot(rows), dacc(rows), dslot_s(rows);
  dcur.put(std::vector<int32_t>(pool, 0));
  DevBuf<float> dov(rows * T * HP), dos(rows * T * HP);
  std::uniform_int_distribution<int> acc_dist(1, T);
  long long out_bad = 0, compared = 0, padded_touched = 0;
  std::vector<int32_t> cur(pool, 0);
  for (int w = 0; w < windows; ++w) {
    std::vector<int32_t> slots(rows), acc(rows);
    std::vector<std::vector<Tok>> pos(rows);
    for (int r = 0; r < rows; ++r) {
      slots[r] = (r == 1 && w == 2) ? -1 : slot_of[r];
      acc[r] = acc_dist(L.rng);
      for (int s = 0; s < T; ++s) pos[r].push_back(L.token());  // rejected drafts differ from what follows anyway
    }
    L.upload(pos);
    dslot.put(slots), dacc.put(acc);
    CUDA_CHECK(cudaMemset(dov.p, 0xFF, dov.n * 4));
    Mamba2EagerVerifyLaunch ev;
    ev.step = L.args(dslot.p, dov.p, Format::FP32), ev.window = T, ev.state_format = sf, ev.d_state = dst.p;
    ev.d_cur = dcur.p;
    mamba2_eager_verify(ev, nullptr);
    SpecCommitLaunch c;
    c.batch = rows, c.d_slot = dslot.p, c.d_accepted = dacc.p, c.window = T, c.d_cur = dcur.p;
    spec_commit(c, nullptr);
    // The same committed tokens, one eager step each: rows past their accepted count sit out.
    for (int s = 0; s < T; ++s) {
      std::vector<int32_t> ss(rows);
      for (int r = 0; r < rows; ++r) ss[r] = s < acc[r] ? slots[r] : -1;
      dslot_s.put(ss);
      Mamba2EagerLaunch el;
      el.step = L.args(dslot_s.p, dos.p, Format::FP32, s), el.state_format = sf, el.d_state = dstep.p;
      mamba2_eager_step(el, nullptr);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> ov = dov.get(), os = dos.get();
    for (int r = 0; r < rows; ++r) {
      if (slots[r] < 0) {
        for (size_t i = 0; i < T * HP; ++i) padded_touched += !std::isnan(ov[r * T * HP + i]);
        continue;
      }
      cur[slots[r]] = acc[r] - 1;
      for (int s = 0; s < acc[r]; ++s) {
        out_bad += std::memcmp(&ov[(r * T + s) * HP], &os[(r * T + s) * HP], HP * 4) != 0;
        ++compared;
      }
    }
  }
  const std::vector<int32_t> dc = dcur.get();
  const std::vector<uint8_t> fin = dst.get(), step_fin = dstep.get();
  long long state_bad = 0, cur_bad = 0;
  for (int r = 0; r < rows; ++r) {
    const int s = slot_of[r];
    if (s < 0) continue;
    cur_bad += dc[s] != cur[s];
    state_bad += std::memcmp(&fin[(static_cast<size_t>(s) * T + cur[s]) * SE * sw], &step_fin[s * SE * sw], SE * sw) != 0;
  }
  fmt::print("{:<60} {} committed outputs compared, {} differ; final states differing: {}\n", name, compared, out_bad,
             state_bad);
  CHECK(compared > 0);
  CHECK(out_bad == 0);
  CHECK(padded_touched == 0);
  CHECK(cur_bad == 0);
  CHECK(state_bad == 0);
}

// ---- (d) a corrupted committed ring entry changes the row's next outputs, and nothing else ----
void run_corrupt(const Geo& g, int T, int interval) {
  const std::string name = fmt::format("{} corrupt-ring T={} K={}{}", g.name, T, interval, heads_tag());
  const int rows = 2, pool = 2, hist = interval + T, cap = spec_ring_capacity(hist, T);
  const Mamba2Dims d = g.dims;
  Layer L(g, rows, T, seed_of(name));
  const size_t SE = static_cast<size_t>(d.H) * d.P * d.N, HP = L.HP;
  const std::vector<float> init = random_state(L.rng, pool * SE, Format::FP32);
  VerifyState vs(d, pool, cap, Ckpt{}, init, -1);
  DevBuf<int32_t> dslot(rows), dacc(rows);
  dslot.put({0, 1});
  dacc.put(std::vector<int32_t>(rows, 1));  // one token a window: the fill stays below the flush edge for a while
  DevBuf<float> dout(rows * T * HP);
  auto window = [&](uint64_t seed) {
    std::mt19937_64 keep = L.rng;
    L.rng.seed(seed);
    L.normal.reset();
    std::vector<std::vector<Tok>> pos(rows);
    for (int r = 0; r < rows; ++r)
      for (int s = 0; s < T; ++s) pos[r].push_back(L.token());
    L.rng = keep;
    L.upload(pos);
    mamba2_verify(vs.launch(L.args(dslot.p, dout.p, Format::FP32), T, interval, hist), nullptr);
    spec_commit(vs.commit(rows, dslot.p, dacc.p, T, interval, hist), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    return dout.get();
  };
  const int warm = std::max(1, std::min(interval - 1, hist - 2 * T) - 1);  // committed entries, no flush pending
  for (int w = 0; w < warm; ++w) window(1000 + w);
  // Snapshot, run the next window clean, restore, corrupt the newest committed entry of slot 0, run it again.
  VerifyState snap(d, pool, cap, Ckpt{}, init, -1);
  snap.copy_from(vs);
  const std::vector<float> clean = window(77);
  vs.copy_from(snap);
  const std::vector<int32_t> f = vs.dfill->get(), b = vs.dbase->get();
  const int last = b[0] + f[0] - 1;
  std::vector<uint16_t> rx = vs.drx->get();
  for (size_t i = 0; i < HP; ++i) {  // x scaled by 4: exact in bf16
    uint16_t& u = rx[static_cast<size_t>(last & (cap - 1)) * HP + i];
    u = float_to_bf16_bits(4.0f * bf16_bits_to_float(u));
  }
  vs.drx->put(rx);
  const std::vector<float> bad = window(77);
  const double d0 = rel_rms(&bad[0], &clean[0], T * HP), d1 = rel_rms(&bad[T * HP], &clean[T * HP], T * HP);
  fmt::print("{:<60} corrupted row differs by {:.2e}, the other by {:.1e}\n", name, d0, d1);
  CHECK(warm >= 1);
  CHECK(f[0] == warm);
  CHECK(d0 > 1e-3);
  CHECK(d1 == 0.0);
}

// ---- (f) the grouped kernel against the per-head kernel, bit for bit ----
// Two copies of the same device state driven by the same windows and accepted counts, one through each kernel.
void run_grouped_bitwise(const Geo& g, int T, int interval, Ckpt ck, int heads, Format yfmt = Format::FP32) {
  const std::string name = fmt::format("{} grouped-vs-per-head T={} K={} ckpt={} heads={}{}{}", g.name, T, interval,
                                       ck.name(), heads, yfmt == Format::BF16 ? " y=bf16" : "",
                                       g_flush_l2 != Mamba2VerifyLaunch{}.flush_l2_ahead
                                           ? fmt::format(" flush-l2-ahead={}", g_flush_l2) : std::string());
  const int rows = 4, pool = 5, hist = interval + T, cap = spec_ring_capacity(hist, T);
  const std::vector<int32_t> slot_of = {4, 2, 0, -1};  // row 3 padded; row 2 sits out some windows
  const Mamba2Dims d = g.dims;
  Layer L(g, rows, T, seed_of(name));
  const size_t SE = static_cast<size_t>(d.H) * d.P * d.N, HP = L.HP, yw = width(yfmt);
  const std::vector<float> init = random_state(L.rng, pool * SE, ck.fmt);
  VerifyState vg(d, pool, cap, ck, init, 1), vp(d, pool, cap, ck, init, 1);
  DevBuf<int32_t> dslot(rows), dacc(rows);
  DevBuf<uint8_t> dog(rows * T * HP * yw), dop(rows * T * HP * yw);
  std::uniform_int_distribution<int> acc_dist(1, T);
  const int windows = 3 * interval / T + 6;
  long long out_diff = 0, flushes = 0;
  std::vector<int> fill(pool, 0);
  for (int w = 0; w < windows; ++w) {
    std::vector<int32_t> slots(rows), acc(rows);
    std::vector<std::vector<Tok>> pos(rows);
    for (int r = 0; r < rows; ++r) {
      slots[r] = (r == 2 && w % 5 == 4) ? -1 : slot_of[r];
      acc[r] = acc_dist(L.rng);
      for (int s = 0; s < T; ++s) pos[r].push_back(L.token());
    }
    L.upload(pos);
    dslot.put(slots), dacc.put(acc);
    CUDA_CHECK(cudaMemset(dog.p, 0xFF, dog.n));
    CUDA_CHECK(cudaMemset(dop.p, 0xFF, dop.n));
    g_heads = heads;
    mamba2_verify(vg.launch(L.args(dslot.p, dog.p, yfmt), T, interval, hist), nullptr);
    g_heads = 1;
    mamba2_verify(vp.launch(L.args(dslot.p, dop.p, yfmt), T, interval, hist), nullptr);
    g_heads = 0;
    spec_commit(vg.commit(rows, dslot.p, dacc.p, T, interval, hist), nullptr);
    spec_commit(vp.commit(rows, dslot.p, dacc.p, T, interval, hist), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint8_t> a = dog.get(), b = dop.get();
    for (size_t i = 0; i < a.size(); ++i) out_diff += a[i] != b[i];
    for (int r = 0; r < rows; ++r)
      if (slots[r] >= 0) {
        const bool f = spec_flushes(fill[slots[r]], interval, T, hist);
        flushes += f;
        fill[slots[r]] = (f ? 0 : fill[slots[r]]) + acc[r];
      }
  }
  auto bytes_differ = [](const auto& x, const auto& y) {
    long long n = 0;
    for (size_t i = 0; i < x.size(); ++i) n += std::memcmp(&x[i], &y[i], sizeof(x[i])) != 0;
    return n;
  };
  const long long ck_diff = bytes_differ(vg.dck->get(), vp.dck->get());
  const long long rd_diff = ck.dual ? bytes_differ(vg.drd->get(), vp.drd->get()) : 0;
  const long long ring_diff = bytes_differ(vg.drx->get(), vp.drx->get()) + bytes_differ(vg.drB->get(), vp.drB->get()) +
                              bytes_differ(vg.ddl->get(), vp.ddl->get());
  const long long cur_diff =
      bytes_differ(vg.dfill->get(), vp.dfill->get()) + bytes_differ(vg.dbase->get(), vp.dbase->get());
  fmt::print("{:<60} {} windows, {} row flushes: differing bytes: outputs {}, checkpoint {}, read copy {}, ring {}\n",
             name, windows, flushes, out_diff, ck_diff, rd_diff, ring_diff);
  INFO(name << ": differing output bytes " << out_diff << ", checkpoint bytes " << ck_diff << ", read copy "
            << rd_diff << ", ring " << ring_diff << ", cursors " << cur_diff);
  CHECK(flushes >= 4);
  CHECK(out_diff == 0);
  CHECK(ck_diff == 0);
  CHECK(rd_diff == 0);
  CHECK(ring_diff == 0);
  CHECK(cur_diff == 0);
}
// Case (f) for one geometry and its heads-per-CTA values.
void run_grouped_cases(const Geo& g, std::initializer_list<int> heads) {
  for (int hc : heads) {
    for (int T : {1, 2, 4, 8}) run_grouped_bitwise(g, T, 16, Ckpt{}, hc);
    run_grouped_bitwise(g, 4, 16, Ckpt{Format::BF16, false, Format::BF16}, hc, Format::BF16);
    run_grouped_bitwise(g, 4, 16, Ckpt{Format::FP32, true, Format::BF16}, hc);
    run_grouped_bitwise(g, 3, 4, Ckpt{Format::FP32, true, Format::FP16}, hc);
    run_grouped_bitwise(g, 8, 8, Ckpt{Format::FP16, false, Format::BF16}, hc);
    if (g.dims.N == 128) {  // the other L2 prefetch of the flushing rows (the window is compiled at N = 128 only)
      const int dflt = g_flush_l2;
      g_flush_l2 = dflt < 0 ? 0 : -1;
      run_grouped_bitwise(g, 4, 16, Ckpt{Format::FP32, true, Format::BF16}, hc);
      g_flush_l2 = dflt;
    }
    g_heads = hc;
    for (int T : {2, 4, 8}) run_all_accepted(g, T, 16, Ckpt{});
    run_all_accepted(g, 4, 16, Ckpt{Format::FP32, true, Format::BF16});
    for (int T : {1, 4, 8}) run_random(g, T, 16, Ckpt{});
    run_random(g, 4, 16, Ckpt{Format::BF16, false, Format::BF16}, Format::BF16);
    run_random(g, 4, 16, Ckpt{Format::FP32, true, Format::BF16});
    run_random(g, 2, 4, Ckpt{Format::FP32, true, Format::FP16}, Format::FP32, true);
    run_corrupt(g, 4, 16);
    g_heads = 0;
  }
}

}  // namespace

TEST_CASE("mamba2 verify: all drafts accepted equals the standard replay step", "[gpu][mamba2][spec]") {
  if (!have_device()) return;
  for (const Geo& g : kGeos)
    for (int interval : {4, 16})
      for (int T : {1, 2, 4, 8}) {
        if (interval % T != 0) continue;
        run_all_accepted(g, T, interval, Ckpt{});
        if (T == 4) {
          run_all_accepted(g, T, interval, Ckpt{Format::BF16, false, Format::BF16});
          run_all_accepted(g, T, interval, Ckpt{Format::FP32, true, Format::BF16});
        }
      }
}

TEST_CASE("mamba2 verify: random acceptance, mixed fills and padded rows, against fp64", "[gpu][mamba2][spec]") {
  if (!have_device()) return;
  for (const Geo& g : kGeos)
    for (int interval : {4, 16})
      for (int T : {1, 2, 4, 8}) {
        run_random(g, T, interval, Ckpt{});
        if (T == 4 || (std::string(g.name) == kSmall.name && T == 2)) {
          run_random(g, T, interval, Ckpt{Format::BF16, false, Format::BF16}, Format::BF16);
          run_random(g, T, interval, Ckpt{Format::FP32, true, Format::BF16});
          run_random(g, T, interval, Ckpt{Format::FP32, true, Format::FP16});
        }
      }
  for (const Geo& g : kGeos) {
    run_random(g, 4, 16, Ckpt{}, Format::FP32, true);
    run_random(g, 8, 4, Ckpt{Format::FP32, true, Format::BF16}, Format::FP32, true);
  }
}

// Small: H/G = 4 (2 and 4 heads a CTA; P = 16, so a thread's 8 pairs lie in one head). Super-120B: 16 heads a CTA
// (the launcher's pick at batch 256 for T <= 4) and 8 (its pick at T = 6 and 8). Two cases so that the sanitizers can
// run the small one alone.
TEST_CASE("mamba2 verify, grouped kernel, small: the cases above and bit for bit the per-head kernel",
          "[gpu][mamba2][spec]") {
  if (!have_device()) return;
  run_grouped_cases(kSmall, {2, 4});
}

TEST_CASE("mamba2 verify, grouped kernel, super-120b: the cases above and bit for bit the per-head kernel",
          "[gpu][mamba2][spec]") {
  if (!have_device()) return;
  run_grouped_cases(kSuper, {16, 8});
}

TEST_CASE("mamba2 eager verify equals mamba2_eager_step on the committed stream, bit for bit", "[gpu][mamba2][spec]") {
  if (!have_device()) return;
  for (const Geo& g : kGeos)
    for (int T : {1, 2, 4, 8})
      for (Format sf : {Format::FP32, Format::BF16}) run_eager(g, T, sf);
  run_eager(kSmall, 3, Format::FP16);
}

TEST_CASE("mamba2 verify: a corrupted ring entry changes the outputs", "[gpu][mamba2][spec]") {
  if (!have_device()) return;
  for (const Geo& g : kGeos) {
    run_corrupt(g, 2, 16);
    run_corrupt(g, 4, 16);
    run_corrupt(g, 1, 4);
  }
}

TEST_CASE("mamba2 verify footprint: the kernel mamba2_verify would launch, and nothing launched", "[gpu][mamba2][spec]") {
  if (!have_device()) return;
  const int rows = 2, T = 4, interval = 16;
  Layer L(kSmall, rows, T, 7);
  const Mamba2Dims d = kSmall.dims;
  const size_t SE = static_cast<size_t>(d.H) * d.P * d.N;
  const int cap = spec_ring_capacity(32, T);  // holds both hist values below
  VerifyState vs(d, rows, cap, Ckpt{}, std::vector<float>(rows * SE, 0.0f), -1);
  DevBuf<int32_t> dslot(rows);
  dslot.put({1, 0});
  DevBuf<float> dy(rows * T * L.HP);
  CUDA_CHECK(cudaMemset(dy.p, 0xFF, dy.n * 4));
  for (int hc : {1, 2}) {  // the per-head kernel, the grouped one
    g_heads = hc;
    const Mamba2VerifyLaunch near = vs.launch(L.args(dslot.p, dy.p, Format::FP32), T, interval, interval + T);
    const Mamba2VerifyLaunch far = vs.launch(L.args(dslot.p, dy.p, Format::FP32), T, interval, 32);
    const KernelFootprint a = mamba2_verify_footprint(near), b = mamba2_verify_footprint(far);
    INFO("heads_per_cta " << hc);
    check_footprints(a, b, hc == 1 ? static_cast<long long>(rows) * d.H * mamba2_p_tiles(d, rows, Format::FP32)
                                   : static_cast<long long>(rows) * (d.H / hc));
    Mamba2VerifyLaunch bad = near;
    bad.hist = interval + T - 1;
    CHECK_THROWS_WITH(mamba2_verify_footprint(bad), Catch::Contains("hist"));  // the launcher's checks
  }
  g_heads = 0;
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> y = dy.get();
  CHECK(std::all_of(y.begin(), y.end(), [](float v) { return std::isnan(v); }));  // still the poison: no launch
}

TEST_CASE("mamba2 verify launchers reject bad launch structs with a message naming the field", "[gpu][mamba2][spec]") {
  if (!have_device()) return;
  // A well-formed one-row launch (the launchers return before their checks on an empty one), then one field broken.
  const int T = 4, interval = 16, hist = interval + T, cap = spec_ring_capacity(hist, T);
  Layer L(kSmall, 1, T, 1);
  const size_t SE = static_cast<size_t>(kSmall.dims.H) * kSmall.dims.P * kSmall.dims.N;
  VerifyState vs(kSmall.dims, 1, cap, Ckpt{}, std::vector<float>(SE, 0.0f), -1);
  DevBuf<int32_t> dslot(1), dacc(1), dcur(1);
  dslot.put({0}), dacc.put({1}), dcur.put({0});
  DevBuf<float> dy(T * L.HP), dst(T * SE);
  const Mamba2VerifyLaunch ok = vs.launch(L.args(dslot.p, dy.p, Format::FP32), T, interval, hist);
  {
    Mamba2VerifyLaunch l = ok;
    l.hist = interval + T - 1;  // too small for a window past a full interval
    CHECK_THROWS_WITH(mamba2_verify(l, nullptr), Catch::Contains("hist"));
    l.hist = kMamba2MaxHist + 1;
    l.capacity = 2 * kMamba2MaxHist;
    CHECK_THROWS_WITH(mamba2_verify(l, nullptr), Catch::Contains("hist"));
  }
  {
    Mamba2VerifyLaunch l = ok;
    l.capacity = 48;  // above the need, but not a power of two
    CHECK_THROWS_WITH(mamba2_verify(l, nullptr), Catch::Contains("capacity"));
    l.capacity = cap / 2;  // a power of two below spec_ring_capacity
    CHECK_THROWS_WITH(mamba2_verify(l, nullptr), Catch::Contains("capacity"));
  }
  {
    Mamba2VerifyLaunch l = ok;
    l.window = kMaxSpecWindow + 1;
    CHECK_THROWS_WITH(mamba2_verify(l, nullptr), Catch::Contains("window"));
  }
  {
    Mamba2VerifyLaunch l = ok;
    l.heads_per_cta = 3;  // does not divide H/G = 4
    CHECK_THROWS_WITH(mamba2_verify(l, nullptr), Catch::Contains("heads_per_cta"));
    l.heads_per_cta = 0, l.flush_l2_ahead = -2;
    CHECK_THROWS_WITH(mamba2_verify(l, nullptr), Catch::Contains("flush_l2_ahead"));
    l.flush_l2_ahead = 1;
    l.heads_per_cta = 2, l.window = 9, l.hist = interval + 9, l.capacity = spec_ring_capacity(l.hist, 9);
    CHECK_THROWS_WITH(mamba2_verify(l, nullptr), Catch::Contains("heads_per_cta"));
  }
  {
    SpecCommitLaunch c = vs.commit(1, dslot.p, dacc.p, T, interval, hist);
    c.hist = interval + T - 1;
    CHECK_THROWS_WITH(spec_commit(c, nullptr), Catch::Contains("hist"));
    c.hist = hist, c.capacity = 48;
    CHECK_THROWS_WITH(spec_commit(c, nullptr), Catch::Contains("capacity"));
  }
  {
    Mamba2EagerVerifyLaunch e;
    e.step = L.args(dslot.p, dy.p, Format::FP32), e.window = kMaxSpecWindow + 1, e.d_state = dst.p, e.d_cur = dcur.p;
    CHECK_THROWS_WITH(mamba2_eager_verify(e, nullptr), Catch::Contains("window"));
    e.window = T, e.d_cur = nullptr;
    CHECK_THROWS_WITH(mamba2_eager_verify(e, nullptr), Catch::Contains("d_cur"));
  }
  CUDA_CHECK(cudaDeviceSynchronize());  // nothing was launched: no error may be pending
}
