// CUDA error checks for kernels/, their tests and benchmarks: CUDA_CHECK(call) throws rssm::CudaError naming the
// call, file and line; CUDA_CHECK_LAUNCH(stream) after every kernel launch reads the launch error (cheap, never
// waits). A build configured with -DREPLAYSSM_CUDA_SYNC_CHECK=ON also waits for the stream after each launch, so an
// asynchronous fault is reported at the kernel that caused it (not while the stream is being captured into a graph:
// waiting is illegal there). Needs the CUDA runtime: include it from .cu files and CUDA-linked programs only, never
// from a CUDA-free header.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace rssm {

// A failed CUDA runtime call or kernel launch. code() is the cudaError_t.
class CudaError : public std::runtime_error {
 public:
  CudaError(cudaError_t code, const char* call, const char* file, int line)
      : std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " +
                           cudaGetErrorName(code) + " (" + cudaGetErrorString(code) + ")"),
        code_(code) {}
  cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

namespace detail {
inline void cuda_check(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) throw CudaError(e, call, file, line);
}

inline void cuda_check_launch(cudaStream_t stream, const char* file, int line) {
  cuda_check(cudaGetLastError(), "kernel launch", file, line);
#ifdef REPLAYSSM_CUDA_SYNC_CHECK
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  cuda_check(cudaStreamIsCapturing(stream, &capturing), "cudaStreamIsCapturing", file, line);
  if (capturing == cudaStreamCaptureStatusNone)
    cuda_check(cudaStreamSynchronize(stream), "kernel execution (REPLAYSSM_CUDA_SYNC_CHECK)", file, line);
#else
  (void)stream;
#endif
}
}  // namespace detail

}  // namespace rssm

#define CUDA_CHECK(call) ::rssm::detail::cuda_check((call), #call, __FILE__, __LINE__)
#define CUDA_CHECK_LAUNCH(stream) ::rssm::detail::cuda_check_launch((stream), __FILE__, __LINE__)
