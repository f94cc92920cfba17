// The `cuda` decoder of speculative schemes (spec.window > 0), both families: host C++ over the verify launchers
// (mamba2_verify / gdn_verify, the eager baselines mamba2_eager_verify / gdn_eager_verify) and spec_commit.
// CUDA-free header; built only in a CUDA build (kernels/cuda_backend.cpp routes speculative schemes here).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "decoder/decoder.h"
#include "decoder/scheme.h"
#include "model/family.h"

namespace rssm {

// Why no speculative kernel runs `s` on `family` ("" when one does).
std::string spec_cuda_unsupported(const Scheme& s, Family family);

std::unique_ptr<Decoder> make_spec_cuda_decoder(const Scheme& s, Family family, uint64_t seed);

}  // namespace rssm
