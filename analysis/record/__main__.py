"""python3 -m analysis.record --model PATH [--layers 0,2] [--prompt-tokens 1] [--steps 512] [--seqs 2] --out DIR

Records the SSM inputs of a transformers Mamba-2 / Nemotron-H / Qwen3-Next (GDN) model during generation into one
trace file (format v1, docs/trace_format.md) per chosen layer. See docs/recording.md.
"""
from __future__ import annotations

import argparse
import json
import sys


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m analysis.record", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint folder, or a folder/config.json for a random init")
    ap.add_argument("--layers", default="", help="comma list of SSM layer indices (default: every SSM layer)")
    ap.add_argument("--steps", type=int, default=512, help="tokens recorded per sequence, prompt included")
    ap.add_argument("--seqs", type=int, default=2, help="sequences generated side by side (batch)")
    ap.add_argument("--prompt-tokens", type=int, default=1, help="prompt length (random ids, BOS first)")
    ap.add_argument("--prompt-ids", default="", help="explicit prompt token ids, comma list (overrides --prompt-tokens)")
    ap.add_argument("--greedy", action="store_true", help="greedy decoding instead of sampling")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="float32", help="model dtype: float32 (recommended), bfloat16, float16")
    ap.add_argument("--device", default=None)
    ap.add_argument("--storage", default="fp32", choices=["fp32", "bf16"], help="element type of the inputs")
    ap.add_argument("--out", required=True, help="output folder: layerNN_<family>.h5 per layer")
    ap.add_argument("--save-outputs", action="store_true",
                    help="also write the mixers' outputs (y*silu(z) / GDN o) to OUT/mixer_outputs.npz")
    a = ap.parse_args(argv)
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"analysis.record needs torch and transformers: {e}", file=sys.stderr)
        return 2
    from .hf import generate_and_record, load_model

    layers = [int(x) for x in a.layers.split(",") if x.strip()] or None
    prompt_ids = [int(x) for x in a.prompt_ids.split(",") if x.strip()] or None
    model = load_model(a.model, a.dtype, a.device, a.seed)
    rec = generate_and_record(model, layers, seqs=a.seqs, prompt_tokens=a.prompt_tokens, steps=a.steps,
                              seed=a.seed, sample=not a.greedy, temperature=a.temperature, prompt_ids=prompt_ids)
    paths, outs = rec.write(a.out, steps=a.steps, storage=a.storage,
                            description=f"recorded from {a.model} by analysis.record (seed {a.seed})")
    if a.save_outputs:
        import numpy as np
        np.savez_compressed(f"{a.out}/mixer_outputs.npz", **{f"layer{k}": v for k, v in outs.items()})
    for p in paths:
        print(p)
    print(json.dumps({"checks": rec.checks()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
