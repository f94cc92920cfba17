// libFuzzer target: the trace loader. The input bytes are written to a file, which is opened with H5TraceSource
// (all of its validation), read chunk by chunk through read() (bf16 decoding, the finite check) and, when small,
// described by inspect_trace (the statistics path): `exercise()` below, the same code `replayssm run` and
// `replayssm inspect` run on a trace.
// The contract under test: a bad file throws FormatError with one line naming the file; any other exception, a
// sanitizer report, a hang, a huge allocation or an HDF5 handle left open is a bug.
//
// libhdf5 1.10 itself is not hardened against hostile files: within seconds, byte mutations find heap overflows,
// use-after-free and wild reads inside its own decoders (H5O__msg_iterate_real under H5Aexists, H5VM_memcpyvv under
// H5Dread, ...). Those are not ours to fix and must neither fail the run nor hide a bug of ours. So every input first
// runs in a preflight: a fork() of this very process, which runs `exercise()` on the input in an exact copy of this
// process's memory (the same heap layout, the same libhdf5 state). If the preflight survives, this process runs the
// input and, being in the same state, survives too. If it crashes or hangs, its sanitizer report is classified by its
// stack (`classify_report`):
//  - inside libhdf5 (the first frame that is not a sanitizer interceptor or libc is in libhdf5, and, for a write,
//    the memory it wrote belongs to libhdf5 too): rejected, counted in the final line, not kept in the corpus and not
//    mutated further;
//  - anything else (a frame of ours on top, libhdf5 writing into a buffer of ours, no readable stack): a finding.
//    The input then runs here as well, so libFuzzer reports and saves it; if it does not crash here, the
//    preflight's report is printed and the run is stopped all the same.
// Why a fork and not a separate long-lived process, nor a hand-written walk of plain HDF5 calls (both tried before):
// a walk has to make every libhdf5 call the loader makes, in the same order, and fell out of step; and any other
// process differs from this one in heap layout and in the libhdf5 state earlier inputs left behind, so a wild read
// of libhdf5 that lands in a redzone here could land in harmless memory there (issue 8: about one run in ten failed
// on such reads). A fork is the only preflight that sees exactly what this process will see. It costs one fork per
// input (a few ms; the RSS-limit thread is off for this target, since a fork while it holds a lock could deadlock).
//
// Leaks that libhdf5 makes on its own error paths are suppressed by name in tests/fuzz/lsan.supp (the preflight
// exits without the leak check; leaks are judged in this process).
// libhdf5 also trusts sizes in corrupt headers (a 4 GiB object-header buffer in H5C_protect, 1-2 GiB chunk buffers),
// so this target runs with ASan's allocation cap instead of libFuzzer's malloc limit (scripts/fuzz.sh): an oversized
// malloc returns null, which libhdf5 turns into an error and our code into std::bad_alloc, which is not caught
// here and so is reported as our bug, as it should be.
// Build and run: scripts/fuzz.sh (tests/fuzz/README.md).
#include <hdf5.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "errors.h"
#include "fuzz_util.h"
#include "io/h5.h"
#include "trace/trace_h5.h"

extern "C" void __sanitizer_print_stack_trace();
extern "C" void __sanitizer_set_death_callback(void (*callback)());

using namespace rssm;

