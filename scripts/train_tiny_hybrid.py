#!/usr/bin/env python3
"""Train the tiny byte-level hybrid language model (Mamba-2 + Gated DeltaNet + one attention layer, ~10M
parameters), export its weights for the C++ forward (lib/lm/, docs/model_format.md), write a fixture of fp64
next-byte logits, its decay spectrum and decode traces of its SSM layers (format v1) for data/.

    python3 scripts/train_tiny_hybrid.py selftest                       # chunked scans == step-by-step, fp64 (CPU, s)
    python3 scripts/train_tiny_hybrid.py train --corpus FORTUNES --extra F... --out OUT [--steps N] [--seed 0]
    python3 scripts/train_tiny_hybrid.py fixture --weights OUT/lm_weights.h5 --text FILE --out FILE.h5

The mixers are written here in plain torch (no transformers), so that the definition the C++ forward reproduces
is this file: every formula below is what lib/lm/ computes one step at a time.
Model (block = pre-norm mixer + pre-norm SwiGLU MLP): layout M G A M G, d_model 384, MLP 1536, vocabulary 256.
  M (Mamba-2, H=4 P=32 N=32 G=1, conv 4): in_proj -> [z (H*P), x (H*P), B (G*N), C (G*N), dt (H)];
     x,B,C through a depthwise causal conv (with bias) and SiLU; Δ = softplus(dt + dt_bias) (no clamp);
     S <- exp(-exp(A_log)·Δ)·S + Δ·x⊗B, y = S·C + D·x; y <- y·silu(z), RMS-normalised over groups of H*P/G
     channels (eps 1e-5) times norm_weight; out_proj.
  G (Gated DeltaNet, HK=2 HV=4 K=V=32, conv 4): in_proj -> [q (HK*K), k (HK*K), v (HV*V), z (HV*V), b (HV), a (HV)];
     q,k,v through a depthwise causal conv (no bias) and SiLU; q,k L2-normalised (eps 1e-6), q scaled by K^-1/2,
     value head h uses key head h // (HV/HK); g = -exp(A_log)·softplus(a + dt_bias), α = exp(g), β = sigmoid(b);
     S <- α·S; u = β·(v - S·k); S <- S + u⊗k; o = S·q; o <- RMSNorm_V(o)·norm_weight (eps 1e-6) · silu(z); out_proj.
  A: causal multi-head attention (6 heads of 64, scale 1/8, no positional encoding: the SSM layers carry position).
Corpus: FORTUNES (Debian's `fortunes` + `fortunes-min`: the 43 extension-less files of /usr/share/games/fortunes
in sorted name order, or one file holding that concatenation, .xz/.gz read transparently); its last 5% is held
out, exactly as for the first model, so held-out losses compare. --extra files (training only): longer English text
from Debian packages (jargon-text's jargon.txt, dict-foldoc, dict-devil).
Initialisation: half of the SSM heads of every layer start slow (per-step log-decay 5e-5..1e-3, a memory of
1000-20000 bytes), the others with Mamba-2's ranges; A_log and dt_bias train at --ssm-lr-scale of the rate.
Training runs until --steps or --max-minutes, whichever comes first; the learning-rate schedule follows the
larger of the two fractions, so a time-limited run still anneals.
"""
from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import json
import lzma
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# Hyper-parameters of the shipped model; every one is written to the weights file's attributes.
HYPER = dict(layout="MGAMG", vocab=256, d_model=384, d_mlp=1536, norm_eps=1e-5, attn_heads=6,
             m_H=4, m_P=32, m_N=32, m_G=1, m_conv=4, m_norm_eps=1e-5,
             g_HK=2, g_HV=4, g_K=32, g_V=32, g_conv=4, g_norm_eps=1e-6, g_l2_eps=1e-6)
# A small geometry for the self-test (and nothing else).
TINY = dict(HYPER, d_model=24, d_mlp=40, attn_heads=2, m_H=2, m_P=4, m_N=3, m_G=1, g_HK=1, g_HV=2, g_K=4, g_V=3)

# The first model (transformers mixers, 256-byte context; data/README.md) for the decay-spectrum comparison:
# memory per head = 1 / median per-step log-decay, in bytes.
OLD_SPECTRUM = {"0": dict(kind="mamba2", memory=[6, 71, 106, 15]), "1": dict(kind="gdn", memory=[0.04, 0.07, 0.05, 0.04]),
                "3": dict(kind="mamba2", memory=[9, 29, 9, 3]), "4": dict(kind="gdn", memory=[0.11, 0.06, 0.10, 1.2]),
                "median_gdn_alpha": [1e-9, 4e-4], "val_bits_per_byte_256": 2.38}


def read_bytes(path):
    if os.path.isdir(path):
        files = sorted(f for f in glob.glob(os.path.join(path, "*")) if os.path.isfile(f) and "." not in os.path.basename(f))
        if not files:
            raise SystemExit(f"corpus {path}: no extension-less files")
        return b"".join(open(f, "rb").read() for f in files), [os.path.basename(f) for f in files]
    opener = lzma.open if path.endswith(".xz") else gzip.open if path.endswith((".gz", ".dz")) else open
    with opener(path, "rb") as f:
        return f.read(), [os.path.basename(path)]


# ----------------------------------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------------------------------

