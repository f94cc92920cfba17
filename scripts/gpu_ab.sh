#!/usr/bin/env bash
# The device half of an A/B (scripts/ab_relink.sh builds the variants here): runs each group's benchmark binaries in
# turn, round after round, in one call, so that every build is timed on the same card in the same minutes (machines
# differ by a few per cent between calls: benchmarks/experiments/README.md, "The ring cursor's hand-off").
#
#   scripts/gpu_ab.sh [-r ROUNDS] [-b BUDGET_S] -f FILTER [-x ARGS] BIN BIN... [-f FILTER [-x ARGS] BIN BIN...]...
#     -f FILTER   --benchmark_filter of the group's binaries (a regular expression of case names)
#     -x ARGS     more arguments for the group's binaries (word-split, e.g. "--only=gdn" for bench_spec_cuda)
#     BIN         a program of dist/bin (bench_gdn_cuda, bench_gdn_cuda_mid, ...) or a path
#     -r ROUNDS   rounds (default 3); each round runs every binary of every group once, in the order given
#     -b BUDGET_S a round is not started when the seconds used so far plus the longest round so far would pass this
#                 (default 540: a device call ends at 600 s, and what it wrote by then still comes back)
# Outputs: $OUT/ab.tar.gz (default OUT=./gpu_out), rewritten after every round so that a call cut short still returns
# the rounds it finished: ab/BIN.ROUND.json (Google Benchmark JSON), ab/BIN.ROUND.log (its stderr) and ab/summary.txt
# (GPU, driver, commit, each run's exit code and seconds); the summary is printed too. One archive, because a call
# returns only a few files. Here: `tar xzf ab.tar.gz`, then the printed `scripts/bench_table.py --ab ...` lines
# compare the builds (the first binary of a group is the baseline). Exit 1 when a run failed or matched no case, 2 on
# bad arguments.
set -uo pipefail
caller=$PWD  # a BIN given as a relative path is the caller's
cd "$(dirname "$0")/.."
usage() { sed -n '6,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "gpu_ab: $*" >&2; exit 2; }

rounds=3 budget=540
filters=() extras=() members=()  # per group: its filter, its extra arguments, its binaries (space-separated)
while [ $# -gt 0 ]; do
  case "$1" in
    -r) [ $# -ge 2 ] || usage; rounds=$2; shift 2 ;;
    -b) [ $# -ge 2 ] || usage; budget=$2; shift 2 ;;
    -f) [ $# -ge 2 ] || usage; filters+=("$2"); extras+=(""); members+=(""); shift 2 ;;
    -x) [ $# -ge 2 ] || usage; [ ${#filters[@]} -gt 0 ] || die "-x before the first -f"
        extras[-1]=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) die "unknown option $1" ;;
    *) [ ${#filters[@]} -gt 0 ] || die "binary $1 before the first -f FILTER"
       members[-1]="${members[-1]} $1"; shift ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "-r: rounds must be a positive integer, not '$rounds'"
[[ "$budget" =~ ^[1-9][0-9]*$ ]] || die "-b: the budget must be a positive number of seconds, not '$budget'"
[ ${#filters[@]} -gt 0 ] || usage

. scripts/dist_env.sh && dist_env || exit 1
resolve() { case "$1" in /*) echo "$1" ;; */*) echo "$caller/$1" ;; *) echo "dist/bin/$1" ;; esac; }
seen=" "
for g in "${!filters[@]}"; do
  [ -n "${members[$g]}" ] || die "group $((g + 1)) (-f '${filters[$g]}') names no binary"
  for b in ${members[$g]}; do
    p=$(resolve "$b")
    [ -f "$p" ] || die "$p not found (scripts/make_dist.sh, scripts/ab_relink.sh, scripts/dist_pack.sh build it here)"
    [ -x "$p" ] || chmod +x "$p"
    case "$seen" in *" $(basename "$p") "*) die "$(basename "$p") named twice: its runs' files would overwrite each other" ;; esac
    seen="$seen$(basename "$p") "
  done
done

OUT="${OUT:-$PWD/gpu_out}"
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/ab"
summary="$work/ab/summary.txt"
note() { echo "$*" | tee -a "$summary"; }
pack() { tar -C "$work" -czf "$OUT/ab.tar.gz.part" ab && mv "$OUT/ab.tar.gz.part" "$OUT/ab.tar.gz"; }

note "gpu_ab: $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $(build_commit)," \
     "$rounds rounds, budget $budget s"
note "$(command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 ||
         echo "nvidia-smi failed or is missing: no GPU named")"
status=0 start=$SECONDS longest=0 done_rounds=0
for ((r = 1; r <= rounds; r++)); do
  if [ $r -gt 1 ] && [ $((SECONDS - start + longest)) -gt "$budget" ]; then
    note "round $r not started: $((SECONDS - start)) s used, the longest round took $longest s, budget $budget s"
    break
  fi
  r0=$SECONDS
  for g in "${!filters[@]}"; do
    for b in ${members[$g]}; do
      t0=$SECONDS name=$(basename "$b")
      # shellcheck disable=SC2086  # -x ARGS are word-split on purpose
      "$(resolve "$b")" --benchmark_filter="${filters[$g]}" ${extras[$g]} \
        --benchmark_out="$work/ab/$name.$r.json" --benchmark_out_format=json >/dev/null 2>"$work/ab/$name.$r.log"
      rc=$?
      note "round $r $name: exit $rc in $((SECONDS - t0)) s"
      [ $rc -eq 0 ] || status=1
      # A filter that matches no case leaves a run with no rows (or no file), which would compare as nothing.
      if ! grep -q '"name"' "$work/ab/$name.$r.json" 2>/dev/null; then
        note "round $r $name: no case matched -f '${filters[$g]}'"
        status=1
      fi
    done
  done
  done_rounds=$r
  [ $((SECONDS - r0)) -gt $longest ] && longest=$((SECONDS - r0))
  pack
done
note "compare here (after tar xzf ab.tar.gz; the first build of a group is the baseline):"
for g in "${!filters[@]}"; do
  line="scripts/bench_table.py --ab"
  for b in ${members[$g]}; do
    name=$(basename "$b") files=""
    for ((r = 1; r <= done_rounds; r++)); do files="$files${files:+,}ab/$name.$r.json"; done
    line="$line $files"
  done
  note "  $line"
done
pack
exit $status
