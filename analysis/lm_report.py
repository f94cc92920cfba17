"""Markdown tables of end-to-end language-model runs (`replayssm run` with a [model] section, README "End to end").

    python3 -m analysis.lm_report TEACHER.h5 [FREE.h5]

Teacher-forced file: KL(p_fp64 || p_scheme) mean and max, top-1 agreement, bits per byte and its difference from the
fp64 model, the per-layer readout proxy's KL and the rank correlation of the two over the schemes. Free-running file:
first divergence from the fp64 greedy text (mean, min over sequences) and the share still identical after N bytes.
Points that were skipped are left out.
"""
from __future__ import annotations

import sys

import h5py
import numpy as np


def _rows(path):
    with h5py.File(path, "r") as f:
        s = f["summary"]
        cols = {k: s[k][...] for k in s}
        attrs = dict(f.attrs)
    n = len(cols["run"])
    dec = lambda v: v.decode() if isinstance(v, bytes) else v
    rows = [{k: dec(cols[k][i]) for k in cols} for i in range(n)]
    return [r for r in rows if r.get("status") == "ok"], attrs


def teacher_table(path):
    rows, attrs = _rows(path)
    out = [f"fp64 model: {attrs.get('ref_bits_per_byte', float('nan')):.4f} bits/byte; "
           f"proxy rank correlation (Spearman) {attrs.get('proxy_rank_correlation', float('nan')):.3f}", "",
           "| scheme | KL mean | KL max | top-1 | Δ bits/byte | proxy KL |", "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['decoder_label']} | {r['kl_mean']:.2e} | {r['kl_max']:.2e} | {r['top1_agree']:.4f} | "
                   f"{r['delta_bits_per_byte']:+.1e} | {r['proxy_kl_mean']:.2e} |")
    return "\n".join(out)


def free_table(path):
    rows, _ = _rows(path)
    keys = [k for k in ("identical_after_256", "identical_after_1024", "identical_after_4096") if rows and k in rows[0]]
    out = ["| scheme | first divergence, mean | min | " + " | ".join(k.replace("identical_after_", "identical @")
                                                                  for k in keys) + " |",
           "|---|---|---|" + "---|" * len(keys)]
    for r in rows:
        cells = " | ".join("-" if np.isnan(r[k]) else f"{r[k]:.2f}" for k in keys)
        out.append(f"| {r['decoder_label']} | {r['first_divergence_mean']:.0f} | {r['first_divergence_min']:.0f} | "
                   f"{cells} |")
    return "\n".join(out)


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    print(teacher_table(sys.argv[1]))
    if len(sys.argv) > 2:
        print()
        print(free_table(sys.argv[2]))


if __name__ == "__main__":
    main()
