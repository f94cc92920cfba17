// The flush's fold on tensor cores, shared by both families: S_c <- decay·S_c + Σ_e w_e·x_e[row]·key_e[col] is a
// rank-(entries) update of a head's [rows, 128] tile. It runs as mma.m16n8k16 (bf16 operands, fp32 accumulators) on
// the transposed tile, D[m = state column][n = state row] += A[m][e]·B[e][n]: A = the keys (k_e for GDN, B_e for
// Mamba-2; bf16 in the ring, so exact), B = the fp32 weight·x products split into three bf16 pieces hi + mid + lo,
// which hold all 24 bits, so every product is exact and only the tensor core's fp32 sums differ from an FFMA fold:
// the tile-order freedom of docs/fp_contract.md's bounded half.
//
// Layout. Thread (g = lane / 4, tig = lane % 4) of a warp holds an 8-row block's rows 2·tig and 2·tig + 1, 16
// columns each: local column idx (0..15) is state column mma_col(kVec, g, idx), so a row's columns are 16 / kVec whole
// 16-byte vectors of the state format and a warp's load of one vector index covers 4 rows x 128 contiguous bytes.
// Local columns 2·T and 2·T + 1 are the mma rows g and g + 8 of m-tile T (8 m-tiles: 128 columns).
// Operands in shared memory: A as 16-byte fragments [k-step][m-tile][lane], B as 8-byte words
// [8-row block][k-step][piece][mma_b_slot], k-steps of 16 entries.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/state_vec.cuh"

namespace rssm {

constexpr int kMmaCols = 128;  // state columns a warp's 8 m-tiles cover

__host__ __device__ inline int mma_col(int kv, int g, int idx) { return kv * g + 8 * kv * (idx / kv) + idx % kv; }

// Floats of shared memory the two operands take: A, then B for `rows` state rows; ks k-steps.
__host__ __device__ inline int mma_a_floats(int ks) { return ks * 1024; }
__host__ __device__ inline int mma_b_floats(int ks, int rows) { return (rows + 7) / 8 * ks * 192; }

// The B operand's 8-byte word of lane (g, tig) of 8-row block nb, in its group of 32 [block][k-step][piece]: the
// lane's tig is XOR-swizzled by (g / 4, nb % 2) so that the 16 rows of a half-warp staging one (k-step, piece, tig)
// store to 16 different bank pairs (unswizzled they hit 4); the reading warp still covers all 32 words.
__device__ inline int mma_b_slot(int nb, int g, int tig) { return 4 * g + (tig ^ (((g >> 2) & 1) + 2 * (nb & 1))); }

// w as hi + mid + lo, each a bf16 value (the differences are exact in fp32): the bits of each piece.
__device__ inline void split_bf16x3(float w, uint16_t (&b)[3]) {
  const float hi = __bfloat162float(__float2bfloat16_rn(w)), r = w - hi;
  const float mid = __bfloat162float(__float2bfloat16_rn(r)), lo = __bfloat162float(__float2bfloat16_rn(r - mid));
  b[0] = static_cast<uint16_t>(__float_as_uint(hi) >> 16);
  b[1] = static_cast<uint16_t>(__float_as_uint(mid) >> 16);
  b[2] = static_cast<uint16_t>(__float_as_uint(lo) >> 16);
}

// One row's staging of B: the 4 weight·x values of entries 16·k + 2·tig + {0, 1, 8, 9} (v[0..3] in that order),
// split and stored as the three pieces' words of (block nb = row / 8, g = row % 8, tig).
__device__ inline void mma_stage_b(uint2* Bw, int ks, int k, int row, int tig, const float (&v)[4]) {
  uint32_t pw[3][2];
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    uint16_t pc[3];
    split_bf16x3(v[b], pc);
#pragma unroll
    for (int p = 0; p < 3; ++p) {
      if (b & 1)
        pw[p][b >> 1] |= static_cast<uint32_t>(pc[p]) << 16;
      else
        pw[p][b >> 1] = pc[p];
    }
  }
  const int nb = row >> 3;
#pragma unroll
  for (int p = 0; p < 3; ++p) Bw[((nb * ks + k) * 3 + p) * 32 + mma_b_slot(nb, row & 7, tig)] = make_uint2(pw[p][0], pw[p][1]);
}

// The entry indices of fragment f of A and of B's words: entry 16·k + 2·tig + {0, 1, 8, 9}.
__device__ inline int mma_entry(int k, int tig, int b) { return 16 * k + (b >> 1) * 8 + 2 * tig + (b & 1); }

__device__ inline void mma_bf16_16816(float (&c)[4], const uint4& a, uint2 b) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b.x), "r"(b.y));
}

// Folds the staged k-steps into the accumulators of one 8-row block (acc[r][idx]: row 2·tig + r, local column idx),
// the small pieces first. A: this lane's fragments (+ (k·8 + T)·32); Bk: this lane's word of block nb, k-step 0.
// kPart of kParts: only m-tiles kPart·8 / kParts .., acc holding their local columns (a fold by parts holds fewer
// accumulators; the sums of each element are the same).
template <int kPart = 0, int kParts = 1>
__device__ inline void mma_fold_block(float (&acc)[2][16 / kParts], const uint4* A, const uint2* B, int nb, int ks,
                                      int g, int tig) {
  constexpr int kM = 8 / kParts, kM0 = kPart * kM;
  for (int k = 0; k < ks; ++k) {
    const uint2* Bk = B + ((nb * ks + k) * 3) * 32 + mma_b_slot(nb, g, tig);
    const uint2 b0 = Bk[0], b1 = Bk[32], b2 = Bk[64];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      const uint4 a = A[(k * 8 + kM0 + m) * 32];
      float c[4] = {acc[0][2 * m], acc[1][2 * m], acc[0][2 * m + 1], acc[1][2 * m + 1]};
      mma_bf16_16816(c, a, b2);
      mma_bf16_16816(c, a, b1);
      mma_bf16_16816(c, a, b0);
      acc[0][2 * m] = c[0], acc[1][2 * m] = c[1], acc[0][2 * m + 1] = c[2], acc[1][2 * m + 1] = c[3];
    }
  }
}

