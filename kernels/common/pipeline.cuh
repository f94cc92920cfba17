// Shared-memory pipelines of the persistent (pipelined) step kernels: one producer warp moves each work item's
// bytes into a ring of shared-memory stages with bulk copies (the copy engine: no registers held while they fly)
// and the consumer warps compute from the stages. Each stage has a "full" barrier (producer -> consumers: the
// item's bytes landed) and an "empty" barrier (consumers -> producer: the stage may be refilled). sm_90 PTX
// (mbarrier transaction counts, cp.async.bulk); device code only.
//
// Phases: the n-th item a CTA handles sits in stage n % stages and is the (n / stages)-th use of that stage; the
// consumers wait for the full barrier's phase of parity (n / stages) & 1, the producer for the empty barrier's
// phase of the opposite parity (a fresh barrier counts as having completed the phase before its first, so the first
// pass over the stages does not wait).
#pragma once

#include <cstdint>

namespace rssm {
namespace pipe {

__device__ inline uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ inline void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// Makes the initialised barriers visible to the copy engine (the async proxy) before the first bulk copy.
__device__ inline void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

__device__ inline void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// One arrival plus `bytes` the barrier's phase must also see land (the bulk copies' complete_tx).
__device__ inline void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

__device__ inline void mbar_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t a = smem_addr(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
  } while (!done);
}

// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global into this CTA's shared memory, counted
// against `bar`'s transaction count when they land.
__device__ inline void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}

// A 16-byte asynchronous copy through the load path (cp.async, L2 only), for pieces too small to be worth a bulk
// request each (on the H200 the two ways timed the same for the pipelined replay's ring entries).
__device__ inline void copy16_async(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}

// An 8-byte asynchronous copy (for pieces too small or too scattered for a bulk copy); `arrive_after_copies`
// makes the thread's arrival on a barrier wait for every such copy it issued before.
__device__ inline void copy8_async(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
// Waits for every cp.async this thread issued (a CTA barrier after it makes them visible to the other threads).
__device__ inline void wait_async_copies() { asm volatile("cp.async.wait_all;" ::: "memory"); }
__device__ inline void arrive_after_copies(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Barrier among the consumer warps only (named barrier 1; the producer warp never joins it).
__device__ inline void consumer_sync(int consumer_threads) {
  asm volatile("bar.sync 1, %0;" ::"r"(consumer_threads) : "memory");
}

}  // namespace pipe
}  // namespace rssm
