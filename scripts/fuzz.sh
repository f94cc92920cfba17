#!/usr/bin/env bash
# Builds the libFuzzer targets (clang++, ASan + UBSan, in build-fuzz/) and runs each over its seed corpus,
# tests/fuzz/corpus/<target>/, in one of two modes:
#
#   scripts/fuzz.sh --ci            bounded by counts (what scripts/test.sh and so CI run): the committed corpus, then
#                                   a fresh working corpus, seed 1 and a fixed number of mutated inputs per target (the
#                                   table below). About two minutes here. --seed S and FUZZ_RUNS=N change the budget.
#                                   libFuzzer does not promise to repeat its exploration exactly (two runs of one commit
#                                   added 264 and 249 new inputs to fuzz_config's corpus), but nothing outside our code
#                                   can fail the run: libhdf5's own crashes are predicted and rejected (fuzz_trace.cpp).
#   scripts/fuzz.sh SECONDS         open-ended: SECONDS per target, random seed, and the working corpus in
#                                   build-fuzz/corpus/<target>/ kept from run to run (inputs that reached new code
#                                   collect there; promote the interesting ones to tests/fuzz/corpus by hand).
#   scripts/fuzz.sh 3600            a long run: one hour per target
#   FUZZ_TARGETS=fuzz_trace scripts/fuzz.sh 600     one target
#   FUZZ_JOBS=2 scripts/fuzz.sh 600                 several fuzzing processes per target (open-ended mode only)
#
# Exits non-zero when a target crashes, hangs, leaks or breaks one of its harness rules; the input that did it is
# saved as build-fuzz/artifacts/<target>/crash-* (or timeout-*, oom-*, leak-*). Reproduce one:
# build-fuzz/tests/fuzz/<target> FILE. Then fix the bug and copy FILE into tests/fuzz/corpus/<target>/ as a regression
# case (every run replays the whole corpus first). Needs clang, libclang-rt-dev and libomp-dev (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(${FUZZ_TARGETS:-fuzz_trace fuzz_config fuzz_cli})
# Inputs per target in --ci mode, sized so that each target takes 10-60 s on a 2-core machine. The count, not the
# clock, bounds the run: a slower machine takes longer, not fewer inputs.
declare -A ci_runs=([fuzz_trace]=1500 [fuzz_config]=6000 [fuzz_cli]=40000)
mode=time
secs=20
seed=1
while [ $# -gt 0 ]; do
  case "$1" in
    --ci) mode=ci ;;
    --seed) seed="$2"; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *[!0-9]*|'') echo "fuzz.sh: unknown argument '$1' (expected --ci, --seed S or a number of seconds)" >&2; exit 2 ;;
    *) secs="$1" ;;
  esac
  shift
