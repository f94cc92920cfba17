#!/usr/bin/env bash
# One command that reproduces the method's tables and figures next to the published numbers (issue 13): runs
# configs/paper/*.ini with replayssm, executes every notebook of analysis/notebooks/ headless, and writes a report
# folder (default results/report/, with --quick results/report-quick/): figures/ as PNG and SVG, the executed
# notebooks, the result files, and report.md (ours beside the published value, the ratio, the command).
#   scripts/reproduce.sh [--quick] [--out DIR] [--replayssm BIN] [--bench JSON_OR_DIR ...]
# --quick: reduced sizes (about a minute here). Needs a built replayssm (scripts/build.sh; REPLAYSSM=path or
# --replayssm to use another) and the Python packages scripts/setup.sh installs. GPU figures read the newest benchmark
# JSON under benchmarks/ when this machine has no device, and say so.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_WAIT_POLICY=passive
exec python3 -m analysis.reproduce "$@"
