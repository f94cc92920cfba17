// Speculative decoding on the device, what both families share (METHOD.md "Speculative decoding"): the ring
// convention of the replay verify kernels, the draft-state convention of the eager speculative baseline, and the
// commit that advances each row by its accepted count. CUDA-free header, like the families' kernel headers.
//
// Window. A verify launch takes T positions per row: the token the previous verify produced (always committed) and
// T − 1 drafts. Position s of row r is input row r·T + s of the family's StepArgs (batch = rows; every per-row
// stride is per input row) and output row r·T + s.
//
// Replay ring (per slot): a power-of-two `capacity` of entries; entry i since the checkpoint (i = 0 .. fill − 1
// committed) lives at index (base + i) & (capacity − 1). d_fill[slot] = committed entries h, d_base[slot] = index of
// entry 0; both are written only by the commit, so a verify launch reads them without any hand-off between CTAs.
// Flush rule, evaluated identically by the verify and the commit on the committed fill h before a window:
//   flush = h > 0 && (h >= interval || h + 2·T > hist)        (hist = L_hist of METHOD.md, >= interval + T)
// A verify that flushes first folds the h committed entries into the checkpoint (the flush of the previous window,
// deferred into the launch that streams the checkpoint anyway), then computes the window from the new checkpoint;
// either way position s appends its entry at entry number h' + s (h' = 0 after the flush, else h), an index no other
// CTA of the launch reads. The commit then sets base += h (flushed) and fill = h' + accepted. Rollback of the
// rejected drafts is nothing: their entries lie past the new fill and are overwritten by the next window.
// Ring sizes: spec_ring_capacity(hist, window) below.
//
// Eager baseline (per slot): T draft states [pool, T, state]; d_cur[slot] names the draft that holds the current
// state. The verify reads it and writes the state after every position s into draft s: T full states, as serving
// engines write them today. The commit sets d_cur = accepted − 1.
#pragma once

#include <cstdint>

#include "decoder/spec.h"  // spec_flushes, the flush rule (host and device)

struct CUstream_st;
typedef CUstream_st* cudaStream_t;

namespace rssm {

// Largest window a verify launch accepts.
constexpr int kMaxSpecWindow = 16;

// Ring entries per slot: the smallest power of two holding every entry in use. A window appends `window` entries past
// h committed ones while a deferred flush may still read those h; the flush rule keeps h <= hist − window, or
// h <= window right after a flush, so max(hist, 2·window) entries suffice.
inline int spec_ring_capacity(int hist, int window) {
  const int need = hist > 2 * window ? hist : 2 * window;
  int c = 1;
  while (c < need) c *= 2;
  return c;
}

// One launch advances every row of a verify by its accepted count (1 .. window; a row's count is clamped into that
// range on the device). Replay rows: d_fill and d_base set (d_cur null). Eager rows: d_cur set (d_fill, d_base null).
// Padded rows (slot < 0) are skipped.
struct SpecCommitLaunch {
  int batch = 0;
  const int32_t* d_slot = nullptr;      // [batch]
  const int32_t* d_accepted = nullptr;  // [batch]: tokens committed by this window, 1 .. window
  int window = 4, interval = 16, hist = 20, capacity = 32;
  int32_t* d_fill = nullptr;  // [pool]
  int32_t* d_base = nullptr;  // [pool]
  int32_t* d_cur = nullptr;   // [pool]
};

void spec_commit(const SpecCommitLaunch& launch, cudaStream_t stream);

}  // namespace rssm
