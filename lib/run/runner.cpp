#include "run/runner.h"

#include <omp.h>
#include <unistd.h>

#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fstream>
#include <limits>
#include <ostream>

#include "errors.h"
#include "metrics/growth.h"
#include "metrics/output_error.h"
#include "metrics/readout.h"
#include "metrics/state_error.h"
#include "metrics/tolerance.h"
#include "metrics/traffic.h"
#include "numeric/format.h"
#include "cpu/reference.h"
#include "replayssm_version.h"
#include "run/factory.h"
#include "run/progress.h"
#include "trace/trace_h5.h"

namespace rssm {

SynthConfig synth_config(const Config& cfg) {
  SynthConfig sc;
  const std::string preset = cfg.str("synth.preset");
  const long long big = 1 << 20;
  const char* geo_m[] = {"synth.H", "synth.P", "synth.N", "synth.G"};
  const char* geo_g[] = {"synth.HK", "synth.HV", "synth.K", "synth.V"};
  if (preset == "custom") {
    sc.model.family = parse_family(cfg.choice("synth.family", {"mamba2", "gdn"}));
    if (sc.model.family == Family::Mamba2) {
      auto& m = sc.model.mamba2;
      m.H = static_cast<int>(cfg.integer("synth.H", 1, 4096));
      m.P = static_cast<int>(cfg.integer("synth.P", 1, 4096));
      m.N = static_cast<int>(cfg.integer("synth.N", 1, 4096));
      m.G = static_cast<int>(cfg.integer("synth.G", 1, m.H));
      if (m.H % m.G != 0)
        throw ConfigError(fmt::format("config keys 'synth.H' and 'synth.G': H={} must be a multiple of G={}", m.H, m.G));
      for (auto k : geo_g)
        if (cfg.integer(k, 0, big) != 0)
          throw ConfigError(fmt::format("config key '{}': a GDN geometry key set with synth.family = mamba2", k));
    } else {
      auto& g = sc.model.gdn;
      g.HK = static_cast<int>(cfg.integer("synth.HK", 1, 4096));
      g.HV = static_cast<int>(cfg.integer("synth.HV", 1, 4096));
      g.K = static_cast<int>(cfg.integer("synth.K", 1, 4096));
      g.V = static_cast<int>(cfg.integer("synth.V", 1, 4096));
      if (g.HV % g.HK != 0)
        throw ConfigError(
            fmt::format("config keys 'synth.HV' and 'synth.HK': HV={} must be a multiple of HK={}", g.HV, g.HK));
      for (auto k : geo_m)
        if (cfg.integer(k, 0, big) != 0)
          throw ConfigError(fmt::format("config key '{}': a Mamba-2 geometry key set with synth.family = gdn", k));
    }
  } else {
    try {
      sc.model = model_preset(preset);
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("config key 'synth.preset': {}", e.what()));
    }
    for (auto list : {geo_m, geo_g})
      for (int i = 0; i < 4; ++i)
        if (cfg.integer(list[i], 0, big) != 0)
          throw ConfigError(fmt::format(
              "config key '{}': explicit geometry needs synth.preset = custom (preset '{}' fixes the geometry)",
              list[i], preset));
  }
  auto& m = sc.model.mamba2;
  m.d_per_dim = cfg.boolean("synth.d_per_dim");
  m.has_z = cfg.boolean("synth.has_z");
  m.dt_min = cfg.real("synth.dt_min", 0.0, 1e6);
  m.dt_max = cfg.real("synth.dt_max", 0.0, std::numeric_limits<double>::infinity());
  if (!(m.dt_max > m.dt_min))
    throw ConfigError(fmt::format("config keys 'synth.dt_min' and 'synth.dt_max': need dt_min < dt_max (got {} and {})",
                                  m.dt_min, m.dt_max));
  sc.steps = cfg.integer("synth.steps", 1, 1LL << 40);
  sc.seqs = static_cast<int>(cfg.integer("synth.seqs", 1, 1 << 16));
  sc.seed = static_cast<uint64_t>(cfg.integer("synth.seed", 0, std::numeric_limits<long long>::max()));
  sc.outlier_channels = static_cast<int>(cfg.integer("synth.outlier_channels", 0, 1 << 16));
  sc.outlier_scale_min = cfg.real("synth.outlier_scale_min", 1.0, 1e6);
  sc.outlier_scale_max = cfg.real("synth.outlier_scale_max", 1.0, 1e6);
  if (sc.outlier_scale_max < sc.outlier_scale_min)
    throw ConfigError("config keys 'synth.outlier_scale_min' and 'synth.outlier_scale_max': need min <= max");
  sc.spike_head_frac = cfg.real("synth.spike_head_frac", 0.0, 1.0);
  sc.spike_token_frac = cfg.real("synth.spike_token_frac", 0.0, 1.0);
  sc.slow_head_frac = cfg.str("synth.slow_head_frac") == "auto"
                          ? (sc.model.family == Family::GDN ? 0.125 : 0.0)
                          : cfg.real("synth.slow_head_frac", 0.0, 1.0);
  sc.readout_vocab = static_cast<int>(cfg.integer("synth.readout_vocab", 0, 1 << 20));
  const long long readout_elems = static_cast<long long>(sc.readout_vocab) * sc.model.out_elems();
  if (readout_elems > (1LL << 28))
    throw ConfigError(fmt::format("config key 'synth.readout_vocab': {} rows x {} outputs = {:.1f} GB of readout, more "
                                  "than the 1 GB a trace's readout may take",
                                  sc.readout_vocab, sc.model.out_elems(), readout_elems * 4 / 1e9));
  return sc;
}

