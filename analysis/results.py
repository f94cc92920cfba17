"""Read replayssm result files into xarray and pandas, the one way notebooks should read them.

    from analysis.results import open_summary, summary_frame, open_run, merge_results
    summary = open_summary("results/quickstart.h5")          # xarray.Dataset over `run`
    table = summary_frame("results/quickstart.h5")           # pandas DataFrame, one row per sweep point
    run = open_run("results/quickstart.h5", "run_0001")      # per-step, per-flush, per-position series
    both = merge_results(["shard0.h5", "shard1.h5"])         # one table, rows matched on their sweep parameters

Layout of the file: README.md, "Result files". Run `python3 -m analysis.results FILE` for a text summary.
Files written before sweep counts were stored as integers (interval, buffer_len: text then) load the same way: those
columns and attributes are cast to integers here.
"""
from __future__ import annotations

import sys
from typing import Iterable

import h5py
import numpy as np
import pandas as pd
import xarray as xr

# Sweep axes (the [scheme] keys; README "Configuration"). The counts among them are integers in files written since
# issue 13 and text before; INTEGER_KEYS is what loading casts, so old and new files compare equal.
SWEEP_KEYS = ("decoder", "state_format", "read_format", "buffer_format", "interval", "buffer_len", "dot_arith",
              "flush_arith", "rounding", "route", "act_format", "out_format", "backend")
