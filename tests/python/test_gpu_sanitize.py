"""scripts/gpu_sanitize.sh's refusals, with stand-in test binaries (no GPU or compute-sanitizer needed): a binary with
no test matching the filter is an error, not a clean run (the script's old default, the CPU test binary, has no [gpu]
test and used to "pass" that way), and one with matching tests gets as far as needing compute-sanitizer."""
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_sanitize.sh"


def stand_in(tmp_path, names):
    # Catch2 v2's --list-test-names-only: one name per line (and an exit code that is the count).
    p = tmp_path / "tests_bin"
    p.write_text("#!/usr/bin/env bash\n" + "".join(f"echo '{n}'\n" for n in names) + f"exit {len(names)}\n")
    p.chmod(0o755)
    return str(p)


def run(tmp_path, *args, **extra_env):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SANITIZE_LOG_DIR": str(tmp_path / "logs"), **extra_env}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env)


def test_no_matching_test_is_an_error_not_a_clean_run(tmp_path):
    r = run(tmp_path, stand_in(tmp_path, []), "[gpu]")
    assert r.returncode == 2
    assert "has no tests matching [gpu]: nothing would be checked" in r.stdout
    assert "no reports" not in r.stdout


@pytest.mark.skipif(shutil.which("compute-sanitizer") is not None
                    or os.path.exists("/usr/local/cuda/bin/compute-sanitizer"),
                    reason="compute-sanitizer is installed: the stand-in would be run under it")
def test_matching_tests_get_as_far_as_the_sanitizer(tmp_path):
    r = run(tmp_path, stand_in(tmp_path, ["kernel a", "kernel b"]), "[gpu]")
    assert r.returncode == 2
    assert "compute-sanitizer not found" in r.stdout


def test_a_missing_binary_is_named(tmp_path):
    r = run(tmp_path, str(tmp_path / "nope"))
    assert r.returncode == 2 and "no GPU test binary" in r.stdout


def test_an_unknown_test_scope_is_refused_before_any_run(tmp_path):
    # A misspelt REPLAYSSM_GPU_TESTS would otherwise fail inside every kernel-level case under the sanitizer.
    r = run(tmp_path, stand_in(tmp_path, ["kernel a"]), "[gpu]", REPLAYSSM_GPU_TESTS="one_per_kernel")
    assert r.returncode == 2
    assert "REPLAYSSM_GPU_TESTS='one_per_kernel' is not a scope (all, one-per-kernel)" in r.stdout


def test_arguments_after_the_filter_reach_the_test_binary(tmp_path):
    # A case too slow under racecheck for one device call runs a section at a time: `-c "interval 16"` must reach
    # the test binary, after the filter. A stand-in compute-sanitizer records its arguments and prints a clean summary.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "compute-sanitizer"
    fake.write_text("#!/usr/bin/env bash\nprintf '%s\\n' \"$@\" > \"$SANITIZE_LOG_DIR/args.txt\"\n"
                    "echo '========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)'\n")
    fake.chmod(0o755)
    (tmp_path / "logs").mkdir()
    binary = stand_in(tmp_path, ["kernel a"])
    r = run(tmp_path, binary, "kernel a", "-c", "interval 16", SANITIZER_TOOLS="racecheck",
            PATH=f"{bindir}:/usr/bin:/bin")
    assert r.returncode == 0, r.stdout + r.stderr
    args = (tmp_path / "logs" / "args.txt").read_text().splitlines()
    assert args[args.index(binary):] == [binary, "kernel a", "-c", "interval 16", "--use-colour", "no"]
    # Without them the binary gets the filter alone, as before.
    r = run(tmp_path, binary, "kernel a", SANITIZER_TOOLS="racecheck", PATH=f"{bindir}:/usr/bin:/bin")
    assert r.returncode == 0, r.stdout + r.stderr
    args = (tmp_path / "logs" / "args.txt").read_text().splitlines()
    assert args[args.index(binary):] == [binary, "kernel a", "--use-colour", "no"]
