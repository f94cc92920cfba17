#!/usr/bin/env bash
# Builds the libFuzzer targets (clang++, ASan + UBSan, in build-fuzz/) and runs each for SECONDS (default 20) over
# its seed corpus, tests/fuzz/corpus/<target>/. Exits non-zero when a target crashes, hangs, leaks or breaks one of
# its harness rules; the input that did it is saved as build-fuzz/artifacts/<target>/crash-* (or timeout-*, oom-*,
# leak-*). Reproduce one: build-fuzz/tests/fuzz/<target> FILE. Then fix the bug and copy FILE into
# tests/fuzz/corpus/<target>/ as a regression case (every later run replays the whole corpus first).
#
#   scripts/fuzz.sh             20 s per target (what scripts/test.sh runs: about a minute)
#   scripts/fuzz.sh 3600        a long run: one hour per target
#   FUZZ_TARGETS=fuzz_trace scripts/fuzz.sh 600     one target
#   FUZZ_JOBS=2 scripts/fuzz.sh 600                 several fuzzing processes per target
#
# New inputs that reach new code are kept in build-fuzz/corpus/<target>/ (not in the repository); promote the
# interesting ones by hand. Needs clang, libclang-rt-dev and libomp-dev (scripts/setup.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-20}"
targets=(${FUZZ_TARGETS:-fuzz_trace fuzz_config fuzz_cli})
parallel=()
# -jobs starts separate fuzzing processes that log to fuzz-N.log in the current folder; only for FUZZ_JOBS > 1.
if [ "${FUZZ_JOBS:-1}" -gt 1 ]; then parallel=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS"); fi

cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DREPLAYSSM_FUZZ=ON -DREPLAYSSM_CUDA=OFF -DREPLAYSSM_TESTS=OFF -DREPLAYSSM_BENCHMARKS=OFF >/dev/null
rm -f build-fuzz/fuzz-summary.txt
if ! cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]}" >build-fuzz/build.log 2>&1; then
  grep -E 'error|Error' -A5 build-fuzz/build.log | head -60
  echo "fuzz: the fuzz build failed (full log: build-fuzz/build.log)"
  exit 1
fi

# Dictionaries: every config key and section as the INI parser and --set see them, and the CLI's words. Generated
# from configs/defaults.ini (a test keeps it equal to the program's key table), so they never go stale.
dict_dir="$PWD/build-fuzz/dict"
mkdir -p "$dict_dir"
{
  grep -E '^\[' configs/defaults.ini | sed -E 's/.*/"&"/'
  awk '/^\[/{sec=substr($0,2,length($0)-2)} /^[A-Za-z_]+ =/{print "\"" $1 " = \""; print "\"" sec "." $1 "=\""}' \
    configs/defaults.ini
  printf '"%s"\n' true false inf nan , 0 1 -1 1e308 custom mamba2 gdn fp32 bf16 fp16 e4m3 e5m2 int8 eager replay dual
} >"$dict_dir/fuzz_config.dict"
{
  printf '"%s"\n' run synth inspect traffic merge defaults --help --version --set --output -o --quiet --dry-run \
    --jobs --resume --shard --storage --chunk --batch a.ini b.ini 0/2 1/2
  awk '/^\[/{sec=substr($0,2,length($0)-2)} /^[A-Za-z_]+ =/{print "\"" sec "." $1 "=\""}' configs/defaults.ini
} >"$dict_dir/fuzz_cli.dict"
printf '"%s"\n' "HDF" "replayssm-trace" "mamba2" "gdn" "bfloat16" "inputs" "params" "A_log" "dt_bias" "readout" \
  >"$dict_dir/fuzz_trace.dict"

failed=()
for t in "${targets[@]}"; do
  # Absolute paths: fuzz_cli works inside its own scratch folder.
  work="$PWD/build-fuzz/corpus/$t"
  art="$PWD/build-fuzz/artifacts/$t"
  mkdir -p "$work" "$art"
  rm -f "$art"/*
  # -rss_limit_mb / -malloc_limit_mb: a parser that allocates gigabytes on a bad input is a bug, not a slow case.
  opts=(-max_total_time="$secs" -timeout=20 -rss_limit_mb=2560 -dict="$dict_dir/$t.dict"
        -artifact_prefix="$art/" -print_final_stats=1 "${parallel[@]}")
  asan="${ASAN_OPTIONS:-}"
  case "$t" in
    # The CLI prints usage and errors by design; libFuzzer keeps its own output.
    fuzz_cli) opts+=(-close_fd_mask=3 -malloc_limit_mb=2048) ;;
    fuzz_config) opts+=(-malloc_limit_mb=2048) ;;
    # Full stacks through libhdf5 so that tests/fuzz/lsan.supp can name the HDF5 functions that leak (2x slower).
    # Oversized mallocs return null instead of ending the run (see fuzz_trace.cpp): libhdf5 makes them on corrupt
    # headers and fails cleanly; ours throw std::bad_alloc, which the target reports.
    fuzz_trace)
      asan="$asan:fast_unwind_on_malloc=0:max_allocation_size_mb=256:allocator_may_return_null=1"
      opts+=(-malloc_limit_mb=1000000) ;;
  esac
  echo "fuzz: $t for ${secs}s over tests/fuzz/corpus/$t"
  if ! ASAN_OPTIONS="$asan" LSAN_OPTIONS="suppressions=$PWD/tests/fuzz/lsan.supp:${LSAN_OPTIONS:-}" \
      "build-fuzz/tests/fuzz/$t" "$work" "$PWD/tests/fuzz/corpus/$t" "${opts[@]}" >"build-fuzz/$t.log" 2>&1; then
    failed+=("$t")
    echo "fuzz: $t FAILED (log: build-fuzz/$t.log); the input that did it:"
    ls -1 "$art"/* 2>/dev/null | head -5
    grep -E 'ERROR|SUMMARY|replayssm fuzz:|uncaught|deadly' "build-fuzz/$t.log" | head -20 || true
  else
    grep -E '^stat::(number_of_executed_units|new_units_added)|rejected because|fuzz_trace: inputs rejected' "build-fuzz/$t.log" | tr '\n' ' ' || true
    echo
  fi
done

# One line that test.sh adds to its totals (one per target).
summary="fuzz: $((${#targets[@]} - ${#failed[@]})) passed, ${#failed[@]} failed"
echo "$summary" | tee build-fuzz/fuzz-summary.txt
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}"
  exit 1
fi