def mamba2_scan(x, delta, A, B, C, chunk, sequential=False):
    """x [b,T,H,P], delta [b,T,H], A [H] (< 0), B, C [b,T,G,N] -> y [b,T,H,P] = S_t·C_t from a zero state, where
    S_t = exp(A·Δ_t)·S_{t-1} + Δ_t·x_t⊗B_t. Chunked (exact in exact arithmetic): within a chunk the outputs are a
    masked decay-weighted product, the state passes between chunks in a loop."""
    import torch
    b, T, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    Bh = B.repeat_interleave(H // G, dim=2)
    Ch = C.repeat_interleave(H // G, dim=2)
    la = delta * A  # per-step log-decay, <= 0
    if sequential:
        S = x.new_zeros(b, H, P, N)
        ys = []
        for t in range(T):
            S = torch.exp(la[:, t])[:, :, None, None] * S + (delta[:, t, :, None, None] * x[:, t, :, :, None]
                                                              * Bh[:, t, :, None, :])
            ys.append(torch.einsum("bhpn,bhn->bhp", S, Ch[:, t]))
        return torch.stack(ys, 1)
    Q = chunk
    pad = (-T) % Q
    if pad:
        # padded steps carry Δ = 0 and x = 0: they neither decay nor write
        x, delta, la = (torch.nn.functional.pad(t, (0, 0) * (t.dim() - 2) + (0, pad)) for t in (x, delta, la))
        Bh, Ch = (torch.nn.functional.pad(t, (0, 0, 0, 0, 0, pad)) for t in (Bh, Ch))
    nc = (T + pad) // Q
    xs = x.view(b, nc, Q, H, P)
    ds = delta.view(b, nc, Q, H)
    Bs = Bh.view(b, nc, Q, H, N)
    Cs = Ch.view(b, nc, Q, H, N)
    L = torch.cumsum(la.view(b, nc, Q, H), dim=2)
    seg = L[:, :, :, None, :] - L[:, :, None, :, :]  # [b,nc,t,j,H] = L_t - L_j
    causal = torch.ones(Q, Q, dtype=torch.bool, device=x.device).tril()
    dec = torch.exp(torch.where(causal[None, None, :, :, None], seg, torch.full_like(seg, -math.inf)))
    CB = torch.einsum("bcthn,bcjhn->bctjh", Cs, Bs)
    y = torch.einsum("bctjh,bcjhp->bcthp", dec * CB * ds[:, :, None, :, :], xs)
    S = x.new_zeros(b, H, P, N)
    inter = []
    for c in range(nc):
        inter.append(torch.exp(L[:, c])[..., None] * torch.einsum("bthn,bhpn->bthp", Cs[:, c], S))
        w = torch.exp(L[:, c, -1:, :] - L[:, c]) * ds[:, c]  # [b,Q,H]
        S = torch.exp(L[:, c, -1])[:, :, None, None] * S + torch.einsum("bjh,bjhp,bjhn->bhpn", w, xs[:, c], Bs[:, c])
    y = y + torch.stack(inter, 1)
    return y.reshape(b, nc * Q, H, P)[:, :T]


def gdn_scan(q, k, v, g, beta, chunk, sequential=False):
    """q, k [b,T,H,K] (normalised, per value head), v [b,T,H,V], g, beta [b,T,H] -> o [b,T,H,V] from a zero state:
    S <- exp(g)·S; u = β·(v - S·k); S <- S + u⊗k; o = S·q (S [V,K]). Chunked: within a chunk the corrected updates
    u solve the unit lower-triangular system (I + A)·U = β·V - diag(β·e^G)·K·S0ᵀ with A_tj = β_t·e^{G_t-G_j}·k_t·k_j
    (j < t), G the in-chunk cumulative log-gate; S0 passes between chunks in a loop."""
    import torch
    b, T, H, K = k.shape
    V = v.shape[-1]
    if sequential:
        S = v.new_zeros(b, H, V, K)
        os_ = []
        for t in range(T):
            S = torch.exp(g[:, t])[:, :, None, None] * S
            u = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhvk,bhk->bhv", S, k[:, t]))
            S = S + u[..., None] * k[:, t, :, None, :]
            os_.append(torch.einsum("bhvk,bhk->bhv", S, q[:, t]))
        return torch.stack(os_, 1)
    Q = chunk
    pad = (-T) % Q
    if pad:
        q, k, v = (torch.nn.functional.pad(t, (0, 0, 0, 0, 0, pad)) for t in (q, k, v))
        g, beta = (torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in (g, beta))
    nc = (T + pad) // Q
    # [b,H,nc,Q,...]
    qs = q.view(b, nc, Q, H, K).permute(0, 3, 1, 2, 4)
    ks = k.view(b, nc, Q, H, K).permute(0, 3, 1, 2, 4)
    vs = v.view(b, nc, Q, H, V).permute(0, 3, 1, 2, 4)
    bs = beta.view(b, nc, Q, H).permute(0, 3, 1, 2)
    Gc = torch.cumsum(g.view(b, nc, Q, H).permute(0, 3, 1, 2), dim=-1)
    seg = Gc[..., :, None] - Gc[..., None, :]  # [b,H,nc,t,j]
    le = torch.ones(Q, Q, dtype=torch.bool, device=k.device).tril()
    lt = torch.ones(Q, Q, dtype=torch.bool, device=k.device).tril(-1)
    dec = torch.exp(torch.where(le, seg, torch.full_like(seg, -math.inf)))
    KK = ks @ ks.transpose(-1, -2)
    Amat = torch.where(lt, bs[..., :, None] * dec * KK, torch.zeros_like(KK))
    M = Amat + torch.eye(Q, dtype=k.dtype, device=k.device)
    U0 = torch.linalg.solve_triangular(M, bs[..., None] * vs, upper=False, unitriangular=True)
    Wk = torch.linalg.solve_triangular(M, (bs * torch.exp(Gc))[..., None] * ks, upper=False, unitriangular=True)
    QK = torch.where(le, dec * (qs @ ks.transpose(-1, -2)), torch.zeros_like(KK))
    S = v.new_zeros(b, H, V, K)
    outs = []
    for c in range(nc):
        U = U0[:, :, c] - Wk[:, :, c] @ S.transpose(-1, -2)  # [b,H,Q,V]
        o = torch.exp(Gc[:, :, c])[..., None] * (qs[:, :, c] @ S.transpose(-1, -2)) + QK[:, :, c] @ U
        outs.append(o)
        w = torch.exp(Gc[:, :, c, -1:] - Gc[:, :, c])  # [b,H,Q]
        S = torch.exp(Gc[:, :, c, -1])[..., None, None] * S + torch.einsum("bhj,bhjv,bhjk->bhvk", w, U, ks[:, :, c])
    o = torch.stack(outs, 2)  # [b,H,nc,Q,V]
    return o.permute(0, 2, 3, 1, 4).reshape(b, nc * Q, H, V)[:, :T]


def build_model(torch, hp):
    import torch.nn as nn
    import torch.nn.functional as F

    def causal_conv(conv, u):  # u [b,T,C] -> [b,T,C]
        T = u.shape[1]
        return conv(u.transpose(1, 2))[..., :T].transpose(1, 2)

    class Mamba2Mixer(nn.Module):
        def __init__(self):
            super().__init__()
            H, P, N, G = hp["m_H"], hp["m_P"], hp["m_N"], hp["m_G"]
            self.H, self.P, self.N, self.G = H, P, N, G
            self.I = H * P
            self.conv_dim = self.I + 2 * G * N
            self.in_proj = nn.Linear(hp["d_model"], self.I + self.conv_dim + H, bias=False)
            self.conv = nn.Conv1d(self.conv_dim, self.conv_dim, hp["m_conv"], groups=self.conv_dim,
                                  padding=hp["m_conv"] - 1, bias=True)
            self.A_log = nn.Parameter(torch.zeros(H))
            self.D = nn.Parameter(torch.ones(H))
            self.dt_bias = nn.Parameter(torch.zeros(H))
            self.norm_weight = nn.Parameter(torch.ones(self.I))
            self.out_proj = nn.Linear(self.I, hp["d_model"], bias=False)
            self.record = None

        def forward(self, u, chunk=64, sequential=False):
            b, T, _ = u.shape
            H, P, N, G, I = self.H, self.P, self.N, self.G, self.I
            z, xBC, dt = self.in_proj(u).split([I, self.conv_dim, H], dim=-1)
            xBC = F.silu(causal_conv(self.conv, xBC))
            x, B, C = xBC.split([I, G * N, G * N], dim=-1)
            x, B, C = x.reshape(b, T, H, P), B.reshape(b, T, G, N), C.reshape(b, T, G, N)
            delta = F.softplus(dt + self.dt_bias)
            A = -torch.exp(self.A_log)
            y = mamba2_scan(x, delta, A, B, C, chunk, sequential) + x * self.D[:, None]
            if self.record is not None:
                self.record.update(x=x, dt=dt, B=B, C=C, z=z.reshape(b, T, H, P), r=-A * delta,
                                   y=(y.reshape(b, T, I) * F.silu(z)))
            y = (y.reshape(b, T, I) * F.silu(z)).view(b, T, G, I // G)
            y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + hp["m_norm_eps"])
            return self.out_proj(y.reshape(b, T, I) * self.norm_weight)

    class GatedDeltaNet(nn.Module):
        def __init__(self):
            super().__init__()
            HK, HV, K, V = hp["g_HK"], hp["g_HV"], hp["g_K"], hp["g_V"]
            self.HK, self.HV, self.K, self.V = HK, HV, K, V
            self.conv_dim = 2 * HK * K + HV * V
            self.in_proj = nn.Linear(hp["d_model"], self.conv_dim + HV * V + 2 * HV, bias=False)
            self.conv = nn.Conv1d(self.conv_dim, self.conv_dim, hp["g_conv"], groups=self.conv_dim,
                                  padding=hp["g_conv"] - 1, bias=False)
            self.A_log = nn.Parameter(torch.zeros(HV))
            self.dt_bias = nn.Parameter(torch.zeros(HV))
            self.norm_weight = nn.Parameter(torch.ones(V))
            self.out_proj = nn.Linear(HV * V, hp["d_model"], bias=False)
            self.record = None

        def forward(self, u, chunk=64, sequential=False):
            b, T, _ = u.shape
            HK, HV, K, V = self.HK, self.HV, self.K, self.V
            qkv, z, bb, a = self.in_proj(u).split([self.conv_dim, HV * V, HV, HV], dim=-1)
            qkv = F.silu(causal_conv(self.conv, qkv))
            q, k, v = qkv.split([HK * K, HK * K, HV * V], dim=-1)
            q, k, v = q.reshape(b, T, HK, K), k.reshape(b, T, HK, K), v.reshape(b, T, HV, V)
            eps = hp["g_l2_eps"]
            qn = q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + eps) * K ** -0.5
            kn = k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + eps)
            rep = HV // HK
            qn, kn = qn.repeat_interleave(rep, dim=2), kn.repeat_interleave(rep, dim=2)
            beta = torch.sigmoid(bb)
            g = -torch.exp(self.A_log) * F.softplus(a + self.dt_bias)
            o = gdn_scan(qn, kn, v, g, beta, chunk, sequential)
            if self.record is not None:
                self.record.update(q=q, k=k, v=v, a=a, b=bb, r=-g, y=o.reshape(b, T, HV * V))
            o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + hp["g_norm_eps"]) * self.norm_weight
            o = o * F.silu(z.reshape(b, T, HV, V))
            return self.out_proj(o.reshape(b, T, HV * V))

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            d = hp["d_model"]
            self.h = hp["attn_heads"]
            self.qkv = nn.Linear(d, 3 * d, bias=False)
            self.o = nn.Linear(d, d, bias=False)

        def forward(self, x, chunk=64, sequential=False):
            b, s, d = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o(y.transpose(1, 2).reshape(b, s, d))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(hp["d_model"], 2 * hp["d_mlp"], bias=False)  # rows: gate [d_mlp], value [d_mlp]
            self.down = nn.Linear(hp["d_mlp"], hp["d_model"], bias=False)

        def forward(self, x):
            a, b = self.up(x).chunk(2, dim=-1)
            return self.down(F.silu(a) * b)

    class Block(nn.Module):
        def __init__(self, kind):
            super().__init__()
            self.kind = kind
            self.n1 = nn.RMSNorm(hp["d_model"], eps=hp["norm_eps"])
            self.n2 = nn.RMSNorm(hp["d_model"], eps=hp["norm_eps"])
            self.mixer = {"M": Mamba2Mixer, "G": GatedDeltaNet, "A": Attention}[kind]()
            self.mlp = MLP()

        def forward(self, x, chunk=64, sequential=False):
            x = x + self.mixer(self.n1(x), chunk, sequential)
            return x + self.mlp(self.n2(x))

    class TinyHybrid(nn.Module):
        def __init__(self):
            super().__init__()
            self.hp = dict(hp)
            self.emb = nn.Embedding(hp["vocab"], hp["d_model"])
            self.blocks = nn.ModuleList([Block(k) for k in hp["layout"]])
            self.norm = nn.RMSNorm(hp["d_model"], eps=hp["norm_eps"])
            self.head = nn.Linear(hp["d_model"], hp["vocab"], bias=False)

        def forward(self, ids, chunk=64, sequential=False):
            x = self.emb(ids)
            for b in self.blocks:
                x = b(x, chunk, sequential)
            return self.head(self.norm(x))

    return TinyHybrid()


