#include "trace/trace.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "errors.h"

namespace rssm {

MemoryTrace::MemoryTrace(Model model, long long steps, int seqs) : model_(std::move(model)), steps_(steps), seqs_(seqs) {
  for (const auto& s : model_.inputs()) inputs.emplace_back(static_cast<size_t>(steps) * seqs * s.elems(), 0.0f);
}

std::unique_ptr<MemoryTrace> MemoryTrace::load_all(TraceSource& src) {
  auto t = std::make_unique<MemoryTrace>(src.model(), src.steps(), src.seqs());
  InputChunk c;
  const int chunk = 256;
  for (long long s0 = 0; s0 < src.steps(); s0 += chunk) {
    const int n = static_cast<int>(std::min<long long>(chunk, src.steps() - s0));
    src.read(s0, n, c);
    for (size_t i = 0; i < c.data.size(); ++i)
      std::copy(c.data[i].begin(), c.data[i].end(),
                t->inputs[i].begin() + static_cast<size_t>(s0) * src.seqs() * c.elems[i]);
  }
  t->readout_ = src.readout();
  t->vocab_ = src.readout_vocab();
  t->description = src.describe();
  return t;
}

void MemoryTrace::read(long long step0, int nsteps, InputChunk& out) {
  if (step0 < 0 || nsteps < 0 || step0 + nsteps > steps_)
    throw FormatError(fmt::format("{}: steps [{}, {}) are outside the trace's {} steps", description, step0,
                                  step0 + nsteps, steps_));
  out.shape(model_, step0, nsteps, seqs_);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const size_t per_step = static_cast<size_t>(seqs_) * out.elems[i];
    std::copy_n(inputs[i].begin() + static_cast<size_t>(step0) * per_step, nsteps * per_step, out.data[i].begin());
  }
}

void check_finite(const std::string& where, const std::string& dataset, const float* data, long long step0, int steps,
                  int seqs, int elems) {
  const size_t n = static_cast<size_t>(steps) * seqs * elems;
  for (size_t i = 0; i < n; ++i) {
    if (std::isfinite(data[i])) continue;
    const size_t per_step = static_cast<size_t>(seqs) * elems;
    const long long step = step0 + static_cast<long long>(i / per_step);
    const size_t seq = (i % per_step) / elems, idx = i % elems;
    throw FormatError(fmt::format("{}: dataset '{}' has a non-finite value ({}) at step {}, sequence {}, index {}",
                                  where, dataset, data[i], step, seq, idx));
  }
}

}  // namespace rssm
