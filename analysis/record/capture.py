"""Capture the SSM inputs of transformers' Mamba-2 / Nemotron-H mixers and Qwen3-Next Gated DeltaNets.

Verified with transformers 5.17 / torch 2.11 (tests/python/test_record.py); older layouts are handled where noted.
One mixer call = the tokens of one forward, [batch, tokens, ...]; every token of every forward is recorded,
prefill tokens included, so a trace starts at position 0 from a zero state, where our decoders start.

Mamba-2 (classes whose name ends in "Mamba2Mixer": Mamba2Mixer, NemotronHMamba2Mixer):
  - in_proj output (forward hook), split as [d_mlp, d_mlp, z (H*P), xBC (conv_dim), dt (H)] with d_mlp = 0 in
    5.x -> z and the raw dt (before + dt_bias and softplus).
  - x, B, C after the causal conv and SiLU: 5.x mixers call module-level kernels by global name
    (`mamba2_chunk_scan` for prefill, `mamba2_selective_state_update` for decode); the recorder wraps them for the
    duration of the recording and reads x [.., H, P], dt, B [.., G, N], C [.., G, N] from their arguments (dt is
    checked against the in_proj split: `dt_max_abs_diff`). Older layouts (torch_forward + `mixer.act`): a forward
    hook on `mixer.act` and the mixer forced onto torch_forward.
  - the gated RMS norm (forward pre-hook on `mixer.norm`, called as norm(y, z)) -> the reference output
    y*silu(z) in fp32, exactly the norm's first line (norm_before_gate=False). Our decoders output
    y*z*sigmoid(z) with y = S.C + D.x: the same quantity.
  - dt limits: `time_step_limit` -> dt_min/dt_max. transformers 5.17 passes dt_limit to the prefill kernel only, not
    to the decode kernel: with a limit other than (0, inf) decode steps below dt_min are not clamped by the model but
    are by our decoders (Nemotron-H's default limit is (time_step_min, inf)); the recorder keeps the model's limit.

GDN (classes whose name ends in "GatedDeltaNet", e.g. Qwen3NextGatedDeltaNet):
  - the delta rule: 5.x calls the module-level `torch_chunk_gated_delta_rule` (prefill) and
    `torch_recurrent_gated_delta_rule` (decode) by global name; older layouts hold them as instance attributes
    (`chunk_gated_delta_rule`, `recurrent_gated_delta_rule`). Either way the recorder wraps them and reads q, k (after
    the conv + SiLU, before the L2 norm: use_qk_l2norm_in_kernel=True, eps 1e-6, then q * K^-1/2, as ours), v, g,
    beta and the output o (before the output norm and z gate).
    q and k arrive repeated to the value heads with repeat_interleave (value head h uses key head h // (HV/HK), our
    convention); the recorder keeps every (HV/HK)-th head and checks the repeat (`qk_repeat_ok`).
  - raw a and b from the projections: `in_proj_ba` (+ the model's own `fix_query_key_value_ordering`, Qwen3-Next) or
    `in_proj_a` / `in_proj_b` (split layouts). The recorder checks g == -exp(A_log)*softplus(a + dt_bias)
    (`g_max_abs_diff`) and beta == sigmoid(b) (`beta_max_abs_diff`) against what the model passed to the kernel.
"""
from __future__ import annotations

import inspect
import math
import sys

import numpy as np


def _t2np(t):
    return t.detach().float().cpu().numpy()


# Module-level kernels that transformers 5.x mixers call by their global name (looked up at call time), with the
# positions of the arguments we read. Older layouts (instance attributes, `mixer.act`) are handled as well.
MAMBA2_GLOBALS = ("mamba2_selective_state_update", "mamba2_chunk_scan")
GDN_GLOBALS = ("torch_recurrent_gated_delta_rule", "torch_chunk_gated_delta_rule")
_ACTIVE = []        # captures whose mixer forward is running (innermost last)
_PATCHES = {}       # (python module, name) -> [original, refcount]