def inv_softplus(torch, d):
    return d + torch.log(-torch.expm1(-d))


def init_ssm_params(model, torch, slow_share=0.5):
    """Half the heads of every SSM layer slow: per-step log-decay r = exp(A_log)·Δ in [5e-5, 1e-3] (A in [0.5, 1],
    Δ log-uniform in [1e-4, 1e-3]); the rest with Mamba-2's ranges (A = U(1, 16), Δ log-uniform in [1e-3, 1e-1]).
    GDN gates the same way (its softplus(a + dt_bias) plays Δ), D = 1, norms 1; drawn from the global seed.
    The first model started its GDNs at Qwen3-Next's A = U(0, 16), dt_bias = 1 (r ~ 1-16 per byte) and training
    kept them there: median α 1e-9."""
    def draw(n):
        n_slow = int(round(n * slow_share))
        A = torch.cat([torch.empty(n_slow).uniform_(0.5, 1.0), torch.empty(n - n_slow).uniform_(1.0, 16.0)])
        lo = torch.tensor([math.log(1e-4)] * n_slow + [math.log(1e-3)] * (n - n_slow))
        hi = torch.tensor([math.log(1e-3)] * n_slow + [math.log(1e-1)] * (n - n_slow))
        dt = torch.exp(lo + torch.rand(n) * (hi - lo))
        return torch.log(A), inv_softplus(torch, dt)

    with torch.no_grad():
        for b in model.blocks:
            m = b.mixer
            if b.kind == "M":
                A_log, dtb = draw(m.H)
                m.A_log.copy_(A_log)
                m.dt_bias.copy_(dtb)
                m.D.fill_(1.0)
            elif b.kind == "G":
                A_log, dtb = draw(m.HV)
                m.A_log.copy_(A_log)
                m.dt_bias.copy_(dtb)