std::unique_ptr<TraceSource> open_trace(const Config& cfg) {
  const std::string& file = cfg.str("trace.file");
  if (!file.empty()) return std::make_unique<H5TraceSource>(file);
  return std::make_unique<SynthSource>(synth_config(cfg));
}

long long available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  long long kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return -1;
}

long long estimate_run_bytes(const Model& model, int seqs, int chunk, int decoders, int readout_vocab) {
  long long in_per_step = 0;
  for (const auto& s : model.inputs()) in_per_step += s.elems();
  // Decoder states are held in double (replay decoders: update + read copy + buffers, counted as two states).
  const long long states = static_cast<long long>(2 * decoders + 1) * seqs * model.state_elems() * 8;
  // Chunk inputs, the reference's and every decoder's chunk outputs.
  const long long chunks =
      static_cast<long long>(chunk) * seqs * (in_per_step * 4 + static_cast<long long>(model.out_elems()) * 8 * (decoders + 1));
  // Readout W (float) and the chunk's reference logits (double) plus a block of float scratch.
  const long long readout = static_cast<long long>(readout_vocab) * model.out_elems() * 4 +
                            static_cast<long long>(chunk) * seqs * readout_vocab * 8 + 256LL * readout_vocab * 8;
  return states + chunks + readout;
}

namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto c = line.find(':');
      if (c != std::string::npos) return line.substr(line.find_first_not_of(' ', c + 1));
    }
  return "unknown cpu";
}

}  // namespace

AttrMap provenance_attrs() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return {{"replayssm_version", std::string(REPLAYSSM_VERSION)},
          {"git_commit", std::string(REPLAYSSM_GIT_COMMIT)},
          {"created", utc_now()},
          {"host", std::string(host)},
          {"device", fmt::format("cpu: {} ({} threads)", cpu_name(), omp_get_max_threads())}};
}

