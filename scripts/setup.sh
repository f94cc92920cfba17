#!/usr/bin/env bash
# Installs what replayssm needs to build and test: Debian's packages for the C++ side, and for the analysis package
# (analysis/, its notebooks and tests) the Python packages from PyPI into the `python3` on PATH (pyenv's here, which
# does not see Debian's python3-* packages). Idempotent and fast: installs nothing when everything is present.
# Runs as root (or via sudo) on Debian 12.
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config git
  libeigen3-dev libboost-program-options-dev
  libhdf5-dev hdf5-tools
  libfmt-dev catch2 libbenchmark-dev
  zstd xz-utils  # scripts/dist_pack.sh: the device bundle's patches
)
# The fuzzing build uses clang, its runtimes (libFuzzer, ASan) and LLVM's OpenMP (clang's -fopenmp is libomp).
pkgs+=(clang libclang-rt-dev libomp-dev)

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all Debian packages present"
else
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python packages of analysis/ (pyproject.toml lists the same pins): versions known to work together with Python
# 3.11. A package already installed is kept whatever its version, so this never fights a user's environment; only
# missing ones are installed.
py_pins=(numpy==1.26.4 h5py==3.11.0 xarray==2024.6.0 pandas==2.2.2 matplotlib==3.9.0 nbclient==0.10.0
         nbformat==5.10.4 ipykernel==6.29.4 pytest==8.2.2)
if ! command -v python3 >/dev/null; then
  echo "setup: python3 not found: the analysis package and its tests need it" >&2
  exit 1
fi
py_missing=$(python3 - "${py_pins[@]}" <<'PY'
import sys
from importlib import metadata
for pin in sys.argv[1:]:
    try:
        metadata.version(pin.split("==")[0])
    except metadata.PackageNotFoundError:
        print(pin)
PY
)
if [ -z "$py_missing" ]; then
  echo "setup: all Python packages present"
else
  echo "setup: pip installing" $py_missing
  # --root-user-action: pip warns about root installs; CI and this machine run as root on purpose.
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore $py_missing
fi