# ----------------------------------------------------------------------------------------------------------------
# Weights file (docs/model_format.md)
# ----------------------------------------------------------------------------------------------------------------

def layer_tensors(block):
    """(dataset name, tensor) of one block, in the names and row orders of docs/model_format.md."""
    m = block.mixer
    out = [("norm1", block.n1.weight), ("norm2", block.n2.weight),
           ("mlp_up", block.mlp.up.weight), ("mlp_down", block.mlp.down.weight)]
    if block.kind == "M":
        out += [("in_proj", m.in_proj.weight), ("conv_weight", m.conv.weight[:, 0, :]), ("conv_bias", m.conv.bias),
                ("A_log", m.A_log), ("D", m.D), ("dt_bias", m.dt_bias), ("norm_weight", m.norm_weight),
                ("out_proj", m.out_proj.weight)]
    elif block.kind == "G":
        out += [("in_proj", m.in_proj.weight), ("conv_weight", m.conv.weight[:, 0, :]), ("A_log", m.A_log),
                ("dt_bias", m.dt_bias), ("norm_weight", m.norm_weight), ("out_proj", m.out_proj.weight)]
    else:
        out += [("qkv", m.qkv.weight), ("o", m.o.weight)]
    return out


KIND_NAMES = {"M": "mamba2", "G": "gdn", "A": "attention"}
# Vectors that set the decay spectrum and the norms stay fp32 in the file: they are tiny and a rounded A_log or
# dt_bias would move every head's memory.
FP32_ALWAYS = ("A_log", "D", "dt_bias", "norm1", "norm2", "norm_weight", "final_norm", "conv_bias")


