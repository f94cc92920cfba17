#!/usr/bin/env bash
# Runs the GPU tests under NVIDIA compute-sanitizer, once per tool: memcheck (out-of-bounds and misaligned
# accesses, leaks of device memory), racecheck (shared-memory hazards), initcheck (reads of uninitialised device
# memory), synccheck (invalid __syncthreads / warp syncs). Fails when any tool reports anything or a test fails.
# For the H200 machine (GPU.md): there is no Catch2 v2 there, so the test binary is built here and travels in the
# dist/ bundle with its shared libraries (dist/lib is put on LD_LIBRARY_PATH when present).
#
#   scripts/gpu_sanitize.sh                         dist/bin/replayssm_gpu_tests, else build/tests/gpu/replayssm_gpu_tests
#   scripts/gpu_sanitize.sh BINARY                  another Catch2 test binary
#   scripts/gpu_sanitize.sh BINARY "[gpu][mamba2]"  a narrower test filter (default "[gpu]")
#   scripts/gpu_sanitize.sh BINARY FILTER -c "interval 16"   further arguments go to the test binary (here: one
#                                                   section, for a case too slow under racecheck for one call)
#   SANITIZER_TOOLS="memcheck" scripts/gpu_sanitize.sh     fewer tools (default: all four)
#   REPLAYSSM_GPU_TESTS=one-per-kernel scripts/gpu_sanitize.sh   the kernel-level cases once per kernel configuration:
#                                                   intervals read as K = 1, K = 8|16 or another K > 1
#                                                   (tests/gpu/gpu_test_util.h), the scope meant for racecheck and
#                                                   initcheck to finish in a device call
#   scripts/gpu_sanitize.sh --self-test             checks that this script fails on each tool's kind of bug
#                                                   (builds three tiny faulty kernels with nvcc, sm_90)
# Reports go to stdout and to sanitize-<tool>.log in $SANITIZE_LOG_DIR (default: the current folder).
# A binary with no test matching the filter is an error (exit 2), not a pass: a sanitizer run that checks nothing
# must not read as clean (the CPU test binary, which this script ran by default until the GPU tests moved to their
# own binary, has none). The tools slow kernels down 10-100x: keep GPU tests small (they are correctness tests;
# benchmarks are not run here).
set -euo pipefail
cd "$(dirname "$0")/.."

tools=(${SANITIZER_TOOLS:-memcheck racecheck initcheck synccheck})
log_dir="${SANITIZE_LOG_DIR:-$PWD}"
mkdir -p "$log_dir"
need_sanitizer() {
  if ! command -v compute-sanitizer >/dev/null; then
    for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer; do
      if [ -x "$d/compute-sanitizer" ]; then PATH="$d:$PATH"; fi
    done
  fi
  command -v compute-sanitizer >/dev/null || { echo "gpu_sanitize: compute-sanitizer not found (CUDA toolkit)"; exit 2; }
}
if [ -d dist/lib ]; then export LD_LIBRARY_PATH="$PWD/dist/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi

tool_args() {  # extra arguments per tool
  case "$1" in
    memcheck) echo "--leak-check full" ;;
    racecheck) echo "--racecheck-report all" ;;
    *) echo "" ;;
  esac
}

# sanitize TOOL LOG COMMAND...: 0 when the tool reports nothing and COMMAND succeeds.
sanitize() {
  local tool="$1" log="$2" rc=0
  shift 2
  # --target-processes all: tests that start the replayssm command are checked inside it too.
  # shellcheck disable=SC2046
  compute-sanitizer --tool "$tool" $(tool_args "$tool") --error-exitcode 1 --target-processes all \
    --print-limit 50 "$@" 2>&1 | tee "$log" || rc=$?
  # The exit code covers the tool's errors and the program's failures. The summaries are checked as well: racecheck
  # counts its warnings (potential hazards) apart from errors and does not let them set the code, and every
  # process checked (--target-processes all) prints its own summary, each of which must be zero. A process that
  # never called CUDA (a CPU-only child) prints "terminated before first instrumented API call" instead: not a
  # report. But if no process at all reached CUDA, nothing was checked, and that fails too.
  local summaries
  summaries=$(grep -E '^========= (ERROR|RACECHECK) SUMMARY' "$log" || true)
  if [ -z "$summaries" ]; then
    echo "gpu_sanitize: $tool: no process made a CUDA call, so nothing was checked (no GPU? tests skipped?)"
    if [ $rc -eq 0 ]; then rc=1; fi
  elif grep -vqE 'SUMMARY: 0 (errors|hazards displayed \(0 errors, 0 warnings\))' <<<"$summaries"; then
    if [ $rc -eq 0 ]; then rc=1; fi
  fi
  return $rc
}

if [ "${1:-}" = "--self-test" ]; then
  need_sanitizer
  command -v nvcc >/dev/null || PATH="/usr/local/cuda/bin:$PATH"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cat >"$tmp/faults.cu" <<'EOF'
