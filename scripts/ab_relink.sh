#!/usr/bin/env bash
# A/B builds for timing one kernel file against another version of it in the same device call: recompiles
# KERNEL_FILE as it is at a git revision (or with a patch applied to it) with the flags CMake used for it,
# swaps that object into a copy of its static library, and relinks the named benchmarks (and, with -t, the GPU test
# binary) against the copy. The benchmark JSONs in benchmarks/experiments/ that name an "old" or patched binary were
# made this way. Needs a configured CUDA build (Unix Makefiles generator) that has been built.
#
#   scripts/ab_relink.sh [-b BUILD_DIR] [-n NAME] [-r BASE] [-t] KERNEL_FILE REV|PATCH BENCH...
#   scripts/ab_relink.sh [-p | -s REGEX] [-r BASE] KERNEL_FILE REV|PATCH
#   scripts/ab_relink.sh -l KERNEL_FILE
#     KERNEL_FILE  e.g. kernels/mamba2/mamba2_replay_grouped.cu
#     REV          a git revision: the file as committed there (e.g. 22a978c)
#     PATCH        a patch file (e.g. benchmarks/experiments/mamba2_flush_weights.b1.patch.txt), applied to
#                  KERNEL_FILE as it is at git revision BASE (-r; the working copy without it); one that changes
#                  headers under kernels/ or lib/ too is applied to a copy of both, and KERNEL_FILE compiled there
#     BENCH        benchmark targets of experiments/ (bench_mamba2_cuda, bench_gdn_cuda, bench_spec_cuda)
#     -b BUILD_DIR default build;  -n NAME suffix of the outputs (default: REV, or the patch's name);
#     -t           relink tests/gpu/replayssm_gpu_tests too
#     -p           relink nothing: compile the variant and the working copy with ptxas -v and list every kernel whose
#                  registers or spill bytes differ, the variant's counts first (the "ptxas:" counts of
#                  benchmarks/experiments/README.md); no BENCH
#     -s REGEX     as -p, then the static SASS of the kernels whose demangled names match REGEX, variant against
#                  working copy: instruction counts by class and the loops that changed (scripts/sass_loops.py
#                  --compare; needs cuobjdump and nvdisasm, which it names where to get)
#     -l           print the benchmark and the filter (scripts/gpu_ab.sh -f) of the rows that time KERNEL_FILE's kernels,
#                  and nothing else (no build needed); a relink prints the same line. The rows are named by kernel
#                  (bench_mamba2_cuda: replay/ and dual/ the per-head kernel, replay_g/ and dual_g/ the grouped one), and
#                  a filter of another kernel's rows times two identical builds
#   Outputs: dist/bin/BENCH_NAME (and dist/bin/replayssm_gpu_tests_NAME); run scripts/make_dist.sh before this, since
#   it empties dist/bin, and scripts/dist_pack.sh after it (the relinks travel as small patches; dist/unpack.sh
#   restores them on the device). Then on the H200, alternate the binaries in one call (scripts/gpu_ab.sh), e.g.
#     scripts/gpu_ab.sh -r 3 -f 'batch:256/' bench_mamba2_cuda bench_mamba2_cuda_22a978c
set -euo pipefail
cd "$(dirname "$0")/.."
build=build name="" tests=0 base="" ptx=0 sass="" list=0
while getopts "b:n:r:tps:l" o; do
  case "$o" in
    b) build=$OPTARG ;;
    r) base=$OPTARG ;;
    n) name=$OPTARG ;;
    t) tests=1 ;;
    p) ptx=1 ;;
    s) ptx=1 sass=$OPTARG ;;
    l) list=1 ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))

