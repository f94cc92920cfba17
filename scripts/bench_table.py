#!/usr/bin/env python3
"""The README's GPU speed tables, made from committed benchmark JSON (Google Benchmark output of
experiments/bench_mamba2_cuda.cu and bench_gdn_cuda.cu). Standard library only.

    scripts/bench_table.py benchmarks/bench_mamba2_cuda_h200.json benchmarks/bench_gdn_cuda_h200.json

Prints, per file, the GPU, date, commit and the ceilings measured in the same run, then one markdown row per case
of interest: median us per step, modelled bytes, achieved GB/s and its share of the copy and read-only ceilings.
Re-run the measurement on an H200 with scripts/gpu_run.sh (see GPU.md); its JSON replaces the committed file.
A bench_spec_cuda file (experiments/bench_spec_cuda.cu, issue 12: its name holds "spec", or its context the keys that
benchmark writes) gets spec_table's layout instead, --gdn-fold-tune's FFMA twins as a family "gdn fold:fma".

    scripts/bench_table.py --ab [--filter REGEX] BASE.json[,BASE2.json] OTHER.json[,OTHER2.json] ...

    scripts/bench_table.py --targets MAMBA2.json GDN.json SPEC.json

Every speed target of issues 10 (Mamba-2), 11 (GDN) and 12 (speculative verify) against one full run of
bench_mamba2_cuda, bench_gdn_cuda and bench_spec_cuda: ours, the target and met / missed per row, each file's GPU,
date and commit (verdicts from a card other than the H200, where the targets are set, are marked indicative); the
README's "Targets at a glance". bench_gdn_cuda and bench_spec_cuda print their issue's verdicts at the end of a run
(stdout, not kept in the JSON); this gives the same definitions from committed JSON, all three issues in one table.
A case the targets need and the file lacks is an error naming both.
The column "at the DRAM floor" gives each target's quantity with every step moving its modelled bytes at the faster of
the two ceilings measured in the same run: a time target's floor is the fastest the step could be, and a ratio's is
the ratio when both steps run equally near their floors. A floor that misses its target is marked "(short)": such a
time target cannot be met with these bytes, and such a ratio only by the faster step running nearer its floor than
the slower. Shares of a ceiling and the commit have no floor ("-").

A/B calls (benchmarks/experiments/README.md, scripts/ab_relink.sh): each argument is one build's runs from the same
device call, comma-separated (repeats of an alternating call); per case, each run's median, their mean, and the mean
over the first build's (the baseline). Cases are those every build measured, optionally matching REGEX. A
bench_spec_cuda case (real time: the non-flushing verify window) adds "CASE [verify flush]", "CASE [verify
amortised]" and "CASE [eager verify]" from its counters, and under the table each build's verify-kernel footprint
(CTAs per SM, shared memory, registers, local bytes) where its JSON has one.
"""
import json
import re
import sys

# Cases shown (prefix of the benchmark name before /iterations:...), in this order; missing ones are skipped.
ROWS = {
    "mamba2": [
        "eager/fp32/batch:1", "eager/fp32/batch:256", "eager/bf16/batch:256",
        "replay/fp32/K16/nonflush/batch:256", "replay/fp32/K16/flush/batch:256", "replay/fp32/K16/amortised/batch:256",
        "replay/fp32/K16/amortised/batch:1", "replay/fp32/K32/amortised/batch:256",
        "replay_g/fp32/K16/amortised/batch:1", "replay_g/fp32/K16/amortised/batch:256",
        "replay/bf16/K16/amortised/batch:256", "replay_g/bf16/K16/amortised/batch:256",
        "dual/fp32+bf16/K16/nonflush/batch:256", "dual/fp32+bf16/K16/amortised/batch:256",
        "dual_g/fp32+bf16/K16/nonflush/batch:256", "dual_g/fp32+bf16/K16/amortised/batch:256",
    ],
    "gdn": [
        "eager/fp32/batch:1", "eager/fp32/batch:256", "eager/bf16/batch:256",
        "replay/inner/fp32/K16/nonflush/batch:256", "replay/inner/fp32/K16/flush/batch:256",
        "replay/inner/fp32/K16/amortised/batch:256", "replay/reconstruct/fp32/K16/amortised/batch:256",
        "replay/inner/fp32/K16/amortised/batch:1", "replay/inner/fp32/K32/amortised/batch:256",
        "replay/reconstruct/fp32/K32/amortised/batch:256", "replay/inner/bf16/K16/amortised/batch:256",
        "dual/inner/fp32+bf16/K16/amortised/batch:256",
    ],
}


