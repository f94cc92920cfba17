// Philox4x32-10: a counter-based random number generator (Salmon, Moraes, Dror, Shaw, "Parallel random numbers:
// as easy as 1, 2, 3", SC 2011), written from the published description. Every output is a pure function of a
// 128-bit counter and a 64-bit key, so any value can be produced in any order, on any thread or device, without
// state: the synthetic trace generator keys it by (seed, stream, step, sequence, channel) and stochastic rounding
// will key it by (seed, step, position), so a CPU emulation and a GPU kernel draw the same bits.
// Not here: what the bits are used for (trace/synth.h, numeric/format.h's round_stochastic).
// Header-only, no global state, usable from CUDA (functions carry RSSM_HD). Tested against the published
// known-answer vectors in tests/test_synth.cpp.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "numeric/hd.h"

namespace rssm {

// Plain four-word block: device code can use it without relying on std::array being device-callable.
struct PhiloxBlock {
  uint32_t v[4];
};

// The ten-round bijection on one 128-bit block. Constants are the ones fixed by the paper: two multipliers chosen
// for avalanche, and the Weyl increments (golden ratio and sqrt(3) - 1) that give each round a distinct key.
RSSM_HD constexpr PhiloxBlock philox4x32_10(PhiloxBlock c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    // 32x32 -> 64-bit products; the compiler turns these into one widening multiply (mul.hi on the GPU).
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c.v[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c.v[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = PhiloxBlock{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
  }
  return c;
}

// The std::array form, host only; device code calls philox4x32_10 directly (std::array is only device-callable with
// nvcc's --expt-relaxed-constexpr).
struct Philox4x32 {
  static constexpr std::array<uint32_t, 4> generate(std::array<uint32_t, 4> counter,
                                                            std::array<uint32_t, 2> key) {
    const PhiloxBlock r = philox4x32_10(PhiloxBlock{{counter[0], counter[1], counter[2], counter[3]}}, key[0], key[1]);
    return {r.v[0], r.v[1], r.v[2], r.v[3]};
  }
};

// Uniform float in the open interval (0, 1): the top 23 bits, offset by half a step, so the result is never 0
// (safe under log) nor 1. (24 bits plus the half step would need 25 significant bits: the top value would round
// to 1.0f.)
RSSM_HD constexpr float uniform01(uint32_t x) { return (static_cast<float>(x >> 9) + 0.5f) * (1.0f / 8388608.0f); }

// Uniform double in (0, 1) from all 32 bits, for draws whose tails matter (Box-Muller, log-uniform parameters).
RSSM_HD constexpr double uniform01_double(uint32_t x) { return (static_cast<double>(x) + 0.5) * (1.0 / 4294967296.0); }

struct NormalPair {
  double n0, n1;
};

// Two independent standard normals from two 32-bit words (Box-Muller, in double). Because u0 > 2^-33 the
// largest magnitude is sqrt(2·33·ln 2) ≈ 6.8: tails beyond 6.8 sigma are cut, which no statistic here notices.
RSSM_HD inline NormalPair box_muller(uint32_t a, uint32_t b) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  const double r = std::sqrt(-2.0 * std::log(uniform01_double(a)));
  const double theta = kTwoPi * uniform01_double(b);
  return {r * std::cos(theta), r * std::sin(theta)};
}

// Four normals from one Philox block: the common case for generators that fill channels four at a time.
RSSM_HD inline void normals4(const PhiloxBlock& bits, double out[4]) {
  const NormalPair p = box_muller(bits.v[0], bits.v[1]);
  const NormalPair q = box_muller(bits.v[2], bits.v[3]);
  out[0] = p.n0;
  out[1] = p.n1;
  out[2] = q.n0;
  out[3] = q.n1;
}

}  // namespace rssm
