// libFuzzer target: the command-line parser, in-process through rssm::cli::main_args (experiments/cli/dispatch.cpp).
// The input is an argument list, one argument per line (the subcommand first). Only paths that neither write files
// nor run experiments are taken:
//   - `run` and `traffic` get --dry-run / nothing extra: they read the config, validate it, expand the sweep and
//     print (the synthetic trace is described, not generated);
//   - every other subcommand gets --help as its first argument: its whole argument list is still parsed (unknown
//     options, missing values, bad types all fail before --help is honoured), but nothing runs;
//   - arguments containing '/' or starting with ".." are refused, and the process works in its own scratch folder
//     (with two small configs, a.ini and b.ini), so any file it could name is one of ours.
// After each input the scratch folder must hold exactly what it held before: a file written there is a bug.
// The contract under test: main_args returns 0 or an error exit code with one line on stderr, never throws.
// Build and run: scripts/fuzz.sh.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "fuzz_util.h"
#include "io/h5.h"

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxArgs = 24;
constexpr size_t kMaxArgLen = 512;

std::set<std::string> listing() {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(rssm::fuzz::scratch_dir())) names.insert(e.path().filename().string());
  return names;
}

const std::set<std::string>& initial_listing() {
  static const std::set<std::string> names = listing();
  return names;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  rssm::h5::silence();
  const std::string& dir = rssm::fuzz::scratch_dir();
  // Tiny geometry: a dry run describes the synthetic source, which builds its parameters.
  const std::string a =
      "[synth]\npreset = custom\nfamily = mamba2\nH = 2\nP = 4\nN = 4\nG = 1\nsteps = 8\nseqs = 1\n"
      "[scheme]\nstate_format = fp32, bf16\n";
  const std::string b = "[run]\nsteps = 3\n[scheme]\ndecoder = eager, magic\n";
  rssm::fuzz::write_bytes(dir + "/a.ini", reinterpret_cast<const uint8_t*>(a.data()), a.size());
  rssm::fuzz::write_bytes(dir + "/b.ini", reinterpret_cast<const uint8_t*>(b.data()), b.size());
  if (chdir(dir.c_str()) != 0) rssm::fuzz::violated("cannot enter " + dir);
  (void)initial_listing();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> words;
  std::string cur;
  for (size_t i = 0; i <= size; ++i) {
    if (i == size || data[i] == '\n') {
      words.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  if (words.empty() || words.size() > kMaxArgs) return -1;  // -1: not added to the corpus
  for (const auto& w : words)
    if (w.size() > kMaxArgLen || w.find('/') != std::string::npos || w.rfind("..", 0) == 0) return -1;

  std::vector<std::string> argv = {"replayssm", words[0]};
  const std::string& sub = words[0];
  if (sub == "run")
    argv.push_back("--dry-run");
  else if (sub != "traffic" && sub != "defaults" && sub != "--help" && sub != "-h" && sub != "help" &&
           sub != "--version")
    argv.push_back("--help");
  argv.insert(argv.end(), words.begin() + 1, words.end());

  const int code = rssm::cli::main_args(argv);
  if (code < 0 || code > 2) rssm::fuzz::violated("main_args returned exit code " + std::to_string(code));
  if (listing() != initial_listing()) rssm::fuzz::violated("a file was created or removed in the scratch folder");
  return 0;
}
