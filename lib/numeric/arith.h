// Arithmetic of the dots and of the flush GEMM, chosen at run time and emulated exactly on the CPU.
//   fp64    operands and accumulation in double
//   fp32    fp32 operands, fp32 products and accumulation
//   tf32    operands rounded to tf32 (nearest-even), products exact in fp32 (11 x 11 bits), fp32 accumulation
//   3xtf32  each operand split hi = tf32(x), lo = tf32(x - hi); acc += hi·hi, then hi·lo, then lo·hi (fp32)
//   bf16    operands rounded to bf16, products exact in fp32, fp32 accumulation
// Accumulation order is fixed so a kernel can match it bit for bit: a dot of n terms keeps kLanes partial sums,
// term i going to lane i % kLanes in increasing i, and adds the lanes in lane order at the end (the shape of a
// vectorised CPU loop and of a per-thread partial sum in a warp). The flush GEMM accumulates its rank-K update
// sequentially over j onto an accumulator initialised with the decayed checkpoint (tensor-core D = A·B + C).
#pragma once

#include <string>

#include "numeric/bits.h"
#include "numeric/format.h"

namespace rssm {

enum class Arith { FP64, FP32, TF32, TF32x3, BF16 };

std::string arith_name(Arith a);            // "fp64", "fp32", "tf32", "3xtf32", "bf16"
Arith parse_arith(const std::string& name);  // throws ConfigError listing the accepted names

constexpr int kLanes = 8;

// Rounding of one operand to the arithmetic's operand format (identity for fp64/fp32; hi part for 3xtf32).
inline float arith_operand(Arith a, float x) {
  switch (a) {
    case Arith::TF32:
    case Arith::TF32x3: return round_tf32(x);
    case Arith::BF16: return round_bf16(x);
    default: return x;
  }
}

// One multiply-accumulate step acc += a·b in the arithmetic (not for fp64: see dot()).
inline float arith_mac(Arith m, float acc, float a, float b) {
  switch (m) {
    case Arith::FP32: return acc + a * b;
    case Arith::TF32: return acc + round_tf32(a) * round_tf32(b);
    case Arith::BF16: return acc + round_bf16(a) * round_bf16(b);
    case Arith::TF32x3: {
      const float ah = round_tf32(a), bh = round_tf32(b);
      const float al = round_tf32(a - ah), bl = round_tf32(b - bh);
      acc += ah * bh;
      acc += ah * bl;
      return acc + al * bh;
    }
    default: return acc + a * b;
  }
}

// Dot product of a[0..n) and b[0..n) in arithmetic m, lane order as above. A and B may be float or double; in
// the fp32-based modes the operands are first converted to float (round to nearest), as a kernel loading an fp32
// array would hold them.
template <class TA, class TB>
double dot(Arith m, const TA* a, const TB* b, int n) {
  if (m == Arith::FP64) {
    double lanes[kLanes] = {0};
    for (int i = 0; i < n; ++i) lanes[i % kLanes] += static_cast<double>(a[i]) * static_cast<double>(b[i]);
    double s = 0;
    for (double l : lanes) s += l;
    return s;
  }
  float lanes[kLanes] = {0};
  if (m == Arith::FP32) {
    int i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int l = 0; l < kLanes; ++l) lanes[l] += static_cast<float>(a[i + l]) * static_cast<float>(b[i + l]);
    for (; i < n; ++i) lanes[i % kLanes] += static_cast<float>(a[i]) * static_cast<float>(b[i]);
  } else {
    for (int i = 0; i < n; ++i)
      lanes[i % kLanes] = arith_mac(m, lanes[i % kLanes], static_cast<float>(a[i]), static_cast<float>(b[i]));
  }
  float s = 0;
  for (float l : lanes) s += l;
  return s;
}

// Rounding into a storage format, inline for inner loops (round_nearest in format.h is the reference entry point;
// this calls the same bit-level functions). FP64 and FP32 return x; INT8 is not a plain storage format here.
inline float round_store(Format f, float x) {
  switch (f) {
    case Format::BF16: return round_bf16(x);
    case Format::FP16: return round_fp16(x);
    case Format::TF32: return round_tf32(x);
    case Format::E4M3: return round_e4m3(x);
    case Format::E5M2: return round_e5m2(x);
    default: return x;
  }
}

}  // namespace rssm