def export_weights(model, path, storage="fp16", meta=None):
    import h5py
    import numpy as np
    hp = model.hp
    sdt = {"fp16": np.float16, "fp32": np.float32}[storage]
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        f.attrs["format"] = "replayssm-lm"
        f.attrs["version"] = 1
        f.attrs["storage"] = storage
        for k, v in hp.items():
            f.attrs[k] = v
        for k, v in (meta or {}).items():
            f.attrs[k] = v if isinstance(v, (int, float, str)) else json.dumps(v)

        def put(grp, name, t):
            a = t.detach().double().cpu().numpy()
            a = a.astype(np.float32 if (name in FP32_ALWAYS or a.ndim < 2) else sdt)
            if a.ndim == 2 and a.size > 4096:
                grp.create_dataset(name, data=a, compression="gzip", compression_opts=4, shuffle=True)
            else:
                grp.create_dataset(name, data=a)

        put(f, "embedding", model.emb.weight)
        put(f, "final_norm", model.norm.weight)
        put(f, "head", model.head.weight)
        lg = f.create_group("layers")
        for i, b in enumerate(model.blocks):
            g = lg.create_group(f"{i:02d}")
            g.attrs["kind"] = KIND_NAMES[b.kind]
            for name, t in layer_tensors(b):
                put(g, name, t)
    os.replace(tmp, path)


def load_weights(torch, path, dtype=None):
    """A model holding exactly the (rounded) weights of an exported file, in `dtype` (fp64 for fixtures)."""
    import h5py
    with h5py.File(path, "r") as f:
        hp = {k: (f.attrs[k].item() if hasattr(f.attrs[k], "item") else f.attrs[k]) for k in HYPER}
        hp["layout"] = str(hp["layout"])
        model = build_model(torch, hp)
        if dtype is not None:
            model = model.to(dtype)
        with torch.no_grad():
            def get(g, name, t):
                a = torch.from_numpy(g[name][...].astype("float64")).to(t.dtype)
                t.copy_(a.view(t.shape))
            get(f, "embedding", model.emb.weight)
            get(f, "final_norm", model.norm.weight)
            get(f, "head", model.head.weight)
            for i, b in enumerate(model.blocks):
                for name, t in layer_tensors(b):
                    get(f[f"layers/{i:02d}"], name, t)
    return model


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for blk in iter(lambda: f.read(1 << 20), b""):
            h.update(blk)
    return h.hexdigest()


def write_fixture(torch, weights, text, steps, path, device="cpu"):
    """fp64 next-byte logits of the exported model over the first `steps` bytes of `text` (one sequence)."""
    import h5py
    import numpy as np
    model = load_weights(torch, weights, torch.float64).to(device).eval()
    ids = torch.tensor(np.frombuffer(text[:steps], dtype=np.uint8).astype(np.int64))[None].to(device)
    with torch.no_grad():
        logits = model(ids, chunk=64).double()[0].cpu().numpy()
        seq = model(ids[:, :min(steps, 96)], sequential=True).double()[0].cpu().numpy()
    chunk_vs_seq = float(np.abs(logits[:seq.shape[0]] - seq).max() / np.abs(seq).max())
    lp = logits - logits.max(-1, keepdims=True)
    lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
    nll = -lp[np.arange(steps - 1), ids[0, 1:].cpu().numpy()]
    with h5py.File(path + ".tmp", "w") as f:
        f.attrs["format"] = "replayssm-lm-fixture"
        f.attrs["source"] = "torch fp64 forward of scripts/train_tiny_hybrid.py over the weights file (chunked scans)"
        f.attrs["weights_sha256"] = sha256(weights)
        f.attrs["weights_file"] = os.path.basename(weights)
        f.attrs["torch"] = str(torch.__version__)
        f.attrs["chunked_vs_sequential_rel"] = chunk_vs_seq
        f.attrs["bits_per_byte"] = float(nll.mean() / math.log(2))
        f.create_dataset("tokens", data=np.frombuffer(text[:steps], dtype=np.uint8).astype(np.int32))
        f.create_dataset("logits", data=logits.astype(np.float32), compression="gzip", shuffle=True)
    os.replace(path + ".tmp", path)
    return dict(steps=steps, chunked_vs_sequential_rel=chunk_vs_seq, bits_per_byte=float(nll.mean() / math.log(2)))