namespace {

// Bounds of this harness, not of the loader: a valid file may declare far more steps than can be read in one
// fuzzing iteration (HDF5 returns fill values for unwritten chunks, so a tiny file can hold 2^40 steps).
constexpr long long kMaxFloatsPerRead = 1 << 20;
constexpr long long kMaxFloatsTotal = 1 << 20;

// A loader run on a small file takes milliseconds; libhdf5 can loop forever on a corrupt one. The preflight prints
// its own stack after kHangSeconds. Generous, so that a slow machine never turns a slow input into a rejected one.
constexpr unsigned kHangSeconds = 8;

// Everything this target does with an input; throws FormatError for a bad file, anything else is a bug.
void exercise(const std::string& path) {
  H5TraceSource src(path);
  long long per_step = 0;
  for (const auto& s : src.model().inputs()) per_step += s.elems() * static_cast<long long>(src.seqs());
  const int piece = static_cast<int>(std::clamp<long long>(kMaxFloatsPerRead / std::max(per_step, 1LL), 0, 64));
  InputChunk chunk;
  long long read_floats = 0;
  if (piece > 0) {
    // The first chunks, then the last one (the end of the step range is where off-by-one errors live).
    for (long long s = 0; s < src.steps() && read_floats < kMaxFloatsTotal; s += piece) {
      const int n = static_cast<int>(std::min<long long>(piece, src.steps() - s));
      src.read(s, n, chunk);
      read_floats += n * per_step;
    }
    const long long last = std::max(0LL, src.steps() - piece);
    src.read(last, static_cast<int>(src.steps() - last), chunk);
  }
  (void)src.readout();
  (void)src.describe();
  if (src.steps() * per_step <= kMaxFloatsTotal) (void)format_trace_info(inspect_trace(path, 7));
}

// ---- classification of a preflight crash report ----

struct Frame {
  std::string function;  // "H5Aexists", "rssm::h5::has_attr(long, std::string const&)", "" when unsymbolised
  std::string where;     // "(/lib/x86_64-linux-gnu/libhdf5_serial.so.103+0x5c2f1)" or "/work/lib/io/h5.cpp:185:10"
};

// Sanitizer runtime and libc frames stand between a bad access and the code that made it.
bool is_runtime(const Frame& f) {
  for (const char* prefix : {"__interceptor_", "___interceptor_", "__asan", "__sanitizer", "__ubsan", "__lsan",
                             "__interception", "__restore_rt", "__libc_", "__GI_", "__memcpy", "__memmove",
                             "__memset", "__strlen"})
    if (f.function.rfind(prefix, 0) == 0) return true;
  for (const char* fn : {"memcpy", "memmove", "memset", "memcmp", "strlen", "strcmp", "strncpy", "strcpy", "malloc",
                         "free", "calloc", "realloc", "posix_memalign", "aligned_alloc"})
    if (f.function == fn) return true;
  if (f.function.rfind("operator new", 0) == 0 || f.function.rfind("operator delete", 0) == 0) return true;
  return f.where.find("/libc.so") != std::string::npos || f.where.find("libasan") != std::string::npos;
}

bool in_libhdf5(const Frame& f) { return f.where.find("libhdf5") != std::string::npos; }

// The stacks of a sanitizer report in order, each with the line that introduced it ("READ of size 8 ...",
// "allocated by thread T0 here:", our hang marker).
struct Stack {
  std::string header;
  std::vector<Frame> frames;
};

std::vector<Stack> parse_stacks(const std::string& report) {
  static const std::regex frame_re(R"(^\s*#\d+ 0x[0-9a-fA-F]+(?: in (.+?))?\s+((?:\(.*\))|(?:\S+:\d+(?::\d+)?))\s*$)");
  std::vector<Stack> stacks;
  std::istringstream in(report);
  std::string line, last_text;
  bool in_stack = false;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, frame_re)) {
      if (!in_stack) stacks.push_back({last_text, {}});
      in_stack = true;
      stacks.back().frames.push_back({m[1].str(), m[2].str()});
    } else {
      in_stack = false;
      if (line.find_first_not_of(" \t") != std::string::npos) last_text = line;
    }
  }
  return stacks;
}

// The first frame that is neither runtime nor libc; frames up to and including `skip_through` (a function name) are
// dropped first (the hang handler's own frames). Null when none is left.
const Frame* top_frame(const Stack& s, const std::string& skip_through = "") {
  size_t i = 0;
  if (!skip_through.empty()) {
    for (size_t j = 0; j < s.frames.size(); ++j)
      if (s.frames[j].function.find(skip_through) != std::string::npos) i = j + 1;
  }
  for (; i < s.frames.size(); ++i)
    if (!is_runtime(s.frames[i])) return &s.frames[i];
  return nullptr;
}

constexpr const char* kHangMarker = "replayssm preflight: no answer after the hang limit; stack of the loader:";

struct Verdict {
  bool libhdf5 = false;  // rejected: libhdf5's own bug
  std::string why;       // one line for the log
};

Verdict classify_report(const std::string& report) {
  const bool hang = report.find(kHangMarker) != std::string::npos;
  const std::vector<Stack> stacks = parse_stacks(report);
  if (stacks.empty()) return {false, "no stack in the preflight's report"};
  const Frame* top = top_frame(stacks[0], hang ? "on_preflight_hang" : "");
  if (!top) return {false, "no frame outside the sanitizer runtime"};
  if (!in_libhdf5(*top)) return {false, "top frame is ours: " + top->function + " " + top->where};
  // libhdf5 writing into memory of ours (live or freed) means we handed it a wrong buffer: ours. A read is judged
  // libhdf5's whoever owned the memory: the loader hands libhdf5 only live, correctly sized inputs (names, shapes),
  // while libhdf5's wild and stale reads land in whatever the heap holds, our freed vectors included.
  const bool write = report.find("WRITE of size") != std::string::npos ||
                     report.find("caused by a WRITE memory access") != std::string::npos;
  for (size_t i = 1; write && i < stacks.size(); ++i) {
    const std::string& h = stacks[i].header;
    if (h.find("allocated by") == std::string::npos && h.find("freed by") == std::string::npos) continue;
    const Frame* owner = top_frame(stacks[i]);
    if (owner && !in_libhdf5(*owner))
      return {false, "libhdf5 wrote into memory of ours, from " + owner->function + " " + owner->where};
  }
  // Name the first libhdf5 function with a symbol (static ones have none) for the log.
  std::string name = "libhdf5";
  for (const Frame* f = top; f < stacks[0].frames.data() + stacks[0].frames.size(); ++f)
    if (in_libhdf5(*f) && !f->function.empty()) {
      name = f->function;
      break;
    }
  return {true, std::string(hang ? "libhdf5 hung" : "libhdf5 crashed") + " in " + name};
}

