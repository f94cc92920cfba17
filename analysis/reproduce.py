"""The reproduction (scripts/reproduce.sh is the command): run configs/paper/*.ini, execute every notebook of
analysis/notebooks/ headless, and write a report folder: figures/ (PNG + SVG), notebooks/ (executed), results/ and
report.md, which puts each of our numbers beside the published one (analysis/published.json) with the ratio and the
command that produced it. One progress line per stage on stderr.

    python3 -m analysis.reproduce [--quick] [--out DIR] [--replayssm BIN] [--bench PATH ...] [--skip-runs]

--quick runs every config at a reduced size (synthetic: 256 steps, 8 heads, a 256-word readout; recorded traces: their
first 256 steps; the language model: one sequence of 64 bytes): the pipeline end to end in seconds, numbers only
indicative. GPU figures read the newest benchmark JSON under benchmarks/ (or --bench); the
`backend = cuda` points run where this build has CUDA and a device, and are skipped with the reason elsewhere.
"""
from __future__ import annotations

import argparse
import glob
import math
import os
import shlex
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A key of a section a config lacks is accepted and unused, so one list serves synthetic, recorded and [model] runs.
QUICK = ["synth.steps=256", "synth.H=8", "metrics.vocab=256", "model.steps=64", "model.seqs=1", "run.steps=256"]


def progress(msg: str) -> None:
    print(f"reproduce: {msg}", file=sys.stderr, flush=True)


def find_replayssm(explicit: str | None) -> str:
    for c in [explicit, os.environ.get("REPLAYSSM"), os.path.join(ROOT, "build/experiments/replayssm")]:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise SystemExit("reproduce: no replayssm binary (build it with scripts/build.sh, or pass --replayssm BIN)")


def run_configs(binary: str, out: str, quick: bool, jobs: int) -> dict[str, str]:
    """Runs each configs/paper/*.ini into out/results/<name>.h5; returns name -> the command line."""
    commands = {}
    configs = sorted(glob.glob(os.path.join(ROOT, "configs/paper/*.ini")))
    if not configs:
        raise SystemExit("reproduce: no configs/paper/*.ini")
    for i, cfg in enumerate(configs):
        name = os.path.splitext(os.path.basename(cfg))[0]
        res = os.path.join(out, "results", f"{name}.h5")
        args = [binary, "run", os.path.relpath(cfg, ROOT), "-o", res, "--quiet", "--jobs", str(jobs)]
        for s in QUICK if quick else []:
            args += ["--set", s]
        t0 = time.time()
        p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
        if p.returncode != 0:
            sys.stderr.write(p.stderr)
            raise SystemExit(f"reproduce: {name} failed (exit {p.returncode}): {shlex.join(args)}")
        skipped = sum(1 for line in p.stderr.splitlines() if line.startswith("skipping run_") and "cuda" in line)
        note = f", {skipped} cuda point(s) skipped (no device or no CUDA build)" if skipped else ""
        progress(f"run {i + 1}/{len(configs)} {name}: {time.time() - t0:.1f} s{note}")
        commands[name] = shlex.join(["replayssm", "run", os.path.relpath(cfg, ROOT), "--jobs", str(jobs)] +
                                    [x for s in (QUICK if quick else []) for x in ("--set", s)])
    return commands


def execute_notebooks(out: str, env: dict) -> list[str]:
    import nbformat
    from nbclient import NotebookClient

    books = sorted(glob.glob(os.path.join(ROOT, "analysis/notebooks/*.ipynb")))
    os.makedirs(os.path.join(out, "notebooks"), exist_ok=True)
    failed = []
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernels inherit the environment of this process
    try:
        for i, path in enumerate(books):
            name = os.path.basename(path)
            t0 = time.time()
            nb = nbformat.read(path, as_version=4)
            client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": ROOT}})
            try:
                client.execute()
                status = "ok"
            except Exception as e:  # a failing cell: keep going, report it, fail at the end
                failed.append(name)
                status = f"FAILED: {str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__}"
            nbformat.write(nb, os.path.join(out, "notebooks", name))
            progress(f"notebook {i + 1}/{len(books)} {name}: {time.time() - t0:.1f} s, {status}")
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return failed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="reduced sizes (seconds, indicative numbers)")
    ap.add_argument("--out", default=None, help="report folder (default results/report, results/report-quick)")
    ap.add_argument("--replayssm", default=None, help="the replayssm binary (default build/experiments/replayssm)")
    ap.add_argument("--bench", action="append", default=None,
                    help="benchmark JSON file or folder (repeatable; default benchmarks/)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--skip-runs", action="store_true", help="reuse OUT/results (figures and report only)")
    a = ap.parse_args(argv)
    out = os.path.abspath(a.out or os.path.join(ROOT, "results", "report-quick" if a.quick else "report"))
    t_all = time.time()
    progress(f"stage 1/4: runs of configs/paper/*.ini{' (--quick)' if a.quick else ''} into {out}/results")
    os.makedirs(os.path.join(out, "results"), exist_ok=True)
    if a.skip_runs:
        commands = {os.path.splitext(os.path.basename(p))[0]: "(reused)" for p in
                    glob.glob(os.path.join(out, "results", "*.h5"))}
    else:
        commands = run_configs(find_replayssm(a.replayssm), out, a.quick, a.jobs)

    from . import bench as B
    bench_roots = a.bench or [os.path.join(ROOT, "benchmarks")]
    bench_files = B.find_benchmarks(*bench_roots)
    newest = B.newest_by_family(bench_files)
    spec_files = B.newest_spec_by_family(bench_files)
    has_device = shutil.which("nvidia-smi") is not None and \
        subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
    if newest or spec_files:
        found = dict(newest, **{f"speculative {f}": p for f, p in spec_files.items()})
        progress("stage 2/4: GPU data from " + ", ".join(f"{f}: {os.path.relpath(p, ROOT)}" for f, p in found.items())
                 + ("" if has_device else " (no device here: the newest committed benchmark JSON)"))
    else:
        progress("stage 2/4: no GPU benchmark JSON under " + ", ".join(bench_roots) +
                 ": GPU figures say so and draw the published numbers only")

    fig_dir = os.path.join(out, "figures")
    env = {"RSSM_RESULTS": os.path.join(out, "results"), "RSSM_FIGURES": fig_dir,
           "RSSM_BENCH": ":".join(os.path.abspath(r) for r in bench_roots), "MPLBACKEND": "Agg",
           "PYTHONPATH": ROOT + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}
    progress("stage 3/4: notebooks (headless)")
    failed = execute_notebooks(out, env)

    progress("stage 4/4: report.md")
    from .report import write_report
    path = write_report(out, commands, newest, quick=a.quick, has_device=has_device, spec_files=spec_files,
                        bench_roots=bench_roots)
    missing = [n for n in expected_figures() if not all(
        os.path.getsize(p) > 0 for p in [os.path.join(fig_dir, f"{n}.{e}") for e in ("png", "svg")]
        if os.path.exists(p)) or not os.path.exists(os.path.join(fig_dir, f"{n}.png"))]
    progress(f"wrote {path} and {len(os.listdir(fig_dir)) if os.path.isdir(fig_dir) else 0} figure files "
             f"in {time.time() - t_all:.0f} s")
    if failed or missing:
        progress(f"FAILED: notebooks {failed or 'ok'}, missing figures {missing or 'none'}")
        return 1
    return 0


def expected_figures() -> list[str]:
    from .figures import FIGURES
    return list(FIGURES)


if __name__ == "__main__":
    sys.exit(main())
