# Sourced by the scripts that run on the GPU machine (gpu_ab.sh, gpu_run.sh, gpu_steps.sh), from the repository root:
# restores dist/bin from scripts/dist_pack.sh's pack the first time, and puts dist/lib on LD_LIBRARY_PATH.
# dist_env: returns 1 (after a message) when the pack is there but will not unpack.
dist_env() {
  if [ -f dist/pack.tar.xz ] && [ ! -d dist/bin ]; then
    dist/unpack.sh >&2 || { echo "dist/unpack.sh failed: dist/bin not restored" >&2; return 1; }
  fi
  if [ -d dist/lib ]; then export LD_LIBRARY_PATH="$PWD/dist/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
}

# The commit the programs were built from (the one replayssm embeds), not the checkout's: on the device the tree's git
# state need not be the build's (a call at 3d76c5e's build reported the checkout's 68fa0df).
build_commit() {
  local v
  v=$(dist/bin/replayssm --version 2>/dev/null | sed -n 's/.*(git \([0-9a-f]\{10\}\)[0-9a-f]*\(-dirty\)\{0,1\}).*/\1\2/p')
  [ -n "$v" ] && echo "$v (build)" || echo "$(git rev-parse --short HEAD 2>/dev/null || echo unknown) (checkout)"
}