INTEGER_KEYS = ("interval", "buffer_len", "batch", "seed", "seeds", "window")


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def _attr(value):
    """An HDF5 attribute as a plain Python value (numpy scalars unwrapped, bytes decoded)."""
    value = _text(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def _as_int(value):
    """An integer sweep value, whatever the file stored (old files: text such as "8")."""
    if isinstance(value, (bytes, str)):
        text = _text(value).strip()
        try:
            return int(text)
        except ValueError:
            return value
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    return int(value) if isinstance(value, (np.integer,)) else value


def _check(f: h5py.File, path: str) -> None:
    if _text(f.attrs.get("format", "")) != "replayssm-result":
        raise ValueError(f"{path}: not a replayssm result file (attribute 'format')")


def provenance(path: str) -> dict:
    """Root attributes: version, git commit, time, host, device, the resolved config, the trace."""
    with h5py.File(path, "r") as f:
        _check(f, path)
        return {k: _attr(v) for k, v in f.attrs.items()}


def run_ids(path: str) -> list[str]:
    """Ids of the completed runs (skipped points have a summary row but no group)."""
    with h5py.File(path, "r") as f:
        _check(f, path)
        return list(f["runs"].keys())


def _summary_columns(path: str) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as f:
        _check(f, path)
        if "summary" not in f:
            raise ValueError(f"{path}: no /summary group")
        data = {}
        for name, ds in f["summary"].items():
            v = ds[()]
            if v.dtype.kind in "OS":
                v = np.array([_text(x) for x in v], dtype=object)
            if name in INTEGER_KEYS:
                cast = [_as_int(x) for x in v]
                if all(isinstance(x, int) for x in cast):
                    v = np.array(cast, dtype=np.int64)
            data[name] = v
    if "run" not in data:
        raise ValueError(f"{path}: /summary has no 'run' column")
    return data


def summary_frame(path: str) -> pd.DataFrame:
    """/summary as a DataFrame: one row per sweep point (skipped and pending points included, with `status` and
    `skip_reason`), indexed by run id; counts are integers, names and formats strings, metrics floats."""
    data = _summary_columns(path)
    df = pd.DataFrame(data)
    df = df.set_index("run", drop=False)
    df.index.name = None
    return df


def open_summary(path: str) -> xr.Dataset:
    """/summary as a Dataset with one row per sweep point (dimension `run`), string columns decoded, counts cast to
    integers; root attributes (except the config text) as attributes."""
    data = _summary_columns(path)
    runs = data.pop("run")
    return xr.Dataset({k: ("run", v) for k, v in data.items()}, coords={"run": runs},
                      attrs={k: v for k, v in provenance(path).items() if k != "config"})


def open_run(path: str, run_id: str) -> xr.Dataset:
    """One run's series. Each series lives on its dimension scale (`step`, `flush_step` or `position`); attributes
    are the run's parameters and derived scalars (counts cast to integers)."""
    with h5py.File(path, "r") as f:
        _check(f, path)
        if run_id not in f["runs"]:
            raise KeyError(f"{path}: no run {run_id!r} (skipped, pending, or not in this file)")
        g = f["runs"][run_id]
        variables, coords = {}, {}
        for name, ds in g.items():
            if "index" in ds.attrs:
                idx = _text(ds.attrs["index"])
                coords[idx] = g[idx][()]
                variables[name] = (idx, ds[()])
            elif name == "outputs":
                variables[name] = (("step", "seq", "out"), ds[()])
        attrs = {}
        for k, v in g.attrs.items():
            if k in ("DIMENSION_LIST", "REFERENCE_LIST"):
                continue
            attrs[k] = _as_int(_attr(v)) if k in INTEGER_KEYS else _attr(v)
    return xr.Dataset(variables, coords=coords, attrs=attrs)


def open_runs(path: str, run_ids_: Iterable[str] | None = None) -> dict[str, xr.Dataset]:
    """Several runs of one file by id (default: every completed run)."""
    ids = run_ids(path) if run_ids_ is None else list(run_ids_)
    return {r: open_run(path, r) for r in ids}


def merge_results(paths: Iterable[str], on: Iterable[str] | None = None) -> pd.DataFrame:
    """The summaries of several files (shards of one sweep, cpu and cuda runs, runs of different configs) as one
    DataFrame, one row per (file, sweep point), with `file` and `source_run` columns naming where each came from.

    Rows are matched on their sweep parameters (`on`, default: the sweep keys both files have): a point present in
    several files keeps the row of the file listed first that completed it, so shards merge into the whole sweep and
    a rerun does not duplicate a point. Points that differ in any key (backend included) stay separate rows."""
    frames = []
    for p in paths:
        df = summary_frame(p)
        df["file"] = str(p)
        df["source_run"] = df["run"]
        df["git_commit"] = provenance(p).get("git_commit", "")
        frames.append(df)
    if not frames:
        raise ValueError("merge_results: no files given")
    keys = list(on) if on is not None else [k for k in SWEEP_KEYS if all(k in f.columns for f in frames)]
    for f in frames:
        missing = [k for k in keys if k not in f.columns]
        if missing:
            raise ValueError(f"{f['file'].iloc[0]}: summary lacks sweep column(s) {', '.join(missing)}")
    all_df = pd.concat(frames, ignore_index=True)
    # Completed rows first, so a point skipped in one file (e.g. cuda on a machine without a device) and run in
    # another keeps the completed row.
    all_df["_done"] = (all_df["status"] == "ok") if "status" in all_df else True
    all_df["_order"] = np.arange(len(all_df))
    all_df = all_df.sort_values(["_done", "_order"], ascending=[False, True])
    all_df = all_df.drop_duplicates(subset=keys, keep="first") if keys else all_df
    all_df = all_df.sort_values("_order").drop(columns=["_done", "_order"]).reset_index(drop=True)
    for k in INTEGER_KEYS:
        if k in all_df and all_df[k].dtype == object:
            cast = all_df[k].map(_as_int)
            if all(isinstance(x, int) for x in cast):
                all_df[k] = cast.astype(np.int64)
    return all_df


def completed(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of points that ran (status ok)."""
    return df[df["status"] == "ok"] if "status" in df else df


def _main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python3 -m analysis.results RESULT_FILE", file=sys.stderr)
        return 2
    s = summary_frame(argv[1])
    # decoder_label is the short name (files before it existed have only the full decoder_name).
    name = "decoder_label" if "decoder_label" in s else "decoder_name"
    cols = [c for c in (name, "interval", "status", "out_rel_err_mean", "kl_mean", "bytes_vs_eager_fp32") if c in s]
    print(s[cols].to_string())
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
