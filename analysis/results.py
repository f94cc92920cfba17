"""Read replayssm result files into xarray, the one way notebooks should read them.

    from analysis.results import open_summary, open_run
    summary = open_summary("results/quickstart.h5")          # xarray.Dataset over `run`
    run = open_run("results/quickstart.h5", "run_0001")      # per-step, per-flush, per-position series

Layout of the file: README.md, "Result files". Run `python3 -m analysis.results FILE` for a text summary.
Requires numpy, h5py and xarray (pip install numpy h5py xarray).
"""
from __future__ import annotations

import sys

import h5py
import numpy as np
import xarray as xr


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def provenance(path: str) -> dict:
    """Root attributes: version, git commit, time, host, device, the resolved config, the trace."""
    with h5py.File(path, "r") as f:
        if _text(f.attrs.get("format", "")) != "replayssm-result":
            raise ValueError(f"{path}: not a replayssm result file (attribute 'format')")
        return {k: _text(v) for k, v in f.attrs.items()}


def run_ids(path: str) -> list[str]:
    with h5py.File(path, "r") as f:
        return list(f["runs"].keys())


def open_summary(path: str) -> xr.Dataset:
    """/summary as a Dataset with one row per sweep point (dimension `run`), string columns decoded."""
    with h5py.File(path, "r") as f:
        g = f["summary"]
        data = {}
        for name, ds in g.items():
            v = ds[()]
            if v.dtype.kind in "OS":
                v = np.array([_text(x) for x in v], dtype=object)
            data[name] = v
    runs = data.pop("run")
    return xr.Dataset({k: ("run", v) for k, v in data.items()}, coords={"run": runs},
                      attrs={k: v for k, v in provenance(path).items() if k != "config"})


def open_run(path: str, run_id: str) -> xr.Dataset:
    """One run's series. Each series lives on its index (`step`, `flush_step` or `position`); attributes are the
    run's parameters and derived scalars."""
    with h5py.File(path, "r") as f:
        g = f["runs"][run_id]
        variables, coords = {}, {}
        for name, ds in g.items():
            if "index" in ds.attrs:
                idx = _text(ds.attrs["index"])
                coords[idx] = g[idx][()]
                variables[name] = (idx, ds[()])
            elif name == "outputs":
                variables[name] = (("step", "seq", "out"), ds[()])
        attrs = {k: _text(v) for k, v in g.attrs.items() if k not in ("DIMENSION_LIST", "REFERENCE_LIST")}
    return xr.Dataset(variables, coords=coords, attrs=attrs)


def _main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python3 -m analysis.results RESULT_FILE", file=sys.stderr)
        return 2
    s = open_summary(argv[1])
    # decoder_label is the short name (files before it existed have only the full decoder_name).
    name = "decoder_label" if "decoder_label" in s else "decoder_name"
    cols = [c for c in (name, "status", "out_rel_err_mean", "kl_mean", "bytes_vs_eager_fp32") if c in s]
    print(s[cols].to_dataframe().to_string())
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
