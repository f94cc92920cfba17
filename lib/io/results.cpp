#include "io/results.h"

#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <unistd.h>

#include "errors.h"

namespace rssm {

void set_attrs(hid_t obj, const AttrMap& attrs) {
  for (const auto& [k, v] : attrs) std::visit([&, key = k](const auto& x) { h5::set_attr(obj, key, x); }, v);
}

ResultsWriter::ResultsWriter(const std::string& path, const AttrMap& root_attrs) : path_(path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  if (p.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(p.parent_path(), ec);
    if (ec) throw ConfigError(fmt::format("run.output: cannot create folder '{}': {}", p.parent_path().string(),
                                          ec.message()));
  }
  tmp_ = fmt::format("{}.tmp.{}", path, ::getpid());
  file_ = h5::create_file(tmp_);
  h5::set_attr(file_, "format", std::string("replayssm-result"));
  h5::set_attr(file_, "version", 1LL);
  set_attrs(file_, root_attrs);
  h5::create_group(file_, "runs");
}

ResultsWriter::~ResultsWriter() {
  if (committed_) return;
  file_.reset();
  std::remove(tmp_.c_str());
}

void ResultsWriter::write_run(const std::string& id, const AttrMap& attrs, const std::vector<long long>& steps,
                              const std::vector<std::pair<std::string, std::vector<double>>>& series) {
  const std::string name = "runs/" + id;
  h5::Handle g = h5::exists(file_, name) ? h5::open_group(file_, name, tmp_) : h5::create_group(file_, name);
  set_attrs(g, attrs);
  write_series(id, "step", steps, series);
}

void ResultsWriter::write_series(const std::string& id, const std::string& index_name,
                                 const std::vector<long long>& index,
                                 const std::vector<std::pair<std::string, std::vector<double>>>& series) {
  h5::Handle g = h5::open_group(file_, "runs/" + id, tmp_);
  const std::vector<hsize_t> dims = {index.size()};
  const std::vector<hsize_t> chunk = {std::min<hsize_t>(std::max<hsize_t>(1, index.size()), 4096)};
  h5::write(g, index_name, dims, index.data(), chunk);
  for (const auto& [name, v] : series) {
    if (v.size() != index.size())
      throw InternalError(fmt::format("series {} of run {} has {} values for {} indices", name, id, v.size(),
                                      index.size()));
    h5::write(g, name, dims, v.data(), chunk);
    h5::attach_scale(g, name, index_name, 0);
  }
}

void ResultsWriter::create_outputs(const std::string& group, const std::string& name, long long steps, int seqs,
                                   int out_elems) {
  if (!h5::exists(file_, group)) h5::create_group(file_, group);
  h5::Handle g = h5::open_group(file_, group, tmp_);
  const std::vector<hsize_t> dims = {static_cast<hsize_t>(steps), static_cast<hsize_t>(seqs),
                                     static_cast<hsize_t>(out_elems)};
  h5::Handle space(H5Screate_simple(3, dims.data(), nullptr));
  h5::Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_obj_track_times(dcpl, false);
  hsize_t ch[3] = {std::min<hsize_t>(16, std::max<hsize_t>(1, dims[0])), std::max<hsize_t>(1, dims[1]),
                   std::max<hsize_t>(1, dims[2])};
  H5Pset_chunk(dcpl, 3, ch);
  H5Pset_deflate(dcpl, 1);
  h5::Handle ds(H5Dcreate2(g, name.c_str(), H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
  if (!ds.valid()) throw FormatError(fmt::format("{}: cannot create dataset {}/{}", tmp_, group, name));
  out_dims_[group + "/" + name] = seqs * out_elems;
}

void ResultsWriter::append_outputs(const std::string& group, const std::string& name, long long step0, int n,
                                   const double* y) {
  h5::Handle ds(H5Dopen2(file_, (group + "/" + name).c_str(), H5P_DEFAULT));
  if (!ds.valid()) throw InternalError("outputs dataset missing: " + group + "/" + name);
  h5::Handle fspace(H5Dget_space(ds));
  hsize_t dims[3];
  H5Sget_simple_extent_dims(fspace, dims, nullptr);
  const hsize_t start[3] = {static_cast<hsize_t>(step0), 0, 0};
  const hsize_t count[3] = {static_cast<hsize_t>(n), dims[1], dims[2]};
  H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, count, nullptr);
  h5::Handle mspace(H5Screate_simple(3, count, nullptr));
  if (H5Dwrite(ds, H5T_NATIVE_DOUBLE, mspace, fspace, H5P_DEFAULT, y) < 0)
    throw FormatError(fmt::format("{}: cannot write outputs {}/{}", tmp_, group, name));
}

void ResultsWriter::write_summary(const std::vector<std::pair<std::string, std::vector<AttrValue>>>& columns) {
  h5::Handle g = h5::create_group(file_, "summary");
  for (const auto& [name, col] : columns) {
    if (col.empty()) {
      h5::write_strings(g, name, {});
      continue;
    }
    if (std::holds_alternative<std::string>(col[0])) {
      std::vector<std::string> v;
      for (const auto& x : col) v.push_back(std::get<std::string>(x));
      h5::write_strings(g, name, v);
    } else if (std::holds_alternative<long long>(col[0])) {
      std::vector<long long> v;
      for (const auto& x : col) v.push_back(std::get<long long>(x));
      h5::write(g, name, {v.size()}, v.data());
    } else {
      std::vector<double> v;
      for (const auto& x : col) v.push_back(std::get<double>(x));
      h5::write(g, name, {v.size()}, v.data());
    }
  }
}

void ResultsWriter::commit() {
  if (committed_) return;
  if (H5Fflush(file_, H5F_SCOPE_GLOBAL) < 0) throw FormatError(fmt::format("{}: cannot flush result file", tmp_));
  file_.reset();
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw FormatError(fmt::format("{}: cannot rename result file into place from {}", path_, tmp_));
  committed_ = true;
}

}  // namespace rssm
