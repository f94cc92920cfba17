#!/usr/bin/env bash
# Bundle the replayssm binary and its non-libc shared libraries into dist/ (git-ignored) so that it runs on a
# machine without our build dependencies (the H200 machine, docs: ../shared/GPU.md):
#   scripts/make_dist.sh [BUILD_DIR]          # default build/; a CUDA build (build-cuda/) adds the GPU programs
#   there: LD_LIBRARY_PATH=$PWD/dist/lib ./dist/bin/replayssm ...
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin="$build/experiments/replayssm"
[ -x "$bin" ] || { echo "make_dist.sh: $bin not found: build it first (cmake --build $build --target replayssm)" >&2; exit 1; }
rm -rf dist/bin dist/lib
mkdir -p dist/bin dist/lib
cp -L "$bin" dist/bin/
# The CPU test binary too, when it was built (scripts/gpu_sanitize.sh takes it as an argument; its default is the
# GPU test binary below).
tests="$build/tests/replayssm_tests"
if [ -x "$tests" ]; then cp -L "$tests" dist/bin/; fi
# CUDA builds: the GPU tests and the kernel benchmarks (scripts/gpu_run.sh runs them on the H200).
gpu=()
for g in "$build/tests/gpu/replayssm_gpu_tests" "$build/experiments/bench_mamba2_cuda" "$build/experiments/bench_gdn_cuda" \
         "$build/experiments/bench_spec_cuda"; do
  if [ -x "$g" ]; then cp -L "$g" dist/bin/; gpu+=("$g"); fi
done
for l in $( (ldd "$bin"; [ -x "$tests" ] && ldd "$tests"; for g in "${gpu[@]}"; do ldd "$g"; done) | awk '/=> \//{print $3}' \
           | sort -u | grep -v -E 'libcuda\.so|libc\.so|libm\.so|libpthread|libdl|librt|ld-linux|libgcc_s|libstdc'); do
  cp -L "$l" dist/lib/
done
du -sh dist/bin dist/lib
# nvcc's compressed fatbins leave xz nothing: such a bundle packs to about twice the size, and the tests with one
# benchmark were the most a call could carry (kernels/CMakeLists.txt, REPLAYSSM_CUDA_COMPRESS).
if [ ${#gpu[@]} -gt 0 ] && ! grep -q '^REPLAYSSM_CUDA_COMPRESS:BOOL=OFF' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "make_dist.sh: $build compresses its device code; for the device's 64 MiB carry configure it with" \
       "-DREPLAYSSM_CUDA_COMPRESS=OFF -DREPLAYSSM_CUDA_ARCHITECTURES=90-real (every program then packs to about 30 MiB)" >&2
fi
