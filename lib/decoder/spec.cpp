#include "decoder/spec.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>
#include <fmt/format.h>

#include "errors.h"
#include "numeric/philox.h"

namespace rssm {

std::string Acceptance::text() const {
  switch (kind) {
    case Kind::All: return "all";
    case Kind::Fixed: return fmt::format("fixed:{}", fixed);
    case Kind::Prob: return fmt::format("prob:{:g}", p);
    default: return "trace";
  }
}

Acceptance parse_acceptance(const std::string& s) {
  Acceptance a;
  const auto bad = [&](const std::string& why) {
    return ConfigError(fmt::format(
        "{}: expected all, fixed:N (N tokens per window), prob:P (0 <= P <= 1) or trace (got '{}')", why, s));
  };
  if (s == "all") {
    a.kind = Acceptance::Kind::All;
  } else if (s == "trace") {
    a.kind = Acceptance::Kind::Trace;
  } else if (s.rfind("fixed:", 0) == 0) {
    const std::string v = s.substr(6);
    char* end = nullptr;
    const long n = v.empty() ? 0 : std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < 1 || n > 1024) throw bad("fixed:N needs an integer N >= 1");
    a.kind = Acceptance::Kind::Fixed;
    a.fixed = static_cast<int>(n);
  } else if (s.rfind("prob:", 0) == 0) {
    const std::string v = s.substr(5);
    char* end = nullptr;
    const double p = v.empty() ? -1 : std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !(p >= 0.0 && p <= 1.0)) throw bad("prob:P needs 0 <= P <= 1");
    a.kind = Acceptance::Kind::Prob;
    a.p = p;
  } else {
    throw bad("unknown acceptance model");
  }
  return a;
}

double mean_committed(const Acceptance& a, int window) {
  switch (a.kind) {
    case Acceptance::Kind::All: return window;
    case Acceptance::Kind::Fixed: return a.fixed < window ? a.fixed : window;
    case Acceptance::Kind::Prob: {
      double m = 0, pk = 1;  // 1 + p + p² + ... + p^(T−1)
      for (int k = 0; k < window; ++k, pk *= a.p) m += pk;
      return m;
    }
    default: return -1;
  }
}

SpecSchedule spec_schedule(const Acceptance& a, int window, int interval, int hist) {
  if (window < 1 || interval < 1 || hist < interval + window)
    throw ConfigError(fmt::format("spec_schedule: needs window >= 1, interval >= 1 and hist >= interval + window (got "
                                  "window {}, interval {}, hist {})",
                                  window, interval, hist));
  if (a.kind == Acceptance::Kind::Trace)
    throw ConfigError("spec_schedule: acceptance 'trace' has no model to take a schedule from");
  const int T = window;
  // P(a window commits k tokens), as AcceptanceDraw::tokens draws k.
  std::vector<double> q(T + 1, 0.0);
  if (a.kind == Acceptance::Kind::Prob) {
    for (int k = 1; k <= T; ++k) q[k] = std::pow(a.p, k - 1) * (k < T ? 1 - a.p : 1.0);
  } else {
    q[a.kind == Acceptance::Kind::All ? T : std::min(a.fixed, T)] = 1.0;
  }
  // States h = 0 .. hist: a non-flushing h has h + 2T <= hist, so h + k < hist; a flushing one restarts at k <= T.
  std::vector<double> mean(hist + 1, 0.0);
  const auto after = [&](int h, int k) { return (spec_flushes(h, interval, T, hist) ? 0 : h) + k; };
  const int sure = static_cast<int>(std::find(q.begin(), q.end(), 1.0) - q.begin());
  if (sure <= T) {
    // One count for certain (all, fixed:N, prob:0 or 1): the fills are a sequence that enters a cycle; its mean is the
    // cycle's, exactly, whatever the cycle's length (a power iteration's Cesàro mean is off by up to length / steps).
    std::vector<int> seen(hist + 1, -1), path;
    int h = 0;
    while (seen[h] < 0) seen[h] = static_cast<int>(path.size()), path.push_back(h), h = after(h, sure);
    const int first = seen[h], len = static_cast<int>(path.size()) - first;
    for (int i = first; i < static_cast<int>(path.size()); ++i) mean[path[i]] += 1.0 / len;
  } else {
    // Random counts: k = 1 and k = 2 both occur, so the chain is aperiodic and its distribution converges.
    std::vector<double> pi(hist + 1, 0.0), next(hist + 1);
    pi[0] = 1.0;
    constexpr int kBurn = 2000, kSteps = 8000;
    for (int it = 0; it < kBurn + kSteps; ++it) {
      std::fill(next.begin(), next.end(), 0.0);
      for (int h = 0; h <= hist; ++h) {
        if (pi[h] == 0) continue;
        for (int k = 1; k <= T; ++k) next[after(h, k)] += pi[h] * q[k];
      }
      pi.swap(next);
      if (it >= kBurn)
        for (int h = 0; h <= hist; ++h) mean[h] += pi[h] / kSteps;
    }
  }
  SpecSchedule s;
  s.mean_committed = mean_committed(a, T);
  double folded = 0;
  for (int h = 0; h <= hist; ++h) {
    if (spec_flushes(h, interval, T, hist)) s.flush_share += mean[h], folded += mean[h] * h;
    s.mean_fill += mean[h] * h;
    if (mean[h] > 0) s.max_fill = h;
  }
  s.mean_folded = s.flush_share > 0 ? folded / s.flush_share : 0;
  return s;
}

AcceptanceDraw::AcceptanceDraw(const Acceptance& a, int window, uint64_t seed, std::vector<std::vector<int>> trace)
    : a_(a), window_(window), seed_(seed), trace_(std::move(trace)) {
  if (window < 1) throw InternalError("AcceptanceDraw: window < 1");
}

int AcceptanceDraw::tokens(int row, long long w) const {
  switch (a_.kind) {
    case Acceptance::Kind::All: return window_;
    case Acceptance::Kind::Fixed: return a_.fixed < window_ ? a_.fixed : window_;
    case Acceptance::Kind::Prob: {
      // One Philox block per (row, window): counter (window lo, window hi, row, stream tag), key = seed.
      const uint32_t tag = 0x53504543u;  // "SPEC": a stream of its own, apart from synth's and rounding's
      int t = 1;
      uint32_t ctr = 0;
      PhiloxBlock b{};
      for (int d = 1; d < window_; ++d) {
        if ((d - 1) % 4 == 0)
          b = philox4x32_10(PhiloxBlock{{static_cast<uint32_t>(w), static_cast<uint32_t>(w >> 32),
                                          static_cast<uint32_t>(row), tag + ctr++}},
                            static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32));
        if (!(uniform01_double(b.v[(d - 1) % 4]) < a_.p)) break;
        ++t;
      }
      return t;
    }
    default: {
      if (row < 0 || static_cast<size_t>(row) >= trace_.size())
        throw ConfigError(fmt::format("trace dataset '/spec/accepted' has no counts for sequence {}", row));
      const auto& v = trace_[static_cast<size_t>(row)];
      if (w >= static_cast<long long>(v.size()))
        throw ConfigError(fmt::format("trace dataset '/spec/accepted': sequence {} has {} windows, the run needs more "
                                      "(store more counts or run fewer steps)",
                                      row, v.size()));
      const int t = v[static_cast<size_t>(w)];
      return t < 1 ? 1 : (t > window_ ? window_ : t);
    }
  }
}

}  // namespace rssm
