// Trace file format v1: round trips (fp32 exact, bf16 = nearest-even rounding), the writer's temporary-file
// discipline, every loader error (each on a fixture corrupted here with the HDF5 C API), a minimal h5py-style
// file, and inspect statistics. Run: replayssm_tests "[trace]".
#include <hdf5.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "errors.h"
#include "io/h5.h"
#include "test_util.h"
#include "trace/synth.h"
#include "trace/trace_h5.h"
#include "trace_fixtures.h"

using namespace rssm;
using Catch::Matchers::Contains;
using test::Edit;

namespace {

// Whole trace through read() in pieces of `piece` steps (a size that does not divide the step count exercises
// reads straddling the file's chunks).
std::vector<std::vector<float>> read_all(TraceSource& src, int piece) {
  std::vector<std::vector<float>> all(src.model().inputs().size());
  InputChunk c;
  for (long long s = 0; s < src.steps(); s += piece) {
    const int m = static_cast<int>(std::min<long long>(piece, src.steps() - s));
    src.read(s, m, c);
    for (size_t i = 0; i < all.size(); ++i) all[i].insert(all[i].end(), c.data[i].begin(), c.data[i].end());
  }
  return all;
}

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// r is what round-to-nearest-even of v into bf16 gives, checked from the definition rather than by bit tricks:
// r is on the bf16 grid, no bf16 value is nearer to v, and on a tie r has an even last bit.
bool is_bf16_nearest_even(float v, float r) {
  if ((bits_of(r) & 0xFFFFu) != 0) return false;
  const uint32_t down = bits_of(v) & 0xFFFF0000u;  // truncation toward zero (same sign)
  const float lo = from_bits(down), hi = from_bits(down + 0x10000u);
  const double dlo = std::fabs(double(v) - lo), dhi = std::fabs(double(hi) - v);
  if (dlo < dhi) return r == lo;
  if (dhi < dlo) return r == hi;
  return bits_of(r) == ((down >> 16) % 2 == 0 ? down : down + 0x10000u);
}

// Writes a valid tiny Mamba-2 trace and returns its path.
std::string good_file(const test::TempDir& d, const std::string& name, InputStorage storage = InputStorage::FP32) {
  const std::string path = d / name;
  test::write_tiny_trace(path, storage);
  return path;
}

// The loader's message for `path`, checked to be a FormatError naming the file.
std::string load_error(const std::string& path) {
  try {
    H5TraceSource t(path);
    InputChunk c;
    t.read(0, static_cast<int>(t.steps()), c);
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Contains(path));
    CHECK(msg.find('\n') == std::string::npos);
    return msg;
  }
  FAIL("no FormatError for " << path);
  return "";
}

}  // namespace