# ----------------------------------------------------------------------------------------------------------------
# Decay spectrum and traces
# ----------------------------------------------------------------------------------------------------------------

def record_forward(torch, model, ids):
    """One teacher-forced forward with every SSM mixer recording its step inputs (and r, the per-step log-decay)."""
    recs = {}
    for i, b in enumerate(model.blocks):
        if b.kind in "MG":
            b.mixer.record = recs.setdefault(i, {})
    try:
        with torch.no_grad():
            logits = model(ids)
    finally:
        for b in model.blocks:
            if b.kind in "MG":
                b.mixer.record = None
    return logits, recs


def decay_spectrum(recs, model):
    import numpy as np
    out = {}
    slow = 0
    for i, rec in recs.items():
        r = rec["r"].double().cpu().numpy().reshape(-1, rec["r"].shape[-1])  # [tokens, heads]
        med = np.median(r, axis=0)
        mem = (1.0 / np.maximum(med, 1e-300)).tolist()
        alpha = np.exp(-r)
        row = dict(kind=KIND_NAMES[model.blocks[i].kind], median_r=med.tolist(), memory=mem,
                   alpha_p1_p50_p99=[float(np.percentile(alpha, p)) for p in (1, 50, 99)],
                   median_alpha_per_head=np.exp(-med).tolist(), heads_over_1000=int((np.array(mem) > 1000).sum()))
        slow += row["heads_over_1000"]
        out[str(i)] = row
    out["heads_over_1000_total"] = slow
    out["old_model"] = OLD_SPECTRUM
    return out


def spectrum_markdown(spec):
    lines = ["| layer | kind | memory per head (bytes) | median α or a per head | heads > 1000 | old model's memory |",
             "|---|---|---|---|---|---|"]
    for k, row in spec.items():
        if not k.isdigit():
            continue
        old = spec["old_model"].get(k, {}).get("memory", [])
        lines.append(f"| {k} | {row['kind']} | {', '.join(f'{m:.3g}' for m in row['memory'])} | "
                     f"{', '.join(f'{a:.4g}' for a in row['median_alpha_per_head'])} | {row['heads_over_1000']} | "
                     f"{', '.join(f'{m:.3g}' for m in old)} |")
    return "\n".join(lines) + "\n"


def write_traces(recs, model, out_dir, storage, description):
    from analysis.record.trace_writer import write_trace
    import numpy as np
    hp = model.hp
    paths = []
    for i, rec in recs.items():
        kind = model.blocks[i].kind
        m = model.blocks[i].mixer
        arr = lambda t: t.float().cpu().numpy().transpose(1, 0, *range(2, t.dim()))  # [b,T,...] -> [T,b,...]
        if kind == "M":
            geo = dict(H=hp["m_H"], P=hp["m_P"], N=hp["m_N"], G=hp["m_G"])
            params = dict(A_log=m.A_log.detach().double().cpu().numpy(), D=m.D.detach().double().cpu().numpy(),
                          dt_bias=m.dt_bias.detach().double().cpu().numpy())
            inputs = {n: arr(rec[n]) for n in ("x", "dt", "B", "C", "z")}
            fam, extra = "mamba2", {}
        else:
            geo = dict(HK=hp["g_HK"], HV=hp["g_HV"], K=hp["g_K"], V=hp["g_V"])
            params = dict(A_log=m.A_log.detach().double().cpu().numpy(), dt_bias=m.dt_bias.detach().double().cpu().numpy())
            inputs = {n: arr(rec[n]) for n in ("q", "k", "v", "a", "b")}
            fam, extra = "gdn", {"eps": hp["g_l2_eps"]}
        p = os.path.join(out_dir, f"tiny_hybrid_layer{i:02d}_{fam}.h5")
        write_trace(p, fam, geo, params, inputs, storage=storage, description=description, extra_attrs=extra)
        paths.append(p)
    return paths


# ----------------------------------------------------------------------------------------------------------------
# Modes
# ----------------------------------------------------------------------------------------------------------------

def selftest(_a):
    """The chunked scans against the step-by-step recurrences (fp64, CPU), and an export/load round trip."""
    import tempfile
    import torch
    torch.manual_seed(0)
    model = build_model(torch, TINY).double()
    init_ssm_params(model, torch)
    with torch.no_grad():
        for b in model.blocks:  # some fast, some near-1 gates, some large β, so the triangular solve is exercised
            if b.kind == "G":
                b.mixer.dt_bias.copy_(torch.tensor([-6.0, 2.0]))
    ids = torch.randint(0, 256, (2, 77))
    with torch.no_grad():
        a = model(ids, chunk=16)
        s = model(ids, sequential=True)
    rel = float((a - s).abs().max() / s.abs().max())
    print(f"selftest: chunked vs sequential logits, max rel diff {rel:.3e}")
    assert rel < 1e-10, rel
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "w.h5")
        export_weights(model, p, storage="fp32")
        m2 = load_weights(torch, p, torch.float64)
        with torch.no_grad():
            r2 = float((m2(ids) - model.float().double()(ids)).abs().max())
        print(f"selftest: export/load round trip (fp32 storage), max abs diff {r2:.3e}")
        assert r2 < 1e-4, r2
    print("selftest: ok")


