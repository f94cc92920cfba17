// The summary table `replayssm run` prints: one line per sweep point, the sweep keys that vary as columns,
// skipped points with their reasons.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "io/results.h"

namespace rssm {

// A summary cell as text: doubles through fmt_spec, "-" when the row has no such key.
std::string cell_text(const AttrMap& row, const std::string& key, const char* fmt_spec);

void print_table(std::ostream& out, const std::vector<RunRecord>& recs, bool kl);

}  // namespace rssm
