#include "run/inspect.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "errors.h"
#include "io/h5.h"
#include "io/results.h"

namespace rssm {

std::string file_format(const std::string& path) {
  h5::Handle f = h5::open_file(path);
  if (!h5::has_attr(f, "format"))
    throw FormatError(fmt::format("{}: attribute 'format' is missing: not a replayssm trace or result file", path));
  const std::string fmt_ = h5::get_attr_string(f, "format", path);
  if (fmt_ != "replayssm-trace" && fmt_ != "replayssm-result")
    throw FormatError(fmt::format("{}: attribute 'format' is '{}' (expected replayssm-trace or replayssm-result)", path,
                                  fmt_));
  return fmt_;
}

namespace {

std::string value_text(const AttrValue& v) {
  if (const auto* d = std::get_if<double>(&v)) return fmt::format("{:.6g}", *d);
  if (const auto* i = std::get_if<long long>(&v)) return fmt::format("{}", *i);
  return std::get<std::string>(v);
}

}  // namespace

std::string describe_result_file(const std::string& path) {
  h5::Handle f = h5::open_file(path);
  std::string out = fmt::format("{}: replayssm result file\n", path);
  for (const auto& [k, v] : read_attrs(f, path)) {
    if (k == "config") continue;
    out += fmt::format("  {:<18} {}\n", k, value_text(v));
  }
  if (h5::has_attr(f, "config")) {
    out += "  config:\n";
    std::string cfg = h5::get_attr_string(f, "config", path);
    size_t pos = 0;
    while (pos < cfg.size()) {
      size_t e = cfg.find('\n', pos);
      if (e == std::string::npos) e = cfg.size();
      if (e > pos) out += "    " + cfg.substr(pos, e - pos) + "\n";
      pos = e + 1;
    }
  }
  h5::Handle runs = h5::open_group(f, "runs", path);
  const auto ids = h5::children(runs);
  out += fmt::format("runs: {}\n", ids.size());
  for (const auto& id : ids) {
    h5::Handle g = h5::open_group(runs, id, path);
    std::string line = fmt::format("  {}:", id);
    for (const auto& [k, v] : read_attrs(g, path)) line += fmt::format(" {}={}", k, value_text(v));
    out += line + "\n";
    for (const auto& ds : h5::children(g)) {
      if (!h5::exists(g, ds)) continue;
      h5::Handle o(H5Oopen(g, ds.c_str(), H5P_DEFAULT));
      if (H5Iget_type(o) != H5I_DATASET) continue;
      const auto dims = h5::shape(g, ds, path);
      if (dims.size() != 1) {
        out += fmt::format("    {:<20} shape [{}]\n", ds, fmt::join(dims, ", "));
        continue;
      }
      const auto v = h5::read_doubles(g, ds, path);
      double mn = INFINITY, mx = -INFINITY, sum = 0;
      for (double x : v) {
        mn = std::min(mn, x);
        mx = std::max(mx, x);
        sum += x;
      }
      out += fmt::format("    {:<20} [{}]  min {:.4g}  mean {:.4g}  max {:.4g}\n", ds, v.size(), mn,
                         v.empty() ? 0.0 : sum / v.size(), mx);
    }
  }
  if (h5::exists(f, "summary")) {
    h5::Handle s = h5::open_group(f, "summary", path);
    out += fmt::format("summary columns: {}\n", fmt::join(h5::children(s), ", "));
  }
  return out;
}

}  // namespace rssm
