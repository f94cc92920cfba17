// RSSM_HD marks functions that CUDA kernels share with the CPU emulation (rounding, Philox): __host__ __device__
// under nvcc, nothing elsewhere, so lib/ still builds without a CUDA compiler.
#pragma once

#ifdef __CUDACC__
#define RSSM_HD __host__ __device__
#else
#define RSSM_HD
#endif
