#!/usr/bin/env bash
# Quick start: install what is missing, build, and run the default experiment (configs/quickstart.ini) on a
# synthetic trace generated on the fly. Prints a table and writes results/quickstart.h5.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
build/experiments/replayssm run configs/quickstart.ini "$@"
