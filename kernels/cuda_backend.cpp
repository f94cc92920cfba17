// The CUDA backend of a CUDA build: a point runs when the machine has a device and a kernel exists for its scheme.
// Kernels plug in here: make_cuda_decoder builds their decoder, and cuda_unavailable_reason stops saying
// "no CUDA kernel" for the schemes they cover. Plain C++ against the CUDA runtime API (no device code here).
#include "cuda_backend.h"

#include <cuda_runtime.h>

#include "errors.h"

namespace rssm {

namespace {

// Asked once per process: the device count does not change under a run.
bool have_device() {
  static const bool have = [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) (void)cudaGetLastError();  // no driver / no device: clear the sticky error
    return e == cudaSuccess && n > 0;
  }();
  return have;
}

// Whether a kernel exists for the scheme. None yet: the Mamba-2 eager and replay kernels (kernels/mamba2) plug in
// here when their decoder lands.
bool have_kernel(const Scheme&) { return false; }

}  // namespace

std::string cuda_unavailable_reason(const Scheme& scheme) {
  if (!have_device()) return "no CUDA device on this machine";
  if (!have_kernel(scheme)) return "no CUDA kernel for " + scheme.decoder_name() + " yet";
  return "";
}

std::unique_ptr<Decoder> make_cuda_decoder(const Scheme& scheme, uint64_t) {
  const std::string why = cuda_unavailable_reason(scheme);
  throw InternalError("make_cuda_decoder(" + scheme.name() + "): " + (why.empty() ? "no decoder wired" : why));
}

}  // namespace rssm
