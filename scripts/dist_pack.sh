#!/usr/bin/env bash
# Shrinks the dist/ bundle (scripts/make_dist.sh, scripts/ab_relink.sh) for the device's carry limit (64 MiB a call:
# /work/.library/device/README.md). The GPU programs each embed the same kernels, so xz of dist/ as it is holds every
# copy. Here the GPU test binary is kept whole and every other program of dist/bin becomes a zstd patch against it
# (--patch-from), then bin/, lib/, the patches and zstd itself (the device has none) go into one dist/pack.tar.xz
# beside dist/unpack.sh, which restores dist/bin and dist/lib there. From a build configured with
# -DREPLAYSSM_CUDA_COMPRESS=OFF -DREPLAYSSM_CUDA_ARCHITECTURES=90-real (uncompressed SASS only: kernels/CMakeLists.txt)
# every program, the CPU tests and three A/B relinks pack to 30 MiB (2026-12-06); from nvcc's compressed fatbins,
# which neither xz nor the patches can see into, the GPU tests and replayssm alone took 56 MiB:
#
#   here:      scripts/make_dist.sh build  [scripts/ab_relink.sh ...]  scripts/dist_pack.sh
#   on the H200 (dist in the call's carry):  dist/unpack.sh && LD_LIBRARY_PATH=$PWD/dist/lib dist/bin/...
#              (scripts/gpu_run.sh runs dist/unpack.sh itself when it finds the pack)
#
#   scripts/dist_pack.sh [DIST_DIR]     default dist; needs DIST_DIR/bin/replayssm_gpu_tests (a CUDA build) and zstd
#   DIST_PACK_BASE=bench_mamba2_cuda scripts/dist_pack.sh   another program kept whole, the rest patched against it:
#                                       for a call that carries the benchmarks without the GPU tests (needed only
#                                       from a build with compressed device code, where the tests alone took 56 MiB)
# The binaries are stripped first (symbols are most of a compressed-fatbin binary's compressible bytes). Fails, leaving dist/ as it
# was, when a program is missing or when the pack exceeds 60 MiB (the rest of the tree travels too).
set -euo pipefail
dist=${1:-dist}
die() { echo "dist_pack: $*" >&2; exit 1; }
base_name=${DIST_PACK_BASE:-replayssm_gpu_tests}
base="$dist/bin/$base_name"
[ -f "$base" ] || die "$base not found: make the dist/ bundle from a CUDA build first (scripts/make_dist.sh build)"
[ -d "$dist/lib" ] || die "$dist/lib not found: make the dist/ bundle first (scripts/make_dist.sh)"
zstd_bin=$(command -v zstd) || die "zstd not found (apt-get install zstd; scripts/setup.sh installs it)"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/patch" "$stage/tools"
cp -p "$base" "$stage/bin/"
strip "$stage/bin/$base_name" 2>/dev/null || true  # not an ELF file (the tests' stand-ins): kept as is
for f in "$dist"/bin/*; do
  name=$(basename "$f")
  [ "$name" = "$base_name" ] && continue
  cp -p "$f" "$stage/$name"
  strip "$stage/$name" 2>/dev/null || true
  "$zstd_bin" -q --patch-from="$stage/bin/$base_name" "$stage/$name" -o "$stage/patch/$name.zst"
  rm "$stage/$name"
done
# Only the libraries some packed program loads: make_dist.sh collects them for every program it bundled, and a call
# that carries the benchmarks alone would otherwise carry replayssm's HDF5, curl and TLS stack (about 6 MiB packed,
# enough to push four relinked benchmarks over the limit). Programs that are not ELF (the tests' stand-ins) keep all.
# ldd looks in $dist/lib first, as the device will (an absolute path: ldd prints the paths as it was given them); a
# library it finds nowhere would be missing there too.
libdir=$(cd "$dist/lib" && pwd)
missing=$(for f in "$dist"/bin/*; do LD_LIBRARY_PATH="$libdir" ldd "$f" 2>/dev/null | grep 'not found' || true; done)
[ -z "$missing" ] || die "a program of $dist/bin loads a library found neither in $dist/lib nor on this machine:" $missing
needed=$(for f in "$dist"/bin/*; do LD_LIBRARY_PATH="$libdir" ldd "$f" 2>/dev/null | awk '/=> \//{print $3}' || true; done \
         | xargs -r -n1 basename | sort -u)
mkdir -p "$stage/lib"
kept=0 dropped=0
for l in "$dist"/lib/*; do
  [ -e "$l" ] || continue
  if [ -z "$needed" ] || grep -qxF "$(basename "$l")" <<<"$needed"; then
    cp -p "$l" "$stage/lib/"; kept=$((kept + 1))
  else
    dropped=$((dropped + 1))
  fi
done
[ "$dropped" -eq 0 ] || echo "dist_pack: $dropped of $((kept + dropped)) libraries in $dist/lib left out: no packed program loads them"
# zstd and the shared libraries it loads (not the C library: the device's is newer than Debian 12's).
cp -L "$zstd_bin" "$stage/tools/zstd"
for l in $(ldd "$zstd_bin" | awk '/=> \//{print $3}' | grep -v -E '/libc\.so|/libm\.so|ld-linux'); do
  cp -L "$l" "$stage/tools/"
done
tar -C "$stage" -cf - bin lib patch tools | xz -T2 -6 > "$stage/pack.tar.xz"
size=$(stat -c %s "$stage/pack.tar.xz")
[ "$size" -le $((60 * 1024 * 1024)) ] || die "the pack is $((size / 1048576)) MiB, over 60 MiB: build with -DREPLAYSSM_CUDA_COMPRESS=OFF -DREPLAYSSM_CUDA_ARCHITECTURES=90-real (kernels/CMakeLists.txt), or carry fewer programs (the benchmarks can travel in a call of their own, packed with DIST_PACK_BASE=bench_mamba2_cuda)"

{ echo '#!/usr/bin/env bash'; echo "base_name=$base_name"; } > "$stage/unpack.sh"
cat >> "$stage/unpack.sh" <<'EOF'
# Restores dist/bin and dist/lib from dist/pack.tar.xz (made by scripts/dist_pack.sh): one program (base_name) whole, the
# other programs from their zstd patches against it. Run on the device before anything in dist/bin.
set -euo pipefail
cd "$(dirname "$0")"
[ -f pack.tar.xz ] || { echo "unpack: $PWD/pack.tar.xz not found" >&2; exit 1; }
rm -rf bin lib patch tools
tar xJf pack.tar.xz
for p in patch/*.zst; do
  [ -e "$p" ] || continue
  out="bin/$(basename "$p" .zst)"
  LD_LIBRARY_PATH=tools tools/zstd -q -d --memory=2048MB --patch-from="bin/$base_name" "$p" -o "$out"
  chmod +x "$out"
done
rm -rf patch tools
echo "unpack: $(ls bin | wc -l) programs in $PWD/bin"
EOF
chmod +x "$stage/unpack.sh"
rm -rf "$dist/bin" "$dist/lib"
mv "$stage/pack.tar.xz" "$stage/unpack.sh" "$dist/"
echo "dist_pack: $dist/pack.tar.xz $((size / 1048576)) MiB ($(ls "$stage/patch" | wc -l) patched programs);" \
     "on the device: $dist/unpack.sh"
# The working tree travels too, within the same 64 MiB (tracked files and untracked ones git does not ignore, as
# carry_aside.sh counts them): say so when the two together would not fit.
if sizes=$("$(dirname "$0")/carry_aside.sh" bytes 2>/dev/null); then
  tree=$(head -1 <<<"$sizes")
  total=$(( (tree + size) / 1048576 ))
  if [ "$total" -ge 64 ]; then
    echo "dist_pack: warning: the tree ($((tree / 1048576)) MiB) and the pack make $total MiB, over the device's 64 MiB" \
         "a call; move what the call does not need out of the tree for it (scripts/carry_aside.sh out; largest:" \
         "$(tail -n +2 <<<"$sizes" | paste -sd ';'))" >&2
  fi
fi
