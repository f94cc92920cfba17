// SHA-256 of a file, for provenance: a result file names the exact weights it was computed with, in the form
// Python's hashlib.sha256(...).hexdigest() prints (scripts/train_tiny_hybrid.py stores the same in its fixture).
#pragma once

#include <string>

namespace rssm {

// Lower-case hex digest of the file's bytes. Throws FormatError "<path>: cannot read" when it cannot be read.
std::string sha256_file(const std::string& path);
// Of a byte string (tests).
std::string sha256_bytes(const std::string& bytes);

}  // namespace rssm