def median_rows(d):
    """Case (benchmark name before /iterations:...) -> its median row, of a loaded Google Benchmark JSON."""
    return {re.sub(r"/iterations:.*$", "", b["name"]): b for b in d["benchmarks"] if b.get("aggregate_name") == "median"}


def us_of(b):
    """A row's real time in µs (the benches report µs; Google Benchmark's default is ns)."""
    return b["real_time"] if b.get("time_unit") == "us" else b["real_time"] / 1e3


def table(path):
    with open(path) as f:
        d = json.load(f)
    ctx = d["context"]
    family = "gdn" if "gdn" in path else "mamba2"
    copy = float(ctx.get("copy_ceiling_GBps", "nan"))
    read = float(ctx.get("read_ceiling_GBps", "nan"))
    medians = median_rows(d)
    out = [f"`{path}`: {ctx.get('gpu', '?')}, driver CUDA {ctx.get('cuda_driver', '?')}, {ctx.get('date', '?')}, "
           f"commit {str(ctx.get('git_commit', '?'))[:10]}, {ctx.get('geometry', '')}; ceilings measured in the same "
           f"run: copy {copy:.0f} GB/s, read-only {read:.0f} GB/s", "",
           "| case | µs (median) | modelled MB | GB/s | of copy | of read-only |", "|---|---:|---:|---:|---:|---:|"]
    for key in ROWS[family]:
        b = medians.get(key)
        if b is None:
            continue
        us = us_of(b)
        mb = b.get("bytes", float("nan")) / 1e6
        gbs = mb / 1e3 / (us * 1e-6)
        out.append(f"| `{key}` | {us:.1f} | {mb:.1f} | {gbs:.0f} | {gbs / copy:.0%} | {gbs / read:.0%} |")
    return "\n".join(out)


# Issue 12's published kernels on the same H200 (fp32 state, bf16 activations, ring block 16, batch 256, T = 4), µs:
# eager speculative verify, replay verify, replay standard step.
SPEC_PUBLISHED = {"mamba2": (1488.0, 353.0, 356.0), "gdn": (799.0, 187.0, 153.0)}


