#include "run/record.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "metrics/growth.h"
#include "metrics/tolerance.h"
#include "metrics/traffic.h"

namespace rssm {

namespace {

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? std::numeric_limits<double>::quiet_NaN() : s / v.size();
}
double max_of(const std::vector<double>& v) {
  double m = v.empty() ? std::numeric_limits<double>::quiet_NaN() : 0.0;
  for (double x : v)
    if (!(x <= m)) m = x;  // NaN wins
  return m;
}

// A sweep parameter as stored: counts as integers, the rest as written. The values were validated when the sweep
// was expanded, so an integer key that does not parse (never expected) is kept as text rather than lost.
AttrValue param_value(const std::string& key, const std::string& text) {
  if (integer_sweep_key(key)) {
    try {
      size_t used = 0;
      const long long v = std::stoll(text, &used);
      if (used == text.size()) return v;
    } catch (const std::exception&) {
    }
  }
  return text;
}

}  // namespace

// Builds the stored record of a finished run.
RunRecord make_run_record(const RecordContext& pl, const RunSpec& s, LockstepRun& a, const std::string& twin_id) {
  RunRecord r;
  r.id = s.id;
  r.attrs = {{"id", s.id}, {"decoder_name", a.dec->name()}, {"decoder_label", s.scheme.label()},
             {"scheme", s.scheme.name()}};
  for (const auto& [k, v] : s.params) r.attrs.emplace_back(k, param_value(k, v));
  // Host wall time inside the decoder's advance(). On the cpu backend that is the CPU emulation's time; on cuda it
  // is the adapter's host time (staging, launches, waits, copies back), stored under its own name: neither is a GPU
  // kernel's speed (the benchmarks measure that).
  const char* seconds_key = wall_seconds_key(s.scheme.backend);
  r.attrs.emplace_back(seconds_key, a.seconds);

  std::vector<long long> steps(static_cast<size_t>(pl.steps));
  for (long long i = 0; i < pl.steps; ++i) steps[i] = i;
  SeriesGroup per_step{"step", steps,
                       {{"out_rel_err_mean", a.err.rel_mean},
                        {"out_rel_err_max", a.err.rel_max},
                        {"out_abs_err_max", a.err.abs_max},
                        {"out_rel_rms", a.err.rel_rms}}};
  if (pl.kl) {
    per_step.series.emplace_back("kl_mean", a.kl_mean);
    per_step.series.emplace_back("kl_max", a.kl_max);
    per_step.series.emplace_back("top1_agree", a.top1);
  }
  if (a.twin >= 0) {
    // The same scheme on the twin's backend, step by step (metrics/output_error.h backend_diff).
    per_step.series.emplace_back("backend_diff_rel_max", a.twin_rel_max);
    per_step.series.emplace_back("backend_diff_ulps_max", a.twin_ulps_max);
    per_step.series.emplace_back("backend_bitwise_equal", a.twin_bitwise);
    r.attrs.emplace_back("backend_twin", twin_id);
  }
  r.groups.push_back(std::move(per_step));
  if (!a.obs_step.empty()) r.groups.push_back({"flush_step", a.obs_step, a.state_series});

  // Error against position since the last flush (replay/dual) and the log-log growth of output error.
  if (s.scheme.replays()) {
    const int interval = s.scheme.interval;
    const PositionProfile prof = error_by_position(a.err.rel_mean, interval);
    std::vector<long long> pos(static_cast<size_t>(interval));
    for (int i = 0; i < interval; ++i) pos[i] = i;
    r.groups.push_back({"position", pos, {{"out_rel_err_by_position", prof.mean}}});
  }
  std::vector<double> t1(static_cast<size_t>(pl.steps));
  for (long long i = 0; i < pl.steps; ++i) t1[i] = static_cast<double>(i + 1);
  const double out_slope = loglog_slope(t1, a.err.rel_mean);

  // Summary row.
  AttrMap& sm = r.summary;
  sm.emplace_back("run", s.id);
  sm.emplace_back("decoder_name", a.dec->name());
  sm.emplace_back("decoder_label", s.scheme.label());
  for (const auto& [k, v] : s.params) sm.emplace_back(k, param_value(k, v));
  sm.emplace_back("status", std::string("ok"));
  sm.emplace_back("skip_reason", std::string(""));
  sm.emplace_back("steps", pl.steps);
  sm.emplace_back("out_rel_err_mean", mean_of(a.err.rel_mean));
  sm.emplace_back("out_rel_err_max", max_of(a.err.rel_max));
  sm.emplace_back("out_rel_err_final", a.err.rel_mean.empty() ? NAN : a.err.rel_mean.back());
  sm.emplace_back("out_abs_err_max", max_of(a.err.abs_max));
  sm.emplace_back("out_rel_rms_mean", mean_of(a.err.rel_rms));
  sm.emplace_back("out_err_growth_slope", out_slope);
  // Share of the tolerance budget used (metrics/tolerance.h): > 1 means the scheme is outside its format's bound.
  const Format judged = judged_format(pl.model.family, s.scheme);
  const Tolerance tol = output_tolerance(judged);
  sm.emplace_back("judged_format", format_name(judged));
  sm.emplace_back("budget_used", mean_of(a.err.rel_mean) / tol.rel_mean);
  sm.emplace_back("budget_used_max", max_of(a.err.rel_mean) / tol.rel_max);
  r.attrs.emplace_back("out_err_growth_slope", out_slope);
  if (a.twin >= 0) {
    sm.emplace_back("backend_twin", twin_id);
    sm.emplace_back("backend_diff_rel_max", max_of(a.twin_rel_max));
    sm.emplace_back("backend_diff_ulps_max", max_of(a.twin_ulps_max));
    double all = 1;
    for (double b : a.twin_bitwise) all = std::min(all, b);
    sm.emplace_back("backend_bitwise_equal", all == 1 ? 1.0 : 0.0);  // NaN (missing) where unpaired
  }
  if (pl.kl) {
    sm.emplace_back("kl_mean", mean_of(a.kl_mean));
    sm.emplace_back("kl_final", a.kl_mean.empty() ? NAN : a.kl_mean.back());
    sm.emplace_back("top1_agree", mean_of(a.top1));
  }
  // State error: last value and growth exponent against the number of observations (flushes), per copy and band.
  std::vector<double> nobs(a.obs_step.size());
  for (size_t i = 0; i < nobs.size(); ++i) nobs[i] = static_cast<double>(i + 1);
  for (const auto& [name, v] : a.state_series) {
    const double slope = loglog_slope(nobs, v);
    sm.emplace_back(name + "_final", v.empty() ? NAN : v.back());
    sm.emplace_back(name + "_growth", slope);
    r.attrs.emplace_back(name + "_growth", slope);
  }
  const Traffic tr = traffic(pl.model, traffic_params(s.scheme, pl.seqs));
  sm.emplace_back("bytes_per_step", tr.batch_amortised);
  // Per committed token, so speculative schemes (a step = one verify of `window` positions) compare with standard
  // decoding (one token a step) on equal terms.
  sm.emplace_back("tokens_per_step", tr.tokens_per_step);
  sm.emplace_back("bytes_per_token", tr.batch_amortised / tr.tokens_per_step);
  sm.emplace_back("bytes_vs_eager_fp32", tr.batch_amortised / tr.tokens_per_step / pl.eager_fp32_bytes);
  r.attrs.emplace_back("bytes_per_step", tr.batch_amortised);
  // The traffic model in full (bytes per decode step of one layer; metrics/traffic.h, docs/metrics.md).
  r.attrs.emplace_back("traffic_per_head_nonflush", tr.per_head_nonflush);
  r.attrs.emplace_back("traffic_per_head_flush", tr.per_head_flush);
  r.attrs.emplace_back("traffic_per_head_amortised", tr.per_head_amortised);
  r.attrs.emplace_back("traffic_batch_nonflush", tr.batch_nonflush);
  r.attrs.emplace_back("traffic_batch_flush", tr.batch_flush);
  r.attrs.emplace_back("traffic_batch_amortised", tr.batch_amortised);
  sm.emplace_back(seconds_key, a.seconds);
  if (pl.save_outputs) {
    r.output_dims = {pl.steps, pl.seqs, pl.model.out_elems()};
    r.outputs = std::move(a.outputs);
  }
  return r;
}

// The summary row of a point that has not run: skipped (with its reason) or pending (not finished yet).
RunRecord placeholder_record(const RunSpec& s) {
  RunRecord r;
  r.id = s.id;
  r.summary = {{"run", s.id}, {"decoder_name", std::string("")}, {"decoder_label", std::string("")}};
  for (const auto& [k, v] : s.params) r.summary.emplace_back(k, param_value(k, v));
  r.summary.emplace_back("status", std::string(s.skip_reason.empty() ? "pending" : "skipped"));
  r.summary.emplace_back("skip_reason", s.skip_reason);
  r.summary.emplace_back("steps", 0LL);
  return r;
}

}  // namespace rssm