// One deliberate bug per compute-sanitizer tool; argv[1] picks it.
#include <cstdio>
#include <cstring>
__global__ void out_of_bounds(float* p, int n) { p[threadIdx.x + n] = 1.0f; }  // memcheck: far past the end
__global__ void shared_race(float* out) {  // racecheck: reads a neighbour's slot with no barrier
  __shared__ float s[64];
  s[threadIdx.x] = threadIdx.x;
  out[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}
__global__ void copy(const float* in, float* out) { out[threadIdx.x] = in[threadIdx.x]; }  // initcheck: `in` unset
__global__ void divergent_barrier(float* out) {  // synccheck: a barrier only some threads reach
  if (threadIdx.x < 16) __syncthreads();
  out[threadIdx.x] = 0;
}
int main(int argc, char** argv) {
  float *a, *b;
  cudaMalloc(&a, 64 * sizeof(float));
  cudaMalloc(&b, 64 * sizeof(float));
  const char* what = argc > 1 ? argv[1] : "";
  if (!strcmp(what, "memcheck")) out_of_bounds<<<1, 64>>>(a, 1 << 20);
  if (!strcmp(what, "racecheck")) shared_race<<<1, 64>>>(a);
  if (!strcmp(what, "initcheck")) copy<<<1, 64>>>(a, b);
  if (!strcmp(what, "synccheck")) divergent_barrier<<<1, 64>>>(a);
  cudaDeviceSynchronize();
  cudaFree(a);
  cudaFree(b);
  return 0;
}
EOF
  nvcc -arch=sm_90 -lineinfo -o "$tmp/faults" "$tmp/faults.cu"
  bad=0
  for tool in "${tools[@]}"; do
    # The clean run must pass (no false alarm from the checks below), the faulty one must fail.
    if ! sanitize "$tool" "$log_dir/selftest-$tool-clean.log" "$tmp/faults" none >/dev/null; then
      echo "gpu_sanitize self-test: $tool FAILED a correct program (see $log_dir/selftest-$tool-clean.log)"
      bad=1
    fi
    if sanitize "$tool" "$log_dir/selftest-$tool.log" "$tmp/faults" "$tool" >/dev/null; then
      echo "gpu_sanitize self-test: $tool did NOT fail on its planted bug (see $log_dir/selftest-$tool.log)"
      bad=1
    else
      echo "gpu_sanitize self-test: $tool caught its planted bug: $(grep -m1 -E '^========= (Invalid|Error|Warning|Uninitialized|Barrier|Race)' "$log_dir/selftest-$tool.log")"
    fi
  done
  exit $bad
fi

bin="${1:-}"
if [ -z "$bin" ]; then
  for b in dist/bin/replayssm_gpu_tests build/tests/gpu/replayssm_gpu_tests; do
    if [ -f "$b" ]; then bin="$b"; break; fi
  done
fi
# A copy that lost its mode bit on the way to the GPU machine still runs.
if [ -n "$bin" ] && [ -f "$bin" ] && [ ! -x "$bin" ]; then chmod +x "$bin"; fi
[ -n "$bin" ] && [ -x "$bin" ] || {
  echo "gpu_sanitize: no GPU test binary (a CUDA build makes tests/gpu/replayssm_gpu_tests; or make the dist/ bundle)"
  exit 2
}
filter="${2:-[gpu]}"
test_args=("${@:3}")
case "${REPLAYSSM_GPU_TESTS:-all}" in
  all|one-per-kernel) ;;
  *) echo "gpu_sanitize: REPLAYSSM_GPU_TESTS='$REPLAYSSM_GPU_TESTS' is not a scope (all, one-per-kernel)"; exit 2 ;;
esac

# Catch2 v2 lists matching tests one per line (its exit code is the count, so it is not checked).
n=$("$bin" --list-test-names-only "$filter" 2>/dev/null | grep -cv '^\s*$' || true)
if [ "$n" -eq 0 ]; then
  echo "gpu_sanitize: $bin has no tests matching $filter: nothing would be checked"
  exit 2
fi
need_sanitizer
echo "gpu_sanitize: $n test(s) matching $filter in $bin, tools: ${tools[*]}, scope: ${REPLAYSSM_GPU_TESTS:-all}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true

failed=()
for tool in "${tools[@]}"; do
  echo "=== compute-sanitizer --tool $tool"
  if ! sanitize "$tool" "$log_dir/sanitize-$tool.log" "$bin" "$filter" "${test_args[@]}" --use-colour no; then failed+=("$tool"); fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "gpu_sanitize: FAILED under ${failed[*]} (logs: $log_dir/sanitize-<tool>.log)"
  exit 1
fi
echo "gpu_sanitize: ${#tools[@]} tools, $n test(s), no reports"
