#include "io/h5.h"

#include <hdf5_hl.h>

#include <fmt/format.h>
#include <cstring>
#include <fstream>
#include <algorithm>

#include "errors.h"

namespace rssm::h5 {

namespace {

[[noreturn]] void fail(const std::string& msg) { throw FormatError(msg); }

std::string obj_name(hid_t obj) {
  ssize_t n = H5Iget_name(obj, nullptr, 0);
  if (n <= 0) return "?";
  std::string s(static_cast<size_t>(n) + 1, '\0');
  H5Iget_name(obj, s.data(), s.size());
  s.resize(static_cast<size_t>(n));
  return s;
}

std::string file_name(hid_t obj) {
  ssize_t n = H5Fget_name(obj, nullptr, 0);
  if (n <= 0) return "?";
  std::string s(static_cast<size_t>(n) + 1, '\0');
  H5Fget_name(obj, s.data(), s.size());
  s.resize(static_cast<size_t>(n));
  return s;
}

Handle plist_with_chunks(const std::vector<hsize_t>& dims, const std::vector<hsize_t>& chunk) {
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_obj_track_times(dcpl, false);
  if (!chunk.empty()) {
    std::vector<hsize_t> c(chunk);
    for (size_t i = 0; i < c.size(); ++i) c[i] = std::max<hsize_t>(1, std::min(c[i], std::max<hsize_t>(1, dims[i])));
    H5Pset_chunk(dcpl, static_cast<int>(c.size()), c.data());
    H5Pset_shuffle(dcpl);
    H5Pset_deflate(dcpl, 4);
  }
  return dcpl;
}

template <class T>
void write_impl(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims, const T* data,
                const std::vector<hsize_t>& chunk, hid_t file_type, hid_t mem_type) {
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  Handle dcpl = plist_with_chunks(dims, chunk);
  Handle ds(H5Dcreate2(loc, name.c_str(), file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
  if (!ds.valid()) fail(fmt::format("{}: cannot create dataset '{}' in {}", file_name(loc), name, obj_name(loc)));
  if (H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    fail(fmt::format("{}: cannot write dataset '{}'", file_name(loc), name));
}

Handle open_dataset(hid_t loc, const std::string& name, const std::string& file) {
  if (!exists(loc, name)) fail(fmt::format("{}: dataset '{}' is missing", file, name));
  Handle ds(H5Dopen2(loc, name.c_str(), H5P_DEFAULT));
  if (!ds.valid()) fail(fmt::format("{}: '{}' is not a readable dataset", file, name));
  return ds;
}

Handle open_attr(hid_t obj, const std::string& name, const std::string& file) {
  if (H5Aexists(obj, name.c_str()) <= 0)
    fail(fmt::format("{}: attribute '{}' is missing on {}", file, name, obj_name(obj)));
  return Handle(H5Aopen(obj, name.c_str(), H5P_DEFAULT));
}

}  // namespace

void silence() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

void Handle::reset() {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE: H5Fclose(id_); break;
    case H5I_GROUP: H5Gclose(id_); break;
    case H5I_DATASET: H5Dclose(id_); break;
    case H5I_DATASPACE: H5Sclose(id_); break;
    case H5I_DATATYPE: H5Tclose(id_); break;
    case H5I_ATTR: H5Aclose(id_); break;
    case H5I_GENPROP_LST: H5Pclose(id_); break;
    default: break;
  }
  id_ = H5I_INVALID_HID;
}

Handle create_file(const std::string& path) {
  silence();
  Handle fcpl(H5Pcreate(H5P_FILE_CREATE));
  H5Pset_obj_track_times(fcpl, false);
  // Keep insertion order of links and attributes so readers (and rewrites) see them in the order written.
  H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
  H5Pset_attr_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS));
  // Pin the on-disk format to the oldest that has what we need, so files are the same whatever library wrote them.
  H5Pset_libver_bounds(fapl, H5F_LIBVER_EARLIEST, H5F_LIBVER_V18);
  Handle f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, fapl));
  if (!f.valid()) fail(fmt::format("{}: cannot create HDF5 file", path));
  return f;
}

bool is_hdf5(const std::string& path) {
  silence();
  return H5Fis_hdf5(path.c_str()) > 0;
}

Handle open_file(const std::string& path, bool write) {
  silence();
  {
    std::ifstream probe(path, std::ios::binary);
    if (!probe) fail(fmt::format("{}: cannot open file (missing or unreadable)", path));
  }
  if (!is_hdf5(path)) fail(fmt::format("{}: not an HDF5 file", path));
  Handle f(H5Fopen(path.c_str(), write ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!f.valid()) fail(fmt::format("{}: cannot open HDF5 file (truncated or corrupt)", path));
  return f;
}

Handle create_group(hid_t loc, const std::string& name) {
  Handle gcpl(H5Pcreate(H5P_GROUP_CREATE));
  H5Pset_obj_track_times(gcpl, false);
  H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
  H5Pset_attr_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl, 1);
  Handle g(H5Gcreate2(loc, name.c_str(), lcpl, gcpl, H5P_DEFAULT));
  if (!g.valid()) fail(fmt::format("{}: cannot create group '{}'", file_name(loc), name));
  return g;
}

