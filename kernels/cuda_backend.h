// The CUDA backend as the factory sees it: a CUDA-free header, so lib/run (and every test) compiles and links the
// same way with or without nvcc. Two implementations stand behind it: cuda_backend_stub.cpp in a build without CUDA
// (every cuda point is skipped: "this build has no CUDA kernels"), and cuda_backend.cpp in a CUDA build (asks the
// runtime for a device, then looks for a kernel for the scheme).
// A cuda point that cannot run is skipped with the reason, like every other invalid combination; it is never run
// on the CPU instead.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "decoder/decoder.h"
#include "decoder/scheme.h"
#include "model/family.h"

namespace rssm {

// Empty when a CUDA decoder can run `scheme` on a layer of `family` here (a CUDA build, a device, a kernel for the
// scheme and family); otherwise one line saying why not, used as the point's skip reason. The family is an argument
// because a Scheme does not name it and each family has its own kernels.
std::string cuda_unavailable_reason(const Scheme& scheme, Family family);

// The CUDA decoder of `scheme` for layers of `family`; `seed` keys stochastic rounding (the same Philox counters as
// the CPU decoders). Throws InternalError when cuda_unavailable_reason(scheme, family) is not empty (the sweep skips
// those points first).
std::unique_ptr<Decoder> make_cuda_decoder(const Scheme& scheme, Family family, uint64_t seed);

}  // namespace rssm
