"""Times fla-core's fused recurrent gated delta rule (the Triton eager GDN decode kernel vLLM and SGLang use) at a
GDN geometry preset and writes it into a bench_gdn_cuda JSON of the same device session, so the README and the
figures compare our kernels with what users run today (issue 11).

On the GPU machine, after bench_gdn_cuda wrote its JSON:
    python3 experiments/bench_fla.py --json OUT/bench_gdn_cuda.json [--batches 1,256] [--preset qwen35-4b]
fla-core and einops travel as wheels (the machine has torch and triton, no network). One decode step (T = 1) per
call: bf16 q, k (HK heads), v (HV heads), fp32 log-gate g and beta per value head, fp32 state [B, HV, K, V] read as
the initial state and written as the final one, the L2 normalisation of q and k in the kernel (as our kernels fuse
it). Timed with triton.testing.do_bench (L2 cleared before every call, median of the calls; the host launch is
inside the timing, as vLLM's eager path has it). Each case is appended to the JSON's benchmark list as
`fla_eager/fp32/batch:N` with us_median and the state bytes moved; the context gains fla_version and
fla_method. Exits non-zero with one line when fla-core cannot be imported (the JSON is then left as it was).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

GEOMETRY = {"qwen35-4b": (16, 32, 128, 128), "qwen35-122b": (16, 64, 128, 128)}  # HK, HV, K, V (lib/model/model.cpp)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True, help="bench_gdn_cuda JSON of this session, updated in place")
    ap.add_argument("--batches", default="1,256")
    ap.add_argument("--preset", default=None, help="GDN preset (default: the JSON's context preset)")
    a = ap.parse_args()
    try:
        with open(a.json) as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as e:
        print(f"bench_fla: {a.json}: {e}", file=sys.stderr)
        return 2
    preset = a.preset or doc.get("context", {}).get("preset", "qwen35-4b")
    if preset not in GEOMETRY:
        print(f"bench_fla: --preset {preset!r}: not a GDN preset ({', '.join(GEOMETRY)})", file=sys.stderr)
        return 2
    try:
        batches = [int(b) for b in a.batches.split(",")]
    except ValueError:
        print(f"bench_fla: --batches {a.batches!r}: not a comma list of integers", file=sys.stderr)
        return 2
    try:
        import torch
        import triton
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
        from importlib.metadata import version
        fla_version = version("fla-core")
    except Exception as e:  # noqa: BLE001 - any import failure means no comparison
        print(f"bench_fla: fla-core not importable ({type(e).__name__}: {e})", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("bench_fla: no CUDA device visible to torch", file=sys.stderr)
        return 1
    HK, HV, K, V = GEOMETRY[preset]
    dev = torch.device("cuda")
    rows = []
    for B in batches:
        torch.manual_seed(B)
        q = torch.randn(B, 1, HK, K, device=dev, dtype=torch.bfloat16)
        k = torch.randn(B, 1, HK, K, device=dev, dtype=torch.bfloat16)
        v = torch.randn(B, 1, HV, V, device=dev, dtype=torch.bfloat16)
        g = -torch.rand(B, 1, HV, device=dev, dtype=torch.float32) * 0.1  # log of the decay
        beta = torch.rand(B, 1, HV, device=dev, dtype=torch.float32)
        h0 = torch.randn(B, HV, K, V, device=dev, dtype=torch.float32) * 0.01

        def step():
            return fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, scale=K ** -0.5, initial_state=h0,
                                                    output_final_state=True, use_qk_l2norm_in_kernel=True)

        o, ht = step()
        torch.cuda.synchronize()
        if not torch.isfinite(o).all() or ht.shape != h0.shape:
            print(f"bench_fla: batch {B}: the kernel's output is not finite or its state has the wrong shape",
                  file=sys.stderr)
            return 1
        ms = triton.testing.do_bench(step, warmup=25, rep=200, return_mode="median")
        state_bytes = 2 * B * HV * K * V * 4
        rows.append({"name": f"fla_eager/fp32/batch:{B}/manual_time_median", "run_name": f"fla_eager/fp32/batch:{B}",
                     "run_type": "aggregate", "aggregate_name": "median", "real_time": ms * 1e3, "cpu_time": 0.0,
                     "time_unit": "us", "us_median": ms * 1e3, "bytes": state_bytes,
                     "GBps": state_bytes / (ms * 1e-3) / 1e9})
        print(f"fla {fla_version} fused_recurrent_gated_delta_rule {preset} batch {B}: {ms * 1e3:.1f} us "
              f"({state_bytes / (ms * 1e-3) / 1e9:.0f} GB/s of state read + write)")
    doc["benchmarks"] += rows
    ctx = doc.setdefault("context", {})
    ctx["fla_version"] = fla_version
    ctx["fla_method"] = ("triton.testing.do_bench, median, L2 cleared between calls, host launch included; "
                         "bf16 q/k/v, fp32 g/beta/state, qk L2 norm in kernel, T = 1")
    tmp = a.json + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(doc, fh, indent=1)
    os.replace(tmp, a.json)  # never a half-written JSON
    return 0


if __name__ == "__main__":
    sys.exit(main())
