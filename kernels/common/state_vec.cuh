// A 16-byte vector of state elements as both families' kernels load and store it: kVec elements of T (fp32: 4;
// bf16, fp16: 8) in one uint4, converted to fp32 for arithmetic. Device code only, for kernels/*/*.cu.
// Nearest stores round to nearest even with the hardware conversion (cvt.rn.bf16x2.f32 / cvt.rn.f16x2.f32), which
// equals numeric/bits.h's round_bf16 / round_fp16 on every finite value and infinity (the GPU tests check stored bits
// against float_to_bf16_bits); only a NaN's payload may differ (hardware gives 0x7FFF, the contract 0x7FC0).
// Stochastic stores (store_sr) go through numeric/bits.h's round_*_sr with the words of numeric/stochastic.h, the
// functions the CPU emulation calls, so a given fp32 value, seed, stream, step and element store the same bytes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "numeric/bits.h"
#include "numeric/format.h"
#include "numeric/stochastic.h"

namespace rssm {

// The stochastic-rounding key of one stored copy (docs/fp_contract.md): the run's seed, the copy's stream and the
// step the copy is stored at; the element index is the value's place in the copy's whole array [slots, state_elems].
struct SrKey {
  uint64_t seed = 0;
  RandomStream stream = RandomStream::CheckpointUpdate;
  long long step = 0;
};

// The random words of elements element .. element + kW − 1 (element a multiple of 4; kW 4 or 8): one Philox block
// per 4 elements.
template <int kW>
__device__ inline void random_words(const SrKey& k, long long element, uint32_t (&r)[kW]) {
  static_assert(kW % 4 == 0, "whole Philox blocks");
#pragma unroll
  for (int b = 0; b < kW / 4; ++b) {
    const PhiloxBlock p = state_random_block(k.seed, k.stream, k.step, (static_cast<uint64_t>(element) >> 2) + b);
#pragma unroll
    for (int i = 0; i < 4; ++i) r[4 * b + i] = p.v[i];
  }
}

template <class T>
struct StateVec;

template <>
struct StateVec<float> {
  static constexpr int kVec = 4;
  __device__ static void unpack(const uint4 q, float v[kVec]) {
    v[0] = __uint_as_float(q.x), v[1] = __uint_as_float(q.y), v[2] = __uint_as_float(q.z), v[3] = __uint_as_float(q.w);
  }
  __device__ static void load(const float* p, float v[kVec]) {
    unpack(__ldcs(reinterpret_cast<const uint4*>(p)), v);  // streamed once: evict first
  }
  // Stores v, which already is the stored value (fp32: no rounding, so no stochastic variant either).
  __device__ static void store(float* p, float v[kVec]) {
    __stcs(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
  }
  __device__ static void store_sr(float* p, float v[kVec], const uint32_t*) { store(p, v); }
};

template <>
struct StateVec<__nv_bfloat16> {
  static constexpr int kVec = 8;
  __device__ static void load(const __nv_bfloat16* p, float v[kVec]) { unpack(__ldcs(reinterpret_cast<const uint4*>(p)), v); }
  __device__ static void unpack(const uint4 q, float v[kVec]) {
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(w[i] << 16);
      v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
  }
  // Rounds v to bf16, stores it, and leaves the rounded values in v (the value every later use must see).
  __device__ static void store(__nv_bfloat16* p, float v[kVec]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __nv_bfloat162 b = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
      w[i] = *reinterpret_cast<const uint32_t*>(&b);
      v[2 * i] = __uint_as_float(w[i] << 16);
      v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
    __stcs(reinterpret_cast<uint4*>(p), make_uint4(w[0], w[1], w[2], w[3]));
  }
  // The same with stochastic rounding, element i drawing r[i].
  __device__ static void store_sr(__nv_bfloat16* p, float v[kVec], const uint32_t r[kVec]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = round_bf16_sr(v[2 * i], r[2 * i]);
      v[2 * i + 1] = round_bf16_sr(v[2 * i + 1], r[2 * i + 1]);
      w[i] = (__float_as_uint(v[2 * i]) >> 16) | (__float_as_uint(v[2 * i + 1]) & 0xFFFF0000u);
    }
    __stcs(reinterpret_cast<uint4*>(p), make_uint4(w[0], w[1], w[2], w[3]));
  }
};

template <>
struct StateVec<__half> {
  static constexpr int kVec = 8;
  __device__ static void load(const __half* p, float v[kVec]) { unpack(__ldcs(reinterpret_cast<const uint4*>(p)), v); }
  __device__ static void unpack(const uint4 q, float v[kVec]) {
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  }
  __device__ static void store(__half* p, float v[kVec]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __half2 h = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
      w[i] = *reinterpret_cast<const uint32_t*>(&h);
      const float2 f = __half22float2(h);
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
    __stcs(reinterpret_cast<uint4*>(p), make_uint4(w[0], w[1], w[2], w[3]));
  }
  __device__ static void store_sr(__half* p, float v[kVec], const uint32_t r[kVec]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = round_fp16_sr(v[2 * i], r[2 * i]);
      v[2 * i + 1] = round_fp16_sr(v[2 * i + 1], r[2 * i + 1]);
      w[i] = static_cast<uint32_t>(fp16_encode_value(v[2 * i])) |
             (static_cast<uint32_t>(fp16_encode_value(v[2 * i + 1])) << 16);
    }
    __stcs(reinterpret_cast<uint4*>(p), make_uint4(w[0], w[1], w[2], w[3]));
  }
};

