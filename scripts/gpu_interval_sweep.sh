#!/usr/bin/env bash
# Every geometry preset's GPU interval sweep (analysis figure 3, report rows "best measured interval"): on the H200,
# from the repository root with the dist/ bundle of a CUDA build (scripts/make_dist.sh build-cuda), one
# bench_mamba2_cuda / bench_gdn_cuda run per preset of lib/model/model.cpp at batch 256: eager fp32, and replay
# (GDN: both routes, fp32) / dual amortised over intervals 4, 8, 16, 32 (Mamba-2: the per-head kernel and the grouped
# one the cuda decoder runs, replay_g / dual_g, where the benchmark has its rows). About 90 s on an H200. Output:
# $OUT/interval_sweep_<preset>.json (default OUT=./gpu_out); commit them under benchmarks/interval_sweep/ with the
# GPU in the name (interval_sweep_<preset>.h200.json).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu_out}"
mkdir -p "$OUT"
if [ -f dist/pack.tar.xz ] && [ ! -d dist/bin ]; then dist/unpack.sh || exit 1; fi  # scripts/dist_pack.sh's bundle
if [ -d dist/lib ]; then export LD_LIBRARY_PATH="$PWD/dist/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
status=0
run() {  # bench preset filter
  local start=$SECONDS
  "dist/bin/$1" --preset="$2" --benchmark_filter="$3" --benchmark_out="$OUT/interval_sweep_$2.json" \
    --benchmark_out_format=json >"$OUT/interval_sweep_$2.log" 2>&1
  local rc=$?
  echo "$2: exit $rc in $((SECONDS - start)) s ($OUT/interval_sweep_$2.json)"
  [ $rc -eq 0 ] || status=1
  # The ceilings always match: a sweep is there only if its replay rows are.
  if ! grep -q 'amortised/batch:256' "$OUT/interval_sweep_$2.json" 2>/dev/null; then
    echo "$2: no replay case matched"; status=1
  fi
}
for p in nemotron3-nano-4b nemotron3-super-120b nemotron3-ultra-550b nemotron3-nano-30b granite4-h-small; do
  run bench_mamba2_cuda "$p" '^(ceiling|eager/fp32/batch:256/|(replay|dual)(_g)?/[^/]*/K[0-9]+/amortised/batch:256/)'
done
for p in qwen35-4b qwen35-122b; do
  run bench_gdn_cuda "$p" '^(ceiling|eager/fp32/batch:256/|replay/[a-z]*/fp32/K[0-9]+/amortised/batch:256/)'
done
exit $status
