// What one launch's kernel holds on an SM, recorded beside its timings so that an occupancy cliff (shared memory or
// registers crossing a CTA boundary) shows in the benchmark JSON rather than as an unexplained slowdown. CUDA-free.
#pragma once

namespace rssm {

struct KernelFootprint {
  int threads = 0;           // per CTA
  long long ctas = 0;        // grid
  long long smem_bytes = 0;  // per CTA: the launch's dynamic shared memory plus the kernel's static
  int registers = 0;         // per thread
  int local_bytes = 0;       // per thread: spills and stack
  int ctas_per_sm = 0;       // resident at once (the runtime's occupancy calculator, this device)
};

}  // namespace rssm
