#!/usr/bin/env bash
# The whole test suite (the README's test command; CI runs it): install what is missing, then
#   1. build/       the normal build (Release, CUDA when nvcc is found) and every CPU test through ctest;
#   2. build-asan/  the CPU code with AddressSanitizer + UndefinedBehaviorSanitizer (g++, CUDA off) and the same
#                   CPU tests under them: any report fails the test that triggered it;
#   3. build-fuzz/  the libFuzzer targets (clang++), each over its committed corpus and then a fixed number of mutated
#                   inputs from a fixed seed (scripts/fuzz.sh --ci); libhdf5's own crashes on mutated trace files are
#                   predicted by a fork of the fuzzer and rejected, so they cannot fail this part.
#   4. analysis     pytest over the analysis package (tests/python/test_analysis.py) on result files the Release
#                   replayssm makes during the run, the --quick reproduction included (about a minute), and over
#                   scripts/bench_table.py's A/B and targets tables (tests/python/test_bench_table.py), the device bundle and the
#                   device's A/B runner (test_dist_pack.py, test_gpu_ab.py, with stand-in programs), the static SASS
#                   counter on a hand-written listing (test_sass_loops.py), gpu_sanitize.sh's refusals
#                   (test_gpu_sanitize.py), the device call's carry_aside.sh and gpu_steps.sh (test_carry_aside.py,
#                   test_gpu_steps.py), ab_relink.sh's map of kernel files to benchmark rows (test_ab_relink.py): its passed and
#                   failed counts join the closing line; pytest finding no test (exit 5) counts as a failure.
# Every part runs even when an earlier one has failing tests (a build error stops at once); the end shows each
# part's duration, the ctest summaries again, and one closing line "total: N passed, N failed" (ctest tests of both
# builds, one per fuzz target and one for fuzz_trace's crash classification). Extra arguments go to both ctest
# runs (e.g. -R config).
# GPU tests (label `gpu`) skip themselves where no device is present; scripts/gpu_sanitize.sh runs them under
# compute-sanitizer on a GPU machine.
#
# Sanitizer settings of part 2 (the same by hand: export them, then build-asan/tests/replayssm_tests):
#   ASAN_OPTIONS  detect_leaks=1 (LeakSanitizer at the exit of every test process and every CLI run it starts),
#                 halt_on_error=1 (with -fno-sanitize-recover=all: the first report aborts), and the cheap stricter
#                 checks detect_stack_use_after_return, check_initialization_order, strict_init_order
#   UBSAN_OPTIONS print_stacktrace=1, halt_on_error=1
# No suppressions: g++'s libgomp, HDF5, Boost and fmt run clean under these settings (the OpenMP-parallel
# synthesiser and decoders included). If one is ever needed it goes in a file here, with the reason beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
# Tests run in parallel processes on few cores; libgomp's spinning barrier wait would make them fight for the cores
# (tests/CMakeLists.txt sets the same for ctest's own runs).
export OMP_WAIT_POLICY=passive

part_names=()
part_secs=()
failed_parts=()
passed_total=0
failed_total=0