def train(a):
    import numpy as np
    import torch
    import torch.nn.functional as F

    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    fort, files = read_bytes(a.corpus)
    n_val = len(fort) // 20
    extra_bytes, extra_names = b"", []
    for p in a.extra:
        d, n = read_bytes(p)
        extra_bytes += b"\n" + d
        extra_names += n
    train_bytes = fort[:-n_val] + extra_bytes
    val_bytes = fort[-n_val:]
    train_t = torch.tensor(np.frombuffer(train_bytes, dtype=np.uint8).astype(np.int64))
    val_t = torch.tensor(np.frombuffer(val_bytes, dtype=np.uint8).astype(np.int64))
    print(f"corpus: fortunes {len(files)} files {len(fort)} bytes (held out {n_val}), extra {extra_names} "
          f"{len(extra_bytes)} bytes; training text {len(train_bytes)} bytes", flush=True)

    model = build_model(torch, HYPER)
    init_ssm_params(model, torch, a.slow_share)
    model = model.to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"model: layout {HYPER['layout']}, {nparams / 1e6:.2f}M parameters, device {dev}", flush=True)
    decay, no_decay, ssm = [], [], []
    for n, p in model.named_parameters():
        if n.endswith(("A_log", "dt_bias")):
            ssm.append(p)
        elif p.ndim < 2 or n.endswith(".D"):
            no_decay.append(p)
        else:
            decay.append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1, "scale": 1.0},
                             {"params": no_decay, "weight_decay": 0.0, "scale": 1.0},
                             {"params": ssm, "weight_decay": 0.0, "scale": a.ssm_lr_scale}],
                            lr=a.lr, betas=(0.9, 0.95))

    def lr_at(p):  # p: progress in [0, 1]
        warm = 0.05
        if p < warm:
            return a.lr * (p + 1e-3) / warm
        return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, (p - warm) / (1 - warm)))))

    gen = torch.Generator().manual_seed(a.seed)

    def windows(src, starts, L):
        idx = starts[:, None] + torch.arange(L + 1)[None]
        t = src[idx].to(dev)
        return t[:, :-1], t[:, 1:]

    # Held-out protocols: 64 windows of 256 bytes drawn exactly as the first model's script drew them (its numbers
    # compare), and 32 windows of the training context.
    v256 = torch.randint(0, len(val_t) - 256 - 1, (64,), generator=torch.Generator().manual_seed(a.seed + 1))
    vctx = torch.randint(0, len(val_t) - a.seq - 1, (32,), generator=torch.Generator().manual_seed(a.seed + 2))

    def evaluate(starts, L, bs):
        model.eval()
        tot = 0.0
        with torch.no_grad():
            for i in range(0, len(starts), bs):
                x, y = windows(val_t, starts[i:i + bs], L)
                tot += F.cross_entropy(model(x).float().reshape(-1, 256), y.reshape(-1)).item() * len(x)
        model.train()
        return tot / len(starts)

    curve = []
    t0 = time.time()
    budget = a.max_minutes * 60
    step = 0
    stop_reason = "steps"
    while True:
        prog = max(step / a.steps, (time.time() - t0) / budget)
        if prog >= 1.0:
            stop_reason = "steps" if step >= a.steps else "max-minutes"
            break
        starts = torch.randint(0, len(train_t) - a.seq - 1, (a.batch,), generator=gen)
        x, y = windows(train_t, starts, a.seq)
        lr = lr_at(prog)
        for g in opt.param_groups:
            g["lr"] = lr * g["scale"]
        loss = F.cross_entropy(model(x).float().reshape(-1, 256), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 25 == 0:
            row = dict(step=step, train_loss=loss.item(), lr=lr, seconds=time.time() - t0)
            if step % 250 == 0:
                row["val_loss_256"] = evaluate(v256, 256, 16)
            curve.append(row)
            print(json.dumps(row), flush=True)
        step += 1
    train_s = time.time() - t0
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    final256 = evaluate(v256, 256, 16)
    finalctx = evaluate(vctx, a.seq, 8)
    curve.append(dict(step=step, train_loss=loss.item(), lr=lr, seconds=train_s, val_loss_256=final256,
                      val_loss_ctx=finalctx))
    print(f"trained {step} steps in {train_s:.0f} s ({stop_reason}); held-out {final256 / math.log(2):.4f} bits/byte "
          f"(256-byte windows), {finalctx / math.log(2):.4f} ({a.seq}-byte windows)", flush=True)
    with open(os.path.join(a.out, "loss.csv"), "w") as f:
        f.write("step,train_loss,val_loss_256,lr,seconds\n")
        for r in curve:
            f.write(f"{r['step']},{r['train_loss']:.5f},{r.get('val_loss_256', '')},{r['lr']:.6g},{r['seconds']:.2f}\n")
    summary = dict(params=nparams, hyper=HYPER, steps_run=step, steps_planned=a.steps, stop_reason=stop_reason,
                   batch=a.batch, seq=a.seq, lr=a.lr, ssm_lr_scale=a.ssm_lr_scale, slow_share=a.slow_share,
                   seed=a.seed, train_seconds=train_s,
                   final_val_loss_nats_per_byte_256=final256, final_val_bits_per_byte_256=final256 / math.log(2),
                   final_val_bits_per_byte_ctx=finalctx / math.log(2),
                   old_model_val_bits_per_byte_256=OLD_SPECTRUM["val_bits_per_byte_256"],
                   corpus_bytes=len(fort), corpus_files=files, extra_files=extra_names, extra_bytes=len(extra_bytes),
                   torch=str(torch.__version__), device=torch.cuda.get_device_name() if dev == "cuda" else "cpu")

    # Weights first: everything after this reads the exported (rounded) file.
    wpath = os.path.join(a.out, "lm_weights.h5")
    meta = dict(description=f"tiny byte-level hybrid LM ({HYPER['layout']}, {nparams} params, seed {a.seed}, {step} "
                            f"steps of {a.batch}x{a.seq} bytes on Debian fortunes + {', '.join(extra_names)})",
                val_bits_per_byte_256=final256 / math.log(2))
    export_weights(model.cpu(), wpath, a.storage, meta)
    summary["weights_sha256"] = sha256(wpath)
    summary["weights_bytes"] = os.path.getsize(wpath)
    with open(os.path.join(a.out, "train_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)

    # Held-out sample for the C++ experiment, and the fixture of fp64 logits over its start.
    sample = val_bytes[:a.sample_bytes]
    with open(os.path.join(a.out, "heldout.txt"), "wb") as f:
        f.write(sample)
    summary["fixture"] = write_fixture(torch, wpath, sample, a.fixture_steps, os.path.join(a.out, "lm_fixture.h5"),
                                       device=dev)
    print("fixture:", summary["fixture"], flush=True)

    # Decay spectrum and traces of the exported model (fp32), teacher-forced on held-out text.
    rmodel = load_weights(torch, wpath, torch.float32).to(dev).eval()
    L = a.trace_steps
    stride = (len(val_t) - L) // max(1, a.trace_seqs)
    ids = torch.stack([val_t[i * stride: i * stride + L] for i in range(a.trace_seqs)]).to(dev)
    logits, recs = record_forward(torch, rmodel, ids)
    summary["trace_loss_nats_per_byte"] = F.cross_entropy(logits[:, :-1].float().reshape(-1, 256),
                                                          ids[:, 1:].reshape(-1)).item()
    spec = decay_spectrum(recs, rmodel)
    summary["decay_spectrum"] = spec
    with open(os.path.join(a.out, "decay_spectrum.json"), "w") as f:
        json.dump(spec, f, indent=1)
    with open(os.path.join(a.out, "decay_spectrum.md"), "w") as f:
        f.write(spectrum_markdown(spec))
    print(spectrum_markdown(spec), flush=True)
    if a.trace_steps > 0:
        try:
            paths = write_traces(recs, rmodel, a.out, "bf16",
                                 f"{meta['description']}, teacher-forced on held-out fortunes text")
            summary["traces"] = {os.path.basename(p): os.path.getsize(p) for p in paths}
        except Exception as e:  # traces are a by-product: never lose the weights and the fixture for them
            summary["traces_error"] = repr(e)
            print("traces failed:", repr(e), flush=True)
    with open(os.path.join(a.out, "train_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k != "decay_spectrum"}, indent=1), flush=True)


def fixture(a):
    import torch
    text, _ = read_bytes(a.text)
    print(write_fixture(torch, a.weights, text, a.steps, a.out))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    sub.add_parser("selftest")
    t = sub.add_parser("train")
    t.add_argument("--corpus", required=True, help="fortunes directory or file (its last 5%% is held out)")
    t.add_argument("--extra", nargs="*", default=[], help="training-only text files (.xz/.gz read transparently)")
    t.add_argument("--out", required=True)
    t.add_argument("--steps", type=int, default=4000)
    t.add_argument("--max-minutes", type=float, default=5.0, help="stops training (the schedule anneals by time)")
    t.add_argument("--batch", type=int, default=16)
    t.add_argument("--seq", type=int, default=1024)
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--ssm-lr-scale", type=float, default=0.25, help="learning-rate factor of A_log and dt_bias")
    t.add_argument("--slow-share", type=float, default=0.5, help="share of SSM heads initialised slow")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--storage", default="fp16", choices=["fp16", "fp32"], help="matrices in the weights file")
    t.add_argument("--sample-bytes", type=int, default=65536, help="held-out text shipped for the C++ experiment")
    t.add_argument("--fixture-steps", type=int, default=256)
    t.add_argument("--trace-seqs", type=int, default=2)
    t.add_argument("--trace-steps", type=int, default=2048, help="0: no traces")
    fx = sub.add_parser("fixture")
    fx.add_argument("--weights", required=True)
    fx.add_argument("--text", required=True)
    fx.add_argument("--steps", type=int, default=256)
    fx.add_argument("--out", required=True)
    a = ap.parse_args()
    {"selftest": selftest, "train": train, "fixture": fixture}[a.mode](a)


if __name__ == "__main__":
    main()
