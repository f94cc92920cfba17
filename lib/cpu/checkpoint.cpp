#include "cpu/checkpoint.h"

#include <fmt/format.h>

#include "errors.h"
#include "numeric/scaled.h"

namespace rssm {

void CheckpointCopy::init(Format fmt, Rounding rnd, long long elems, int row_len, RandomStream stream,
                          uint64_t seed) {
  if (fmt == Format::INT8 || fmt == Format::E4M3 || fmt == Format::E5M2) {
    if (row_len <= 0) throw InternalError("scaled checkpoint needs a row length");
  }
  fmt_ = fmt;
  rnd_ = rnd;
  row_len_ = row_len;
  stream_ = stream;
  seed_ = seed;
  values_.assign(static_cast<size_t>(elems), 0.0);
}

double CheckpointCopy::bytes_per_elem() const {
  return format_bytes(fmt_) + (is_scaled_format(fmt_) ? 4.0 / row_len_ : 0.0);
}

void CheckpointCopy::store(const double* src, long long off, long long n, long long step) {
  // Called concurrently for disjoint ranges (one per head): scratch is local, never a member.
  double* dst = values_.data() + off;
  const bool sr = rnd_ == Rounding::Stochastic && fmt_ != Format::FP64;
  std::vector<uint32_t> random_;
  std::vector<uint8_t> codes_;
  if (sr) {
    random_.resize(static_cast<size_t>(n));
    for (long long i = 0; i < n; ++i) random_[i] = state_random_bits(seed_, stream_, step, off + i);
  }
  if (fmt_ == Format::FP64) {
    std::copy(src, src + n, dst);
    return;
  }
  // The decoder's arithmetic produced src; storing first rounds it to fp32 (the value a kernel's fp32 register
  // holds), then into the format: with fp32 arithmetic the first rounding is exact. A scaled row is then quantised
  // as a float row (scale and quotients in fp32, numeric/scaled.h), as a kernel computes it from its registers: a
  // double row's quotients would round twice differently in rare ties and fix-up steps, and the stored bytes would
  // no longer be the kernel's (docs/fp_contract.md).
  if (is_scaled_format(fmt_)) {
    codes_.resize(static_cast<size_t>(row_len_));
    std::vector<float> row(static_cast<size_t>(row_len_));
    for (long long r = 0; r < n; r += row_len_) {
      for (int i = 0; i < row_len_; ++i) row[i] = static_cast<float>(src[r + i]);
      const float scale = quantize_row(fmt_, rnd_, row.data(), row_len_, codes_.data(), sr ? &random_[r] : nullptr);
      dequantize_row(fmt_, codes_.data(), row_len_, scale, dst + r);
    }
    return;
  }
  if (sr) {
    for (long long i = 0; i < n; ++i) dst[i] = round_stochastic(fmt_, static_cast<float>(src[i]), random_[i]);
  } else {
    for (long long i = 0; i < n; ++i) dst[i] = round_nearest(fmt_, static_cast<float>(src[i]));
  }
}

}  // namespace rssm
