#include "run/inspect.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "errors.h"
#include "io/h5.h"

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

herr_t collect_names(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}

std::vector<std::string> children(hid_t g) {
  std::vector<std::string> names;
  H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_names, &names);
  return names;
}

std::string attr_text(hid_t obj, const std::string& name, const std::string& path) {
  h5::Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT));
  h5::Handle t(H5Aget_type(a));
  switch (H5Tget_class(t)) {
    case H5T_STRING: return h5::get_attr_string(obj, name, path);
    case H5T_INTEGER: return fmt::format("{}", h5::get_attr_int(obj, name, path));
    case H5T_FLOAT: return fmt::format("{:.6g}", h5::get_attr_double(obj, name, path));
    default: return "(unprintable)";
  }
}

herr_t collect_attr(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}

std::vector<std::string> attr_names(hid_t obj) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attr, &names);
  return names;
}

}  // namespace

std::string describe_result_file(const std::string& path) {
  h5::Handle f = h5::open_file(path);
  std::string out = fmt::format("{}: replayssm result file\n", path);
  for (const auto& a : attr_names(f)) {
    if (a == "config") continue;
    out += fmt::format("  {:<18} {}\n", a, attr_text(f, a, path));
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
  const auto ids = children(runs);
  out += fmt::format("runs: {}\n", ids.size());
  for (const auto& id : ids) {
    h5::Handle g = h5::open_group(runs, id, path);
    std::string line = fmt::format("  {}:", id);
    for (const auto& a : attr_names(g)) line += fmt::format(" {}={}", a, attr_text(g, a, path));
    out += line + "\n";
    for (const auto& ds : children(g)) {
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
    out += fmt::format("summary columns: {}\n", fmt::join(children(s), ", "));
  }
  return out;
}

}  // namespace rssm
