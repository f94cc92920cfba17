// The CUDA backend of a build without a CUDA compiler: no cuda point can run, and each says why.
#include "cuda_backend.h"

#include "errors.h"

namespace rssm {

std::string cuda_unavailable_reason(const Scheme&, Family) {
  return "this build has no CUDA kernels (configured without nvcc)";
}

std::unique_ptr<Decoder> make_cuda_decoder(const Scheme& scheme, Family family, uint64_t) {
  throw InternalError("make_cuda_decoder(" + scheme.name() + "): " + cuda_unavailable_reason(scheme, family));
}

}  // namespace rssm
