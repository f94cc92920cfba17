"""The tiny hybrid language model's weights file (docs/model_format.md) and its fp64 decode forward, in numpy alone.

A second, independent reading of the model that scripts/train_tiny_hybrid.py defines in torch: one step at a time,
as the C++ forward (lib/lm/) decodes, so the two can be checked against each other where torch is absent.
Not fast: a few hundred steps of the shipped model take about a second a step... of the tiny test models, milliseconds.

    python3 -m analysis.lm_model random OUT.h5 [--size tiny|small] [--seed 0]   # random weights, same format
    python3 -m analysis.lm_model logits WEIGHTS.h5 TEXT --steps N --out FIXTURE.h5 # fp64 logits fixture
"""
from __future__ import annotations

import argparse
import hashlib
import math
import os

import numpy as np

HYPER_KEYS = ("layout", "vocab", "d_model", "d_mlp", "norm_eps", "attn_heads", "m_H", "m_P", "m_N", "m_G", "m_conv",
              "m_norm_eps", "g_HK", "g_HV", "g_K", "g_V", "g_conv", "g_norm_eps", "g_l2_eps")
SIZES = {
    # Test models: every hyper-parameter differs from its neighbours so a transposed shape cannot pass unnoticed.
    "tiny": dict(layout="MGAMG", vocab=256, d_model=24, d_mlp=40, norm_eps=1e-5, attn_heads=2,
                 m_H=4, m_P=3, m_N=5, m_G=2, m_conv=4, m_norm_eps=1e-5,
                 g_HK=1, g_HV=2, g_K=6, g_V=7, g_conv=3, g_norm_eps=1e-6, g_l2_eps=1e-6),
    "small": dict(layout="MGAMG", vocab=256, d_model=64, d_mlp=96, norm_eps=1e-5, attn_heads=4,
                  m_H=4, m_P=8, m_N=8, m_G=1, m_conv=4, m_norm_eps=1e-5,
                  g_HK=2, g_HV=4, g_K=8, g_V=8, g_conv=4, g_norm_eps=1e-6, g_l2_eps=1e-6),
}
KINDS = {"M": "mamba2", "G": "gdn", "A": "attention"}
FP32_ALWAYS = ("A_log", "D", "dt_bias", "norm1", "norm2", "norm_weight", "final_norm", "conv_bias")


def layer_shapes(hp, kind):
    d, f = hp["d_model"], hp["d_mlp"]
    s = dict(norm1=(d,), norm2=(d,), mlp_up=(2 * f, d), mlp_down=(d, f))
    if kind == "M":
        H, P, N, G = hp["m_H"], hp["m_P"], hp["m_N"], hp["m_G"]
        I, cd = H * P, H * P + 2 * G * N
        s.update(in_proj=(I + cd + H, d), conv_weight=(cd, hp["m_conv"]), conv_bias=(cd,), A_log=(H,), D=(H,),
                 dt_bias=(H,), norm_weight=(I,), out_proj=(d, I))
    elif kind == "G":
        HK, HV, K, V = hp["g_HK"], hp["g_HV"], hp["g_K"], hp["g_V"]
        cd = 2 * HK * K + HV * V
        s.update(in_proj=(cd + HV * V + 2 * HV, d), conv_weight=(cd, hp["g_conv"]), A_log=(HV,), dt_bias=(HV,),
                 norm_weight=(V,), out_proj=(d, HV * V))
    else:
        s.update(qkv=(3 * d, d), o=(d, d))
    return s


def random_weights(hp, seed=0):
    """Weights of a freshly initialised model: Linear-style uniform matrices, norms near 1, a spread of decays
    (some heads slow, some fast) so the recurrences are exercised at both ends."""
    rng = np.random.default_rng(seed)
    w = {"embedding": rng.normal(0, 1, (hp["vocab"], hp["d_model"])),
         "final_norm": 1 + 0.1 * rng.normal(size=hp["d_model"]),
         "head": rng.uniform(-1, 1, (hp["vocab"], hp["d_model"])) / math.sqrt(hp["d_model"])}
    for i, kind in enumerate(hp["layout"]):
        for name, shape in layer_shapes(hp, kind).items():
            if len(shape) == 2:
                a = rng.uniform(-1, 1, shape) / math.sqrt(shape[1])
            elif name == "A_log":
                a = np.log(rng.uniform(0.5, 16, shape))
            elif name == "dt_bias":
                dt = np.exp(rng.uniform(math.log(1e-4), math.log(1e-1), shape))
                a = dt + np.log(-np.expm1(-dt))
            elif name == "conv_bias":
                a = 0.1 * rng.normal(size=shape)
            else:
                a = 1 + 0.1 * rng.normal(size=shape)
            w[f"layers/{i:02d}/{name}"] = a
    return w


