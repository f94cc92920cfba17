"""One plotting function per figure of issue 13; each returns a matplotlib Figure and is what both the notebooks
(analysis/notebooks/) and the reproduction (scripts/reproduce.sh) call.

Publication defaults (apply_style): the Okabe-Ito colour-blind-safe palette, log axes wherever errors or times span
decades, units in every axis label; our measurements are circles (and lines), published numbers black-edged stars,
labelled "published". A figure that needs GPU data (benchmark JSON, `backend = cuda` runs) and has none draws what it
can and says, inside the axes, which input is missing: it never fails for lack of a device.

Inputs are the tables of analysis.results (summary_frame, merge_results), runs from open_run, and benchmark tables
of analysis.bench (read_benchmark).
"""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")  # headless: figures are saved, never shown, in the reproduction and the tests
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .published import published as load_published  # noqa: E402

# Okabe & Ito (2008): distinguishable under the common colour-vision deficiencies.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
PUBLISHED_STYLE = dict(marker="*", markersize=13, markerfacecolor="white", markeredgecolor="black",
                       markeredgewidth=1.2, linestyle="none", zorder=5)
DECODER_COLOUR = {"eager": PALETTE[0], "replay": PALETTE[1], "dual": PALETTE[2]}


def apply_style() -> None:
    matplotlib.rcParams.update({
        "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
        "figure.dpi": 100, "savefig.dpi": 150, "savefig.bbox": "tight",
        "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 7,
        "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False,
        "lines.linewidth": 1.4, "lines.markersize": 5,
    })


apply_style()


def _missing(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no data: {what}", transform=ax.transAxes, ha="center", va="center", fontsize=8,
            wrap=True, bbox=dict(boxstyle="round", fc="#f5f5f5", ec="#999999"))


def _pub(pub, key):
    return (pub or load_published())[key]


def _pub_point(ax, x, entry, label=None):
    """A published value (or range, as an error bar) at x, star-marked."""
    v = entry["value"]
    if isinstance(v, list):
        mid = (v[0] + v[1]) / 2
        ax.errorbar([x], [mid], yerr=[[mid - v[0]], [v[1] - mid]], ecolor="black", capsize=3, **PUBLISHED_STYLE,
                    label=label)
    else:
        ax.plot([x], [v], **PUBLISHED_STYLE, label=label)


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "ok"] if "status" in df else df


def _figure(ncols: int, title: str, width: float = 4.2, height: float = 3.4):
    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)
    fig.suptitle(title)
    return fig, list(axes[0])


