// libFuzzer target: the trace loader. The input bytes are written to a file, which is opened with H5TraceSource
// (all of its validation), read chunk by chunk through read() (bf16 decoding, the finite check) and, when small,
// described by inspect_trace (the statistics path).
// The contract under test: a bad file throws FormatError with one line naming the file; any other exception, a
// sanitizer report, a hang, a huge allocation or an HDF5 handle left open is a bug.
// libhdf5 1.10 itself is not hardened against hostile files: within seconds, byte mutations find heap overflows and
// wild reads inside its own decoders (H5O__msg_iterate_real, H5VM_memcpyvv, ...). So every input first goes to a
// preflight process that walks the file with plain HDF5 calls only (every object, attribute and dataset, read
// whole); an input on which it dies or hangs is an HDF5 bug, not ours, and is rejected (not kept in the corpus,
// counted in the final line). Our code never runs in that process, so nothing of ours is hidden by it. The preflight
// is this same binary started again with REPLAYSSM_FUZZ_PREFLIGHT set; it serves file names over a pipe, so the
// cost is one walk per input, and a new process only after a crash (forking the fuzzer per input costs 20 ms).
// Leaks that libhdf5 makes on its own error paths are suppressed by name in tests/fuzz/lsan.supp.
// libhdf5 also trusts sizes in corrupt headers (a 4 GiB object-header buffer in H5C_protect, 1-2 GiB chunk buffers),
// so this target runs with ASan's allocation cap instead of libFuzzer's malloc limit (scripts/fuzz.sh): an oversized
// malloc returns null, which libhdf5 turns into an error and our code into std::bad_alloc, which is not caught
// here and so is reported as our bug, as it should be.
// Build and run: scripts/fuzz.sh.
#include <hdf5.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "errors.h"
#include "fuzz_util.h"
#include "io/h5.h"
#include "trace/trace_h5.h"

using namespace rssm;

namespace {

// Bounds of this harness, not of the loader: a valid file may declare far more steps than can be read in one
// fuzzing iteration (HDF5 returns fill values for unwritten chunks, so a tiny file can hold 2^40 steps).
constexpr long long kMaxFloatsPerRead = 1 << 20;
constexpr long long kMaxFloatsTotal = 1 << 20;

// The preflight walk: what the loader asks of HDF5, with no judgement of the content.
constexpr hsize_t kMaxPreflightElems = 1 << 20;

void read_attr(hid_t obj, const char* name) {
  h5::Handle a(H5Aopen(obj, name, H5P_DEFAULT));
  if (!a.valid()) return;
  h5::Handle type(H5Aget_type(a)), space(H5Aget_space(a));
  if (!type.valid() || !space.valid()) return;
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n <= 0 || n > static_cast<hssize_t>(kMaxPreflightElems)) return;
  if (H5Tget_class(type) == H5T_STRING) {
    if (H5Tis_variable_str(type) > 0) {
      h5::Handle mt(H5Tcopy(H5T_C_S1));
      H5Tset_size(mt, H5T_VARIABLE);
      H5Tset_cset(mt, H5Tget_cset(type));
      std::vector<char*> p(static_cast<size_t>(n), nullptr);
      if (H5Aread(a, mt, p.data()) >= 0) H5Dvlen_reclaim(mt, space, H5P_DEFAULT, p.data());
    } else {
      std::vector<char> buf(static_cast<size_t>(n) * H5Tget_size(type) + 1);
      H5Aread(a, type, buf.data());
    }
  } else {
    std::vector<double> buf(static_cast<size_t>(n));
    H5Aread(a, H5T_NATIVE_DOUBLE, buf.data());
  }
}

herr_t visit_attr(hid_t obj, const char* name, const H5A_info_t*, void*) {
  H5Aexists(obj, name);
  read_attr(obj, name);
  return 0;
}

