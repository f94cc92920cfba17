// footprint_of: a kernel's KernelFootprint for a launch shape, from the runtime's attributes and occupancy
// calculator. Needs the CUDA runtime (include from .cu files). Sets the kernel's dynamic shared-memory limit as its
// launcher does, so the answer is the launch's; never launches, never waits.
#pragma once

#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/kernel_footprint.h"

namespace rssm {

template <class Kernel>
KernelFootprint footprint_of(Kernel kernel, int threads, size_t dyn_smem, long long ctas) {
  if (dyn_smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dyn_smem)));
  cudaFuncAttributes attr;
  CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, dyn_smem));
  KernelFootprint f;
  f.threads = threads, f.ctas = ctas;
  f.smem_bytes = static_cast<long long>(dyn_smem) + static_cast<long long>(attr.sharedSizeBytes);
  f.registers = attr.numRegs, f.local_bytes = static_cast<int>(attr.localSizeBytes), f.ctas_per_sm = per_sm;
  return f;
}

}  // namespace rssm
