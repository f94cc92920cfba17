"""What every notebook in analysis/notebooks/ starts with: where the result files, benchmark JSON and figure folder
are. scripts/reproduce.sh sets them through the environment; run by hand, a notebook reads results/ and
benchmarks/ and writes figures under results/figures/.

    RSSM_RESULTS   folder of result files (default results/)
    RSSM_FIGURES   folder the figures go to (default results/figures/)
    RSSM_BENCH     benchmark JSON files or folders, separated by ':' (default benchmarks/)
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import pandas as pd

from . import bench as _bench
from . import figures as _figures
from .results import open_run, summary_frame

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Context:
    results: str
    figures: str
    bench_paths: list = field(default_factory=list)
    bench_roots: list = field(default_factory=list)  # the folders searched (the per-preset sweeps are found there)

    def result(self, name: str) -> str | None:
        """results/<name>.h5 when it exists."""
        p = os.path.join(self.results, f"{name}.h5")
        return p if os.path.exists(p) else None

    def summary(self, name: str) -> pd.DataFrame | None:
        p = self.result(name)
        return summary_frame(p) if p else None

    def runs(self, name: str, where=None, label: str = "decoder_label") -> dict:
        """{label: open_run} for the completed points of results/<name>.h5 that `where(row)` accepts."""
        p = self.result(name)
        if p is None:
            return {}
        s = summary_frame(p)
        s = s[s["status"] == "ok"]
        if where is not None:
            s = s[s.apply(where, axis=1)]
        return {row[label]: open_run(p, row["run"]) for _, row in s.iterrows()}

    def bench(self) -> pd.DataFrame | None:
        """The newest benchmark JSON of each family, concatenated (None when there is none)."""
        files = _bench.newest_by_family(self.bench_paths)
        if not files:
            print("no GPU benchmark JSON found in", ", ".join(self.bench_paths) or "(nothing)")
            return None
        frames = []
        for fam, p in files.items():
            df, ctx = _bench.read_benchmark(p)
            print(f"GPU data ({fam}): {p} ({ctx.get('gpu', '?')}, {ctx.get('date', '?')}, "
                  f"commit {str(ctx.get('git_commit', '?'))[:10]})")
            frames.append(df)
        return pd.concat(frames, ignore_index=True)

    def interval_bench(self) -> pd.DataFrame | None:
        """Every geometry preset's GPU interval sweep (benchmarks/interval_sweep/), or None."""
        df = _bench.read_interval_sweeps(*self.bench_roots)
        if df is None:
            print("no per-preset interval sweep JSON (interval_sweep_*.json) found")
        else:
            print(f"GPU interval sweeps: {df['preset'].nunique()} presets ({', '.join(sorted(df['preset'].unique()))}), "
                  f"{df['gpu'].iloc[0]}, commit {str(df['git_commit'].iloc[0])[:10]}")
        return df

    def spec_bench(self) -> tuple[pd.DataFrame | None, dict]:
        """The newest speculative benchmark of each family (bench_spec_cuda*.json, or benchmarks/runs/
        spec-bench-<family>.*.json) as (one row per family, batch, T; a context), or (None, {})."""
        files = _bench.newest_spec_by_family(self.bench_paths)
        if not files:
            print("no speculative benchmark JSON (bench_spec_cuda*.json, spec-bench-<family>.*.json) found in",
                  ", ".join(self.bench_paths) or "(nothing)")
            return None, {}
        for fam, p in files.items():
            _, c = _bench.read_spec_benchmark(p)
            print(f"speculative GPU data ({fam}): {p} ({c.get('gpu', '?')}, {c.get('date', '?')}, "
                  f"commit {str(c.get('git_commit', '?'))[:10]})")
        return _bench.read_spec_benchmarks(files)

    def save(self, fig, name: str) -> list[str]:
        paths = _figures.save(fig, self.figures, name)
        print("wrote", ", ".join(paths))
        return paths


def context() -> Context:
    results = os.environ.get("RSSM_RESULTS", os.path.join(ROOT, "results"))
    figures = os.environ.get("RSSM_FIGURES", os.path.join(results, "figures"))
    bench_env = os.environ.get("RSSM_BENCH", os.path.join(ROOT, "benchmarks"))
    roots = [p for p in bench_env.split(":") if p]
    return Context(results, figures, _bench.find_benchmarks(*roots), roots)