void visit_dataset(hid_t root, const char* name) {
  h5::Handle dapl(H5Pcreate(H5P_DATASET_ACCESS));
  H5Pset_chunk_cache(dapl, 521, size_t{1} << 20, 1.0);
  h5::Handle ds(H5Dopen2(root, name, dapl));
  if (!ds.valid()) return;
  H5Aiterate2(ds, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, visit_attr, nullptr);
  h5::Handle type(H5Dget_type(ds)), space(H5Dget_space(ds)), dcpl(H5Dget_create_plist(ds));
  if (dcpl.valid() && H5Pget_layout(dcpl) == H5D_CHUNKED) {
    hsize_t c[H5S_MAX_RANK];
    H5Pget_chunk(dcpl, H5S_MAX_RANK, c);
  }
  if (!type.valid() || !space.valid()) return;
  const H5T_class_t cls = H5Tget_class(type);
  if (cls != H5T_FLOAT && cls != H5T_INTEGER) return;
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 1 || rank > H5S_MAX_RANK) return;
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  hsize_t row = 1;  // elements per index of the first (step) axis
  for (int d = 1; d < rank; ++d)
    row = dims[d] > kMaxPreflightElems ? kMaxPreflightElems + 1 : std::min(row * dims[d], kMaxPreflightElems + 1);
  if (dims[0] == 0 || row == 0 || row > kMaxPreflightElems) return;
  // Like the loader: the first rows and the last ones, each as float and as raw uint16 (the bf16 path).
  const hsize_t rows = std::min<hsize_t>(dims[0], std::max<hsize_t>(1, kMaxPreflightElems / row));
  for (hsize_t first : {hsize_t{0}, dims[0] - rows}) {
    std::vector<hsize_t> start(dims.size(), 0), count(dims);
    start[0] = first;
    count[0] = rows;
    const hsize_t total = rows * row;
    h5::Handle fspace(H5Dget_space(ds)), mspace(H5Screate_simple(1, &total, nullptr));
    if (H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0) return;
    std::vector<float> buf(total);
    H5Dread(ds, H5T_NATIVE_FLOAT, mspace, fspace, H5P_DEFAULT, buf.data());
    std::vector<uint16_t> raw(total);
    H5Dread(ds, H5T_NATIVE_UINT16, mspace, fspace, H5P_DEFAULT, raw.data());
  }
}

herr_t visit_object(hid_t root, const char* name, const H5O_info_t* info, void*) {
  if (info->type == H5O_TYPE_DATASET) {
    visit_dataset(root, name);
  } else {
    h5::Handle obj(H5Oopen(root, name, H5P_DEFAULT));
    if (obj.valid()) H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, visit_attr, nullptr);
  }
  return 0;
}

void walk(const std::string& path) {
  h5::Handle f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!f.valid()) return;
  H5Aiterate2(f, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, visit_attr, nullptr);
  H5Ovisit(f, H5_INDEX_NAME, H5_ITER_NATIVE, visit_object, nullptr);
  // The visit stops at the first object it cannot decode; the loader opens these by name, so they are opened by
  // name here too, one path component at a time as h5::exists does.
  for (const char* group : {"params", "inputs"}) {
    if (H5Lexists(f, group, H5P_DEFAULT) <= 0) continue;
    h5::Handle g(H5Gopen2(f, group, H5P_DEFAULT));
  }
  for (const char* name : {"params/A_log", "params/D", "params/dt_bias", "inputs/x", "inputs/dt", "inputs/B",
                           "inputs/C", "inputs/z", "inputs/q", "inputs/k", "inputs/v", "inputs/a", "inputs/b",
                           "readout"}) {
    const std::string n(name), parent = n.substr(0, n.find('/'));
    if (parent != n && H5Lexists(f, parent.c_str(), H5P_DEFAULT) <= 0) continue;
    if (H5Lexists(f, name, H5P_DEFAULT) > 0) visit_dataset(f, name);
  }
}

// The preflight process: reads file names from stdin, one a line, and answers each with one byte once the walk is
// done. Starts before libFuzzer installs its handlers, so a crash here is just an exit.
[[noreturn]] void serve_preflight() {
  h5::silence();
  std::string line;
  for (int c; (c = std::getchar()) != EOF;) {
    if (c != '\n') {
      line.push_back(static_cast<char>(c));
      continue;
    }
    walk(line);
    line.clear();
    std::putchar('1');
    std::fflush(stdout);
  }
  _exit(0);  // skips LeakSanitizer: only a crash or a hang counts here
}

