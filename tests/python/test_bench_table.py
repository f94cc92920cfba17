"""Tests of scripts/bench_table.py's A/B table (--ab): per-case means over each build's repeats, ratios to the
baseline, the case filter, and refusals (no common case, a file without median rows). One test pins the committed
A/B of the grouped flush (benchmarks/experiments/mamba2_flush_regB.*) to the ratio docs/gpu_results.md quotes. Then --targets:
the verdicts of the committed H200 runs, verdicts that follow a changed time, a missing case named, another card
marked, the README's "Targets at a glance" equal to the script's output, and the times of its published comparison taken from it.

    python3 -m pytest tests/python/test_bench_table.py
"""
from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench_table.py"
_spec = importlib.util.spec_from_file_location("bench_table", SCRIPT)
bench_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_table)


def write_run(path, medians, unit="us"):
    """A Google Benchmark JSON with one median row (and one mean row, to be ignored) per case."""
    rows = []
    for case, t in medians.items():
        name = f"{case}/iterations:10/repeats:5/manual_time"
        rows.append({"name": name + "_mean", "aggregate_name": "mean", "real_time": 1e9, "time_unit": unit})
        rows.append({"name": name + "_median", "aggregate_name": "median", "real_time": t, "time_unit": unit})
    path.write_text(json.dumps({"context": {"gpu": "test"}, "benchmarks": rows}))
    return str(path)


def test_means_over_repeats_and_ratios(tmp_path):
    a1 = write_run(tmp_path / "a1.json", {"x/batch:1": 10.0, "y/batch:1": 4.0})
    a2 = write_run(tmp_path / "a2.json", {"x/batch:1": 12.0, "y/batch:1": 4.0})
    b1 = write_run(tmp_path / "b1.json", {"x/batch:1": 9.0, "y/batch:1": 5.0, "z/batch:1": 1.0})
    out = bench_table.ab_table([[a1, a2], [b1]])
    rows = {line.split("|")[1].strip(" `"): line for line in out.splitlines() if line.startswith("| `")}
    assert set(rows) == {"x/batch:1", "y/batch:1"}  # z: not measured by every build
    assert rows["x/batch:1"].rstrip(" |").endswith("0.818")  # 9 / mean(10, 12)
    assert "10.0 / 12.0" in rows["x/batch:1"]
    assert rows["y/batch:1"].rstrip(" |").endswith("1.250")


def test_ab_shows_the_verify_footprints(tmp_path):
    def run(name, ctas, smem):
        path = pathlib.Path(write_run(tmp_path / name, {"gdn/T:4/batch:256": 300.0, "x/batch:1": 1.0}))
        d = json.loads(path.read_text())
        for b in d["benchmarks"]:
            if b["name"].startswith("gdn/"):
                b.update(verify_ctas_per_sm=ctas, verify_smem_bytes=smem, verify_registers=80.0, verify_local_bytes=0.0)
        path.write_text(json.dumps(d))
        return str(path)
    old = write_run(tmp_path / "old.json", {"gdn/T:4/batch:256": 290.0, "x/batch:1": 1.0})  # before the counters
    out = bench_table.ab_table([[run("a.json", 6.0, 28336.0)], [run("b.json", 5.0, 44848.0)], [old]])
    assert "- `gdn/T:4/batch:256`: a 6, 28336, 80, 0; b 5, 44848, 80, 0; c —" in out
    assert "`x/batch:1`:" not in out  # no footprint in any build: no line
    assert "Verify kernel" not in bench_table.ab_table([[old], [old]])


def test_nanosecond_runs_and_filter(tmp_path):
    a = write_run(tmp_path / "a.json", {"x/batch:1": 2000.0, "y/batch:1": 1.0}, unit="ns")
    b = write_run(tmp_path / "b.json", {"x/batch:1": 1.0, "y/batch:1": 1.0})
    out = bench_table.ab_table([[a], [b]], pattern="^x/")
    assert "`y/batch:1`" not in out
    assert "| 2.0 | 1.0 | 0.500 |" in out


