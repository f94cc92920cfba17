#!/usr/bin/env bash
# One session on the H200 (docs: /work/shared/GPU.md) for the Mamba-2 kernels: the GPU tests, the kernel benchmark,
# and on request ncu DRAM bytes of single steps and compute-sanitizer on the GPU tests. Everything is logged under
# $OUT (default ./gpu_out); the exit code is non-zero when the tests, the benchmark or a requested check failed.
# Built here, run there: on the build machine
#   cmake -S . -B build-cuda -DREPLAYSSM_CUDA=ON -DREPLAYSSM_CUDA_COMPRESS=OFF -DREPLAYSSM_CUDA_ARCHITECTURES=90-real
#   cmake --build build-cuda -j2 && scripts/make_dist.sh build-cuda && scripts/dist_pack.sh
#   (uncompressed SASS packs every program into about 30 MiB of the call's 64: kernels/CMakeLists.txt)
# then, on the H200, from the repository root (dist/ travels with the tree):
#   scripts/gpu_run.sh                  tests + default benchmark (about 2-4 minutes)
#   GPU_RUN_NCU=1 scripts/gpu_run.sh    + ncu DRAM bytes of one eager, one non-flush and one flush step
#   GPU_RUN_NCU_ISSUE=1 scripts/gpu_run.sh  + ncu issue-slot profile (scheduler, warp states, source counters) of
#                                       one Mamba-2 replay non-flush step
#   GPU_RUN_SANITIZE=1 scripts/gpu_run.sh   + compute-sanitizer memcheck on the GPU tests (scripts/gpu_sanitize.sh;
#                                       SANITIZER_TOOLS="memcheck racecheck initcheck synccheck" for all four)
#   GPU_RUN_BENCH_ARGS="--full" scripts/gpu_run.sh      benchmark flags (--full, --preset=NAME, --z, a filter ...)
#   GPU_RUN_SKIP_TESTS=1 / GPU_RUN_SKIP_BENCH=1         leave a part out
#   GPU_RUN_CLI=1 scripts/gpu_run.sh    + `replayssm run` of configs/gpu/*.ini (scheme.backend = cpu, cuda) into
#                                       $OUT/<config>.h5 (+ .log, .inspect.txt); fails if a cuda point was skipped.
#                                       GPU_RUN_CLI_CONFIGS="configs/gpu/x.ini ..." picks configs (default: the
#                                       tiny_hybrid comparisons, *_cpu_vs_cuda, *_arith_sr (flush arithmetic,
#                                       stochastic rounding) and *_scaled_read (e4m3 / e5m2 / int8 read copies),
#                                       seconds each, the Super-120B Mamba-2 and the Qwen3.5-4B GDN 8192-step
#                                       layers, minutes each)
# Outputs: $OUT/gpu_tests.log, $OUT/bench_mamba2_cuda.json (+ .log), $OUT/ncu_*.csv,
# $OUT/sanitize-*.log, $OUT/<config>.h5 (GPU_RUN_CLI), $OUT/summary.txt (what ran, exit codes, GPU and driver).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu_out}"
mkdir -p "$OUT"
. scripts/dist_env.sh && dist_env || exit 1
for d in /usr/local/cuda/bin; do [ -d "$d" ] && PATH="$PATH:$d"; done
bin=dist/bin
[ -d "$bin" ] || bin=build-cuda/bin_missing
tests="$bin/replayssm_gpu_tests"
bench="$bin/bench_mamba2_cuda"
cli="$bin/replayssm"
for f in "$tests" "$bench" "$cli"; do
  if [ -f "$f" ] && [ ! -x "$f" ]; then chmod +x "$f"; fi  # a copy that lost its mode bit
done
summary="$OUT/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
status=0

note "gpu_run: $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$summary"

