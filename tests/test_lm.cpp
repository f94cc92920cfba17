// The tiny hybrid language model's decode forward (lib/lm/, issue 14): the weights file, the fp64 forward against
// torch's fp64 logits, end-to-end scheme runs against the fp64 reference, planted faults and bad files.
// tests/lm/tiny_random.h5 is a random-weights model in the shipped format with odd sizes (m_G = 2, g_conv = 3,
// K != V) so a transposed shape cannot pass; tests/lm/tiny_random_torch_logits.h5 holds the torch model's fp64 logits
// for it (scripts/train_tiny_hybrid.py fixture). The shipped model and its fixture (data/tiny_hybrid/) are checked
// too when present.
#include <hdf5.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "cpu/reference.h"
#include "errors.h"
#include "io/h5.h"
#include "io/results.h"
#include "lm/forward.h"
#include "lm/next_byte.h"
#include "lm/sha256.h"
#include "lm/weights.h"
#include "metrics/tolerance.h"
#include "run/factory.h"
#include "test_util.h"

using namespace rssm;
using namespace rssm::test;
using Catch::Matchers::Contains;

namespace {

const std::string kDir = std::string(REPLAYSSM_SOURCE_DIR) + "/tests/lm/";
const std::string kTiny = kDir + "tiny_random.h5";
const std::string kTinyLogits = kDir + "tiny_random_torch_logits.h5";

std::vector<std::unique_ptr<Decoder>> reference_decoders(const LmWeights& w) {
  std::vector<std::unique_ptr<Decoder>> v;
  for (size_t i = 0; i < w.ssm_layers().size(); ++i) v.push_back(std::make_unique<ReferenceDecoder>());
  return v;
}

std::vector<std::unique_ptr<Decoder>> scheme_decoders(const LmWeights& w, const Scheme& s) {
  std::vector<std::unique_ptr<Decoder>> v;
  for (int i : w.ssm_layers()) v.push_back(make_decoder(s, w.ssm_model(i).family, 1));
  return v;
}

Scheme scheme_of(std::vector<std::pair<std::string, std::string>> kv) { return parse_scheme(kv); }

// Teacher-forced logits [steps, seqs, vocab] over `tokens` [steps, seqs].
std::vector<double> run_tokens(LmForward& f, const std::vector<int>& tokens, int vocab) {
  const int seqs = f.seqs();
  const size_t steps = tokens.size() / static_cast<size_t>(seqs);
  std::vector<double> out(steps * seqs * vocab);
  for (size_t t = 0; t < steps; ++t) f.step(&tokens[t * seqs], &out[t * seqs * vocab]);
  return out;
}

struct Fixture {
  std::vector<int> tokens;
  std::vector<double> logits;
  std::string sha;
};

Fixture read_fixture(const std::string& path) {
  h5::Handle f = h5::open_file(path);
  Fixture x;
  for (long long t : h5::read_ints(f, "tokens", path)) x.tokens.push_back(static_cast<int>(t));
  x.logits = h5::read_doubles(f, "logits", path);
  x.sha = h5::get_attr_string(f, "weights_sha256", path);
  return x;
}

// A copy of the tiny model whose HDF5 content `edit` changes.
template <class Edit>
std::string edited_copy(const TempDir& dir, const std::string& name, Edit edit) {
  const std::string p = dir / name;
  std::filesystem::copy_file(kTiny, p);
  h5::Handle f = h5::open_file(p, true);
  edit(f.get());
  return p;
}

void write_one(hid_t file, const char* dataset, float value) {
  h5::Handle d(H5Dopen2(file, dataset, H5P_DEFAULT));
  REQUIRE(d.valid());
  const auto n = h5::shape(file, dataset, "edit").at(0) *
                 (h5::shape(file, dataset, "edit").size() > 1 ? h5::shape(file, dataset, "edit")[1] : 1);
  std::vector<float> v(n);
  REQUIRE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0);
  v[0] = value;
  REQUIRE(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0);
}

}  // namespace

TEST_CASE("lm: KL of equal logits is exactly 0 and tiny differences give their true size", "[lm]") {
  std::vector<double> a(256), b(256);
  for (int i = 0; i < 256; ++i) a[i] = b[i] = std::sin(i) * 7;
  CHECK(compare_next_byte(a.data(), b.data(), 256, 3).kl == 0.0);
  for (int i = 0; i < 256; ++i) b[i] += 1e-6 * std::cos(i);  // KL ≈ Var_p(d) / 2, about 1e-13 here
  const double kl = compare_next_byte(a.data(), b.data(), 256, 3).kl;
  CHECK(kl > 1e-15);
  CHECK(kl < 1e-11);
  CHECK(compare_next_byte(a.data(), b.data(), 256, 3).ref_bits == Approx(code_bits(a.data(), 256, 3)));
}

