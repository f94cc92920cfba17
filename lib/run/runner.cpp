#include "run/runner.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <ostream>
#include <set>
#include <thread>

#include "errors.h"
#include "metrics/traffic.h"
#include "numeric/format.h"
#include "run/factory.h"
#include "run/progress.h"
#include "run/record.h"
#include "run/summary_table.h"

namespace rssm {

namespace {

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
};

// Runs of one activation format, sharing one reference. Points that differ only in backend are always in the
// same batch (twins: each non-cpu run is compared step by step with its cpu twin).
struct Batch {
  Format act;
  std::vector<const RunSpec*> runs;
};

// Runs one batch to the end. Returns false when a stop was requested (nothing of the batch is kept).
bool run_batch(const Plan& pl, const Batch& b, TraceSource& src, std::mutex& h5_mutex, std::vector<RunRecord>& out,
               std::vector<double>* ref_outputs, const std::function<void(long long)>& progress) {
  LockstepSettings st;
  st.steps = pl.steps;
  st.seqs = pl.seqs;
  st.chunk = pl.chunk;
  st.act = b.act;
  st.kl = pl.kl;
  st.vocab = pl.vocab;
  st.logit_std = pl.logit_std;
  st.seed = pl.seed;
  st.state_err = pl.state_err;
  st.save_outputs = pl.save_outputs;
  std::vector<LockstepRun> runs;
  std::vector<Scheme> schemes;
  for (const RunSpec* s : b.runs) {
    schemes.push_back(s->scheme);
    LockstepRun a;
    a.dec = make_decoder(s->scheme, pl.model.family, pl.seed);
    a.dec->reset(pl.model, pl.seqs);
    // Speculative replay rows flush at steps of their own: every step is looked at, and the rows that have just
    // flushed are compared (StateCopy::row_step).
    a.observe_every = s->scheme.replays() ? (s->scheme.speculative() ? 1 : s->scheme.interval) : pl.state_every;
    a.out_format = s->scheme.out_format;
    runs.push_back(std::move(a));
  }
  const std::vector<int> twins = backend_twins(schemes);
  for (size_t i = 0; i < runs.size(); ++i) runs[i].twin = twins[i];
  if (!run_lockstep(st, src, runs, &h5_mutex, ref_outputs, progress)) return false;
  RecordContext ctx;
  ctx.model = pl.model;
  ctx.steps = pl.steps;
  ctx.seqs = pl.seqs;
  ctx.kl = pl.kl;
  ctx.save_outputs = pl.save_outputs;
  TrafficParams eager;
  eager.scheme = "eager";
  eager.state_bytes = 4;
  eager.act_bytes = 2;
  eager.batch = pl.seqs;
  ctx.eager_fp32_bytes = traffic(pl.model, eager).batch_amortised;
  for (size_t i = 0; i < runs.size(); ++i) {
    const int t = runs[i].twin;
    out.push_back(make_run_record(ctx, *b.runs[i], runs[i], t >= 0 ? b.runs[static_cast<size_t>(t)]->id : ""));
  }
  return true;
}

}  // namespace

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
  if (pl.kl && !src->readout().empty() && src->readout_vocab() < 2)
    throw FormatError(fmt::format("{}: readout has fewer than 2 rows", src->describe()));
  const std::vector<RunSpec> specs = expand_sweep(cfg, pl.model.family);
  for (const auto& s : specs)
    if (s.skip_reason.empty() && s.scheme.speculative() && s.scheme.acceptance.kind == Acceptance::Kind::Trace &&
        pl.model.spec_accepted.empty())
      throw ConfigError(fmt::format("config key 'spec.acceptance': 'trace' needs the trace's dataset '/spec/accepted', "
                                    "which {} does not have",
                                    src->describe()));

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

  // Batches: pending runs grouped by activation format, cut so that `jobs` workers share the work, never between
  // twins (points that differ only in backend, which the sweep order puts next to each other).
  std::vector<Batch> batches;
  {
    std::map<Format, std::vector<std::vector<const RunSpec*>>> by_act;  // act -> groups of twins, in sweep order
    std::vector<Format> order;
    std::map<std::pair<Format, std::string>, size_t> group_of;
    for (const RunSpec* s : mine)
      if (s->skip_reason.empty() && !done_ids.count(s->id)) {
        const Format a = s->scheme.act_format;
        if (!by_act.count(a)) order.push_back(a);
        auto& groups = by_act[a];
        const auto key = std::make_pair(a, twin_key(s->scheme));
        const auto it = group_of.find(key);
        if (it == group_of.end()) {
          group_of.emplace(key, groups.size());
          groups.push_back({s});
        } else {
          groups[it->second].push_back(s);
        }
      }
    for (const Format a : order) {
      const auto& groups = by_act[a];
      size_t total = 0;
      for (const auto& g : groups) total += g.size();
      const size_t per = batch_size > 0 ? static_cast<size_t>(batch_size)
                                        : std::max<size_t>(1, (total + jobs - 1) / jobs);
      Batch cur{a, {}};
      for (const auto& g : groups) {
        cur.runs.insert(cur.runs.end(), g.begin(), g.end());
        if (cur.runs.size() >= per) {
          batches.push_back(std::move(cur));
          cur = Batch{a, {}};
        }
      }
      if (!cur.runs.empty()) batches.push_back(std::move(cur));
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
        const std::string act = format_name(batches[bi].act);
        const bool keep_ref = pl.save_outputs && !rs.reference_outputs.count(act);
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
        if (keep_ref && !rs.reference_outputs.count(act)) rs.reference_outputs[act] = std::move(ref_out);
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