def test_refusals(tmp_path):
    a = write_run(tmp_path / "a.json", {"x/batch:1": 1.0})
    b = write_run(tmp_path / "b.json", {"w/batch:1": 1.0})
    with pytest.raises(ValueError, match="no case measured by every build"):
        bench_table.ab_table([[a], [b]])
    # A run whose median rows are missing (a --once run, or a file cut wrongly) has no cases: refused, not empty.
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"context": {}, "benchmarks": [
        {"name": "x/batch:1/iterations:1", "run_type": "iteration", "real_time": 1.0, "time_unit": "us"}]}))
    with pytest.raises(ValueError, match="broken.json has no median rows"):
        bench_table.ab_table([[str(broken)], [a]])
    r = subprocess.run([sys.executable, str(SCRIPT), "--ab", a, str(tmp_path / "missing.json")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "missing.json" in r.stderr


def test_committed_grouped_flush_ab():
    e = ROOT / "benchmarks" / "experiments"
    old = [str(e / f"mamba2_flush_regB.old.{i}.h200.json") for i in (1, 2)]
    new = [str(e / f"mamba2_flush_regB.new.{i}.h200.json") for i in (1, 2)]
    out = bench_table.ab_table([old, new], pattern=r"^replay_g/fp32/K16/flush/batch:256$")
    assert "848.5 / 848.6" in out and "805.8 / 805.9" in out
    assert out.rstrip(" |\n").endswith("0.950")


def test_committed_verify_fold_ab_is_a_spec_table():
    """bench_spec_cuda --gdn-fold-tune output under a name without "spec": found by its context, the FFMA twins as
    their own family after the default rows (benchmarks/experiments/gdn_verify_mma.cap.1, docs/gpu_results.md's A/B)."""
    path = str(ROOT / "benchmarks" / "experiments" / "gdn_verify_mma.cap.1.h200.json")
    assert bench_table.is_spec(path)
    lines = bench_table.spec_table(path).splitlines()
    rows = [ln for ln in lines if ln.startswith("| gdn")]
    assert [r.split("|")[1].strip() for r in rows[:6]] == ["gdn"] * 3 + ["gdn fold:fma"] * 3
    assert any("| gdn | 256 | 4 | 290.9 | 473.0 | 323.7 |" in r for r in rows)
    assert any("| gdn fold:fma | 256 | 4 | 286.4 | 504.5 | 325.7 |" in r for r in rows)
    assert not bench_table.is_spec(str(ROOT / "benchmarks" / "runs" / "mamba2-bench.79f12a9.h200.json"))


def test_committed_mamba2_verify_fold_ab_shows_the_flush():
    """A bench_spec_cuda A/B: the flushing and amortised verify (counters) are rows of their own, beside the
    non-flushing window (real time); benchmarks/experiments/mamba2_verify_fold.call2.*, the experiments README's
    table."""
    e = ROOT / "benchmarks" / "experiments"
    old = [str(e / f"mamba2_verify_fold.call2.old.{i}.h200.json") for i in (1, 2)]
    new = [str(e / f"mamba2_verify_fold.call2.kept.{i}.h200.json") for i in (1, 2)]
    out = bench_table.ab_table([old, new], pattern=r"^mamba2/T:4/batch:256")
    rows = {line.split("|")[1].strip(" `"): line for line in out.splitlines() if line.startswith("| `")}
    assert set(rows) == {"mamba2/T:4/batch:256", "mamba2/T:4/batch:256 [verify flush]",
                         "mamba2/T:4/batch:256 [verify amortised]", "mamba2/T:4/batch:256 [eager verify]"}
    assert "1074.0 / 1071.8" in rows["mamba2/T:4/batch:256 [verify flush]"]
    assert rows["mamba2/T:4/batch:256 [verify amortised]"].rstrip(" |").endswith("0.921")


def test_committed_cursor_ab_archive(tmp_path):
    """The 2026-12-06 A/B as scripts/gpu_ab.sh returned it (one archive, three runs of each build): the ratios the
    experiments README quotes for the GDN cursor move (landed) and the per-head Mamba-2 one."""
    import tarfile
    with tarfile.open(ROOT / "benchmarks" / "experiments" / "cursor_fcl_ab.5fb3968.h100.tar.gz") as t:
        # Python before 3.11.4 (Debian 12's 3.11.2) has no extraction filters; the archive is ours.
        t.extractall(tmp_path, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))

    def runs(name):
        return [str(tmp_path / "ab" / f"{name}.{i}.json") for i in (1, 2, 3)]

    gdn = bench_table.ab_table([runs("bench_gdn_cuda"), runs("bench_gdn_cuda_mid")],
                               pattern=r"^replay/inner/fp32/K16/nonflush/batch:1$")
    assert gdn.rstrip(" |\n").endswith("0.972")
    m2 = bench_table.ab_table([runs("bench_mamba2_cuda"), runs("bench_mamba2_cuda_ph"), runs("bench_mamba2_cuda_fcl")],
                              pattern=r"^replay/fp32/K16/nonflush/batch:256$")
    assert "| 0.959 | 0.999 |" in m2


def test_committed_flush_staged_archive(tmp_path):
    """The staged fp32 flush's H200 A/B (benchmarks/experiments/flush_staged_call2.*): the flush ratio the experiments
    README quotes at K16 batch 256, and the amortised step it did not move."""
    import tarfile
    with tarfile.open(ROOT / "benchmarks" / "experiments" / "flush_staged_call2.d8af08d.h200.tar.gz") as t:
        t.extractall(tmp_path, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))

    def runs(name):
        return [str(tmp_path / "ab" / f"{name}.{i}.json") for i in (1, 2, 3)]

    builds = [runs("bench_mamba2_cuda"), runs("bench_mamba2_cuda_stg")]
    flush = bench_table.ab_table(builds, pattern=r"^replay_g/fp32/K16/flush/batch:256$")
    assert flush.rstrip(" |\n").endswith("0.956")
    amortised = bench_table.ab_table(builds, pattern=r"^replay_g/fp32/K16/amortised/batch:256$")
    assert amortised.rstrip(" |\n").endswith("1.002")