report() {
  # A build error ends the script early: count it, so the closing line never reads as "nothing failed".
  if [ "$1" -ne 0 ] && [ "$failed_total" -eq 0 ]; then failed_total=1; fi
  echo
  echo "test.sh: time per part"
  for i in "${!part_names[@]}"; do
    printf '  %-36s %5d s\n' "${part_names[$i]}" "${part_secs[$i]}"
  done
  for log in build/ctest.log build-asan/ctest.log; do
    if [ -f "$log" ]; then
      echo "$log:"
      grep -E 'tests passed|tests failed out of|Total Test time' "$log" | sed 's/^/  /' || true
    fi
  done
  if [ ${#failed_parts[@]} -gt 0 ]; then echo "test.sh: failed: ${failed_parts[*]}"; fi
  echo "total: ${passed_total} passed, ${failed_total} failed"
}
trap 'report $?' EXIT

# timed NAME COMMAND...: runs COMMAND and records its duration; a failing COMMAND is remembered, not fatal.
timed() {
  local name="$1" t0=$SECONDS rc=0
  shift
  "$@" || rc=$?
  part_names+=("$name")
  part_secs+=($((SECONDS - t0)))
  if [ $rc -ne 0 ]; then failed_parts+=("$name"); fi
  return 0
}

# Adds a ctest log's counts to the totals ("95% tests passed, 3 tests failed out of 61").
count_ctest() {
  local line passed failed total
  line=$(grep -E 'tests failed out of [0-9]+' "$1" | tail -1 || true)
  if [ -z "$line" ]; then
    failed_total=$((failed_total + 1))  # ctest did not get as far as a summary
    return
  fi
  failed=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
  total=$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$line")
  passed_total=$((passed_total + total - failed))
  failed_total=$((failed_total + failed))
}

scripts/setup.sh

tests_normal() { ctest --test-dir build --output-on-failure -j"$(nproc)" "$@" 2>&1 | tee build/ctest.log; }
t0=$SECONDS
scripts/build.sh
part_names+=("build (Release)")
part_secs+=($((SECONDS - t0)))
timed "tests" tests_normal "$@"
count_ctest build/ctest.log

export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
t0=$SECONDS
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DREPLAYSSM_SANITIZE=ON -DREPLAYSSM_CUDA=OFF \
  -DREPLAYSSM_BENCHMARKS=OFF >/dev/null
cmake --build build-asan -j"$(nproc)"
part_names+=("build with ASan + UBSan")
part_secs+=($((SECONDS - t0)))
tests_asan() { ctest --test-dir build-asan --output-on-failure -j"$(nproc)" -LE gpu "$@" 2>&1 | tee build-asan/ctest.log; }
timed "tests under ASan + UBSan" tests_asan "$@"
count_ctest build-asan/ctest.log
unset ASAN_OPTIONS UBSAN_OPTIONS

rm -f build-fuzz/fuzz-summary.txt
timed "fuzzing (build + fixed seed and inputs)" scripts/fuzz.sh --ci
fuzz_line=$(grep -E '^fuzz: [0-9]+ passed, [0-9]+ failed' build-fuzz/fuzz-summary.txt 2>/dev/null || echo "fuzz: 0 passed, 1 failed")
passed_total=$((passed_total + $(sed -E 's/fuzz: ([0-9]+) passed.*/\1/' <<<"$fuzz_line")))
failed_total=$((failed_total + $(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$fuzz_line")))

# Part 4: the analysis package. pytest's own summary line gives the counts; exit 5 (no tests collected) means the
# wiring is broken and counts as one failure, as does any run whose summary line is missing.
tests_python() {
  local rc=0
  REPLAYSSM="$PWD/build/experiments/replayssm" python3 -m pytest -q -p no:cacheprovider tests/python/test_analysis.py \
    tests/python/test_bench_table.py tests/python/test_dist_pack.py tests/python/test_gpu_ab.py \
    tests/python/test_sass_loops.py tests/python/test_gpu_sanitize.py tests/python/test_carry_aside.py \
    tests/python/test_gpu_steps.py tests/python/test_ab_relink.py 2>&1 | tee build/pytest.log || rc=$?  # pipefail: pytest's status, not tee's
  if [ "$rc" -eq 5 ]; then echo "test.sh: pytest collected no tests (exit 5): the analysis tests are not wired" >&2; fi
  return "$rc"
}
timed "analysis (pytest, --quick reproduction)" tests_python
py_line=$(grep -E '[0-9]+ (passed|failed|errors?)' build/pytest.log | tail -1 || true)
py_passed=$(grep -oE '[0-9]+ passed' <<<"$py_line" | grep -oE '[0-9]+' || echo 0)
py_failed=0
for n in $(grep -oE '[0-9]+ (failed|errors?)' <<<"$py_line" | grep -oE '^[0-9]+' || true); do py_failed=$((py_failed + n)); done
if [ -z "$py_line" ] || { [ "$py_passed" -eq 0 ] && [ "$py_failed" -eq 0 ]; }; then py_failed=1; fi
passed_total=$((passed_total + py_passed))
failed_total=$((failed_total + py_failed))

[ ${#failed_parts[@]} -eq 0 ]