# The benchmark and the rows that time each kernel file (the benchmarks' bench_name: experiments/bench_*_cuda.cu).
rows_of() {
  case "$1" in
    kernels/mamba2/mamba2_eager.cu) echo "bench_mamba2_cuda ^eager/" ;;
    kernels/mamba2/mamba2_replay.cu) echo "bench_mamba2_cuda ^(replay|dual)/" ;;
    kernels/mamba2/mamba2_replay_grouped.cu) echo "bench_mamba2_cuda ^(replay|dual)_g(_h[0-9]+)?/" ;;
    kernels/mamba2/mamba2_pipelined.cu) echo "bench_mamba2_cuda ^(eager|replay|dual)_p(_s[0-9]+)?(_c[0-9]+)?/" ;;
    kernels/mamba2/mamba2_verify.cu | kernels/mamba2/mamba2_verify_grouped.cu) echo "bench_spec_cuda ^mamba2/" ;;
    kernels/gdn/gdn_eager.cu) echo "bench_gdn_cuda ^eager/" ;;
    kernels/gdn/gdn_replay.cu) echo "bench_gdn_cuda ^(replay|dual)/" ;;
    kernels/gdn/gdn_verify.cu) echo "bench_spec_cuda ^gdn/" ;;
    kernels/common/spec_commit.cu) echo "bench_spec_cuda ." ;;
    *) return 1 ;;
  esac
}
rows_line() {  # KERNEL_FILE: the line both -l and a relink print
  local r
  r=$(rows_of "$1") || { echo "ab_relink: no benchmark rows are known for $1 (scripts/ab_relink.sh, rows_of)"; return 0; }
  echo "ab_relink: $1 is timed by ${r%% *}'s rows matching '${r#* }' (scripts/gpu_ab.sh -f '${r#* }' ...)"
}
if [ "$list" = 1 ]; then
  [ $# -eq 1 ] || { echo "ab_relink: -l takes one KERNEL_FILE" >&2; exit 2; }
  rows_of "$1" >/dev/null || { echo "ab_relink: no benchmark rows are known for $1" >&2; exit 1; }
  rows_line "$1"
  exit 0
fi
[ $# -ge $((3 - ptx)) ] || { sed -n '2,/^set -e/{/^set -e/d;p}' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
file=$1 src=$2
shift 2
die() { echo "ab_relink: $*" >&2; exit 1; }
[ -f "$file" ] || die "$file: no such kernel file"
case "$file" in kernels/*.cu) ;; *) die "$file: expected a .cu file under kernels/" ;; esac
rel=${file#kernels/}
obj=$(ls "$build"/kernels/CMakeFiles/*.dir/"$rel".o 2>/dev/null | head -1) || true
[ -n "$obj" ] || die "$build/kernels/CMakeFiles/*.dir/$rel.o not found: configure and build $build with -DREPLAYSSM_CUDA=ON first"
tdir=${obj%/"$rel".o}  # the target's CMakeFiles/<target>.dir
target=$(basename "$tdir" .dir)
lib="$build/kernels/lib$target.a"
[ -f "$lib" ] || die "$lib not found (build $build first)"

tmp=$(mktemp -d)
vinc=""  # include folders searched first for the variant (a patch of headers: the patched copy)
variant="$(dirname "$file")/.ab_$$_$(basename "$file")"  # beside the original: its relative includes resolve
trap 'rm -rf "$tmp" "$variant"' EXIT
if [ -f "$src" ]; then
  command -v patch >/dev/null || die "applying $src needs patch (apt-get install patch)"
  if [ -n "$base" ]; then
    git show "$base:$file" >"$variant" 2>/dev/null || die "$file does not exist at $base (-r)"
  else
    cp "$file" "$variant"
  fi
  touched=$(sed -n 's#^+++ b/##p' "$src" | cut -f1)
  if [ -n "$touched" ] && [ "$touched" != "$file" ]; then
    # The patch changes headers (kernels/ or lib/) too: both trees are copied and patched, and the variant is compiled
    # from the copy with the copy's include folders first, so every header it includes is the patched one. Only
    # KERNEL_FILE's object is swapped: other objects of the library keep the unpatched headers.
    for t in $touched; do
      case "$t" in kernels/*|lib/*) ;; *) die "$src changes $t: a patch of several files may change kernels/ and lib/ only" ;; esac
    done
    tree="$tmp/tree"
    mkdir -p "$tree"
    if [ -n "$base" ]; then git archive "$base" kernels lib | tar -x -C "$tree"; else cp -r kernels lib "$tree/"; fi
    patch -s -p1 -d "$tree" --no-backup-if-mismatch -r - <"$src" || die "$src does not apply to kernels/ and lib/${base:+ at $base}"
    [ -f "$tree/$file" ] || die "$file does not exist${base:+ at $base}"
    rm -f "$variant"  # the copy beside the original is not used
    variant="$tree/$file" vinc="-I$tree/kernels -I$tree/lib"
  else
    patch -s --no-backup-if-mismatch -r - "$variant" <"$src" || die "$src does not apply to $file${base:+ at $base}"
  fi
  [ -n "$name" ] || name=$(basename "$src" | sed -E 's/\.(patch(\.txt)?|diff)$//')
else
  git rev-parse --verify -q "$src^{commit}" >/dev/null || die "$src: neither a file nor a git revision"
  git show "$src:$file" >"$variant" 2>/dev/null || die "$file does not exist at $src"
  [ -n "$name" ] || name=$(git rev-parse --short "$src")
fi

# The flags CMake compiled the object with (CUDA_DEFINES, CUDA_INCLUDES, CUDA_FLAGS of flags.make), from its folder.
flags() { sed -n "s/^$1 = //p" "$tdir/flags.make"; }
echo "ab_relink: compiling $file ($src) as $target's $(basename "$obj")"
cmd="nvcc $(flags CUDA_DEFINES) $(flags CUDA_INCLUDES) $(flags CUDA_FLAGS)"
vcmd="nvcc $(flags CUDA_DEFINES) $vinc $(flags CUDA_INCLUDES) $(flags CUDA_FLAGS)"
src_abs=$(realpath "$variant")
if [ "$ptx" = 1 ]; then
  # Both compiles at once (two cores), each one's ptxas report kept; then the kernels that differ, demangled.
  work_abs=$(realpath "$file")
  (set -f && cd "$build/kernels" && eval "$vcmd" -Xptxas -v -c "'$src_abs'" -o "'$tmp/variant.o'" >"$tmp/variant.txt" 2>&1) &
  (set -f && cd "$build/kernels" && eval "$cmd" -Xptxas -v -c "'$work_abs'" -o "'$tmp/work.o'" >"$tmp/work.txt" 2>&1) ||
    die "nvcc failed on the working copy of $file"
  wait $! || die "nvcc failed on $file at $src"
  python3 - "$tmp/variant.txt" "$tmp/work.txt" "$name" <<'PY'
import re, subprocess, sys
def report(path):
    out, fn = {}, None
    for line in open(path):
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            fn = m.group(1)
            continue
        m = re.search(r"(\d+) bytes spill stores", line)
        if m and fn:
            out.setdefault(fn, {})["spill"] = int(m.group(1))
        m = re.search(r"Used (\d+) registers", line)
        if m and fn:
            out.setdefault(fn, {})["regs"] = int(m.group(1))
    return out
# Kernels are matched by demangled name: an anonymous namespace's mangled name carries a hash of the file compiled,
# and the variant is compiled from a copy under another name, so by mangled name no such kernel would match.
def demangled(rep):
    keys = list(rep)
    names = subprocess.run(["c++filt"], input="\n".join(keys), capture_output=True, text=True).stdout.split("\n")
    return {name: rep[k] for k, name in zip(keys, names)}
old, new = demangled(report(sys.argv[1])), demangled(report(sys.argv[2]))
changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
print(f"{'registers':>12} {'spill bytes':>14}  kernel ({sys.argv[3]} -> working copy)")
for name in changed:
    o, n = old.get(name, {}), new.get(name, {})
    print(f"{o.get('regs', '-'):>5} -> {n.get('regs', '-'):<4} {o.get('spill', '-'):>5} -> {n.get('spill', '-'):<6} {name}")
print(f"{len(changed)} of {len(set(old) | set(new))} kernels differ")
PY
  if [ -n "$sass" ]; then
    echo "static SASS ($name -> working copy), kernels matching '$sass':"
    python3 scripts/sass_loops.py --compare --labels "$name,working copy" --kernel "$sass" "$tmp/variant.o" "$tmp/work.o" ||
      exit 1
  fi
  exit 0
fi
(set -f && cd "$build/kernels" && eval "$vcmd" -c "'$src_abs'" -o "'$tmp/$(basename "$obj")'") ||
  die "nvcc failed on $file at $src"
cp "$lib" "$tmp/lib.a"
(cd "$tmp" && ar r lib.a "$(basename "$obj")")

# Relink: the target's own link line with the output and this library replaced.
relink() {  # DIR TARGET OUT
  local link="$build/$1/CMakeFiles/$2.dir/link.txt"
  [ -f "$link" ] || die "$link not found (is $2 a target of $build/$1?)"
  local out
  out=$(realpath -m "$3")
  (cd "$build/$1" && sed -E "s# -o $2 # -o $out #; s#[^ ]*/lib$target\.a#$tmp/lib.a#g" CMakeFiles/"$2".dir/link.txt | sh) ||
    die "linking $2 failed"
  echo "ab_relink: $3"
}
mkdir -p dist/bin
for b in "$@"; do relink experiments "$b" "dist/bin/${b}_$name"; done
if [ "$tests" = 1 ]; then relink tests/gpu replayssm_gpu_tests "dist/bin/replayssm_gpu_tests_$name"; fi
rows_line "$file"
r=$(rows_of "$file") || true
for b in "$@"; do
  if [ -n "$r" ] && [ "$b" != "${r%% *}" ]; then
    echo "ab_relink: warning: $b does not time $file's kernels (${r%% *} does): its A/B rows will be level" >&2
  fi
done
