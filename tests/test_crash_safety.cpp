// Crash safety of sweeps, with real signals: SIGINT stops at a step boundary and keeps finished batches, SIGKILL
// leaves a complete file (or none), and --resume finishes the sweep with per-run results equal, bit for bit, to an
// uninterrupted run's.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "io/results.h"
#include "test_util.h"

extern char** environ;

using namespace rssm;

namespace {

// A sweep of 4 points, one per batch, each taking a noticeable time.
const char* kSweep =
    "[synth]\npreset = custom\nfamily = mamba2\nH = 8\nP = 32\nN = 64\nG = 1\nsteps = 3072\nseqs = 2\nseed = 2\n"
    "[run]\nbatch = 1\n[metrics]\nvocab = 128\n"
    "[scheme]\ndecoder = replay\nstate_format = fp32, bf16\ninterval = 8, 16\n";

pid_t spawn_cli(const std::vector<std::string>& args, const std::string& out, const std::string& err) {
  std::vector<std::string> argv = {REPLAYSSM_CLI};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  REQUIRE(posix_spawn(&pid, cargv[0], &fa, nullptr, cargv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Completed runs in a result file, or -1 while it does not exist / cannot be read.
int completed_runs(const std::string& path) {
  if (access(path.c_str(), F_OK) != 0) return -1;
  try {
    int n = 0;
    for (const auto& r : read_result_file(path).runs) n += r.completed();
    return n;
  } catch (const std::exception&) {
    return -2;  // never expected: the file on disk is always complete
  }
}

// Waits until the file holds at least `n` completed runs (or the process ends).
bool wait_for_runs(pid_t pid, const std::string& path, int n) {
  for (int i = 0; i < 6000; ++i) {
    const int c = completed_runs(path);
    REQUIRE(c != -2);
    if (c >= n) return true;
    if (waitpid(pid, nullptr, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

void check_same_runs(const std::string& a, const std::string& b) {
  const ResultSet x = read_result_file(a), y = read_result_file(b);
  REQUIRE(x.runs.size() == y.runs.size());
  for (size_t i = 0; i < x.runs.size(); ++i) {
    const auto& rx = x.runs[i];
    const auto& ry = y.runs[i];
    REQUIRE(rx.id == ry.id);
    REQUIRE(rx.groups.size() == ry.groups.size());
    for (size_t g = 0; g < rx.groups.size(); ++g) {
      REQUIRE(rx.groups[g].series.size() == ry.groups[g].series.size());
      for (size_t s = 0; s < rx.groups[g].series.size(); ++s) {
        INFO(rx.id << " " << rx.groups[g].series[s].first);
        CHECK(rx.groups[g].series[s].second == ry.groups[g].series[s].second);  // bit for bit
      }
    }
  }
}

}  // namespace

TEST_CASE("SIGINT stops cleanly, keeps finished batches, and --resume finishes the sweep bit for bit", "[crash]") {
  test::TempDir d;
  test::write_text(d / "sweep.ini", kSweep);
  const std::string full = d / "full.h5", part = d / "part.h5";
  // The uninterrupted run.
  pid_t p = spawn_cli({"run", d / "sweep.ini", "--quiet", "-o", full}, d / "o1", d / "e1");
  REQUIRE(wait_exit(p) == 0);
  REQUIRE(completed_runs(full) == 4);

  p = spawn_cli({"run", d / "sweep.ini", "--quiet", "-o", part}, d / "o2", d / "e2");
  REQUIRE(wait_for_runs(p, part, 1));
  kill(p, SIGINT);
  const int code = wait_exit(p);
  const std::string err = test::read_text(d / "e2");
  INFO(err);
  // Three batches are still to run when the signal goes (each takes a good fraction of a second), so the run must
  // have been interrupted: a sweep that finished first would make this test pass without testing anything.
  REQUIRE(code == 130);
  CHECK_THAT(err, Catch::Contains("interrupted") && Catch::Contains("--resume"));
  const int kept = completed_runs(part);
  CHECK(kept >= 1);
  CHECK(kept < 4);
  CHECK(test::count_files_containing(d.path(), ".tmp.") == 0);
  p = spawn_cli({"run", d / "sweep.ini", "--quiet", "--resume", "-o", part}, d / "o3", d / "e3");
  REQUIRE(wait_exit(p) == 0);
  CHECK_THAT(test::read_text(d / "e3"), Catch::Contains("already complete"));
  REQUIRE(completed_runs(part) == 4);
  check_same_runs(full, part);
}

TEST_CASE("SIGKILL leaves the last complete file, and --resume finishes it", "[crash]") {
  test::TempDir d;
  test::write_text(d / "sweep.ini", kSweep);
  const std::string full = d / "full.h5", part = d / "part.h5";
  pid_t p = spawn_cli({"run", d / "sweep.ini", "--quiet", "-o", full}, d / "o1", d / "e1");
  REQUIRE(wait_exit(p) == 0);
  p = spawn_cli({"run", d / "sweep.ini", "--quiet", "-o", part}, d / "o2", d / "e2");
  REQUIRE(wait_for_runs(p, part, 2));
  kill(p, SIGKILL);
  // The kill must have landed mid-run, as in the SIGINT case: a sweep that ended first exits 0 (its zombie takes
  // the signal without effect) and leaves a full file, and the rest of this test would then test nothing.
  REQUIRE(wait_exit(p) == 128 + SIGKILL);
  const int kept = completed_runs(part);
  REQUIRE(kept != -2);  // complete and readable, never corrupt
  REQUIRE(kept >= 2);   // the file seen above is not lost
  REQUIRE(kept < 4);    // two batches were still to run
  p = spawn_cli({"run", d / "sweep.ini", "--quiet", "--resume", "-o", part}, d / "o3", d / "e3");
  REQUIRE(wait_exit(p) == 0);
  CHECK_THAT(test::read_text(d / "e3"), Catch::Contains("already complete"));
  CHECK(test::count_files_containing(d.path(), ".tmp.") == 0);  // the killed run's temporary is cleaned up
  check_same_runs(full, part);
}

TEST_CASE("resume refuses a file written by another config", "[crash]") {
  test::TempDir d;
  test::write_text(d / "sweep.ini", std::string(kSweep) + "");
  const std::string out = d / "r.h5";
  auto r = test::run_cli("run " + (d / "sweep.ini") + " --quiet --set synth.steps=64 -o " + out, d);
  REQUIRE(r.code == 0);
  r = test::run_cli("run " + (d / "sweep.ini") + " --quiet --resume --set synth.steps=65 -o " + out, d);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("--resume") && Catch::Contains("different config"));
}

TEST_CASE("sharding and merge give the same runs as one process", "[crash]") {
  test::TempDir d;
  test::write_text(d / "sweep.ini", kSweep);
  const std::string steps = " --set synth.steps=128 --quiet";
  REQUIRE(test::run_cli("run " + (d / "sweep.ini") + steps + " -o " + (d / "full.h5"), d).code == 0);
  REQUIRE(test::run_cli("run " + (d / "sweep.ini") + steps + " --shard 0/3 -o " + (d / "s0.h5"), d).code == 0);
  REQUIRE(test::run_cli("run " + (d / "sweep.ini") + steps + " --shard 1/3 -o " + (d / "s1.h5"), d).code == 0);
  auto r = test::run_cli("merge " + (d / "m.h5") + " " + (d / "s0.h5") + " " + (d / "s1.h5"), d);
  CHECK(r.code != 0);  // shard 2 missing
  CHECK_THAT(r.err, Catch::Contains("2 of 3 shards"));
  REQUIRE(test::run_cli("run " + (d / "sweep.ini") + steps + " --shard 2/3 -o " + (d / "s2.h5"), d).code == 0);
  r = test::run_cli("merge " + (d / "m.h5") + " " + (d / "s2.h5") + " " + (d / "s0.h5") + " " + (d / "s1.h5"), d);
  INFO(r.err);
  REQUIRE(r.code == 0);
  check_same_runs(d / "full.h5", d / "m.h5");
}

TEST_CASE("two jobs and other batchings give the same runs as one job", "[crash]") {
  // Batches change which runs share a reference and where chunks are split (at every flush of any run in the
  // batch); jobs change the threads per batch. Neither may change a number.
  test::TempDir d;
  test::write_text(d / "sweep.ini", std::string(kSweep) + "buffer_len = 0, 24\n");
  const std::string steps = " --set synth.steps=96 --set run.chunk=20 --quiet";
  REQUIRE(test::run_cli("run " + (d / "sweep.ini") + steps + " --set run.batch=0 -o " + (d / "a.h5"), d).code == 0);
  REQUIRE(test::run_cli("run " + (d / "sweep.ini") + steps + " --set run.batch=0 --jobs 2 -o " + (d / "b.h5"), d)
              .code == 0);
  REQUIRE(test::run_cli("run " + (d / "sweep.ini") + steps + " --set run.batch=3 --jobs 2 -o " + (d / "c.h5"), d)
              .code == 0);
  check_same_runs(d / "a.h5", d / "b.h5");
  check_same_runs(d / "a.h5", d / "c.h5");
}
