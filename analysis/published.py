"""The published numbers we compare against (analysis/published.json, with their sources in the design notes), and
how one of ours is set beside one of theirs.

    from analysis.published import published, compare
    p = published()["tf32x3_flush_err"]        # {"value": 1e-05, "unit": ..., "source": ..., ...}
    compare(1.5e-6, p)                          # {"ratio": 0.15, "inside": None, ...}
"""
from __future__ import annotations

import json
import math
import os

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "published.json")


def published(path: str = PATH) -> dict[str, dict]:
    """Entries by id. A range is a two-element list [low, high]."""
    with open(path) as fh:
        doc = json.load(fh)
    out = {}
    for e in doc["entries"]:
        if e["id"] in out:
            raise ValueError(f"{path}: entry id {e['id']!r} twice")
        for k in ("quantity", "value", "unit", "source"):
            if k not in e:
                raise ValueError(f"{path}: entry {e['id']!r} has no {k!r}")
        out[e["id"]] = e
    return out


def central(entry: dict) -> float:
    """A single value: the value, or the middle of a range."""
    v = entry["value"]
    return (v[0] + v[1]) / 2 if isinstance(v, list) else float(v)


def value_text(entry: dict) -> str:
    v = entry["value"]
    if isinstance(v, list):
        return f"{v[0]:.3g}–{v[1]:.3g}"
    return f"{v:.3g}"


def compare(ours: float, entry: dict) -> dict:
    """Ours against a published entry: ratio ours / published (a range's middle), and for a range whether ours lies
    inside it (None for a single value)."""
    ref = central(entry)
    ratio = ours / ref if ref and ours is not None and math.isfinite(ours) else float("nan")
    inside = None
    if isinstance(entry["value"], list) and ours is not None and math.isfinite(ours):
        inside = entry["value"][0] <= ours <= entry["value"][1]
    return {"ours": ours, "published": entry["value"], "ratio": ratio, "inside": inside}