if [ -z "${GPU_RUN_SKIP_TESTS:-}" ]; then
  if [ -x "$tests" ]; then
    start=$(date +%s)
    "$tests" "[gpu]" --durations yes --use-colour no >"$OUT/gpu_tests.log" 2>&1
    rc=$?
    note "gpu tests: exit $rc in $(( $(date +%s) - start )) s (log: gpu_tests.log; per-case error lines start with the geometry)"
    tail -4 "$OUT/gpu_tests.log" | tee -a "$summary"
    [ $rc -eq 0 ] || status=1
  else
    note "gpu tests: $tests missing (make the dist/ bundle from a CUDA build)"; status=1
  fi
fi

if [ -z "${GPU_RUN_SKIP_BENCH:-}" ]; then
  if [ -x "$bench" ]; then
    start=$(date +%s)
    # shellcheck disable=SC2086
    "$bench" ${GPU_RUN_BENCH_ARGS:-} --benchmark_out="$OUT/bench_mamba2_cuda.json" --benchmark_out_format=json \
      --benchmark_counters_tabular=true >"$OUT/bench_mamba2_cuda.log" 2>&1
    rc=$?
    note "benchmark: exit $rc in $(( $(date +%s) - start )) s (bench_mamba2_cuda.json, .log)"
    grep -E "ceilings|_median" "$OUT/bench_mamba2_cuda.log" | head -200 >>"$summary"
    [ $rc -eq 0 ] || status=1
  else
    note "benchmark: $bench missing"; status=1
  fi
fi

# ncu_check RC WHAT CSV ERR: a requested profile that failed, or that matched no kernel (a -k regex that names no
# kernel the case launches leaves the CSV without metrics, exit 0), fails the run.
ncu_check() {
  if [ "$1" -ne 0 ]; then
    status=1
  elif grep -q "No kernels were profiled" "$3" "$4" || ! grep -q "dram__bytes_read" "$3"; then
    note "ncu $2: no kernel profiled"; status=1
  fi
}

if [ -n "${GPU_RUN_NCU:-}" ]; then
  if command -v ncu >/dev/null && [ -x "$bench" ]; then
    # One benchmark case each at batch 256 (K=16) under --once; ncu profiles the first 3 step kernels it sees. Two
    # filters, not one: --benchmark_filter picks the case by its benchmark name (which ends in
    # /iterations:1/repeats:1/manual_time, hence the trailing '/' and no '$'), and ncu's -k picks kernels by their
    # function name (mamba2_eager_kernel / mamba2_replay_kernel; the memsets and the ceilings' read_only kernel of
    # the same process are left out). Benchmark names hold '+' (dual): escaped for the regex.
    for what in "eager/fp32/batch:256/" "replay/fp32/K16/nonflush/batch:256/" "replay/fp32/K16/flush/batch:256/" \
                "dual/fp32\\+bf16/K16/nonflush/batch:256/" "dual/fp32\\+bf16/K16/flush/batch:256/"; do
      tag=$(echo "$what" | tr -c 'A-Za-z0-9\n' '_')
      case "$what" in eager*) kern=mamba2_eager_kernel ;; *) kern=mamba2_replay_kernel ;; esac
      ncu --clock-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
        -k "regex:$kern" --launch-count 3 --csv \
        "$bench" --once --benchmark_filter="$what" \
        >"$OUT/ncu_$tag.csv" 2>"$OUT/ncu_$tag.err"
      rc=$?
      note "ncu $what: exit $rc (ncu_$tag.csv)"
      grep -E "dram__bytes|gpu__time" "$OUT/ncu_$tag.csv" | head -6 >>"$summary"
      ncu_check "$rc" "$what" "$OUT/ncu_$tag.csv" "$OUT/ncu_$tag.err"
    done
  else
    note "ncu: not found (or no benchmark binary): the requested DRAM bytes were not measured"; status=1
  fi
fi