done
parallel=()
# -jobs starts separate fuzzing processes that log to fuzz-N.log in the current folder; only for FUZZ_JOBS > 1.
if [ "$mode" = time ] && [ "${FUZZ_JOBS:-1}" -gt 1 ]; then parallel=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS"); fi

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
checks=${#targets[@]}
# fuzz_trace's crash classification must be able to fail: saved reports, libhdf5's own (libhdf5_*) and ours (ours_*:
# a fault in our frame, libhdf5 overrunning a buffer of ours, a hang in our loop), must each get their verdict.
if [[ " ${targets[*]} " == *" fuzz_trace "* ]]; then
  checks=$((checks + 1))
  wrong=()
  for r in tests/fuzz/reports/*.txt; do
    want=1; [[ "$(basename "$r")" == libhdf5_* ]] && want=0
    got=0; REPLAYSSM_FUZZ_CLASSIFY="$r" build-fuzz/tests/fuzz/fuzz_trace >/dev/null 2>&1 || got=$?
    [ "$got" -eq "$want" ] || wrong+=("$(basename "$r")")
  done
  if [ ${#wrong[@]} -gt 0 ]; then
    echo "fuzz: fuzz_trace classifies these saved crash reports wrongly: ${wrong[*]}"
    failed+=(fuzz_trace-classification)
  else
    echo "fuzz: fuzz_trace's crash classification: $(ls tests/fuzz/reports/*.txt | wc -l) saved reports, each judged right"
  fi
fi
for t in "${targets[@]}"; do
  # Absolute paths: fuzz_cli works inside its own scratch folder.
  art="$PWD/build-fuzz/artifacts/$t"
  if [ "$mode" = ci ]; then
    # A working corpus left by an earlier run would change what is explored: start empty every time.
    work="$PWD/build-fuzz/ci-corpus/$t"
    rm -rf "$work"
    budget=(-runs="${FUZZ_RUNS:-${ci_runs[$t]}}" -seed="$seed" -reload=0)
    export REPLAYSSM_FUZZ_SCRATCH="/tmp/replayssm-fuzz-ci-$t"
    what="${FUZZ_RUNS:-${ci_runs[$t]}} inputs, seed $seed"
  else
    work="$PWD/build-fuzz/corpus/$t"
    budget=(-max_total_time="$secs")
    what="${secs}s"
  fi
  mkdir -p "$work" "$art"
  rm -f "$art"/*
  # -rss_limit_mb / -malloc_limit_mb: a parser that allocates gigabytes on a bad input is a bug, not a slow case.
  opts=("${budget[@]}" -timeout=20 -rss_limit_mb=2560 -dict="$dict_dir/$t.dict"
        -artifact_prefix="$art/" -print_final_stats=1 "${parallel[@]}")
  asan="${ASAN_OPTIONS:-}"
  case "$t" in
    # The CLI prints usage and errors by design; libFuzzer keeps its own output.
    fuzz_cli) opts+=(-close_fd_mask=3 -malloc_limit_mb=2048) ;;
    fuzz_config) opts+=(-malloc_limit_mb=2048) ;;
    # Full stacks through libhdf5 so that tests/fuzz/lsan.supp can name the HDF5 functions that leak (2x slower).
    # Oversized mallocs return null instead of ending the run (see fuzz_trace.cpp): libhdf5 makes them on corrupt
    # headers and fails cleanly; ours throw std::bad_alloc, which the target reports.
    # No RSS-limit thread (-rss_limit_mb=0): the preflight forks this process for every input, and a fork while that
    # thread holds a lock could hang the child; single allocations stay capped by max_allocation_size_mb.
    fuzz_trace)
      asan="$asan:fast_unwind_on_malloc=0:max_allocation_size_mb=256:allocator_may_return_null=1"
      opts+=(-malloc_limit_mb=1000000 -rss_limit_mb=0) ;;
  esac
  echo "fuzz: $t, $what, over tests/fuzz/corpus/$t"
  # A crash of libhdf5 inside this process (one the preflight could not predict: which address a wild read of
  # libhdf5 hits depends on the heap layout of the process; fuzz_trace.cpp says more) is classified by the same
  # rules as in the preflight. libhdf5's own: the input is set aside in build-fuzz/rejected/, counted, and fuzzing
  # goes on from the same working corpus (next seed, what is left of the budget). Ours: a failure, as always.
  restarts=0
  t_start=$SECONDS
  log="build-fuzz/$t.log"
  : >"$log"
  while true; do
    rc=0
    ASAN_OPTIONS="$asan" LSAN_OPTIONS="suppressions=$PWD/tests/fuzz/lsan.supp:${LSAN_OPTIONS:-}" \
      "build-fuzz/tests/fuzz/$t" "$work" "$PWD/tests/fuzz/corpus/$t" "${opts[@]}" >"$log.part" 2>&1 || rc=$?
    cat "$log.part" >>"$log"
    [ $rc -eq 0 ] && break
    [ "$t" = fuzz_trace ] || break
    report="$log.report"
    # The crash report (not a leak report: leaks are judged by tests/fuzz/lsan.supp alone).
    sed -n '/AddressSanitizer:DEADLYSIGNAL\|ERROR: AddressSanitizer/,$p' "$log.part" >"$report"
    [ -s "$report" ] || break
    verdict=$(REPLAYSSM_FUZZ_CLASSIFY="$report" "build-fuzz/tests/fuzz/$t" 2>/dev/null) && hdf5=1 || hdf5=0
    [ $hdf5 -eq 1 ] || break
    restarts=$((restarts + 1))
    mkdir -p build-fuzz/rejected/$t
    for a in "$art"/crash-*; do [ -f "$a" ] && mv "$a" build-fuzz/rejected/$t/; done
    echo "fuzz: $t: $verdict (in the fuzzing process; input set aside in build-fuzz/rejected/$t/, not a finding)"
    if [ $restarts -gt 5 ]; then
      echo "fuzz: $t: libhdf5 crashed the fuzzing process more than 5 times; giving up" >>"$log"
      break
    fi
    if [ "$mode" = ci ]; then
      # libFuzzer prints its final stats on a crash too; the last progress line is the fallback.
      done_runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log.part" | tail -1)
      [ -n "$done_runs" ] || done_runs=$(grep -oE '^#[0-9]+' "$log.part" | tail -1 | tr -d '#')
      left=$(( ${budget[0]#-runs=} - ${done_runs:-0} ))
      [ $left -gt 0 ] || { rc=0; break; }
      opts[0]="-runs=$left"
      opts[1]="-seed=$((seed + restarts))"
    else
      left=$((secs - (SECONDS - t_start)))
      [ $left -gt 0 ] || { rc=0; break; }
      opts[0]="-max_total_time=$left"
    fi
  done
  rm -f "$log.part"
  if [ $rc -ne 0 ]; then
    failed+=("$t")
    echo "fuzz: $t FAILED (log: $log); the input that did it:"
    ls -1 "$art"/* 2>/dev/null | head -5
    grep -E 'ERROR|SUMMARY|replayssm fuzz:|uncaught|deadly' "$log" | head -20 || true
  else
    grep -E '^stat::(number_of_executed_units|new_units_added)|rejected because|fuzz_trace: inputs rejected' "$log" | tr '\n' ' ' || true
    [ $restarts -gt 0 ] && printf 'libhdf5 crashes in the fuzzing process: %d ' "$restarts"
    echo
  fi
done

# One line that test.sh adds to its totals (one per target).
summary="fuzz: $((checks - ${#failed[@]})) passed, ${#failed[@]} failed"
echo "$summary" | tee build-fuzz/fuzz-summary.txt
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}"
  exit 1
fi