class Preflight {
 public:
  ~Preflight() { stop(); }
  long long crashed = 0, hung = 0;

  // True when plain HDF5 calls survive the file.
  bool survives(const std::string& path) {
    if (pid_ > 0 && ++uses_ > kRestartEvery) stop();  // bounds any state libhdf5 corrupted silently
    if (pid_ < 0) start();
    const std::string msg = path + "\n";
    bool ok = write(to_, msg.data(), msg.size()) == static_cast<ssize_t>(msg.size());
    char answer = 0;
    if (ok) {
      pollfd p{from_, POLLIN, 0};
      if (poll(&p, 1, kTimeoutMs) != 1) {
        ++hung;
        ok = false;
      } else {
        ok = read(from_, &answer, 1) == 1 && answer == '1';
        if (!ok) ++crashed;
      }
    }
    if (!ok) stop();
    return ok;
  }

 private:
  static constexpr int kTimeoutMs = 3000;  // a walk of a small file takes milliseconds; libhdf5 can loop forever
  static constexpr int kRestartEvery = 2000;

  void start() {
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0) fuzz::violated("pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, down[0], 0);
    posix_spawn_file_actions_adddup2(&fa, up[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    for (int fd : {down[0], down[1], up[0], up[1]}) posix_spawn_file_actions_addclose(&fa, fd);
    std::vector<std::string> env_strings = {"REPLAYSSM_FUZZ_PREFLIGHT=1"};
    for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
    std::vector<char*> env;
    for (auto& e : env_strings) env.push_back(e.data());
    env.push_back(nullptr);
    char exe[] = "/proc/self/exe";
    char* argv[] = {exe, nullptr};
    if (posix_spawn(&pid_, exe, &fa, nullptr, argv, env.data()) != 0) fuzz::violated("cannot start the preflight");
    posix_spawn_file_actions_destroy(&fa);
    close(down[0]);
    close(up[1]);
    to_ = down[1];
    from_ = up[0];
    uses_ = 0;
  }

  void stop() {
    if (pid_ < 0) return;
    close(to_);
    close(from_);
    kill(pid_, SIGKILL);
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

  pid_t pid_ = -1;
  int to_ = -1, from_ = -1, uses_ = 0;
};

Preflight& preflight() {
  static Preflight p;
  return p;
}

void check_message(const std::string& msg, const std::string& path) {
  if (msg.find(path) == std::string::npos || msg.find('\n') != std::string::npos)
    fuzz::violated("FormatError does not name the file on one line: " + msg);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (std::getenv("REPLAYSSM_FUZZ_PREFLIGHT")) serve_preflight();
  h5::silence();
  std::signal(SIGPIPE, SIG_IGN);  // a preflight that died is noticed by its answer, not by a signal
  std::atexit([] {
    std::fprintf(stderr, "fuzz_trace: inputs rejected because libhdf5 itself crashed on them: %lld, hung: %lld\n",
                 preflight().crashed, preflight().hung);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::scratch_dir() + "/input.h5";
  fuzz::write_bytes(path, data, size);
  if (!preflight().survives(path)) {
    // REPLAYSSM_FUZZ_KEEP_REJECTED=DIR keeps them, for a report to HDF5 or to check that the preflight is right.
    if (const char* keep = std::getenv("REPLAYSSM_FUZZ_KEEP_REJECTED"))
      fuzz::write_bytes(std::string(keep) + "/rejected-" + std::to_string(preflight().crashed + preflight().hung),
                        data, size);
    return -1;  // not ours to fix, and not to be mutated further
  }
  try {
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
  } catch (const FormatError& e) {
    check_message(e.what(), path);
  }
  // Every handle must have been closed by its RAII owner, on success and on every error path.
  const ssize_t open_ids = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
  if (open_ids != 0) fuzz::violated("HDF5 identifiers left open after loading: " + std::to_string(open_ids));
  return 0;
}