def write_weights(path, hp, weights, storage="fp16", attrs=None):
    import h5py
    sdt = {"fp16": np.float16, "fp32": np.float32}[storage]
    with h5py.File(path + ".tmp", "w") as f:
        f.attrs["format"] = "replayssm-lm"
        f.attrs["version"] = 1
        f.attrs["storage"] = storage
        for k in HYPER_KEYS:
            f.attrs[k] = hp[k]
        for k, v in (attrs or {}).items():
            f.attrs[k] = v
        for i, kind in enumerate(hp["layout"]):
            f.create_group(f"layers/{i:02d}").attrs["kind"] = KINDS[kind]
        for name, a in weights.items():
            base = name.split("/")[-1]
            f.create_dataset(name, data=np.asarray(a).astype(np.float32 if base in FP32_ALWAYS or a.ndim < 2 else sdt))
    os.replace(path + ".tmp", path)


def read_weights(path):
    import h5py
    with h5py.File(path, "r") as f:
        hp = {k: (f.attrs[k].item() if hasattr(f.attrs[k], "item") else f.attrs[k]) for k in HYPER_KEYS}
        hp["layout"] = str(hp["layout"])
        w = {}
        f.visititems(lambda n, o: w.__setitem__(n, o[...].astype(np.float64)) if isinstance(o, h5py.Dataset) else None)
    return hp, w


def _silu(x):
    return x / (1 + np.exp(-x))


def _softplus(x):
    return x if x > 20 else math.log1p(math.exp(x))


def _rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x) + eps) * w


