"""Write replayssm trace files (format v1, docs/trace_format.md) with numpy + h5py alone (no torch)."""
from __future__ import annotations

import os

import numpy as np

MAMBA2_INPUTS = ("x", "dt", "B", "C", "z")
GDN_INPUTS = ("q", "k", "v", "a", "b")


def bf16_bits(a) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), round to nearest, ties to even (finite inputs)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_f32(bits) -> np.ndarray:
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def write_trace(path: str, family: str, geometry: dict, params: dict, inputs: dict, *,
                storage: str = "fp32", description: str = "", extra_attrs: dict | None = None,
                readout=None, chunk_steps: int = 64) -> None:
    """Write one layer's trace.

    geometry: Mamba-2 {H, P, N, G}, GDN {HK, HV, K, V}.
    params: Mamba-2 {A_log [H], D [H] or [H,P], dt_bias [H]}, GDN {A_log [HV], dt_bias [HV]} (stored float64).
    inputs: name -> array [steps, seqs, ...per-token shape] (stored float32, or bfloat16 when storage == "bf16").
    extra_attrs: e.g. dt_min, dt_max (Mamba-2), eps (GDN).
    The file is written to PATH.tmp and renamed, so an interrupted write leaves no half file.
    """
    import h5py

    if family not in ("mamba2", "gdn"):
        raise ValueError(f"family must be mamba2 or gdn, not {family!r}")
    if storage not in ("fp32", "bf16"):
        raise ValueError(f"storage must be fp32 or bf16, not {storage!r}")
    names = MAMBA2_INPUTS if family == "mamba2" else GDN_INPUTS
    arrays = {}
    for n in names:
        if n not in inputs:
            if n == "z":
                continue
            raise ValueError(f"{path}: input {n!r} missing")
        a = np.asarray(inputs[n], dtype=np.float32)
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{path}: input {n!r} has non-finite values")
        arrays[n] = a
    steps, seqs = arrays[names[0]].shape[:2]
    if family == "mamba2":
        H, P, N, G = (int(geometry[k]) for k in ("H", "P", "N", "G"))
        shapes = dict(x=(H, P), dt=(H,), B=(G, N), C=(G, N), z=(H, P))
    else:
        HK, HV, K, V = (int(geometry[k]) for k in ("HK", "HV", "K", "V"))
        shapes = dict(q=(HK, K), k=(HK, K), v=(HV, V), a=(HV,), b=(HV,))
    for n, a in arrays.items():
        if a.shape != (steps, seqs) + shapes[n]:
            raise ValueError(f"{path}: input {n!r} has shape {a.shape}, expected {(steps, seqs) + shapes[n]}")

    tmp = path + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with h5py.File(tmp, "w", track_order=True) as f:
        f.attrs["format"] = "replayssm-trace"
        f.attrs["version"] = 1
        f.attrs["family"] = family
        for k, v in geometry.items():
            f.attrs[k] = int(v)
        f.attrs["steps"] = int(steps)
        f.attrs["seqs"] = int(seqs)
        if family == "mamba2":
            f.attrs["has_z"] = int("z" in arrays)
            f.attrs["d_per_dim"] = int(np.asarray(params["D"]).ndim == 2)
        for k, v in (extra_attrs or {}).items():
            f.attrs[k] = v
        f.attrs["description"] = description
        p = f.create_group("params")
        for k in (("A_log", "D", "dt_bias") if family == "mamba2" else ("A_log", "dt_bias")):
            v = np.asarray(params[k], dtype=np.float64)
            if not np.all(np.isfinite(v)):
                raise ValueError(f"{path}: parameter {k!r} has non-finite values")
            p.create_dataset(k, data=v)
        g = f.create_group("inputs")
        for n, a in arrays.items():
            chunks = (min(chunk_steps, steps), seqs) + a.shape[2:]
            data = bf16_bits(a) if storage == "bf16" else a
            ds = g.create_dataset(n, data=data, chunks=chunks, compression="gzip", compression_opts=1,
                                  shuffle=True)
            if storage == "bf16":
                ds.attrs["encoding"] = "bfloat16"
        if readout is not None:
            f.create_dataset("readout", data=np.asarray(readout, dtype=np.float32))
    os.replace(tmp, path)


def read_inputs(path: str) -> dict:
    """All inputs of a trace as float32 arrays (bf16 decoded)."""
    import h5py

    out = {}
    with h5py.File(path, "r") as f:
        for n, ds in f["inputs"].items():
            a = ds[...]
            enc = ds.attrs.get("encoding", b"")
            enc = enc.decode() if isinstance(enc, bytes) else enc
            out[n] = bf16_to_f32(a) if enc == "bfloat16" else a.astype(np.float32)
    return out
