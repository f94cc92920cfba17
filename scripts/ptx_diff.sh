#!/usr/bin/env bash
# Compares the PTX of every CUDA kernel between a git revision and the working tree, kernel by kernel, on a machine
# without a GPU: the check that a change meant to leave existing kernels alone (a refactor, a new template branch, a
# new launch field) really compiles them to the same code.
#   scripts/ptx_diff.sh [REV] [BUILD_DIR]      (REV default HEAD, BUILD_DIR default build; it must be a CUDA build)
# Each kernels/*/*.cu is compiled to PTX twice (REV in a temporary git worktree, and the working tree) with the
# build's include paths, at sm_90. Before comparing, each kernel's PTX is normalised for what cannot matter:
# line-info directives, basic-block label numbers, the anonymous-namespace hash, a `false` template argument appended
# to a kernel's name (kSR-style switches), and, with --offsets-free (default on), the byte offsets of ld.param loads
# (a launch struct that grew moves its later fields). Prints, per file, how many kernels are the same, differ, or are
# new, and exits 1 when any kernel of REV differs or is missing. -v prints the first lines of each difference.
set -euo pipefail
cd "$(dirname "$0")/.."
verbose=0
args=()
for a in "$@"; do
  if [ "$a" = "-v" ]; then verbose=1; else args+=("$a"); fi
done
rev="${args[0]:-HEAD}"
build="${args[1]:-build}"
command -v nvcc >/dev/null || { echo "ptx_diff.sh: nvcc not found" >&2; exit 2; }
[ -d "$build/kernels/CMakeFiles" ] || { echo "ptx_diff.sh: $build is not a CUDA build (no $build/kernels)" >&2; exit 2; }
root=$(pwd)
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/rev" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add -q --detach "$tmp/rev" "$rev"

status=0
for f in kernels/*/*.cu; do
  fam=$(basename "$(dirname "$f")")
  rsp="$build/kernels/CMakeFiles/rssm_kernels_$fam.dir/includes_CUDA.rsp"
  if [ ! -f "$rsp" ]; then rsp=$(ls "$build"/kernels/CMakeFiles/*/includes_CUDA.rsp | head -1); fi
  [ -f "$tmp/rev/$f" ] || { echo "$f: new file (not in $rev)"; continue; }
  for side in rev cur; do
    src_root=$([ $side = rev ] && echo "$tmp/rev" || echo "$root")
    inc=$(sed "s#$root#$src_root#g" "$rsp")
    (cd "$build/kernels" && eval nvcc -O3 -DNDEBUG -DFMT_SHARED "$inc" -arch=sm_90 -std=c++17 -ptx \
      "$src_root/$f" -o "$tmp/$side.ptx") || { echo "$f: PTX build failed ($side)"; status=1; continue 2; }
  done
  python3 - "$tmp/rev.ptx" "$tmp/cur.ptx" "$f" "$verbose" <<'PY' || status=1
import difflib, re, sys
def kernels(path):
    out = {}
    text = open(path).read()
    for m in re.finditer(r'\.entry (\S+)\((.*?)\n\}\n', text, re.S):
        body = m.group(0)
        body = re.sub(r'\.loc.*\n', '', body)
        body = re.sub(r'_GLOBAL__N__\w+?_cu_\w{8}', 'ANON', body)
        body = re.sub(r'Lb0E(E+v)', r'\1', body)
        body = re.sub(r'_param_0\[\d+\]', '_param_0[N]', body)
        body = re.sub(r'\$L__BB\d+_', '$L__BB_', body)
        body = re.sub(r'(ld\.param[^\[]*\[[^\]+]*)\+\d+\]', r'\1+X]', body)
        name = re.sub(r'Lb0E(E+v)', r'\1', re.sub(r'_GLOBAL__N__\w+?_cu_\w{8}', 'ANON', m.group(1)))
        out[name] = body.replace(name, 'K')
    return out
a, b = kernels(sys.argv[1]), kernels(sys.argv[2])
if not a:  # a file of kernels whose PTX yields none: the pattern above no longer reads nvcc's output
    print(f"{sys.argv[3]}: no kernel found in the PTX of the revision's build: nothing compared")
    sys.exit(1)
same = [k for k in a if k in b and a[k] == b[k]]
diff = [k for k in a if k in b and a[k] != b[k]]
missing = [k for k in a if k not in b]
new = [k for k in b if k not in a]
print(f"{sys.argv[3]}: same {len(same)}, differ {len(diff)}, missing {len(missing)}, new {len(new)}")
for k in diff + missing:
    print(f"  {'differs' if k in diff else 'missing'}: {k[:110]}")
    if sys.argv[4] == '1' and k in diff:
        for line in list(difflib.unified_diff(a[k].splitlines(), b[k].splitlines(), lineterm='', n=0))[2:22]:
            print('    ' + line)
sys.exit(1 if diff or missing else 0)
PY
done
exit $status
