#include "run/memory.h"

#include <fstream>
#include <string>

namespace rssm {

long long available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  long long kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return -1;
}

long long estimate_run_bytes(const Model& model, int seqs, int chunk, int decoders, int readout_vocab) {
  long long in_per_step = 0;
  for (const auto& s : model.inputs()) in_per_step += s.elems();
  // Decoder states are held in double (replay decoders: update + read copy + buffers, counted as two states).
  const long long states = static_cast<long long>(2 * decoders + 1) * seqs * model.state_elems() * 8;
  // Chunk inputs, the reference's and every decoder's chunk outputs.
  const long long chunks =
      static_cast<long long>(chunk) * seqs * (in_per_step * 4 + static_cast<long long>(model.out_elems()) * 8 * (decoders + 1));
  // Readout W (float) and the chunk's reference logits (double) plus a block of float scratch.
  const long long readout = static_cast<long long>(readout_vocab) * model.out_elems() * 4 +
                            static_cast<long long>(chunk) * seqs * readout_vocab * 8 + 256LL * readout_vocab * 8;
  return states + chunks + readout;
}

}  // namespace rssm
