// The model families the harness knows, and the named inputs each one takes per decode step.
// A family's inputs are described generically (name, elements per token, optional) so that trace I/O,
// the synthetic generator, input rounding and `inspect` statistics need no per-family code.
#pragma once

#include <string>
#include <vector>

namespace rssm {

enum class Family { Mamba2, GDN };

std::string family_name(Family f);            // "mamba2", "gdn"
Family parse_family(const std::string& name);  // throws ConfigError naming the accepted values

// One input tensor of a decode step. Per token (one step of one sequence) it holds `elems` values,
// laid out row-major over `dims` (e.g. x: dims {H, P}).
struct InputSpec {
  std::string name;
  std::vector<int> dims;
  bool optional = false;
  int elems() const {
    int n = 1;
    for (int d : dims) n *= d;
    return n;
  }
};

}  // namespace rssm