TEST_CASE("trace: fp32 round trip is exact, across chunk boundaries", "[trace]") {
  test::TempDir d;
  for (const auto& cfg : {test::tiny_mamba2_trace(), test::tiny_gdn_trace()}) {
    SynthSource src(cfg);
    const std::string path = d / ("rt_" + family_name(cfg.model.family) + ".h5");
    write_trace(path, src, InputStorage::FP32, 8);
    CHECK(test::count_files_containing(d.path(), ".tmp") == 0);
    H5TraceSource file(path);
    CHECK(file.steps() == cfg.steps);
    CHECK(file.seqs() == cfg.seqs);
    CHECK(file.describe() == "trace file " + path);
    CHECK(file.description() == src.describe());
    for (size_t i = 0; i < src.model().inputs().size(); ++i)
      CHECK(file.storage(static_cast<int>(i)) == InputStorage::FP32);
    const Model& a = src.model();
    const Model& b = file.model();
    REQUIRE(b.family == a.family);
    CHECK(b.geometry_string() == a.geometry_string());
    if (a.family == Family::Mamba2) {
      CHECK(b.mamba2.A_log == a.mamba2.A_log);
      CHECK(b.mamba2.D == a.mamba2.D);
      CHECK(b.mamba2.dt_bias == a.mamba2.dt_bias);
      CHECK(b.mamba2.has_z == a.mamba2.has_z);
      CHECK(b.mamba2.d_per_dim == a.mamba2.d_per_dim);
      CHECK(b.mamba2.dt_min == a.mamba2.dt_min);
      CHECK(b.mamba2.dt_max == std::numeric_limits<double>::infinity());
    } else {
      CHECK(b.gdn.A_log == a.gdn.A_log);
      CHECK(b.gdn.dt_bias == a.gdn.dt_bias);
      CHECK(b.gdn.eps == a.gdn.eps);
    }
    CHECK(file.readout_vocab() == src.readout_vocab());
    CHECK(file.readout() == src.readout());
    const auto expect = read_all(src, static_cast<int>(cfg.steps));
    CHECK(read_all(file, 5) == expect);
    CHECK(read_all(file, 1) == expect);
    // Random access in the middle.
    InputChunk c;
    file.read(9, 11, c);
    const size_t per_step = expect[0].size() / cfg.steps;
    CHECK(std::equal(c.data[0].begin(), c.data[0].end(), expect[0].begin() + 9 * per_step));
    CHECK_THROWS_WITH(file.read(30, 10, c), Contains(path) && Contains("outside"));
  }
}

TEST_CASE("trace: bf16 round trip gives the nearest-even rounding of every fp32 value", "[trace]") {
  test::TempDir d;
  for (const auto& cfg : {test::tiny_mamba2_trace(), test::tiny_gdn_trace()}) {
    SynthSource src(cfg);
    const std::string path = d / "bf16.h5";
    write_trace(path, src, InputStorage::BF16, 6);
    H5TraceSource file(path);
    for (size_t i = 0; i < src.model().inputs().size(); ++i)
      CHECK(file.storage(static_cast<int>(i)) == InputStorage::BF16);
    const auto exact = read_all(src, 100);
    const auto got = read_all(file, 4);
    REQUIRE(got.size() == exact.size());
    size_t bad = 0, changed = 0;
    for (size_t i = 0; i < exact.size(); ++i) {
      REQUIRE(got[i].size() == exact[i].size());
      for (size_t k = 0; k < exact[i].size(); ++k) {
        if (!is_bf16_nearest_even(exact[i][k], got[i][k])) ++bad;
        if (got[i][k] != exact[i][k]) ++changed;
      }
    }
    CHECK(bad == 0);
    CHECK(changed > 0);  // the file really holds bf16
    CHECK(file.model().geometry_string() == src.model().geometry_string());
    CHECK(file.readout() == src.readout());  // the readout stays fp32
  }
  // The rule itself on hand-picked values: ties go to the even neighbour, overflow to infinity.
  CHECK(is_bf16_nearest_even(from_bits(0x3F808000u), from_bits(0x3F800000u)));   // tie, lower is even
  CHECK(is_bf16_nearest_even(from_bits(0x3F818000u), from_bits(0x3F820000u)));   // tie, upper is even
  CHECK(!is_bf16_nearest_even(from_bits(0x3F808000u), from_bits(0x3F810000u)));  // odd neighbour refused
  CHECK(is_bf16_nearest_even(from_bits(0xBF80C000u), from_bits(0xBF810000u)));   // negative, above half
}

