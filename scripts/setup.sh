#!/usr/bin/env bash
# Installs what replayssm needs to build and test, from Debian's packages only.
# Idempotent: installs nothing when everything is present. Runs as root (or via sudo) on Debian 12.
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config git
  libeigen3-dev libboost-program-options-dev
  libhdf5-dev hdf5-tools
  libfmt-dev catch2 libbenchmark-dev
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
  echo "setup: all packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
