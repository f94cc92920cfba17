#!/usr/bin/env python3
"""The README's GPU speed tables, made from committed benchmark JSON (Google Benchmark output of
experiments/bench_mamba2_cuda.cu and bench_gdn_cuda.cu). Standard library only.

    scripts/bench_table.py benchmarks/bench_mamba2_cuda_h200.json benchmarks/bench_gdn_cuda_h200.json

Prints, per file, the GPU, date, commit and the ceilings measured in the same run, then one markdown row per case
of interest: median us per step, modelled bytes, achieved GB/s and its share of the copy and read-only ceilings.
Re-run the measurement on an H200 with scripts/gpu_run.sh (see GPU.md); its JSON replaces the committed file.
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


def table(path):
    with open(path) as f:
        d = json.load(f)
    ctx = d["context"]
    family = "gdn" if "gdn" in path else "mamba2"
    copy = float(ctx.get("copy_ceiling_GBps", "nan"))
    read = float(ctx.get("read_ceiling_GBps", "nan"))
    medians = {}
    for b in d["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        key = re.sub(r"/iterations:.*$", "", b["name"])
        medians[key] = b
    out = [f"`{path}`: {ctx.get('gpu', '?')}, driver CUDA {ctx.get('cuda_driver', '?')}, {ctx.get('date', '?')}, "
           f"commit {str(ctx.get('git_commit', '?'))[:10]}, {ctx.get('geometry', '')}; ceilings measured in the same "
           f"run: copy {copy:.0f} GB/s, read-only {read:.0f} GB/s", "",
           "| case | µs (median) | modelled MB | GB/s | of copy | of read-only |", "|---|---:|---:|---:|---:|---:|"]
    for key in ROWS[family]:
        b = medians.get(key)
        if b is None:
            continue
        us = b["real_time"] if b.get("time_unit") == "us" else b["real_time"] / 1e3
        mb = b.get("bytes", float("nan")) / 1e6
        gbs = mb / 1e3 / (us * 1e-6)
        out.append(f"| `{key}` | {us:.1f} | {mb:.1f} | {gbs:.0f} | {gbs / copy:.0%} | {gbs / read:.0%} |")
    return "\n".join(out)


def main(argv):
    if len(argv) < 2:
        sys.exit("usage: scripts/bench_table.py BENCH.json [BENCH.json ...]")
    for path in argv[1:]:
        print(table(path))
        print()


if __name__ == "__main__":
    main(sys.argv)
