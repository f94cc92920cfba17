#include "run/runner.h"

#include <omp.h>
#include <unistd.h>

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
#include "metrics/output_error.h"
#include "replay/reference.h"
#include "replayssm_version.h"
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
  sc.slow_head_frac = cfg.real("synth.slow_head_frac", 0.0, 1.0);
  sc.readout_vocab = static_cast<int>(cfg.integer("synth.readout_vocab", 0, 1 << 20));
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

long long estimate_run_bytes(const Model& model, int seqs, int chunk, int decoders) {
  long long in_per_step = 0;
  for (const auto& s : model.inputs()) in_per_step += s.elems();
  const long long states = static_cast<long long>(decoders + 1) * seqs * model.state_elems() * 8;
  const long long chunks = static_cast<long long>(chunk) * seqs * (in_per_step * 4 + model.out_elems() * 8 * 2);
  return states + chunks;
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

struct ActiveRun {
  const RunSpec* spec;
  std::unique_ptr<Decoder> decoder;
  OutputErrorSeries err;
  double seconds = 0;
};

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / v.size();
}
double vmax(const std::vector<double>& v) {
  double m = 0;
  for (double x : v)
    if (!(x <= m)) m = x;  // NaN wins
  return m;
}

}  // namespace

std::string run_experiment(const Config& cfg, std::ostream& out, const RunnerOptions& opts) {
  // Validate everything before touching the output file.
  const std::string output = cfg.str("run.output");
  if (output.empty()) throw ConfigError("config key 'run.output': must name a result file");
  const long long steps_req = cfg.integer("run.steps", 0, std::numeric_limits<long long>::max());
  const long long seqs_req = cfg.integer("run.seqs", 0, 1 << 20);
  const int chunk = static_cast<int>(cfg.integer("run.chunk", 1, 1 << 20));
  const int threads = static_cast<int>(cfg.integer("run.threads", 0, 4096));
  const bool save_outputs = cfg.boolean("run.save_outputs");
  const double max_output_gb = cfg.real("run.max_output_gb", 0.0, 1e6);
  std::vector<RunSpec> specs = expand_sweep(cfg);
  if (threads > 0) omp_set_num_threads(threads);

  std::unique_ptr<TraceSource> src = open_trace(cfg);
  const Model& model = src->model();
  if (steps_req > src->steps())
    throw ConfigError(fmt::format("config key 'run.steps': {} steps requested but the trace ({}) has {}", steps_req,
                                  src->describe(), src->steps()));
  if (seqs_req > src->seqs())
    throw ConfigError(fmt::format("config key 'run.seqs': {} sequences requested but the trace ({}) has {}", seqs_req,
                                  src->describe(), src->seqs()));
  const long long steps = steps_req ? steps_req : src->steps();
  const int seqs = static_cast<int>(seqs_req ? seqs_req : src->seqs());
  const int out_elems = model.out_elems();

  std::vector<ActiveRun> runs;
  for (const auto& s : specs) {
    if (!s.skip_reason.empty()) {
      std::string what;
      for (const auto& [k, v] : s.params) what += fmt::format("{}{}={}", what.empty() ? "" : " ", k, v);
      fmt::print(stderr, "skipping {} ({}): {}\n", s.id, what, s.skip_reason);
      continue;
    }
    runs.push_back({&s, make_decoder(s), {}, 0});
  }

  const long long need = estimate_run_bytes(model, seqs, chunk, static_cast<int>(runs.size()));
  const long long avail = available_memory_bytes();
  if (avail > 0 && need > avail)
    throw ConfigError(fmt::format("run needs about {:.1f} GB of memory ({} decoders, {} sequences, {}), but only {:.1f} "
                                  "GB is available: reduce run.seqs or the sweep",
                                  need / 1e9, runs.size() + 1, seqs, model.geometry_string(), avail / 1e9));
  const double out_gb = save_outputs ? 8.0 * steps * seqs * out_elems * (runs.size() + 1) / 1e9 : 0.0;
  if (out_gb > max_output_gb)
    throw ConfigError(fmt::format("config key 'run.save_outputs': the raw outputs would take {:.2f} GB, more than "
                                  "run.max_output_gb = {}",
                                  out_gb, max_output_gb));

  AttrMap root = provenance_attrs();
  root.emplace_back("config", cfg.resolved_text());
  root.emplace_back("config_sources", fmt::format("{}", fmt::join(cfg.sources(), ", ")));
  root.emplace_back("trace", src->describe());
  root.emplace_back("family", family_name(model.family));
  root.emplace_back("geometry", model.geometry_string());
  root.emplace_back("steps", steps);
  root.emplace_back("seqs", static_cast<long long>(seqs));
  root.emplace_back("reference", std::string("ref-fp64: fp64 eager recurrence on the same (fp32-stored) inputs"));
  for (const auto& a : opts.extra_root_attrs) root.push_back(a);
  ResultsWriter writer(output, root);

  ReferenceDecoder ref;
  ref.reset(model, seqs);
  for (auto& r : runs) r.decoder->reset(model, seqs);
  if (save_outputs) {
    writer.create_outputs("reference", "outputs", steps, seqs, out_elems);
    for (auto& r : runs) writer.create_outputs("runs/" + r.spec->id, "outputs", steps, seqs, out_elems);
  }

  InputChunk in;
  std::vector<double> y_ref, y;
  Progress progress(fmt::format("run {} x {} steps", runs.size(), steps), steps, opts.progress);
  double ref_seconds = 0;
  for (long long s0 = 0; s0 < steps; s0 += chunk) {
    const int n = static_cast<int>(std::min<long long>(chunk, steps - s0));
    src->read(s0, n, in);
    y_ref.resize(static_cast<size_t>(n) * seqs * out_elems);
    y.resize(y_ref.size());
    // Decoders see the first `seqs` sequences of the chunk; their output rows are [n, seqs, out].
    auto t0 = std::chrono::steady_clock::now();
    ref.advance(in, 0, n, y_ref.data());
    ref_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (save_outputs) writer.append_outputs("reference", "outputs", s0, n, y_ref.data());
    for (auto& r : runs) {
      t0 = std::chrono::steady_clock::now();
      r.decoder->advance(in, 0, n, y.data());
      r.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (int s = 0; s < n; ++s) {
        const size_t off = static_cast<size_t>(s) * seqs * out_elems;
        r.err.push(step_error(y.data() + off, y_ref.data() + off, seqs, out_elems));
      }
      if (save_outputs) writer.append_outputs("runs/" + r.spec->id, "outputs", s0, n, y.data());
    }
    progress.update(s0 + n);
  }
  progress.finish();

  std::vector<long long> step_index(static_cast<size_t>(steps));
  for (long long i = 0; i < steps; ++i) step_index[i] = i;
  for (auto& r : runs) {
    AttrMap attrs = {{"id", r.spec->id}, {"decoder_name", r.decoder->name()}};
    for (const auto& [k, v] : r.spec->params) attrs.emplace_back(k, v);
    attrs.emplace_back("seconds", r.seconds);
    writer.write_run(r.spec->id, attrs, step_index,
                     {{"out_rel_err_mean", r.err.rel_mean},
                      {"out_rel_err_max", r.err.rel_max},
                      {"out_abs_err_max", r.err.abs_max},
                      {"out_rel_rms", r.err.rel_rms}});
  }

  // Summary: one row per point of the sweep, skipped ones included with their reason.
  std::vector<std::pair<std::string, std::vector<AttrValue>>> cols;
  auto col = [&](const std::string& name) -> std::vector<AttrValue>& {
    for (auto& c : cols)
      if (c.first == name) return c.second;
    cols.emplace_back(name, std::vector<AttrValue>{});
    return cols.back().second;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const auto& s : specs) {
    const ActiveRun* r = nullptr;
    for (const auto& a : runs)
      if (a.spec == &s) r = &a;
    col("run").emplace_back(s.id);
    col("decoder_name").emplace_back(r ? r->decoder->name() : std::string(""));
    for (const auto& [k, v] : s.params) col(k).emplace_back(v);
    col("status").emplace_back(std::string(r ? "ok" : "skipped"));
    col("skip_reason").emplace_back(s.skip_reason);
    col("steps").emplace_back(r ? steps : 0LL);
    col("out_rel_err_mean").emplace_back(r ? mean(r->err.rel_mean) : nan);
    col("out_rel_err_max").emplace_back(r ? vmax(r->err.rel_max) : nan);
    col("out_rel_err_final").emplace_back(r && !r->err.rel_mean.empty() ? r->err.rel_mean.back() : nan);
    col("out_abs_err_max").emplace_back(r ? vmax(r->err.abs_max) : nan);
    col("out_rel_rms_mean").emplace_back(r ? mean(r->err.rel_rms) : nan);
    col("seconds").emplace_back(r ? r->seconds : nan);
  }
  writer.write_summary(cols);

  // The terminal table.
  fmt::print(out, "trace: {}\n{} {}, {} steps x {} sequences; reference ref-fp64 took {:.2f} s\n\n", src->describe(),
             family_name(model.family), model.geometry_string(), steps, seqs, ref_seconds);
  fmt::print(out, "{:<9} {:<14} {:>14} {:>14} {:>14} {:>12} {:>10}\n", "run", "decoder", "rel err mean",
             "rel err max", "rel err final", "abs err max", "us/step");
  for (const auto& s : specs) {
    const ActiveRun* r = nullptr;
    for (const auto& a : runs)
      if (a.spec == &s) r = &a;
    if (!r) {
      fmt::print(out, "{:<9} skipped: {}\n", s.id, s.skip_reason);
      continue;
    }
    fmt::print(out, "{:<9} {:<14} {:>14.3e} {:>14.3e} {:>14.3e} {:>12.3e} {:>10.1f}\n", s.id, r->decoder->name(),
               mean(r->err.rel_mean), vmax(r->err.rel_max), r->err.rel_mean.back(), vmax(r->err.abs_max),
               1e6 * r->seconds / steps);
  }
  writer.commit();
  fmt::print(out, "\nwrote {}\n", output);
  return output;
}

}  // namespace rssm