def _patch_global(pymod, name, kind):
    key = (pymod.__name__, name)
    if key in _PATCHES:
        _PATCHES[key][1] += 1
        return True
    orig = pymod.__dict__.get(name)
    if orig is None:
        return False

    def wrapper(*args, **kwargs):
        cap = _ACTIVE[-1] if _ACTIVE else None
        if cap is None:
            return orig(*args, **kwargs)
        return cap.on_kernel(kind, orig, args, kwargs)
    setattr(pymod, name, wrapper)
    _PATCHES[key] = [orig, 1]
    return True


def _unpatch_global(pymod, name):
    key = (pymod.__name__, name)
    if key in _PATCHES:
        _PATCHES[key][1] -= 1
        if _PATCHES[key][1] == 0:
            setattr(pymod, name, _PATCHES.pop(key)[0])


def mixer_family(module) -> str | None:
    name = type(module).__name__
    if name.endswith("Mamba2Mixer"):
        return "mamba2"
    if name.endswith("GatedDeltaNet"):
        return "gdn"
    return None


def find_mixers(model):
    """[(layer_index, family, module)] in model order. layer_index: the module's layer_idx, else its ordinal."""
    found = []
    for _, m in model.named_modules():
        fam = mixer_family(m)
        if fam is not None:
            idx = getattr(m, "layer_idx", None)
            found.append((len(found) if idx is None else int(idx), fam, m))
    return found