class Forward:
    """fp64 decode of one sequence, one byte at a time (the C++ forward's order of operations)."""

    def __init__(self, hp, w):
        self.hp, self.w = hp, w
        self.state = {}
        for i, kind in enumerate(hp["layout"]):
            L = f"layers/{i:02d}/"
            if kind == "M":
                cd = w[L + "conv_weight"].shape[0]
                self.state[i] = dict(conv=np.zeros((hp["m_conv"] - 1, cd)),
                                     S=np.zeros((hp["m_H"], hp["m_P"], hp["m_N"])))
            elif kind == "G":
                cd = w[L + "conv_weight"].shape[0]
                self.state[i] = dict(conv=np.zeros((hp["g_conv"] - 1, cd)),
                                     S=np.zeros((hp["g_HV"], hp["g_V"], hp["g_K"])))
            else:
                self.state[i] = dict(k=[], v=[])

    @staticmethod
    def _conv(st, u, weight, bias):
        window = np.vstack([st["conv"], u[None]])  # [width, C], oldest first
        st["conv"] = window[1:]
        out = np.einsum("wc,cw->c", window, weight)
        return out + bias if bias is not None else out

    def _mamba2(self, i, u):
        hp, w, st = self.hp, self.w, self.state[i]
        L = f"layers/{i:02d}/"
        H, P, N, G = hp["m_H"], hp["m_P"], hp["m_N"], hp["m_G"]
        I = H * P
        proj = w[L + "in_proj"] @ u
        z, xBC, dt = proj[:I], proj[I:I + I + 2 * G * N], proj[I + I + 2 * G * N:]
        xBC = _silu(self._conv(st, xBC, w[L + "conv_weight"], w[L + "conv_bias"]))
        x, B, C = xBC[:I].reshape(H, P), xBC[I:I + G * N].reshape(G, N), xBC[I + G * N:].reshape(G, N)
        y = np.zeros((H, P))
        for h in range(H):
            g = h // (H // G)
            delta = _softplus(dt[h] + w[L + "dt_bias"][h])
            a = math.exp(-math.exp(w[L + "A_log"][h]) * delta)
            st["S"][h] = a * st["S"][h] + delta * np.outer(x[h], B[g])
            y[h] = st["S"][h] @ C[g] + w[L + "D"][h] * x[h]
        y = (y.reshape(I) * _silu(z)).reshape(G, I // G)
        y = y / np.sqrt(np.mean(y * y, axis=1, keepdims=True) + hp["m_norm_eps"])
        return w[L + "out_proj"] @ (y.reshape(I) * w[L + "norm_weight"])

    def _gdn(self, i, u):
        hp, w, st = self.hp, self.w, self.state[i]
        L = f"layers/{i:02d}/"
        HK, HV, K, V = hp["g_HK"], hp["g_HV"], hp["g_K"], hp["g_V"]
        cd = 2 * HK * K + HV * V
        proj = w[L + "in_proj"] @ u
        qkv, z, b, a = proj[:cd], proj[cd:cd + HV * V], proj[cd + HV * V:cd + HV * V + HV], proj[cd + HV * V + HV:]
        qkv = _silu(self._conv(st, qkv, w[L + "conv_weight"], None))
        q, k, v = qkv[:HK * K].reshape(HK, K), qkv[HK * K:2 * HK * K].reshape(HK, K), qkv[2 * HK * K:].reshape(HV, V)
        eps = hp["g_l2_eps"]
        o = np.zeros((HV, V))
        for h in range(HV):
            hk = h // (HV // HK)
            qn = q[hk] / math.sqrt(q[hk] @ q[hk] + eps) / math.sqrt(K)
            kn = k[hk] / math.sqrt(k[hk] @ k[hk] + eps)
            alpha = math.exp(-math.exp(w[L + "A_log"][h]) * _softplus(a[h] + w[L + "dt_bias"][h]))
            beta = 1 / (1 + math.exp(-b[h]))
            S = st["S"][h]
            S *= alpha
            uu = beta * (v[h] - S @ kn)
            S += np.outer(uu, kn)
            o[h] = S @ qn
        o = o / np.sqrt(np.mean(o * o, axis=1, keepdims=True) + hp["g_norm_eps"]) * w[L + "norm_weight"]
        o = o * _silu(z.reshape(HV, V))
        return w[L + "out_proj"] @ o.reshape(HV * V)

    def _attention(self, i, u):
        hp, w, st = self.hp, self.w, self.state[i]
        L = f"layers/{i:02d}/"
        d, nh = hp["d_model"], hp["attn_heads"]
        hd = d // nh
        q, k, v = (w[L + "qkv"] @ u).reshape(3, nh, hd)
        st["k"].append(k)
        st["v"].append(v)
        Kc, Vc = np.stack(st["k"]), np.stack(st["v"])  # [t, nh, hd]
        s = np.einsum("hd,thd->ht", q, Kc) / math.sqrt(hd)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        return w[L + "o"] @ np.einsum("ht,thd->hd", p, Vc).reshape(d)

    def step(self, token):
        hp, w = self.hp, self.w
        x = w["embedding"][token].copy()
        for i, kind in enumerate(hp["layout"]):
            L = f"layers/{i:02d}/"
            h = _rms(x, w[L + "norm1"], hp["norm_eps"])
            x = x + {"M": self._mamba2, "G": self._gdn, "A": self._attention}[kind](i, h)
            h = _rms(x, w[L + "norm2"], hp["norm_eps"])
            up = w[L + "mlp_up"] @ h
            f = hp["d_mlp"]
            x = x + w[L + "mlp_down"] @ (_silu(up[:f]) * up[f:])
        return w["head"] @ _rms(x, w["final_norm"], hp["norm_eps"])


def logits(path, tokens):
    hp, w = read_weights(path)
    fw = Forward(hp, w)
    return np.stack([fw.step(int(t)) for t in tokens])


def write_fixture(weights_path, text, steps, out):
    import h5py
    tokens = np.frombuffer(text[:steps], dtype=np.uint8).astype(np.int32)
    lg = logits(weights_path, tokens)
    h = hashlib.sha256(open(weights_path, "rb").read()).hexdigest()
    with h5py.File(out + ".tmp", "w") as f:
        f.attrs["format"] = "replayssm-lm-fixture"
        f.attrs["source"] = "numpy fp64 step-by-step forward (analysis/lm_model.py), not torch"
        f.attrs["weights_sha256"] = h
        f.attrs["weights_file"] = os.path.basename(weights_path)
        f.create_dataset("tokens", data=tokens)
        f.create_dataset("logits", data=lg)
    os.replace(out + ".tmp", out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("random")
    r.add_argument("out")
    r.add_argument("--size", default="tiny", choices=sorted(SIZES))
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--storage", default="fp16", choices=["fp16", "fp32"])
    lg = sub.add_parser("logits")
    lg.add_argument("weights")
    lg.add_argument("text")
    lg.add_argument("--steps", type=int, default=64)
    lg.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.mode == "random":
        hp = SIZES[a.size]
        write_weights(a.out, hp, random_weights(hp, a.seed), a.storage,
                      {"description": f"random weights ({a.size}, seed {a.seed}) for tests, not a trained model"})
    else:
        write_fixture(a.weights, open(a.text, "rb").read(), a.steps, a.out)


if __name__ == "__main__":
    main()