Handle open_group(hid_t loc, const std::string& name, const std::string& file) {
  if (!exists(loc, name)) fail(fmt::format("{}: group '{}' is missing", file, name));
  Handle g(H5Gopen2(loc, name.c_str(), H5P_DEFAULT));
  if (!g.valid()) fail(fmt::format("{}: '{}' is not a group", file, name));
  return g;
}

bool exists(hid_t loc, const std::string& path) {
  size_t pos = 0;
  while (true) {
    size_t next = path.find('/', pos + 1);
    std::string prefix = path.substr(0, next);
    if (!prefix.empty() && prefix != "/" && H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (next == std::string::npos) break;
    pos = next;
  }
  return path.empty() || H5Oexists_by_name(loc, path.c_str(), H5P_DEFAULT) > 0;
}

void set_attr(hid_t obj, const std::string& name, const std::string& value) {
  Handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type, std::max<size_t>(1, value.size()));
  H5Tset_strpad(type, H5T_STR_NULLPAD);
  H5Tset_cset(type, H5T_CSET_UTF8);
  Handle space(H5Screate(H5S_SCALAR));
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  Handle a(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT));
  if (!a.valid() || H5Awrite(a, type, value.empty() ? "" : value.data()) < 0)
    fail(fmt::format("{}: cannot write attribute '{}'", file_name(obj), name));
}

namespace {
template <class T>
void set_scalar_attr(hid_t obj, const std::string& name, T value, hid_t file_type, hid_t mem_type) {
  Handle space(H5Screate(H5S_SCALAR));
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  Handle a(H5Acreate2(obj, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT));
  if (!a.valid() || H5Awrite(a, mem_type, &value) < 0)
    fail(fmt::format("{}: cannot write attribute '{}'", file_name(obj), name));
}
}  // namespace

void set_attr(hid_t obj, const std::string& name, long long value) {
  set_scalar_attr(obj, name, value, H5T_STD_I64LE, H5T_NATIVE_LLONG);
}
void set_attr(hid_t obj, const std::string& name, double value) {
  set_scalar_attr(obj, name, value, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE);
}

bool has_attr(hid_t obj, const std::string& name) { return H5Aexists(obj, name.c_str()) > 0; }

std::string get_attr_string(hid_t obj, const std::string& name, const std::string& file) {
  Handle a = open_attr(obj, name, file);
  Handle type(H5Aget_type(a));
  if (H5Tget_class(type) != H5T_STRING) fail(fmt::format("{}: attribute '{}' is not a string", file, name));
  if (H5Tis_variable_str(type) > 0) {
    char* p = nullptr;
    Handle mt(H5Tcopy(H5T_C_S1));
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, H5Tget_cset(type));  // h5py writes UTF-8 variable-length strings
    if (H5Aread(a, mt, &p) < 0) fail(fmt::format("{}: cannot read attribute '{}'", file, name));
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  size_t n = H5Tget_size(type);
  std::string s(n, '\0');
  if (H5Aread(a, type, s.data()) < 0) fail(fmt::format("{}: cannot read attribute '{}'", file, name));
  s.resize(std::strlen(s.c_str()));
  return s;
}

long long get_attr_int(hid_t obj, const std::string& name, const std::string& file) {
  Handle a = open_attr(obj, name, file);
  Handle type(H5Aget_type(a));
  if (H5Tget_class(type) != H5T_INTEGER) fail(fmt::format("{}: attribute '{}' is not an integer", file, name));
  long long v = 0;
  if (H5Aread(a, H5T_NATIVE_LLONG, &v) < 0) fail(fmt::format("{}: cannot read attribute '{}'", file, name));
  return v;
}

double get_attr_double(hid_t obj, const std::string& name, const std::string& file) {
  Handle a = open_attr(obj, name, file);
  Handle type(H5Aget_type(a));
  const auto cls = H5Tget_class(type);
  if (cls != H5T_FLOAT && cls != H5T_INTEGER) fail(fmt::format("{}: attribute '{}' is not a number", file, name));
  double v = 0;
  if (H5Aread(a, H5T_NATIVE_DOUBLE, &v) < 0) fail(fmt::format("{}: cannot read attribute '{}'", file, name));
  return v;
}

void write(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims, const double* data,
           const std::vector<hsize_t>& chunk) {
  write_impl(loc, name, dims, data, chunk, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE);
}
void write(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims, const float* data,
           const std::vector<hsize_t>& chunk) {
  write_impl(loc, name, dims, data, chunk, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT);
}
void write(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims, const long long* data,
           const std::vector<hsize_t>& chunk) {
  write_impl(loc, name, dims, data, chunk, H5T_STD_I64LE, H5T_NATIVE_LLONG);
}

