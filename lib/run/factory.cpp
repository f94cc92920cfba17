#include "run/factory.h"

#include <fmt/format.h>

#include "cpu/eager.h"
#include "cpu/replay.h"
#include "cuda_backend.h"
#include "errors.h"

namespace rssm {

namespace {

std::string cpu_unavailable_reason(const Scheme& s) {
  if (s.replays() && s.interval > kMaxInterval)
    return fmt::format("the CPU replay decoders keep per-entry weights on the stack, at most {} entries: interval {} "
                       "is more",
                       kMaxInterval, s.interval);
  if (s.replays() && s.speculative() && s.spec_hist() > kMaxInterval)
    return fmt::format("the CPU speculative ring holds at most {} entries: L_hist {} is more", kMaxInterval,
                       s.spec_hist());
  return "";
}

}  // namespace

std::string backend_unavailable_reason(const Scheme& s, Family family) {
  return s.backend == Backend::Cuda ? cuda_unavailable_reason(s, family) : cpu_unavailable_reason(s);
}

std::unique_ptr<Decoder> make_decoder(const Scheme& s, Family family, uint64_t seed) {
  const std::string why = backend_unavailable_reason(s, family);
  if (!why.empty()) throw InternalError(fmt::format("make_decoder({}): {}", s.name(), why));
  if (s.backend == Backend::Cuda) return make_cuda_decoder(s, family, seed);
  if (s.decoder == DecoderKind::Eager) return std::make_unique<EagerDecoder>(s, seed);
  return std::make_unique<ReplayDecoder>(replay_options(s, seed));
}

}  // namespace rssm
