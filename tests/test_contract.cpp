// Golden tests of the floating-point contract (docs/fp_contract.md): the pieces a CUDA kernel must reproduce bit for
// bit. The constants below were produced by this code and pin it: a change to the Philox counter layout, to a
// rounding rule or to the stochastic streams changes them, and then every kernel held to the contract must change
// with it. So a failure here is never fixed by pasting new constants without reading the contract page first.
// What the contract leaves free (summation order, FMA contraction) is not tested here but bounded in the GPU tests.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/checkpoint.h"
#include "cpu/eager.h"
#include "cpu/replay.h"
#include "numeric/arith.h"
#include "numeric/bits.h"
#include "numeric/format.h"
#include "numeric/scaled.h"
#include "numeric/stochastic.h"
#include "test_util.h"
#include "trace_fixtures.h"
#include "trace/synth.h"

using namespace rssm;

namespace {

constexpr uint64_t kSeed = 0x0123456789ABCDEFull;

// FNV-1a, 64 bits: a compact golden for a byte sequence.
uint64_t fnv1a(const std::vector<uint8_t>& b) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (uint8_t c : b) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

// A row that exercises the rounding rules: ties, values just off ties, a subnormal for bf16/fp16, large and tiny
// magnitudes, both signs, zero.
std::vector<double> probe_row() {
  return {1.0,           1.00390625,  -1.001953125, 3.14159265358979, -2.718281828459045, 1e-3, -6.1e-5, 1e-40,
          448.0,         -0.3333333,  0.0,          65504.0,          1.0 + 1.0 / 256,    -7.5, 0.1,     123.456};
}

// The bytes a kernel would store for `values` (already on the format's grid, as CheckpointCopy holds them).
std::vector<uint8_t> stored_bytes(Format f, const std::vector<double>& values) {
  std::vector<uint8_t> out;
  for (double v : values) {
    const float x = static_cast<float>(v);
    if (f == Format::BF16) {
      const uint16_t b = float_to_bf16_bits(x);
      out.push_back(static_cast<uint8_t>(b)), out.push_back(static_cast<uint8_t>(b >> 8));
    } else if (f == Format::FP16) {
      const uint16_t b = float_to_fp16_bits(x);
      out.push_back(static_cast<uint8_t>(b)), out.push_back(static_cast<uint8_t>(b >> 8));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("contract: stochastic-rounding bits at given counters", "[contract]") {
  // (stream, step, element) -> the 32 bits every implementation must draw.
  struct Case {
    RandomStream stream;
    long long step, element;
    uint32_t bits;
  };
  const Case cases[] = {
      {RandomStream::CheckpointUpdate, 0, 0, 0xB850222Eu},
      {RandomStream::CheckpointUpdate, 0, 1, 0xC58CB04Bu},
      {RandomStream::CheckpointUpdate, 0, 3, 0x7A84FFF9u},
      {RandomStream::CheckpointUpdate, 0, 4, 0xADCA1466u},
      {RandomStream::CheckpointUpdate, 16, 5, 0xBDE18C01u},
      {RandomStream::CheckpointRead, 16, 5, 0xD7ADDA42u},
      {RandomStream::EagerState, 16, 5, 0x9895EDF0u},
      {RandomStream::CheckpointUpdate, 1 << 20, 1LL << 33, 0xA9A75FE7u},
  };
  for (const Case& c : cases) {
    INFO("stream " << static_cast<uint32_t>(c.stream) << " step " << c.step << " element " << c.element);
    CHECK(state_random_bits(kSeed, c.stream, c.step, c.element) == c.bits);
  }
  // The layout, stated independently of the goldens: element i uses word i % 4 of block i / 4.
  const PhiloxBlock b = philox4x32_10(PhiloxBlock{{1, 0, 16, 0}}, static_cast<uint32_t>(kSeed),
                                      static_cast<uint32_t>(kSeed >> 32));
  for (int w = 0; w < 4; ++w) CHECK(state_random_bits(kSeed, RandomStream::CheckpointUpdate, 16, 4 + w) == b.v[w]);
}

TEST_CASE("contract: stored bytes of checkpoint stores, every format and rounding", "[contract]") {
  struct Case {
    Format f;
    Rounding r;
    uint64_t hash;
  };
  const Case cases[] = {
      {Format::BF16, Rounding::Nearest, 0x4A95B37345DD5974ull},
      {Format::BF16, Rounding::Stochastic, 0xC1310ED46DABFAB0ull},
      {Format::FP16, Rounding::Nearest, 0x4F60778F55658D17ull},
      {Format::FP16, Rounding::Stochastic, 0x74F4BC5EDB0F20BAull},
      {Format::E4M3, Rounding::Nearest, 0x8E168CDCC8009A37ull},
      {Format::E4M3, Rounding::Stochastic, 0x5326257277250905ull},
      {Format::E5M2, Rounding::Nearest, 0x575A572C1AE8BA39ull},
      {Format::E5M2, Rounding::Stochastic, 0xA8DA1F293C9972B2ull},
      {Format::INT8, Rounding::Nearest, 0x7EE9C5BE1A7653E6ull},
      {Format::INT8, Rounding::Stochastic, 0x7D0F82BCB874B791ull},
  };
  const std::vector<double> row = probe_row();
  const long long n = static_cast<long long>(row.size());
  const long long step = 9;
  for (const Case& c : cases) {
    INFO(format_name(c.f) << " " << rounding_name(c.r));
    CheckpointCopy copy;
    copy.init(c.f, c.r, n, static_cast<int>(n), RandomStream::CheckpointUpdate, kSeed);
    copy.store(row.data(), 0, n, step);
    const std::vector<double> stored(copy.values(), copy.values() + n);
    std::vector<uint8_t> bytes;
    if (is_scaled_format(c.f)) {
      // Codes and the fp32 scale, as a kernel lays out one scaled row; the copy must hold their dequantised values.
      std::vector<uint32_t> r(static_cast<size_t>(n));
      for (long long i = 0; i < n; ++i) r[i] = state_random_bits(kSeed, RandomStream::CheckpointUpdate, step, i);
      // The row as a kernel's fp32 registers hold it: the copy quantises float rows (checkpoint.cpp).
      const std::vector<float> rowf(row.begin(), row.end());
      std::vector<uint8_t> codes(static_cast<size_t>(n));
      const float scale = quantize_row(c.f, c.r, rowf.data(), static_cast<size_t>(n), codes.data(),
                                       c.r == Rounding::Stochastic ? r.data() : nullptr);
      std::vector<double> deq(static_cast<size_t>(n));
      dequantize_row(c.f, codes.data(), static_cast<size_t>(n), scale, deq.data());
      CHECK(deq == stored);
      bytes = codes;
      uint32_t sb;
      std::memcpy(&sb, &scale, 4);
      for (int k = 0; k < 4; ++k) bytes.push_back(static_cast<uint8_t>(sb >> (8 * k)));
    } else {
      bytes = stored_bytes(c.f, stored);
    }
    CHECK(fnv1a(bytes) == c.hash);
  }
  // Spelled out for one format, so a reader sees what is pinned: bf16 nearest-even of the probe row.
  CheckpointCopy bf;
  bf.init(Format::BF16, Rounding::Nearest, n, static_cast<int>(n), RandomStream::CheckpointUpdate, kSeed);
  bf.store(row.data(), 0, n, step);
  CHECK(float_to_bf16_bits(static_cast<float>(bf.values()[0])) == 0x3F80);  // 1.0
  CHECK(float_to_bf16_bits(static_cast<float>(bf.values()[1])) == 0x3F80);  // 1 + 2^-8: a tie, to even (down)
  CHECK(float_to_bf16_bits(static_cast<float>(bf.values()[12])) == 0x3F80);  // the same tie
  CHECK(float_to_bf16_bits(static_cast<float>(bf.values()[2])) == 0xBF80);  // -1 - 2^-9: below half an ulp
}

TEST_CASE("contract: a scaled copy quantises the fp32 row, as a kernel does, not the double one", "[contract]") {
  // Found by search: in fp32, 2.01582407951355 / scale is exactly 1.0625, the e4m3 tie between 1 and 1.125 (to even:
  // 1); the exact quotient is 1.0625000393, which a double row rounds up to 1.125. The stored value must be the fp32
  // path's, so a kernel quantising its registers stores the same code.
  const std::vector<double> row = {849.9662475585938, 2.01582407951355};
  const std::vector<float> rowf(row.begin(), row.end());
  REQUIRE(static_cast<double>(rowf[0]) == row[0]);  // both are floats: only the quotient's precision differs
  REQUIRE(static_cast<double>(rowf[1]) == row[1]);
  CheckpointCopy copy;
  copy.init(Format::E4M3, Rounding::Nearest, 2, 2, RandomStream::CheckpointRead, kSeed);
  copy.store(row.data(), 0, 2, 1);
  uint8_t cf[2], cd[2];
  const float sf = quantize_row(Format::E4M3, Rounding::Nearest, rowf.data(), 2, cf);
  const float sd = quantize_row(Format::E4M3, Rounding::Nearest, row.data(), 2, cd);
  REQUIRE(sf == sd);
  CHECK(cf[1] != cd[1]);  // the two paths differ here: the check below can fail
  CHECK(copy.values()[1] == static_cast<double>(e4m3_bits_to_float(cf[1])) * sf);
  CHECK(copy.values()[1] == 1.0 * sf);
}

TEST_CASE("contract: stochastic rounding through a replay decoder uses the (seed, stream, step, element) bits",
          "[contract]") {
  // Two decoders over the same inputs: one keeps an fp32 checkpoint (nearest: fp32 storage is exact), one a bf16
  // checkpoint with stochastic rounding. Before the first flush both checkpoints are zero, so the first flush computes
  // the same fp32 values in both; the bf16 one must then hold exactly round_stochastic(bf16, value, bits) with the
  // bits of (seed, CheckpointUpdate, step = tokens folded, element index), for every element.
  for (Family f : {Family::Mamba2, Family::GDN}) {
    INFO(family_name(f));
    const int interval = 4, seqs = 2;
    SynthSource src(test::tiny_layer(f, interval, seqs, 5));
    ReplayOptions o32;
    o32.interval = interval;
    o32.update_format = Format::FP32;
    ReplayOptions osr = o32;
    osr.update_format = Format::BF16;
    osr.rounding = Rounding::Stochastic;
    osr.seed = kSeed;
    ReplayDecoder d32(o32), dsr(osr);
    InputChunk chunk;
    src.read(0, interval, chunk);
    const size_t per = static_cast<size_t>(seqs) * src.model().out_elems();
    std::vector<double> y(per * interval);
    for (ReplayDecoder* d : {&d32, &dsr}) {
      d->reset(src.model(), seqs);
      d->advance(chunk, 0, interval, y.data());
      REQUIRE(d->buffered() == 0);  // flushed after the last step
    }
    const std::vector<double>& v32 = d32.checkpoint().all();
    const std::vector<double>& vsr = dsr.checkpoint().all();
    REQUIRE(v32.size() == vsr.size());
    long long mismatched = 0, rounded_up = 0, inexact = 0;
    for (size_t i = 0; i < v32.size(); ++i) {
      const float x = static_cast<float>(v32[i]);
      const uint32_t bits = state_random_bits(kSeed, RandomStream::CheckpointUpdate, interval, static_cast<long long>(i));
      mismatched += round_stochastic(Format::BF16, x, bits) != static_cast<float>(vsr[i]);
      inexact += round_nearest(Format::BF16, x) != x;
      rounded_up += std::fabs(static_cast<float>(vsr[i])) > std::fabs(x);
    }
    CHECK(mismatched == 0);
    // Not vacuous: most values were inexact in bf16, and the draws went both ways.
    CHECK(inexact > static_cast<long long>(v32.size()) / 2);
    CHECK(rounded_up > 0);
    CHECK(rounded_up < inexact);
    // A different step key would have drawn different bits: the check above can fail.
    long long mismatched_wrong_step = 0;
    for (size_t i = 0; i < v32.size(); ++i) {
      const uint32_t bits =
          state_random_bits(kSeed, RandomStream::CheckpointUpdate, interval - 1, static_cast<long long>(i));
      mismatched_wrong_step += round_stochastic(Format::BF16, static_cast<float>(v32[i]), bits) !=
                               static_cast<float>(vsr[i]);
    }
    CHECK(mismatched_wrong_step > 0);
  }
}

TEST_CASE("contract: the flush's staged operands, folded with fma, equal the emulation's multiply-accumulate",
          "[contract]") {
  // A CUDA flush stages flush_operand_a / flush_operand_b once per entry and folds them with fmaf; the emulation adds
  // rounded products (arith_mac). Equal bit for bit under tf32, 3xtf32 and bf16, because the staged products are exact.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-20, 20);
  const auto fold = [](Arith m, float acc, float a, float b) {
    for (int r = 0; r < flush_terms(m); ++r) acc = std::fma(flush_operand_a(m, a, r), flush_operand_b(m, b, r), acc);
    return acc;
  };
  for (Arith m : {Arith::TF32, Arith::TF32x3, Arith::BF16}) {
    long long differ = 0, rounded = 0;
    for (int i = 0; i < 20000; ++i) {
      const float a = std::ldexp(normal(rng), expo(rng)), b = std::ldexp(normal(rng), expo(rng));
      const float acc = std::ldexp(normal(rng), expo(rng));
      differ += fold(m, acc, a, b) != arith_mac(m, acc, a, b);
      rounded += flush_operand_a(m, a, 0) != a;
    }
    INFO(arith_name(m));
    CHECK(differ == 0);
    CHECK(rounded > 10000);  // not vacuous: the operands were rounded
  }
  // 3xtf32 is the split hi·hi + hi·lo + lo·hi, in that order.
  const float a = 1.0f + 0x1p-15f, b = 3.0f + 0x1p-14f;
  const float ah = round_tf32(a), bh = round_tf32(b);
  CHECK(flush_operand_a(Arith::TF32x3, a, 0) == ah);
  CHECK(flush_operand_a(Arith::TF32x3, a, 1) == ah);
  CHECK(flush_operand_a(Arith::TF32x3, a, 2) == a - ah);
  CHECK(flush_operand_b(Arith::TF32x3, b, 0) == bh);
  CHECK(flush_operand_b(Arith::TF32x3, b, 1) == b - bh);
  CHECK(flush_operand_b(Arith::TF32x3, b, 2) == bh);
  // The check can fail: in fp32 the products are not exact, and an fma fold differs from a rounded product added
  // (volatile: the compiler must not contract it into an fma itself).
  long long fp32_differ = 0;
  for (int i = 0; i < 20000; ++i) {
    const float x = normal(rng), y = normal(rng), acc = normal(rng);
    volatile float prod = x * y;
    fp32_differ += fold(Arith::FP32, acc, x, y) != acc + prod;
  }
  CHECK(fp32_differ > 0);
}

TEST_CASE("contract: an eager state's stochastic rounding draws at the tokens decoded before the step", "[contract]") {
  // An fp32 and a bf16-stochastic eager decoder from the same zero state: the first step computes the same fp32
  // values in both, and the bf16 state must hold round_stochastic(bf16, value, bits(seed, EagerState, step 0,
  // element)): the eager key is the step counter before the step (a CUDA eager kernel takes it from d_pos).
  for (Family f : {Family::Mamba2, Family::GDN}) {
    INFO(family_name(f));
    const int seqs = 2;
    SynthSource src(test::tiny_layer(f, 1, seqs, 6));
    EagerDecoder d32(Format::FP32), dsr(Format::BF16, Rounding::Stochastic, kSeed);
    InputChunk chunk;
    src.read(0, 1, chunk);
    std::vector<double> y(static_cast<size_t>(seqs) * src.model().out_elems());
    for (EagerDecoder* d : {&d32, &dsr}) {
      d->reset(src.model(), seqs);
      d->advance(chunk, 0, 1, y.data());
    }
    const StateCopy s32 = d32.state().at(0), ssr = dsr.state().at(0);
    REQUIRE(s32.size == ssr.size);
    long long mismatched = 0, wrong_step = 0, inexact = 0;
    for (size_t i = 0; i < s32.size; ++i) {
      const float x = static_cast<float>(s32.data[i]);
      const auto e = static_cast<long long>(i);
      mismatched += round_stochastic(Format::BF16, x, state_random_bits(kSeed, RandomStream::EagerState, 0, e)) !=
                    static_cast<float>(ssr.data[i]);
      wrong_step += round_stochastic(Format::BF16, x, state_random_bits(kSeed, RandomStream::EagerState, 1, e)) !=
                    static_cast<float>(ssr.data[i]);
      inexact += round_nearest(Format::BF16, x) != x;
    }
    CHECK(mismatched == 0);
    CHECK(inexact > static_cast<long long>(s32.size) / 2);  // not vacuous
    CHECK(wrong_step > 0);                                  // step 1 (tokens held) would be another key
  }
}
