#!/usr/bin/env python3
"""Static SASS of the kernels in a CUDA object or program, loop by loop: for each kernel matching --kernel, every
loop (a backward branch and the instructions it jumps back over) with its instruction count, its mix by class and
the source lines it comes from (the build's line info). The issue-bound steps of benchmarks/experiments/README.md
(ncu: "the rest is reductions, address arithmetic, conversions and control flow") are judged by the instructions of
their stream loops; this counts them without a GPU, so a variant can be compared with the working copy before a
device call (scripts/ab_relink.sh -s runs it on both builds of a kernel file). Counts are static: a loop's body once,
not times its trip count, and both sides of every branch in it (a rarely taken prefetch or a fast path beside the
general one count in full); straight-line code outside loops is in the kernel's total only. So the counts say where
the instructions are and what a change added or removed, not how many issue: that stays the device's (ncu) to say,
or a reading of the path a trip takes by hand (`--dump`).

    scripts/sass_loops.py [--kernel REGEX] [--min N] [--lines K] [--dump] FILE [FILE ...]
    scripts/sass_loops.py --compare [--labels A,B] [--kernel REGEX] OLD NEW
      FILE      an object (build/kernels/CMakeFiles/*.dir/mamba2/mamba2_replay.cu.o), a static library, a program or
                a cubin; several: one block each, in order
      --kernel  a regular expression on the demangled kernel name (default: every kernel)
      --min N   list loops of at least N instructions (default 8)
      --lines K the K source lines a loop has most instructions from (default 3)
      --dump    every instruction of each loop listed, with its labels, source line and class
      --compare two builds of the same file: per kernel the instruction count old -> new and the change per class,
                then each loop whose size changed (paired in order of address when both builds have as many loops,
                else by the source line each has most instructions from); --labels names the two builds

Needs cuobjdump and nvdisasm: $CUOBJDUMP / $NVDISASM, then PATH, /usr/local/cuda/bin, then the PyPI wheels
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm (python3 -m pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm;
a toolkit with only nvcc and ptxas has neither). Standard library only.
"""
from __future__ import annotations

import argparse
import collections
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

# Instruction classes by opcode (the part before the first dot). Uniform-datapath integer work (U*) is its own class:
# it issues from the same slots but does not occupy the vector ALUs.
CLASSES = [
    ("fp32", {"FFMA", "FADD", "FMUL", "FMNMX", "FSETP", "FSEL", "FSET", "FCHK", "FRND", "FSWZADD"}),
    ("fp16", {"HFMA2", "HADD2", "HMUL2", "HMNMX2", "HSETP2", "HSET2"}),
    ("convert", {"F2F", "F2I", "I2F", "F2FP", "I2FP", "F2IP", "FRND"}),
    ("mufu", {"MUFU"}),
    ("tensor", {"HMMA", "IMMA", "HGMMA", "DMMA"}),
    ("ld.global", {"LDG", "LD", "LDGSTS", "LDGDEPBAR", "UBLKCP", "UTMALDG", "CCTL", "CCTLL"}),
    ("st.global", {"STG", "ST", "RED", "ATOM", "ATOMG", "REDG"}),
    ("shared", {"LDS", "STS", "LDSM", "ATOMS", "STSM", "LDL", "STL"}),
    ("const", {"LDC", "ULDC"}),
    ("shuffle", {"SHFL"}),
    ("sync", {"BAR", "MEMBAR", "DEPBAR", "WARPSYNC", "SYNCS", "ERRBAR", "FENCE", "ARRIVES", "BSSY", "BSYNC"}),
    ("branch", {"BRA", "BRX", "JMP", "EXIT", "RET", "CALL", "YIELD", "BPT", "KILL"}),
]
CLASS_OF = {op: name for name, ops in CLASSES for op in ops}
ORDER = [name for name, _ in CLASSES] + ["uniform", "int"]

INSN = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
LINE = re.compile(r'//## File "([^"]+)", line (\d+)')
BRANCH_TARGET = re.compile(r"\b(?:BRA|JMP)\b[^`]*`\(([^)]+)\)")
LABEL = re.compile(r"^(\.L_x_\d+):")


def classify(text: str) -> str:
    op = opcode(text)
    if op in CLASS_OF:
        return CLASS_OF[op]
    if op.startswith("U") or op == "R2UR" or op == "S2UR":
        return "uniform"
    return "int"  # IMAD, IADD3, LEA, SHF, LOP3, ISETP, MOV, SEL, PRMT, VIADD, S2R, ...


def find_tool(name: str) -> str:
    env = os.environ.get(name.upper())
    if env:
        return env
    for cand in (shutil.which(name), f"/usr/local/cuda/bin/{name}"):
        if cand and os.access(cand, os.X_OK):
            return cand
    for root in map(pathlib.Path, sys.path):
        for cand in root.glob(f"nvidia/cu*/bin/{name}"):
            if os.access(cand, os.X_OK):
                return str(cand)
    sys.exit(f"sass_loops: {name} not found: python3 -m pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm "
             f"(or set ${name.upper()})")


