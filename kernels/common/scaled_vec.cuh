// Block-scaled 8-bit read copies (e4m3, e5m2, int8 codes with one fp32 scale per state row: numeric/scaled.h) as
// the replay kernels store them at a flush and stream them in between. Device code only, for kernels/*/*.cu.
// Stores go through numeric/scaled.h's block_scale_from_amax and numeric/bits.h's encoders, the functions the CPU
// emulation calls on the same fp32 row (lib/cpu/checkpoint.cpp), so a kernel stores the emulation's codes and scales
// byte for byte. Loads decode the codes exactly (every code is a float) and leave the row's scale out: a kernel
// multiplies the row's dot by it once instead of every element (bounded half of docs/fp_contract.md).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "common/state_vec.cuh"
#include "numeric/bits.h"
#include "numeric/scaled.h"

namespace rssm {

// One code of a block-scaled copy in format F: a 1-byte type per format, so that a kernel's template dispatch sees
// the format at compile time. Its vectors are 8 codes (8-byte loads): the lane layout and register footprint of a
// bf16 copy's 8-element vectors, half the bytes. 16-code vectors held 16 decoded values and 16 of each of the step's
// vectors (C_t; k_t, q_t, bf16(k_t)) per thread: ptxas spilled 324 bytes in GDN's 7-CTA kernel, where bf16 spills
// 24-60.
template <Format F>
struct Scaled8 {
  static_assert(F == Format::E4M3 || F == Format::E5M2 || F == Format::INT8, "formats with block scales");
  static constexpr Format kFormat = F;
  uint8_t code;
};

template <class T>
struct IsScaled8 : std::false_type {};
template <Format F>
struct IsScaled8<Scaled8<F>> : std::true_type {};
template <class T>
constexpr bool kIsScaled8 = IsScaled8<T>::value;

template <Format F>
constexpr float kScaledMax = F == Format::E4M3 ? kE4M3Max : F == Format::E5M2 ? kE5M2Max : kInt8Max;

template <Format F>
struct StateVec<Scaled8<F>> {
  static constexpr int kVec = 8;
  // The codes' values without the row's scale. e4m3 and e5m2 widen to fp16 in hardware (exact, NaN and inf kept);
  // int8's -128 is the NaN code (numeric/bits.h int8_to_float).
  __device__ static void load(const Scaled8<F>* p, float v[kVec]) { unpack(ldcs_vec(p), v); }
  // q: the raw vector as ldcs_vec returns it (codes in .x, .y).
  __device__ static void unpack(const uint4 q, float v[kVec]) {
    const uint32_t w[2] = {q.x, q.y};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if constexpr (F == Format::INT8) {
#pragma unroll
        for (int b = 0; b < 4; ++b) v[4 * i + b] = int8_to_float(static_cast<int8_t>(w[i] >> (8 * b)));
      } else {
        constexpr __nv_fp8_interpretation_t kInterp = F == Format::E4M3 ? __NV_E4M3 : __NV_E5M2;
#pragma unroll
        for (int hw = 0; hw < 2; ++hw) {
          const auto pair = static_cast<__nv_fp8x2_storage_t>(w[i] >> (16 * hw));
          const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, kInterp);
          const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
          v[4 * i + 2 * hw] = f.x;
          v[4 * i + 2 * hw + 1] = f.y;
        }
      }
    }
  }
};

// The largest finite magnitude over the `width` consecutive lanes of a state row (width a power of two <= 32), every
// lane getting it. Every lane of the warp must call it (full-mask shuffles).
__device__ inline float row_max(float v, int width) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < width) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

// The scale (numeric/scaled.h) of a row of which this lane holds v[0 .. kW), the stored fp32 values, over `width`
// lanes.
template <Format F, int kW>
__device__ inline float row_block_scale(const float (&v)[kW], int width) {
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < kW; ++k) {
    const float a = fabsf(v[k]);
    if (a <= FLT_MAX) amax = fmaxf(amax, a);  // finite values only: NaN and inf are encoded as themselves
  }
  return block_scale_from_amax(row_max(amax, width), kScaledMax<F>);
}

// Code of x / scale: the quotient in fp32 (IEEE division: the build never uses fast-math), rounded nearest-even or
// stochastically with r.
template <Format F, bool kSR>
__device__ inline uint32_t scaled_code(float x, float scale, uint32_t r) {
  const float q = x / scale;
  if constexpr (F == Format::E4M3) return kSR ? float_to_e4m3_bits_sr(q, r) : float_to_e4m3_bits(q);
  if constexpr (F == Format::E5M2) return kSR ? float_to_e5m2_bits_sr(q, r) : float_to_e5m2_bits(q);
  if constexpr (F == Format::INT8)
    return static_cast<uint8_t>(kSR ? float_to_int8_sr(q, r) : float_to_int8(q));
  return 0;
}

// Four consecutive values of a row stored as codes at p (4-byte aligned): one 4-byte store. r: the elements' random
// words (kSR only).
template <Format F, bool kSR>
__device__ inline void store_scaled4(Scaled8<F>* p, const float v[4], float scale, const uint32_t* r) {
  uint32_t w = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) w |= scaled_code<F, kSR>(v[i], scale, kSR ? r[i] : 0u) << (8 * i);
  __stcs(reinterpret_cast<unsigned int*>(p), w);
}

}  // namespace rssm
