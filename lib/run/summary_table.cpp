#include "run/summary_table.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <cmath>
#include <ostream>

#include "run/config.h"

namespace rssm {

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
  size_t label_w = 22;  // the decoder column fits the longest label (cuda and speculative labels run longer)
  for (const auto& r : recs) label_w = std::max(label_w, cell_text(r.summary, "decoder_label", "{}").size());
  std::string head = fmt::format("{:<9} {:<{}}", "run", "decoder", label_w);
  for (const auto& k : varying) head += fmt::format(" {:>12}", k.substr(0, 12));
  head += fmt::format(" {:>11} {:>11} {:>11}", "rel err", "rel max", "rel final");
  if (kl) head += fmt::format(" {:>10} {:>7}", "KL", "top1");
  // The time column is host wall time of the CPU emulation, never a kernel's speed: its header says so, and cuda rows
  // leave it empty (GPU speed comes from the benchmarks).
  head += fmt::format(" {:>9} {:>11}", "bytes/eag", "cpu us/step");
  fmt::print(out, "{}\n", head);
  for (const auto& r : recs) {
    std::string line = fmt::format("{:<9} {:<{}}", r.id, cell_text(r.summary, "decoder_label", "{}"), label_w);
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
    // Only a cpu row's emulation time is shown; a cuda row's host wall time (host_wall_seconds) is not a GPU speed,
    // so its cell is "-" (also in a file resumed from before the column was renamed, or read back with NaN cells).
    double secs = NAN, steps = 1;
    bool cpu = true;
    for (const auto& [k, v] : r.summary) {
      if (k == "cpu_emulation_seconds" && std::holds_alternative<double>(v)) secs = std::get<double>(v);
      if (k == "steps" && std::holds_alternative<long long>(v)) steps = static_cast<double>(std::get<long long>(v));
      if (k == "backend" && std::holds_alternative<std::string>(v)) cpu = std::get<std::string>(v) == "cpu";
    }
    const std::string us = cpu && std::isfinite(secs) && steps > 0 ? fmt::format("{:.1f}", 1e6 * secs / steps) : "-";
    line += fmt::format(" {:>9} {:>11}", cell_text(r.summary, "bytes_vs_eager_fp32", "{:.3f}"), us);
    fmt::print(out, "{}\n", line);
  }
}

}  // namespace rssm