# Where the issue slots go (the steps are bound by instruction issue): scheduler and warp-state statistics, the
# instruction mix and the per-line source counters of one Mamba-2 replay non-flush step (fp32, K16, batch 256).
# Text report in $OUT/ncu_issue_replay.txt; read "Issued Warp Per Scheduler" and the top lines of the source counters.
if [ -n "${GPU_RUN_NCU_ISSUE:-}" ]; then
  if command -v ncu >/dev/null && [ -x "$bench" ]; then
    ncu --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section InstructionStats \
      --section SourceCounters -k regex:mamba2_replay_kernel --launch-count 1 \
      "$bench" --once --benchmark_filter="replay/fp32/K16/nonflush/batch:256/" >"$OUT/ncu_issue_replay.txt" 2>&1
    rc=$?
    note "ncu issue profile: exit $rc (ncu_issue_replay.txt)"
    grep -E "Issued Warp Per Scheduler|Compute \(SM\) Throughput|DRAM Throughput" "$OUT/ncu_issue_replay.txt" >>"$summary"
    [ $rc -eq 0 ] || status=1
    if grep -q "No kernels were profiled" "$OUT/ncu_issue_replay.txt"; then note "ncu issue profile: no kernel profiled"; status=1; fi
  else
    note "ncu issue profile: ncu not found (or no benchmark binary): not profiled"; status=1
  fi
fi

if [ -n "${GPU_RUN_SANITIZE:-}" ]; then
  SANITIZER_TOOLS="${SANITIZER_TOOLS:-memcheck}" SANITIZE_LOG_DIR="$OUT" \
    scripts/gpu_sanitize.sh "$tests" "[gpu]" >"$OUT/sanitize.log" 2>&1
  rc=$?
  note "compute-sanitizer (${SANITIZER_TOOLS:-memcheck}): exit $rc (sanitize.log, sanitize-<tool>.log)"
  tail -2 "$OUT/sanitize.log" | tee -a "$summary"
  [ $rc -eq 0 ] || status=1
fi

if [ -n "${GPU_RUN_CLI:-}" ]; then
  if [ -x "$cli" ]; then
    for cfg in ${GPU_RUN_CLI_CONFIGS:-configs/gpu/mamba2_cpu_vs_cuda.ini configs/gpu/mamba2_arith_sr.ini \
                configs/gpu/mamba2_super120b_8192.ini configs/gpu/gdn_cpu_vs_cuda.ini configs/gpu/gdn_arith_sr.ini \
                configs/gpu/gdn_qwen35_4b_8192.ini configs/gpu/mamba2_scaled_read.ini configs/gpu/gdn_scaled_read.ini}; do
      name=$(basename "$cfg" .ini)
      start=$(date +%s)
      # Twins share a batch (one reference); --jobs runs batches side by side, each with its share of the cores.
      "$cli" run "$cfg" -o "$OUT/$name.h5" --jobs "${GPU_RUN_CLI_JOBS:-2}" --quiet >"$OUT/$name.log" 2>&1
      rc=$?
      note "replayssm run $cfg: exit $rc in $(( $(date +%s) - start )) s ($name.h5, $name.log)"
      "$cli" inspect "$OUT/$name.h5" >"$OUT/$name.inspect.txt" 2>&1 || note "replayssm inspect $name.h5 failed"
      cat "$OUT/$name.log" >>"$summary"
      # Each run's decoder and the min / mean / max over steps of its difference from its cpu twin.
      grep -E "^  run_|backend_diff_rel_max" "$OUT/$name.inspect.txt" | cut -c1-150 >>"$summary"
      # A cuda point skipped for a CUDA reason (no device, no kernel) means the comparison did not happen.
      if grep -E "^skipping .*: .*CUDA" "$OUT/$name.log" >/dev/null; then
        note "$name: cuda points were skipped:"; grep -E "^skipping .*: .*CUDA" "$OUT/$name.log" | tee -a "$summary"
        rc=1
      fi
      [ $rc -eq 0 ] || status=1
    done
  else
    note "replayssm run: $cli missing"; status=1
  fi
fi

