// The `cuda` decoder of a Mamba-2 scheme: a thin adapter from the Decoder interface (decoder/decoder.h) to the
// launchers of kernels/mamba2/mamba2_kernels.h, so `replayssm run` can put a kernel next to its CPU emulation and
// the fp64 reference. It owns the device buffers of one layer (state pool with slot = sequence, ring and cursors,
// staged inputs, outputs), launches one kernel per step on its own stream and copies each chunk's outputs back once.
// Not a serving engine: every sequence is a row of every launch, none padded. CUDA-free header (the factory in
// lib/run includes it through kernels/cuda_backend.cpp only); the implementation links CUDA::cudart.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "decoder/decoder.h"
#include "decoder/scheme.h"

namespace rssm {

// Why the Mamba-2 kernels cannot run `scheme` ("" when they can), one line naming the missing kernel, e.g.
// "no CUDA kernel for an eager fp64 state". Independent of the device and of the layer's geometry (reset()
// checks the geometry). The backend asks it for Mamba-2 layers only (kernels/cuda_backend.cpp picks by family).
std::string mamba2_cuda_unsupported(const Scheme& scheme);

// The decoder of a scheme for which mamba2_cuda_unsupported is empty (InternalError otherwise). Its name() is
// scheme.decoder_name() ("cuda:replay-bf16-K8-..."). The seed keys stochastic rounding (numeric/stochastic.h), as the CPU decoders'.
std::unique_ptr<Decoder> make_mamba2_cuda_decoder(const Scheme& scheme, uint64_t seed);

}  // namespace rssm