def loglog_slope(x, y) -> float:
    """Least-squares slope of log y against log x over the points where both are positive and finite (as
    lib/metrics/growth.h computes it)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    m = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    if m.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(x[m]), np.log(y[m]), 1)[0])


# 1 ---------------------------------------------------------------------------------------------------------------
def precision_pairs(summary: pd.DataFrame, recorded: pd.DataFrame | None = None, pub=None):
    """Output error, KL and top-1 agreement of every completed point against its modelled bytes per step (relative
    to fp32 eager): the dual-precision versus shared-checkpoint table as a figure. `recorded`: the same for a
    recorded trace (hollow markers). Published: the fp32- and bf16-state errors of a decode kernel (METHOD.md)."""
    fig, (a_err, a_kl, a_top) = _figure(3, "Precision pairs: error against modelled traffic")
    sets = [("synthetic", _ok(summary), "o", True)]
    if recorded is not None and len(recorded):
        sets.append(("recorded", _ok(recorded), "s", False))
    for name, df, marker, filled in sets:
        for dec, g in df.groupby("decoder", sort=False):
            c = DECODER_COLOUR.get(dec, PALETTE[4])
            kw = dict(marker=marker, linestyle="none", color=c, markerfacecolor=c if filled else "none",
                      label=f"{dec} ({name})")
            x = g["bytes_vs_eager_fp32"]
            a_err.plot(x, g["out_rel_err_mean"], **kw)
            if "kl_mean" in g:
                a_kl.plot(x, g["kl_mean"].clip(lower=1e-18), **kw)
                a_top.plot(x, g["top1_agree"], **kw)
            if name == "synthetic":
                for xi, yi, lab in zip(x, g["out_rel_err_mean"], g["decoder_label"]):
                    a_err.annotate(lab, (xi, yi), fontsize=5, xytext=(3, 2), textcoords="offset points")
    _pub_point(a_err, 1.0, _pub(pub, "err_fp32_state_floor"), "published: fp32 state (bf16 out)")
    _pub_point(a_err, 0.5, _pub(pub, "err_bf16_state"), "published: bf16 state")
    a_err.set(yscale="log", xlabel="bytes per step / fp32 eager", ylabel="output rel. error (mean)")
    a_kl.set(yscale="log", xlabel="bytes per step / fp32 eager", ylabel="KL(p_ref ‖ p) (nats, mean)")
    a_top.set(xlabel="bytes per step / fp32 eager", ylabel="top-1 agreement")
    a_err.legend(loc="best")
    return fig


# 2 ---------------------------------------------------------------------------------------------------------------
def growth_slopes(runs: dict) -> pd.DataFrame:
    """Fitted log-log exponents of every state-error series (per copy and decay band) against the flush count, and of
    the output error against the step, per run label."""
    rows = []
    for label, ds in runs.items():
        row = {"run": label, "output_vs_step": loglog_slope(np.arange(1, ds.sizes.get("step", 0) + 1),
                                                            ds["out_rel_err_mean"].values)}
        for v in ds.data_vars:
            if v.startswith("state_rel_err_") and "flush_step" in ds[v].dims:
                y = ds[v].values
                row[v[len("state_rel_err_"):]] = loglog_slope(np.arange(1, len(y) + 1), y)
        rows.append(row)
    return pd.DataFrame(rows).set_index("run")


def error_accumulation(runs: dict, band: str = "slow", pub=None):
    """runs: {label: open_run(...)}. Output error against step and state error (band `band`) against flush count,
    log-log, with fitted exponents in the legend, √flushes drawn for reference and the published fp8 drift
    (1% × √flushes); error against position since the last flush."""
    fig, (a_out, a_state, a_pos) = _figure(3, "Error accumulation")
    ref_anchor = None
    for i, (label, ds) in enumerate(runs.items()):
        c = PALETTE[i % len(PALETTE)]
        y = ds["out_rel_err_mean"].values
        t = np.arange(1, len(y) + 1)
        a_out.plot(t, y, color=c, label=f"{label} (slope {loglog_slope(t, y):.2f})")
        for copy, ls in (("state", "-."), ("checkpoint", "-"), ("read", "--")):
            name = f"state_rel_err_{copy}_{band}"
            if name in ds:
                s = ds[name].values
                n = np.arange(1, len(s) + 1)
                a_state.plot(n, s, color=c, linestyle=ls, marker="o", markersize=2,
                             label=f"{label} {copy} (slope {loglog_slope(n, s):.2f})")
                if ref_anchor is None and np.isfinite(s).any() and s[0] > 0:
                    ref_anchor = (n, s[0])
        if "out_rel_err_by_position" in ds:
            a_pos.plot(ds["position"].values, ds["out_rel_err_by_position"].values, color=c, marker="o", label=label)
    if ref_anchor is not None:
        n, s0 = ref_anchor
        a_state.plot(n, s0 * np.sqrt(n), color="grey", linestyle=":", label="√flushes (reference)")
        nn = np.array([1, 4, 16, 64, 256, 1024])
        nn = nn[nn <= n[-1]]
        coeff = _pub(pub, "fp8_ckpt_drift_coeff")
        a_state.plot(nn, coeff["value"] * np.sqrt(nn), **PUBLISHED_STYLE, label="published: fp8 ≈ 1%·√flushes")
    else:
        _missing(a_state, f"no state_rel_err_*_{band} series (metrics.state_error off or no {band} heads)")
    a_out.set(xscale="log", yscale="log", xlabel="step", ylabel="output rel. error (mean)")
    a_state.set(xscale="log", yscale="log", xlabel="flushes", ylabel=f"state rel. error ({band} heads)")
    a_pos.set(yscale="log", xlabel="position since last flush (steps)", ylabel="output rel. error (mean)")
    for a in (a_out, a_state, a_pos):
        if a.get_legend_handles_labels()[0]:
            a.legend(loc="best")
    return fig


# 3 ---------------------------------------------------------------------------------------------------------------
def _interval_presets(a_bytes, a_us, presets: pd.DataFrame, batch: int) -> None:
    """Per geometry preset (one GPU interval sweep each): replay fp32 (GDN: inner-product route) amortised over an
    interval, as a ratio to fp32 eager of the same run: measured time (solid, right) and modelled bytes (dashed,
    left). Ratios, so that geometries from 4B to 550B share the axes; the eager time is in each label."""
    from .bench import step_times
    st = step_times(presets, series=True)
    st = st[(st["batch"] == batch) & st["variant"].isna()]  # the kernel timed at every interval (Mamba-2: per-head)
    order = sorted(st["preset"].unique(), key=lambda p: (st[st["preset"] == p]["family"].iloc[0], p))
    for i, p in enumerate(order):
        g = st[st["preset"] == p]
        eager = g[(g["scheme"] == "eager") & (g["state_format"] == "fp32")]
        rep = g[(g["scheme"] == "replay") & (g["state_format"] == "fp32") & (g["kind"] == "amortised")]
        rep = rep[rep["route"].isna() | (rep["route"] == "inner")].sort_values("interval")
        if eager.empty or rep.empty:
            continue
        e_us, c = float(eager["time_us"].iloc[0]), PALETTE[i % len(PALETTE)]
        a_us.plot(rep["interval"].astype(float), rep["time_us"] / e_us, marker="o", color=c,
                  label=f"{p} ({g['family'].iloc[0]}; eager {e_us:.0f} µs)")
        if "bytes" in rep and "bytes" in eager:
            a_bytes.plot(rep["interval"].astype(float), rep["bytes"] / float(eager["bytes"].iloc[0]), ls="--",
                         marker=".", color=c, label="every preset, modelled (colours as right)" if i == 0 else None)
    a_us.axhline(1.0, color="grey", lw=0.8, ls=":", label="fp32 eager")
    a_us.set(xscale="log", ylabel=f"GPU time per step / fp32 eager (batch {batch})")
    _interval_ticks(a_us, st["interval"])
    a_us.legend(loc="upper left", fontsize="xx-small")


def _interval_ticks(ax, intervals) -> None:
    """The intervals themselves as the ticks of a log axis."""
    ax.set_xticks(sorted({int(k) for k in intervals.dropna()}))
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def interval_sweep(summary: pd.DataFrame, bench: pd.DataFrame | None = None, batch: int = 256, pub=None,
                   presets: pd.DataFrame | None = None):
    """Modelled traffic per step against the checkpoint interval (from a sweep's summary), and measured GPU µs per
    step (amortised over an interval, from benchmark JSON) against the interval at `batch`; the published optimum
    intervals (8 for Nemotron-3 Mamba-2, 16 for Qwen3.5 GDN) marked. With `presets` (the per-preset GPU interval
    sweeps, bench.read_interval_sweeps) the right panel shows every geometry preset as its time over fp32 eager, and
    the left adds each preset's modelled bytes over fp32 eager (dashed)."""
    fig, (a_bytes, a_us) = _figure(2, "Checkpoint interval sweep")
    df = _ok(summary)
    df = df[df["decoder"].isin(["replay", "dual"])]
    for (dec, sf), g in df.groupby(["decoder", "state_format"], sort=False):
        g = g.sort_values("interval")
        a_bytes.plot(g["interval"], g["bytes_vs_eager_fp32"], marker="o", color=DECODER_COLOUR.get(dec),
                     label=f"{dec} {sf}" + (" (+read copy)" if dec == "dual" else ""))
    a_bytes.axhline(1.0, color="grey", lw=0.8, ls=":", label="fp32 eager")
    opt = {}
    for fam, key in (("mamba2", "best_interval_mamba2"), ("gdn", "best_interval_gdn")):
        e = _pub(pub, key)
        opt[fam] = e["value"]
        for a in (a_bytes, a_us):
            a.axvline(e["value"], color="black", lw=0.8, ls="--")
        a_bytes.plot([e["value"]], [1.0], **PUBLISHED_STYLE, label=f"published optimum {fam}: K={e['value']}")
    a_bytes.set(xscale="log", xlabel="checkpoint interval K (steps)", ylabel="modelled bytes per step / fp32 eager")
    a_bytes.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    if presets is not None and not presets.empty:
        _interval_presets(a_bytes, a_us, presets, batch)
        _interval_ticks(a_bytes, pd.concat([df["interval"], presets["interval"]]).astype("float"))
        a_bytes.legend(loc="best", fontsize="x-small")
        a_us.set(xlabel="checkpoint interval K (steps)")
        return fig
    a_bytes.legend(loc="best")
    if bench is None or bench.empty:
        _missing(a_us, "GPU benchmark JSON (bench_*_cuda.json)")
    else:
        from .bench import kernel_label, step_times
        st = step_times(bench, series=True)
        st = st[st["batch"] == batch]
        for i, ((fam, sch, sf, var), g) in enumerate(st[st["kind"] == "amortised"].groupby(
                ["family", "scheme", "state_format", "variant"], sort=False, dropna=False)):
            g = g.sort_values("interval")
            kern = kernel_label(fam, var)
            a_us.plot(g["interval"].astype(float), g["time_us"], marker="o", color=PALETTE[i % len(PALETTE)],
                      label=f"{fam} {sch} {sf}" + (f" ({kern})" if kern else ""))
        for i, ((fam, sf), g) in enumerate(st[st["scheme"] == "eager"].groupby(["family", "state_format"])):
            a_us.axhline(g["time_us"].iloc[0], ls=":", color=PALETTE[(i + 4) % len(PALETTE)],
                         label=f"{fam} eager {sf}")
        a_us.set(xscale="log", yscale="log")
        a_us.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        a_us.legend(loc="best")
    a_us.set(xlabel="checkpoint interval K (steps)", ylabel=f"GPU µs per step (amortised, batch {batch})")
    return fig


# 4 ---------------------------------------------------------------------------------------------------------------
def _speedups(bench: pd.DataFrame) -> pd.DataFrame:
    """Amortised replay / dual steps over eager of the same state format and batch, one row per case and kernel
    (`kernel`: kernel_label's name, so that a line over batches keeps to one kernel)."""
    from .bench import kernel_label, step_times
    st = step_times(bench, series=True)
    eager = st[st["scheme"] == "eager"].set_index(["family", "state_format", "batch"])["time_us"]
    rows = []
    for _, r in st[(st["scheme"] != "eager") & (st["kind"] == "amortised")].iterrows():
        base_fmt = r["state_format"].split("+")[0]  # dual fp32+bf16 against fp32 eager
        key = (r["family"], base_fmt, r["batch"])
        if key in eager.index:
            rows.append({"family": r["family"], "scheme": r["scheme"], "route": r.get("route"),
                         "state_format": r["state_format"], "interval": r["interval"], "batch": r["batch"],
                         "kernel": kernel_label(r["family"], r.get("variant")),
                         "speedup": eager[key] / r["time_us"], "time_us": r["time_us"]})
    return pd.DataFrame(rows)


def gpu_speedup(bench: pd.DataFrame | None, interval: int | None = None, pub=None):
    """Speed-up of replay/dual (amortised step) over eager of the same state format against batch size, per scheme
    and family, with the published kernels' figures beside ours; achieved bandwidth as a share of the ceilings
    measured in the same run (a roofline view: eager and flush steps against the copy ceiling, non-flush steps
    against the read ceiling)."""
    fig, (a_sp, a_bw) = _figure(2, "GPU: replay over eager, and share of the bandwidth ceilings")
    p = pub or load_published()
    if bench is None or bench.empty:
        _missing(a_sp, "GPU benchmark JSON (bench_*_cuda.json)")
        _missing(a_bw, "GPU benchmark JSON (bench_*_cuda.json)")
    else:
        sp = _speedups(bench)
        if interval is not None:
            sp = sp[sp["interval"] == interval]
        for i, ((fam, sch, route, sf, k, kern), g) in enumerate(sp.groupby(
                ["family", "scheme", "route", "state_format", "interval", "kernel"], dropna=False, sort=False)):
            g = g.sort_values("batch")
            name = " ".join(x for x in (fam, sch, route if isinstance(route, str) else "", sf,
                                        f"({kern})" if kern else "") if x)
            a_sp.plot(g["batch"].astype(float), g["speedup"], marker="o", color=PALETTE[i % len(PALETTE)],
                      label=f"{name} K={k}")
        from .bench import kernel_label, step_times
        st = step_times(bench, series=True)
        st = st[st["kind"].isin(["nonflush", "flush"]) | (st["scheme"] == "eager")]
        for i, ((fam, sch, sf, kind, var), g) in enumerate(st.groupby(["family", "scheme", "state_format", "kind",
                                                                       "variant"], dropna=False, sort=False)):
            if sch != "eager" and kernel_label(fam, var):
                sf = f"{sf} ({kernel_label(fam, var)})"
            if interval is not None and sch != "eager":
                g = g[g["interval"] == interval]
            g = g.groupby("batch", as_index=False).mean(numeric_only=True).sort_values("batch")
            share = g["of_read"] if kind == "nonflush" else g["of_copy"]
            a_bw.plot(g["batch"].astype(float), share, marker="o", color=PALETTE[i % len(PALETTE)],
                      label=f"{fam} {sch} {sf} {kind if isinstance(kind, str) else ''}".strip())
        a_bw.axhline(1.0, color="black", lw=0.8, ls="--", label="measured ceiling")
        a_bw.legend(loc="best", ncol=1, fontsize="xx-small")
        a_sp.legend(loc="best", fontsize="xx-small")
    _pub_point(a_sp, 256, p["speedup_kernel_mamba2_b256"], "published: Mamba-2 kernel, batch 256")
    _pub_point(a_sp, 256 * 1.15, p["speedup_kernel_gdn_b256"], "published: GDN kernel, batch 256")
    _pub_point(a_sp, 1, p["speedup_kernel_b1"], "published: batch 1")
    a_sp.axhline(1.0, color="grey", lw=0.8, ls=":")
    a_sp.set(xscale="log", xlabel="batch (sequences)", ylabel="speed-up over eager (×)")
    a_bw.set(xscale="log", xlabel="batch (sequences)", ylabel="achieved bandwidth / measured ceiling")
    if a_sp.get_legend() is None:
        a_sp.legend(loc="best")
    return fig


# 5 ---------------------------------------------------------------------------------------------------------------
SPEC_COLOUR = {"replay": DECODER_COLOUR["replay"], "eager": DECODER_COLOUR["eager"], "standard": PALETTE[3]}
_SPEC_FAMILY = {"mamba2": "Mamba-2 (Super-120B)", "gdn": "GDN (Qwen3.5-4B)"}


def _spec_pub_star(ax, x, value, colour, label, hollow=False):
    """Published points of this figure are coloured by the series they stand beside (three of them sit within 1% of
    each other at T = 4), still black-edged stars; hollow when derived from a published value rather than quoted."""
    style = dict(PUBLISHED_STYLE, markerfacecolor="white" if hollow else colour)
    if hollow:
        style["markeredgecolor"] = colour
    ax.plot([x], [value], **style, label=label)


def spec_verify(spec: pd.DataFrame | None, ctx: dict | None = None, batches=(256, 64), pub=None):
    """Speculative decoding on the GPU against the window T (bench_spec_cuda JSON read by
    analysis.bench.read_spec_benchmark), one row of panels per family: µs per verify call, µs per accepted token
    (the verify amortised over flushes at the run's acceptance p, divided by the mean committed tokens per window),
    and modelled DRAM bytes per committed token and sequence. Replay verify, the eager speculative baseline (T states
    written) and the standard replay step (one token per step) side by side; the first batch in `batches` drawn
    solid, the others light and dashed. The band around the replay verify spans its non-flushing and flushing
    calls. Published kernels (issue 12: batch 256, T = 4) as stars; in the per-token panel their verify times divided
    by our mean committed count at T = 4 (hollow), since they were published per call."""
    p = pub or load_published()
    fams = ["mamba2", "gdn"]
    fig, grid = plt.subplots(2, 3, figsize=(12.6, 6.6), squeeze=False)
    ctx = ctx or {}
    parts = (ctx.get("gpu"), f"acceptance p = {ctx['p']:.2f}" if finite(ctx.get("p")) else None,
             f"interval {ctx['interval']:.0f}" if finite(ctx.get("interval")) else None)
    what = ", ".join(str(x) for x in parts if x)
    fig.suptitle("Speculative verify against the window T" + (f" ({what})" if what else ""))
    have = spec is not None and not spec.empty
    for row, fam in zip(grid, fams):
        a_call, a_tok, a_bytes = row
        d = spec[spec["family"] == fam] if have else None
        if d is None or d.empty:
            for a in (a_tok, a_bytes):
                _missing(a, f"bench_spec_cuda*.json ({fam})")
        else:
            for j, b in enumerate(batches):
                g = d[d["batch"] == b].sort_values("window")
                if g.empty:
                    continue
                T = g["window"].astype(float).to_numpy()
                main = j == 0
                kw = dict(marker="o", alpha=1.0 if main else 0.45, linestyle="-" if main else "--",
                          markerfacecolor=None if main else "none")
                bl = f", b={b}"
                series = (("replay", "replay verify", "us_verify_amortised", "us_per_token"),
                          ("eager", "eager spec. verify", "us_eager_verify", "us_eager_per_token"),
                          ("standard", "standard replay step", "us_replay_amortised", "us_replay_amortised"))
                for key, lab, per_call, per_tok in series:
                    c = SPEC_COLOUR[key]
                    a_call.plot(T, g[per_call], color=c, label=lab + bl, **kw)
                    a_tok.plot(T, g[per_tok], color=c, label=lab + bl, **kw)
                if main:
                    a_call.fill_between(T, g["us_verify"], g["us_verify_flush"], color=SPEC_COLOUR["replay"],
                                        alpha=0.15, lw=0, label="replay verify: non-flush … flush")
                    per_seq = g["batch"].astype(float) * 1e6  # MB per sequence
                    a_bytes.plot(T, g["bytes_verify_amortised"] / per_seq / g["mean_committed"], marker="o",
                                 color=SPEC_COLOUR["replay"], label=f"replay verify{bl}")
                    a_bytes.plot(T, g["bytes_eager_verify"] / per_seq / g["mean_committed"], marker="o",
                                 color=SPEC_COLOUR["eager"], label=f"eager spec. verify{bl}")
                    a_bytes.plot(T, g["bytes_replay_amortised"] / per_seq, marker="o", color=SPEC_COLOUR["standard"],
                                 label=f"standard replay step{bl}")
        ids = {k: p.get(f"us_{fam}_spec_{k}_T4_b256") for k in ("eager", "replay", "standard")}
        if all(ids.values()):
            _spec_pub_star(a_call, 3.85, ids["eager"]["value"], SPEC_COLOUR["eager"], "published: eager verify")
            _spec_pub_star(a_call, 3.85, ids["replay"]["value"], SPEC_COLOUR["replay"], "published: replay verify")
            _spec_pub_star(a_call, 4.15, ids["standard"]["value"], SPEC_COLOUR["standard"],
                           "published: standard step")
            _spec_pub_star(a_tok, 4.15, ids["standard"]["value"], SPEC_COLOUR["standard"],
                           "published: standard step")
            m = d[(d["batch"] == 256) & (d["window"] == 4)]["mean_committed"] if d is not None and not d.empty else []
            if len(m):
                for k, x in (("eager", 3.85), ("replay", 3.85)):
                    _spec_pub_star(a_tok, x, ids[k]["value"] / float(m.iloc[0]), SPEC_COLOUR[k],
                                   f"published {k} verify ÷ {float(m.iloc[0]):.2f} committed", hollow=True)
        name = _SPEC_FAMILY[fam]
        a_call.set(yscale="log", ylabel=f"{name}\nGPU µs per verify call")
        a_tok.set(yscale="log", ylabel="GPU µs per accepted token")
        a_bytes.set(ylabel="modelled MB per committed token\nand sequence")
        for a in (a_call, a_tok):
            a.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
            a.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        for a in row:
            a.set(xlabel="window T (positions per verify)", xticks=[2, 4, 6, 8], xlim=(1.5, 8.5))
    # One legend for all six panels, below them: per-panel legends covered the published stars.
    seen = {}
    for a in (x for r in grid for x in r):
        for h, lab in zip(*a.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    if seen:
        fig.legend(list(seen.values()), list(seen.keys()), loc="lower center", ncol=4, frameon=False)
    return fig


# 6 ---------------------------------------------------------------------------------------------------------------
def flush_arith(runs: dict, pub=None):
    """runs: {arithmetic: open_run(...)} of replay with an fp32 checkpoint. Output error against step (log-log) per
    flush arithmetic, and the mean over the run, with the published drift of plain tf32 (about 1e-2) and 3-pass
    tf32 (about 1e-5) beside them."""
    fig, (a_t, a_m) = _figure(2, "Flush GEMM arithmetic against drift")
    names = list(runs)
    for i, (arith, ds) in enumerate(runs.items()):
        y = ds["out_rel_err_mean"].values
        t = np.arange(1, len(y) + 1)
        a_t.plot(t, y, color=PALETTE[i % 8], label=f"{arith} (slope {loglog_slope(t, y):.2f})")
        a_m.plot([i], [np.nanmean(y)], marker="o", color=PALETTE[i % 8], linestyle="none",
                 label=f"{arith} (ours)")
    for key, arith in (("tf32_flush_drift", "tf32"), ("tf32x3_flush_err", "3xtf32")):
        e = _pub(pub, key)
        a_t.axhline(e["value"], color="black", lw=0.8, ls="--")
        a_t.plot([a_t.get_xlim()[1] if names else 1], [e["value"]], **PUBLISHED_STYLE,
                 label=f"published {arith}: ≈{e['value']:.0e}")
        x = names.index(arith) + 0.15 if arith in names else len(names)
        _pub_point(a_m, x, e, f"published {arith}")
    a_t.set(xscale="log", yscale="log", xlabel="step", ylabel="output rel. error (mean over sequences)")
    a_m.set(yscale="log", xticks=range(len(names)), xticklabels=names, xlabel="flush arithmetic",
            ylabel="output rel. error (mean over steps)")
    a_t.legend(loc="best")
    a_m.legend(loc="best")
    return fig


# 7 ---------------------------------------------------------------------------------------------------------------
def backend_diff(summary: pd.DataFrame | None, runs: dict | None = None):
    """GPU against CPU emulation, from `backend = cpu, cuda` runs: per scheme, the distribution over steps of the
    difference of each cuda point from its cpu twin (relative, and in ulps of out_format). runs: {label:
    open_run(...)} of cuda points with a twin; without them, the summary's maxima are drawn."""
    fig, (a_rel, a_ulp) = _figure(2, "GPU kernels against their CPU emulation")
    have = summary is not None and "backend_diff_rel_max" in summary and \
        _ok(summary)["backend_diff_rel_max"].notna().any()
    if runs:
        labels = list(runs)
        rel = [runs[k]["backend_diff_rel_max"].values for k in labels]
        ulp = [runs[k]["backend_diff_ulps_max"].values for k in labels]
        a_rel.boxplot([np.clip(r, 1e-12, None) for r in rel])
        a_ulp.boxplot(ulp)
        for a in (a_rel, a_ulp):
            a.set_xticks(range(1, len(labels) + 1), labels)
            a.tick_params(axis="x", labelrotation=60, labelsize=6)
        a_rel.set(yscale="log")
    elif have:
        df = _ok(summary).dropna(subset=["backend_diff_rel_max"])
        x = np.arange(len(df))
        a_rel.plot(x, df["backend_diff_rel_max"].clip(lower=1e-12), "o", label="max over steps")
        a_ulp.plot(x, df["backend_diff_ulps_max"], "o", label="max over steps")
        for a in (a_rel, a_ulp):
            a.set_xticks(x, df["decoder_label"], rotation=60, fontsize=6)
        a_rel.set(yscale="log")
    else:
        for a in (a_rel, a_ulp):
            _missing(a, "result files with backend = cpu, cuda points (GPU runs)")
    a_rel.set(ylabel="‖y_cuda − y_cpu‖ / ‖y_cpu‖ per step (max over seqs)", xlabel="scheme")
    a_ulp.set(ylabel="max distance per step (ulps of out_format)", xlabel="scheme")
    return fig


FIGURES = {
    "precision_pairs": precision_pairs,
    "error_accumulation": error_accumulation,
    "interval_sweep": interval_sweep,
    "gpu_speedup": gpu_speedup,
    "spec_verify": spec_verify,
    "flush_arith": flush_arith,
    "backend_diff": backend_diff,
}


def save(fig, folder: str, name: str) -> list[str]:
    """Writes NAME.png and NAME.svg into folder; returns the paths."""
    import os
    os.makedirs(folder, exist_ok=True)
    out = []
    for ext in ("png", "svg"):
        path = os.path.join(folder, f"{name}.{ext}")
        fig.savefig(path)
        out.append(path)
    plt.close(fig)
    return out


def finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)