// This lane's two rows of 8-row block (first row il0 = 8·nb + 2·tig) of a [rows, 128] tile, streaming loads, into
// acc; the tile's row 0, column 0 is base + off0. Rows at or past `rows` read as zeros (computed, never stored).
// kPart of kParts: only that part's local columns (mma_fold_block's). The addresses are formed per row from base and
// off0 as the callers did inline: a precomputed tile pointer held across the block loop cost the GDN replay kernel
// spills at its register cap.
template <class T, int kPart = 0, int kParts = 1>
__device__ inline void mma_load_block(float (&acc)[2][16 / kParts], const T* base, long long off0, int il0, int rows,
                                      int g) {
  constexpr int kV = StateVec<T>::kVec, kQ = 16 / kV / kParts;
  static_assert(kQ >= 1, "a part holds whole 16-byte vectors");
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const bool live = il0 + r < rows;
    const T* p = base + off0 + static_cast<long long>(il0 + r) * kMmaCols + kV * g;
#pragma unroll
    for (int q = 0; q < kQ; ++q)
      StateVec<T>::unpack(
          live ? __ldcs(reinterpret_cast<const uint4*>(p + 8 * kV * (kPart * kQ + q))) : make_uint4(0, 0, 0, 0),
          &acc[r][q * kV]);
  }
}

// Stores the lane's live rows of the block back (base + off0 as mma_load_block; acc then holds the stored values)
// and, where R is not void, rounded into the dual read copy at rd + off0 (same layout; acc keeps the update copy's
// values). kPart of kParts as mma_load_block.
template <class T, class R, int kPart = 0, int kParts = 1>
__device__ inline void mma_store_block(float (&acc)[2][16 / kParts], T* base, R* rd, long long off0, int il0,
                                       int rows, int g) {
  constexpr int kV = StateVec<T>::kVec, kQ = 16 / kV / kParts;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (il0 + r >= rows) continue;
    const long long off = off0 + static_cast<long long>(il0 + r) * kMmaCols + kV * g;
#pragma unroll
    for (int q = 0; q < kQ; ++q) {
      const int v = 8 * kV * (kPart * kQ + q);
      StateVec<T>::store(base + off + v, &acc[r][q * kV]);
      if constexpr (!std::is_void<R>::value) {
        static_assert(kV == 4, "dual read copies are written from an fp32 update copy");
        store_narrow4(rd + off + v, &acc[r][q * kV]);
      }
    }
  }
}

// The dots of the lane's two rows (acc: part kPart of kParts, as mma_load_block) with two fp32 vectors kvec and qvec
// of 128 state columns (shared memory, 16-byte aligned), each summed over the row's 8 lanes (partners 4, 8, 16):
// every lane gets d = {kvec·row 0, kvec·row 1, qvec·row 0, qvec·row 1} (of the part's columns).
template <int kV, int kPart = 0, int kParts = 1>
__device__ inline void mma_row_dots(const float (&acc)[2][16 / kParts], const float* kvec, const float* qvec, int g,
                                    float (&d)[4]) {
  constexpr int kQ = 16 / kV / kParts;
#pragma unroll
  for (int n = 0; n < 4; ++n) d[n] = 0.0f;
#pragma unroll
  for (int q = 0; q < kQ; ++q) {
    const int col = mma_col(kV, g, (kPart * kQ + q) * kV);
#pragma unroll
    for (int e4 = 0; e4 < kV; e4 += 4) {
      const float4 kf = *reinterpret_cast<const float4*>(kvec + col + e4);
      const float4 qf = *reinterpret_cast<const float4*>(qvec + col + e4);
      const float kv[4] = {kf.x, kf.y, kf.z, kf.w}, qv[4] = {qf.x, qf.y, qf.z, qf.w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          d[r] = fmaf(acc[r][q * kV + e4 + e], kv[e], d[r]);
          d[2 + r] = fmaf(acc[r][q * kV + e4 + e], qv[e], d[2 + r]);
        }
    }
  }
#pragma unroll
  for (int o = 4; o < 32; o <<= 1)
#pragma unroll
    for (int n = 0; n < 4; ++n) d[n] += __shfl_xor_sync(0xFFFFFFFFu, d[n], o);
}

// A's fragment f (k-step f / 256, m-tile f / 32 % 8, lane f % 32) from key(e, col) (the key's bf16 bits; 0 where
// the entry is not folded), as the 4 words the fragment holds.
template <class KeyBits>
__device__ inline uint4 mma_a_fragment(int f, int kv, KeyBits key) {
  const int fl = f & 31, T = (f >> 5) & 7, k = f >> 8;
  uint32_t w[4];
#pragma unroll
  for (int half = 0; half < 2; ++half)
#pragma unroll
    for (int hc = 0; hc < 2; ++hc) {
      const int col = mma_col(kv, fl >> 2, 2 * T + hc), e = mma_entry(k, fl & 3, 2 * half);
      w[2 * half + hc] = static_cast<uint32_t>(key(e, col)) | static_cast<uint32_t>(key(e + 1, col)) << 16;
    }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

}  // namespace rssm