def test_committed_eager_verify_archive(tmp_path):
    """The eager speculative verify's H100 A/B (benchmarks/experiments/eager_verify_ab.*): the eager verify is a row of
    its own, and the ratios docs/gpu_results.md quotes (Mamba-2 kept, GDN level) come from the archive."""
    import tarfile
    with tarfile.open(ROOT / "benchmarks" / "experiments" / "eager_verify_ab.e626d77.h100.tar.gz") as t:
        t.extractall(tmp_path, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))

    def runs(name):
        return [str(tmp_path / "ab" / f"{name}.{i}.json") for i in (1, 2)]

    m2 = bench_table.ab_table([runs("bench_spec_cuda_m2old"), runs("bench_spec_cuda"), runs("bench_spec_cuda_m2cap6")],
                              pattern=r"^mamba2/T:4/batch:256")
    eager = [ln for ln in m2.splitlines() if "[eager verify]" in ln]
    assert len(eager) == 1 and "| 2019.3 / 2019.2 | 1940.7 / 1940.7 |" in eager[0] and "| 0.961 | 0.964 |" in eager[0]
    gdn = bench_table.ab_table([runs("bench_spec_cuda_gdnold"), runs("bench_spec_cuda_g"), runs("bench_spec_cuda_gdncap7")],
                               pattern=r"^gdn/T:4/batch:256")
    assert "| 1.000 | 0.995 |" in [ln for ln in gdn.splitlines() if "[eager verify]" in ln][0]


def test_spec_table_shows_the_fan_out_ceiling():
    """bench_spec_cuda at 971a251 (H100): the fan-out ceiling in the header and the eager baseline's share of it in the
    last column (docs/gpu_results.md quotes 92% of copy, 101% of fan-out); files from before it show a dash there."""
    out = bench_table.spec_table(str(ROOT / "benchmarks" / "runs" / "spec-bench.971a251.h100.json"))
    assert "fan-out (1 read + 4 writes) 2771 GB/s" in out
    assert any(ln.startswith("| mamba2 | 256 | 4 | 456.4 |") and ln.endswith("| 92% | 101% |") for ln in out.splitlines())
    # a0268c4 (H200): the ceiling kernel tries four variants and names the one it kept
    h200 = bench_table.spec_table(str(ROOT / "benchmarks" / "runs" / "spec-bench.a0268c4.h200.json"))
    assert "fan-out (1 read + 4 writes) 3774 GB/s (loads 1, stores wb)" in h200
    assert "(loads" not in out
    old = bench_table.spec_table(str(ROOT / "benchmarks" / "experiments" / "gdn_verify_mma.cap.1.h200.json"))
    gdn_rows = [ln for ln in old.splitlines() if ln.startswith("| gdn |")]
    assert gdn_rows and all(ln.endswith("| — |") for ln in gdn_rows)


