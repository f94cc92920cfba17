// The decoder factory: a typed Scheme in, a decoder of its backend out. Each backend has its combination check
// (the schemes it cannot run here, and why): the CPU decoders' limits live here, the CUDA backend's behind
// kernels/cuda_backend.h. The sweep turns a non-empty reason into a skipped point.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "decoder/decoder.h"
#include "decoder/scheme.h"
#include "model/family.h"

namespace rssm {

// Why `scheme` cannot run on its backend here for layers of `family` ("" when it can): CPU limits (the largest
// interval the CPU decoders' stack buffers hold), or the CUDA backend's reason (no CUDA in this build, no device, no
// kernel for the scheme on that family).
std::string backend_unavailable_reason(const Scheme& scheme, Family family);

// The decoder of `scheme` for layers of `family` (the CPU decoders take any family at reset; each family has its own
// CUDA kernels); `seed` keys stochastic rounding. Throws InternalError for a scheme whose backend_unavailable_reason
// is not empty, ConfigError for a value the decoder rejects.
std::unique_ptr<Decoder> make_decoder(const Scheme& scheme, Family family, uint64_t seed);

}  // namespace rssm
