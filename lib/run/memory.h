// The memory probe: what a run will hold, against what the machine has, checked before anything is allocated.
#pragma once

#include "model/model.h"

namespace rssm {

// Bytes a run will hold in memory (states of every decoder plus chunk buffers).
long long estimate_run_bytes(const Model& model, int seqs, int chunk, int decoders, int readout_vocab);
long long available_memory_bytes();  // MemAvailable from /proc/meminfo, or -1 when unknown

}  // namespace rssm
