// Helpers shared by the libFuzzer targets: a private scratch folder per fuzzing process and writing the input
// bytes to a file there (the parsers under test read files, not buffers).
// Not a test framework: each target is a plain LLVMFuzzerTestOneInput; tests/fuzz/README (the README's fuzzing
// section) and scripts/fuzz.sh say how to run them.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace rssm::fuzz {

// A folder under $TMPDIR made once per process and removed at exit. libFuzzer's -fork/-jobs modes run several
// processes, hence one folder each rather than a fixed name.
class ScratchDir {
 public:
  ScratchDir() {
    // scripts/fuzz.sh --ci names a fixed folder: file names reach error messages and the string compares libFuzzer
    // learns mutations from, so a random name would make two runs of the same commit explore different inputs.
    if (const char* fixed = std::getenv("REPLAYSSM_FUZZ_SCRATCH"); fixed && *fixed) {
      std::error_code ec;
      std::filesystem::remove_all(fixed, ec);
      if (!std::filesystem::create_directories(fixed, ec)) {
        std::fprintf(stderr, "replayssm fuzz: cannot create %s: %s\n", fixed, ec.message().c_str());
        std::abort();
      }
      path_ = fixed;
      return;
    }
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/replayssm-fuzz-XXXXXX";
    if (!mkdtemp(tmpl.data())) {
      std::perror("replayssm fuzz: mkdtemp");
      std::abort();
    }
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline const std::string& scratch_dir() {
  static const ScratchDir dir;
  return dir.path();
}

// Writes `data` to `path` (truncating); aborts when that fails, since the input would not be tested at all.
inline void write_bytes(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(("replayssm fuzz: cannot write " + path).c_str());
    std::abort();
  }
}

// Crash with a message that says which rule of ours was broken (libFuzzer saves the input that did it).
[[noreturn]] inline void violated(const std::string& what) {
  std::fprintf(stderr, "replayssm fuzz: %s\n", what.c_str());
  std::abort();
}

}  // namespace rssm::fuzz
