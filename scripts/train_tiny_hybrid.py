#!/usr/bin/env python3
"""Train a tiny byte-level hybrid language model (Mamba-2 + Gated DeltaNet + one attention layer, ~10M parameters)
built from transformers' mixer modules, then record its SSM traces (format v1) for data/.

    python3 scripts/train_tiny_hybrid.py --corpus DIR --out OUT [--steps 1500] [--seed 0]

Corpus: the plain-text fortune files of Debian's `fortunes` and `fortunes-min` packages (/usr/share/games/fortunes,
every file without an extension), concatenated in sorted name order; the last 5% of bytes are held out.
Model (block = pre-norm mixer + pre-norm SwiGLU MLP): layout M G A M G, d_model 384, MLP 1536.
  M: transformers NemotronHMamba2Mixer (Mamba-2), H=4 P=32 N=32 G=1, conv 4;  G: transformers Qwen3NextGatedDeltaNet, HK=2 HV=4 K=V=32;
  A: causal multi-head attention (6 heads, no positional encoding: the SSM layers before it carry position).
Training is a fixed number of AdamW steps from a seed (data order from the same seed); the loss curve goes to
OUT/loss.csv. Traces: teacher-forced on held-out text (--trace-seqs sequences of --trace-steps bytes), every SSM
layer, stored as bfloat16, with a readout (lm_head . out_proj . norm weight, a proxy for KL).
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

LAYOUT = "MGAMG"
D_MODEL, D_MLP = 384, 1536


def load_corpus(d):
    files = sorted(f for f in glob.glob(os.path.join(d, "*")) if os.path.isfile(f) and "." not in os.path.basename(f))
    data = b"".join(open(f, "rb").read() for f in files)
    return data, [os.path.basename(f) for f in files]


def build_model(torch):
    import torch.nn as nn
    import torch.nn.functional as F
    from transformers import NemotronHConfig, Qwen3NextConfig
    from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHMamba2Mixer
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

    n = len(LAYOUT)
    # Nemotron-H's mixer: its inner width is heads x head_dim, independent of d_model (Mamba2Mixer ties it to expand)
    mcfg = NemotronHConfig(vocab_size=256, hidden_size=D_MODEL, num_hidden_layers=n, hybrid_override_pattern="M" * n,
                           mamba_num_heads=4, mamba_head_dim=32, ssm_state_size=32, n_groups=1, conv_kernel=4,
                           chunk_size=64, use_conv_bias=True, use_bias=False, mamba_hidden_act="silu",
                           layer_norm_epsilon=1e-5, use_mamba_kernels=False)
    gcfg = Qwen3NextConfig(hidden_size=D_MODEL, linear_num_key_heads=2, linear_num_value_heads=4,
                           linear_key_head_dim=32, linear_value_head_dim=32, linear_conv_kernel_dim=4,
                           hidden_act="silu", rms_norm_eps=1e-6, num_hidden_layers=n,
                           layer_types=["linear_attention"] * n)

    class Attn(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.h = heads
            self.qkv = nn.Linear(d, 3 * d, bias=False)
            self.o = nn.Linear(d, d, bias=False)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o(y.transpose(1, 2).reshape(b, s, d))

    class MLP(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.up = nn.Linear(d, 2 * h, bias=False)
            self.down = nn.Linear(h, d, bias=False)

        def forward(self, x):
            a, b = self.up(x).chunk(2, dim=-1)
            return self.down(F.silu(a) * b)

    class Block(nn.Module):
        def __init__(self, kind, idx):
            super().__init__()
            self.kind = kind
            self.n1 = nn.RMSNorm(D_MODEL, eps=1e-5)
            self.n2 = nn.RMSNorm(D_MODEL, eps=1e-5)
            if kind == "M":
                self.mixer = NemotronHMamba2Mixer(mcfg, layer_idx=idx)
                assert self.mixer.num_heads * self.mixer.head_dim == self.mixer.intermediate_size == 128
            elif kind == "G":
                self.mixer = Qwen3NextGatedDeltaNet(gcfg, layer_idx=idx)
            else:
                self.mixer = Attn(D_MODEL, 6)
            self.mlp = MLP(D_MODEL, D_MLP)

        def forward(self, x):
            x = x + self.mixer(self.n1(x))
            return x + self.mlp(self.n2(x))

    class TinyHybrid(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(256, D_MODEL)
            self.blocks = nn.ModuleList([Block(k, i) for i, k in enumerate(LAYOUT)])
            self.norm = nn.RMSNorm(D_MODEL, eps=1e-5)
            self.head = nn.Linear(D_MODEL, 256, bias=False)

        def forward(self, ids):
            x = self.emb(ids)
            for b in self.blocks:
                x = b(x)
            return self.head(self.norm(x))

    return TinyHybrid()


def init_ssm_params(model, torch):
    """Mamba-2 initialisation (A_log = log U(1,16), dt from log-uniform [1e-3, 1e-1], D = 1) for the Mamba-2 mixers,
    Qwen3-Next's (A_log = log U(0,16), dt_bias = 1) for the GDNs, drawn from the global seed."""
    for b in model.blocks:
        m = b.mixer
        if b.kind == "M":
            H = m.num_heads
            with torch.no_grad():
                m.A_log.copy_(torch.log(torch.empty(H).uniform_(1, 16)))
                dt = torch.exp(torch.rand(H) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
                m.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))
                m.D.fill_(1.0)
        elif b.kind == "G":
            with torch.no_grad():
                m.A_log.copy_(torch.log(torch.empty(m.num_v_heads).uniform_(0, 16)))
                m.dt_bias.fill_(1.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=1400, help="1400: near the held-out minimum; 4000 over-fits")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-minutes", type=float, default=4.0, help="safety stop (logged when it cuts training)")
    ap.add_argument("--trace-seqs", type=int, default=2)
    ap.add_argument("--trace-steps", type=int, default=2048)
    ap.add_argument("--storage", default="bf16", choices=["fp32", "bf16"])
    ap.add_argument("--save-weights", default="", help="also save the weights (state_dict) here")
    a = ap.parse_args()

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np
    import torch
    import torch.nn.functional as F

    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    data, files = load_corpus(a.corpus)
    n_val = len(data) // 20
    train = torch.tensor(np.frombuffer(data[:-n_val], dtype=np.uint8).astype(np.int64))
    val = torch.tensor(np.frombuffer(data[-n_val:], dtype=np.uint8).astype(np.int64))
    print(f"corpus: {len(files)} files, {len(data)} bytes (train {len(train)}, held out {len(val)})", flush=True)

    model = build_model(torch)
    init_ssm_params(model, torch)
    model = model.to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"model: layout {LAYOUT}, {nparams / 1e6:.2f}M parameters", flush=True)
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (no_decay if p.ndim < 2 or n.endswith(("A_log", "dt_bias", ".D")) else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))
    warm = max(1, a.steps // 20)

    def lr_at(s):
        if s < warm:
            return a.lr * (s + 1) / warm
        return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, a.steps - warm))))

    gen = torch.Generator().manual_seed(a.seed)
    vgen = torch.Generator().manual_seed(a.seed + 1)
    vstarts = torch.randint(0, len(val) - a.seq - 1, (64,), generator=vgen)

    def batch(src, starts):
        idx = starts[:, None] + torch.arange(a.seq + 1)[None]
        t = src[idx].to(dev)
        return t[:, :-1], t[:, 1:]

    def evaluate():
        model.eval()
        with torch.no_grad():
            tot = 0.0
            for i in range(0, 64, 16):
                x, y = batch(val, vstarts[i:i + 16])
                tot += F.cross_entropy(model(x).float().reshape(-1, 256), y.reshape(-1)).item() * 16
        model.train()
        return tot / 64

    os.makedirs(a.out, exist_ok=True)
    curve = []
    t0 = time.time()
    model.train()
    stopped = None
    for step in range(a.steps):
        starts = torch.randint(0, len(train) - a.seq - 1, (a.batch,), generator=gen)
        x, y = batch(train, starts)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        loss = F.cross_entropy(model(x).float().reshape(-1, 256), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 25 == 0 or step == a.steps - 1:
            row = dict(step=step, train_loss=loss.item(), lr=lr_at(step), seconds=time.time() - t0)
            if step % 100 == 0 or step == a.steps - 1:
                row["val_loss"] = evaluate()
            curve.append(row)
            print(json.dumps(row), flush=True)
        if time.time() - t0 > a.max_minutes * 60:
            stopped = step + 1
            print(f"stopped by --max-minutes after {stopped} steps", flush=True)
            break
    final_val = evaluate()
    train_s = time.time() - t0
    with open(os.path.join(a.out, "loss.csv"), "w") as f:
        f.write("step,train_loss,val_loss,lr,seconds\n")
        for r in curve:
            f.write(f"{r['step']},{r['train_loss']:.5f},{r.get('val_loss', '')},{r['lr']:.6g},{r['seconds']:.2f}\n")
    summary = dict(params=nparams, layout=LAYOUT, steps_run=stopped or a.steps, steps_planned=a.steps,
                   batch=a.batch, seq=a.seq, lr=a.lr, seed=a.seed, train_seconds=train_s,
                   final_val_loss_nats_per_byte=final_val, final_val_bits_per_byte=final_val / math.log(2),
                   corpus_bytes=len(data), corpus_files=files, torch=torch.__version__)
    import transformers
    summary["transformers"] = transformers.__version__
    if a.save_weights:
        torch.save(model.state_dict(), a.save_weights)

    # ---- traces: teacher-forced on held-out text, every SSM layer ----
    from analysis.record.capture import Recorder
    model.eval()
    L = a.trace_steps
    stride = (len(val) - L) // max(1, a.trace_seqs)
    ids = torch.stack([val[i * stride: i * stride + L] for i in range(a.trace_seqs)]).to(dev)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    readouts = {}
    W = model.head.weight.detach().float()
    for i, b in enumerate(model.blocks):
        if b.kind in "MG":
            m = b.mixer
            nw = m.norm.weight.detach().float()
            cols = m.out_proj.weight.shape[1]
            nw = nw.repeat(cols // nw.numel())
            readouts[i] = (W @ m.out_proj.weight.detach().float() * nw[None]).cpu().numpy()
    with torch.no_grad():
        with Recorder(model) as rec:
            logits = model(ids)
        tf_loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, 256), ids[:, 1:].reshape(-1)).item()
    paths, outs = rec.write(a.out, storage=a.storage, prefix="tiny_hybrid_layer", readouts=readouts,
                            description=f"tiny byte-level hybrid LM ({LAYOUT}, {nparams / 1e6:.1f}M params, seed "
                                        f"{a.seed}, {stopped or a.steps} steps on Debian fortunes), "
                                        f"teacher-forced on held-out fortunes text")
    np.savez_compressed(os.path.join(a.out, "mixer_outputs.npz"), **{f"layer{k}": v[:256] for k, v in outs.items()})
    summary["trace_loss_nats_per_byte"] = tf_loss
    summary["traces"] = {os.path.basename(p): os.path.getsize(p) for p in paths}
    summary["checks"] = {str(k): v for k, v in rec.checks().items()}
    with open(os.path.join(a.out, "train_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1), flush=True)


if __name__ == "__main__":
    main()
