// The ring cursor's hand-off between launches, shared by the replay kernels (mamba2_replay.cu's header comment gives
// the protocol): every CTA of a row reads d_fill[slot] and counts itself on d_arrive[slot]; the last to arrive
// advances the cursor. Device code only.
#pragma once

#include <cstdint>

namespace rssm {

// The cursor's read: ordered before the CTA's arrival count (an acquire), so the last arriver writes after every read.
__device__ inline int ld_acquire(const int32_t* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Called by the last arriver of a row only: re-zeroes the row's arrival count and writes the fill the next launch
// reads, entry j + 1, or 0 when this step flushed (j + 1 = interval). The fence orders the CTA's earlier writes
// before the cursor that lets the next launch read them. Launch: a replay launch struct (d_arrive, d_fill, interval),
// taken whole so that the kernels compile to the PTX they had with this written out in each.
template <class Launch>
__device__ inline void ring_cursor_advance(const Launch& l, int slot, int j) {
  __threadfence();
  l.d_arrive[slot] = 0;
  l.d_fill[slot] = j + 1 >= l.interval ? 0 : j + 1;
}

}  // namespace rssm
