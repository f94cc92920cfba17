// Comparing two next-byte distributions given as logits: KL(p_ref ‖ p_test), top-1 agreement and each one's
// code length of the byte that actually came next (bits), all in double from the logits.
#pragma once

namespace rssm {

struct NextByte {
  double kl = 0;           // KL(p_ref ‖ p_test) in nats, never negative (rounding-level negatives clamped to 0)
  bool top1_agree = true;  // argmax equal (first maximum on ties)
  double ref_bits = 0;     // −log2 p_ref(next); 0 when next < 0 (no next byte known)
  double test_bits = 0;    // −log2 p_test(next)
};

// ref, test: [vocab] logits; next: the byte that followed, or -1.
NextByte compare_next_byte(const double* ref, const double* test, int vocab, int next);

// −log2 softmax(logits)[next].
double code_bits(const double* logits, int vocab, int next);

}  // namespace rssm