// ---- the preflight: a fork of this process ----

void on_preflight_hang(int) {
  // Not async-signal-safe, and need not be: the process is stopped right after, and only its report is read.
  std::fprintf(stderr, "%s\n", kHangMarker);
  __sanitizer_print_stack_trace();
  _exit(3);
}

// A sanitizer report ends in its death callback: in the preflight that is this, instead of libFuzzer's (which would
// save the input as a crash artifact of this run).
void on_preflight_death() { _exit(2); }

class Preflight {
 public:
  long long crashed = 0, hung = 0;  // inputs rejected as libhdf5's own bugs

  enum class Result { Survived, Libhdf5, Ours };

  // Runs the loader on `path` in a fork of this process. `report` receives the fork's sanitizer report when the
  // result is not Survived.
  Result check(const std::string& path, std::string& report, std::string& why) {
    const std::string log = fuzz::scratch_dir() + "/preflight.log";
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid < 0) fuzz::violated("fork failed");
    if (pid == 0) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || dup2(fd, STDERR_FILENO) < 0) _exit(4);
      __sanitizer_set_death_callback(on_preflight_death);
      // libFuzzer's own handlers would save artifacts or time the child out as if it were the fuzzing process.
      for (int sig : {SIGABRT, SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGXFSZ}) std::signal(sig, SIG_DFL);
      std::signal(SIGALRM, on_preflight_hang);
      alarm(kHangSeconds);
      try {
        exercise(path);
      } catch (...) {
        // FormatError is the contract; any other exception is judged in the fuzzing process, which runs the same input.
      }
      _exit(0);  // skips LeakSanitizer and atexit handlers: only a crash or a hang counts here
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
      if (errno != EINTR) fuzz::violated("waitpid failed");
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Result::Survived;
    std::ifstream in(log);
    report.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (report.empty() && WIFSIGNALED(status))
      report = "preflight killed by signal " + std::to_string(WTERMSIG(status)) + " with no report";
    const Verdict v = classify_report(report);
    why = v.why;
    if (!v.libhdf5) return Result::Ours;
    ++(report.find(kHangMarker) != std::string::npos ? hung : crashed);
    return Result::Libhdf5;
  }
};

Preflight& preflight() {
  static Preflight p;
  return p;
}

void check_message(const std::string& msg, const std::string& path) {
  if (msg.find(path) == std::string::npos || msg.find('\n') != std::string::npos)
    fuzz::violated("FormatError does not name the file on one line: " + msg);
}

// REPLAYSSM_FUZZ_CLASSIFY=FILE: classify one saved sanitizer report and exit (0 libhdf5's, 1 ours), so that the
// classification can be checked by hand on a report.
void classify_file_and_exit(const char* file) {
  std::ifstream in(file);
  const std::string report((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const Verdict v = classify_report(report);
  std::printf("%s: %s\n", v.libhdf5 ? "libhdf5's" : "ours", v.why.c_str());
  std::fflush(stdout);
  _exit(v.libhdf5 ? 0 : 1);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* f = std::getenv("REPLAYSSM_FUZZ_CLASSIFY")) classify_file_and_exit(f);
  h5::silence();
  std::atexit([] {
    std::fprintf(stderr, "fuzz_trace: inputs rejected because libhdf5 itself crashed on them: %lld, hung: %lld\n",
                 preflight().crashed, preflight().hung);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::scratch_dir() + "/input.h5";
  fuzz::write_bytes(path, data, size);
  std::string report, why;
  const Preflight::Result pre = preflight().check(path, report, why);
  if (pre == Preflight::Result::Libhdf5) {
    // REPLAYSSM_FUZZ_KEEP_REJECTED=DIR keeps them, for a report to HDF5 or to check that the preflight is right.
    if (const char* keep = std::getenv("REPLAYSSM_FUZZ_KEEP_REJECTED")) {
      const std::string base = std::string(keep) + "/rejected-" + std::to_string(preflight().crashed + preflight().hung);
      fuzz::write_bytes(base, data, size);
      fuzz::write_bytes(base + ".report", reinterpret_cast<const uint8_t*>(report.data()), report.size());
    }
    return -1;  // not ours to fix, and not to be mutated further
  }
  try {
    exercise(path);
  } catch (const FormatError& e) {
    check_message(e.what(), path);
  }
  if (pre == Preflight::Result::Ours) {
    // The same input crashed the preflight in our code (or with no readable stack) but not this process.
    std::fprintf(stderr, "%s\n", report.c_str());
    fuzz::violated("the loader crashed or hung on this input in the preflight fork (" + why +
                   "; its report is above) but not here");
  }
  // Every handle must have been closed by its RAII owner, on success and on every error path.
  const ssize_t open_ids = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
  if (open_ids != 0) fuzz::violated("HDF5 identifiers left open after loading: " + std::to_string(open_ids));
  return 0;
}