TEST_CASE("trace: writer leaves no temporary file and keeps the old file when the source fails", "[trace]") {
  struct Failing : SynthSource {
    using SynthSource::SynthSource;
    void read(long long step0, int n, InputChunk& out) override {
      if (step0 >= 16) throw FormatError("failing source: disk on fire at step " + std::to_string(step0));
      SynthSource::read(step0, n, out);
    }
  };
  test::TempDir d;
  const std::string path = d / "out.h5";
  Failing bad(test::tiny_mamba2_trace());
  CHECK_THROWS_WITH(write_trace(path, bad, InputStorage::FP32, 8), Contains("disk on fire"));
  CHECK(!std::filesystem::exists(path));
  CHECK(test::count_files_containing(d.path(), ".tmp") == 0);
  test::write_text(path, "previous content");
  CHECK_THROWS(write_trace(path, bad, InputStorage::BF16, 8));
  CHECK(test::read_text(path) == "previous content");
  CHECK(test::count_files_containing(d.path(), ".tmp") == 0);
  // Non-finite inputs are refused at write time, naming the input and position.
  MemoryTrace mem(SynthSource(test::tiny_gdn_trace()).model(), 4, 2);
  mem.inputs[2][(1 * 2 + 1) * 32 + 7] =
      std::numeric_limits<float>::infinity();  // v [HV=4, V=8]: step 1, seq 1, index 7
  CHECK_THROWS_WITH(write_trace(path, mem, InputStorage::FP32, 8),
                    Contains("'v'") && Contains("step 1") && Contains("sequence 1") && Contains("index 7"));
  CHECK(test::read_text(path) == "previous content");
  CHECK_THROWS_AS(write_trace(path, mem, InputStorage::FP32, 0), ConfigError);
}

TEST_CASE("trace: unreadable files give one line naming the file", "[trace]") {
  test::TempDir d;
  CHECK_THAT(load_error(d / "missing.h5"), Contains("missing"));
  test::write_text(d / "text.h5", "step,x\n0,1.0\n");
  CHECK_THAT(load_error(d / "text.h5"), Contains("not an HDF5 file"));
  const std::string good = good_file(d, "good.h5");
  const std::string bytes = test::read_text(good);
  test::write_text(d / "half.h5", bytes.substr(0, bytes.size() / 2));
  CHECK_THAT(load_error(d / "half.h5"), Contains("truncated"));
}

TEST_CASE("trace: root attribute errors", "[trace]") {
  test::TempDir d;
  SECTION("format missing") {
    const auto p = good_file(d, "t.h5");
    Edit(p).drop_attr("format");
    CHECK_THAT(load_error(p), Contains("'format'") && Contains("missing"));
  }
  SECTION("format wrong") {
    const auto p = good_file(d, "t.h5");
    h5::set_attr(Edit(p).f, "format", std::string("some-other-format"));
    CHECK_THAT(load_error(p), Contains("'format'") && Contains("some-other-format"));
  }
  SECTION("unsupported version") {
    const auto p = good_file(d, "t.h5");
    h5::set_attr(Edit(p).f, "version", 2LL);
    CHECK_THAT(load_error(p), Contains("version 2") && Contains("'version'"));
  }
  SECTION("unknown family") {
    const auto p = good_file(d, "t.h5");
    h5::set_attr(Edit(p).f, "family", std::string("mamba3"));
    CHECK_THAT(load_error(p), Contains("'family'") && Contains("mamba3") && Contains("mamba2, gdn"));
  }
  SECTION("geometry attribute missing") {
    const auto p = good_file(d, "t.h5");
    Edit(p).drop_attr("N");
    CHECK_THAT(load_error(p), Contains("'N'") && Contains("missing"));
  }
  SECTION("geometry disagrees with a parameter's size") {
    const auto p = good_file(d, "t.h5");
    h5::set_attr(Edit(p).f, "H", 6LL);  // still a multiple of G = 2; A_log holds 4 heads
    CHECK_THAT(load_error(p), Contains("/params/A_log") && Contains("[4]") && Contains("expected [6]"));
  }
  SECTION("steps attribute disagrees with the inputs") {
    const auto p = good_file(d, "t.h5");
    h5::set_attr(Edit(p).f, "steps", 40LL);
    CHECK_THAT(load_error(p), Contains("'steps' = 40") && Contains("/inputs/x") && Contains("37 steps"));
  }
  SECTION("flag out of range") {
    const auto p = good_file(d, "t.h5");
    h5::set_attr(Edit(p).f, "has_z", 2LL);
    CHECK_THAT(load_error(p), Contains("'has_z'") && Contains("0 or 1"));
  }
  SECTION("z present without has_z") {
    const auto p = good_file(d, "t.h5");
    h5::set_attr(Edit(p).f, "has_z", 0LL);
    CHECK_THAT(load_error(p), Contains("/inputs/z") && Contains("has_z"));
  }
}