# ---- GDN (issue 11): kernel benchmark with its targets table, and ncu DRAM bytes under GPU_RUN_NCU ----
#   GPU_RUN_SKIP_GDN=1 leaves it out; GPU_RUN_GDN_BENCH_ARGS="--full" (or --preset=qwen35-122b, a filter ...) passes
#   flags. The GDN GPU tests run with the others above ("[gpu]"; "[gdn]" alone: replayssm_gpu_tests "[gdn]").
#   Outputs: $OUT/bench_gdn_cuda.json (+ .log, whose end is the targets table, copied into summary.txt),
#   $OUT/ncu_gdn_*.csv.
gdn_bench="$bin/bench_gdn_cuda"
if [ -f "$gdn_bench" ] && [ ! -x "$gdn_bench" ]; then chmod +x "$gdn_bench"; fi
if [ -z "${GPU_RUN_SKIP_GDN:-}" ] && [ -z "${GPU_RUN_SKIP_BENCH:-}" ]; then
  if [ -x "$gdn_bench" ]; then
    start=$(date +%s)
    # shellcheck disable=SC2086
    "$gdn_bench" ${GPU_RUN_GDN_BENCH_ARGS:-} --benchmark_out="$OUT/bench_gdn_cuda.json" --benchmark_out_format=json \
      --benchmark_counters_tabular=true >"$OUT/bench_gdn_cuda.log" 2>&1
    rc=$?
    note "gdn benchmark: exit $rc in $(( $(date +%s) - start )) s (bench_gdn_cuda.json, .log)"
    grep -E "ceilings|_median" "$OUT/bench_gdn_cuda.log" | head -200 >>"$summary"
    sed -n '/^bench_gdn_cuda targets/,$p' "$OUT/bench_gdn_cuda.log" | tee -a "$summary"
    [ $rc -eq 0 ] || status=1
  else
    note "gdn benchmark: $gdn_bench missing"; status=1
  fi
fi
if [ -z "${GPU_RUN_SKIP_GDN:-}" ] && [ -n "${GPU_RUN_NCU:-}" ]; then
  if command -v ncu >/dev/null && [ -x "$gdn_bench" ]; then
    # One case each at batch 256 (K=16) under --once; --benchmark_filter picks the case by its name (which ends in
    # /iterations:1/repeats:1/manual_time: hence the trailing '/'), ncu's -k the step kernel by its function name.
    for what in "eager/fp32/batch:256/" "replay/inner/fp32/K16/nonflush/batch:256/" \
                "replay/inner/fp32/K16/flush/batch:256/" "replay/reconstruct/fp32/K16/nonflush/batch:256/" \
                "dual/inner/fp32\\+bf16/K16/nonflush/batch:256/" "dual/inner/fp32\\+bf16/K16/flush/batch:256/"; do
      tag=gdn_$(echo "$what" | tr -c 'A-Za-z0-9\n' '_')
      # "gdn_replay": every replay kernel (gdn_replay_kernel, _inner32_, _inner16_, _rec_, _small_), since the launcher
      # picks one by route, formats and batch.
      case "$what" in eager*) kern=gdn_eager_kernel ;; *) kern=gdn_replay ;; esac
      ncu --clock-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
        -k "regex:$kern" --launch-count 3 --csv "$gdn_bench" --once --benchmark_filter="$what" \
        >"$OUT/ncu_$tag.csv" 2>"$OUT/ncu_$tag.err"
      rc=$?
      note "ncu gdn $what: exit $rc (ncu_$tag.csv; compare with the case's 'bytes' counter in bench_gdn_cuda.json)"
      grep -E "dram__bytes|gpu__time" "$OUT/ncu_$tag.csv" | head -6 >>"$summary"
      ncu_check "$rc" "gdn $what" "$OUT/ncu_$tag.csv" "$OUT/ncu_$tag.err"
    done
  else
    note "ncu (gdn): not found (or no benchmark binary): the requested DRAM bytes were not measured"; status=1
  fi
fi

