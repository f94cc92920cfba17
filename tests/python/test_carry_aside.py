"""scripts/carry_aside.sh in a throwaway git repository: `out` moves the named folders aside (and says what the tree
then carries), `in` brings them back byte for byte, and neither overwrites anything (an `out` while something is still
aside, an `in` where a path exists on both sides).

    python3 -m pytest tests/python/test_carry_aside.py
"""
import os
import pathlib
import shutil
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "carry_aside.sh"


def repo(tmp_path):
    r = tmp_path / "repo"
    (r / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, r / "scripts" / "carry_aside.sh")
    (r / "benchmarks").mkdir()
    (r / "benchmarks" / "run.json").write_bytes(b"x" * (3 << 20))  # 3 MiB
    (r / "data" / "tiny_hybrid").mkdir(parents=True)
    (r / "data" / "tiny_hybrid" / "w.h5").write_bytes(b"w" * (1 << 20))
    (r / "data" / "keep.txt").write_text("stays\n")
    (r / "src.cpp").write_text("int main() {}\n")
    git = ["git", "-C", str(r), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "init"], check=True)
    return r


def run(r, tmp_path, *args):
    env = dict(os.environ, CARRY_ASIDE_DIR=str(tmp_path / "aside"))
    return subprocess.run(["bash", str(r / "scripts" / "carry_aside.sh"), *args], capture_output=True, text=True,
                          env=env)


def test_out_and_in_round_trip(tmp_path):
    r = repo(tmp_path)
    out = run(r, tmp_path, "out")
    assert out.returncode == 0, out.stderr
    assert not (r / "benchmarks").exists() and not (r / "data" / "tiny_hybrid").exists()
    assert (r / "data" / "keep.txt").exists()  # only the named folder of data/
    assert (tmp_path / "aside" / "benchmarks" / "run.json").stat().st_size == 3 << 20
    assert "docs not in the tree, skipped" in out.stdout
    assert "2 path(s) moved" in out.stdout and "the tree now carries 0.0 MiB" in out.stdout
    assert "no 'git commit -a'" in out.stdout
    st = run(r, tmp_path, "status")
    assert "aside     benchmarks" in st.stdout and "missing   docs" in st.stdout
    back = run(r, tmp_path, "in")
    assert back.returncode == 0 and "2 path(s) moved back" in back.stdout and "carries 4.0 MiB" in back.stdout
    assert (r / "data" / "tiny_hybrid" / "w.h5").read_bytes() == b"w" * (1 << 20)
    clean = subprocess.run(["git", "-C", str(r), "status", "--porcelain"], capture_output=True, text=True)
    assert clean.stdout == ""


def test_nothing_is_overwritten(tmp_path):
    r = repo(tmp_path)
    assert run(r, tmp_path, "out").returncode == 0
    (r / "benchmarks").mkdir()  # a new folder of the same name while the old one is aside
    (r / "benchmarks" / "new.json").write_text("{}")
    again = run(r, tmp_path, "out")
    assert again.returncode == 1 and "still aside from an earlier 'out'" in again.stderr
    assert (r / "benchmarks" / "new.json").exists()
    both = run(r, tmp_path, "in")
    assert both.returncode == 1 and "benchmarks exists both in the tree and in" in both.stderr
    assert (tmp_path / "aside" / "benchmarks" / "run.json").exists() and (r / "benchmarks" / "new.json").exists()


def test_bad_argument_prints_usage(tmp_path):
    r = repo(tmp_path)
    bad = run(r, tmp_path, "sideways")
    assert bad.returncode == 2 and "scripts/carry_aside.sh out" in bad.stderr


def test_bytes_counts_what_a_call_carries(tmp_path):
    # Tracked files that exist and untracked ones git does not ignore (the device carries both); not ignored ones,
    # not deleted ones. dist_pack.sh reads this for its warning.
    r = repo(tmp_path)
    (r / ".gitignore").write_text("build/\n")
    (r / "build").mkdir()
    (r / "build" / "big.o").write_bytes(b"o" * (5 << 20))
    (r / "notes.txt").write_bytes(b"n" * 1000)
    (r / "src.cpp").unlink()
    b = run(r, tmp_path, "bytes")
    assert b.returncode == 0
    lines = b.stdout.splitlines()
    script = (r / "scripts" / "carry_aside.sh").stat().st_size  # tracked too
    assert int(lines[0]) == (3 << 20) + (1 << 20) + len("stays\n") + 1000 + len("build/\n") + script
    assert lines[1:] == ["data/tiny_hybrid/w.h5 1 MiB", "benchmarks/run.json 3 MiB"]