namespace {

std::atomic<bool> g_stop{false};

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

// Everything a batch needs that does not change between batches.
struct Plan {
  const Config* cfg;
  std::string output;
  long long steps;
  int seqs, chunk, threads_per_job;
  bool save_outputs, kl, state_err;
  int vocab, state_every;
  double logit_std;
  uint64_t seed;
  Model model;
  DecayBands bands;
};

struct Batch {
  std::string act;
  std::vector<const RunSpec*> runs;
};

// One run's accumulating measurements.
struct Active {
  const RunSpec* spec;
  std::unique_ptr<Decoder> dec;
  int observe_every;  // tokens between state observations (the interval for replay/dual)
  OutputErrorSeries err;
  std::vector<double> kl_mean, kl_max, top1;
  std::vector<long long> obs_step;
  std::vector<std::pair<std::string, std::vector<double>>> state_series;  // name -> values per observation
  std::vector<double> outputs;
  std::vector<double> ychunk;  // this chunk's outputs [n, seqs, out]
  double seconds = 0;
};

void push_series(std::vector<std::pair<std::string, std::vector<double>>>& v, const std::string& name, double x) {
  for (auto& [n, s] : v)
    if (n == name) {
      s.push_back(x);
      return;
    }
  v.emplace_back(name, std::vector<double>{x});
}

// Builds the stored record of a finished run.
RunRecord make_record(const Plan& pl, Active& a, double eager_fp32_bytes) {
  const RunSpec& s = *a.spec;
  RunRecord r;
  r.id = s.id;
  r.attrs = {{"id", s.id}, {"decoder_name", a.dec->name()}, {"decoder_label", s.scheme.label()},
             {"scheme", s.scheme.name()}};
  for (const auto& [k, v] : s.params) r.attrs.emplace_back(k, v);
  r.attrs.emplace_back("seconds", a.seconds);

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
  for (const auto& [k, v] : s.params) sm.emplace_back(k, v);
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
  sm.emplace_back("bytes_vs_eager_fp32", tr.batch_amortised / eager_fp32_bytes);
  r.attrs.emplace_back("bytes_per_step", tr.batch_amortised);
  // The traffic model in full (bytes per decode step of one layer; metrics/traffic.h, docs/metrics.md).
  r.attrs.emplace_back("traffic_per_head_nonflush", tr.per_head_nonflush);
  r.attrs.emplace_back("traffic_per_head_flush", tr.per_head_flush);
  r.attrs.emplace_back("traffic_per_head_amortised", tr.per_head_amortised);
  r.attrs.emplace_back("traffic_batch_nonflush", tr.batch_nonflush);
  r.attrs.emplace_back("traffic_batch_flush", tr.batch_flush);
  r.attrs.emplace_back("traffic_batch_amortised", tr.batch_amortised);
  sm.emplace_back("seconds", a.seconds);
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
  for (const auto& [k, v] : s.params) r.summary.emplace_back(k, v);
  r.summary.emplace_back("status", std::string(s.skip_reason.empty() ? "pending" : "skipped"));
  r.summary.emplace_back("skip_reason", s.skip_reason);
  r.summary.emplace_back("steps", 0LL);
  return r;
}

// Runs one batch to the end. Returns false when a stop was requested (nothing of the batch is kept).
bool run_batch(const Plan& pl, const Batch& b, TraceSource& src, std::mutex& h5_mutex, std::vector<RunRecord>& out,
               std::vector<double>* ref_outputs, const std::function<void(long long)>& progress) {
  const Model& model = pl.model;
  const int seqs = pl.seqs, out_elems = model.out_elems();
  const Format act = parse_format(b.act);
  ReferenceDecoder ref;
  ref.reset(model, seqs);
  std::vector<Active> runs;
  for (const RunSpec* s : b.runs) {
    Active a;
    a.spec = s;
    a.dec = make_decoder(s->scheme, pl.seed);
    a.dec->reset(model, seqs);
    a.observe_every = s->scheme.replays() ? s->scheme.interval : pl.state_every;
    runs.push_back(std::move(a));
  }
  std::unique_ptr<Readout> readout;
  std::vector<double> ref_logits;
  std::vector<double> kl_rows, top1_rows;

  InputChunk in;
  std::vector<double> y_ref;
  for (long long s0 = 0; s0 < pl.steps; s0 += pl.chunk) {
    const int n = static_cast<int>(std::min<long long>(pl.chunk, pl.steps - s0));
    {
      std::lock_guard<std::mutex> lock(h5_mutex);
      src.read(s0, n, in);
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
        if (pl.state_err) {
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
        if (pl.save_outputs) a.outputs.insert(a.outputs.end(), yt, yt + static_cast<size_t>(len) * rows_per_step * out_elems);
      }
      pos = end;
      const long long tokens = s0 + pos;
      if (pl.state_err)
        for (auto& a : runs) {
          if (tokens % a.observe_every != 0) continue;
          a.obs_step.push_back(tokens);
          for (const auto& copy : a.dec->state()) {
            if (copy.step != tokens) throw InternalError(fmt::format("{}: {} copy at step {}, expected {}", a.dec->name(),
                                                                     copy.name, copy.step, tokens));
            const StateErrorStats st = state_error(model, pl.bands, copy.value->data(), ref.raw_state().data(), seqs);
            const std::string base = "state_rel_err_" + copy.name;
            push_series(a.state_series, base, st.rel_mean);
            for (size_t bi = 0; bi < pl.bands.names.size(); ++bi)
              if (pl.bands.count[bi] > 0) push_series(a.state_series, base + "_" + pl.bands.names[bi], st.band_rel_mean[bi]);
          }
        }
    }
    // KL once per chunk, over all its rows at once: the row count of every readout product is then the same in
    // every batching of the sweep (chunk boundaries do not depend on the batch, span boundaries do), so a run's
    // KL is bit-for-bit the same whichever runs share its batch. The readout is calibrated on the first chunk.
    if (pl.kl) {
      const int rows = static_cast<int>(n * rows_per_step);
      if (!readout) {
        readout = std::make_unique<Readout>(src.readout(), pl.vocab, out_elems, pl.seed);
        readout->calibrate(y_ref.data(), rows, pl.logit_std);
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
    if (pl.save_outputs && ref_outputs) ref_outputs->insert(ref_outputs->end(), y_ref.begin(), y_ref.end());
    progress(static_cast<long long>(n) * static_cast<long long>(runs.size()));
  }
  const double eager_bytes = traffic(model, [&] {
                               TrafficParams t;
                               t.scheme = "eager";
                               t.state_bytes = 4;
                               t.act_bytes = 2;
                               t.batch = seqs;
                               return t;
                             }()).batch_amortised;
  for (auto& a : runs) out.push_back(make_record(pl, a, eager_bytes));
  return true;
}

}  // namespace

void request_stop() { g_stop.store(true); }
bool stop_requested() { return g_stop.load(); }

namespace {

std::string cell_text(const AttrMap& row, const std::string& key, const char* fmt_spec) {
  for (const auto& [k, v] : row)
    if (k == key) {
      if (const double* d = std::get_if<double>(&v)) return fmt::format(fmt::runtime(fmt_spec), *d);
      if (const long long* i = std::get_if<long long>(&v)) return fmt::format("{}", *i);
      return std::get<std::string>(v);
    }
  return "-";
}

void print_table(std::ostream& out, const std::vector<RunRecord>& recs, bool kl) {
  // The sweep keys that vary are the interesting columns; constant ones go in one line above the table.
  std::vector<std::string> keys;
  for (const auto& k : config_keys())
    if (k.sweep) keys.push_back(k.key.substr(k.key.find('.') + 1));
  std::vector<std::string> varying;
  for (const auto& k : keys) {
    std::string first;
    bool varies = false, any = false;
    for (const auto& r : recs) {
      const std::string v = cell_text(r.summary, k, "{}");
      if (!any) first = v, any = true;
      varies = varies || v != first;
    }
    if (varies && k != "decoder") varying.push_back(k);  // the decoder name column already says it
  }
  std::string head = fmt::format("{:<9} {:<22}", "run", "decoder");
  for (const auto& k : varying) head += fmt::format(" {:>12}", k.substr(0, 12));
  head += fmt::format(" {:>11} {:>11} {:>11}", "rel err", "rel max", "rel final");
  if (kl) head += fmt::format(" {:>10} {:>7}", "KL", "top1");
  head += fmt::format(" {:>9} {:>9}", "bytes/eag", "us/step");
  fmt::print(out, "{}\n", head);
  for (const auto& r : recs) {
    std::string line = fmt::format("{:<9} {:<22}", r.id, cell_text(r.summary, "decoder_label", "{}"));
    for (const auto& k : varying) line += fmt::format(" {:>12}", cell_text(r.summary, k, "{}"));
    if (!r.completed()) {
      const std::string why = cell_text(r.summary, "skip_reason", "{}");
      if (why.find("only its first value runs") == std::string::npos)
        fmt::print(out, "{}  skipped: {}\n", line, why);
      continue;
    }
    line += fmt::format(" {:>11} {:>11} {:>11}", cell_text(r.summary, "out_rel_err_mean", "{:.3e}"),
                        cell_text(r.summary, "out_rel_err_max", "{:.3e}"),
                        cell_text(r.summary, "out_rel_err_final", "{:.3e}"));
    if (kl)
      line += fmt::format(" {:>10} {:>7}", cell_text(r.summary, "kl_mean", "{:.2e}"),
                          cell_text(r.summary, "top1_agree", "{:.4f}"));
    double secs = 0, steps = 1;
    for (const auto& [k, v] : r.summary) {
      if (k == "seconds") secs = std::get<double>(v);
      if (k == "steps") steps = static_cast<double>(std::get<long long>(v));
    }
    line += fmt::format(" {:>9} {:>9.1f}", cell_text(r.summary, "bytes_vs_eager_fp32", "{:.3f}"), 1e6 * secs / steps);
    fmt::print(out, "{}\n", line);
  }
}

}  // namespace

RunSettings read_settings(const Config& cfg) {
  RunSettings st;
  st.output = cfg.str("run.output");
  if (st.output.empty()) throw ConfigError("config key 'run.output': must name a result file");
  st.steps = cfg.integer("run.steps", 0, std::numeric_limits<long long>::max());
  st.seqs = cfg.integer("run.seqs", 0, 1 << 20);
  st.chunk = static_cast<int>(cfg.integer("run.chunk", 1, 1 << 20));
  st.threads = static_cast<int>(cfg.integer("run.threads", 0, 4096));
  st.save_outputs = cfg.boolean("run.save_outputs");
  st.max_output_gb = cfg.real("run.max_output_gb", 0.0, 1e6);
  st.seed = static_cast<uint64_t>(cfg.integer("run.seed", 0, std::numeric_limits<long long>::max()));
  st.batch = static_cast<int>(cfg.integer("run.batch", 0, 1 << 20));
  st.kl = cfg.boolean("metrics.kl");
  st.vocab = static_cast<int>(cfg.integer("metrics.vocab", 2, 1 << 20));
  st.logit_std = cfg.real("metrics.logit_std", 1e-3, 1e3);
  st.state_err = cfg.boolean("metrics.state_error");
  st.state_every = static_cast<int>(cfg.integer("metrics.eager_state_every", 1, 1 << 20));
  return st;
}

std::string run_experiment(const Config& cfg, std::ostream& out, const RunnerOptions& opts) {
  // Validate everything before touching the output file.
  const RunSettings st = read_settings(cfg);
  Plan pl;
  pl.cfg = &cfg;
  pl.output = st.output;
  const long long steps_req = st.steps;
  const long long seqs_req = st.seqs;
  pl.chunk = st.chunk;
  const int threads = st.threads;
  pl.save_outputs = st.save_outputs;
  const double max_output_gb = st.max_output_gb;
  pl.seed = st.seed;
  pl.kl = st.kl;
  pl.vocab = st.vocab;
  pl.logit_std = st.logit_std;
  pl.state_err = st.state_err;
  pl.state_every = st.state_every;
  const int batch_size = st.batch;
  if (opts.jobs < 1) throw ConfigError(fmt::format("--jobs must be at least 1 (got {})", opts.jobs));
  if (opts.shard_count < 1 || opts.shard_index < 0 || opts.shard_index >= opts.shard_count)
    throw ConfigError(fmt::format("--shard {}/{}: expected i/n with 0 <= i < n", opts.shard_index, opts.shard_count));

  if (cfg.str("trace.file").empty()) {
    // A synthetic trace's geometry is known before the generator allocates anything: refuse absurd sizes first.
    const SynthConfig sc = synth_config(cfg);
    const int seqs = static_cast<int>(seqs_req ? seqs_req : sc.seqs);
    const long long need = estimate_run_bytes(sc.model, seqs, pl.chunk, 1, pl.kl ? pl.vocab : 0);
    const long long avail = available_memory_bytes();
    if (avail > 0 && need > avail)
      throw ConfigError(fmt::format("run needs more than {:.1f} GB of memory for one decoder ({} sequences of {}), but "
                                    "only {:.1f} GB is available: reduce synth geometry, run.seqs or metrics.vocab",
                                    need / 1e9, seqs, sc.model.geometry_string(), avail / 1e9));
  }
  std::unique_ptr<TraceSource> src = open_trace(cfg);
  pl.model = src->model();
  if (steps_req > src->steps())
    throw ConfigError(fmt::format("config key 'run.steps': {} steps requested but the trace ({}) has {}", steps_req,
                                  src->describe(), src->steps()));
  if (seqs_req > src->seqs())
    throw ConfigError(fmt::format("config key 'run.seqs': {} sequences requested but the trace ({}) has {}", seqs_req,
                                  src->describe(), src->seqs()));
  pl.steps = steps_req ? steps_req : src->steps();
  pl.seqs = static_cast<int>(seqs_req ? seqs_req : src->seqs());
  pl.bands = decay_bands(pl.model);
  if (pl.kl && !src->readout().empty() && src->readout_vocab() < 2)
    throw FormatError(fmt::format("{}: readout has fewer than 2 rows", src->describe()));
  const std::vector<RunSpec> specs = expand_sweep(cfg, pl.model.family);

  // This shard's points; skipped ones are announced and recorded.
  std::vector<const RunSpec*> mine;
  for (const auto& s : specs)
    if (s.index % opts.shard_count == opts.shard_index) mine.push_back(&s);

  const int jobs = opts.jobs;
  const int total_threads = threads > 0 ? threads : omp_get_max_threads();
  pl.threads_per_job = std::max(1, total_threads / jobs);
  const int readout_rows = !pl.kl ? 0 : (src->readout().empty() ? pl.vocab : src->readout_vocab());
  const long long need =
      static_cast<long long>(jobs) *
      estimate_run_bytes(pl.model, pl.seqs, pl.chunk,
                         static_cast<int>(std::min<size_t>(mine.size(), batch_size > 0 ? batch_size : mine.size())),
                         readout_rows);
  const long long avail = available_memory_bytes();
  if (avail > 0 && need > avail)
    throw ConfigError(fmt::format("run needs about {:.1f} GB of memory ({} sequences of {}, {} decoders at once), but "
                                  "only {:.1f} GB is available: reduce run.seqs, run.batch, metrics.vocab or the sweep",
                                  need / 1e9, pl.seqs, pl.model.geometry_string(), mine.size(), avail / 1e9));
  const double out_gb = pl.save_outputs ? 8.0 * pl.steps * pl.seqs * pl.model.out_elems() * (mine.size() + 1) / 1e9 : 0;
  if (out_gb > max_output_gb)
    throw ConfigError(fmt::format("config key 'run.save_outputs': the raw outputs would take {:.2f} GB, more than "
                                  "run.max_output_gb = {}",
                                  out_gb, max_output_gb));

  // The result set: provenance, then one record per point of this shard (completed ones filled as batches end).
  ResultSet rs;
  rs.root = provenance_attrs();
  rs.root.emplace_back("config", cfg.resolved_text());
  rs.root.emplace_back("config_sources", fmt::format("{}", fmt::join(cfg.sources(), ", ")));
  rs.root.emplace_back("trace", src->describe());
  rs.root.emplace_back("family", family_name(pl.model.family));
  rs.root.emplace_back("geometry", pl.model.geometry_string());
  rs.root.emplace_back("steps", pl.steps);
  rs.root.emplace_back("seqs", static_cast<long long>(pl.seqs));
  rs.root.emplace_back("shard", fmt::format("{}/{}", opts.shard_index, opts.shard_count));
  rs.root.emplace_back("reference",
                       std::string("ref-fp64: fp64 eager recurrence on the same inputs, rounded to the run's act_format"));
  for (const auto& a : opts.extra_root_attrs) rs.root.push_back(a);
  for (const RunSpec* s : mine) rs.runs.push_back(placeholder_record(*s));  // replaced as runs finish

  remove_stale_temporaries(pl.output);
  const bool existed_before = std::ifstream(pl.output).good();
  std::set<std::string> done_ids;
  if (opts.resume) {
    std::ifstream probe(pl.output);
    if (probe) {
      ResultSet old = read_result_file(pl.output);
      std::string old_cfg, old_shard;
      for (const auto& [k, v] : old.root) {
        if (k == "config") old_cfg = std::get<std::string>(v);
        if (k == "shard") old_shard = std::get<std::string>(v);
      }
      if (Config::identity_text(old_cfg) != Config::identity_text(cfg.resolved_text()))
        throw ConfigError(fmt::format("--resume: {} was written by a different config (compare `replayssm inspect {}` "
                                      "with --dry-run); remove it or drop --resume",
                                      pl.output, pl.output));
      if (old_shard != fmt::format("{}/{}", opts.shard_index, opts.shard_count))
        throw ConfigError(fmt::format("--resume: {} holds shard {}, not {}/{}", pl.output, old_shard, opts.shard_index,
                                      opts.shard_count));
      for (auto& r : old.runs)
        if (r.completed())
          for (auto& mine_r : rs.runs)
            if (mine_r.id == r.id) {
              done_ids.insert(r.id);
              mine_r = std::move(r);
            }
      rs.reference_outputs = std::move(old.reference_outputs);
      rs.reference_dims = old.reference_dims;
      fmt::print(stderr, "resuming {}: {} run(s) already complete\n", pl.output, done_ids.size());
    }
  }
  if (pl.save_outputs) rs.reference_dims = {pl.steps, pl.seqs, pl.model.out_elems()};

  // Batches: pending runs grouped by activation format, cut so that `jobs` workers share the work.
  std::vector<Batch> batches;
  {
    std::map<std::string, std::vector<const RunSpec*>> by_act;
    std::vector<std::string> order;
    for (const RunSpec* s : mine)
      if (s->skip_reason.empty() && !done_ids.count(s->id)) {
        const std::string a = format_name(s->scheme.act_format);
        if (!by_act.count(a)) order.push_back(a);
        by_act[a].push_back(s);
      }
    for (const auto& a : order) {
      const auto& v = by_act[a];
      const size_t per = batch_size > 0 ? static_cast<size_t>(batch_size)
                                        : std::max<size_t>(1, (v.size() + jobs - 1) / jobs);
      for (size_t i = 0; i < v.size(); i += per)
        batches.push_back({a, std::vector<const RunSpec*>(v.begin() + i, v.begin() + std::min(v.size(), i + per))});
    }
  }
  long long total_work = 0;
  for (const auto& b : batches) total_work += pl.steps * static_cast<long long>(b.runs.size());

  // Skip notices: each invalid combination with its reason (naming only the sweep keys that vary); points that
  // would repeat another one (a key that does not apply to the decoder) in one line.
  std::set<std::string> varying;
  for (const auto& k : config_keys())
    if (k.sweep && cfg.list(k.key).size() > 1) varying.insert(k.key.substr(k.key.find('.') + 1));
  int repeats = 0;
  for (const RunSpec* s : mine) {
    if (s->skip_reason.empty()) continue;
    if (s->skip_reason.find("only its first value runs") != std::string::npos) {
      ++repeats;
      continue;
    }
    std::string what;
    for (const auto& [k, v] : s->params)
      if (varying.count(k)) what += fmt::format("{}{}={}", what.empty() ? "" : " ", k, v);
    fmt::print(stderr, "skipping {} ({}): {}\n", s->id, what, s->skip_reason);
  }
  if (repeats > 0)
    fmt::print(stderr, "skipping {} point(s) that would repeat another: a sweep key that does not apply to the "
                       "decoder runs only at its first value (replayssm run CONFIG --dry-run lists them)\n",
               repeats);
  std::mutex mu, h5_mutex;
  write_result_file(pl.output, rs);  // skipped points and resumed runs are on disk from the start
  Progress progress(fmt::format("run {} batch(es), {} steps", batches.size(), pl.steps), total_work, opts.progress);
  long long work_done = 0;
  size_t next_batch = 0;
  std::exception_ptr failure;
  bool interrupted = false;
  auto worker = [&](int job) {
    omp_set_num_threads(pl.threads_per_job);
    std::unique_ptr<TraceSource> wsrc;
    try {
      {
        std::lock_guard<std::mutex> lock(h5_mutex);
        wsrc = job == 0 ? std::move(src) : open_trace(cfg);
      }
      while (true) {
        size_t bi;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (next_batch >= batches.size() || failure || interrupted) return;
          bi = next_batch++;
        }
        std::vector<RunRecord> recs;
        std::vector<double> ref_out;
        const bool keep_ref = pl.save_outputs && !rs.reference_outputs.count(batches[bi].act);
        const bool ok = run_batch(pl, batches[bi], *wsrc, h5_mutex, recs, keep_ref ? &ref_out : nullptr,
                                  [&](long long w) {
                                    std::lock_guard<std::mutex> lock(mu);
                                    work_done += w;
                                    progress.update(work_done);
                                  });
        std::lock_guard<std::mutex> lock(mu);
        if (!ok) {
          interrupted = true;
          return;
        }
        for (auto& r : recs)
          for (auto& slot : rs.runs)
            if (slot.id == r.id) slot = std::move(r);
        if (keep_ref && !rs.reference_outputs.count(batches[bi].act))
          rs.reference_outputs[batches[bi].act] = std::move(ref_out);
        std::lock_guard<std::mutex> h5lock(h5_mutex);
        write_result_file(pl.output, rs);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!failure) failure = std::current_exception();
    }
  };
  if (jobs == 1 || batches.size() <= 1) {
    worker(0);
  } else {
    std::vector<std::thread> pool;
    for (int j = 0; j < std::min<int>(jobs, static_cast<int>(batches.size())); ++j) pool.emplace_back(worker, j);
    for (auto& t : pool) t.join();
  }
  progress.finish();
  if (failure) {
    // A run that fails (bad trace data found mid-way, a write error) leaves no result file it created; a file that
    // was there before (an earlier run, or the one being resumed) keeps every batch completed so far.
    if (!existed_before) std::remove(pl.output.c_str());
    std::rethrow_exception(failure);
  }
  size_t complete = 0, runnable = 0;
  for (const RunSpec* s : mine) runnable += s->skip_reason.empty();
  for (const auto& r : rs.runs) complete += r.completed();
  if (interrupted || stop_requested()) {
    throw Interrupted(fmt::format(
        "interrupted: {} of {} runs complete and saved in {}; finish the sweep with the same command plus --resume",
        complete, runnable, pl.output));
  }

  fmt::print(out, "trace: {}\n{} {}, {} steps x {} sequences, activations rounded per act_format\n\n",
             cell_text(rs.root, "trace", "{}"),
             family_name(pl.model.family), pl.model.geometry_string(), pl.steps, pl.seqs);
  print_table(out, rs.runs, pl.kl);
  fmt::print(out, "\nwrote {}\n", pl.output);
  return pl.output;
}

}  // namespace rssm
