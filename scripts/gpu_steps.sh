#!/usr/bin/env bash
# Runs a device call's steps in order within one time budget, so that a call cut short still returns a log of every
# step it ran and says which it did not reach: each step runs under `timeout` with the seconds left, its output goes
# to $OUT/NAME.log, and $OUT/steps.txt (printed too) lists each step's exit code and seconds, "timed out" or "not
# started". The device ends a command at its limit (600 s at most) and returns what is under $OUT by then.
#
#   scripts/gpu_steps.sh [-b BUDGET_S] [-m MIN_S] NAME=COMMAND [NAME=COMMAND ...]
#     NAME=COMMAND  a step: NAME names its log ([A-Za-z0-9_.-]+), COMMAND runs under bash -c from the repository root
#     -b BUDGET_S   seconds for all steps together (default 540)
#     -m MIN_S      a step is not started with fewer seconds left than this (default 10)
# e.g. scripts/gpu_steps.sh -b 560 \
#        tests='dist/bin/replayssm_gpu_tests "[mamba2]"' \
#        initcheck='REPLAYSSM_GPU_TESTS=one-per-kernel SANITIZER_TOOLS=initcheck scripts/gpu_sanitize.sh dist/bin/replayssm_gpu_tests "*small geometry*"'
# Unpacks dist/ first when it holds scripts/dist_pack.sh's pack, and puts dist/lib on LD_LIBRARY_PATH and SANITIZE_LOG_DIR
# under $OUT (default ./gpu_out). Exit 0 when every step ran and exited 0; 1 otherwise; 2 on bad arguments.
# A call brings back at most 8 files of $OUT, none deeper than two folders (/work/.library/device/README.md); the rest
# are dropped, named only in the reply's files_left_out (two A/B archives were lost that way). So after every step, once
# $OUT holds more than that, every file but steps.txt moves into one archive, $OUT/steps.tar.gz (rebuilt after each
# later step, so a call cut short still returns what ran), and steps.txt says so. Here: tar xzf steps.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/.."
usage() { sed -n '7,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
budget=540 min_s=10
while getopts "b:m:h" o; do
  case "$o" in
    b) budget=$OPTARG ;;
    m) min_s=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[[ "$budget" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_steps: -b: seconds must be a positive integer, not '$budget'" >&2; exit 2; }
[[ "$min_s" =~ ^[0-9]+$ ]] || { echo "gpu_steps: -m: seconds must be an integer, not '$min_s'" >&2; exit 2; }
[ $# -gt 0 ] || usage
names=() cmds=()
for s in "$@"; do
  name=${s%%=*}
  [[ "$s" == *=* && "$name" =~ ^[A-Za-z0-9_.-]+$ ]] || { echo "gpu_steps: '$s' is not NAME=COMMAND" >&2; exit 2; }
  for n in "${names[@]}"; do [ "$n" != "$name" ] || { echo "gpu_steps: step name '$name' given twice" >&2; exit 2; }; done
  names+=("$name") cmds+=("${s#*=}")
done

OUT="${OUT:-$PWD/gpu_out}"
mkdir -p "$OUT"
export SANITIZE_LOG_DIR="${SANITIZE_LOG_DIR:-$OUT}"
. scripts/dist_env.sh && dist_env || exit 1

summary="$OUT/steps.txt"
bundle="$OUT/steps.tar.gz" stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
max_files=8
# Moves every file under $OUT except steps.txt and the archive into $stage and rebuilds the archive from $stage, once
# $OUT holds more than max_files files (and from then on after every step).
bundle_if_many() {
  local n
  n=$(find "$OUT" -type f | wc -l)
  [ -f "$bundle" ] || [ "$n" -gt "$max_files" ] || return 0
  (cd "$OUT" && find . -type f ! -path ./steps.txt ! -path ./steps.tar.gz ! -path ./steps.tar.gz.tmp -print0 |
    tar cf - --null -T - --remove-files) | tar xf - -C "$stage" || { echo "gpu_steps: could not move files into $stage" >&2; return 1; }
  find "$OUT" -mindepth 1 -type d -empty -delete
  tar czf "$bundle.tmp" -C "$stage" . && mv "$bundle.tmp" "$bundle" || { echo "gpu_steps: could not write $bundle" >&2; return 1; }
  [ -n "$bundled" ] || echo "gpu_steps: more than $max_files files under \$OUT: all but steps.txt are in steps.tar.gz" | tee -a "$summary"
  bundled=1
}
bundled=""
{
  echo "gpu_steps: $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $(build_commit), budget ${budget} s"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
} | tee "$summary"
start=$SECONDS bad=0
for i in "${!names[@]}"; do
  name=${names[$i]} left=$((budget - (SECONDS - start)))
  if [ "$left" -lt "$min_s" ]; then
    echo "$name: not started (${left} s left)" | tee -a "$summary"
    bad=1
    continue
  fi
  t0=$SECONDS
  timeout "$left" bash -c "${cmds[$i]}" >"$OUT/$name.log" 2>&1
  rc=$?
  if [ $rc -eq 124 ]; then
    echo "$name: timed out after $((SECONDS - t0)) s (log: $name.log)" | tee -a "$summary"
  else
    echo "$name: exit $rc in $((SECONDS - t0)) s (log: $name.log)" | tee -a "$summary"
  fi
  [ $rc -eq 0 ] || bad=1
  bundle_if_many || bad=1
done
exit $bad
