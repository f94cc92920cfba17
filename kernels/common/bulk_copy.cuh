// Hopper bulk copies (cp.async.bulk, the TMA unit's one-dimensional form) from global into shared memory, completed
// on a shared-memory mbarrier. Why: a replay step's state tile must be in flight while the CTA walks its chain of
// small dependent reads (slot -> cursor -> ring). Held in registers it caps the CTAs per SM; prefetched into L2 it is
// a hint that gives no completion and competes with the stream. A bulk copy holds no registers, lands in shared
// memory, and is issued by one thread with one instruction. sm_90 only. Only for kernels/*.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace rssm {

__device__ inline uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// One thread, before any use: an mbarrier expecting one arrival per phase, made visible to the async proxy.
__device__ inline void mbar_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One thread: `bytes` (a multiple of 16; both addresses 16-byte aligned) from src to dst; the barrier's current phase
// completes when they have landed. The arrival is this call's; nothing else may arrive on the phase.
__device__ inline void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}

// Any thread: waits until the barrier's phase of the given parity (0 for the first copy, 1 for the second) is done.
__device__ inline void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_again:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_again;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

}  // namespace rssm
