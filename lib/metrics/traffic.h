// Memory-traffic model of METHOD.md ("Memory traffic per step"): bytes moved per decode step per layer for eager,
// replay, dual-precision and speculative schemes, Mamba-2 and GDN. Decode is memory bound, so these bytes are the
// model's proxy for time; the ratio to eager fp32 is the modelled speed-up. It is a model, not a measurement:
// compute, latency and cache effects are ignored (that is why its best interval can differ from a real kernel's).
// Every term, and the averaging over an interval, is defined in docs/metrics.md; `replayssm traffic CONFIG` prints it.
#pragma once

#include <string>
#include <vector>

#include "decoder/scheme.h"
#include "model/model.h"

namespace rssm {

struct TrafficParams {
  std::string scheme = "eager";  // eager, replay, dual, spec-eager, spec-replay
  int state_bytes = 4;    // element of the state / checkpoint (dual: of the update copy)
  int read_bytes = 0;     // dual (and dual spec-replay): element of the read copy (1-byte formats also pay the scale)
  int act_bytes = 2;      // activation element (step inputs)
  int buffer_bytes = 2;   // buffered x, B (Mamba-2) or u, k (GDN); Δ and g stay fp32 (4 bytes)
  int interval = 8;       // checkpoint interval K (replay, dual, spec-replay)
  int buffer_len = 0;     // spec-replay: L_hist, ring capacity in entries (>= interval + window); 0 = interval + window
  int window = 4;         // spec: draft tokens T per verify step
  int batch = 1;          // sequences
  // Additions (not in the list):
  // spec: how many tokens a verify commits. spec-replay takes its flush schedule from it (spec_schedule: the share of
  // windows that flush and the fills they start from, under the kernels' flush rule). Trace acceptance has no model:
  // traffic_params passes it as All.
  Acceptance acceptance{Acceptance::Kind::All};
  int scale_bytes = 4;    // every 1-byte state copy (fp8, int8) carries one scale of this size per (head, row);
                          // rows are N (Mamba-2) or K (GDN) long, so it adds scale_bytes/row_len per element
  std::string label;      // formats shown in traffic_table, e.g. "fp32/bf16"; empty: element bytes are shown
};

// Bytes per step per layer. "per head": one head (value head for GDN) of one sequence, with the terms shared by a
// group (B of Mamba-2, q/k of GDN) divided by the heads per group. "batch": all heads of all `batch` sequences with
// each group term counted once per group (equals per head × heads × batch).
// nonflush: the mean over the steps of an interval of a step's bytes without the flush's state traffic (standard
// schemes: buffered entries h = 1..interval after appending, mean (interval + 1)/2; spec-replay: the mean over the
// windows that do not flush, each fill weighted by how often it occurs). flush: the step that flushes (spec-replay:
// its mean over the fills it folds). amortised: the mean over one whole interval (flush included; spec-replay: over
// all windows). For spec schemes a "step" is one verify call of `window` drafts, committing tokens_per_step tokens.
struct Traffic {
  double per_head_nonflush = 0, per_head_flush = 0, per_head_amortised = 0;
  double batch_nonflush = 0, batch_flush = 0, batch_amortised = 0;
  // Additions: tokens committed per step (1 for standard schemes, the acceptance's mean for spec), and steps per
  // flush (interval for replay/dual, the mean windows between flushes for spec-replay, 1 for eager schemes).
  double tokens_per_step = 1;
  double steps_per_flush = 1;
};

// The parameters of a sweep point's scheme over `batch` sequences (eager, replay or dual).
TrafficParams traffic_params(const Scheme& scheme, int batch);

// Throws ConfigError naming the field when a parameter is out of range or the scheme is unknown.
Traffic traffic(const Model& m, const TrafficParams& p);

// A readable, aligned text table: one row per params (scheme, formats, interval, window), columns per-head bytes
// and batch MiB (non-flush / flush / amortised), and amortised bytes per committed token over eager fp32's
// (same activation bytes and batch): below 1 means fewer bytes than the baseline.
std::string traffic_table(const Model& m, const std::vector<TrafficParams>& rows);

}  // namespace rssm
