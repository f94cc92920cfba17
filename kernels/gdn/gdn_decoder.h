// The `cuda` decoder of a Gated DeltaNet scheme: a thin adapter from the Decoder interface (decoder/decoder.h) to the
// launchers of kernels/gdn/gdn_kernels.h, so `replayssm run` can put the GDN kernels next to their CPU emulation
// and the fp64 reference. It owns the device buffers of one layer (state pool with slot = sequence, the u/k/G ring
// and its cursors, staged inputs, outputs), launches one kernel per step on its own stream and copies each chunk's
// outputs back once. Not a serving engine: every sequence is a row of every launch, none padded. CUDA-free header
// (the factory in lib/run reaches it through kernels/cuda_backend.cpp only); the implementation links CUDA::cudart.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "decoder/decoder.h"
#include "decoder/scheme.h"

namespace rssm {

// Why the GDN kernels cannot run `scheme` ("" when they can), one line naming the missing kernel, e.g.
// "no CUDA kernel for an eager fp64 state". Independent of the device and of the layer's geometry (reset()
// checks the geometry). The backend asks it for GDN layers only (kernels/cuda_backend.cpp picks by family).
std::string gdn_cuda_unsupported(const Scheme& scheme);

// The decoder of a scheme for which gdn_cuda_unsupported is empty (InternalError otherwise). Its name() is
// scheme.decoder_name() ("cuda:replay-bf16-K8-...-route_inner-..."). Its state copies carry the CPU decoders' names
// and steps: eager "state" (after the last step); replay "checkpoint" (the shared checkpoint or the dual update
// copy) and, dual, "read", both as of the last flush. The seed keys stochastic rounding (numeric/stochastic.h), as the CPU decoders'.
std::unique_ptr<Decoder> make_gdn_cuda_decoder(const Scheme& scheme, uint64_t seed);

}  // namespace rssm
