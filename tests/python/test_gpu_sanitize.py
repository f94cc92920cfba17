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
