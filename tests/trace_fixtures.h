// The tiny traces the trace-format tests (test_trace_h5.cpp) and the bad-input corpus (test_bad_inputs.cpp) start
// from, and the HDF5 edits that spoil a copy of one the way a hand-made or damaged file would. One definition, so
// that both test the same file: a corruption case and its loader test cannot drift apart.
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "decoder/decoder.h"
#include "decoder/input_chunk.h"
#include "io/h5.h"
#include "trace/synth.h"
#include "trace/trace_h5.h"

namespace rssm::test {

// A tiny Mamba-2 layer with every optional part switched on (z, D per dim, a dt floor, a readout).
// inputs: x, z [37, 3, 4, 8]; dt [37, 3, 4]; B, C [37, 3, 2, 16]; params: A_log, dt_bias [4], D [4, 8];
// readout [5, 32].
inline SynthConfig tiny_mamba2_trace() {
  SynthConfig c;
  c.model.family = Family::Mamba2;
  c.model.mamba2 = Mamba2Params{};
  c.model.mamba2.H = 4;
  c.model.mamba2.P = 8;
  c.model.mamba2.N = 16;
  c.model.mamba2.G = 2;
  c.model.mamba2.has_z = true;
  c.model.mamba2.d_per_dim = true;
  c.model.mamba2.dt_min = 1e-4;
  c.steps = 37;
  c.seqs = 3;
  c.seed = 11;
  c.readout_vocab = 5;
  return c;
}

// A tiny GDN layer. inputs: q, k [29, 2, 2, 8]; v [29, 2, 4, 8]; a, b [29, 2, 4].
inline SynthConfig tiny_gdn_trace() {
  SynthConfig c;
  c.model.family = Family::GDN;
  c.model.gdn.HK = 2;
  c.model.gdn.HV = 4;
  c.model.gdn.K = 8;
  c.model.gdn.V = 8;
  c.model.gdn.eps = 1e-5;
  c.steps = 29;
  c.seqs = 2;
  c.seed = 12;
  return c;
}

// The small layer of each family the decoder and contract tests run, no optional parts: Mamba-2 H=4 P=8 N=16 G=2,
// GDN HK=2 HV=4 K=16 V=8.
inline SynthConfig tiny_layer(Family f, long long steps, int seqs, uint64_t seed) {
  SynthConfig sc;
  sc.model.family = f;
  if (f == Family::Mamba2) {
    sc.model.mamba2.H = 4, sc.model.mamba2.P = 8, sc.model.mamba2.N = 16, sc.model.mamba2.G = 2;
  } else {
    sc.model.gdn.HK = 2, sc.model.gdn.HV = 4, sc.model.gdn.K = 16, sc.model.gdn.V = 8;
  }
  sc.steps = steps;
  sc.seqs = seqs;
  sc.seed = seed;
  return sc;
}

// The small layer with its optional parts that the replay and speculative tests run: Mamba-2 H=8 P=8 N=16 G=2 with
// the gate z, GDN HK=2 HV=4 K=16 V=8; a quarter of the heads slow (long memory).
inline SynthConfig small_layer(Family f, long long steps, int seqs, uint64_t seed) {
  SynthConfig sc;
  sc.model.family = f;
  if (f == Family::Mamba2) {
    sc.model.mamba2.H = 8, sc.model.mamba2.P = 8, sc.model.mamba2.N = 16, sc.model.mamba2.G = 2;
    sc.model.mamba2.has_z = true;
  } else {
    sc.model.gdn.HK = 2, sc.model.gdn.HV = 4, sc.model.gdn.K = 16, sc.model.gdn.V = 8;
  }
  sc.steps = steps;
  sc.seqs = seqs;
  sc.seed = seed;
  sc.slow_head_frac = 0.25;
  return sc;
}

// Runs d (reset first) over the first `steps` steps of src in chunks of `chunk` (13: chunks end off every flush
// grid); returns the outputs [steps, seqs, out_elems].
inline std::vector<double> run_chunked(Decoder& d, TraceSource& src, long long steps, int chunk = 13) {
  d.reset(src.model(), src.seqs());
  const size_t per = static_cast<size_t>(src.seqs()) * src.model().out_elems();
  std::vector<double> y(static_cast<size_t>(steps) * per);
  InputChunk c;
  for (long long s0 = 0; s0 < steps; s0 += chunk) {
    const int n = static_cast<int>(std::min<long long>(chunk, steps - s0));
    src.read(s0, n, c);
    d.advance(c, 0, n, y.data() + s0 * per);
  }
  return y;
}

// Writes the tiny Mamba-2 trace to `path`, in file chunks of 8 steps (37 steps: the last chunk is partial).
inline void write_tiny_trace(const std::string& path, InputStorage storage = InputStorage::FP32) {
  SynthSource src(tiny_mamba2_trace());
  write_trace(path, src, storage, 8);
}

// Edits a trace file in place with the HDF5 C API; each edit REQUIREs that it worked.
struct Edit {
  h5::Handle f;
  explicit Edit(const std::string& path) : f(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)) { REQUIRE(f.valid()); }
  void drop(const std::string& name) { REQUIRE(H5Ldelete(f, name.c_str(), H5P_DEFAULT) >= 0); }
  void drop_attr(const std::string& name) { REQUIRE(H5Adelete(f, name.c_str()) >= 0); }
  void attr(const std::string& name, long long v) { h5::set_attr(f, name, v); }
  void attr(const std::string& name, const std::string& v) { h5::set_attr(f, name, v); }
  // Replaces dataset `name` with one of the given type and shape, zero-filled.
  void replace(const std::string& name, hid_t type, const std::vector<hsize_t>& dims) {
    if (H5Lexists(f, name.c_str(), H5P_DEFAULT) > 0) drop(name);
    h5::Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
    h5::Handle ds(H5Dcreate2(f, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    REQUIRE(ds.valid());
    size_t n = H5Tget_size(type);
    for (auto d : dims) n *= d;
    std::vector<char> zeros(std::max<size_t>(n, 1), 0);
    if (n > 0) REQUIRE(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data()) >= 0);
  }
  // Writes one element, given as `mem_type` at `value`, at coordinates `at`.
  void poke(const std::string& name, std::vector<hsize_t> at, hid_t mem_type, const void* value) {
    h5::Handle ds(H5Dopen2(f, name.c_str(), H5P_DEFAULT));
    REQUIRE(ds.valid());
    h5::Handle space(H5Dget_space(ds));
    REQUIRE(H5Sselect_elements(space, H5S_SELECT_SET, 1, at.data()) >= 0);
    hsize_t one = 1;
    h5::Handle mem(H5Screate_simple(1, &one, nullptr));
    REQUIRE(H5Dwrite(ds, mem_type, mem, space, H5P_DEFAULT, value) >= 0);
  }
  // Writes one float at a flat (row-major) element index.
  void poke(const std::string& name, hsize_t index, float value) {
    h5::Handle ds(H5Dopen2(f, name.c_str(), H5P_DEFAULT));
    REQUIRE(ds.valid());
    h5::Handle space(H5Dget_space(ds));
    const int rank = H5Sget_simple_extent_ndims(space);
    std::vector<hsize_t> dims(static_cast<size_t>(rank)), at(static_cast<size_t>(rank));
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    for (int d = rank - 1; d >= 0; --d) {
      at[d] = index % dims[d];
      index /= dims[d];
    }
    poke(name, at, H5T_NATIVE_FLOAT, &value);
  }
};

}  // namespace rssm::test
