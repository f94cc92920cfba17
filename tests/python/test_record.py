#!/usr/bin/env python3
"""Recorder acceptance test (issue 5): record small randomly initialised transformers models of each family
(Mamba-2, Nemotron-H, Qwen3-Next GDN; configs built here, nothing downloaded), replay the traces with
`replayssm run` (fp64 eager reference, fp32 inputs) and compare its reference outputs with the mixer outputs
captured from torch (Mamba-2: y*silu(z) before the RMS norm; GDN: o before the output norm and gate).

usage: test_record.py REPLAYSSM_BINARY [--keep DIR] [--device cpu|cuda]
Exit 0: pass; 1: fail; 77: skipped (torch or transformers not installed).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))   # repository root, for `analysis`

TOL = 1e-4          # fail above this (a convention bug gives O(1) differences); 1e-5 is the expectation


def tiny_configs():
    """(name, config, record kwargs) for each family, each with at least two SSM heads per group/key head."""
    import transformers as tf

    out = []
    c = tf.Mamba2Config(vocab_size=97, hidden_size=64, num_heads=8, head_dim=16, expand=2, state_size=16,
                        n_groups=2, num_hidden_layers=2, conv_kernel=4, chunk_size=16, use_cache=True)
    out.append(("mamba2", c, dict(prompt_tokens=1)))

    nh = dict(vocab_size=97, hidden_size=64, num_hidden_layers=3, mamba_num_heads=8, mamba_head_dim=16,
              ssm_state_size=16, n_groups=2, conv_kernel=4, chunk_size=16, intermediate_size=128,
              num_attention_heads=2, num_key_value_heads=1, head_dim=32, use_mamba_kernels=False,
              mamba_hidden_act="silu", use_cache=True)
    try:
        c = tf.NemotronHConfig(hybrid_override_pattern="M*M", **nh)
    except Exception as e:     # newer layouts name the layer pattern differently
        print(f"NemotronHConfig(hybrid_override_pattern=...) failed: {e!r}; trying layers_block_type")
        c = tf.NemotronHConfig(layers_block_type=["mamba", "attention", "mamba"], **nh)
    out.append(("nemotron_h", c, dict(prompt_tokens=3)))

    c = tf.Qwen3NextConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                           linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                           linear_value_head_dim=16, linear_conv_kernel_dim=4,
                           layer_types=["linear_attention", "full_attention"], num_experts=2,
                           num_experts_per_tok=1, moe_intermediate_size=32, shared_expert_intermediate_size=32,
                           mlp_only_layers=[0, 1], decoder_sparse_step=1, use_cache=True)
    out.append(("qwen3_next", c, dict(prompt_tokens=5)))
    return out


def replay_reference(binary, trace, workdir):
    import h5py
    res = os.path.join(workdir, os.path.basename(trace).replace(".h5", "_result.h5"))
    ini = os.path.join(workdir, "replay.ini")
    with open(ini, "w") as f:
        f.write(f"[run]\noutput = {res}\n[trace]\nfile = {trace}\n")
    cmd = [binary, "run", ini, "--set", "run.save_outputs=true", "--set", "scheme.decoder=eager",
           "--set", "scheme.state_format=fp64", "--set", "scheme.act_format=fp32", "--set", "metrics.kl=false",
           "--set", "run.threads=2"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"replayssm failed ({p.returncode}): {p.stdout}\n{p.stderr}")
    with h5py.File(res, "r") as f:
        return f["reference/fp32/outputs"][...]


def compare(ref, got):
    import numpy as np
    ref = ref.astype(np.float64)
    got = got.astype(np.float64)
    if ref.shape != got.shape:
        raise RuntimeError(f"shape mismatch: replayssm {ref.shape}, torch {got.shape}")
    num = np.linalg.norm(ref - got, axis=-1)
    den = np.linalg.norm(ref, axis=-1)
    rel = num / np.maximum(den, 1e-300)
    return dict(max_rel_norm=float(rel.max()), mean_rel_norm=float(rel.mean()),
                max_abs=float(np.abs(ref - got).max()), max_abs_over_max_ref=float(np.abs(ref - got).max() /
                                                                                   np.abs(ref).max()),
                steps=int(ref.shape[0]), seqs=int(ref.shape[1]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--keep", default="")
    ap.add_argument("--device", default="")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--json", default="", help="write the measured agreement here")
    a = ap.parse_args()
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        name = "torch" if "torch" in str(e) and "transformers" not in str(e) else "torch/transformers"
        print(f"skipped: {name} not installed ({e})")
        return 77
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from analysis.record.hf import generate_and_record

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    workdir = a.keep or tempfile.mkdtemp(prefix="test_record_")
    os.makedirs(workdir, exist_ok=True)
    results, ok = {}, True
    for name, cfg, kw in tiny_configs():
        try:
            from transformers import AutoModelForCausalLM
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).to(device).eval()
            rec = generate_and_record(model, None, seqs=2, steps=a.steps, seed=1, sample=True, **kw)
            paths, outs = rec.write(os.path.join(workdir, name), steps=a.steps, description=f"test {name}")
            checks = rec.checks()
            for path, (layer, out) in zip(paths, outs.items()):
                ref = replay_reference(a.binary, path, workdir)
                r = compare(ref, out)
                r.update(checks[layer])
                r["prompt_tokens"] = kw["prompt_tokens"]
                results[f"{name}/layer{layer}"] = r
                bad = r["max_rel_norm"] > TOL
                if "g_max_abs_diff" in r and r.get("qk_repeat_ok") is False:
                    bad = True
                ok &= not bad
                print(f"{name} layer {layer} ({os.path.basename(path)}): max rel (norm-wise per token) "
                      f"{r['max_rel_norm']:.3g}, mean {r['mean_rel_norm']:.3g}, max abs {r['max_abs']:.3g} "
                      f"(/{r['max_abs_over_max_ref']:.3g} of max |ref|), {r['steps']} steps x {r['seqs']} seqs"
                      f"{' FAIL' if bad else ''}")
        except Exception as e:
            import traceback
            traceback.print_exc()
            print(f"{name}: ERROR {e!r}")
            results[name] = {"error": repr(e)}
            ok = False
    # The command line on a saved checkpoint folder (what users run): a random Mamba-2 saved with save_pretrained,
    # recorded by `python3 -m analysis.record`, replayed, compared with the mixer outputs the command saved.
    try:
        from transformers import AutoModelForCausalLM
        import numpy as np
        name, cfg, _ = tiny_configs()[0]
        torch.manual_seed(0)
        ckpt = os.path.join(workdir, "cli_checkpoint")
        AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(ckpt)
        out_dir = os.path.join(workdir, "cli_out")
        cmd = [sys.executable, "-m", "analysis.record", "--model", ckpt, "--steps", "24", "--seqs", "2",
               "--out", out_dir, "--save-outputs", "--seed", "3", "--device", device]
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=os.path.dirname(os.path.dirname(HERE)))
        if p.returncode != 0:
            raise RuntimeError(f"analysis.record failed ({p.returncode}): {p.stderr[-2000:]}")
        traces = [line for line in p.stdout.splitlines() if line.endswith(".h5")]
        saved = np.load(os.path.join(out_dir, "mixer_outputs.npz"))
        layer_keys = sorted(saved.files)
        r = compare(replay_reference(a.binary, traces[0], workdir), saved[layer_keys[0]])
        bad = r["max_rel_norm"] > TOL
        ok &= not bad
        results["cli/mamba2_checkpoint"] = r
        print(f"command line on a checkpoint folder: {len(traces)} trace(s), first layer max rel "
              f"{r['max_rel_norm']:.3g}{' FAIL' if bad else ''}")
    except Exception as e:
        import traceback
        traceback.print_exc()
        print(f"command line: ERROR {e!r}")
        results["cli"] = {"error": repr(e)}
        ok = False
    print(json.dumps(results, indent=1, default=str))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    worst = max((r["max_rel_norm"] for r in results.values() if "max_rel_norm" in r), default=math.nan)
    print(f"{'PASS' if ok else 'FAIL'}: worst max relative agreement {worst:.3g} (tolerance {TOL:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