def spec_table(path):
    """bench_spec_cuda JSON: one row per (family, batch, T) with the verify per call (non-flush, flush, amortised at
    the run's p), per accepted token, the eager baseline, the standard replay step, the ratios of issue 12's targets
    and shares of the ceilings; then ours beside the published kernels at batch 256, T = 4, and the commit."""
    with open(path) as f:
        d = json.load(f)
    ctx = d["context"]
    copy = float(ctx.get("copy_ceiling_GBps", "nan"))
    read = float(ctx.get("read_ceiling_GBps", "nan"))
    # Medians of the repetitions; a run without aggregates (--once, --smoke) has only its single entries.
    rows, singles = {}, {}
    for b in d["benchmarks"]:
        key = re.sub(r"/iterations:.*$", "", b["name"])
        if b.get("aggregate_name") == "median":
            rows[key] = b
        elif b.get("run_type") == "iteration":
            singles.setdefault(key, b)
    for key, b in singles.items():
        rows.setdefault(key, b)
    out = [f"`{path}`: {ctx.get('gpu', '?')}, driver CUDA {ctx.get('cuda_driver', '?')}, {ctx.get('date', '?')}, "
           f"commit {str(ctx.get('git_commit', '?'))[:10]}; Mamba-2 {ctx.get('mamba2_geometry', '?')}, GDN "
           f"{ctx.get('gdn_geometry', '?')}; interval {ctx.get('interval', '?')}, {_hist_text(ctx)}, acceptance "
           f"p = {float(ctx.get('p', 'nan')):.2f}, non-flush verify at fill {ctx.get('nonflush_fill', '?')}; ceilings "
           f"measured in the same run: copy {copy:.0f} GB/s, read-only {read:.0f} GB/s"
           + (f", fan-out (1 read + 4 writes) {float(ctx['fanout_ceiling_GBps_T4']):.0f} GB/s"
              + (f" ({ctx['fanout_ceiling_kernel_T4']})" if "fanout_ceiling_kernel_T4" in ctx else "")
              if "fanout_ceiling_GBps_T4" in ctx else ""), "",
           "| family | batch | T | µs/verify | flush | amortised | µs/accepted token | eager verify | eager / verify "
           "| standard replay | verify / standard | verify % of read | eager % of copy | eager % of fan-out |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    cases = []
    for key, b in rows.items():
        m = re.match(r"^(mamba2|gdn)/T:(\d+)(/fold:fma)?/batch:(\d+)$", key)
        if m:  # --gdn-fold-tune's twins (FFMA flush) as their own family, after the default rows
            fam = m.group(1) + (" fold:fma" if m.group(3) else "")
            cases.append((m.group(1) != "mamba2", bool(m.group(3)), int(m.group(4)), int(m.group(2)), fam, b))
    for _, _, batch, T, fam, b in sorted(cases, key=lambda c: c[:4]):
        out.append(f"| {fam} | {batch} | {T} | {b.get('us_verify', 0):.1f} | {b.get('us_verify_flush', 0):.1f} "
                   f"| {b.get('us_verify_amortised', 0):.1f} | {b.get('us_per_token', 0):.1f} "
                   f"| {b.get('us_eager_verify', 0):.1f} | {b.get('ratio_eager_over_verify', 0):.2f}x "
                   f"| {b.get('us_replay_amortised', 0):.1f} | {b.get('ratio_verify_over_replay', 0):.2f}x "
                   f"| {b.get('verify_of_read', 0):.0%} | {b.get('eager_of_copy', 0):.0%} "
                   f"| {format(b['eager_of_fanout'], '.0%') if b.get('eager_of_fanout') else '—'} |")
    out += ["", "Batch 256, T = 4, ours beside the published kernels (µs; verify amortised at p; standard replay "
            "amortised at the interval):", "",
            "| family | eager verify | replay verify | standard replay | eager / verify | verify / standard |",
            "|---|---:|---:|---:|---:|---:|"]
    for fam, (pe, pv, ps) in SPEC_PUBLISHED.items():
        b = rows.get(f"{fam}/T:4/batch:256")
        if b is None:
            continue
        out.append(f"| {fam} ours | {b.get('us_eager_verify', 0):.1f} | {b.get('us_verify_amortised', 0):.1f} "
                   f"| {b.get('us_replay_amortised', 0):.1f} | {b.get('ratio_eager_over_verify', 0):.2f}x "
                   f"| {b.get('ratio_verify_over_replay', 0):.2f}x |")
        out.append(f"| {fam} published | {pe:.0f} | {pv:.0f} | {ps:.0f} | {pe / pv:.2f}x | {pv / ps:.2f}x |")
    commits = [(k, b) for k, b in rows.items() if k.startswith("commit/")]
    if commits:
        out += ["", "spec_commit: " + ", ".join(f"`{k}` {b.get('us_commit', 0):.2f} µs" for k, b in sorted(commits))]
    return "\n".join(out)


# bench_spec_cuda counters (µs) that --ab shows as cases of their own, beside the case's real time (the non-flushing
# verify window).
SPEC_AB_COUNTERS = [("us_verify_flush", "[verify flush]"), ("us_verify_amortised", "[verify amortised]"),
                    ("us_eager_verify", "[eager verify]")]


def medians_of(path):
    """Case -> median µs of one Google Benchmark JSON; a file without median rows is refused by name."""
    with open(path) as f:
        rows = median_rows(json.load(f))
    if not rows:
        raise ValueError(f"{path} has no median rows (a --once run, or repetitions without aggregates?)")
    out = {k: us_of(b) for k, b in rows.items()}
    # bench_spec_cuda: a case's real time is the non-flushing window; its flushing and amortised verify are counters.
    for k, b in rows.items():
        for counter, tag in SPEC_AB_COUNTERS:
            if counter in b:
                out[f"{k} {tag}"] = b[counter]
    return out


# bench_spec_cuda's footprint of the verify kernel (mamba2_verify_footprint / gdn_verify_footprint): --ab prints it
# per case and build under the table, so that a build or an L_hist that costs a resident CTA says so beside its times.
FOOTPRINT_COUNTERS = ("verify_ctas_per_sm", "verify_smem_bytes", "verify_registers", "verify_local_bytes")


def footprints_of(path):
    """Case -> (CTAs per SM, shared-memory bytes, registers, local bytes) of the verify kernel, for the median rows
    that carry them (bench_spec_cuda runs from 2026-12-08 on)."""
    with open(path) as f:
        rows = median_rows(json.load(f))
    return {k: tuple(int(b[c]) for c in FOOTPRINT_COUNTERS) for k, b in rows.items()
            if all(c in b for c in FOOTPRINT_COUNTERS)}


def ab_table(groups, pattern=None):
    """groups: one list of JSON paths per build (its repeats), the first the baseline. Markdown rows per case, then
    each build's verify-kernel footprint per case where its first JSON carries one."""
    runs = [[medians_of(p) for p in g] for g in groups]
    names = [",".join(p.rsplit("/", 1)[-1] for p in g) for g in groups]
    keys = [k for k in runs[0][0] if all(k in r for rs in runs for r in rs)]
    if pattern:
        keys = [k for k in keys if re.search(pattern, k)]
    if not keys:
        raise ValueError("no case measured by every build" + (f" matches {pattern!r}" if pattern else ""))
    head = "| case | " + " | ".join(f"{chr(97 + i)}: µs" for i in range(len(groups))) + " | " + \
        " | ".join(f"{chr(97 + i)} / a" for i in range(1, len(groups))) + " |"
    out = [f"{chr(97 + i)} = {n}" for i, n in enumerate(names)] + ["", head,
                                                                   "|---|" + "---:|" * (2 * len(groups) - 1)]
    for k in keys:
        means = [sum(r[k] for r in rs) / len(rs) for rs in runs]
        cells = [" / ".join(f"{r[k]:.1f}" for r in rs) for rs in runs]
        out.append(f"| `{k}` | " + " | ".join(cells) + " | " +
                   " | ".join(f"{m / means[0]:.3f}" for m in means[1:]) + " |")
    prints = [footprints_of(g[0]) for g in groups]
    shown = [k for k in keys if any(k in fp for fp in prints)]
    if shown:
        out += ["", "Verify kernel per build: CTAs per SM, shared memory (bytes), registers, local bytes:", ""]
        for k in shown:
            out.append(f"- `{k}`: " + "; ".join(
                f"{chr(97 + i)} " + (", ".join(str(x) for x in fp[k]) if k in fp else "—")
                for i, fp in enumerate(prints)))
    return "\n".join(out)


# ---- --targets: every speed target of issues 10, 11 and 12 against one run of each benchmark ----

def _load_rows(path):
    """(context, case -> median row) of a benchmark JSON; refused by name when it has no median rows."""
    with open(path) as f:
        d = json.load(f)
    rows = median_rows(d)
    if not rows:
        raise ValueError(f"{path} has no median rows (a --once run, or repetitions without aggregates?)")
    return d.get("context", {}), rows


def _case(rows, path, key):
    b = rows.get(key)
    if b is None:
        raise ValueError(f"{path} has no median row for case '{key}' (run the benchmark in full, without a filter)")
    return b


def _ceiling(ctx, path, key):
    try:
        return float(ctx[key])
    except (KeyError, ValueError):
        raise ValueError(f"{path}: context key '{key}' is missing or not a number (the ceilings are measured in "
                         f"the same run)") from None


def _gbs(b):
    """Achieved GB/s of a row: its modelled bytes over its median time."""
    return b["bytes"] / 1e3 / us_of(b)


def _peak(ctx, path):
    """GB/s of the faster of the two ceilings measured in the run: the rate of the floor column."""
    return max(_ceiling(ctx, path, "copy_ceiling_GBps"), _ceiling(ctx, path, "read_ceiling_GBps"))


def _floor_cell(value, ok):
    """The floor column: a target that the floor itself misses is marked short (see --targets in __doc__)."""
    return value if ok else f"{value} (short)"


def _family_targets(path, issue, eager, replay, dual, t):
    """Issue 10's (Mamba-2) or 11's (GDN) targets, batch 256 unless named. `replay`, `dual`: the case prefixes of the
    kernel the cuda decoder runs; t: the family's thresholds."""
    ctx, rows = _load_rows(path)
    copy, read = _ceiling(ctx, path, "copy_ceiling_GBps"), _ceiling(ctx, path, "read_ceiling_GBps")
    c = lambda k: _case(rows, path, k)  # noqa: E731
    us = lambda k: us_of(c(k))  # noqa: E731
    peak = max(copy, read)
    fl = lambda k: c(k)["bytes"] / 1e3 / peak  # noqa: E731  the step's DRAM floor, µs
    fe, fe1, feb = fl(f"{eager}/fp32/batch:256"), fl(f"{eager}/fp32/batch:1"), fl(f"{eager}/bf16/batch:256")
    fr16, fr1 = fl(f"{replay}/fp32/K16/amortised/batch:256"), fl(f"{replay}/fp32/K16/amortised/batch:1")
    frb, fd16 = fl(f"{replay}/bf16/K16/amortised/batch:256"), fl(f"{dual}/fp32+bf16/K16/amortised/batch:256")
    e, e1, eb = us(f"{eager}/fp32/batch:256"), us(f"{eager}/fp32/batch:1"), us(f"{eager}/bf16/batch:256")
    r16, r1 = us(f"{replay}/fp32/K16/amortised/batch:256"), us(f"{replay}/fp32/K16/amortised/batch:1")
    rb, d16 = us(f"{replay}/bf16/K16/amortised/batch:256"), us(f"{dual}/fp32+bf16/K16/amortised/batch:256")
    ecopy = _gbs(c(f"{eager}/fp32/batch:256")) / copy
    out = [
        (issue, "eager fp32: ≥ 90% of the copy ceiling", f"{e:.1f} µs, {ecopy:.1%}", "-", ecopy >= 0.90),
        (issue, f"replay fp32 K16 amortised: ≤ {t['replay_us']:.0f} µs", f"{r16:.1f} µs",
         _floor_cell(f"{fr16:.1f} µs", fr16 <= t["replay_us"]), r16 <= t["replay_us"]),
        (issue, f"replay fp32 K16 amortised: ≥ {t['replay_x']}x eager fp32", f"{e / r16:.2f}x",
         _floor_cell(f"{fe / fr16:.2f}x", fe / fr16 >= t["replay_x"]), e / r16 >= t["replay_x"]),
        (issue, "batch 1: replay fp32 K16 amortised no slower than eager fp32", f"{r1:.1f} against {e1:.1f} µs "
         f"({r1 / e1:.2f}x)", _floor_cell(f"{fr1 / fe1:.2f}x", fr1 <= fe1), r1 <= e1),
        (issue, f"bf16 state: replay K16 amortised ≥ {t['bf16_x']}x bf16 eager", f"{rb:.1f} against {eb:.1f} µs "
         f"({eb / rb:.2f}x)", _floor_cell(f"{feb / frb:.2f}x", feb / frb >= t["bf16_x"]), eb / rb >= t["bf16_x"]),
        (issue, f"dual fp32 + bf16 read K16 amortised: ≤ {t['dual_us']:.0f} µs", f"{d16:.1f} µs ({e / d16:.2f}x "
         "eager fp32)", _floor_cell(f"{fd16:.1f} µs", fd16 <= t["dual_us"]), d16 <= t["dual_us"]),
    ]
    if issue == "10":
        f16, n16 = c(f"{replay}/fp32/K16/flush/batch:256"), c(f"{replay}/fp32/K16/nonflush/batch:256")
        r32, fr32 = us(f"{replay}/fp32/K32/amortised/batch:256"), fl(f"{replay}/fp32/K32/amortised/batch:256")
        ff = fl(f"{replay}/fp32/K16/flush/batch:256")
        fall, ffall = (e / r32) / (e / r16), (fe / fr32) / (fe / fr16)
        out += [
            (issue, "flush step: ≤ 1.2x eager fp32", f"{us_of(f16):.1f} µs ({us_of(f16) / e:.2f}x)",
             _floor_cell(f"{ff / fe:.2f}x", ff / fe <= 1.2), us_of(f16) / e <= 1.2),
            (issue, "flush step: ≥ 85% of the copy ceiling", f"{_gbs(f16) / copy:.1%}", "-", _gbs(f16) / copy >= 0.85),
            (issue, "non-flush replay fp32 K16: ≥ 85% of the read-only ceiling", f"{_gbs(n16) / read:.1%}", "-",
             _gbs(n16) / read >= 0.85),
            (issue, "interval 32: speed-up over eager within 10% of interval 16's", f"{e / r32:.2f}x against "
             f"{e / r16:.2f}x ({fall:.2f})", _floor_cell(f"{fe / fr32:.2f}x against {fe / fr16:.2f}x ({ffall:.2f})",
                                                         ffall >= 0.90), fall >= 0.90),
        ]
    else:
        # The crossover: the smallest interval from which the inner-product route stays faster than reconstruct.
        ks = sorted(int(m.group(1)) for k in rows if (m := re.match(r"^replay/inner/fp32/K(\d+)/amortised/batch:256$", k))
                    and f"replay/reconstruct/fp32/K{m.group(1)}/amortised/batch:256" in rows)
        wins = [us(f"replay/inner/fp32/K{k}/amortised/batch:256") < us(f"replay/reconstruct/fp32/K{k}/amortised/batch:256")
                for k in ks]
        cross = next((k for i, k in enumerate(ks) if all(wins[i:])), None)
        i32, c32 = us("replay/inner/fp32/K32/amortised/batch:256"), us("replay/reconstruct/fp32/K32/amortised/batch:256")
        out.append((issue, "interval 32: inner-product route faster than reconstruct (crossover reported)",
                    f"{i32:.1f} against {c32:.1f} µs; inner faster from K{cross}" if cross else
                    f"{i32:.1f} against {c32:.1f} µs; no crossover in K {ks}", "-", i32 < c32))
    return ctx, out


def _hist_is_ring(ctx):
    """Whether a bench_spec_cuda run flushed early against its power-of-two ring (--hist=ring) rather than L_hist =
    interval + T (files before --hist have no key)."""
    return ctx.get("hist", "interval + T") != "interval + T"


def _hist_text(ctx):
    return "hist = ring (the power-of-two ring)" if _hist_is_ring(ctx) else "hist = interval + T"


def _spec_targets(path):
    """Issue 12's targets at batch 256, T = 4, both families."""
    ctx, rows = _load_rows(path)
    peak = _peak(ctx, path)
    # A run with another L_hist than METHOD.md's flushes at another rate: its verify rows say so.
    hist = " (hist = the power-of-two ring)" if _hist_is_ring(ctx) else ""
    out = []
    for fam in ("mamba2", "gdn"):
        b = _case(rows, path, f"{fam}/T:4/batch:256")
        v, ratio, eager = b["us_verify_amortised"], b["ratio_verify_over_replay"], b["ratio_eager_over_verify"]
        # The verify's floor is its amortised bytes (the windows between flushes at the run's acceptance, and the
        # flushing window), as its time is.
        try:
            fv, fr, fe = (b[k] / 1e3 / peak for k in ("bytes_verify_amortised", "bytes_replay_amortised",
                                                       "bytes_eager_verify"))
        except KeyError as k:
            raise ValueError(f"{path}: case '{fam}/T:4/batch:256' has no counter {k}") from None
        out.append(("12", f"{fam}: replay verify ≤ 1.1x the standard replay step{hist}", f"{v:.1f} against "
                    f"{b['us_replay_amortised']:.1f} µs ({ratio:.2f}x)", _floor_cell(f"{fv / fr:.2f}x", fv / fr <= 1.1),
                    ratio <= 1.1))
        if fam == "mamba2":
            out.append(("12", f"mamba2: replay verify ≤ 320 µs{hist}", f"{v:.1f} µs", _floor_cell(f"{fv:.1f} µs", fv <= 320),
                        v <= 320))
        out.append(("12", f"{fam}: replay verify ≥ 4.5x faster than the eager speculative baseline{hist}",
                    f"{b['us_eager_verify']:.1f} against {v:.1f} µs ({eager:.2f}x)",
                    _floor_cell(f"{fe / fv:.2f}x", fe / fv >= 4.5), eager >= 4.5))
        out.append(("12", f"{fam}: eager speculative baseline ≥ 90% of the copy ceiling", f"{b['eager_of_copy']:.1%}",
                    "-", b["eager_of_copy"] >= 0.90))
    for kind in ("replay", "eager"):
        cu = us_of(_case(rows, path, f"commit/{kind}/T:4/batch:256"))
        out.append(("12", f"commit ({kind} rows): < 3 µs per step", f"{cu:.2f} µs", "-", cu < 3.0))
    return ctx, out


# Thresholds of issues 10 and 11 that differ between the families.
FAMILY_TARGETS = {
    "10": dict(replay_us=290.0, replay_x=1.9, bf16_x=1.6, dual_us=190.0),
    "11": dict(replay_us=150.0, replay_x=1.75, bf16_x=1.5, dual_us=100.0),
}


def targets_table(mamba2_path, gdn_path, spec_path):
    """Markdown: each file's provenance, then one row per target with ours and met / missed. Mamba-2 is judged on the
    grouped kernel (replay_g / dual_g, what the cuda decoder runs) where the file has it."""
    _, m_rows = _load_rows(mamba2_path)
    grouped = "replay_g/fp32/K16/amortised/batch:256" in m_rows
    runs = [_family_targets(mamba2_path, "10", "eager", "replay_g" if grouped else "replay",
                            "dual_g" if grouped else "dual", FAMILY_TARGETS["10"]),
            _family_targets(gdn_path, "11", "eager", "replay/inner", "dual/inner", FAMILY_TARGETS["11"]),
            _spec_targets(spec_path)]
    out = []
    for path, (ctx, _) in zip((mamba2_path, gdn_path, spec_path), runs):
        gpu = ctx.get("gpu", "?")
        out.append(f"- `{path}`: {gpu}, {ctx.get('date', '?')}, commit {str(ctx.get('git_commit', '?'))[:10]}"
                   + ("" if "H200" in gpu else " (the targets are set on the H200: read these verdicts as indicative)"))
    out += ["", "| issue | target (batch 256 unless named) | ours | at the DRAM floor | |", "|---|---|---|---|---|"]
    met = 0
    for _, rows in runs:
        for issue, target, ours, floor, ok in rows:
            met += ok
            out.append(f"| {issue} | {target} | {ours} | {floor} | {'met' if ok else '**missed**'} |")
    total = sum(len(r) for _, r in runs)
    out += ["", f"{met} of {total} targets met."]
    return "\n".join(out)


def is_spec(path):
    """A bench_spec_cuda file: by its name, or by the context keys only that benchmark writes."""
    if "spec" in path.rsplit("/", 1)[-1]:
        return True
    try:
        with open(path) as f:
            return "nonflush_fill" in json.load(f).get("context", {})
    except (OSError, ValueError):
        return False


def main(argv):
    if len(argv) >= 2 and argv[1] in ("-h", "--help"):
        print(__doc__)
        return
    if len(argv) >= 2 and argv[1] == "--ab":
        args, pattern = argv[2:], None
        if len(args) >= 2 and args[0] == "--filter":
            pattern, args = args[1], args[2:]
        if len(args) < 2:
            sys.exit("usage: scripts/bench_table.py --ab [--filter REGEX] BASE.json[,BASE2.json] OTHER.json[,...] ...")
        try:
            print(ab_table([a.split(",") for a in args], pattern))
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"bench_table.py --ab: {e}")
        return
    if len(argv) >= 2 and argv[1] == "--targets":
        if len(argv) != 5:
            sys.exit("usage: scripts/bench_table.py --targets MAMBA2.json GDN.json SPEC.json")
        try:
            print(targets_table(*argv[2:5]))
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"bench_table.py --targets: {e}")
        return
    if len(argv) < 2:
        sys.exit("usage: scripts/bench_table.py BENCH.json [BENCH.json ...]\n"
                 "       scripts/bench_table.py --ab [--filter REGEX] BASE.json[,BASE2.json] OTHER.json[,...] ...\n"
                 "       scripts/bench_table.py --targets MAMBA2.json GDN.json SPEC.json")
    for path in argv[1:]:
        print(spec_table(path) if is_spec(path) else table(path))
        print()


if __name__ == "__main__":
    main(sys.argv)
