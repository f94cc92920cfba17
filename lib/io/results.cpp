#include "io/results.h"

#include <hdf5_hl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <algorithm>

#include "errors.h"

namespace rssm {

void set_attrs(hid_t obj, const AttrMap& attrs) {
  for (const auto& [k, v] : attrs) std::visit([&, key = k](const auto& x) { h5::set_attr(obj, key, x); }, v);
}

namespace {

std::vector<hsize_t> to_hsize(const std::vector<long long>& v) { return std::vector<hsize_t>(v.begin(), v.end()); }

void write_series_group(hid_t g, const SeriesGroup& sg) {
  const std::vector<hsize_t> dims = {sg.index.size()};
  const std::vector<hsize_t> chunk = {std::min<hsize_t>(std::max<hsize_t>(1, sg.index.size()), 4096)};
  h5::write(g, sg.index_name, dims, sg.index.data(), chunk);
  for (const auto& [name, v] : sg.series) {
    if (v.size() != sg.index.size())
      throw InternalError(fmt::format("series {} has {} values for {} indices", name, v.size(), sg.index.size()));
    h5::write(g, name, dims, v.data(), chunk);
    h5::attach_scale(g, name, sg.index_name, 0);
    h5::Handle ds(H5Dopen2(g, name.c_str(), H5P_DEFAULT));
    h5::set_attr(ds, "index", sg.index_name);
  }
}

void write_outputs(hid_t loc, const std::string& name, const std::vector<long long>& dims,
                   const std::vector<double>& v) {
  std::vector<hsize_t> d = to_hsize(dims);
  std::vector<hsize_t> chunk = d;
  chunk[0] = std::min<hsize_t>(16, std::max<hsize_t>(1, d[0]));
  h5::write(loc, name, d, v.data(), chunk);
}

// A text cell that holds a whole integer (an older file's sweep parameter, stored as text before counts became
// integers): its value, or nullopt.
std::optional<long long> integer_text(const std::string& t) {
  if (t.empty()) return std::nullopt;
  try {
    size_t used = 0;
    const long long v = std::stoll(t, &used);
    if (used == t.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::string cell_as_text(const AttrValue& v) {
  if (const auto* i = std::get_if<long long>(&v)) return fmt::format("{}", *i);
  if (const auto* d = std::get_if<double>(&v)) return fmt::format("{}", *d);
  return std::get<std::string>(v);
}

// Summary columns: the union of every record's columns in first-seen order; missing cells are NaN / "" / 0. A column
// whose cells disagree in type (runs resumed or merged from a file written before sweep counts were integers) is
// written as integers when every text cell is one, as doubles when it mixes integers and doubles, else as text.
void write_summary(hid_t file, const std::vector<RunRecord>& runs) {
  enum Kind { kText = 1, kInt = 2, kReal = 4 };
  std::vector<std::pair<std::string, int>> cols;  // name -> kinds seen
  std::map<std::string, bool> text_all_ints;
  for (const auto& r : runs)
    for (const auto& [k, v] : r.summary) {
      const int kind = std::holds_alternative<std::string>(v) ? kText : std::holds_alternative<long long>(v) ? kInt : kReal;
      auto it = std::find_if(cols.begin(), cols.end(), [&, n = k](const auto& c) { return c.first == n; });
      if (it == cols.end()) {
        cols.emplace_back(k, kind);
        text_all_ints[k] = true;
      } else {
        it->second |= kind;
      }
      if (kind == kText) text_all_ints[k] = text_all_ints[k] && integer_text(std::get<std::string>(v)).has_value();
    }
  h5::Handle g = h5::create_group(file, "summary");
  for (const auto& [name, kinds] : cols) {
    auto cell = [&, n = name](const RunRecord& r) -> const AttrValue* {
      for (const auto& [k, v] : r.summary)
        if (k == n) return &v;
      return nullptr;
    };
    const bool as_int = kinds == kInt || (kinds == (kInt | kText) && text_all_ints[name]);
    const bool as_real = !as_int && (kinds & kText) == 0;
    if (as_int) {
      std::vector<long long> v;
      for (const auto& r : runs) {
        const AttrValue* c = cell(r);
        if (c && std::holds_alternative<long long>(*c)) v.push_back(std::get<long long>(*c));
        else if (c && std::holds_alternative<std::string>(*c)) v.push_back(*integer_text(std::get<std::string>(*c)));
        else v.push_back(0);
      }
      h5::write(g, name, {v.size()}, v.data());
    } else if (as_real) {
      std::vector<double> v;
      for (const auto& r : runs) {
        const AttrValue* c = cell(r);
        if (c && std::holds_alternative<double>(*c)) v.push_back(std::get<double>(*c));
        else if (c && std::holds_alternative<long long>(*c)) v.push_back(static_cast<double>(std::get<long long>(*c)));
        else v.push_back(std::numeric_limits<double>::quiet_NaN());
      }
      h5::write(g, name, {v.size()}, v.data());
    } else {
      std::vector<std::string> v;
      for (const auto& r : runs) {
        const AttrValue* c = cell(r);
        v.push_back(c ? cell_as_text(*c) : "");
      }
      h5::write_strings(g, name, v);
    }
  }
}

}  // namespace

void write_result_file(const std::string& path, const ResultSet& rs) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  if (p.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(p.parent_path(), ec);
    if (ec)
      throw ConfigError(
          fmt::format("run.output: cannot create folder '{}': {}", p.parent_path().string(), ec.message()));
  }
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  try {
    {
      h5::Handle f = h5::create_file(tmp);
      h5::set_attr(f, "format", std::string("replayssm-result"));
      h5::set_attr(f, "version", 1LL);
      set_attrs(f, rs.root);
      h5::create_group(f, "runs");
      for (const auto& r : rs.runs) {
        if (!r.completed()) continue;
        h5::Handle g = h5::create_group(f, "runs/" + r.id);
        set_attrs(g, r.attrs);
        for (const auto& sg : r.groups) write_series_group(g, sg);
        if (!r.outputs.empty()) write_outputs(g, "outputs", r.output_dims, r.outputs);
      }
      for (const auto& [act, v] : rs.reference_outputs) {
        h5::Handle g = h5::create_group(f, "reference/" + act);
        write_outputs(g, "outputs", rs.reference_dims, v);
      }
      write_summary(f, rs.runs);
      if (H5Fflush(f, H5F_SCOPE_GLOBAL) < 0) throw FormatError(fmt::format("{}: cannot flush result file", tmp));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw FormatError(fmt::format("{}: cannot rename the result file into place ({})", path, std::strerror(errno)));
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

int remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const std::string prefix = p.filename().string() + ".tmp.";
  int removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string pid_text = name.substr(prefix.size());
    if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    const long pid = std::stol(pid_text);
    if (pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) continue;  // still running
    fs::remove(e.path(), ec);
    ++removed;
  }
  return removed;
}

AttrMap read_attrs(hid_t obj, const std::string& file) {
  AttrMap out;
  for (const auto& n : h5::attribute_names(obj)) {
    if (n == "DIMENSION_LIST" || n == "REFERENCE_LIST" || n == "CLASS" || n == "NAME") continue;
    h5::Handle a(H5Aopen(obj, n.c_str(), H5P_DEFAULT));
    h5::Handle t(H5Aget_type(a));
    switch (H5Tget_class(t)) {
      case H5T_STRING: out.emplace_back(n, h5::get_attr_string(obj, n, file)); break;
      case H5T_INTEGER: out.emplace_back(n, h5::get_attr_int(obj, n, file)); break;
      case H5T_FLOAT: out.emplace_back(n, h5::get_attr_double(obj, n, file)); break;
      default: break;
    }
  }
  return out;
}

ResultSet read_result_file(const std::string& path) {
  h5::Handle f = h5::open_file(path);
  if (!h5::has_attr(f, "format") || h5::get_attr_string(f, "format", path) != "replayssm-result")
    throw FormatError(fmt::format("{}: attribute 'format' is not 'replayssm-result': not a replayssm result file", path));
  ResultSet rs;
  for (auto& a : read_attrs(f, path))
    if (a.first != "format" && a.first != "version") rs.root.push_back(a);
  // Summary rows, in order; each becomes a record (completed ones get their group below).
  h5::Handle sg = h5::open_group(f, "summary", path);
  const auto cols = h5::children(sg);
  size_t rows = 0;
  std::vector<std::pair<std::string, std::vector<AttrValue>>> table;
  for (const auto& c : cols) {
    h5::Handle ds(H5Dopen2(sg, c.c_str(), H5P_DEFAULT));
    h5::Handle t(H5Dget_type(ds));
    std::vector<AttrValue> v;
    switch (H5Tget_class(t)) {
      case H5T_STRING:
        for (auto& s : h5::read_strings(sg, c, path)) v.emplace_back(s);
        break;
      case H5T_INTEGER:
        for (auto x : h5::read_ints(sg, c, path)) v.emplace_back(x);
        break;
      default:
        for (auto x : h5::read_doubles(sg, c, path)) v.emplace_back(x);
    }
    rows = std::max(rows, v.size());
    table.emplace_back(c, std::move(v));
  }
  for (size_t i = 0; i < rows; ++i) {
    RunRecord r;
    for (const auto& [c, v] : table)
      if (i < v.size()) r.summary.emplace_back(c, v[i]);
    for (const auto& [k, v] : r.summary)
      if (k == "run") r.id = std::get<std::string>(v);
    if (r.id.empty()) throw FormatError(fmt::format("{}: /summary has no 'run' column", path));
    const std::string gname = "runs/" + r.id;
    if (h5::exists(f, gname)) {
      h5::Handle g = h5::open_group(f, gname, path);
      r.attrs = read_attrs(g, path);
      for (const auto& name : h5::children(g)) {
        h5::Handle ds(H5Dopen2(g, name.c_str(), H5P_DEFAULT));
        if (!ds.valid()) continue;
        if (name == "outputs") {
          for (auto d : h5::shape(g, name, path)) r.output_dims.push_back(static_cast<long long>(d));
          r.outputs = h5::read_doubles(g, name, path);
          continue;
        }
        if (!h5::has_attr(ds, "index")) continue;
        const std::string idx = h5::get_attr_string(ds, "index", path);
        SeriesGroup* grp = nullptr;
        for (auto& x : r.groups)
          if (x.index_name == idx) grp = &x;
        if (!grp) {
          r.groups.push_back({idx, h5::read_ints(g, idx, path), {}});
          grp = &r.groups.back();
        }
        grp->series.emplace_back(name, h5::read_doubles(g, name, path));
      }
    }
    rs.runs.push_back(std::move(r));
  }
  if (h5::exists(f, "reference")) {
    h5::Handle g = h5::open_group(f, "reference", path);
    for (const auto& act : h5::children(g)) {
      h5::Handle a = h5::open_group(g, act, path);
      rs.reference_dims.clear();
      for (auto d : h5::shape(a, "outputs", path)) rs.reference_dims.push_back(static_cast<long long>(d));
      rs.reference_outputs[act] = h5::read_doubles(a, "outputs", path);
    }
  }
  return rs;
}

}  // namespace rssm
