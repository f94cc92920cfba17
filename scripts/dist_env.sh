# Sourced by the scripts that run on the GPU machine (gpu_ab.sh, gpu_run.sh, gpu_steps.sh), from the repository root:
# restores dist/bin from scripts/dist_pack.sh's pack the first time, and puts dist/lib on LD_LIBRARY_PATH.
# dist_env: returns 1 (after a message) when the pack is there but will not unpack.
dist_env() {
  if [ -f dist/pack.tar.xz ] && [ ! -d dist/bin ]; then
    dist/unpack.sh >&2 || { echo "dist/unpack.sh failed: dist/bin not restored" >&2; return 1; }
  fi
  if [ -d dist/lib ]; then export LD_LIBRARY_PATH="$PWD/dist/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
}
