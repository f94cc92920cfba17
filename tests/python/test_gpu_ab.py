"""scripts/gpu_ab.sh, the device half of an A/B, run here with stand-in benchmark programs (shell scripts that write
Google Benchmark JSON): the rounds alternate the builds in order, the archive holds every run and is rewritten each
round, a failing run fails the call without stopping it, the time budget stops further rounds, and bad arguments
are refused with one line. The printed comparison lines run as they are through scripts/bench_table.py --ab."""
import json
import pathlib
import shlex
import shutil
import subprocess
import sys
import tarfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# A benchmark stand-in: appends its name and arguments to @LOG@, writes one median row (@TIME@ us), exits @EXIT@.
FAKE = """#!/usr/bin/env bash
out="" filter=""
for a in "$@"; do
  case "$a" in --benchmark_out=*) out=${a#*=} ;; --benchmark_filter=*) filter=${a#*=} ;; esac
done
echo "$(basename "$0") $filter $*" >> "@LOG@"
sleep @SLEEP@
cat > "$out" <<J
{"context": {"gpu": "fake"}, "benchmarks": [
 {"name": "x/batch:1/iterations:10/repeats:5/manual_time_median", "aggregate_name": "median",
   "real_time": @TIME@, "time_unit": "us"}]}
J
echo "ran" >&2
exit @EXIT@
"""


def fake(tmp_path, name, time=1.0, exit=0, sleep=0):
    p = tmp_path / name
    text = FAKE
    for key, value in {"@LOG@": tmp_path / "calls.log", "@TIME@": time, "@EXIT@": exit, "@SLEEP@": sleep}.items():
        text = text.replace(key, str(value))
    p.write_text(text)
    p.chmod(0o755)
    return str(p)


def run(tmp_path, *args):
    # A copy in a folder of its own: the script works from its repository root, and dist_env there would unpack a
    # real dist/pack.tar.xz into dist/bin and dist/lib (800 MB, more than a device call may carry).
    root = tmp_path / "root"
    (root / "scripts").mkdir(parents=True, exist_ok=True)
    for name in ("gpu_ab.sh", "dist_env.sh"):
        shutil.copy(ROOT / "scripts" / name, root / "scripts" / name)
    out = tmp_path / "out"
    return subprocess.run(["bash", str(root / "scripts" / "gpu_ab.sh"), *args], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "OUT": str(out), "HOME": str(tmp_path)}), out


def members(out):
    with tarfile.open(out / "ab.tar.gz") as t:
        return {m.name: t.extractfile(m).read().decode() for m in t.getmembers() if m.isfile()}


def test_rounds_alternate_the_builds_and_the_archive_holds_every_run(tmp_path):
    a, b, c = fake(tmp_path, "bench_a", 10.0), fake(tmp_path, "bench_a_new", 9.0), fake(tmp_path, "bench_m", 3.0)
    r, out = run(tmp_path, "-r", "2", "-f", "^x/", a, b, "-f", "^y/", "-x", "--only=gdn", c)
    assert r.returncode == 0, r.stderr
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert [line.split()[0] for line in calls] == ["bench_a", "bench_a_new", "bench_m"] * 2
    assert all(line.split()[1] == "^x/" for line in calls if line.startswith("bench_a"))
    assert all("--only=gdn" in line for line in calls if line.startswith("bench_m"))
    got = members(out)
    for name in ("bench_a", "bench_a_new", "bench_m"):
        for rnd in (1, 2):
            assert json.loads(got[f"ab/{name}.{rnd}.json"])["benchmarks"]
            assert got[f"ab/{name}.{rnd}.log"] == "ran\n"
    assert "round 2 bench_m: exit 0" in got["ab/summary.txt"]
    assert list(out.iterdir()) == [out / "ab.tar.gz"]  # one file comes back, no partial archive left
    # The printed comparison runs as it is, on the extracted archive, and reads the new build at 0.9x.
    line = next(l.strip() for l in r.stdout.splitlines() if "bench_a_new" in l and "--ab" in l)
    assert line == ("scripts/bench_table.py --ab ab/bench_a.1.json,ab/bench_a.2.json "
                    "ab/bench_a_new.1.json,ab/bench_a_new.2.json")
    with tarfile.open(out / "ab.tar.gz") as t:
        t.extractall(tmp_path / "here")
    argv = shlex.split(line)
    cmp_ = subprocess.run([sys.executable, str(ROOT / argv[0]), *argv[1:]], cwd=tmp_path / "here",
                          capture_output=True, text=True)
    assert cmp_.returncode == 0, cmp_.stderr
    assert "0.900" in cmp_.stdout


def test_a_failing_run_fails_the_call_but_every_round_runs(tmp_path):
    a, b = fake(tmp_path, "bench_a"), fake(tmp_path, "bench_b", exit=3)
    r, out = run(tmp_path, "-r", "2", "-f", ".", a, b)
    assert r.returncode == 1
    got = members(out)
    assert "round 2 bench_b: exit 3" in got["ab/summary.txt"] and "round 2 bench_a: exit 0" in got["ab/summary.txt"]


def test_a_filter_matching_nothing_fails_the_call(tmp_path):
    empty = tmp_path / "bench_empty"
    empty.write_text("#!/usr/bin/env bash\nfor a; do case $a in --benchmark_out=*) "
                     "echo '{\"context\": {}, \"benchmarks\": []}' > ${a#*=};; esac; done\n")
    empty.chmod(0o755)
    r, out = run(tmp_path, "-r", "1", "-f", "^nothing/", str(empty))
    assert r.returncode == 1
    assert "round 1 bench_empty: no case matched -f '^nothing/'" in members(out)["ab/summary.txt"]


def test_the_budget_stops_later_rounds(tmp_path):
    a = fake(tmp_path, "bench_slow", sleep=2)
    r, out = run(tmp_path, "-r", "5", "-b", "3", "-f", ".", a)
    assert r.returncode == 0, r.stderr
    got = members(out)
    assert "ab/bench_slow.1.json" in got and "ab/bench_slow.2.json" not in got
    assert "round 2 not started" in got["ab/summary.txt"]
    assert "--ab ab/bench_slow.1.json" in r.stdout  # the comparison names only the rounds that ran


@pytest.mark.parametrize("args, message", [
    (["bench_a"], "before the first -f"),
    (["-f", "."], "names no binary"),
    (["-r", "0", "-f", ".", "x"], "rounds must be a positive integer"),
    (["-f", ".", "no_such_bench"], "dist/bin/no_such_bench not found"),
    (["-q"], "unknown option -q"),
    (["-f", ".", "/bin/true", "-f", "x", "/usr/bin/true"], "true named twice"),
])
def test_bad_arguments_get_one_line_and_exit_2(tmp_path, args, message):
    r, out = run(tmp_path, *args)
    assert r.returncode == 2
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (out / "ab.tar.gz").exists()