TEST_CASE("trace: parameter errors", "[trace]") {
  test::TempDir d;
  SECTION("missing group") {
    const auto p = good_file(d, "t.h5");
    Edit(p).drop("/params");
    CHECK_THAT(load_error(p), Contains("'params'") && Contains("missing"));
  }
  SECTION("missing dataset") {
    const auto p = good_file(d, "t.h5");
    Edit(p).drop("/params/dt_bias");
    CHECK_THAT(load_error(p), Contains("/params/dt_bias") && Contains("missing"));
  }
  SECTION("integer dtype") {
    const auto p = good_file(d, "t.h5");
    Edit(p).replace("/params/A_log", H5T_STD_I32LE, {4});
    CHECK_THAT(load_error(p), Contains("/params/A_log") && Contains("int32") && Contains("float64"));
  }
  SECTION("D shape disagrees with d_per_dim") {
    const auto p = good_file(d, "t.h5");
    Edit(p).replace("/params/D", H5T_IEEE_F64LE, {4});
    CHECK_THAT(load_error(p), Contains("/params/D") && Contains("[4]") && Contains("expected [4, 8]"));
  }
  SECTION("non-finite parameter") {
    const auto p = good_file(d, "t.h5");
    {
      Edit e(p);
      e.replace("/params/A_log", H5T_IEEE_F32LE, {4});
      e.poke("/params/A_log", 2, std::numeric_limits<float>::quiet_NaN());
    }
    CHECK_THAT(load_error(p), Contains("A_log") && Contains("not finite") && Contains("head 2"));
  }
  SECTION("float32 parameters are accepted") {
    const auto p = good_file(d, "t.h5");
    Edit(p).replace("/params/dt_bias", H5T_IEEE_F32LE, {4});
    H5TraceSource t(p);
    CHECK(t.model().mamba2.dt_bias == std::vector<double>(4, 0.0));
  }
}

