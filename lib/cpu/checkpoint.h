// One stored copy of a recurrent state, in a chosen format, as a kernel would keep it in memory.
// Values are held dequantised in double (every format here is exactly representable), so decoders read them
// without caring about the format; block-scaled formats (e4m3, e5m2, int8) keep one fp32 scale per row.
// Stochastic rounding draws its bits through numeric/stochastic.h (Philox4x32-10 keyed by the run's seed, counter
// (element / 4, step, stream)), so a GPU kernel storing the same copy at the same step draws the same bits.
#pragma once

#include <cstdint>
#include <vector>

#include "numeric/format.h"
#include "numeric/stochastic.h"

namespace rssm {

class CheckpointCopy {
 public:
  // elems: total values (all sequences and heads); row_len: values per scale row (N for Mamba-2, K for GDN).
  void init(Format fmt, Rounding rnd, long long elems, int row_len, RandomStream stream, uint64_t seed);
  // Stores src[0..n) (new state values, already computed in the decoder's arithmetic) at element offset `off`,
  // rounded into the format; `step` keys stochastic rounding. off and n are multiples of row_len.
  // Safe to call from several threads for disjoint ranges.
  void store(const double* src, long long off, long long n, long long step);
  // Copies another copy's values into this one's format (the dual read copy refreshed from the update copy).
  void store_from(const CheckpointCopy& other, long long off, long long n, long long step) {
    store(other.values_.data() + off, off, n, step);
  }

  const double* values() const { return values_.data(); }
  double* mutable_values() { return values_.data(); }  // tests corrupt entries through this
  const std::vector<double>& all() const { return values_; }
  Format format() const { return fmt_; }
  // Storage bytes per element including the scale overhead (4 bytes per row for scaled formats).
  double bytes_per_elem() const;

 private:
  Format fmt_ = Format::FP32;
  Rounding rnd_ = Rounding::Nearest;
  int row_len_ = 1;
  RandomStream stream_ = RandomStream::CheckpointUpdate;
  uint64_t seed_ = 0;
  std::vector<double> values_;
};


}  // namespace rssm