# ---- Speculative decoding (issue 12): replay verify (non-flush and flush windows), the eager speculative baseline,
#   the standard replay step and spec_commit, both families at batch 64 and 256, T = 2 4 6 8, with its targets table.
#   GPU_RUN_SKIP_SPEC=1 leaves it out (so does GPU_RUN_SKIP_BENCH=1); GPU_RUN_SPEC_BENCH_ARGS passes flags (--only=gdn,
#   --p=0.8, a filter ...). The binary must be in dist/bin (scripts/make_dist.sh from a CUDA build).
#   Outputs: $OUT/bench_spec_cuda.json (+ .log, whose end is the targets table, copied into summary.txt);
#   under GPU_RUN_NCU, $OUT/ncu_spec_*.csv (DRAM bytes of one verify, flushing verify and eager verify per family,
#   batch 256, T = 4: compare with the case's bytes_* counters in bench_spec_cuda.json).
spec_bench="$bin/bench_spec_cuda"
if [ -f "$spec_bench" ] && [ ! -x "$spec_bench" ]; then chmod +x "$spec_bench"; fi
if [ -z "${GPU_RUN_SKIP_SPEC:-}" ] && [ -z "${GPU_RUN_SKIP_BENCH:-}" ]; then
  if [ -x "$spec_bench" ]; then
    start=$(date +%s)
    # shellcheck disable=SC2086
    "$spec_bench" ${GPU_RUN_SPEC_BENCH_ARGS:-} --benchmark_out="$OUT/bench_spec_cuda.json" \
      --benchmark_out_format=json --benchmark_counters_tabular=true >"$OUT/bench_spec_cuda.log" 2>&1
    rc=$?
    note "spec benchmark: exit $rc in $(( $(date +%s) - start )) s (bench_spec_cuda.json, .log)"
    grep -E "ceilings" "$OUT/bench_spec_cuda.log" | head -5 >>"$summary"
    sed -n '/^bench_spec_cuda targets/,$p' "$OUT/bench_spec_cuda.log" | tee -a "$summary"
    [ $rc -eq 0 ] || status=1
  else
    note "spec benchmark: $spec_bench missing"; status=1
  fi
fi
if [ -z "${GPU_RUN_SKIP_SPEC:-}" ] && [ -n "${GPU_RUN_NCU:-}" ]; then
  if command -v ncu >/dev/null && [ -x "$spec_bench" ]; then
    # One case per family under --once; ncu's -k picks the kernel, --launch-skip the kind: each graph holds 10
    # launches (kStepsPerGraph), the non-flush verify graph runs first and the flushing one second, so skipping 10
    # verify launches lands on a flushing window. The standard replay and commit kernels are not profiled here
    # (GPU_RUN_NCU above does the standard steps).
    for fam in mamba2 gdn; do
      # "${fam}_verify": the per-head and the grouped verify kernels (mamba2_verify_grouped_kernel at serving batch).
      for kind in "verify:${fam}_verify:0" "verify_flush:${fam}_verify:10" \
                  "eager_verify:${fam}_eager_verify_kernel:0"; do
        IFS=: read -r tag kern skip <<<"$kind"
        ncu --clock-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
          -k "regex:$kern" --launch-skip "$skip" --launch-count 2 --csv \
          "$spec_bench" --once --only="$fam" --benchmark_filter="^$fam/T:4/batch:256/" \
          >"$OUT/ncu_spec_${fam}_$tag.csv" 2>"$OUT/ncu_spec_${fam}_$tag.err"
        rc=$?
        note "ncu spec $fam $tag: exit $rc (ncu_spec_${fam}_$tag.csv; compare with bytes_$tag of $fam/T:4/batch:256)"
        grep -E "dram__bytes|gpu__time" "$OUT/ncu_spec_${fam}_$tag.csv" | head -6 >>"$summary"
        ncu_check "$rc" "spec $fam $tag" "$OUT/ncu_spec_${fam}_$tag.csv" "$OUT/ncu_spec_${fam}_$tag.err"
      done
    done
  else
    note "ncu (spec): not found (or no benchmark binary): the requested DRAM bytes were not measured"; status=1
  fi
fi

note "gpu_run: done, exit $status"
exit $status
