"""Tests of the analysis package (issue 13) on small result files that replayssm makes during the test run: loading
(integer counts, old files with text counts), merging shards and cpu/cuda files, benchmark JSON, every plotting
function's axes and series, and the --quick reproduction end to end (every notebook executes, every figure exists).

    REPLAYSSM=build/experiments/replayssm python3 -m pytest tests/python/test_analysis.py
The binary defaults to build/experiments/replayssm; a missing binary is a failure, not a skip.
tests/python/data/bench_mamba2_cuda_sample.json: a cut of a real bench_mamba2_cuda run on the H200 (medians of
batch 1, 64, 256 at intervals 8 and 16, and the ceilings); the speculative figure reads the committed
benchmarks/bench_spec_cuda_h200.json whole.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pandas as pd
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from analysis import bench, figures, published, report, results  # noqa: E402

BENCH = os.path.join(ROOT, "tests/python/data/bench_mamba2_cuda_sample.json")
SPEC = os.path.join(ROOT, "benchmarks/bench_spec_cuda_h200.json")  # the committed H200 run of issue 12
TINY = ["--set", "synth.preset=custom", "--set", "synth.family=mamba2", "--set", "synth.H=4", "--set", "synth.P=8",
        "--set", "synth.N=16", "--set", "synth.G=2", "--set", "synth.steps=64", "--set", "synth.seqs=2",
        "--set", "synth.slow_head_frac=0.25", "--set", "metrics.vocab=64"]
SWEEP = ["--set", "scheme.decoder=eager,replay,dual", "--set", "scheme.state_format=fp32,bf16",
         "--set", "scheme.interval=4,8"]


def replayssm() -> str:
    b = os.environ.get("REPLAYSSM", os.path.join(ROOT, "build/experiments/replayssm"))
    if not os.access(b, os.X_OK):
        pytest.fail(f"no replayssm binary at {b} (build it, or set REPLAYSSM)")
    return b


def cli(*args, cwd=ROOT):
    p = subprocess.run([replayssm(), *args], cwd=cwd, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p


@pytest.fixture(scope="session")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("results")
    cfg = d / "empty.ini"
    cfg.write_text("[run]\n")
    out = {"full": str(d / "full.h5"), "s0": str(d / "s0.h5"), "s1": str(d / "s1.h5"), "cuda": str(d / "cuda.h5")}
    cli("run", str(cfg), "-o", out["full"], "--quiet", *TINY, *SWEEP)
    cli("run", str(cfg), "-o", out["s0"], "--quiet", "--shard", "0/2", *TINY, *SWEEP)
    cli("run", str(cfg), "-o", out["s1"], "--quiet", "--shard", "1/2", *TINY, *SWEEP)
    cli("run", str(cfg), "-o", out["cuda"], "--quiet", *TINY, "--set", "scheme.decoder=replay",
        "--set", "scheme.backend=cpu,cuda")
    # An older file: counts stored as text, as before issue 13.
    out["old"] = str(d / "old.h5")
    with h5py.File(out["full"], "r") as src, h5py.File(out["old"], "w") as dst:
        for k, v in src.attrs.items():
            dst.attrs[k] = v
        src.copy("runs", dst)
        g = dst.create_group("summary")
        for name, ds in src["summary"].items():
            v = ds[()]
            if name in ("interval", "buffer_len"):
                g.create_dataset(name, data=np.array([str(x).encode() for x in v], dtype=h5py.string_dtype()))
            else:
                g.create_dataset(name, data=v)
        for rid in dst["runs"]:
            dst["runs"][rid].attrs["interval"] = str(dst["runs"][rid].attrs["interval"])
    return out


def test_summary_types_and_runs(files):
    s = results.summary_frame(files["full"])
    assert len(s) == 12 and s["interval"].dtype == np.int64 and s["buffer_len"].dtype == np.int64
    assert s["state_format"].dtype == object and set(s["state_format"]) == {"fp32", "bf16"}
    ok = results.completed(s)
    assert (ok["out_rel_err_mean"] > 0).all()
    assert set(ok[ok["decoder"] == "replay"]["interval"]) == {4, 8}
    x = results.open_summary(files["full"])
    assert x.sizes["run"] == 12 and x["interval"].dtype == np.int64 and "git_commit" in x.attrs
    rid = ok[(ok["decoder"] == "replay") & (ok["state_format"] == "bf16") & (ok["interval"] == 8)]["run"].iloc[0]
    r = results.open_run(files["full"], rid)
    assert r["out_rel_err_mean"].dims == ("step",) and r.sizes["step"] == 64
    assert r.attrs["interval"] == 8 and isinstance(r.attrs["interval"], int)
    assert r["out_rel_err_by_position"].dims == ("position",) and r.sizes["position"] == 8
    assert any(v.startswith("state_rel_err_checkpoint") and r[v].dims == ("flush_step",) for v in r.data_vars)
    with pytest.raises(KeyError):
        results.open_run(files["full"], "run_9999")


def test_old_files_cast_on_load(files):
    old, new = results.summary_frame(files["old"]), results.summary_frame(files["full"])
    assert old["interval"].dtype == np.int64
    assert list(old["interval"]) == list(new["interval"])
    rid = results.run_ids(files["old"])[0]
    assert results.open_run(files["old"], rid).attrs["interval"] == results.open_run(files["full"], rid).attrs["interval"]


def test_merge_shards_and_backends(files):
    m = results.merge_results([files["s0"], files["s1"]])
    full = results.summary_frame(files["full"])
    assert len(m) == len(full)
    key = ["decoder", "state_format", "interval"]
    assert sorted(map(tuple, m[key].values.tolist())) == sorted(map(tuple, full[key].values.tolist()))
    assert (results.completed(m)["status"] == "ok").sum() == (full["status"] == "ok").sum()
    assert set(m["file"]) == {files["s0"], files["s1"]}
    # A rerun of the same points does not duplicate them; cpu and cuda rows stay apart.
    assert len(results.merge_results([files["full"], files["s0"]])) == len(full)
    c = results.merge_results([files["cuda"], files["full"]])
    assert set(c["backend"]) == {"cpu", "cuda"}
    cuda = c[c["backend"] == "cuda"]
    assert len(cuda) > 0 and (cuda["status"] == "skipped").all()  # no device, or no CUDA build, here


def test_newest_benchmark_per_family(tmp_path):
    # The per-commit runs (benchmarks/runs/<family>-bench.<commit>.<gpu>.json) count as a family's benchmark beside
    # bench_<family>_cuda*.json; the newest by context date wins, and a run at another preset never stands in.
    with open(BENCH) as fh:
        doc = json.load(fh)

    def write(name, date, preset=None):
        d = json.loads(json.dumps(doc))
        d["context"]["date"] = date
        if preset:
            d["context"]["preset"] = preset
        path = tmp_path / "runs" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(d))
        return str(path)

    old = write("bench_mamba2_cuda_h200.json", "2026-12-01T00:00:00+00:00")
    new = write("mamba2-bench.abc1234.h200.json", "2026-12-03T00:00:00+00:00", "nemotron3-super-120b")
    other = write("mamba2-bench-nemotron3-nano-4b.def5678.h200.json", "2026-12-04T00:00:00+00:00", "nemotron3-nano-4b")
    odd = write("mamba2-bench.fff0000.h200.json", "2026-12-05T00:00:00+00:00", "nemotron3-nano-4b")
    found = bench.find_benchmarks(str(tmp_path))
    assert other not in found and set(found) == {old, new, odd}
    assert found[0] == odd  # newest first
    assert bench.newest_by_family(found) == {"mamba2": new}  # odd names another preset in its context
    assert bench.newest_by_family([old]) == {"mamba2": old}  # no preset in the context: taken
    # Speculative runs: the newest file holding each family's cases; the per-family reader never takes one.
    with open(SPEC) as fh:
        sdoc = json.loads(fh.read())
    both = tmp_path / "bench_spec_cuda_h200.json"
    both.write_text(json.dumps(sdoc))
    gdn_only = json.loads(json.dumps(sdoc))
    gdn_only["context"]["date"] = "2026-12-06T00:00:00+00:00"
    gdn_only["benchmarks"] = [b for b in gdn_only["benchmarks"] if b["name"].startswith("gdn/")]
    for b in gdn_only["benchmarks"]:
        if "us_verify_amortised" in b:
            b["us_verify_amortised"] = 123.0
    g = tmp_path / "runs" / "spec-bench-gdn.abc1234.h200.json"
    g.write_text(json.dumps(gdn_only))
    (tmp_path / "runs" / "spec-bench-gdn-perhead.abc1234.h200.json").write_text(json.dumps(gdn_only))
    found = bench.find_benchmarks(str(tmp_path))
    assert bench.newest_by_family(found) == {"mamba2": new}
    files = bench.newest_spec_by_family(found)
    assert files == {"gdn": str(g), "mamba2": str(both)}
    spec, ctx = bench.read_spec_benchmarks(files)
    assert set(spec["family"]) == {"mamba2", "gdn"} and len(spec) == 16 and ctx["p"] == pytest.approx(0.7)
    assert (spec[spec["family"] == "gdn"]["us_verify_amortised"] == 123.0).all()
    assert (spec[spec["family"] == "mamba2"]["us_verify_amortised"] != 123.0).all()


def test_benchmark_json():
    df, ctx = bench.read_benchmark(BENCH)
    assert ctx["gpu"] == "NVIDIA H200" and isinstance(ctx["copy_ceiling_GBps"], float)
    st = bench.step_times(df)
    r = st[(st["scheme"] == "replay") & (st["state_format"] == "fp32") & (st["interval"] == 16) &
           (st["kind"] == "amortised") & (st["batch"] == 256)]
    assert len(r) == 1 and r["time_us"].iloc[0] > 0
    assert set(df[df["scheme"] == "ceiling"]["case"]) == {"copy_d2d", "read_only"}
    assert (df["family"] == "mamba2").all()
    p = bench.parse_name("replay/inner/fp32/K16/flush/batch:64/iterations:10/repeats:5/manual_time_median")
    assert (p["route"], p["interval"], p["kind"], p["batch"], p["stat"]) == ("inner", 16, "flush", 64, "median")
    assert bench.find_benchmarks(os.path.dirname(BENCH)) == [BENCH]
    p = bench.parse_name("replay_g_h4/fp32/K16/nonflush/batch:256/iterations:10/repeats:5/manual_time_median")
    assert (p["scheme"], p["variant"], p["state_format"]) == ("replay", "g_h4", "fp32")
    p = bench.parse_name("eager_p/bf16/batch:256/iterations:10/repeats:5/manual_time_median")  # the pipelined kernel
    assert (p["scheme"], p["variant"], p["state_format"], p["batch"]) == ("eager", "p", "bf16", 256)
    # The committed H200 run holds the grouped, pipelined and forced-shape variants too: figures and the report see
    # the kernel the decoders run, one row per case (the grouped one for Mamba-2 replay / dual where it was timed,
    # the per-head one elsewhere), every variant only when asked.
    h200, _ = bench.read_benchmark(os.path.join(ROOT, "benchmarks/bench_mamba2_cuda_h200.json"))
    st = bench.step_times(h200)
    case = ["scheme", "state_format", "interval", "kind", "batch"]
    assert not st.duplicated(subset=case).any()
    assert set(st["variant"].dropna()) == {"g"} and set(st[st["variant"] == "g"]["scheme"]) == {"replay", "dual"}
    assert st[st["scheme"] == "eager"]["variant"].isna().all()
    every = bench.step_times(h200, variants=True)
    assert {"g", "g_h4", "p"} <= set(every["variant"].dropna())

    def one(t, **sel):
        m = np.ones(len(t), bool)
        for k, v in sel.items():
            m &= (t[k] == v).fillna(False).to_numpy()
        assert m.sum() == 1, sel
        return t[m].iloc[0]
    sel = dict(scheme="replay", state_format="fp32", interval=16, kind="amortised", batch=256)
    grouped = one(every[every["variant"] == "g"], **sel)
    assert one(st, **sel)["time_us"] == grouped["time_us"] != one(every[every["variant"].isna()], **sel)["time_us"]
    assert pd.isna(one(st, **dict(sel, interval=4))["variant"])  # timed per-head only: that row stays
    assert len(figures.gpu_speedup(h200).axes) == 2
    # A GDN run with the FFMA-fold tuning rows (fold:fma): the plain row of each case, not the sweep's.
    gdn, _ = bench.read_benchmark(os.path.join(ROOT, "benchmarks/runs/gdn-bench.92cdbe0.h200.json"))
    g = bench.step_times(gdn)
    assert not g.duplicated(subset=case + ["route"]).any() and not g["extra"].str.contains("fold:").any()
    r = one(g, scheme="replay", route="inner", state_format="fp32", interval=16, kind="amortised", batch=256)
    assert r["time_us"] == pytest.approx(175.6248, abs=1e-3)  # 195.5 is the fold:fma row


def test_published_entries():
    p = published.published()
    assert p["best_interval_mamba2"]["value"] == 8 and p["best_interval_gdn"]["value"] == 16
    assert all(e["source"].split(",")[0] in ("METHOD.md", "GPU.md", "KERNELS.md") for e in p.values())
    c = published.compare(1.5, p["speedup_kernel_mamba2_b256"])
    assert c["inside"] is True and abs(c["ratio"] - 1.5 / 1.635) < 1e-12


def _labels(ax):
    return ax.get_legend_handles_labels()[1]


def test_every_figure(files):
    df, _ = bench.read_benchmark(BENCH)
    s = results.summary_frame(files["full"])
    ok = results.completed(s)
    runs = {r.decoder_label: results.open_run(files["full"], r.run) for r in ok.itertuples() if r.interval == 8}

    f = figures.precision_pairs(s, recorded=s)
    assert len(f.axes) == 3 and f.axes[0].get_yscale() == "log"
    assert {"eager (synthetic)", "replay (synthetic)", "dual (synthetic)", "dual (recorded)"} <= set(_labels(f.axes[0]))
    assert any(lab.startswith("published") for lab in _labels(f.axes[0]))

    f = figures.error_accumulation(runs)
    assert len(f.axes) == 3 and f.axes[1].get_xscale() == "log"
    assert len(f.axes[0].lines) == len(runs)
    assert "√flushes (reference)" in _labels(f.axes[1])
    assert set(figures.growth_slopes(runs).index) == set(runs)

    f = figures.interval_sweep(s, df)
    assert len(f.axes) == 2
    assert any("replay fp32" in lab for lab in _labels(f.axes[0]))
    assert any("mamba2 replay fp32" in lab for lab in _labels(f.axes[1]))
    assert [t.get_text() for t in f.axes[1].texts if t.get_text().startswith("no data")] == []
    f = figures.interval_sweep(s, None)
    assert any(t.get_text().startswith("no data: GPU benchmark JSON") for t in f.axes[1].texts)
    presets = bench.read_interval_sweeps(os.path.join(ROOT, "benchmarks"))  # every geometry preset, committed
    assert presets is not None and presets["preset"].nunique() == 7
    f = figures.interval_sweep(s, df, presets=presets)
    assert sum("eager" in lab and "µs" in lab for lab in _labels(f.axes[1])) == 7
    assert "every preset, modelled (colours as right)" in _labels(f.axes[0])

    f = figures.gpu_speedup(df)
    assert len(f.axes) == 2 and any("K=16" in lab for lab in _labels(f.axes[0]))
    assert "measured ceiling" in _labels(f.axes[1])
    assert sum(lab.startswith("published") for lab in _labels(f.axes[0])) == 3
    f = figures.gpu_speedup(None)
    assert all(any(t.get_text().startswith("no data") for t in a.texts) for a in f.axes)

    f = figures.spec_verify(None)  # no speculative JSON: the published points, and the note
    assert len(f.axes) == 6 and any("published: eager verify" in lab for lab in _labels(f.axes[0]))
    assert any(t.get_text().startswith("no data") for t in f.axes[1].texts)

    f = figures.flush_arith({"fp32": runs["replay-fp32-K8"], "tf32": runs["replay-bf16-K8"]})
    assert len(f.axes) == 2 and len(f.axes[0].get_lines()) >= 2 and f.axes[0].get_yscale() == "log"
    assert any(lab.startswith("published tf32") for lab in _labels(f.axes[0]))

    f = figures.backend_diff(results.summary_frame(files["cuda"]))
    assert len(f.axes) == 2 and any(t.get_text().startswith("no data") for t in f.axes[0].texts)
    fake = runs["replay-fp32-K8"].assign(backend_diff_rel_max=runs["replay-fp32-K8"]["out_rel_err_mean"],
                                         backend_diff_ulps_max=runs["replay-fp32-K8"]["out_rel_err_mean"] * 0 + 2)
    f = figures.backend_diff(None, {"replay-fp32-K8": fake})
    assert [t.get_text() for t in f.axes[0].get_xticklabels()] == ["replay-fp32-K8"]
    assert set(figures.FIGURES) == {"precision_pairs", "error_accumulation", "interval_sweep", "gpu_speedup",
                                    "spec_verify", "flush_arith", "backend_diff"}


def test_spec_benchmark_and_figure():
    spec, ctx = bench.read_spec_benchmark(SPEC)
    assert ctx["gpu"] == "NVIDIA H200" and ctx["p"] == pytest.approx(0.7)
    assert len(spec) == 16 and set(spec["family"]) == {"mamba2", "gdn"} and set(spec["batch"]) == {64, 256}
    assert sorted(set(spec["window"])) == [2, 4, 6, 8]
    # us_per_token is the amortised verify over the mean committed count (the flush rule at the run's p).
    assert np.allclose(spec["us_per_token"] * spec["mean_committed"], spec["us_verify_amortised"], rtol=1e-9)
    assert bench.newest_spec_by_family([SPEC]) == {"gdn": SPEC, "mamba2": SPEC}
    f = figures.spec_verify(spec, ctx)
    assert len(f.axes) == 6 and "H200" in f._suptitle.get_text()
    for ax, fam in ((f.axes[0], "mamba2"), (f.axes[3], "gdn")):
        assert ax.get_yscale() == "log" and not [t for t in ax.texts if t.get_text().startswith("no data")]
        g = spec[(spec["family"] == fam) & (spec["batch"] == 256)].sort_values("window")
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        assert {"replay verify, b=256", "eager spec. verify, b=256", "standard replay step, b=256",
                "replay verify, b=64", "published: eager verify", "published: replay verify",
                "published: standard step"} <= set(lines)
        assert list(lines["eager spec. verify, b=256"].get_xdata()) == [2, 4, 6, 8]
        assert np.allclose(lines["replay verify, b=256"].get_ydata(), g["us_verify_amortised"])
    tok = {ln.get_label(): ln for ln in f.axes[1].get_lines()}
    assert np.allclose(tok["published replay verify ÷ 2.53 committed"].get_ydata(), [353 / 2.533])
    assert len(f.axes[2].get_lines()) == 3 and f.axes[2].get_lines()[0].get_ydata()[1] < \
        f.axes[2].get_lines()[2].get_ydata()[1]  # replay verify moves fewer bytes per token than a standard step
    got = {r["id"]: r["ours"] for r in report.ours("/nonexistent", {}, {"mamba2": SPEC, "gdn": SPEC})}
    m4 = spec[(spec.family == "mamba2") & (spec.batch == 256) & (spec.window == 4)]
    assert got["us_mamba2_spec_replay_T4_b256"] == pytest.approx(float(m4["us_verify_amortised"].iloc[0]))
    assert {"us_gdn_spec_standard_T4_b256", "spec_eager_verify_cost_T6"} <= set(got)


def test_bench_fla_refuses_bad_input_and_keeps_the_json(tmp_path):
    script = os.path.join(ROOT, "experiments/bench_fla.py")
    run = lambda *args: subprocess.run([sys.executable, script, *args], capture_output=True, text=True)  # noqa: E731
    p = run("--json", str(tmp_path / "missing.json"))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "missing.json" in p.stderr
    doc = tmp_path / "gdn.json"
    doc.write_text(json.dumps({"context": {"preset": "nemotron3-super-120b"}, "benchmarks": []}))
    p = run("--json", str(doc))
    assert p.returncode == 2 and "not a GDN preset" in p.stderr
    p = run("--json", str(doc), "--preset", "qwen35-4b", "--batches", "1,x")
    assert p.returncode == 2 and "--batches" in p.stderr
    before = doc.read_text()
    p = run("--json", str(doc), "--preset", "qwen35-4b")  # without a GPU (or fla-core) it must change nothing
    if p.returncode != 0:
        assert p.stderr.count("\n") == 1 and doc.read_text() == before


def test_interval_sweep_rows():
    rows = report.ours("/nonexistent", {}, None, [os.path.join(ROOT, "benchmarks")])
    best = [r for r in rows if r["id"].startswith("best_interval_")]
    assert len(best) == 7 and {r["id"] for r in best} == {"best_interval_mamba2", "best_interval_gdn"}
    assert all(r["ours"] in (4, 8, 16, 32) and "batch 256" in r["what"] for r in best)


def test_quick_reproduction(tmp_path):
    out = tmp_path / "report"
    env = dict(os.environ, REPLAYSSM=replayssm(), OMP_WAIT_POLICY="passive")
    p = subprocess.run([os.path.join(ROOT, "scripts/reproduce.sh"), "--quick", "--out", str(out),
                        "--bench", os.path.dirname(BENCH), "--bench", SPEC], cwd=ROOT, capture_output=True, text=True,
                       env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    for stage in ("stage 1/4", "stage 2/4", "stage 3/4", "stage 4/4"):
        assert stage in p.stderr
    for name in figures.FIGURES:
        for ext in ("png", "svg"):
            path = out / "figures" / f"{name}.{ext}"
            assert path.exists() and path.stat().st_size > 0, path
    assert len(list((out / "notebooks").glob("*.ipynb"))) == 7
    report = (out / "report.md").read_text()
    assert "| quantity | ours | published | ratio |" in report and "flush_arith.ini" in report
    assert "bench_mamba2_cuda_sample.json" in report
    assert "bench_spec_cuda_h200.json" in report and "GDN replay speculative verify" in report
    assert "## End to end: the tiny hybrid language model" in report and "| replay-bf16-K8 |" in report
    ran = {p.stem for p in (out / "results").glob("*.h5")}
    assert {"spec_accuracy", "e2e_kl", "recorded_tiny_hybrid_layer00_mamba2", "recorded_tiny_hybrid_layer04_gdn"} <= ran
