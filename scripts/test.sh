#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run every CPU test through ctest.
# GPU tests (label `gpu`) skip themselves where no device is present.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd build
ctest --output-on-failure -j"$(nproc)" "$@"