TEST_CASE("trace: input dataset errors", "[trace]") {
  test::TempDir d;
  SECTION("missing group") {
    const auto p = good_file(d, "t.h5");
    Edit(p).drop("/inputs");
    CHECK_THAT(load_error(p), Contains("'inputs'") && Contains("missing"));
  }
  SECTION("missing dataset") {
    const auto p = good_file(d, "t.h5");
    Edit(p).drop("/inputs/B");
    CHECK_THAT(load_error(p), Contains("/inputs/B") && Contains("missing"));
  }
  SECTION("wrong shape") {
    const auto p = good_file(d, "t.h5");
    Edit(p).replace("/inputs/x", H5T_IEEE_F32LE, {37, 3, 4, 9});
    CHECK_THAT(load_error(p),
               Contains("/inputs/x") && Contains("[37, 3, 4, 9]") && Contains("expected [steps, seqs, 4, 8]"));
  }
  SECTION("wrong rank") {
    const auto p = good_file(d, "t.h5");
    Edit(p).replace("/inputs/dt", H5T_IEEE_F32LE, {37, 12});
    CHECK_THAT(load_error(p), Contains("/inputs/dt") && Contains("[37, 12]") && Contains("[steps, seqs, 4]"));
  }
  SECTION("integer dtype") {
    const auto p = good_file(d, "t.h5");
    Edit(p).replace("/inputs/dt", H5T_STD_I32LE, {37, 3, 4});
    CHECK_THAT(load_error(p), Contains("/inputs/dt") && Contains("int32") && Contains("float32 or bfloat16"));
  }
  SECTION("float64 inputs are refused") {
    const auto p = good_file(d, "t.h5");
    Edit(p).replace("/inputs/C", H5T_IEEE_F64LE, {37, 3, 2, 16});
    CHECK_THAT(load_error(p), Contains("/inputs/C") && Contains("float64"));
  }
  SECTION("uint16 without the bfloat16 encoding") {
    const auto p = good_file(d, "t.h5");
    Edit(p).replace("/inputs/z", H5T_STD_U16LE, {37, 3, 4, 8});
    CHECK_THAT(load_error(p), Contains("/inputs/z") && Contains("uint16") && Contains("encoding"));
  }
  SECTION("wrong encoding value") {
    const auto p = good_file(d, "t.h5", InputStorage::BF16);
    {
      Edit e(p);
      h5::Handle ds(H5Dopen2(e.f, "/inputs/B", H5P_DEFAULT));
      h5::set_attr(ds, "encoding", std::string("float16"));
    }
    CHECK_THAT(load_error(p), Contains("/inputs/B") && Contains("float16") && Contains("bfloat16"));
  }
  SECTION("step counts differ between inputs") {
    const auto p = good_file(d, "t.h5");
    Edit(p).replace("/inputs/dt", H5T_IEEE_F32LE, {36, 3, 4});
    CHECK_THAT(load_error(p), Contains("/inputs/dt") && Contains("36 steps") && Contains("/inputs/x"));
  }
  SECTION("sequence counts differ between inputs") {
    const auto p = good_file(d, "t.h5");
    Edit(p).replace("/inputs/C", H5T_IEEE_F32LE, {37, 2, 2, 16});
    CHECK_THAT(load_error(p), Contains("/inputs/C") && Contains("2 sequences") && Contains("/inputs/x"));
  }
  SECTION("zero steps") {
    const auto p = good_file(d, "t.h5");
    {
      Edit e(p);
      e.replace("/inputs/x", H5T_IEEE_F32LE, {0, 3, 4, 8});
      e.replace("/inputs/dt", H5T_IEEE_F32LE, {0, 3, 4});
      e.replace("/inputs/B", H5T_IEEE_F32LE, {0, 3, 2, 16});
      e.replace("/inputs/C", H5T_IEEE_F32LE, {0, 3, 2, 16});
      e.replace("/inputs/z", H5T_IEEE_F32LE, {0, 3, 4, 8});
      h5::set_attr(e.f, "steps", 0LL);
    }
    CHECK_THAT(load_error(p), Contains("/inputs/x") && Contains("zero steps"));
  }
  SECTION("zero sequences") {
    const auto p = good_file(d, "t.h5");
    Edit(p).replace("/inputs/x", H5T_IEEE_F32LE, {37, 0, 4, 8});
    CHECK_THAT(load_error(p), Contains("/inputs/x") && Contains("zero sequences"));
  }
  SECTION("readout with the wrong width") {
    const auto p = good_file(d, "t.h5");
    Edit(p).replace("/readout", H5T_IEEE_F32LE, {5, 31});
    CHECK_THAT(load_error(p), Contains("/readout") && Contains("[5, 31]") && Contains("[vocab, 32]"));
  }
}

