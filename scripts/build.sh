#!/usr/bin/env bash
# Configures and builds replayssm in build/ (Release). Extra arguments go to cmake's configure step.
# CUDA kernels are built when nvcc is found (see CMakeLists.txt: REPLAYSSM_CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)"