void write_strings(hid_t loc, const std::string& name, const std::vector<std::string>& values) {
  // Variable-length UTF-8 strings: h5py reads them as str (bytes with .asstr()), pandas/xarray accept them.
  Handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  hsize_t n = values.size();
  Handle space(H5Screate_simple(1, &n, nullptr));
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_obj_track_times(dcpl, false);
  Handle ds(H5Dcreate2(loc, name.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
  if (!ds.valid()) fail(fmt::format("{}: cannot create dataset '{}'", file_name(loc), name));
  std::vector<const char*> ptrs;
  for (const auto& s : values) ptrs.push_back(s.c_str());
  if (n > 0 && H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()) < 0)
    fail(fmt::format("{}: cannot write dataset '{}'", file_name(loc), name));
}

std::vector<hsize_t> shape(hid_t loc, const std::string& name, const std::string& file) {
  Handle ds = open_dataset(loc, name, file);
  Handle space(H5Dget_space(ds));
  int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0) fail(fmt::format("{}: cannot read the shape of dataset '{}'", file, name));
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  return dims;
}

namespace {
hsize_t count(const std::vector<hsize_t>& dims) {
  hsize_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}
}  // namespace

std::vector<double> read_doubles(hid_t loc, const std::string& name, const std::string& file) {
  Handle ds = open_dataset(loc, name, file);
  Handle type(H5Dget_type(ds));
  const auto cls = H5Tget_class(type);
  if (cls != H5T_FLOAT && cls != H5T_INTEGER)
    fail(fmt::format("{}: dataset '{}' is not numeric", file, name));
  std::vector<double> v(count(shape(loc, name, file)));
  if (!v.empty() && H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    fail(fmt::format("{}: cannot read dataset '{}' (truncated or corrupt)", file, name));
  return v;
}

std::vector<long long> read_ints(hid_t loc, const std::string& name, const std::string& file) {
  Handle ds = open_dataset(loc, name, file);
  Handle type(H5Dget_type(ds));
  if (H5Tget_class(type) != H5T_INTEGER) fail(fmt::format("{}: dataset '{}' is not an integer dataset", file, name));
  std::vector<long long> v(count(shape(loc, name, file)));
  if (!v.empty() && H5Dread(ds, H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    fail(fmt::format("{}: cannot read dataset '{}' (truncated or corrupt)", file, name));
  return v;
}

std::vector<std::string> read_strings(hid_t loc, const std::string& name, const std::string& file) {
  Handle ds = open_dataset(loc, name, file);
  Handle ftype(H5Dget_type(ds));
  if (H5Tget_class(ftype) != H5T_STRING) fail(fmt::format("{}: dataset '{}' is not a string dataset", file, name));
  const hsize_t n = count(shape(loc, name, file));
  std::vector<std::string> out;
  if (H5Tis_variable_str(ftype) > 0) {
    std::vector<char*> ptrs(n, nullptr);
    Handle mt(H5Tcopy(H5T_C_S1));
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, H5Tget_cset(ftype));
    if (n > 0 && H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()) < 0)
      fail(fmt::format("{}: cannot read dataset '{}'", file, name));
    for (auto* p : ptrs) out.emplace_back(p ? p : "");
    Handle space(H5Dget_space(ds));
    if (n > 0) H5Dvlen_reclaim(mt, space, H5P_DEFAULT, ptrs.data());
  } else {
    const size_t w = H5Tget_size(ftype);
    std::string buf(n * w, '\0');
    if (n > 0 && H5Dread(ds, ftype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0)
      fail(fmt::format("{}: cannot read dataset '{}'", file, name));
    for (hsize_t i = 0; i < n; ++i) {
      std::string s = buf.substr(i * w, w);
      s.resize(std::strlen(s.c_str()));
      out.push_back(s);
    }
  }
  return out;
}

void attach_scale(hid_t loc, const std::string& dataset_name, const std::string& scale_name, unsigned dim) {
  Handle ds(H5Dopen2(loc, dataset_name.c_str(), H5P_DEFAULT));
  Handle sc(H5Dopen2(loc, scale_name.c_str(), H5P_DEFAULT));
  if (!ds.valid() || !sc.valid())
    fail(fmt::format("{}: cannot attach scale '{}' to '{}'", file_name(loc), scale_name, dataset_name));
  if (H5DSis_scale(sc) <= 0) H5DSset_scale(sc, scale_name.c_str());
  if (H5DSattach_scale(ds, sc, dim) < 0)
    fail(fmt::format("{}: cannot attach scale '{}' to '{}'", file_name(loc), scale_name, dataset_name));
}

namespace {
herr_t collect_link(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}
herr_t collect_attr(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}
}  // namespace

std::vector<std::string> children(hid_t group) {
  std::vector<std::string> v;
  if (H5Literate(group, H5_INDEX_CRT_ORDER, H5_ITER_INC, nullptr, collect_link, &v) < 0) {
    v.clear();
    H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_link, &v);
  }
  return v;
}

std::vector<std::string> attribute_names(hid_t obj) {
  std::vector<std::string> v;
  hsize_t idx = 0;
  if (H5Aiterate2(obj, H5_INDEX_CRT_ORDER, H5_ITER_INC, &idx, collect_attr, &v) < 0) {
    v.clear();
    idx = 0;
    H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attr, &v);
  }
  return v;
}

}  // namespace rssm::h5
