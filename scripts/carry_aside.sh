#!/usr/bin/env bash
# Moves the tracked folders a device call does not need out of the working tree, and back. The call carries the tree
# (tracked and untracked-not-ignored files) beside dist/ in 64 MiB (/work/.library/device/README.md; dist_pack.sh warns
# when the two together are over), and benchmarks/, docs/ and data/tiny_hybrid/ are most of the tree.
#
#   scripts/carry_aside.sh out      move them to $CARRY_ASIDE_DIR (default /tmp/replayssm-carry-aside-$UID)
#   scripts/carry_aside.sh in       move them back
#   scripts/carry_aside.sh status   where they are, and the size of the tree a call would carry now
#   scripts/carry_aside.sh bytes    that size in bytes, then the two largest files (scripts/dist_pack.sh's warning)
#   CARRY_ASIDE_PATHS="docs benchmarks" scripts/carry_aside.sh out   other paths (relative to the repository root)
#
# While they are out, git sees them as deleted: do not commit with -a until `in` (the script says so again). Refuses
# `out` while anything is still aside (an earlier `out` not brought back) and `in` where a path exists on both sides,
# so nothing is overwritten; exit 2 on a bad argument, 1 on a refusal.
set -euo pipefail
cd "$(dirname "$0")/.."
aside=${CARRY_ASIDE_DIR:-/tmp/replayssm-carry-aside-$(id -u)}
read -r -a paths <<<"${CARRY_ASIDE_PATHS:-benchmarks docs data/tiny_hybrid}"
die() { echo "carry_aside: $*" >&2; exit 1; }

carried() {  # "SIZE PATH" of what a call carries of the tree: tracked files that exist, untracked ones git does not ignore
  git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c '%s %n' 2>/dev/null || true
}
tree_mib() { carried | awk '{s += $1} END {printf "%.1f", s / 1048576}'; }

case "${1:-}" in
  out)
    for p in "${paths[@]}"; do
      [ ! -e "$aside/$p" ] || die "$aside/$p is still aside from an earlier 'out': run 'scripts/carry_aside.sh in' first"
    done
    moved=0
    for p in "${paths[@]}"; do
      [ -e "$p" ] || { echo "carry_aside: $p not in the tree, skipped"; continue; }
      mkdir -p "$aside/$(dirname "$p")"
      mv "$p" "$aside/$p"
      moved=$((moved + 1))
    done
    echo "carry_aside: $moved path(s) moved to $aside; the tree now carries $(tree_mib) MiB"
    echo "carry_aside: git sees them as deleted until 'scripts/carry_aside.sh in': no 'git commit -a' before that"
    ;;
  in)
    for p in "${paths[@]}"; do
      if [ -e "$aside/$p" ] && [ -e "$p" ]; then die "$p exists both in the tree and in $aside: left as they are"; fi
    done
    moved=0
    for p in "${paths[@]}"; do
      [ -e "$aside/$p" ] || continue
      mkdir -p "$(dirname "$p")"
      mv "$aside/$p" "$p"
      moved=$((moved + 1))
    done
    echo "carry_aside: $moved path(s) moved back from $aside; the tree carries $(tree_mib) MiB"
    ;;
  status)
    for p in "${paths[@]}"; do
      if [ -e "$aside/$p" ]; then echo "aside     $p ($aside/$p)"
      elif [ -e "$p" ]; then echo "in tree   $p"
      else echo "missing   $p"; fi
    done
    echo "the tree carries $(tree_mib) MiB"
    ;;
  bytes)
    carried | awk '{s += $1} END {print s + 0}'
    carried | sort -n | tail -2 | awk '{printf "%s %d MiB\n", $2, $1 / 1048576}'
    ;;
  *)
    sed -n '6,10p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
