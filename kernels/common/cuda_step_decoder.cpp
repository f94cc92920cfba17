#include "common/cuda_step_decoder.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "common/cuda_check.h"
#include "errors.h"

namespace rssm {

std::string step_cuda_unsupported(const Scheme& s, const StepKernelLimits& k) {
  if (s.speculative()) return "a speculative scheme (common/spec_decoder.h runs those)";
  if (s.act_format != Format::BF16 && s.act_format != Format::FP32)
    return fmt::format("no CUDA kernel for {} activations yet (the {} kernels read bf16 or fp32)",
                       format_name(s.act_format), k.family);
  if (s.out_format != Format::BF16 && s.out_format != Format::FP32)
    return fmt::format("no CUDA kernel stores {} outputs yet (the {} kernels write {} in fp32 or bf16)",
                       format_name(s.out_format), k.family, k.out);
  const Format sf = s.state_format;
  if (!s.replays()) {
    if (!kernel_state_format(sf))
      return fmt::format("no CUDA kernel for an eager {} {} state (the eager kernel stores fp32, bf16 or fp16)",
                         k.family, format_name(sf));
    return "";
  }
  if (s.dual()) {
    if (sf != Format::FP32)
      return fmt::format("no CUDA kernel for a {} dual update copy in {} yet (fp32 only)", k.family, format_name(sf));
    if (!plain16(s.read_format) && !is_scaled_format(s.read_format))
      return fmt::format("no CUDA kernel for a {} dual {} read copy yet (bf16, fp16, e4m3, e5m2 or int8)", k.family,
                         format_name(s.read_format));
  } else if (!kernel_state_format(sf)) {
    return fmt::format("no CUDA kernel for a shared {} {} checkpoint yet (fp32, bf16 or fp16)", k.family,
                       format_name(sf));
  }
  if (s.buffer_format != Format::BF16)
    return fmt::format("no CUDA kernel for a {} {} buffer yet (the ring keeps {} in bf16)", k.family,
                       format_name(s.buffer_format), k.ring);
  if (s.dot_arith != Arith::FP32)
    return fmt::format("no CUDA kernel for {} dot_arith {} yet (fp32 only)", k.family, arith_name(s.dot_arith));
  if (s.interval > k.max_interval)
    return fmt::format("the CUDA {} replay kernel {}, at most {} entries: interval {} is more", k.family,
                       k.interval_why, k.max_interval, s.interval);
  return "";
}

CudaStepDecoder::~CudaStepDecoder() {
  if (stream_) (void)cudaStreamDestroy(stream_);
}

void CudaStepDecoder::check_rows(const Model& model, Format f, const char* copy, int len, const char* kernels,
                                 const char* dim) {
  const int vec = f == Format::FP32 ? 4 : 8;
  const int lanes = len / vec;
  const std::string d = dim, symbol = d.substr(d.rfind(' ') + 1);  // "the key dim K": K
  if (len % vec != 0 || lanes < 1 || lanes > 32 || (lanes & (lanes - 1)) != 0)
    throw ConfigError(fmt::format("scheme.backend = cuda: {} need {} to be {} times a power of two up to 32 for a {} "
                                  "{} (16-byte vectors, a state row within a warp), got {}={} ({})",
                                  kernels, dim, vec, format_name(f), copy, symbol, len, model.geometry_string()));
}

void CudaStepDecoder::upload(DeviceBuffer& d, const void* src, size_t bytes) {
  d.assign(bytes);
  CUDA_CHECK(cudaMemcpyAsync(d.as(), src, bytes, cudaMemcpyHostToDevice, stream_));
}

void CudaStepDecoder::zeroed(DeviceBuffer& d, size_t bytes) {
  d.assign(bytes);
  if (bytes) CUDA_CHECK(cudaMemsetAsync(d.as(), 0, bytes, stream_));  // zero is 0.0 in fp32, bf16 and fp16
}

void CudaStepDecoder::begin_reset(const Model& model, int seqs, int row_len) {
  if (seqs < 1) throw InternalError(name() + ": reset with seqs < 1");
  model_ = model;
  seqs_ = seqs;
  row_len_ = row_len;
  step_ = flushed_step_ = 0;
  fill_ = 0;
  act_bytes_ = s_.act_format == Format::FP32 ? 4 : 2;
  y_bytes_ = s_.out_format == Format::FP32 ? 4 : 2;
  if (!stream_) CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));

  // What goes up once is copied asynchronously from host vectors that live until end_reset() has waited: the slots
  // here (a member), the family's parameters in its reset().
  slots_host_.resize(static_cast<size_t>(seqs));
  for (int r = 0; r < seqs; ++r) slots_host_[r] = r;
  upload(slot_, slots_host_.data(), slots_host_.size() * sizeof(int32_t));
  const size_t elems = static_cast<size_t>(seqs) * static_cast<size_t>(model.state_elems());
  zeroed(state_, elems * static_cast<size_t>(format_bytes(s_.state_format)));
  if (s_.dual())
    zeroed(read_, elems * static_cast<size_t>(format_bytes(s_.read_format)));
  else
    read_.release();
  reset_row_scales(read_scale_, s_.dual() ? s_.read_format : Format::FP32, elems / static_cast<size_t>(row_len));
  if (s_.replays()) {
    // buffer_len only changes memory and traffic: the ring is sized by it as a serving engine's would be.
    capacity_ = std::max(s_.interval, s_.buffer_len);
    zeroed(fill_d_, static_cast<size_t>(seqs) * sizeof(int32_t));
    zeroed(arrive_, static_cast<size_t>(seqs) * sizeof(int32_t));  // the launcher's contract: zero before the first
  } else {
    capacity_ = 0;
    fill_d_.release();
    arrive_.release();
  }
}

