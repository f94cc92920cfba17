"""Benchmark JSON (Google Benchmark's --benchmark_out format) into pandas DataFrames.

    from analysis.bench import read_benchmark, find_benchmarks
    df, ctx = read_benchmark("benchmarks/gpu/bench_mamba2_cuda.json")

The GPU benchmarks (experiments/bench_mamba2_cuda.cu, bench_gdn_cuda.cu) name each case by path segments:
`scheme[/route]/format/K<interval>/<kind>/batch:<n>` (eager has no route, interval or kind; the ceilings are
`ceiling/copy_d2d` and `ceiling/read_only`), then Google Benchmark's own `iterations:..`, `repeats:..`,
`manual_time[_<aggregate>]`. Each segment becomes a column; counters (us_median, GBps, of_copy, of_read, bytes, ...)
stay columns; the context (gpu, geometry, git_commit, ceilings, method) is returned beside the table.
"""
from __future__ import annotations

import glob
import json
import os
import re

import pandas as pd

_KINDS = ("nonflush", "flush", "amortised")
_ROUTES = ("inner", "reconstruct")
_SCHEMES = ("eager", "replay", "dual", "spec-eager", "spec-replay", "ceiling", "fla_eager")
_AGG = re.compile(r"^(?:manual|real)_time(?:_(\w+))?$")


def parse_name(name: str) -> dict:
    """The columns a benchmark name encodes (see the module doc). Unknown segments are kept in `extra`."""
    out = {"scheme": None, "variant": None, "route": None, "state_format": None, "interval": None, "kind": None,
           "batch": None, "window": None, "stat": None, "case": None}
    parts = name.split("/")
    extra = []
    for i, seg in enumerate(parts):
        m = _AGG.match(seg)
        if m:
            out["stat"] = m.group(1) or "iteration"
        elif i == 0:
            m = re.fullmatch(r"(eager|replay|dual)_(\w+)", seg)  # a kernel variant: replay_g, replay_g_h4, eager_p ...
            out["scheme"], out["variant"] = (m.group(1), m.group(2)) if m else (seg, None)
        elif seg in _KINDS:
            out["kind"] = seg
        elif seg in _ROUTES:
            out["route"] = seg
        elif re.fullmatch(r"K\d+", seg):
            out["interval"] = int(seg[1:])
        elif re.fullmatch(r"T\d+", seg):
            out["window"] = int(seg[1:])
        elif ":" in seg:
            k, v = seg.split(":", 1)
            if k in ("batch", "window", "fill"):
                out[k] = int(v)
            elif k not in ("iterations", "repeats", "repetitions", "min_time"):
                extra.append(seg)
        elif out["scheme"] == "ceiling" and out["case"] is None:
            out["case"] = seg
        elif out["state_format"] is None and out["scheme"] in _SCHEMES:
            out["state_format"] = seg
        else:
            extra.append(seg)
    out["extra"] = "/".join(extra)
    return out


def _family(ctx: dict, path: str) -> str:
    geo = str(ctx.get("geometry", ""))
    if "HK=" in geo or "HV=" in geo or "gdn" in os.path.basename(path).lower():
        return "gdn"
    if "H=" in geo or "mamba2" in os.path.basename(path).lower():
        return "mamba2"
    return ""


def _context(doc: dict) -> dict:
    """The JSON's context with the numbers AddCustomContext wrote as text (ceilings, sms, ...) as floats."""
    ctx = dict(doc.get("context", {}))
    for k, v in list(ctx.items()):
        if isinstance(v, str):
            try:
                ctx[k] = float(v)
            except ValueError:
                pass
    return ctx


