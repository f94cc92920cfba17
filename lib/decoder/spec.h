// Speculative decoding, the part every backend shares (METHOD.md "Speculative decoding"): how many tokens each
// verify window commits, and where a row's windows start and end.
// A window has T positions: the token the previous verify produced (always committed) and T − 1 drafts; a verify
// commits 1 + the number of leading drafts accepted. The acceptance model says how many:
//   all      every draft accepted: T tokens per window;
//   fixed:N  N tokens per window (1 <= N <= T);
//   prob:P   each draft accepted with probability P until the first rejection (geometric runs), drawn from Philox
//            keyed by (seed, row, window number), so a row's windows do not depend on chunking, batching or backend;
//   trace    the committed counts stored in the trace (dataset /spec/accepted, docs/trace_format.md).
// Every row keeps its own schedule, so rows sit at different ring fill levels, as in serving.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "numeric/hd.h"

namespace rssm {

// The flush rule of speculative replay, on a row's committed fill h after a window (METHOD.md): flush when the
// interval is reached, or early when the next window might not fit (h + 2·window > L_hist). The CPU emulation and
// the verify kernels (kernels/common/spec_kernels.h) evaluate this one function.
RSSM_HD inline bool spec_flushes(int fill, int interval, int window, int hist) {
  return fill > 0 && (fill >= interval || fill + 2 * window > hist);
}

// The most committed entries a window can find under that rule (the fill a flushing window folds at most): a
// window's fill is the previous window's (0 if that one flushed) plus at most `window` tokens, and a window that did
// not flush had h < interval and h + 2·window <= hist, so h <= window + max(0, min(interval − 1, hist − 2·window)).
// Verify kernels size their committed-entry arrays by it and clamp a corrupt cursor to it; spec_schedule's max_fill
// is the same number, reached.
RSSM_HD inline int spec_max_committed(int window, int interval, int hist) {
  const int keep = interval - 1 < hist - 2 * window ? interval - 1 : hist - 2 * window;
  return window + (keep > 0 ? keep : 0);
}

struct Acceptance {
  enum class Kind { All, Fixed, Prob, Trace };
  Kind kind = Kind::Prob;
  int fixed = 1;    // Fixed: tokens committed per window
  double p = 0.7;   // Prob: per-draft acceptance probability, in [0, 1]
  std::string text() const;  // "all", "fixed:3", "prob:0.7", "trace": parse_acceptance's input
};

// Throws ConfigError (without the key: the caller names it) listing the accepted forms.
Acceptance parse_acceptance(const std::string& s);

// Mean tokens committed per window of `window` positions (the trace model's mean is unknown: -1).
double mean_committed(const Acceptance& a, int window);

// The long-run flush schedule of one row under spec_flushes: the committed fill h before each window is a Markov
// chain (a window at h flushes when spec_flushes(h, interval, window, hist), then commits k tokens onto 0 or h, k
// drawn as AcceptanceDraw draws it), averaged over windows in the long run from an empty ring: exactly over the cycle
// the fills enter where the count is certain (all, fixed:N, prob:0 or 1), and as the limit of a power iteration
// otherwise. The benchmarks' amortised verify, and the traffic model's (metrics/traffic.h), is
// (1 − flush_share)·non-flush + flush_share·flush. Trace acceptance has no model: ConfigError.
struct SpecSchedule {
  double mean_committed = 0;  // tokens committed per window
  double flush_share = 0;     // share of windows that flush
  double mean_folded = 0;     // committed entries a flushing window folds, on average
  double mean_fill = 0;       // committed entries a window starts from, on average over all windows
  int max_fill = 0;           // the largest fill a window starts from with non-zero probability
};
SpecSchedule spec_schedule(const Acceptance& a, int window, int interval, int hist);

// The committed counts of one row's windows, in order: window w of row `row` commits tokens(w) tokens, each in
// 1..window. Trace counts (per row, from /spec/accepted) are used in order and must cover the run: running past
// them is an error naming the dataset.
class AcceptanceDraw {
 public:
  AcceptanceDraw() = default;
  AcceptanceDraw(const Acceptance& a, int window, uint64_t seed, std::vector<std::vector<int>> trace_counts = {});
  int tokens(int row, long long w) const;

 private:
  Acceptance a_;
  int window_ = 1;
  uint64_t seed_ = 0;
  std::vector<std::vector<int>> trace_;
};

// Where one row stands in its window schedule: begin() before a window's first token (when at_window_start()),
// then pos counts its committed tokens; the window ends when pos reaches committed. A run that ends inside a window
// simply stops there (the rest of that window is never verified).
struct WindowCursor {
  long long window = 0;  // windows begun (the current one is window − 1)
  int committed = 0;     // tokens the current window commits
  int pos = 0;           // tokens of the current window consumed so far
  bool at_window_start() const { return pos == committed; }
  void begin(const AcceptanceDraw& d, int row) {
    committed = d.tokens(row, window++);
    pos = 0;
  }
};

}  // namespace rssm
