// Typed exceptions of the harness. Library code throws, never exits; the command line turns each
// into one line on stderr and a non-zero exit code.
#pragma once

#include <stdexcept>
#include <string>

namespace rssm {

// A bad configuration key or value, or a bad command line. The message names the key and what is accepted.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A bad or unreadable input file (trace or result). The message names the file and the dataset.
struct FormatError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A broken internal invariant (a bug, not bad input).
struct InternalError : std::logic_error {
  using std::logic_error::logic_error;
};

}  // namespace rssm