TEST_CASE("trace: a non-finite input is reported with dataset, step, sequence and index", "[trace]") {
  test::TempDir d;
  // C is [G=2, N=16]: index 19 is group 1, channel 3. Step 21 lies inside the file's third chunk (8 steps each).
  const hsize_t flat = (21 * 3 + 1) * 32 + 19;
  for (auto storage : {InputStorage::FP32, InputStorage::BF16}) {
    const auto p = good_file(d, storage == InputStorage::FP32 ? "nan32.h5" : "nan16.h5", storage);
    if (storage == InputStorage::FP32) {
      Edit(p).poke("/inputs/C", flat, std::numeric_limits<float>::quiet_NaN());
    } else {
      Edit e(p);
      h5::Handle ds(H5Dopen2(e.f, "/inputs/C", H5P_DEFAULT));
      h5::Handle space(H5Dget_space(ds));
      hsize_t coord[4] = {21, 1, 1, 3}, one = 1;
      REQUIRE(H5Sselect_elements(space, H5S_SELECT_SET, 1, coord) >= 0);
      h5::Handle mem(H5Screate_simple(1, &one, nullptr));
      const uint16_t inf = 0x7F80;  // bf16 +inf
      REQUIRE(H5Dwrite(ds, H5T_NATIVE_UINT16, mem, space, H5P_DEFAULT, &inf) >= 0);
    }
    H5TraceSource t(p);  // opening does not read the inputs
    InputChunk c;
    t.read(0, 21, c);  // the steps before are fine
    const std::string msg = load_error(p);
    CHECK_THAT(msg, Contains("/inputs/C") && Contains("step 21") && Contains("sequence 1") && Contains("index 19"));
    // Reading in odd pieces reports the same global position.
    try {
      for (long long s = 0; s < t.steps(); s += 5)
        t.read(s, static_cast<int>(std::min<long long>(5, t.steps() - s)), c);
      FAIL("no error");
    } catch (const FormatError& e) {
      CHECK_THAT(std::string(e.what()), Contains("step 21") && Contains("index 19"));
    }
  }
}

