#include "run/lockstep.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fmt/format.h>

#include "cpu/reference.h"
#include "errors.h"
#include "metrics/readout.h"
#include "metrics/state_error.h"

namespace rssm {

namespace {

std::atomic<bool> g_stop{false};

void push_series(std::vector<std::pair<std::string, std::vector<double>>>& v, const std::string& name, double x) {
  for (auto& [n, s] : v)
    if (n == name) {
      s.push_back(x);
      return;
    }
  v.emplace_back(name, std::vector<double>{x});
}

}  // namespace

void request_stop() { g_stop.store(true); }
bool stop_requested() { return g_stop.load(); }

bool run_lockstep(const LockstepSettings& st, TraceSource& src, std::vector<LockstepRun>& runs, std::mutex* src_mutex,
                  std::vector<double>* ref_outputs, const std::function<void(long long)>& progress) {
  const Model& model = src.model();
  const int seqs = st.seqs, out_elems = model.out_elems();
  const Format act = st.act;
  const DecayBands bands = decay_bands(model);
  for (size_t i = 0; i < runs.size(); ++i) {
    const int t = runs[i].twin;
    if (t >= 0 && (static_cast<size_t>(t) >= runs.size() || static_cast<size_t>(t) == i))
      throw InternalError(fmt::format("run_lockstep: run {} has twin {} of {} runs", i, t, runs.size()));
    if (runs[i].observe_every < 1) throw InternalError("run_lockstep: observe_every < 1");
  }
  ReferenceDecoder ref;
  ref.reset(model, seqs);
  std::unique_ptr<Readout> readout;
  std::vector<double> ref_logits;
  std::vector<double> kl_rows, top1_rows;

  int ahead = 0;  // steps the decoders may read past a chunk (Decoder::lookahead)
  for (const auto& a : runs) ahead = std::max(ahead, a.dec->lookahead());
  InputChunk in;
  std::vector<double> y_ref;
  std::vector<double> fresh_s, fresh_r;  // rows of a speculative decoder's state copy that have just flushed
  for (long long s0 = 0; s0 < st.steps; s0 += st.chunk) {
    const int n = static_cast<int>(std::min<long long>(st.chunk, st.steps - s0));
    const int with_ahead = static_cast<int>(std::min<long long>(static_cast<long long>(n) + ahead, st.steps - s0));
    if (src_mutex) {
      std::lock_guard<std::mutex> lock(*src_mutex);
      src.read(s0, with_ahead, in);
    } else {
      src.read(s0, with_ahead, in);
    }
    if (act != Format::FP32)
      for (auto& d : in.data) round_nearest_inplace(act, d.data(), d.size());
    const size_t rows_per_step = static_cast<size_t>(seqs);
    y_ref.resize(static_cast<size_t>(n) * rows_per_step * out_elems);
    for (auto& a : runs) a.ychunk.resize(y_ref.size());
    // Split the chunk where any run observes its state (after `t` tokens with t % observe_every == 0).
    int pos = 0;
    while (pos < n) {
      if (stop_requested()) return false;
      int end = n;
      for (const auto& a : runs)
        if (st.state_err) {
          const long long t = s0 + pos;  // tokens folded so far
          const long long next = (t / a.observe_every + 1) * a.observe_every;
          end = static_cast<int>(std::min<long long>(end, next - s0));
        }
      const int len = end - pos;
      double* yr = y_ref.data() + static_cast<size_t>(pos) * rows_per_step * out_elems;
      ref.advance(in, pos, len, yr);
      for (auto& a : runs) {
        double* yt = a.ychunk.data() + static_cast<size_t>(pos) * rows_per_step * out_elems;
        const auto t0 = std::chrono::steady_clock::now();
        a.dec->advance(in, pos, len, yt);
        a.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        for (int s = 0; s < len; ++s) {
          const size_t off = static_cast<size_t>(s) * rows_per_step * out_elems;
          a.err.push(step_error(yt + off, yr + off, seqs, out_elems));
        }
        if (st.save_outputs) a.outputs.insert(a.outputs.end(), yt, yt + static_cast<size_t>(len) * rows_per_step * out_elems);
      }
      for (auto& a : runs) {
        if (a.twin < 0) continue;
        const LockstepRun& b = runs[static_cast<size_t>(a.twin)];
        for (int s = pos; s < end; ++s) {
          const size_t off = static_cast<size_t>(s) * rows_per_step * out_elems;
          const BackendDiff d = backend_diff(a.ychunk.data() + off, b.ychunk.data() + off, seqs, out_elems,
                                             a.out_format);
          a.twin_rel_max.push_back(d.rel_max);
          a.twin_ulps_max.push_back(d.ulps_max);
          a.twin_bitwise.push_back(d.bitwise ? 1.0 : 0.0);
        }
      }
      pos = end;
      const long long tokens = s0 + pos;
      if (st.state_err)
        for (auto& a : runs) {
          if (tokens % a.observe_every != 0) continue;
          bool pushed = false;
          for (const auto& copy : a.dec->state()) {
            if (copy.size != ref.raw_state().size())
              throw InternalError(fmt::format("{}: {} copy holds {} values, expected {}", a.dec->name(), copy.name,
                                              copy.size, ref.raw_state().size()));
            const double* S = copy.data;
            const double* R = ref.raw_state().data();
            int rows = seqs;
            if (!copy.row_step.empty()) {
              // Rows at their own flushes: only those that hold exactly `tokens` are compared now.
              const size_t se = static_cast<size_t>(model.state_elems());
              fresh_s.clear();
              fresh_r.clear();
              rows = 0;
              for (int q = 0; q < seqs; ++q)
                if (copy.row_step[static_cast<size_t>(q)] == tokens) {
                  fresh_s.insert(fresh_s.end(), S + q * se, S + (q + 1) * se);
                  fresh_r.insert(fresh_r.end(), R + q * se, R + (q + 1) * se);
                  ++rows;
                }
              if (rows == 0) continue;
              S = fresh_s.data();
              R = fresh_r.data();
            } else if (copy.step != tokens) {
              throw InternalError(fmt::format("{}: {} copy at step {}, expected {}", a.dec->name(), copy.name,
                                              copy.step, tokens));
            }
            if (!pushed) a.obs_step.push_back(tokens);
            pushed = true;
            const StateErrorStats se = state_error(model, bands, S, R, rows);
            const std::string base = "state_rel_err_" + copy.name;
            push_series(a.state_series, base, se.rel_mean);
            for (size_t bi = 0; bi < bands.names.size(); ++bi)
              if (bands.count[bi] > 0) push_series(a.state_series, base + "_" + bands.names[bi], se.band_rel_mean[bi]);
          }
        }
    }
    // KL once per chunk, over all its rows at once: the row count of every readout product is then the same in
    // every batching of the sweep (chunk boundaries do not depend on the batch, span boundaries do), so a run's
    // KL is bit-for-bit the same whichever runs share its batch. The readout is calibrated on the first chunk.
    if (st.kl) {
      const int rows = static_cast<int>(n * rows_per_step);
      if (!readout) {
        readout = std::make_unique<Readout>(src.readout(), st.vocab, out_elems, st.seed);
        readout->calibrate(y_ref.data(), rows, st.logit_std);
      }
      readout->logits(y_ref.data(), rows, ref_logits);
      kl_rows.resize(rows);
      top1_rows.resize(rows);
      for (auto& a : runs) {
        readout->compare(ref_logits, a.ychunk.data(), y_ref.data(), rows, kl_rows.data(), top1_rows.data());
        for (int s = 0; s < n; ++s) {
          double km = 0, kx = 0, tp = 0;
          for (int q = 0; q < seqs; ++q) {
            const double k = kl_rows[s * rows_per_step + q];
            km += k / seqs;
            if (!(k <= kx)) kx = k;
            tp += top1_rows[s * rows_per_step + q] / seqs;
          }
          a.kl_mean.push_back(km);
          a.kl_max.push_back(kx);
          a.top1.push_back(tp);
        }
      }
    }
    if (ref_outputs) ref_outputs->insert(ref_outputs->end(), y_ref.begin(), y_ref.end());
    if (progress) progress(static_cast<long long>(n) * static_cast<long long>(runs.size()));
  }
  return true;
}

}  // namespace rssm