def test_spec_runs_name_their_hist(tmp_path):
    """bench_spec_cuda --hist=ring flushes early against the power-of-two ring, not interval + T: the spec table's
    header and the verify's target rows say which; older runs (no "hist" key, or "interval + T") read as before."""
    src = RUNS / "spec-bench.3d76c5e.h200.json"
    assert "hist = interval + T, acceptance" in bench_table.spec_table(str(src))
    d = json.loads(src.read_text())
    d["context"]["hist"] = "ring"
    ring = tmp_path / "ring.json"
    ring.write_text(json.dumps(d))
    assert "hist = ring (the power-of-two ring), acceptance" in bench_table.spec_table(str(ring))
    rows = target_rows(bench_table.targets_table(*H200_RUNS[:2], str(ring)))
    assert "12: gdn: replay verify ≤ 1.1x the standard replay step (hist = the power-of-two ring)" in rows
    assert "12: mamba2: replay verify ≤ 320 µs (hist = the power-of-two ring)" in rows
    assert "12: commit (replay rows): < 3 µs per step" in rows
    assert not any("hist" in k for k in target_rows(bench_table.targets_table(*H200_RUNS)))


def test_help_prints_the_usage():
    r = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--ab [--filter REGEX]" in r.stdout


# ---- --targets: issues 10-12's speed targets against one run of each benchmark ----

RUNS = ROOT / "benchmarks" / "runs"
H200_RUNS = [str(RUNS / n) for n in ("mamba2-bench.72c6137.h200.json", "gdn-bench.3d76c5e.h200.json",
                                     "spec-bench.3d76c5e.h200.json")]


def target_rows(out, floors=False):
    """target text -> (ours, verdict), or (ours, at the DRAM floor, verdict), of a --targets table."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) == 7 and cells[1] in ("10", "11", "12"):
            rows[f"{cells[1]}: {cells[2]}"] = (cells[3], cells[4], cells[5]) if floors else (cells[3], cells[5])
    return rows


def test_targets_of_committed_h200_runs():
    out = bench_table.targets_table(*H200_RUNS)
    rows = target_rows(out)
    assert len(rows) == 26 and "8 of 26 targets met." in out
    assert rows["10: eager fp32: ≥ 90% of the copy ceiling"] == ("546.2 µs, 92.2%", "met")
    assert rows["10: replay fp32 K16 amortised: ≤ 290 µs"] == ("326.8 µs", "**missed**")
    assert rows["11: interval 32: inner-product route faster than reconstruct (crossover reported)"][0].endswith(
        "inner faster from K4")
    assert rows["12: commit (replay rows): < 3 µs per step"] == ("2.38 µs", "met")
    assert "indicative" not in out  # all three runs are H200 runs


def test_targets_floor_column(tmp_path):
    # The floor is the case's modelled bytes at the faster ceiling of its own run: Mamba-2's replay amortised step
    # moves 1.192 GB and that run's copy ceiling (4276 GB/s) is the faster. A time target under its floor, and a ratio
    # that needs the faster step nearer its floor than the slower, are marked short; shares of a ceiling have none.
    rows = target_rows(bench_table.targets_table(*H200_RUNS), floors=True)
    assert rows["10: replay fp32 K16 amortised: ≤ 290 µs"] == ("326.8 µs", "278.8 µs", "**missed**")
    assert rows["10: replay fp32 K16 amortised: ≥ 1.9x eager fp32"][1] == "1.81x (short)"
    assert rows["11: replay fp32 K16 amortised: ≥ 1.75x eager fp32"][1] == "1.78x"
    assert rows["12: mamba2: replay verify ≥ 4.5x faster than the eager speculative baseline"][1] == "3.99x (short)"
    assert rows["10: eager fp32: ≥ 90% of the copy ceiling"][1] == "-"
    assert rows["12: commit (replay rows): < 3 µs per step"][1] == "-"
    # Computed from the bytes, not copied: twice the replay's modelled bytes doubles its floor and makes it short.
    d = json.loads(pathlib.Path(H200_RUNS[1]).read_text())
    for b in d["benchmarks"]:
        if b["name"].startswith("replay/inner/fp32/K16/amortised/batch:256/"):
            b["bytes"] *= 2
    g = tmp_path / "g.json"
    g.write_text(json.dumps(d))
    rows = target_rows(bench_table.targets_table(H200_RUNS[0], str(g), H200_RUNS[2]), floors=True)
    assert rows["11: replay fp32 K16 amortised: ≤ 150 µs"] == ("174.9 µs", "277.0 µs (short)", "**missed**")
    # A speculative run without the verify's byte counters is refused by name, not given a floor of nothing.
    d = json.loads(pathlib.Path(H200_RUNS[2]).read_text())
    for b in d["benchmarks"]:
        b.pop("bytes_eager_verify", None)
    sp = tmp_path / "sp.json"
    sp.write_text(json.dumps(d))
    with pytest.raises(ValueError, match=r"sp\.json: case 'mamba2/T:4/batch:256' has no counter 'bytes_eager_verify'"):
        bench_table.targets_table(*H200_RUNS[:2], str(sp))


def corrupted_copy(src, dst, case, factor=None):
    """A copy of a committed run with one case's median time multiplied by `factor`, or with the case removed."""
    d = json.loads(pathlib.Path(src).read_text())
    rows = []
    for b in d["benchmarks"]:
        if b["name"].startswith(case + "/iterations:") and b.get("aggregate_name") == "median":
            if factor is None:
                continue
            b = dict(b, real_time=b["real_time"] * factor)
        rows.append(b)
    d["benchmarks"] = rows
    dst.write_text(json.dumps(d))
    return str(dst)


