// The random bits of stochastic rounding, shared by the CPU emulation and the CUDA kernels (docs/fp_contract.md).
// A stored state value draws 32 bits from Philox4x32-10 keyed by the run's seed, with the counter
//   (block = element / 4 as two words, step, stream):  element i uses word i % 4 of its block,
// where `element` is the value's index in the copy's whole array [seqs (or slots), state_elems] and `step` is the
// number of tokens folded into the copy when it is stored (an eager state: the tokens decoded before the step that
// stores it, the eager decoder's counter). The same (seed, stream, step, element) gives the same
// bits in every implementation and in any order, so a kernel and the emulation round a given fp32 value to the same
// stored value, bit for bit.
// Not here: how the bits are used (numeric/format.h round_stochastic, numeric/bits.h *_sr).
#pragma once

#include <cstdint>

#include "numeric/hd.h"
#include "numeric/philox.h"

namespace rssm {

// Which stored copy draws: distinct streams so that two copies stored at the same step never share bits.
enum class RandomStream : uint32_t {
  CheckpointUpdate = 0,  // a replay checkpoint (shared, or the update copy of a dual pair)
  CheckpointRead = 1,    // the read copy of a dual pair
  EagerState = 2,        // the state of an eager decoder, stored every step
};

// The four words of block `block`: elements 4·block .. 4·block + 3 (a kernel storing a vector of 4 or 8 elements
// draws one block per 4 instead of one per element).
RSSM_HD inline PhiloxBlock state_random_block(uint64_t seed, RandomStream stream, long long step, uint64_t block) {
  return philox4x32_10(PhiloxBlock{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                                    static_cast<uint32_t>(step), static_cast<uint32_t>(stream)}},
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

RSSM_HD inline uint32_t state_random_bits(uint64_t seed, RandomStream stream, long long step, long long element) {
  return state_random_block(seed, stream, step, static_cast<uint64_t>(element) >> 2).v[element & 3];
}

}  // namespace rssm