TEST_CASE("lm: sha256 matches the standard's test vectors", "[lm]") {
  CHECK(sha256_bytes("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_bytes("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_bytes(std::string(1000, 'a')) == "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
}

TEST_CASE("lm: the tiny model's weights load with every hyper-parameter from the file", "[lm]") {
  const LmWeights w = load_lm_weights(kTiny);
  CHECK(w.hp.layout == "MGAMG");
  CHECK(w.hp.d_model == 24);
  CHECK(w.hp.m_G == 2);
  CHECK(w.hp.g_conv == 3);
  CHECK(w.storage == "fp16");
  CHECK(w.ssm_layers() == std::vector<int>{0, 1, 3, 4});
  CHECK(w.ssm_model(1).family == Family::GDN);
  CHECK(w.ssm_model(0).mamba2.has_z == false);
  // the fixture names the file it was computed from by the hash Python's hashlib gives
  CHECK(w.sha256 == read_fixture(kTinyLogits).sha);
}

TEST_CASE("lm: the fp64 forward reproduces torch's fp64 logits", "[lm]") {
  auto check = [](const std::string& weights, const std::string& fixture, size_t max_steps) {
    const LmWeights w = load_lm_weights(weights);
    Fixture fx = read_fixture(fixture);
    REQUIRE(w.sha256 == fx.sha);
    const size_t steps = std::min(max_steps, fx.tokens.size());
    fx.tokens.resize(steps);
    LmForward f(w, LmPrecision::FP64, Format::FP64, reference_decoders(w), 1);
    const auto got = run_tokens(f, fx.tokens, w.hp.vocab);
    const std::vector<double> want(fx.logits.begin(), fx.logits.begin() + static_cast<long>(got.size()));
    // The SSM inputs pass through an fp32 InputChunk: ~1e-7 relative; the issue asks for 1e-4.
    const double rel = max_rel(got, want);
    INFO(weights << ": max relative difference " << rel << " over " << steps << " steps");
    CHECK(rel < 1e-5);
  };
  check(kTiny, kTinyLogits, 1000);
  const std::string shipped = std::string(REPLAYSSM_SOURCE_DIR) + "/data/tiny_hybrid/lm_weights.h5";
  const std::string shipped_fx = std::string(REPLAYSSM_SOURCE_DIR) + "/data/tiny_hybrid/lm_fixture.h5";
  if (std::filesystem::exists(shipped) && std::filesystem::exists(shipped_fx))
    check(shipped, shipped_fx, 64);
  else
    WARN("data/tiny_hybrid/lm_weights.h5 or lm_fixture.h5 absent: the shipped model is not checked");
}

TEST_CASE("lm: an fp64 scheme end to end equals the fp64 reference run", "[lm]") {
  const LmWeights w = load_lm_weights(kTiny);
  const Fixture fx = read_fixture(kTinyLogits);
  // two sequences: the same text, shifted
  std::vector<int> tokens;
  for (size_t t = 0; t + 5 < fx.tokens.size(); ++t) {
    tokens.push_back(fx.tokens[t]);
    tokens.push_back(fx.tokens[t + 5]);
  }
  LmForward ref(w, LmPrecision::FP64, Format::FP32, reference_decoders(w), 2);
  const Scheme s =
      scheme_of({{"decoder", "eager"}, {"state_format", "fp64"}, {"out_format", "fp64"}, {"act_format", "fp32"}});
  LmForward test(w, LmPrecision::FP64, s.act_format, scheme_decoders(w, s), 2);
  const auto a = run_tokens(ref, tokens, w.hp.vocab);
  const auto b = run_tokens(test, tokens, w.hp.vocab);
  double kl_max = 0;
  for (size_t r = 0; r < a.size() / 256; ++r)
    kl_max = std::max(kl_max, compare_next_byte(&a[r * 256], &b[r * 256], 256, -1).kl);
  INFO("max relative logit difference " << max_rel(a, b) << ", max KL " << kl_max);
  // Not bit for bit: the eager fp64 decoder and the reference sum in different orders (a few 1e-16 apart); the
  // KL of logits that close is ~1e-31, far below any scheme's, and every argmax agrees.
  CHECK(max_rel(a, b) < 1e-13);
  CHECK(kl_max < 1e-24);
  for (size_t r = 0; r < a.size() / 256; ++r) REQUIRE(compare_next_byte(&a[r * 256], &b[r * 256], 256, -1).top1_agree);
}

TEST_CASE("lm: replay fp32 at interval 1 against eager fp32 end to end stays within the fp32 budget", "[lm]") {
  const LmWeights w = load_lm_weights(kTiny);
  const Fixture fx = read_fixture(kTinyLogits);
  const Scheme eager = scheme_of({{"decoder", "eager"}, {"state_format", "fp32"}, {"act_format", "fp32"}});
  const Scheme replay = scheme_of({{"decoder", "replay"},
                                   {"state_format", "fp32"},
                                   {"buffer_format", "fp32"},
                                   {"act_format", "fp32"},
                                   {"interval", "1"}});
  LmForward ref(w, LmPrecision::FP64, Format::FP32, reference_decoders(w), 1);
  LmForward fe(w, LmPrecision::FP32, eager.act_format, scheme_decoders(w, eager), 1);
  LmForward fr(w, LmPrecision::FP32, replay.act_format, scheme_decoders(w, replay), 1);
  const auto lref = run_tokens(ref, fx.tokens, 256);
  const auto le = run_tokens(fe, fx.tokens, 256);
  const auto lr = run_tokens(fr, fx.tokens, 256);
  const Tolerance tol = output_tolerance(Format::FP32);
  const size_t steps = fx.tokens.size();
  double kl_max = 0, rel_sum = 0, rel_max = 0, ref_rel_max = 0;
  for (size_t t = 0; t < steps; ++t) {
    kl_max = std::max(kl_max, compare_next_byte(&le[t * 256], &lr[t * 256], 256, -1).kl);
    const double r = rel_rms(&lr[t * 256], &le[t * 256], 256);
    rel_sum += r;
    rel_max = std::max(rel_max, r);
    ref_rel_max = std::max(ref_rel_max, rel_rms(&le[t * 256], &lref[t * 256], 256));
  }
  INFO("replay vs eager: logits rel mean " << rel_sum / steps << " max " << rel_max << ", KL max " << kl_max
                                           << "; eager fp32 vs fp64 reference: rel max " << ref_rel_max);
  CHECK(rel_sum / steps <= tol.rel_mean);
  CHECK(rel_max <= tol.rel_max);
  CHECK(ref_rel_max <= tol.rel_max);
  CHECK(kl_max < 1e-8);
}

TEST_CASE("lm: a planted NaN or a corrupted weight stops the run naming the layer and the step", "[lm]") {
  const LmWeights w = load_lm_weights(kTiny);
  const std::vector<int> tokens = {72, 101, 108, 108, 111, 32, 119, 111};
  {
    LmForward f(w, LmPrecision::FP32, Format::FP32, reference_decoders(w), 1);
    f.plant(3, 5, std::numeric_limits<double>::quiet_NaN());
    CHECK_THROWS_WITH(run_tokens(f, tokens, 256), Contains("layer 3 (mamba2) mixer output is not finite at step 5"));
  }
  {
    LmWeights bad = w;
    bad.layers[1].out_proj.data[7] = 1e300;  // a corrupted weight: inf once the fp32 network casts it
    LmForward f(bad, LmPrecision::FP32, Format::FP32, reference_decoders(bad), 1);
    CHECK_THROWS_WITH(run_tokens(f, tokens, 256), Contains("layer 1 (gdn)") && Contains("at step 0"));
  }
  CHECK_THROWS_WITH(
      [&] {
        LmForward f(w, LmPrecision::FP64, Format::FP32, reference_decoders(w), 1);
        const int t = 300;
        std::vector<double> l(256);
        f.step(&t, l.data());
      }(),
      Contains("outside the vocabulary"));
}

TEST_CASE("lm: bad model files get one clear error naming the file and the dataset", "[lm]") {
  TempDir dir;
  CHECK_THROWS_AS(load_lm_weights(dir / "missing.h5"), FormatError);
  write_text(dir / "text.h5", "not hdf5");
  CHECK_THROWS_WITH(load_lm_weights(dir / "text.h5"), Contains("text.h5"));
  const auto nan_file = edited_copy(
      dir, "nan.h5", [](hid_t f) { write_one(f, "layers/03/A_log", std::numeric_limits<float>::quiet_NaN()); });
  CHECK_THROWS_WITH(load_lm_weights(nan_file),
                    Contains("nan.h5") && Contains("'layers/03/A_log'") && Contains("non-finite"));
  const auto missing =
      edited_copy(dir, "missing_ds.h5", [](hid_t f) { H5Ldelete(f, "layers/01/in_proj", H5P_DEFAULT); });
  CHECK_THROWS_WITH(load_lm_weights(missing), Contains("'layers/01/in_proj' is missing"));
  const auto wrong_attr = edited_copy(dir, "wrong_attr.h5", [](hid_t f) {
    H5Adelete(f, "m_N");
    h5::set_attr(f, "m_N", 6LL);  // every Mamba-2 shape now disagrees with the datasets
  });
  CHECK_THROWS_WITH(load_lm_weights(wrong_attr), Contains("'layers/00/in_proj' has shape [48, 24], expected [52, 24]"));
  const auto trace = std::string(REPLAYSSM_SOURCE_DIR) + "/data/tiny_hybrid/tiny_hybrid_layer00_mamba2.h5";
  CHECK_THROWS_WITH(load_lm_weights(trace), Contains("not a replayssm-lm weights file"));
}

TEST_CASE("lm: replayssm run with [model] writes per-step KL, bits per byte and the weights' hash", "[lm][cli]") {
  TempDir dir;
  const std::string cfg = dir / "lm.ini";
  write_text(cfg, "[run]\noutput = " + (dir / "lm.h5") + "\nthreads = 1\n[model]\nweights = " + kTiny +
                      "\ntext = " + std::string(REPLAYSSM_SOURCE_DIR) +
                      "/data/tiny_hybrid/heldout.txt\nseqs = 2\nsteps = 80\n"
                      "[scheme]\ndecoder = eager, dual\nstate_format = fp32, bf16\nread_format = bf16\n"
                      "interval = 8\nact_format = fp32\n");
  const CmdResult r = run_cli("run " + cfg + " -q", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("eager-bf16") && Contains("dual-fp32+bf16-K8") && Contains("skipped"));
  const ResultSet rs = read_result_file(dir / "lm.h5");
  auto root = [&](const std::string& k) -> AttrValue {
    for (const auto& [kk, v] : rs.root)
      if (kk == k) return v;
    FAIL("root attribute " << k << " missing");
    return std::string();
  };
  CHECK(std::get<std::string>(root("model_weights_sha256")) == load_lm_weights(kTiny).sha256);
  CHECK(std::get<std::string>(root("mode")) == "teacher");
  int ok = 0;
  for (const auto& run : rs.runs) {
    if (run.groups.empty()) continue;
    ++ok;
    const auto& g = run.groups.front();
    CHECK(g.index.size() == 80);
    for (const auto& [name, series] : g.series) {
      INFO(run.id << " " << name);
      for (double v : series) REQUIRE(std::isfinite(v));
    }
  }
  CHECK(ok == 3);  // eager fp32, eager bf16, dual fp32+bf16 (dual bf16+bf16 is the shared checkpoint: skipped)

  // free-running: eager fp32 follows the fp64 greedy text longer than a bf16 state does, on average
  const CmdResult f = run_cli("run " + cfg + " -q --set model.mode=free --set model.steps=60 --set model.prompt=16 " +
                                  "--set scheme.decoder=eager",
                              dir);
  INFO(f.out << f.err);
  REQUIRE(f.code == 0);
  CHECK_THAT(f.out, Contains("1st div"));

  // an fp64 scheme with an fp64 network generates exactly the fp64 reference's text
  const CmdResult same = run_cli("run " + cfg + " -q --set model.mode=free --set model.steps=60 --set model.prompt=16 " +
                                     "--set model.network=fp64 --set scheme.decoder=eager --set scheme.state_format=fp64 " +
                                     "--set scheme.out_format=fp64 -o " + (dir / "same.h5"),
                                 dir);
  INFO(same.out << same.err);
  REQUIRE(same.code == 0);
  for (const auto& run : read_result_file(dir / "same.h5").runs)
    for (const auto& [k, v] : run.summary)
      if (k == "first_divergence_min") CHECK(std::get<double>(v) == 60.0);

  // bad model files and text: one line, exit 1
  const CmdResult bad = run_cli("run " + cfg + " -q --set model.weights=" + (dir / "lm.ini"), dir);
  CHECK(bad.code == 1);
  CHECK_THAT(bad.err, Contains("lm.ini"));
  const CmdResult short_text = run_cli("run " + cfg + " -q --set model.steps=100000", dir);
  CHECK(short_text.code == 2);
  CHECK_THAT(short_text.err, Contains("model.steps"));
}
