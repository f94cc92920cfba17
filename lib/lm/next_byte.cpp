// compare_next_byte: log-softmax with the maximum subtracted (logits of a trained byte model span ~30 nats).
#include "lm/next_byte.h"

#include <algorithm>
#include <cmath>

namespace rssm {

namespace {
double log_sum_exp(const double* x, int n) {
  const double m = *std::max_element(x, x + n);
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(x[i] - m);
  return m + std::log(s);
}
}  // namespace

double code_bits(const double* logits, int vocab, int next) {
  return (log_sum_exp(logits, vocab) - logits[next]) / std::log(2.0);
}

NextByte compare_next_byte(const double* ref, const double* test, int vocab, int next) {
  NextByte r;
  // KL = Σ p_i·d_i + log Σ p_i·e^{−d_i} with d = ref − test, p = softmax(ref), written with expm1/log1p over the
  // unnormalised weights so that equal logits give exactly 0 and near-equal ones their true ~d² size, instead of
  // the ~1e-15 a difference of two log-sum-exps leaves.
  const double m = *std::max_element(ref, ref + vocab);
  double z = 0, wd = 0, wm = 0;
  for (int i = 0; i < vocab; ++i) {
    const double w = std::exp(ref[i] - m), d = ref[i] - test[i];
    z += w;
    wd += w * d;
    wm += w * std::expm1(-d);
  }
  r.kl = std::max(0.0, wd / z + std::log1p(wm / z));
  r.top1_agree = std::max_element(ref, ref + vocab) - ref == std::max_element(test, test + vocab) - test;
  if (next >= 0) {
    r.ref_bits = code_bits(ref, vocab, next);
    r.test_bits = code_bits(test, vocab, next);
  }
  return r;
}

}  // namespace rssm
