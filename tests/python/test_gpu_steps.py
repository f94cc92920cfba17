"""scripts/gpu_steps.sh with stand-in steps (no GPU needed): steps run in order with their logs under $OUT, a step
that overruns the budget is cut and named, the ones after it are listed as not started, a failing step fails the run
without stopping the next, and bad arguments are refused before anything runs.

    python3 -m pytest tests/python/test_gpu_steps.py
"""
import os
import pathlib
import shutil
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_steps.sh"


def run(tmp_path, *args):
    # A copy in a folder of its own: the script works from its repository root, where a real dist/ may hold a pack.
    root = tmp_path / "root"
    (root / "scripts").mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPT, root / "scripts" / "gpu_steps.sh")
    shutil.copy(ROOT / "scripts" / "dist_env.sh", root / "scripts" / "dist_env.sh")
    env = dict(os.environ, OUT=str(tmp_path / "out"), PATH="/usr/bin:/bin")
    return subprocess.run(["bash", str(root / "scripts" / "gpu_steps.sh"), *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_steps_run_in_order_with_their_logs(tmp_path):
    r = run(tmp_path, "-b", "30", "first=echo one; echo two >&2", "second=exit 3", "third=echo three")
    assert r.returncode == 1  # the second step failed; the third still ran
    out = tmp_path / "out"
    assert (out / "first.log").read_text() == "one\ntwo\n"
    assert (out / "third.log").read_text() == "three\n"
    steps = (out / "steps.txt").read_text()
    assert "first: exit 0 in" in steps and "second: exit 3 in" in steps and "third: exit 0 in" in steps
    assert steps == r.stdout


def test_a_step_past_the_budget_is_cut_and_the_rest_not_started(tmp_path):
    r = run(tmp_path, "-b", "3", "-m", "1", "slow=echo started; sleep 20", "after=echo never")
    assert r.returncode == 1
    assert "slow: timed out after" in r.stdout
    assert "after: not started" in r.stdout
    assert (tmp_path / "out" / "slow.log").read_text() == "started\n"  # what it wrote before the cut is kept
    assert not (tmp_path / "out" / "after.log").exists()


def test_all_steps_passing_is_exit_zero(tmp_path):
    r = run(tmp_path, "a=true", "b=test -n \"$SANITIZE_LOG_DIR\"")
    assert r.returncode == 0, r.stdout + r.stderr


def test_bad_arguments_are_refused_before_anything_runs(tmp_path):
    for args, message in [(["no_equals"], "is not NAME=COMMAND"),
                          (["bad name=true"], "is not NAME=COMMAND"),
                          (["a=true", "a=false"], "step name 'a' given twice"),
                          (["-b", "0", "a=true"], "-b: seconds must be a positive integer"),
                          ([], "NAME=COMMAND")]:
        r = run(tmp_path, *args)
        assert r.returncode == 2 and message in r.stderr, (args, r.stderr)
        assert not (tmp_path / "out" / "steps.txt").exists()


def test_the_pack_is_unpacked_once_and_its_libraries_put_on_the_path(tmp_path):
    # scripts/dist_env.sh, which the device-side scripts share: a stand-in dist/unpack.sh that restores bin/ and lib/.
    dist = tmp_path / "root" / "dist"
    dist.mkdir(parents=True)
    (dist / "pack.tar.xz").write_bytes(b"")
    (dist / "unpack.sh").write_text("#!/usr/bin/env bash\ncd \"$(dirname \"$0\")\"\nmkdir bin lib\necho unpacked\n")
    (dist / "unpack.sh").chmod(0o755)
    r = run(tmp_path, "libs=echo \"$LD_LIBRARY_PATH\"")
    assert r.returncode == 0, r.stderr
    assert "unpacked" in r.stderr and (dist / "bin").is_dir()
    assert (tmp_path / "out" / "libs.log").read_text().startswith(str(dist / "lib"))
    (dist / "bin").rmdir()
    (dist / "unpack.sh").write_text("#!/usr/bin/env bash\nexit 1\n")
    r = run(tmp_path, "never=true")
    assert r.returncode == 1 and "dist/unpack.sh failed" in r.stderr
    assert not (tmp_path / "out" / "never.log").exists()


def test_more_files_than_a_call_returns_go_into_one_archive(tmp_path):
    # The device returns at most 8 files of $OUT: the fourth step takes the count past it (3 logs + steps.txt + 5 data
    # files), so everything but steps.txt moves into steps.tar.gz, and the step after it joins the archive too.
    r = run(tmp_path, "a=echo a", "b=echo b", "c=echo c",
            "many=mkdir -p \"$OUT/x/y/z\"; for i in 1 2 3 4; do echo $i > \"$OUT/d$i.json\"; done; echo deep > \"$OUT/x/y/z/f\"",
            "after=echo after")
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["steps.tar.gz", "steps.txt"]
    listing = subprocess.run(["tar", "tzf", str(out / "steps.tar.gz")], capture_output=True, text=True).stdout.split()
    names = {n.lstrip("./") for n in listing if not n.endswith("/")}
    assert names == {"a.log", "b.log", "c.log", "many.log", "after.log", "d1.json", "d2.json", "d3.json", "d4.json",
                     "x/y/z/f"}
    steps = (out / "steps.txt").read_text()
    assert "after: exit 0 in" in steps and steps.count("all but steps.txt are in steps.tar.gz") == 1


def test_few_files_stay_as_they_are(tmp_path):
    r = run(tmp_path, "a=echo a", "b=echo b")
    assert r.returncode == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.log", "b.log", "steps.txt"]


def test_the_summary_names_the_commit_the_programs_were_built_from(tmp_path):
    # On the device the checkout's git state need not be the build's: the commit comes from dist/bin/replayssm.
    bin_dir = tmp_path / "root" / "dist" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "replayssm").write_text("#!/bin/sh\necho 'replayssm 0.1.0 (git 3d76c5e7cfca1f68627d03a22a8075ba594163ab-dirty)'\n")
    (bin_dir / "replayssm").chmod(0o755)
    r = run(tmp_path, "a=true")
    assert r.returncode == 0, r.stderr
    assert "commit 3d76c5e7cf-dirty (build)" in (tmp_path / "out" / "steps.txt").read_text()
    (bin_dir / "replayssm").unlink()
    r = run(tmp_path, "a=true")
    assert "(checkout)" in (tmp_path / "out" / "steps.txt").read_text()
