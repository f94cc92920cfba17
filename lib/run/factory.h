// The decoder factory: a typed Scheme in, a decoder of its backend out. Each backend has its combination check
// (the schemes it cannot run here, and why): the CPU decoders' limits live here, the CUDA backend's behind
// kernels/cuda_backend.h. The sweep turns a non-empty reason into a skipped point.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "decoder/decoder.h"
#include "decoder/scheme.h"

namespace rssm {

// Why `scheme` cannot run on its backend here ("" when it can): CPU limits (the largest interval the CPU
// decoders' stack buffers hold), or the CUDA backend's reason (no CUDA in this build, no device, no kernel).
std::string backend_unavailable_reason(const Scheme& scheme);

// The decoder of `scheme`; `seed` keys stochastic rounding. Throws InternalError for a scheme whose
// backend_unavailable_reason is not empty, ConfigError for a value the decoder rejects.
std::unique_ptr<Decoder> make_decoder(const Scheme& scheme, uint64_t seed);

}  // namespace rssm
