// The CUDA backend of a CUDA build: a point runs when the machine has a device and a kernel exists for its scheme on
// its layer's family. Kernels plug in here: make_cuda_decoder builds their decoder, and cuda_unavailable_reason stops
// saying "no CUDA kernel" for the schemes they cover. Plain C++ against the CUDA runtime API (no device code here).
// Covered now: the Mamba-2 kernels (kernels/mamba2/mamba2_decoder.h), the Gated DeltaNet kernels
// (kernels/gdn/gdn_decoder.h) and the speculative verify kernels of both (kernels/common/spec_decoder.h), each with
// its own list of what it implements.
#include "cuda_backend.h"

#include <cuda_runtime.h>

#include "common/spec_decoder.h"
#include "errors.h"
#include "gdn/gdn_decoder.h"
#include "mamba2/mamba2_decoder.h"

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

// Why no kernel covers the scheme on this family ("" when one does): the family's decoder lists what its kernels
// implement.
std::string kernel_unavailable_reason(const Scheme& scheme, Family family) {
  if (scheme.speculative()) return spec_cuda_unsupported(scheme, family);
  return family == Family::GDN ? gdn_cuda_unsupported(scheme) : mamba2_cuda_unsupported(scheme);
}

}  // namespace

std::string cuda_unavailable_reason(const Scheme& scheme, Family family) {
  if (!have_device()) return "no CUDA device on this machine";
  return kernel_unavailable_reason(scheme, family);
}

std::unique_ptr<Decoder> make_cuda_decoder(const Scheme& scheme, Family family, uint64_t seed) {
  const std::string why = cuda_unavailable_reason(scheme, family);
  if (!why.empty()) throw InternalError("make_cuda_decoder(" + scheme.name() + "): " + why);
  if (scheme.speculative()) return make_spec_cuda_decoder(scheme, family, seed);
  return family == Family::GDN ? make_gdn_cuda_decoder(scheme, seed) : make_mamba2_cuda_decoder(scheme, seed);
}

}  // namespace rssm
