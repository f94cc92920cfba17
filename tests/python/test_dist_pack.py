"""scripts/dist_pack.sh: the device bundle's patches restore every program byte for byte (stand-in files here, not
ELF binaries, so strip leaves them as they are), and a bundle without the GPU test binary is refused."""
import os
import random
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "dist_pack.sh"

pytestmark = pytest.mark.skipif(shutil.which("zstd") is None,
                                reason="zstd not installed (scripts/setup.sh installs it)")


def make_dist(tmp_path):
    rng = random.Random(7)
    base = bytes(rng.getrandbits(8) for _ in range(300_000))  # incompressible, as the binaries' fatbins are
    dist = tmp_path / "dist"
    (dist / "bin").mkdir(parents=True)
    (dist / "lib").mkdir()
    (dist / "bin" / "replayssm_gpu_tests").write_bytes(base)
    # A relinked benchmark: most of the base, shifted, with a changed object in the middle.
    (dist / "bin" / "bench_x").write_bytes(b"head" + base[:100_000] + os.urandom(5_000) + base[150_000:])
    (dist / "bin" / "bench_x_old").write_bytes(base[1000:])
    (dist / "lib" / "libfoo.so.1").write_bytes(b"lib")
    for f in (dist / "bin").iterdir():
        f.chmod(0o755)
    return dist


def test_round_trip(tmp_path):
    dist = make_dist(tmp_path)
    want = {f.name: f.read_bytes() for f in (dist / "bin").iterdir()}
    r = subprocess.run(["bash", str(SCRIPT), str(dist)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in dist.iterdir()) == ["pack.tar.xz", "unpack.sh"]
    # Patches, not copies: each program other than the base travels as a small fraction of its size.
    listing = subprocess.run(["tar", "tvJf", str(dist / "pack.tar.xz")], capture_output=True, text=True, check=True)
    sizes = {line.split()[-1]: int(line.split()[2]) for line in listing.stdout.splitlines()}
    assert sizes["patch/bench_x.zst"] < 0.1 * len(want["bench_x"])
    assert sizes["patch/bench_x_old.zst"] < 0.1 * len(want["bench_x_old"])
    r = subprocess.run([str(dist / "unpack.sh")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = {f.name: f.read_bytes() for f in (dist / "bin").iterdir()}
    assert got == want
    assert all(os.access(dist / "bin" / n, os.X_OK) for n in got)
    assert (dist / "lib" / "libfoo.so.1").read_bytes() == b"lib"
    assert not (dist / "patch").exists() and not (dist / "tools").exists()


def test_a_corrupted_patch_fails_the_unpack(tmp_path):
    dist = make_dist(tmp_path)
    assert subprocess.run(["bash", str(SCRIPT), str(dist)], capture_output=True).returncode == 0
    # Rebuild the pack with one patch's bytes flipped: zstd's checksum must refuse it, not restore a wrong binary.
    work = tmp_path / "w"
    work.mkdir()
    subprocess.run(["tar", "xJf", str(dist / "pack.tar.xz"), "-C", str(work)], check=True)
    p = work / "patch" / "bench_x.zst"
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0xFF
    p.write_bytes(bytes(b))
    subprocess.run(f"tar -C {work} -cf - bin lib patch tools | xz > {dist / 'pack.tar.xz'}", shell=True, check=True)
    r = subprocess.run([str(dist / "unpack.sh")], capture_output=True, text=True)
    assert r.returncode != 0


def test_refuses_a_bundle_without_the_gpu_tests(tmp_path):
    dist = make_dist(tmp_path)
    (dist / "bin" / "replayssm_gpu_tests").unlink()
    r = subprocess.run(["bash", str(SCRIPT), str(dist)], capture_output=True, text=True)
    assert r.returncode != 0 and "replayssm_gpu_tests not found" in r.stderr
    assert (dist / "bin" / "bench_x").exists()  # left as it was


def test_another_base_program(tmp_path):
    # DIST_PACK_BASE: a call that carries only the benchmarks keeps one of them whole and patches the rest against it.
    dist = make_dist(tmp_path)
    (dist / "bin" / "replayssm_gpu_tests").unlink()
    want = {f.name: f.read_bytes() for f in (dist / "bin").iterdir()}
    env = dict(os.environ, DIST_PACK_BASE="bench_x")
    r = subprocess.run(["bash", str(SCRIPT), str(dist)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    listing = subprocess.run(["tar", "tJf", str(dist / "pack.tar.xz")], capture_output=True, text=True, check=True)
    assert "bin/bench_x" in listing.stdout.split() and "patch/bench_x_old.zst" in listing.stdout.split()
    r = subprocess.run([str(dist / "unpack.sh")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert {f.name: f.read_bytes() for f in (dist / "bin").iterdir()} == want


def test_only_the_libraries_a_program_loads(tmp_path):
    # make_dist.sh collects every bundled program's libraries; a pack of fewer programs leaves out the rest (a
    # benchmarks-only pack carried replayssm's HDF5 and TLS stack and went over the limit). A real ELF program here
    # (zstd itself) stands in for a benchmark; the stand-in base, not ELF, adds nothing.
    zstd = shutil.which("zstd")
    ldd = subprocess.run(["ldd", zstd], capture_output=True, text=True, check=True).stdout
    loads = sorted({pathlib.Path(line.split()[2]).name for line in ldd.splitlines() if "=> /" in line})
    assert loads, ldd
    dist = make_dist(tmp_path)
    shutil.copy(zstd, dist / "bin" / "bench_elf")
    for line in ldd.splitlines():
        if "=> /" in line:
            shutil.copy(line.split()[2], dist / "lib")  # the real files: ldd reads the bundle's copies first
    # As the README runs it: a relative DIST_DIR (ldd then printed relative paths, and every library was left out).
    r = subprocess.run(["bash", str(SCRIPT), "dist"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "1 of %d libraries" % (len(loads) + 1) in r.stdout
    listing = subprocess.run(["tar", "tJf", str(dist / "pack.tar.xz")], capture_output=True, text=True, check=True)
    libs = sorted(n[len("lib/"):] for n in listing.stdout.split() if n.startswith("lib/") and n != "lib/")
    assert libs == loads  # libfoo.so.1, which nothing loads, left out
