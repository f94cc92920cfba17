#include "metrics/traffic.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <sstream>

#include "errors.h"

namespace rssm {

namespace {

// Bytes split by who owns them: `head` per head, `group` once per group (shared B, or q/k).
struct Bytes {
  double head = 0, group = 0;
  Bytes operator+(const Bytes& o) const { return {head + o.head, group + o.group}; }
  Bytes operator*(double s) const { return {head * s, group * s}; }
};

// What the formulas need from a geometry, family-neutral.
struct Geo {
  int heads, groups;
  double state_elems;  // per head: P·N or V·K
  double row_len;      // N or K: the length of the rows that carry one scale each
  Bytes inputs;        // per token: Mamba-2 x, dt | B, C;  GDN v, a, b | q, k
  Bytes entry;         // one buffered token: Mamba-2 x, Δ | B;  GDN u, g | k
};

Geo geometry(const Model& m, const TrafficParams& p) {
  Geo g;
  const double a = p.act_bytes, b = p.buffer_bytes;
  if (m.family == Family::Mamba2) {
    const auto& q = m.mamba2;
    if (q.H <= 0 || q.P <= 0 || q.N <= 0 || q.G <= 0 || q.H % q.G != 0)
      throw ConfigError(fmt::format("traffic: bad Mamba-2 geometry {}", m.geometry_string()));
    g.heads = q.H;
    g.groups = q.G;
    g.state_elems = static_cast<double>(q.P) * q.N;
    g.row_len = q.N;
    g.inputs = {a * q.P + a, 2.0 * a * q.N};  // x [P], dt [1] | B [N], C [N]
    g.entry = {b * q.P + 4.0, b * q.N};        // x [P], Δ fp32 | B [N]
  } else {
    const auto& q = m.gdn;
    if (q.HK <= 0 || q.HV <= 0 || q.K <= 0 || q.V <= 0 || q.HV % q.HK != 0)
      throw ConfigError(fmt::format("traffic: bad GDN geometry {}", m.geometry_string()));
    g.heads = q.HV;
    g.groups = q.HK;
    g.state_elems = static_cast<double>(q.V) * q.K;
    g.row_len = q.K;
    g.inputs = {a * q.V + 2.0 * a, 2.0 * a * q.K};  // v [V], a, b | q [K], k [K]
    g.entry = {b * q.V + 4.0, b * q.K};              // u [V], g fp32 | k [K]
  }
  return g;
}

void check_positive(const char* key, int v) {
  if (v <= 0) throw ConfigError(fmt::format("traffic: {} must be positive (got {})", key, v));
}

// One state copy read or written once, per head: element bytes plus, for 1-byte formats, the per-row scale.
Bytes state_pass(const Geo& g, const TrafficParams& p, int bytes) {
  const double per_elem = bytes + (bytes == 1 ? static_cast<double>(p.scale_bytes) / g.row_len : 0.0);
  return {per_elem * g.state_elems, 0.0};
}

struct Steps {
  Bytes nonflush, flush, amortised;
  double tokens = 1;
  double per_flush = 1;
};

Steps model_steps(const Geo& g, const TrafficParams& p) {
  const std::string& s = p.scheme;
  check_positive("state_bytes", p.state_bytes);
  check_positive("act_bytes", p.act_bytes);
  check_positive("batch", p.batch);
  if (p.scale_bytes < 0) throw ConfigError(fmt::format("traffic: scale_bytes must be >= 0 (got {})", p.scale_bytes));
  const Bytes S = state_pass(g, p, p.state_bytes);
  Steps r;
  if (s == "eager") {
    r.nonflush = r.flush = r.amortised = S * 2 + g.inputs;
    return r;
  }
  if (s == "replay" || s == "dual") {
    check_positive("interval", p.interval);
    check_positive("buffer_bytes", p.buffer_bytes);
    const int K = p.interval;
    // Step j of an interval (j = 1..K) appends its own entry and reads the j entries then buffered (a kernel that
    // appends first and reads the whole buffer, its own entry included). Step K flushes.
    Bytes read_copy = S;
    if (s == "dual") {
      check_positive("read_bytes (dual)", p.read_bytes);
      read_copy = state_pass(g, p, p.read_bytes);
    }
    const double h_mean = (K + 1) / 2.0;
    const Bytes stream = g.inputs + g.entry;  // inputs + the appended entry, every step
    r.nonflush = read_copy + g.entry * h_mean + stream;
    // The flush step reads the update copy (not the read copy: its output comes from the fresh state), all K
    // entries, and writes the update copy; dual also refreshes the read copy.
    r.flush = S * 2 + g.entry * K + stream;
    if (s == "dual") r.flush = r.flush + read_copy;
    // Mean over the interval: K − 1 ordinary steps (h = 1..K−1) and the flush.
    const Bytes ordinary_sum = (read_copy + stream) * (K - 1) + g.entry * (K * (K - 1) / 2.0);
    r.amortised = (ordinary_sum + r.flush) * (1.0 / K);
    r.per_flush = K;
    return r;
  }
  if (s == "spec-eager" || s == "spec-replay") {
    check_positive("window", p.window);
    const int T = p.window;
    if (p.acceptance.kind == Acceptance::Kind::Trace)
      throw ConfigError("traffic: acceptance 'trace' has no model (traffic_params models it as all)");
    if (p.acceptance.kind == Acceptance::Kind::Fixed && (p.acceptance.fixed < 1 || p.acceptance.fixed > T))
      throw ConfigError(fmt::format("traffic: acceptance fixed:{} must be in 1..window ({})", p.acceptance.fixed, T));
    r.tokens = mean_committed(p.acceptance, T);
    if (s == "spec-eager") {
      // One state read, one state written per draft position (the accepted one is picked afterwards).
      r.nonflush = r.flush = r.amortised = S * (1 + T) + g.inputs * T;
      return r;
    }
    check_positive("interval", p.interval);
    check_positive("buffer_bytes", p.buffer_bytes);
    const int K = p.interval;
    const int L = p.buffer_len > 0 ? p.buffer_len : K + T;
    if (L < K + T)
      throw ConfigError(fmt::format("traffic: buffer_len ({}) must hold an interval ({}) plus a window ({})", L, K, T));
    // Dual: windows read the read copy; the flush reads and writes the update copy and writes the read copy, and
    // that window's outputs come from the fresh update values (no read-copy read).
    Bytes read_copy = S;
    if (p.read_bytes > 0) read_copy = state_pass(g, p, p.read_bytes);
    // The kernels' schedule: a window that starts from h committed entries folds them into the checkpoint first when
    // spec_flushes(h) (the interval reached, or the next window might not fit), and every window commits k of its T
    // entries. spec_schedule gives the long-run share of windows that flush and the mean fills they start from.
    const SpecSchedule sc = spec_schedule(p.acceptance, T, K, L);
    const double f = sc.flush_share;
    // Mean fill of the windows that do not flush (none do when every window flushes: then an empty ring's).
    const double h_keep = f < 1 ? (sc.mean_fill - f * sc.mean_folded) / (1 - f) : 0.0;
    // Every window reads the checkpoint (or the update copy) once, its h committed entries and its own T draft
    // entries once (drafts share the load: causal masking happens in registers), appends T entries and reads T tokens'
    // inputs; only a flushing window writes state.
    const Bytes stream = g.entry * T + g.inputs * T;
    r.nonflush = read_copy + stream + g.entry * (h_keep + T);
    r.flush = S * 2 + stream + g.entry * (sc.mean_folded + T);
    if (p.read_bytes > 0) r.flush = r.flush + read_copy;
    r.amortised = r.nonflush * (1 - f) + r.flush * f;
    r.per_flush = f > 0 ? 1 / f : 0.0;
    return r;
  }
  throw ConfigError(
      fmt::format("traffic: unknown scheme '{}' (accepted: eager, replay, dual, spec-eager, spec-replay)", s));
}

std::string format_label(const TrafficParams& p) {
  if (!p.label.empty()) return p.label;
  if (p.scheme == "eager" || p.scheme == "spec-eager") return fmt::format("s{}B a{}B", p.state_bytes, p.act_bytes);
  if (p.scheme == "dual")
    return fmt::format("s{}B r{}B b{}B a{}B", p.state_bytes, p.read_bytes, p.buffer_bytes, p.act_bytes);
  return fmt::format("s{}B b{}B a{}B", p.state_bytes, p.buffer_bytes, p.act_bytes);
}

}  // namespace

Traffic traffic(const Model& m, const TrafficParams& p) {
  const Geo g = geometry(m, p);
  const Steps s = model_steps(g, p);
  const double hpg = static_cast<double>(g.heads) / g.groups;
  auto per_head = [&](const Bytes& b) { return b.head + b.group / hpg; };
  auto batch = [&](const Bytes& b) { return static_cast<double>(p.batch) * (g.heads * b.head + g.groups * b.group); };
  Traffic t;
  t.per_head_nonflush = per_head(s.nonflush);
  t.per_head_flush = per_head(s.flush);
  t.per_head_amortised = per_head(s.amortised);
  t.batch_nonflush = batch(s.nonflush);
  t.batch_flush = batch(s.flush);
  t.batch_amortised = batch(s.amortised);
  t.tokens_per_step = s.tokens;
  t.steps_per_flush = s.per_flush;
  return t;
}

std::string traffic_table(const Model& m, const std::vector<TrafficParams>& rows) {
  std::vector<std::vector<std::string>> cells;
  cells.push_back({"scheme", "formats", "K", "T", "head nonflush B", "head flush B", "head amort B", "batch nonflush MiB",
                   "batch flush MiB", "batch amort MiB", "tok/step", "vs eager fp32"});
  const double mib = 1024.0 * 1024.0;
  for (const auto& p : rows) {
    const Traffic t = traffic(m, p);
    TrafficParams base;
    base.scheme = "eager";
    base.state_bytes = 4;
    base.act_bytes = p.act_bytes;
    base.batch = p.batch;
    const Traffic e = traffic(m, base);
    const bool spec = p.scheme.rfind("spec-", 0) == 0;
    const bool uses_interval = p.scheme == "replay" || p.scheme == "dual" || p.scheme == "spec-replay";
    cells.push_back({p.scheme, format_label(p), uses_interval ? std::to_string(p.interval) : "-",
                     spec ? std::to_string(p.window) : "-", fmt::format("{:.1f}", t.per_head_nonflush),
                     fmt::format("{:.1f}", t.per_head_flush), fmt::format("{:.1f}", t.per_head_amortised),
                     fmt::format("{:.3f}", t.batch_nonflush / mib), fmt::format("{:.3f}", t.batch_flush / mib),
                     fmt::format("{:.3f}", t.batch_amortised / mib), fmt::format("{:g}", t.tokens_per_step),
                     fmt::format("{:.3f}", (t.batch_amortised / t.tokens_per_step) / e.batch_amortised)});
  }
  std::vector<size_t> width(cells[0].size(), 0);
  for (const auto& r : cells)
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  std::ostringstream os;
  os << "traffic per step per layer, " << family_name(m.family) << " " << m.geometry_string() << "\n";
  for (size_t i = 0; i < cells.size(); ++i) {
    const auto& r = cells[i];
    for (size_t c = 0; c < r.size(); ++c) {
      // Text columns left-aligned, numbers right-aligned so digits line up.
      const bool text = c < 2;
      const size_t pad = width[c] - r[c].size();
      if (c) os << "  ";
      if (!text) os << std::string(pad, ' ');
      os << r[c];
      if (text && c + 1 < r.size()) os << std::string(pad, ' ');
    }
    os << "\n";
    if (i == 0) {
      size_t total = 0;
      for (size_t c = 0; c < width.size(); ++c) total += width[c] + (c ? 2 : 0);
      os << std::string(total, '-') << "\n";
    }
  }
  return os.str();
}

TrafficParams traffic_params(const Scheme& s, int batch) {
  TrafficParams t;
  t.scheme = decoder_kind_name(s.decoder);
  t.state_bytes = format_bytes(s.state_format);
  t.act_bytes = format_bytes(s.act_format);
  t.batch = batch;
  if (s.replays()) {
    t.buffer_bytes = format_bytes(s.buffer_format);
    t.interval = s.interval;
    t.buffer_len = s.buffer_len;
  }
  if (s.dual()) t.read_bytes = format_bytes(s.read_format);
  if (s.speculative()) {
    t.scheme = s.replays() ? "spec-replay" : "spec-eager";
    t.window = s.window;
    t.buffer_len = s.replays() ? s.spec_hist() : 0;
    // The trace's acceptance has no model: modelled as every draft accepted (tokens_per_step says so).
    t.acceptance = s.acceptance;
    if (t.acceptance.kind == Acceptance::Kind::Trace) t.acceptance = Acceptance{Acceptance::Kind::All};
  }
  t.label = format_name(s.state_format) + (s.dual() ? "/" + format_name(s.read_format) : "");
  return t;
}

}  // namespace rssm
