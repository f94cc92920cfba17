"""Load a transformers model (local folder or config only, never a download) and record its decode traces."""
from __future__ import annotations

import os


def offline():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def load_model(path: str, dtype: str = "float32", device: str | None = None, seed: int = 0):
    """PATH is a checkpoint folder (config.json + weights), a folder with config.json only, or a config.json file.
    Without weights the model is randomly initialised from `seed`. Nothing is downloaded."""
    offline()
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    td = getattr(torch, dtype)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    cfg_path = path if os.path.isfile(path) else os.path.join(path, "config.json")
    if not os.path.exists(cfg_path):
        raise FileNotFoundError(f"{path}: no config.json (give a checkpoint folder or a config.json file)")
    has_weights = os.path.isdir(path) and any(
        f.endswith((".safetensors", ".bin")) for f in os.listdir(path))
    if has_weights:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=td)
    else:
        torch.manual_seed(seed)
        config = AutoConfig.from_pretrained(cfg_path, local_files_only=True)
        model = AutoModelForCausalLM.from_config(config, dtype=td)
    return model.to(device).eval()


def make_prompt(model, seqs: int, prompt_tokens: int, seed: int, prompt_ids=None):
    import torch
    device = next(model.parameters()).device
    if prompt_ids is not None:
        ids = torch.tensor(prompt_ids, dtype=torch.long).reshape(1, -1).repeat(seqs, 1)
        return ids.to(device)
    vocab = int(model.config.vocab_size)
    bos = getattr(model.config, "bos_token_id", None)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (seqs, prompt_tokens), generator=g)
    if bos is not None and 0 <= int(bos) < vocab:
        ids[:, 0] = int(bos)
    return ids.to(device)


def generate_and_record(model, layers, *, seqs=2, prompt_tokens=1, steps=64, seed=0, sample=True,
                        temperature=1.0, prompt_ids=None):
    """Generate with the model's cache and record every token from position 0: prompt (prefill) tokens, then
    decode steps, `steps` tokens in all. Returns the Recorder (call .write)."""
    import torch
    from .capture import Recorder

    ids = make_prompt(model, seqs, prompt_tokens, seed, prompt_ids)
    p = ids.shape[1]
    if steps < p:
        raise ValueError(f"steps ({steps}) must be at least the prompt length ({p})")
    new = steps - p + 1          # the last generated token is never fed back
    torch.manual_seed(seed)
    rec = Recorder(model, layers)
    with rec, torch.no_grad():
        pad = getattr(model.config, "pad_token_id", None)
        model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                       min_new_tokens=new, do_sample=sample, temperature=temperature if sample else None,
                       top_k=0 if sample else None, top_p=1.0 if sample else None,
                       pad_token_id=0 if pad is None else pad, use_cache=True)
    got = rec.captures[0].arrays()["out"].shape[0]
    if got < steps:
        raise RuntimeError(f"recorded {got} tokens, expected {steps}")
    return rec
