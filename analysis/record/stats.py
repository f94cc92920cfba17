"""SSM statistics of a trace (numpy + h5py): decay spectrum per head, dt / gate / beta distributions, outlier
channels. `python3 -m analysis.record.stats TRACE.h5 [...]` prints one JSON object per trace."""
from __future__ import annotations

import json
import sys

import numpy as np


def _softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def _q(a, qs=(0.01, 0.1, 0.5, 0.9, 0.99)):
    a = np.asarray(a, dtype=np.float64).ravel()
    return {f"p{int(q * 100)}": float(np.quantile(a, q)) for q in qs}


def trace_stats(path: str) -> dict:
    import h5py
    from .trace_writer import read_inputs

    with h5py.File(path, "r") as f:
        fam = f.attrs["family"]
        fam = fam.decode() if isinstance(fam, bytes) else fam
        A_log = f["params/A_log"][...]
        dt_bias = f["params/dt_bias"][...]
        dt_min = float(f.attrs.get("dt_min", 0.0))
        dt_max = float(f.attrs.get("dt_max", np.inf))
    x = read_inputs(path)
    out = {"family": fam, "A": _q(np.exp(A_log))}
    if fam == "mamba2":
        delta = np.clip(_softplus(x["dt"].astype(np.float64) + dt_bias), dt_min, dt_max)   # [T, S, H]
        r = delta * np.exp(A_log)                       # per-step log-decay -A*Delta
        out["delta"] = _q(delta)
        out["log_decay_per_step"] = _q(r)
        out["memory_steps_per_head_median"] = [float(1 / max(m, 1e-30)) for m in np.median(r, axis=(0, 1))]
        spikes = delta > 10 * np.median(delta, axis=(0, 1), keepdims=True)
        out["delta_spike_fraction"] = float(spikes.mean())
        out["heads_slow_r_le_1e-3"] = float((np.median(r, axis=(0, 1)) <= 1e-3).mean())
        out["heads_fast_r_gt_0.1"] = float((np.median(r, axis=(0, 1)) > 0.1).mean())
        for n in ("x", "B", "C", "z"):
            if n not in x:
                continue
            a = x[n].reshape(x[n].shape[0] * x[n].shape[1], -1).astype(np.float64)
            rms = np.sqrt((a ** 2).mean(axis=0))
            med = np.median(rms)
            out[f"{n}_rms"] = float(np.sqrt((a ** 2).mean()))
            out[f"{n}_channel_rms_max_over_median"] = float(rms.max() / med)
            out[f"{n}_outlier_channels_10x"] = int((rms > 10 * med).sum())
            out[f"{n}_absmax"] = float(np.abs(a).max())
    else:
        g = -np.exp(A_log) * _softplus(x["a"].astype(np.float64) + dt_bias)   # [T, S, HV]
        beta = 1 / (1 + np.exp(-x["b"].astype(np.float64)))
        out["g"] = _q(g)
        out["alpha"] = _q(np.exp(g))
        out["memory_steps_per_head_median"] = [float(1 / max(m, 1e-30)) for m in np.median(-g, axis=(0, 1))]
        out["heads_slow_r_le_1e-3"] = float((np.median(-g, axis=(0, 1)) <= 1e-3).mean())
        out["heads_fast_r_gt_0.1"] = float((np.median(-g, axis=(0, 1)) > 0.1).mean())
        out["beta"] = _q(beta)
        for n in ("q", "k", "v"):
            a = x[n].reshape(x[n].shape[0] * x[n].shape[1], -1).astype(np.float64)
            rms = np.sqrt((a ** 2).mean(axis=0))
            out[f"{n}_rms"] = float(np.sqrt((a ** 2).mean()))
            out[f"{n}_channel_rms_max_over_median"] = float(rms.max() / np.median(rms))
    return out


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(json.dumps({"trace": p, **trace_stats(p)}))