def test_targets_turn_on_the_measured_times(tmp_path):
    # The verdicts are computed, not copied: a slower eager step falls under the copy-ceiling target, and a faster
    # replay step meets the one it missed.
    m = corrupted_copy(H200_RUNS[0], tmp_path / "m.json", "eager/fp32/batch:256", factor=1.2)
    rows = target_rows(bench_table.targets_table(m, *H200_RUNS[1:]))
    assert rows["10: eager fp32: ≥ 90% of the copy ceiling"][1] == "**missed**"
    g = corrupted_copy(H200_RUNS[1], tmp_path / "g.json", "replay/inner/fp32/K16/amortised/batch:256", factor=0.8)
    rows = target_rows(bench_table.targets_table(H200_RUNS[0], g, H200_RUNS[2]))
    assert rows["11: replay fp32 K16 amortised: ≤ 150 µs"] == ("139.9 µs", "met")


def test_targets_refuse_a_run_without_a_case(tmp_path):
    g = corrupted_copy(H200_RUNS[1], tmp_path / "cut.json", "replay/inner/fp32/K32/amortised/batch:256")
    with pytest.raises(ValueError, match=r"cut\.json has no median row for case 'replay/inner/fp32/K32/amortised"):
        bench_table.targets_table(H200_RUNS[0], g, H200_RUNS[2])
    r = subprocess.run([sys.executable, str(SCRIPT), "--targets", H200_RUNS[0], g, H200_RUNS[2]],
                       capture_output=True, text=True)
    assert r.returncode != 0 and r.stderr.count("\n") == 1 and "cut.json" in r.stderr
    r = subprocess.run([sys.executable, str(SCRIPT), "--targets", H200_RUNS[0]], capture_output=True, text=True)
    assert r.returncode != 0 and "usage" in r.stderr


def test_targets_mark_another_card_indicative():
    runs = [str(RUNS / f"{n}-bench.7768a9b.h100.json") for n in ("mamba2", "gdn", "spec")]
    out = bench_table.targets_table(*runs)
    assert out.count("read these verdicts as indicative") == 3


def test_readme_targets_table_is_the_scripts():
    # The README's "Targets at a glance" is the script's output for the files it names, unedited: a hand-edited
    # number, or a run swapped without regenerating, fails here.
    readme = (ROOT / "README.md").read_text()
    start = readme.index("**Targets at a glance.**")
    end = readme.index(" targets met.", start) + len(" targets met.")
    block = readme[readme.index("\n- `", start) + 1:end]
    paths = [line.split("`")[1] for line in block.splitlines() if line.startswith("- `")]
    assert len(paths) == 3
    assert block == bench_table.targets_table(*(str(ROOT / p) for p in paths)).replace(str(ROOT) + "/", "")


def test_readme_published_comparison_quotes_the_targets_table():
    # "Beside the published kernels" repeats our times by hand next to the published ones: each must be a time the
    # generated targets block above it prints, so regenerating that block without updating this table fails here.
    readme = (ROOT / "README.md").read_text()
    targets = readme[readme.index("**Targets at a glance.**"):readme.index(" targets met.")]
    start = readme.index("**Beside the published kernels**")
    rows = [ln for ln in readme[start:readme.index("**What limits the missed targets**", start)].splitlines()
            if ln.startswith("| ") and not ln.startswith("| step")]
    assert len(rows) == 8
    for row in rows:
        ours = row.split("|")[2]
        times = re.findall(r"\d+\.\d", ours)
        assert times, row
        for t in times:
            assert re.search(rf"(?<![\d.]){re.escape(t)}(?![\d])", targets), f"{t} µs ({row.split('|')[1].strip()}) is not in the targets block"