def cubins(path: str, tmp: str) -> list[str]:
    if path.endswith(".cubin"):
        return [path]
    r = subprocess.run([find_tool("cuobjdump"), "-xelf", "all", os.path.abspath(path)], cwd=tmp,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"sass_loops: {path}: cuobjdump -xelf failed: {r.stderr.strip().splitlines()[-1:]}")
    found = sorted(str(p) for p in pathlib.Path(tmp).glob("*.cubin"))
    if not found:
        sys.exit(f"sass_loops: {path}: no device code (cubin) in it")
    return found


def demangle(names: list[str]) -> list[str]:
    if not names or not shutil.which("c++filt"):
        return names
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    return out[:len(names)]


def parse(cubin: str) -> dict[str, list[tuple[int, str, str, tuple[str, int] | None, tuple[str, ...]]]]:
    """kernel -> [(address, text, class, (file, line) or None, labels at this address (a tuple, often empty))]."""
    r = subprocess.run([find_tool("nvdisasm"), "-g", "-c", cubin], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"sass_loops: nvdisasm failed on {cubin}: {r.stderr.strip()}")
    return parse_text(r.stdout)


def parse_text(text: str) -> dict[str, list[tuple[int, str, str, tuple[str, int] | None, tuple[str, ...]]]]:
    """parse() on nvdisasm -g -c's text."""
    kernels: dict[str, list] = {}
    cur = None
    src = None
    labels: list[str] = []
    for line in text.splitlines():
        if line.startswith("//----") and ".text." in line:
            cur = line.split(".text.", 1)[1].split()[0]
            kernels[cur] = []
            src, labels = None, []
            continue
        if cur is None:
            continue
        m = LINE.search(line)
        if m:
            src = (os.path.basename(m.group(1)), int(m.group(2)))
            continue
        m = LABEL.match(line.strip())
        if m:
            labels.append(m.group(1))
            continue
        m = INSN.match(line)
        if m:
            body = m.group(2)
            if body.split() and body.split()[0] == "NOP":
                continue
            kernels[cur].append((int(m.group(1), 16), body, classify(body), src, tuple(labels)))
            labels = []
    return kernels


def label_index(insns) -> dict[str, int]:
    return {lab: i for i, (_, _, _, _, labs) in enumerate(insns) for lab in labs}


def opcode(text: str) -> str:
    body = re.sub(r"^@!?U?P[T0-9]+\s+", "", text)
    return body.split()[0].split(".")[0] if body else ""


def loops(insns):
    """Backward branches: (start index, end index inclusive) of the instructions each jumps back over."""
    at_label = label_index(insns)
    out = []
    for i, (_, body, _, _, _) in enumerate(insns):
        m = BRANCH_TARGET.search(body)
        if m and m.group(1) in at_label and at_label[m.group(1)] <= i:
            out.append((at_label[m.group(1)], i))
    return sorted(set(out))


def mix(counter: collections.Counter) -> str:
    return ", ".join(f"{k} {counter[k]}" for k in ORDER if counter[k])