TEST_CASE("trace: a minimal hand-written file (h5py style) is accepted", "[trace]") {
  // What docs/trace_format.md's h5py example writes: variable-length string attributes, int64 geometry, contiguous
  // float32 inputs, float64 parameters, no optional attributes (has_z and d_per_dim inferred, no dt limits).
  test::TempDir d;
  const std::string p = d / "hand.h5";
  const int H = 2, P = 4, N = 8, G = 1, T = 6, S = 1;
  {
    h5::Handle f(H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    auto vstr = [&](const char* name, const char* value) {
      h5::Handle type(H5Tcopy(H5T_C_S1));
      H5Tset_size(type, H5T_VARIABLE);
      H5Tset_cset(type, H5T_CSET_UTF8);  // as h5py stores str
      h5::Handle space(H5Screate(H5S_SCALAR));
      h5::Handle a(H5Acreate2(f, name, type, space, H5P_DEFAULT, H5P_DEFAULT));
      REQUIRE(H5Awrite(a, type, &value) >= 0);
    };
    vstr("format", "replayssm-trace");
    vstr("family", "mamba2");
    h5::set_attr(f, "version", 1LL);
    for (auto [k, v] : std::initializer_list<std::pair<const char*, int>>{
             {"H", H}, {"P", P}, {"N", N}, {"G", G}, {"steps", T}, {"seqs", S}})
      h5::set_attr(f, k, static_cast<long long>(v));
    h5::Handle pg(H5Gcreate2(f, "params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    h5::write(pg, "A_log", {H}, std::vector<double>{0.0, 1.0}.data());
    h5::write(pg, "D", {H}, std::vector<double>{1.0, 1.0}.data());
    h5::write(pg, "dt_bias", {H}, std::vector<double>{-3.0, -4.0}.data());
    h5::Handle ig(H5Gcreate2(f, "inputs", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    std::vector<float> x(T * S * H * P), dt(T * S * H), b(T * S * G * N);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * static_cast<float>(i);
    for (size_t i = 0; i < dt.size(); ++i) dt[i] = -1.0f + 0.5f * static_cast<float>(i);
    for (size_t i = 0; i < b.size(); ++i) b[i] = 1.0f / static_cast<float>(i + 1);
    h5::write(ig, "x", {T, S, H, P}, x.data());
    h5::write(ig, "dt", {T, S, H}, dt.data());
    h5::write(ig, "B", {T, S, G, N}, b.data());
    h5::write(ig, "C", {T, S, G, N}, b.data());
  }
  H5TraceSource t(p);
  CHECK(!t.model().mamba2.has_z);
  CHECK(!t.model().mamba2.d_per_dim);
  CHECK(t.model().mamba2.dt_max == std::numeric_limits<double>::infinity());
  CHECK(t.model().mamba2.dt_bias == std::vector<double>{-3.0, -4.0});
  CHECK(t.readout_vocab() == 0);
  CHECK(t.description().empty());
  InputChunk c;
  t.read(2, 3, c);
  CHECK(c.at(0, 0, 0)[0] == 0.25f * (2 * H * P));
  CHECK(c.at(1, 2, 0)[1] == -1.0f + 0.5f * (4 * H + 1));
  CHECK(c.at(3, 1, 0)[5] == 1.0f / (3 * N + 5 + 1));
}

TEST_CASE("trace: inspect statistics match a direct computation", "[trace]") {
  test::TempDir d;
  const auto p = good_file(d, "t.h5", InputStorage::BF16);
  const TraceInfo info = inspect_trace(p, 7);
  CHECK(info.version == 1);
  CHECK(info.family == "mamba2");
  CHECK(info.geometry == "H=4 P=8 N=16 G=2");
  CHECK(info.steps == 37);
  CHECK(info.seqs == 3);
  CHECK_THAT(info.flags, Contains("has_z=1") && Contains("d_per_dim=1"));
  // A_log, D, dt_bias, then x, dt, B, C, z, then the readout.
  REQUIRE(info.datasets.size() == 9);
  CHECK(info.datasets[1].name == "/params/D");
  CHECK(info.datasets[1].shape == std::vector<long long>{4, 8});
  CHECK(info.datasets[1].dtype == "float64");
  CHECK(info.datasets[1].min == 1.0);
  CHECK(info.datasets[1].std == 0.0);
  CHECK(info.datasets[8].name == "/readout");
  CHECK(info.datasets[8].dtype == "float32");

  H5TraceSource t(p);
  const auto all = read_all(t, 37);
  for (size_t i = 0; i < all.size(); ++i) {
    const DatasetStats& s = info.datasets[3 + i];
    CHECK(s.name == "/inputs/" + t.model().inputs()[i].name);
    CHECK(s.dtype == "bfloat16");
    CHECK(s.count == static_cast<long long>(all[i].size()));
    CHECK(s.shape[0] == 37);
    double sum = 0, lo = 1e300, hi = -1e300, sabs = 0;
    for (float v : all[i]) {
      sum += v;
      sabs += std::fabs(v);
      lo = std::min<double>(lo, v);
      hi = std::max<double>(hi, v);
    }
    const double mean = sum / all[i].size();
    double ss = 0;
    for (float v : all[i]) ss += (v - mean) * (v - mean);
    CHECK(s.min == lo);
    CHECK(s.max == hi);
    CHECK(s.mean == Approx(mean).epsilon(1e-12).margin(1e-12));
    CHECK(s.std == Approx(std::sqrt(ss / all[i].size())).epsilon(1e-12));
    CHECK(s.mean_abs == Approx(sabs / all[i].size()).epsilon(1e-12));
  }
  const auto lines = format_trace_info(info);
  REQUIRE(lines.size() >= 12);
  CHECK_THAT(lines[0], Contains(p) && Contains("mamba2") && Contains("37 steps"));
  bool found = false;
  for (const auto& l : lines)
    found = found || (l.find("/inputs/x") != std::string::npos && l.find("[37, 3, 4, 8]") != std::string::npos &&
                      l.find("bfloat16") != std::string::npos);
  CHECK(found);

  // Non-finite values are counted by inspect, not thrown.
  const auto q = good_file(d, "nan.h5");
  Edit(q).poke("/inputs/dt", 10, std::numeric_limits<float>::infinity());
  const TraceInfo bad = inspect_trace(q);
  CHECK(bad.datasets[4].name == "/inputs/dt");
  CHECK(bad.datasets[4].nonfinite == 1);
  CHECK(bad.datasets[4].count == 37 * 3 * 4 - 1);
  CHECK(std::isfinite(bad.datasets[4].max));
}