class _LayerCapture:
    def __init__(self, layer, family, module, force_torch_path=True):
        self.layer, self.family, self.module = layer, family, module
        self.calls = []          # list of dicts name -> np [b, s, ...]
        self.pending = {}
        self.handles = []
        self.saved_attrs = {}
        self.globals_patched = []
        self.checks = {"g_max_abs_diff": 0.0, "beta_max_abs_diff": 0.0, "qk_repeat_ok": True,
                       "l2norm_in_kernel": True}
        m = module
        if family == "mamba2":
            self.H, self.P = int(m.num_heads), int(m.head_dim)
            self.N, self.G = int(m.ssm_state_size), int(m.n_groups)
            self.I = self.H * self.P
            pymod = sys.modules[type(m).__module__]
            for name in MAMBA2_GLOBALS:
                if _patch_global(pymod, name, name):
                    self.globals_patched.append((pymod, name))
            if force_torch_path and hasattr(m, "torch_forward"):
                sig = inspect.signature(m.torch_forward)
                tf = m.torch_forward

                def fwd(hidden_states, *args, **kwargs):
                    kw = {k: v for k, v in kwargs.items() if k in sig.parameters}
                    return tf(hidden_states, *args, **kw)
                self.saved_attrs["forward"] = m.__dict__.get("forward")
                m.forward = fwd
            self.handles.append(m.in_proj.register_forward_hook(self._in_proj_hook))
            if not self.globals_patched:
                self.handles.append(m.act.register_forward_hook(self._act_hook))
            self.handles.append(m.norm.register_forward_pre_hook(self._norm_pre_hook, with_kwargs=True))
        else:
            self.HK, self.HV = int(m.num_k_heads), int(m.num_v_heads)
            self.K, self.V = int(m.head_k_dim), int(m.head_v_dim)
            pymod = sys.modules[type(m).__module__]
            for name in GDN_GLOBALS:
                if _patch_global(pymod, name, "gdn_rule"):
                    self.globals_patched.append((pymod, name))
            for attr in ("chunk_gated_delta_rule", "recurrent_gated_delta_rule"):
                fn = getattr(m, attr, None)
                if fn is not None:
                    self.saved_attrs[attr] = m.__dict__.get(attr)
                    setattr(m, attr, self._wrap_rule(fn))
            if not self.globals_patched and not self.saved_attrs:
                raise RuntimeError(f"layer {layer}: {type(m).__name__}: found neither module functions {GDN_GLOBALS} "
                                   "nor instance attributes chunk_gated_delta_rule/recurrent_gated_delta_rule")
            if hasattr(m, "in_proj_a") and hasattr(m, "in_proj_b"):
                self.handles.append(m.in_proj_a.register_forward_hook(self._keep("raw_a")))
                self.handles.append(m.in_proj_b.register_forward_hook(self._keep("raw_b")))
            elif hasattr(m, "in_proj_ba") and hasattr(m, "fix_query_key_value_ordering"):
                self.handles.append(m.in_proj_ba.register_forward_hook(self._keep("proj_ba")))
                self.handles.append(m.in_proj_qkvz.register_forward_hook(self._keep("proj_qkvz")))
            else:
                raise RuntimeError(f"layer {layer}: {type(m).__name__} has neither in_proj_a/in_proj_b nor "
                                   "in_proj_ba + fix_query_key_value_ordering; the recorder does not know how to "
                                   "read the raw gate inputs a and b of this GDN")
        self.handles.append(m.register_forward_pre_hook(self._begin))
        self.handles.append(m.register_forward_hook(self._commit))

    # ---- hooks common ----
    def _begin(self, mod, args):
        self.pending = {}
        _ACTIVE.append(self)

    def _keep(self, name):
        def hook(mod, args, out):
            self.pending[name] = out.detach()
        return hook

    def _commit(self, mod, args, out):
        if _ACTIVE and _ACTIVE[-1] is self:
            _ACTIVE.pop()
        need = ("x", "dt", "B", "C", "z", "out") if self.family == "mamba2" else ("q", "k", "v", "a", "b", "out")
        missing = [n for n in need if n not in self.pending]
        if missing:
            raise RuntimeError(f"layer {self.layer} ({type(mod).__name__}): the recorder saw no {missing} in this "
                               "forward; the model's code path differs from the one the recorder hooks")
        self.calls.append({n: self.pending[n] for n in need})
        self.pending = {}

    # ---- Mamba-2 ----
    def _in_proj_hook(self, mod, args, out):
        o = out.detach()
        o = o.reshape(o.shape[0], -1, o.shape[-1])
        tot = o.shape[-1]
        d_mlp = (tot - 2 * self.I - 2 * self.G * self.N - self.H) // 2
        z = o[..., 2 * d_mlp: 2 * d_mlp + self.I]
        dt = o[..., tot - self.H:]
        b, s = o.shape[:2]
        self.pending["z"] = _t2np(z).reshape(b, s, self.H, self.P)
        self.pending["dt"] = _t2np(dt).reshape(b, s, self.H)

    def _act_hook(self, mod, args, out):
        o = out.detach()
        conv_dim = self.I + 2 * self.G * self.N
        if o.shape[-1] != conv_dim:
            raise RuntimeError(f"layer {self.layer}: mixer.act output has last dim {o.shape[-1]}, expected {conv_dim}")
        o = _t2np(o.reshape(o.shape[0], -1, conv_dim))
        b, s = o.shape[:2]
        gn = self.G * self.N
        self.pending["x"] = o[..., :self.I].reshape(b, s, self.H, self.P)
        self.pending["B"] = o[..., self.I:self.I + gn].reshape(b, s, self.G, self.N)
        self.pending["C"] = o[..., self.I + gn:].reshape(b, s, self.G, self.N)

    def _norm_pre_hook(self, mod, args, kwargs):
        import torch.nn.functional as F
        y = args[0] if args else kwargs["hidden_states"]
        gate = args[1] if len(args) > 1 else kwargs.get("gate")
        if gate is None:
            raise RuntimeError(f"layer {self.layer}: gated norm called without a gate")
        yf, zf = y.detach().float(), gate.detach().float()
        g = yf * F.silu(zf)
        b = self.pending["x"].shape[0] if "x" in self.pending else g.shape[0]
        self.pending["out"] = _t2np(g).reshape(b, -1, self.I)

    def on_kernel(self, kind, orig, args, kwargs):
        if kind == "gdn_rule":
            return self._wrap_rule(orig)(*args, **kwargs)
        if kind == "mamba2_selective_state_update":     # (state, x[b,H,P], dt[b,H,P], A, B[b,G,N], C[b,G,N], D, ...)
            x, dt, B, C = args[1], args[2], args[4], args[5]
            b = x.shape[0]
            dt = dt.reshape(b, self.H, -1)[:, :, 0]
        else:                                           # (x[b,s,H,P], dt[b,s,H], A, B[b,s,G,N], C[b,s,G,N], ...)
            x, dt, B, C = args[0], args[1], args[3], args[4]
            b = x.shape[0]
        if not kwargs.get("dt_softplus", True) or kwargs.get("z") is not None:
            raise RuntimeError(f"layer {self.layer}: {kind} called with dt_softplus=False or z: not our convention")
        self.pending["x"] = _t2np(x).reshape(b, -1, self.H, self.P)
        self.pending["B"] = _t2np(B).reshape(b, -1, self.G, self.N)
        self.pending["C"] = _t2np(C).reshape(b, -1, self.G, self.N)
        dtk = _t2np(dt).reshape(b, -1, self.H)
        if "dt" in self.pending:
            self.checks["dt_max_abs_diff"] = max(self.checks.get("dt_max_abs_diff", 0.0),
                                                 float(np.abs(dtk - self.pending["dt"]).max()))
        self.pending["dt"] = dtk
        return orig(*args, **kwargs)

    # ---- GDN ----
    def _wrap_rule(self, fn):
        cap = self

        def wrapped(query, key, value, *args, **kwargs):
            import torch
            import torch.nn.functional as F
            g = kwargs.get("g", args[0] if len(args) > 0 else None)
            beta = kwargs.get("beta", args[1] if len(args) > 1 else None)
            if not kwargs.get("use_qk_l2norm_in_kernel", False):
                cap.checks["l2norm_in_kernel"] = False
            res = fn(query, key, value, *args, **kwargs)
            o = res[0] if isinstance(res, tuple) else res
            m = cap.module
            b_, s_ = query.shape[:2]
            r = cap.HV // cap.HK
            q = query.detach().reshape(b_, s_, -1, cap.K)
            k = key.detach().reshape(b_, s_, -1, cap.K)
            if q.shape[2] == cap.HV and r > 1:
                qk = q[:, :, ::r]
                kk = k[:, :, ::r]
                if not (torch.equal(qk.repeat_interleave(r, dim=2), q)
                        and torch.equal(kk.repeat_interleave(r, dim=2), k)):
                    cap.checks["qk_repeat_ok"] = False
                q, k = qk, kk
            elif q.shape[2] != cap.HK:
                raise RuntimeError(f"layer {cap.layer}: q has {q.shape[2]} heads, expected {cap.HK} or {cap.HV}")
            # raw a, b
            if "raw_a" in cap.pending:
                a_raw = cap.pending["raw_a"].reshape(b_, s_, cap.HV)
                b_raw = cap.pending["raw_b"].reshape(b_, s_, cap.HV)
            else:
                outs = m.fix_query_key_value_ordering(cap.pending["proj_qkvz"], cap.pending["proj_ba"])
                b_raw, a_raw = outs[-2], outs[-1]
                b_raw = b_raw.reshape(b_, s_, cap.HV)
                a_raw = a_raw.reshape(b_, s_, cap.HV)
            g_ours = -m.A_log.detach().float().exp() * F.softplus(a_raw.float() + m.dt_bias.detach().float())
            if g is not None:
                cap.checks["g_max_abs_diff"] = max(cap.checks["g_max_abs_diff"],
                                                   float((g_ours - g.detach().float().reshape(g_ours.shape)).abs().max()))
            if beta is not None:
                cap.checks["beta_max_abs_diff"] = max(
                    cap.checks["beta_max_abs_diff"],
                    float((b_raw.float().sigmoid() - beta.detach().float().reshape(b_raw.shape)).abs().max()))
            cap.pending.update(q=_t2np(q), k=_t2np(k), v=_t2np(value.detach().reshape(b_, s_, cap.HV, cap.V)),
                               a=_t2np(a_raw), b=_t2np(b_raw),
                               out=_t2np(o.detach().reshape(b_, s_, cap.HV * cap.V)))
            return res
        return wrapped

    # ---- results ----
    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []
        for pymod, name in self.globals_patched:
            _unpatch_global(pymod, name)
        self.globals_patched = []
        while self in _ACTIVE:
            _ACTIVE.remove(self)
        for attr, old in self.saved_attrs.items():
            if old is None:
                self.module.__dict__.pop(attr, None)
            else:
                setattr(self.module, attr, old)
        self.saved_attrs = {}

    def geometry(self):
        if self.family == "mamba2":
            return dict(H=self.H, P=self.P, N=self.N, G=self.G)
        return dict(HK=self.HK, HV=self.HV, K=self.K, V=self.V)

    def params(self):
        m = self.module
        p = {"A_log": m.A_log.detach().double().cpu().numpy(), "dt_bias": m.dt_bias.detach().double().cpu().numpy()}
        if self.family == "mamba2":
            p["D"] = m.D.detach().double().cpu().numpy()
        return p

    def extra_attrs(self):
        if self.family == "mamba2":
            lim = getattr(self.module, "time_step_limit", None)
            lo, hi = (0.0, math.inf) if lim is None else (float(lim[0]), float(lim[1]))
            return {"dt_min": lo, "dt_max": hi}
        return {"eps": 1e-6}   # the L2-norm epsilon of transformers' / FLA's use_qk_l2norm_in_kernel

    def arrays(self):
        """name -> np.float32 [steps, seqs, ...]: the calls concatenated along the token axis."""
        if not self.calls:
            raise RuntimeError(f"layer {self.layer}: nothing recorded")
        out = {}
        for n in self.calls[0]:
            a = np.concatenate([c[n] for c in self.calls], axis=1)   # [b, steps, ...]
            out[n] = np.ascontiguousarray(np.swapaxes(a, 0, 1)).astype(np.float32)
        return out