def summarise(path: str, pattern: re.Pattern, min_len: int, nlines: int) -> dict[str, dict]:
    """demangled kernel -> {"total": Counter of classes, "count": n, "loops": [(key, text line)]} for matching kernels.
    A loop's key is the source line it has most instructions from, so the same loop of two builds pairs up."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for cubin in cubins(path, tmp):
            out.update(summarise_kernels(parse(cubin), pattern, min_len, nlines))
    return out


def summarise_kernels(kernels: dict, pattern: re.Pattern, min_len: int, nlines: int) -> dict[str, dict]:
    """summarise() of parsed kernels."""
    out = {}
    names = list(kernels)
    for mangled, name in zip(names, demangle(names)):
        if not pattern.search(name):
            continue
        insns = kernels[mangled]
        rows = []
        for a, b in loops(insns):
            body = insns[a:b + 1]
            if len(body) < min_len:
                continue
            lines = collections.Counter(f"{s[0]}:{s[1]}" for _, _, _, s, _ in body if s)
            top = ", ".join(f"{k} ({v})" for k, v in lines.most_common(nlines))
            key = lines.most_common(1)[0][0] if lines else f"{insns[a][0]:#x}"
            rows.append((key, len(body), f"loop {insns[a][0]:#06x}-{insns[b][0]:#06x}: {len(body)} instructions: "
                                      f"{mix(collections.Counter(c for _, _, c, _, _ in body))}; lines {top}", body))
        out[name] = {"total": collections.Counter(c for _, _, c, _, _ in insns), "count": len(insns), "loops": rows}
    return out


def report(path: str, pattern: re.Pattern, min_len: int, nlines: int, dump: bool = False) -> int:
    found = summarise(path, pattern, min_len, nlines)
    for name, k in found.items():
        print(f"{name}\n  {k['count']} instructions: {mix(k['total'])}")
        for _, _, text, body in k["loops"]:
            print(f"  {text}")
            if dump:
                for addr, insn, cls, src, labs in body:
                    where = f"{src[0]}:{src[1]}" if src else "-"
                    print(f"    {addr:#07x} {' '.join(labs):<12} {where:<28} {cls:<9} {insn}")
    return len(found)


def compare(old_path: str, new_path: str, pattern: re.Pattern, min_len: int, nlines: int,
            labels: tuple[str, str] = ("old", "new")) -> int:
    """Kernels of both builds: instruction totals and the change per class, then every loop whose size changed.
    Loops pair up in order of address when both builds have as many; otherwise by the source line each has most
    instructions from (which an edit above it shifts: then a loop shows as old-only and new-only)."""
    old, new = summarise(old_path, pattern, min_len, nlines), summarise(new_path, pattern, min_len, nlines)
    for line in compare_summaries(old, new, labels):
        print(line)
    return len([n for n in old if n in new])


def compare_summaries(old: dict, new: dict, labels: tuple[str, str]) -> list[str]:
    """compare()'s lines for two summaries."""
    out = []
    common = [n for n in old if n in new]
    for name in common:
        o, n = old[name], new[name]
        delta = {c: n["total"][c] - o["total"][c] for c in ORDER if n["total"][c] != o["total"][c]}
        changed = ", ".join(f"{c} {d:+d}" for c, d in delta.items()) or "no class changed"
        out.append(f"{name}\n  {o['count']} -> {n['count']} instructions ({changed})")
        if len(o["loops"]) == len(n["loops"]):
            pairs = list(zip(o["loops"], n["loops"]))
            rest = []
        else:
            pending = collections.defaultdict(list)
            for row in o["loops"]:
                pending[row[0]].append(row)
            pairs, rest = [], []
            for row in n["loops"]:
                if pending[row[0]]:
                    pairs.append((pending[row[0]].pop(0), row))
                else:
                    rest.append(("new only", row))
            rest += [("old only", row) for rows in pending.values() for row in rows]
        for before, after in pairs:
            if before[1] != after[1]:
                out.append(f"  {labels[0]}: {before[2]}\n  {labels[1]}: {after[2]}")
        for tag, row in rest:
            out.append(f"  {labels[0] if tag == 'old only' else labels[1]} only: {row[2]}")
    for name in old:
        if name not in new:
            out.append(f"{name}: only in {labels[0]}")
    for name in new:
        if name not in old:
            out.append(f"{name}: only in {labels[1]}")
    return "\n".join(out).split("\n") if out else []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", metavar="FILE")
    ap.add_argument("--kernel", default="", help="regular expression on the demangled kernel name")
    ap.add_argument("--min", type=int, default=8, help="list loops of at least this many instructions")
    ap.add_argument("--lines", type=int, default=3, help="source lines shown per loop")
    ap.add_argument("--compare", action="store_true",
                    help="two files, old first: per kernel the change in instructions, and the loops that changed")
    ap.add_argument("--dump", action="store_true", help="print every instruction of each loop listed (address, "
                                                         "labels, source line, class), to read a path by hand")
    ap.add_argument("--labels", default="", help="with --compare: the two builds' names, comma-separated "
                                                 "(default: the file paths)")
    args = ap.parse_args()
    try:
        pattern = re.compile(args.kernel)
    except re.error as e:
        print(f"sass_loops: --kernel: not a regular expression: {e}", file=sys.stderr)
        return 2
    for f in args.files:
        if not os.path.isfile(f):
            print(f"sass_loops: {f}: no such file", file=sys.stderr)
            return 2
    if args.compare:
        if len(args.files) != 2:
            print("sass_loops: --compare takes two files, the old build first", file=sys.stderr)
            return 2
        labels = tuple(args.labels.split(",", 1)) if args.labels else (args.files[0], args.files[1])
        if len(labels) != 2:
            print("sass_loops: --labels takes two names, comma-separated", file=sys.stderr)
            return 2
        if compare(args.files[0], args.files[1], pattern, args.min, args.lines, labels) == 0:
            print(f"sass_loops: no kernel of both files matches --kernel '{args.kernel}'", file=sys.stderr)
            return 1
        return 0
    for f in args.files:
        if len(args.files) > 1:
            print(f"== {f}")
        if report(f, pattern, args.min, args.lines, args.dump) == 0:
            print(f"sass_loops: {f}: no kernel matches --kernel '{args.kernel}'", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
