"""Writes the notebooks of this folder (one per figure of issue 13) from the cells below, so they stay small and
alike; edit here and rerun `python3 analysis/notebooks/make_notebooks.py`. Executed headless by scripts/reproduce.sh."""
import os

import nbformat

HERE = os.path.dirname(os.path.abspath(__file__))
SETUP = "from analysis.notebook import context\nfrom analysis import figures\nctx = context()"

NOTEBOOKS = {
    "1_precision_pairs": (
        "# Precision pairs\nOutput error, KL and top-1 of eager / shared checkpoint / dual at every format pair, "
        "against modelled bytes per step (configs/paper/precision_kl.ini; hollow squares: the recorded tiny-hybrid "
        "layer 00 when its result file is there).",
        "s = ctx.summary('precision_kl')\nrec = ctx.summary('recorded_tiny_hybrid_layer00_mamba2')\n"
        "fig = figures.precision_pairs(s, recorded=rec)\n"
        "ok = s[s.status == 'ok']\n"
        "ok[['decoder_label', 'out_rel_err_mean', 'kl_mean', 'top1_agree', 'bytes_vs_eager_fp32']]",
        "precision_pairs"),
    "2_error_accumulation": (
        "# Error accumulation\nOutput error against step, slow heads' state error against flushes (log-log, fitted "
        "exponents), error against position since the last flush (configs/paper/precision_kl.ini, interval 8).",
        "keep = {'eager-bf16', 'replay-bf16-K8', 'replay-e4m3-K8', 'dual-fp32+bf16-K8', 'dual-fp32+e4m3-K8'}\n"
        "runs = ctx.runs('precision_kl', where=lambda r: r.decoder_label in keep)\n"
        "fig = figures.error_accumulation(runs)\nfigures.growth_slopes(runs)",
        "error_accumulation"),
    "3_interval_sweep": (
        "# Interval sweep\nModelled traffic and measured GPU µs per step against the checkpoint interval "
        "(configs/paper/interval_sweep.ini; GPU: every geometry preset's interval sweep in benchmarks/interval_sweep/, "
        "as a ratio to fp32 eager; without them, the newest benchmark JSON).",
        "fig = figures.interval_sweep(ctx.summary('interval_sweep'), ctx.bench(), presets=ctx.interval_bench())",
        "interval_sweep"),
    "4_gpu_speedup": (
        "# GPU speed-up\nReplay over eager against batch size at interval 16 (the interval every batch is measured "
        "at; figure 3 has the interval axis), and achieved bandwidth as a share of the ceilings measured in the same "
        "run (benchmark JSON).",
        "fig = figures.gpu_speedup(ctx.bench(), interval=16)",
        "gpu_speedup"),
    "5_spec_verify": (
        "# Speculative verify\nGPU µs per verify call, per accepted token (acceptance p of the run) and modelled "
        "bytes per committed token against the window T: replay verify, the eager speculative baseline and the "
        "standard replay step, per family at batch 256 and 64 (the newest speculative run of each family, "
        "bench_spec_cuda*.json or benchmarks/runs/spec-bench-<family>.*.json; issue 12's "
        "published kernels at batch 256, T = 4 as stars). Below the speed, the accuracy side from the CPU emulation "
        "(configs/paper/spec_accuracy.ini): error of the committed positions against fp64 at T = 0, 2, 4.",
        "spec, bctx = ctx.spec_bench()\nfig = figures.spec_verify(spec, bctx)\n"
        "cols = ['us_verify', 'us_verify_flush', 'us_verify_amortised', 'us_per_token', 'us_eager_verify',\n"
        "        'us_eager_per_token', 'us_replay_amortised', 'mean_committed']\n"
        "if spec is not None:\n    display(spec.set_index(['family', 'batch', 'window'])[cols].round(1))\n"
        "acc = ctx.summary('spec_accuracy')\n"
        "acc[acc.status == 'ok'][['decoder_label', 'window', 'acceptance', 'out_rel_err_mean', 'kl_mean', "
        "'tokens_per_step', 'bytes_vs_eager_fp32']] if acc is not None else None",
        "spec_verify"),
    "6_flush_arith": (
        "# Flush arithmetic\nfp32, tf32, 3xtf32, bf16 operands in the flush GEMM against drift "
        "(configs/paper/flush_arith.ini).",
        "runs = ctx.runs('flush_arith', label='flush_arith')\nfig = figures.flush_arith(runs)",
        "flush_arith"),
    "7_backend_diff": (
        "# GPU against CPU emulation\nPer-scheme distributions of the difference of cuda points from their cpu "
        "twins (configs/paper/backend_diff.ini; cuda points need a device).",
        "s = ctx.summary('backend_diff')\n"
        "runs = ctx.runs('backend_diff', where=lambda r: r.backend == 'cuda') if s is not None else {}\n"
        "fig = figures.backend_diff(s, runs)",
        "backend_diff"),
}


def main():
    for name, (md, code, fig) in NOTEBOOKS.items():
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.cells = [nbformat.v4.new_markdown_cell(md), nbformat.v4.new_code_cell(SETUP),
                    nbformat.v4.new_code_cell(code), nbformat.v4.new_code_cell(f"ctx.save(fig, '{fig}')")]
        for i, c in enumerate(nb.cells):
            c["id"] = f"c{i}"
        nbformat.write(nb, os.path.join(HERE, f"{name}.ipynb"))


if __name__ == "__main__":
    main()
