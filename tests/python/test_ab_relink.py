"""scripts/ab_relink.sh -l: the benchmark rows that time each kernel file. An A/B filtered on another kernel's rows
times two identical builds (2026-12-06: the grouped Mamba-2 kernel's patch timed on the per-head kernel's rows), so
every kernel file must have an entry, each entry must name a benchmark that exists, and its rows' prefix must be one
that benchmark's bench_name can produce."""
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ab_relink.sh"
KERNEL_FILES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "kernels").rglob("*.cu"))


def rows(path):
    return subprocess.run(["bash", str(SCRIPT), "-l", path], capture_output=True, text=True, cwd=ROOT)


@pytest.mark.parametrize("path", KERNEL_FILES)
def test_every_kernel_file_names_its_benchmark_and_rows(path):
    r = rows(path)
    assert r.returncode == 0, r.stderr
    m = re.fullmatch(r"ab_relink: (\S+) is timed by (\S+)'s rows matching '([^']+)' \(scripts/gpu_ab\.sh -f '\3' \.\.\.\)\n",
                     r.stdout)
    assert m, r.stdout
    assert m.group(1) == path
    bench = ROOT / "experiments" / f"{m.group(2)}.cu"
    assert bench.is_file(), f"{path}: {bench} does not exist"
    # The rows' first name element (eager, replay_g, mamba2, ...) built from the words the benchmark names rows with.
    source = bench.read_text()
    words = [w for w in re.findall(r"[a-z0-9]+", m.group(3).split("/")[0]) if len(w) > 1]
    for w in words:
        assert f'"{w}' in source or f'"_{w}' in source or f"_{w}" in source, f"{path}: '{w}' not in {bench.name}"


def test_the_grouped_and_per_head_rows_do_not_overlap():
    def rx(path):
        return re.compile(re.search(r"matching '([^']+)'", rows(path).stdout).group(1))
    grouped, per_head = rx("kernels/mamba2/mamba2_replay_grouped.cu"), rx("kernels/mamba2/mamba2_replay.cu")
    assert grouped.search("replay_g/fp32/K16/flush/batch:256") and grouped.search("dual_g/fp32+bf16/K32/nonflush/batch:64")
    assert grouped.search("replay_g_h8/fp32/K16/amortised/batch:256")
    assert not grouped.search("replay/fp32/K16/flush/batch:256")
    assert per_head.search("dual/fp32+e4m3/K16/flush/batch:1") and not per_head.search("replay_g/fp32/K16/flush/batch:1")


def test_an_unknown_file_and_a_missing_argument_are_refused():
    r = rows("kernels/common/none.cu")
    assert r.returncode == 1 and "no benchmark rows are known for kernels/common/none.cu" in r.stderr
    r = subprocess.run(["bash", str(SCRIPT), "-l"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "-l takes one KERNEL_FILE" in r.stderr
