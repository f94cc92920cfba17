// The speculative commit (common/spec_kernels.h): one thread per row moves the row's cursor by its accepted count.
// It is the whole of rollback: rejected drafts' ring entries and draft states are simply not pointed at.
#include <stdexcept>
#include <string>

#include "common/cuda_check.h"
#include "common/spec_kernels.h"

namespace rssm {

namespace {

__global__ void spec_commit_kernel(SpecCommitLaunch l) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= l.batch) return;
  const int slot = l.d_slot[r];
  if (slot < 0) return;
  const int acc = min(max(l.d_accepted[r], 1), l.window);
  if (l.d_cur) {
    l.d_cur[slot] = acc - 1;
    return;
  }
  const int h = l.d_fill[slot];
  if (spec_flushes(h, l.interval, l.window, l.hist)) {
    l.d_base[slot] = (l.d_base[slot] + h) & (l.capacity - 1);
    l.d_fill[slot] = acc;
  } else {
    l.d_fill[slot] = h + acc;
  }
}

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument("spec_commit: " + what); }

}  // namespace

void spec_commit(const SpecCommitLaunch& l, cudaStream_t stream) {
  if (l.batch < 0) bad("batch must be >= 0");
  if (l.batch == 0) return;
  if (!l.d_slot || !l.d_accepted) bad("d_slot and d_accepted must be set");
  if (l.window < 1 || l.window > kMaxSpecWindow) bad("window must be in 1.." + std::to_string(kMaxSpecWindow));
  if (!l.d_cur) {
    if (!l.d_fill || !l.d_base) bad("a replay commit needs d_fill and d_base (or d_cur for the eager baseline)");
    if (l.interval < 1 || l.hist < l.interval + l.window) bad("hist must be >= interval + window");
    if (l.capacity < spec_ring_capacity(l.hist, l.window) || (l.capacity & (l.capacity - 1)) != 0)
      bad("capacity must be a power of two >= spec_ring_capacity(hist, window)");
  }
  const int threads = 256;
  spec_commit_kernel<<<(l.batch + threads - 1) / threads, threads, 0, stream>>>(l);
  CUDA_CHECK_LAUNCH(stream);
}

}  // namespace rssm