// The raw vector of StateVec<T>::kVec elements at p as the streams hold it, a streaming load (evict first): 16 bytes
// for fp32, bf16, fp16 (one uint4), 8 for the codes of a block-scaled copy (common/scaled_vec.cuh; in .x, .y).
template <class T>
__device__ inline uint4 ldcs_vec(const T* p) {
  if constexpr (StateVec<T>::kVec * sizeof(T) == 8) {
    const uint2 v = __ldcs(reinterpret_cast<const uint2*>(p));
    return make_uint4(v.x, v.y, 0u, 0u);
  } else {
    return __ldcs(reinterpret_cast<const uint4*>(p));
  }
}

// Four fp32 values rounded to T (bf16 or fp16) and stored as one 8-byte vector: the dual read copy, written from
// the fp32 update copy's registers (whose vector is 4 wide). v is left as it is (it holds the update copy).
template <class T>
__device__ inline void store_narrow4(T* p, const float v[4]) {
  uint32_t w[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value) {
      const __nv_bfloat162 b = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
      w[i] = *reinterpret_cast<const uint32_t*>(&b);
    } else {
      const __half2 h = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
      w[i] = *reinterpret_cast<const uint32_t*>(&h);
    }
  }
  __stcs(reinterpret_cast<uint2*>(p), make_uint2(w[0], w[1]));
}
template <class T>
__device__ inline void store_narrow4_sr(T* p, const float v[4], const uint32_t r[4]) {
  uint32_t c[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value)
      c[i] = float_to_bf16_bits_sr(v[i], r[i]);
    else
      c[i] = float_to_fp16_bits_sr(v[i], r[i]);
  }
  __stcs(reinterpret_cast<uint2*>(p), make_uint2(c[0] | (c[1] << 16), c[2] | (c[3] << 16)));
}

// The element types of a replay checkpoint, as every launcher dispatches on them: f(TypeTag<CK>{}, TypeTag<RD>{})
// with CK the checkpoint's type (a dual checkpoint's fp32 update copy) and RD its read copy's, void when shared.
// The caller checked the formats (shared: fp32, bf16 or fp16; dual: an fp32 update copy read as bf16 or fp16).
template <class T>
struct TypeTag {
  using type = T;
};
template <class F>
void with_checkpoint_types(bool dual, Format ckpt_format, Format read_format, F&& f) {
  if (dual) {
    if (read_format == Format::BF16)
      f(TypeTag<float>{}, TypeTag<__nv_bfloat16>{});
    else
      f(TypeTag<float>{}, TypeTag<__half>{});
    return;
  }
  switch (ckpt_format) {
    case Format::FP32: f(TypeTag<float>{}, TypeTag<void>{}); break;
    case Format::BF16: f(TypeTag<__nv_bfloat16>{}, TypeTag<void>{}); break;
    default: f(TypeTag<__half>{}, TypeTag<void>{}); break;
  }
}

}  // namespace rssm
