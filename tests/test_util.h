// Helpers shared by the tests: a scratch folder removed at the end, running the CLI and capturing its output, and
// the numeric comparisons every test uses (they fail on NaN and inf instead of dropping them).
#pragma once

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace rssm::test {

// Comparisons of computed values. A loop like `worst = std::max(worst, err)` or `if (err > worst) worst = err`
// silently drops a NaN (every comparison with NaN is false), so a decoder emitting one NaN per step passed every
// check. Here any non-finite value in the inputs makes the result NaN, and NaN fails every check made of it, in
// either direction: `r < bound` and `r > bound` are both false.
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Running maximum that keeps a NaN (std::max(acc, NaN) returns acc) and an inf.
inline double max_keep_nan(double acc, double x) { return std::isnan(acc) || std::isnan(x) ? kNaN : std::max(acc, x); }

// Relative error of a against b in the max norm: max |a - b| / max |b|, over n elements (x: any layout, same in
// both). NaN when any element of either is non-finite; 0 when both are all zeros, inf when only b is.
inline double max_rel(const double* a, const double* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return kNaN;
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  if (den == 0) return num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return num / den;
}

// Same, for whole vectors; vectors of different sizes compare as NaN.
inline double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() ? max_rel(a.data(), b.data(), a.size()) : kNaN;
}

// Relative error in the 2-norm: ||a - b|| / ||b|| over n elements, with the same non-finite rule as max_rel.
inline double rel_rms(const double* a, const double* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return kNaN;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  if (den == 0) return num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

inline double rel_rms(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() ? rel_rms(a.data(), b.data(), a.size()) : kNaN;
}

// The per-step output error the tolerance table bounds (metrics/tolerance.h, metrics/output_error.h): the mean over
// sequences of rel_rms of each sequence's output. y, y_ref: [seqs, out_elems] of one step.
inline double step_rel_mean(const double* y, const double* y_ref, int seqs, int out_elems) {
  double sum = 0;
  for (int q = 0; q < seqs; ++q) {
    const size_t at = static_cast<size_t>(q) * out_elems;
    sum += rel_rms(y + at, y_ref + at, static_cast<size_t>(out_elems));
  }
  return sum / seqs;
}

// Its maximum over steps [from, steps): the quantity Tolerance::rel_max bounds. y, y_ref: [steps, seqs, out_elems].
inline double worst_step_rel(const std::vector<double>& y, const std::vector<double>& y_ref, long long from,
                             long long steps, int seqs, int out_elems) {
  const size_t per = static_cast<size_t>(seqs) * out_elems;
  if (y.size() != y_ref.size() || y.size() < static_cast<size_t>(steps) * per) return kNaN;
  double worst = 0;
  for (long long s = from; s < steps; ++s)
    worst = max_keep_nan(worst, step_rel_mean(&y[s * per], &y_ref[s * per], seqs, out_elems));
  return worst;
}

// A fresh folder under $TMPDIR (or /tmp), removed with everything in it when the object goes.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/replayssm-test-XXXXXX";
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

struct CmdResult {
  int code = -1;
  std::string out, err;
};

// Runs `replayssm <args>` (args are shell words, quoted by the caller where needed) with stdout and stderr captured.
inline CmdResult run_cli(const std::string& args, const TempDir& dir) {
  const std::string out = dir / "cli.stdout", err = dir / "cli.stderr";
  const std::string cmd = std::string(REPLAYSSM_CLI) + " " + args + " >" + out + " 2>" + err + " </dev/null";
  const int status = std::system(cmd.c_str());
  CmdResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

// Files in `dir` whose name contains `needle` (used to check that no temporary result file is left behind).
inline int count_files_containing(const std::string& dir, const std::string& needle) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().find(needle) != std::string::npos) ++n;
  return n;
}

}  // namespace rssm::test
