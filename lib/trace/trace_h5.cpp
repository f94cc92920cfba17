// Trace file format v1: reader, writer, statistics. docs/trace_format.md is the specification; keep them in step.
#include "trace/trace_h5.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <limits>

#include "errors.h"
#include "io/h5.h"
#include "numeric/bits.h"

namespace rssm {

namespace {

using h5::Handle;

constexpr const char* kFormat = "replayssm-trace";
constexpr long long kVersion = 1;
// Dimensions beyond this are certainly a corrupt attribute; refusing them early avoids absurd allocations.
constexpr long long kMaxDim = 1LL << 30;
// Upper bound on one stored chunk (HDF5 refuses chunks of 4 GiB; decompressing huge chunks also hurts streaming).
constexpr size_t kMaxChunkBytes = size_t{64} << 20;
// Deflate level of every compressed dataset: fixed, so equal inputs give equal bytes. Level 1: after shuffle the
// only redundancy in float activations is in the exponent bytes, which level 1 already finds (a synthetic Nemotron-3
// Nano 30B trace, 1024 steps x 2 sequences with z: 72.7 MB at level 1, 72.2 MB at level 4, 84 MB raw).
constexpr unsigned kDeflate = 1;

template <class... Args>
[[noreturn]] void fail(const std::string& path, fmt::format_string<Args...> f, Args&&... args) {
  throw FormatError(path + ": " + fmt::format(f, std::forward<Args>(args)...));
}

std::string shape_string(const std::vector<hsize_t>& d) {
  std::vector<std::string> s;
  for (auto x : d) s.push_back(std::to_string(x));
  return "[" + fmt::format("{}", fmt::join(s, ", ")) + "]";
}

std::string dtype_name(hid_t type) {
  const size_t bits = H5Tget_size(type) * 8;
  switch (H5Tget_class(type)) {
    case H5T_FLOAT:
      return fmt::format("float{}", bits);
    case H5T_INTEGER:
      return fmt::format("{}int{}", H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "", bits);
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ENUM:
      return "enum";
    default:
      return "an unsupported type";
  }
}

Handle open_dataset(hid_t loc, const std::string& full, const std::string& path, hid_t dapl = H5P_DEFAULT) {
  if (!h5::exists(loc, full)) fail(path, "dataset '{}' is missing", full);
  Handle ds(H5Dopen2(loc, full.c_str(), dapl));
  if (!ds.valid()) fail(path, "'{}' is not a readable dataset (truncated or corrupt file?)", full);
  return ds;
}

std::vector<hsize_t> dataset_shape(hid_t ds, const std::string& full, const std::string& path) {
  Handle space(H5Dget_space(ds));
  const int rank = space.valid() ? H5Sget_simple_extent_ndims(space) : -1;
  if (rank < 0) fail(path, "cannot read the shape of dataset '{}'", full);
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  return dims;
}

// A chunk cache of about three chunks: a read that straddles chunk boundaries then decompresses each chunk once,
// even when the caller's chunking differs from the file's (HDF5's default cache is 1 MiB, smaller than our chunks).
Handle open_streaming(hid_t loc, const std::string& full, const std::string& path) {
  size_t chunk_bytes = 0;
  {
    Handle ds = open_dataset(loc, full, path);
    Handle dcpl(H5Dget_create_plist(ds));
    Handle type(H5Dget_type(ds));
    if (dcpl.valid() && H5Pget_layout(dcpl) == H5D_CHUNKED) {
      const int rank = H5Pget_chunk(dcpl, 0, nullptr);
      std::vector<hsize_t> c(static_cast<size_t>(std::max(rank, 0)));
      if (rank > 0 && H5Pget_chunk(dcpl, rank, c.data()) == rank) {
        chunk_bytes = H5Tget_size(type);
        for (auto x : c) chunk_bytes *= x;
      }
    }
  }
  Handle dapl(H5Pcreate(H5P_DATASET_ACCESS));
  const size_t cache = std::clamp<size_t>(3 * chunk_bytes, size_t{1} << 20, size_t{256} << 20);
  H5Pset_chunk_cache(dapl, 521, cache, 1.0);
  return open_dataset(loc, full, path, dapl);
}

// String attribute of any HDF5 string flavour. h5py writes variable-length UTF-8 strings; HDF5 will not convert
// between character sets, so the memory type must carry the stored one (h5::get_attr_string asks for ASCII).
std::string string_attr(hid_t obj, const std::string& name, const std::string& path, const std::string& on) {
  if (H5Aexists(obj, name.c_str()) <= 0) fail(path, "attribute '{}' is missing on {}", name, on);
  Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT));
  Handle type(a.valid() ? H5Aget_type(a) : H5I_INVALID_HID);
  if (!type.valid() || H5Tget_class(type) != H5T_STRING) fail(path, "attribute '{}' on {} is not a string", name, on);
  Handle space(H5Aget_space(a));
  if (H5Sget_simple_extent_npoints(space) != 1) fail(path, "attribute '{}' on {} is not a single string", name, on);
  std::string s;
  if (H5Tis_variable_str(type) > 0) {
    Handle mt(H5Tcopy(H5T_C_S1));
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, H5Tget_cset(type));
    char* p = nullptr;
    if (H5Aread(a, mt, &p) < 0) fail(path, "cannot read attribute '{}' on {}", name, on);
    s = p ? p : "";
    H5free_memory(p);
  } else {
    s.assign(H5Tget_size(type), '\0');
    if (H5Aread(a, type, s.data()) < 0) fail(path, "cannot read attribute '{}' on {}", name, on);
    s.resize(std::strlen(s.c_str()));
  }
  return s;
}