class Recorder:
    """Context manager: hooks the chosen SSM mixers of `model`, records every token of every forward.

        with Recorder(model, layers=[0, 2]) as rec:
            model.generate(...)            # or model(input_ids) for teacher forcing
        rec.write("traces/", storage="fp32")
    """

    def __init__(self, model, layers=None, force_torch_path=True):
        mixers = find_mixers(model)
        if not mixers:
            raise RuntimeError(f"{type(model).__name__}: no Mamba-2 mixer or Gated DeltaNet found "
                               "(supported: *Mamba2Mixer, *GatedDeltaNet)")
        avail = [l for l, _, _ in mixers]
        if layers is None:
            chosen = mixers
        else:
            bad = [l for l in layers if l not in avail]
            if bad:
                raise ValueError(f"layers {bad} are not SSM layers of this model; SSM layers: {avail}")
            chosen = [t for t in mixers if t[0] in layers]
        self.model = model
        self.force = force_torch_path
        self.chosen = chosen
        self.captures = []

    def __enter__(self):
        self.captures = [_LayerCapture(l, f, m, self.force) for l, f, m in self.chosen]
        return self

    def __exit__(self, *exc):
        for c in self.captures:
            c.remove()
        return False

    def layer_data(self, steps=None):
        """[(capture, arrays)] with arrays truncated to `steps` tokens."""
        res = []
        for c in self.captures:
            a = c.arrays()
            if steps is not None:
                a = {k: v[:steps] for k, v in a.items()}
            res.append((c, a))
        return res

    def write(self, out_dir, *, steps=None, storage="fp32", prefix="layer", description="", readouts=None):
        """Write one trace per layer: OUT_DIR/<prefix><layer>.h5. Returns the paths and the mixer outputs."""
        import os
        from .trace_writer import write_trace

        paths, outputs = [], {}
        for c, a in self.layer_data(steps):
            out = a.pop("out")
            path = os.path.join(out_dir, f"{prefix}{c.layer:02d}_{c.family}.h5")
            desc = (f"{description}; layer {c.layer} ({type(c.module).__name__}); "
                    f"{a[next(iter(a))].shape[0]} tokens from position 0 (prefill tokens included)")
            ro = None if readouts is None else readouts.get(c.layer)
            write_trace(path, c.family, c.geometry(), c.params(), a, storage=storage, description=desc,
                        extra_attrs=c.extra_attrs(), readout=ro)
            paths.append(path)
            outputs[c.layer] = out
        return paths, outputs

    def checks(self):
        return {c.layer: dict(c.checks) for c in self.captures}