void CudaStepDecoder::end_reset() { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void CudaStepDecoder::stage(const InputChunk& c, int s0, int n) {
  if (c.seqs != seqs_ || static_cast<int>(c.data.size()) < inputs())
    throw InternalError(fmt::format("{}: a chunk of {} sequences and {} inputs, expected {} and {}", name(), c.seqs,
                                    c.data.size(), seqs_, inputs()));
  const auto specs = model_.inputs();
  for (int i = 0; i < inputs(); ++i) {
    if (c.elems[i] != specs[i].elems())
      throw InternalError(fmt::format("{}: input {} has {} values per token, expected {}", name(), specs[i].name,
                                      c.elems[i], specs[i].elems()));
    const size_t count = static_cast<size_t>(n) * seqs_ * c.elems[i];
    const float* src = c.at(i, s0, 0);  // steps s0 .. s0+n-1 of input i are contiguous: [steps, seqs, elems]
    in_[i].reserve(count * act_bytes_);
    if (s_.act_format == Format::FP32) {
      CUDA_CHECK(cudaMemcpyAsync(in_[i].as(), src, count * sizeof(float), cudaMemcpyHostToDevice, stream_));
    } else {
      std::vector<uint16_t>& h = codes_[i];
      bf16_codes(src, count, h);
      CUDA_CHECK(cudaMemcpyAsync(in_[i].as(), h.data(), count * sizeof(uint16_t), cudaMemcpyHostToDevice, stream_));
    }
  }
  y_.reserve(static_cast<size_t>(n) * seqs_ * model_.out_elems() * y_bytes_);
  if (s_.rounding == Rounding::Stochastic) stage_positions(pos_, pos_host_, step_, n, seqs_, stream_);
}

void CudaStepDecoder::advance(const InputChunk& c, int s0, int n, double* y) {
  if (seqs_ == 0) throw InternalError(name() + ": advance() before reset()");
  if (n <= 0) return;
  stage(c, s0, n);
  for (int k = 0; k < n; ++k) launch(k);
  const size_t count = static_cast<size_t>(n) * seqs_ * model_.out_elems();
  y_host_.resize(count * y_bytes_);
  CUDA_CHECK(cudaMemcpyAsync(y_host_.data(), y_.as(), count * y_bytes_, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  dequantise_codes(s_.out_format, y_host_.data(), count, y);
  for (int k = 0; k < n; ++k) {
    ++step_;
    // The kernel flushes on the step that fills the ring to `interval` (as lib/cpu/replay.cpp does).
    if (s_.replays() && ++fill_ == s_.interval) {
      fill_ = 0;
      flushed_step_ = step_;
    }
  }
}

void CudaStepDecoder::fetch(const DeviceBuffer& d, Format f, std::vector<double>& out) const {
  const size_t n = static_cast<size_t>(seqs_) * static_cast<size_t>(model_.state_elems());
  fetch_copy(d, read_scale_, f, n, static_cast<size_t>(row_len_), stream_, raw_, raw_scales_, out);
}

std::vector<StateCopy> CudaStepDecoder::state() const {
  if (seqs_ == 0) return {};
  fetch(state_, s_.state_format, host_state_);
  if (!s_.replays()) return {{"state", step_, host_state_.data(), host_state_.size(), {}}};
  std::vector<StateCopy> v = {{"checkpoint", flushed_step_, host_state_.data(), host_state_.size(), {}}};
  if (s_.dual()) {
    fetch(read_, s_.read_format, host_read_);
    v.push_back({"read", flushed_step_, host_read_.data(), host_read_.size(), {}});
  }
  return v;
}

}  // namespace rssm