struct InputDataset {
  std::string name;  // "/inputs/x"
  Handle ds;
  bool bf16 = false;
  std::vector<hsize_t> shape;
};

struct ParamInfo {
  std::string name;  // "/params/A_log"
  std::vector<hsize_t> shape;
  std::string dtype;
};

// Running statistics merged block by block (Chan et al.'s pairwise update), so long traces keep full accuracy.
struct Stats {
  long long n = 0, nonfinite = 0;
  double mean = 0, m2 = 0, sum_abs = 0;
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();

  template <class T>
  void add(const T* p, size_t count) {
    long long nb = 0;
    double sum = 0;
    for (size_t i = 0; i < count; ++i) {
      const double x = static_cast<double>(p[i]);
      if (!std::isfinite(x)) {
        ++nonfinite;
        continue;
      }
      ++nb;
      sum += x;
      sum_abs += std::fabs(x);
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    if (nb == 0) return;
    const double mb = sum / static_cast<double>(nb);
    double m2b = 0;
    for (size_t i = 0; i < count; ++i) {
      const double x = static_cast<double>(p[i]);
      if (std::isfinite(x)) m2b += (x - mb) * (x - mb);
    }
    const double na = static_cast<double>(n), nbd = static_cast<double>(nb), nt = na + nbd;
    const double delta = mb - mean;
    mean += delta * nbd / nt;
    m2 += m2b + delta * delta * na * nbd / nt;
    n += nb;
  }

  DatasetStats finish(std::string name, const std::vector<hsize_t>& shape, std::string dtype) const {
    DatasetStats s;
    s.name = std::move(name);
    for (auto d : shape) s.shape.push_back(static_cast<long long>(d));
    s.dtype = std::move(dtype);
    s.count = n;
    s.nonfinite = nonfinite;
    if (n > 0) {
      s.min = lo;
      s.max = hi;
      s.mean = mean;
      s.std = std::sqrt(m2 / static_cast<double>(n));
      s.mean_abs = sum_abs / static_cast<double>(n);
    }
    return s;
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Reader

struct H5TraceSource::Impl {
  std::string path;
  Model model;
  long long steps = 0;
  int seqs = 0;
  int version = 0;
  std::string description;
  Handle file;
  std::vector<InputDataset> inputs;
  std::vector<ParamInfo> params;
  std::vector<float> readout;
  int vocab = 0;
  std::string readout_dtype;
  std::vector<uint16_t> scratch;

  void open();
  long long dim_attr(const char* name);
  long long flag_attr(const char* name, long long fallback);
  std::vector<double> read_param(hid_t loc, const std::string& name, const std::vector<hsize_t>& expect);
  void open_inputs();
  void open_readout();
  void open_spec_accepted();
  void read(long long step0, int nsteps, InputChunk& out, bool check);
};

long long H5TraceSource::Impl::dim_attr(const char* name) {
  const long long v = h5::get_attr_int(file, name, path);
  if (v <= 0 || v > kMaxDim) fail(path, "attribute '{}' = {} is not a valid dimension (1 to 2^30)", name, v);
  return v;
}

long long H5TraceSource::Impl::flag_attr(const char* name, long long fallback) {
  if (!h5::has_attr(file, name)) return fallback;
  const long long v = h5::get_attr_int(file, name, path);
  if (v != 0 && v != 1) fail(path, "attribute '{}' = {} must be 0 or 1", name, v);
  return v;
}

std::vector<double> H5TraceSource::Impl::read_param(hid_t loc, const std::string& name,
                                                    const std::vector<hsize_t>& expect) {
  const std::string full = "/params/" + name;
  Handle ds = open_dataset(loc, full, path);
  Handle type(H5Dget_type(ds));
  const size_t size = H5Tget_size(type);
  if (H5Tget_class(type) != H5T_FLOAT || (size != 4 && size != 8))
    fail(path, "dataset '{}' has dtype {}, expected float64 or float32", full, dtype_name(type));
  const auto shape = dataset_shape(ds, full, path);
  if (shape != expect)
    fail(path, "dataset '{}' has shape {}, expected {} for geometry {}", full, shape_string(shape),
         shape_string(expect), model.geometry_string());
  size_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<double> v(n);
  if (n > 0 && H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    fail(path, "cannot read dataset '{}' (truncated or corrupt file)", full);
  params.push_back({full, shape, dtype_name(type)});
  return v;
}

void H5TraceSource::Impl::open() {
  file = h5::open_file(path);  // names missing, unreadable, non-HDF5 and truncated files

  if (!h5::has_attr(file, "format"))
    fail(path, "attribute 'format' is missing on the root group (not a replayssm trace file)");
  const std::string format = string_attr(file, "format", path, "the root group");
  if (format != kFormat) fail(path, "attribute 'format' is '{}', expected '{}'", format, kFormat);
  const long long ver = h5::get_attr_int(file, "version", path);
  if (ver != kVersion)
    fail(path, "unsupported trace version {} (attribute 'version'); this build reads version {}", ver, kVersion);
  version = static_cast<int>(ver);
  const std::string fam = string_attr(file, "family", path, "the root group");
  if (fam == "mamba2")
    model.family = Family::Mamba2;
  else if (fam == "gdn")
    model.family = Family::GDN;
  else
    fail(path, "attribute 'family' is '{}' (accepted: mamba2, gdn)", fam);

  const bool has_inputs = h5::exists(file, "inputs");
  if (model.family == Family::Mamba2) {
    auto& m = model.mamba2;
    m.H = static_cast<int>(dim_attr("H"));
    m.P = static_cast<int>(dim_attr("P"));
    m.N = static_cast<int>(dim_attr("N"));
    m.G = static_cast<int>(dim_attr("G"));
    if (m.H % m.G != 0) fail(path, "attribute 'H' = {} is not a multiple of attribute 'G' = {}", m.H, m.G);
    // has_z defaults to whether /inputs/z exists; d_per_dim defaults to D's rank (read below).
    const bool z_present = has_inputs && h5::exists(file, "inputs/z");
    m.has_z = flag_attr("has_z", z_present ? 1 : 0) == 1;
    if (z_present && !m.has_z) fail(path, "dataset '/inputs/z' is present but attribute 'has_z' is 0");
    if (h5::has_attr(file, "dt_min")) m.dt_min = h5::get_attr_double(file, "dt_min", path);
    if (h5::has_attr(file, "dt_max")) m.dt_max = h5::get_attr_double(file, "dt_max", path);
  } else {
    auto& g = model.gdn;
    g.HK = static_cast<int>(dim_attr("HK"));
    g.HV = static_cast<int>(dim_attr("HV"));
    g.K = static_cast<int>(dim_attr("K"));
    g.V = static_cast<int>(dim_attr("V"));
    if (g.HV % g.HK != 0) fail(path, "attribute 'HV' = {} is not a multiple of attribute 'HK' = {}", g.HV, g.HK);
    if (h5::has_attr(file, "eps")) g.eps = h5::get_attr_double(file, "eps", path);
  }
  for (const auto& s : model.inputs()) {
    long long elems = 1;
    for (int d : s.dims) elems = std::min(elems * d, kMaxDim + 1);
    if (elems > kMaxDim)
      fail(path, "geometry {} gives input '{}' too many elements per token", model.geometry_string(), s.name);
  }
  const long long steps_attr = h5::get_attr_int(file, "steps", path);
  const long long seqs_attr = h5::get_attr_int(file, "seqs", path);
  if (h5::has_attr(file, "description")) description = string_attr(file, "description", path, "the root group");

  h5::open_group(file, "params", path);  // for its message when the group is missing
  if (model.family == Family::Mamba2) {
    auto& m = model.mamba2;
    const auto H = static_cast<hsize_t>(m.H), P = static_cast<hsize_t>(m.P);
    m.A_log = read_param(file, "A_log", {H});
    if (h5::has_attr(file, "d_per_dim")) {
      m.d_per_dim = flag_attr("d_per_dim", 0) == 1;
    } else if (h5::exists(file, "/params/D")) {
      Handle ds = open_dataset(file, "/params/D", path);
      m.d_per_dim = dataset_shape(ds, "/params/D", path).size() == 2;
    }
    m.D = read_param(file, "D", m.d_per_dim ? std::vector<hsize_t>{H, P} : std::vector<hsize_t>{H});
    m.dt_bias = read_param(file, "dt_bias", {H});
  } else {
    auto& g = model.gdn;
    g.A_log = read_param(file, "A_log", {static_cast<hsize_t>(g.HV)});
    g.dt_bias = read_param(file, "dt_bias", {static_cast<hsize_t>(g.HV)});
  }
  model.validate(path.c_str());  // finiteness, dt limits, eps: the rules every source obeys

  open_inputs();
  if (steps != steps_attr)
    fail(path, "attribute 'steps' = {} disagrees with dataset '{}', which has {} steps", steps_attr, inputs[0].name,
         steps);
  if (seqs != seqs_attr)
    fail(path, "attribute 'seqs' = {} disagrees with dataset '{}', which has {} sequences", seqs_attr, inputs[0].name,
         seqs);
  open_readout();
  open_spec_accepted();
}

void H5TraceSource::Impl::open_inputs() {
  h5::open_group(file, "inputs", path);  // for its message when the group is missing
  for (const auto& spec : model.inputs()) {
    InputDataset in;
    in.name = "/inputs/" + spec.name;
    in.ds = open_streaming(file, in.name, path);
    Handle type(H5Dget_type(in.ds));
    const auto cls = H5Tget_class(type);
    const size_t size = H5Tget_size(type);
    if (cls == H5T_FLOAT && size == 4) {
      in.bf16 = false;
    } else if (cls == H5T_INTEGER && size == 2 && H5Tget_sign(type) == H5T_SGN_NONE) {
      if (!h5::has_attr(in.ds, "encoding"))
        fail(path, "dataset '{}' has dtype uint16 but no attribute encoding = 'bfloat16'", in.name);
      const std::string enc = string_attr(in.ds, "encoding", path, "dataset '" + in.name + "'");
      if (enc != "bfloat16")
        fail(path, "dataset '{}' has attribute encoding = '{}', expected 'bfloat16'", in.name, enc);
      in.bf16 = true;
    } else if (cls == H5T_FLOAT && size == 8) {
      // Refused rather than silently rounded: the trace should hold exactly the values the decoders see.
      fail(path,
           "dataset '{}' has dtype float64; inputs must be float32 or bfloat16 (store float32, e.g. "
           "numpy .astype('float32'))",
           in.name);
    } else {
      fail(path, "dataset '{}' has dtype {}, expected float32 or bfloat16 (uint16 with encoding = 'bfloat16')", in.name,
           dtype_name(type));
    }

    in.shape = dataset_shape(in.ds, in.name, path);
    std::vector<std::string> expect = {"steps", "seqs"};
    for (int d : spec.dims) expect.push_back(std::to_string(d));
    bool ok = in.shape.size() == expect.size();
    for (size_t d = 0; ok && d < spec.dims.size(); ++d) ok = in.shape[d + 2] == static_cast<hsize_t>(spec.dims[d]);
    if (!ok)
      fail(path, "dataset '{}' has shape {}, expected [{}] for geometry {}", in.name, shape_string(in.shape),
           fmt::join(expect, ", "), model.geometry_string());

    if (inputs.empty()) {
      if (in.shape[0] == 0) fail(path, "dataset '{}' has zero steps; a trace needs at least one", in.name);
      if (in.shape[1] == 0) fail(path, "dataset '{}' has zero sequences; a trace needs at least one", in.name);
      if (in.shape[1] > static_cast<hsize_t>(kMaxDim))
        fail(path, "dataset '{}' has {} sequences, more than this build accepts", in.name, in.shape[1]);
      steps = static_cast<long long>(in.shape[0]);
      seqs = static_cast<int>(in.shape[1]);
    } else {
      const auto& first = inputs[0];
      if (in.shape[0] != first.shape[0])
        fail(path, "dataset '{}' has {} steps but '{}' has {}; every input must cover the same steps", in.name,
             in.shape[0], first.name, first.shape[0]);
      if (in.shape[1] != first.shape[1])
        fail(path, "dataset '{}' has {} sequences but '{}' has {}; every input must cover the same sequences", in.name,
             in.shape[1], first.name, first.shape[1]);
    }
    inputs.push_back(std::move(in));
  }
}

void H5TraceSource::Impl::open_readout() {
  const std::string full = "/readout";
  if (!h5::exists(file, full)) return;
  Handle ds = open_dataset(file, full, path);
  Handle type(H5Dget_type(ds));
  const size_t size = H5Tget_size(type);
  if (H5Tget_class(type) != H5T_FLOAT || (size != 4 && size != 8))
    fail(path, "dataset '{}' has dtype {}, expected float32", full, dtype_name(type));
  readout_dtype = dtype_name(type);
  const auto shape = dataset_shape(ds, full, path);
  const auto E = static_cast<hsize_t>(model.out_elems());
  if (shape.size() != 2 || shape[1] != E || shape[0] == 0 || shape[0] > static_cast<hsize_t>(kMaxDim))
    fail(path, "dataset '{}' has shape {}, expected [vocab, {}] with vocab >= 1 (out_elems of {})", full,
         shape_string(shape), E, model.geometry_string());
  vocab = static_cast<int>(shape[0]);
  readout.resize(static_cast<size_t>(shape[0] * shape[1]));
  if (H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, readout.data()) < 0)
    fail(path, "cannot read dataset '{}' (truncated or corrupt file)", full);
  for (size_t i = 0; i < readout.size(); ++i)
    if (!std::isfinite(readout[i]))
      fail(path, "dataset '{}' has a non-finite value ({}) at row {}, column {}", full, readout[i], i / E, i % E);
}

// Speculative decoding's recorded acceptance (docs/trace_format.md): int [seqs, windows], the tokens each successive
// verify window of a sequence committed (>= 1). Optional; read whole (a few bytes per window).
void H5TraceSource::Impl::open_spec_accepted() {
  const std::string full = "/spec/accepted";
  if (!h5::exists(file, "/spec") || !h5::exists(file, full)) return;
  Handle ds = open_dataset(file, full, path);
  Handle type(H5Dget_type(ds));
  if (H5Tget_class(type) != H5T_INTEGER)
    fail(path, "dataset '{}' has dtype {}, expected an integer type", full, dtype_name(type));
  const auto shape = dataset_shape(ds, full, path);
  if (shape.size() != 2 || shape[0] != static_cast<hsize_t>(seqs) || shape[1] == 0 ||
      shape[1] > static_cast<hsize_t>(kMaxDim))
    fail(path, "dataset '{}' has shape {}, expected [{}, windows] (one row per sequence, windows >= 1)", full,
         shape_string(shape), seqs);
  std::vector<int> v(static_cast<size_t>(shape[0] * shape[1]));
  if (H5Dread(ds, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    fail(path, "cannot read dataset '{}' (truncated or corrupt file)", full);
  model.spec_accepted.assign(shape[0], {});
  for (hsize_t q = 0; q < shape[0]; ++q)
    for (hsize_t w = 0; w < shape[1]; ++w) {
      const int t = v[q * shape[1] + w];
      if (t < 1)
        fail(path, "dataset '{}' holds {} at sequence {}, window {}: a window commits at least one token", full, t, q,
             w);
      model.spec_accepted[q].push_back(t);
    }
}

void H5TraceSource::Impl::read(long long step0, int nsteps, InputChunk& out, bool check) {
  if (step0 < 0 || nsteps < 0 || step0 + nsteps > steps)
    throw FormatError(
        fmt::format("{}: steps [{}, {}) are outside the trace's {} steps", path, step0, step0 + nsteps, steps));
  out.shape(model, step0, nsteps, seqs);
  if (nsteps == 0) return;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const InputDataset& in = inputs[i];
    std::vector<hsize_t> start(in.shape.size(), 0), count(in.shape);
    start[0] = static_cast<hsize_t>(step0);
    count[0] = static_cast<hsize_t>(nsteps);
    const hsize_t total = static_cast<hsize_t>(nsteps) * seqs * out.elems[i];
    Handle fspace(H5Dget_space(in.ds));
    Handle mspace(H5Screate_simple(1, &total, nullptr));
    herr_t rc = H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
    float* dst = out.data[i].data();
    if (rc >= 0 && in.bf16) {
      scratch.resize(static_cast<size_t>(total));
      rc = H5Dread(in.ds, H5T_NATIVE_UINT16, mspace, fspace, H5P_DEFAULT, scratch.data());
      for (size_t k = 0; rc >= 0 && k < scratch.size(); ++k) dst[k] = bf16_bits_to_float(scratch[k]);
    } else if (rc >= 0) {
      rc = H5Dread(in.ds, H5T_NATIVE_FLOAT, mspace, fspace, H5P_DEFAULT, dst);
    }
    if (rc < 0)
      fail(path, "cannot read steps [{}, {}) of dataset '{}' (truncated or corrupt file)", step0, step0 + nsteps,
           in.name);
    if (check) check_finite(path, in.name, dst, step0, nsteps, seqs, out.elems[i]);
  }
}

H5TraceSource::H5TraceSource(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->open();
}
H5TraceSource::~H5TraceSource() = default;

const Model& H5TraceSource::model() const { return impl_->model; }
long long H5TraceSource::steps() const { return impl_->steps; }
int H5TraceSource::seqs() const { return impl_->seqs; }
void H5TraceSource::read(long long step0, int nsteps, InputChunk& out) { impl_->read(step0, nsteps, out, true); }
const std::vector<float>& H5TraceSource::readout() const { return impl_->readout; }
int H5TraceSource::readout_vocab() const { return impl_->vocab; }
std::string H5TraceSource::describe() const { return "trace file " + impl_->path; }
const std::string& H5TraceSource::path() const { return impl_->path; }
const std::string& H5TraceSource::description() const { return impl_->description; }
InputStorage H5TraceSource::storage(int input) const {
  return impl_->inputs.at(static_cast<size_t>(input)).bf16 ? InputStorage::BF16 : InputStorage::FP32;
}

// ---------------------------------------------------------------------------------------------------------------
// Writer

std::string input_storage_name(InputStorage s) { return s == InputStorage::FP32 ? "fp32" : "bf16"; }

InputStorage parse_input_storage(const std::string& name) {
  if (name == "fp32") return InputStorage::FP32;
  if (name == "bf16") return InputStorage::BF16;
  throw ConfigError(fmt::format("unknown trace input storage '{}' (accepted: fp32, bf16)", name));
}

namespace {

Handle create_chunked(hid_t loc, const std::string& name, hid_t file_type, const std::vector<hsize_t>& dims,
                      const std::vector<hsize_t>& chunk, const std::string& path) {
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_obj_track_times(dcpl, false);
  H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
  // Shuffle groups the bytes of equal significance (exponents together), which roughly doubles deflate's ratio
  // on float data.
  H5Pset_shuffle(dcpl);
  H5Pset_deflate(dcpl, kDeflate);
  Handle ds(H5Dcreate2(loc, name.c_str(), file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
  if (!ds.valid()) fail(path, "cannot create dataset '{}'", name);
  return ds;
}

void write_rows(hid_t ds, hid_t mem_type, const std::vector<hsize_t>& dims, hsize_t row0, hsize_t rows,
                const void* data, const std::string& path, const std::string& name) {
  std::vector<hsize_t> start(dims.size(), 0), count(dims);
  start[0] = row0;
  count[0] = rows;
  hsize_t total = 1;
  for (auto c : count) total *= c;
  Handle fspace(H5Dget_space(ds));
  Handle mspace(H5Screate_simple(1, &total, nullptr));
  if (H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0 ||
      H5Dwrite(ds, mem_type, mspace, fspace, H5P_DEFAULT, data) < 0)
    fail(path, "cannot write rows [{}, {}) of dataset '{}' (disk full?)", row0, row0 + rows, name);
}

void write_file(const std::string& tmp, TraceSource& src, InputStorage storage, int chunk_steps) {
  const Model& model = src.model();
  const long long steps = src.steps();
  const int seqs = src.seqs();
  const auto specs = model.inputs();

  Handle f = h5::create_file(tmp);
  h5::set_attr(f, "format", std::string(kFormat));
  h5::set_attr(f, "version", kVersion);
  h5::set_attr(f, "family", family_name(model.family));
  if (model.family == Family::Mamba2) {
    const auto& m = model.mamba2;
    h5::set_attr(f, "H", static_cast<long long>(m.H));
    h5::set_attr(f, "P", static_cast<long long>(m.P));
    h5::set_attr(f, "N", static_cast<long long>(m.N));
    h5::set_attr(f, "G", static_cast<long long>(m.G));
  } else {
    const auto& g = model.gdn;
    h5::set_attr(f, "HK", static_cast<long long>(g.HK));
    h5::set_attr(f, "HV", static_cast<long long>(g.HV));
    h5::set_attr(f, "K", static_cast<long long>(g.K));
    h5::set_attr(f, "V", static_cast<long long>(g.V));
  }
  h5::set_attr(f, "steps", steps);
  h5::set_attr(f, "seqs", static_cast<long long>(seqs));
  if (model.family == Family::Mamba2) {
    const auto& m = model.mamba2;
    h5::set_attr(f, "d_per_dim", static_cast<long long>(m.d_per_dim));
    h5::set_attr(f, "has_z", static_cast<long long>(m.has_z));
    h5::set_attr(f, "dt_min", m.dt_min);
    h5::set_attr(f, "dt_max", m.dt_max);
  } else {
    h5::set_attr(f, "eps", model.gdn.eps);
  }
  h5::set_attr(f, "description", src.describe());

  {
    Handle pg = h5::create_group(f, "params");
    if (model.family == Family::Mamba2) {
      const auto& m = model.mamba2;
      const auto H = static_cast<hsize_t>(m.H);
      h5::write(pg, "A_log", {H}, m.A_log.data());
      h5::write(pg, "D", m.d_per_dim ? std::vector<hsize_t>{H, static_cast<hsize_t>(m.P)} : std::vector<hsize_t>{H},
                m.D.data());
      h5::write(pg, "dt_bias", {H}, m.dt_bias.data());
    } else {
      const auto HV = static_cast<hsize_t>(model.gdn.HV);
      h5::write(pg, "A_log", {HV}, model.gdn.A_log.data());
      h5::write(pg, "dt_bias", {HV}, model.gdn.dt_bias.data());
    }
  }

  // One chunk length for every input, bounded so that the largest input's chunk stays within kMaxChunkBytes.
  const size_t elem_bytes = storage == InputStorage::BF16 ? 2 : 4;
  size_t max_step_bytes = 0;
  for (const auto& s : specs)
    max_step_bytes = std::max(max_step_bytes, static_cast<size_t>(seqs) * s.elems() * elem_bytes);
  const long long cs = std::max<long long>(
      1, std::min<long long>({chunk_steps, steps, static_cast<long long>(kMaxChunkBytes / max_step_bytes)}));

  Handle ig = h5::create_group(f, "inputs");
  std::vector<Handle> ds;
  std::vector<std::vector<hsize_t>> dims;
  for (const auto& s : specs) {
    std::vector<hsize_t> d = {static_cast<hsize_t>(steps), static_cast<hsize_t>(seqs)},
                         c = {static_cast<hsize_t>(cs), static_cast<hsize_t>(seqs)};
    for (int x : s.dims) {
      d.push_back(static_cast<hsize_t>(x));
      c.push_back(static_cast<hsize_t>(x));
    }
    ds.push_back(create_chunked(ig, s.name, storage == InputStorage::BF16 ? H5T_STD_U16LE : H5T_IEEE_F32LE, d, c, tmp));
    if (storage == InputStorage::BF16) h5::set_attr(ds.back(), "encoding", std::string("bfloat16"));
    dims.push_back(std::move(d));
  }

  InputChunk chunk;
  std::vector<uint16_t> bits;
  const std::string where = src.describe();
  for (long long s0 = 0; s0 < steps; s0 += cs) {
    const int n = static_cast<int>(std::min<long long>(cs, steps - s0));
    src.read(s0, n, chunk);
    for (size_t i = 0; i < specs.size(); ++i) {
      const float* p = chunk.data[i].data();
      check_finite(where, specs[i].name, p, s0, n, seqs, chunk.elems[i]);
      const std::string name = "/inputs/" + specs[i].name;
      if (storage == InputStorage::BF16) {
        bits.resize(chunk.data[i].size());
        for (size_t k = 0; k < bits.size(); ++k) bits[k] = float_to_bf16_bits(p[k]);
        write_rows(ds[i], H5T_NATIVE_UINT16, dims[i], static_cast<hsize_t>(s0), static_cast<hsize_t>(n), bits.data(),
                   tmp, name);
      } else {
        write_rows(ds[i], H5T_NATIVE_FLOAT, dims[i], static_cast<hsize_t>(s0), static_cast<hsize_t>(n), p, tmp, name);
      }
    }
  }

  const int vocab = src.readout_vocab();
  if (vocab > 0) {
    const auto& w = src.readout();
    const auto E = static_cast<size_t>(model.out_elems());
    if (w.size() != static_cast<size_t>(vocab) * E)
      throw FormatError(
          fmt::format("{}: readout has {} values, expected vocab {} x out_elems {}", where, w.size(), vocab, E));
    for (size_t i = 0; i < w.size(); ++i)
      if (!std::isfinite(w[i]))
        throw FormatError(fmt::format("{}: readout has a non-finite value at row {}, column {}", where, i / E, i % E));
    const std::vector<hsize_t> d = {static_cast<hsize_t>(vocab), E};
    const hsize_t rows = std::clamp<hsize_t>((size_t{1} << 20) / (E * 4), 1, static_cast<hsize_t>(vocab));
    Handle r = create_chunked(f, "readout", H5T_IEEE_F32LE, d, {rows, E}, tmp);
    write_rows(r, H5T_NATIVE_FLOAT, d, 0, static_cast<hsize_t>(vocab), w.data(), tmp, "/readout");
  }
  if (H5Fflush(f, H5F_SCOPE_GLOBAL) < 0) fail(tmp, "cannot flush the file (disk full?)");
}

}  // namespace

void write_trace(const std::string& path, TraceSource& src, InputStorage storage, int chunk_steps) {
  if (chunk_steps < 1) throw ConfigError(fmt::format("trace chunk_steps must be positive (got {})", chunk_steps));
  src.model().validate(src.describe().c_str());
  if (src.steps() <= 0 || src.seqs() <= 0)
    throw FormatError(
        fmt::format("{}: nothing to write ({} steps, {} sequences)", src.describe(), src.steps(), src.seqs()));
  const std::string tmp = path + ".tmp";
  try {
    write_file(tmp, src, storage, chunk_steps);  // every handle is closed when it returns or throws
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw FormatError(fmt::format("{}: cannot rename the finished temporary file '{}' into place", path, tmp));
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Statistics

void probe_trace_file(const std::string& path) {
  struct stat st {};
  if (path.empty() || stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  // Exit codes of the child; anything else (a signal, a sanitizer's exit) means libhdf5 took it down.
  constexpr int kLoaded = 0, kRejected = 3;
  // A walk of the metadata and two small reads take milliseconds; libhdf5 can loop forever on a corrupt header.
  constexpr unsigned kLimitSeconds = 60;
  std::fflush(nullptr);  // the child must not flush the parent's pending output a second time
  const pid_t pid = fork();
  if (pid < 0) return;  // cannot probe: the caller's own open is still correct, only unguarded
  if (pid == 0) {
    // Quiet: the parent reports. The child never returns into the caller's code and skips atexit handlers.
    if (std::FILE* null = std::freopen("/dev/null", "w", stderr); !null) _exit(kRejected);
    alarm(kLimitSeconds);
    try {
      H5TraceSource src(path);
      InputChunk chunk;
      const long long steps = src.steps();
      src.read(0, static_cast<int>(std::min<long long>(steps, 4)), chunk);
      src.read(std::max(0LL, steps - 4), static_cast<int>(std::min<long long>(steps, 4)), chunk);
      _exit(kLoaded);
    } catch (...) {
      _exit(kRejected);
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return;
  }
  if (WIFEXITED(status) && (WEXITSTATUS(status) == kLoaded || WEXITSTATUS(status) == kRejected)) return;
  const std::string how = WIFSIGNALED(status)
                              ? (WTERMSIG(status) == SIGALRM ? fmt::format("did not finish in {} s", kLimitSeconds)
                                                             : fmt::format("crashed ({})", strsignal(WTERMSIG(status))))
                              : fmt::format("crashed (exit code {})", WEXITSTATUS(status));
  throw FormatError(fmt::format("{}: libhdf5 {} while reading the file: it is corrupt or crafted (see "
                                "docs/trace_format.md, 'Hostile and corrupt files')",
                                path, how));
}

TraceInfo inspect_trace(const std::string& path, int chunk_steps) {
  if (chunk_steps < 1) throw ConfigError(fmt::format("inspect chunk_steps must be positive (got {})", chunk_steps));
  H5TraceSource src(path);
  H5TraceSource::Impl& m = *src.impl_;
  TraceInfo info;
  info.path = path;
  info.version = m.version;
  info.family = family_name(m.model.family);
  info.geometry = m.model.geometry_string();
  if (m.model.family == Family::Mamba2) {
    const auto& p = m.model.mamba2;
    info.flags =
        fmt::format("has_z={} d_per_dim={} dt_min={} dt_max={}", int(p.has_z), int(p.d_per_dim), p.dt_min, p.dt_max);
  } else {
    info.flags = fmt::format("eps={}", m.model.gdn.eps);
  }
  info.steps = m.steps;
  info.seqs = m.seqs;
  info.description = m.description;

  for (const auto& p : m.params) {
    const std::vector<double>* v = nullptr;
    const std::string leaf = p.name.substr(p.name.rfind('/') + 1);
    if (m.model.family == Family::Mamba2)
      v = leaf == "A_log" ? &m.model.mamba2.A_log : leaf == "D" ? &m.model.mamba2.D : &m.model.mamba2.dt_bias;
    else
      v = leaf == "A_log" ? &m.model.gdn.A_log : &m.model.gdn.dt_bias;
    Stats s;
    s.add(v->data(), v->size());
    info.datasets.push_back(s.finish(p.name, p.shape, p.dtype));
  }

  std::vector<Stats> st(m.inputs.size());
  InputChunk chunk;
  for (long long s0 = 0; s0 < m.steps; s0 += chunk_steps) {
    const int n = static_cast<int>(std::min<long long>(chunk_steps, m.steps - s0));
    m.read(s0, n, chunk, false);
    for (size_t i = 0; i < st.size(); ++i) st[i].add(chunk.data[i].data(), chunk.data[i].size());
  }
  for (size_t i = 0; i < st.size(); ++i)
    info.datasets.push_back(
        st[i].finish(m.inputs[i].name, m.inputs[i].shape, m.inputs[i].bf16 ? "bfloat16" : "float32"));

  if (m.vocab > 0) {
    Stats s;
    s.add(m.readout.data(), m.readout.size());
    info.datasets.push_back(s.finish(
        "/readout", {static_cast<hsize_t>(m.vocab), static_cast<hsize_t>(m.model.out_elems())}, m.readout_dtype));
  }
  return info;
}

std::vector<std::string> format_trace_info(const TraceInfo& info) {
  std::vector<std::string> out;
  out.push_back(fmt::format("trace {}: {} v{}, family {}, {}, {} steps x {} sequences", info.path, kFormat,
                            info.version, info.family, info.geometry, info.steps, info.seqs));
  out.push_back("  flags: " + info.flags);
  if (!info.description.empty()) out.push_back("  description: " + info.description);
  out.push_back(fmt::format("  {:<16} {:<22} {:<9} {:>11} {:>11} {:>11} {:>11} {:>11} {:>9}", "dataset", "shape",
                            "dtype", "min", "max", "mean", "std", "mean|x|", "nonfinite"));
  for (const auto& d : info.datasets) {
    std::vector<std::string> s;
    for (auto x : d.shape) s.push_back(std::to_string(x));
    const std::string shape = "[" + fmt::format("{}", fmt::join(s, ", ")) + "]";
    if (d.count == 0)
      out.push_back(fmt::format("  {:<16} {:<22} {:<9} {:>11} {:>11} {:>11} {:>11} {:>11} {:>9}", d.name, shape,
                                d.dtype, "-", "-", "-", "-", "-", d.nonfinite));
    else
      out.push_back(fmt::format("  {:<16} {:<22} {:<9} {:>11.4g} {:>11.4g} {:>11.4g} {:>11.4g} {:>11.4g} {:>9}", d.name,
                                shape, d.dtype, d.min, d.max, d.mean, d.std, d.mean_abs, d.nonfinite));
  }
  return out;
}

}  // namespace rssm
