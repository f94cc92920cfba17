// Device properties the launchers shape their grids by. Needs the CUDA runtime (include from .cu files only).
#pragma once

#include <cuda_runtime.h>

namespace rssm {

// SMs of the current device, cached per device: a cheap attribute query, no synchronisation, legal while a stream
// is being captured. 132 (the H200's) if the query fails.
inline int sm_count() {
  static int cache[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) dev = 0;
  if (dev >= 0 && dev < 64 && cache[dev] > 0) return cache[dev];
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
    (void)cudaGetLastError();
    n = 132;
  }
  if (dev >= 0 && dev < 64) cache[dev] = n;
  return n;
}

}  // namespace rssm