def read_benchmark(path: str) -> tuple[pd.DataFrame, dict]:
    """One benchmark JSON: (table with one row per benchmark entry, context dict). Numeric context values written as
    text by AddCustomContext (copy_ceiling_GBps, read_ceiling_GBps, sms) are converted to numbers."""
    with open(path) as fh:
        try:
            doc = json.load(fh)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not JSON ({e})") from None
    if not isinstance(doc, dict) or "benchmarks" not in doc:
        raise ValueError(f"{path}: no 'benchmarks' list: not Google Benchmark JSON output")
    ctx = _context(doc)
    rows = []
    for b in doc["benchmarks"]:
        row = dict(b)
        row.update(parse_name(b.get("run_name", b["name"])))
        if b.get("run_type") == "aggregate":
            row["stat"] = b.get("aggregate_name")
        rows.append(row)
    df = pd.DataFrame(rows)
    df["file"] = path
    df["family"] = _family(ctx, path)
    df["gpu"] = ctx.get("gpu", "")
    df["preset"] = str(ctx.get("preset", "") or ctx.get("geometry", ""))  # older files: the geometry string
    df["git_commit"] = ctx.get("git_commit", ctx.get("commit", ""))
    if "time_unit" in df and "real_time" in df:
        scale = df["time_unit"].map({"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}).fillna(1.0)
        df["time_us"] = df["real_time"] * scale
    for c in ("interval", "batch", "window"):
        if c in df:
            df[c] = df[c].astype("Int64")
    return df, ctx


# The kernel variant a family's cuda decoder runs, where a benchmark times it under a variant name: the Mamba-2
# decoder runs the grouped replay kernel (replay_g / dual_g, the launcher's automatic shape) wherever
# mamba2_grouped_accepts the launch (kernels/mamba2/mamba2_decoder.cpp), which every benchmarked replay and dual case
# satisfies (fp32 flush arithmetic, nearest rounding). Cases the benchmark times only under the plain name keep that.
DECODER_VARIANTS = {("mamba2", "replay"): "g", ("mamba2", "dual"): "g"}
_CASE_KEY = ("file", "family", "preset", "scheme", "route", "state_format", "interval", "kind", "batch", "window",
             "stat")


# Name segments of the benchmarks' tuning sweeps (a knob forced where the launcher would choose: fold:fma, the GDN
# FFMA fold; vt:N, pt:N, the tiles per head): not what the decoders run, which is the plain-named row of the case.
_TUNING = re.compile(r"(?:^|/)(?:fold|vt|pt):")


def _decoder_kernels(d: pd.DataFrame, series: bool) -> pd.DataFrame:
    """The rows of the kernels the decoders run: per case, the decoder's variant where the run has it, else the
    plain-named kernel (series: both, each under its `variant`, for lines that must not switch kernels between
    points); every other variant (forced shapes such as replay_g_h4, the pipelined *_p) and every tuning sweep's row
    (_TUNING) left out."""
    if "extra" in d:
        d = d[~d["extra"].fillna("").astype(str).str.contains(_TUNING)]
    fam = d["family"] if "family" in d else pd.Series("", index=d.index)
    want = pd.Series([DECODER_VARIANTS.get((f, s)) for f, s in zip(fam, d["scheme"])], index=d.index, dtype=object)
    preferred = d["variant"].notna() & (d["variant"] == want)
    plain = d["variant"].isna()
    if series:
        return d[preferred | plain]
    key = [d[c].astype(str) for c in _CASE_KEY if c in d]
    has_preferred = preferred.groupby(key).transform("any") if key else preferred.any()
    return d[preferred | (plain & ~has_preferred)]


def step_times(df: pd.DataFrame, stat: str = "median", variants: bool = False, series: bool = False) -> pd.DataFrame:
    """One row per (scheme, route, state_format, interval, kind, batch): the chosen statistic (stat column) of the
    repetitions (or the single iteration when there were none), without the ceilings, of the kernel the decoders run
    (DECODER_VARIANTS: Mamba-2 replay and dual rows are the grouped kernel's where the run timed it; column `variant`
    says which), tuning sweeps' rows left out. `series`: the decoder variant's rows and the plain kernel's both, so
    that a line over intervals or batches can keep to one kernel (group by `variant`; kernel_label names it). Every
    variant's and sweep's rows, each under its own `variant` / `extra`, with `variants`."""
    d = df[(df["scheme"] != "ceiling")]
    if not variants and "variant" in d:
        d = _decoder_kernels(d, series)
    agg = d[d["stat"] == stat]
    if agg.empty:
        agg = d[d["stat"].isin(["iteration", None])]
    return agg.reset_index(drop=True)


def kernel_label(family: str, variant) -> str:
    """What a step_times row's kernel is called in figures: '' for the plain-named kernel of GDN, 'per-head' /
    'grouped' for Mamba-2's (the decoder runs the grouped replay kernel where it accepts the launch)."""
    if family != "mamba2":
        return "" if not isinstance(variant, str) else variant
    return "grouped" if variant == "g" else "per-head" if not isinstance(variant, str) else variant


_SPEC_CASE = re.compile(r"^(mamba2|gdn)/T:(\d+)/batch:(\d+)$")


def read_spec_benchmark(path: str, stat: str = "median") -> tuple[pd.DataFrame, dict]:
    """bench_spec_cuda JSON (experiments/bench_spec_cuda.cu): one row per (family, batch, window) with the counters
    as columns (us_verify, us_verify_flush, us_verify_amortised, us_per_token, us_eager_verify, us_eager_per_token,
    us_replay_amortised, mean_committed, bytes_*, ...), and the context. Its case names (`mamba2/T:4/batch:256`) carry
    the family, unlike the per-family benchmarks, so it has its own reader; the commit cases are left out."""
    with open(path) as fh:
        doc = json.load(fh)
    ctx = _context(doc)
    picked, singles = {}, {}
    for b in doc.get("benchmarks", []):
        m = _SPEC_CASE.match(re.sub(r"/iterations:.*$", "", b.get("run_name", b["name"])))
        if not m:
            continue
        key = (m.group(1), int(m.group(3)), int(m.group(2)))
        if b.get("aggregate_name") == stat:
            picked[key] = b
        elif b.get("run_type") == "iteration":
            singles.setdefault(key, b)  # a run without repetitions (--once) has only these
    for key, b in singles.items():
        picked.setdefault(key, b)
    rows = []
    for (fam, batch, window), b in picked.items():
        row = {k: v for k, v in b.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        row.update(family=fam, batch=batch, window=window, file=path)
        rows.append(row)
    df = pd.DataFrame(rows)
    if not df.empty:
        df = df.sort_values(["family", "batch", "window"]).reset_index(drop=True)
    return df, ctx


# A family's full benchmark: bench_<family>_cuda*.json (scripts/gpu_run.sh), or the per-commit runs committed under
# benchmarks/runs/ as <family>-bench.<commit>.<gpu>.json (another preset's run there is <family>-bench-<preset>.*, so
# it does not match); the speculative benchmark likewise: bench_spec_cuda*.json (both families) or
# spec-bench-<family>.<commit>.*.json (a kernel variant's run, spec-bench-<family>-<variant>.*, does not match).
BENCH_PATTERNS = ("bench_*cuda*.json", "mamba2-bench.*.json", "gdn-bench.*.json", "spec-bench-mamba2.*.json",
                  "spec-bench-gdn.*.json")


def is_spec(path: str) -> bool:
    """A speculative benchmark (bench_spec_cuda JSON), whose family is in each case's name."""
    base = os.path.basename(path)
    return base.startswith("bench_spec") or base.startswith("spec-bench")


def find_benchmarks(*roots: str, pattern: str | tuple[str, ...] = BENCH_PATTERNS) -> list[str]:
    """Benchmark JSON files under the given folders (recursively), newest first by the date in their context, then
    by modification time."""
    patterns = (pattern,) if isinstance(pattern, str) else pattern
    found = []
    for r in roots:
        if r and os.path.isdir(r):
            for pat in patterns:
                found += glob.glob(os.path.join(r, "**", pat), recursive=True)
        elif r and os.path.isfile(r):
            found.append(r)

    def when(p):
        try:
            with open(p) as fh:
                date = json.load(fh).get("context", {}).get("date", "")
        except (OSError, ValueError):
            date = ""
        return (date, os.path.getmtime(p))

    return sorted(set(found), key=when, reverse=True)


def read_interval_sweeps(*roots: str) -> pd.DataFrame | None:
    """The per-preset interval sweeps (benchmarks/interval_sweep/interval_sweep_<preset>*.json: one bench_mamba2_cuda
    or bench_gdn_cuda run per geometry preset, replay amortised over every interval plus eager, batch 256), the
    newest file of each preset, concatenated; None when there is none. Kept apart from bench_*cuda*.json so that a
    filtered run never stands in for a family's full benchmark."""
    frames, seen = [], set()
    for p in find_benchmarks(*roots, pattern="interval_sweep_*.json"):
        df, _ = read_benchmark(p)
        key = (df["family"].iloc[0] if len(df) else "", df["preset"].iloc[0] if len(df) else p)
        if key in seen:
            continue
        seen.add(key)
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else None


def newest_spec_by_family(paths: list[str]) -> dict[str, str]:
    """The newest speculative benchmark holding each family's cases, among `paths` (ordered newest first)."""
    out: dict[str, str] = {}
    for p in paths:
        if not is_spec(p):
            continue
        try:
            df, _ = read_spec_benchmark(p)
        except (ValueError, OSError):
            continue
        for fam in sorted(set(df["family"])) if not df.empty else ():
            out.setdefault(fam, p)
    return out


def read_spec_benchmarks(files: dict[str, str]) -> tuple[pd.DataFrame, dict]:
    """Each family's rows from its file (newest_spec_by_family), concatenated, and a context: the first file's, with
    the acceptance p and the interval set to NaN unless every file ran the same."""
    frames, ctxs = [], []
    for fam, p in files.items():
        df, ctx = read_spec_benchmark(p)
        frames.append(df[df["family"] == fam] if not df.empty else df)
        ctxs.append(ctx)
    if not frames:
        return pd.DataFrame(), {}
    df = pd.concat(frames, ignore_index=True)
    if not df.empty:
        df = df.sort_values(["family", "batch", "window"]).reset_index(drop=True)
    ctx = dict(ctxs[0])
    for k in ("p", "interval"):
        if len({c.get(k) for c in ctxs}) > 1:
            ctx[k] = float("nan")
    return df, ctx


# The geometry each family's benchmark runs by default, the one the published numbers (published.json) are quoted at.
DEFAULT_PRESET = {"mamba2": "nemotron3-super-120b", "gdn": "qwen35-4b"}


def newest_by_family(paths: list[str]) -> dict[str, str]:
    """The newest benchmark file of each family (mamba2, gdn) among `paths` (ordered newest first), at the family's
    default preset (a file that names another preset in its context is skipped; one that names none is taken)."""
    out: dict[str, str] = {}
    for p in paths:
        try:
            _, ctx = read_benchmark(p)
        except (ValueError, OSError):
            continue
        fam = "" if is_spec(p) else _family(ctx, p)
        if not fam or fam in out or ctx.get("preset", DEFAULT_PRESET[fam]) != DEFAULT_PRESET[fam]:
            continue
        out[fam] = p
    return out
