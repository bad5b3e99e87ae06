"""Reproducible packages: the same model and options give the same bytes in
every file (sources, lib/*.a and the objects inside, bench/bench,
metadata.json) whatever the environment of the run: working directory,
output path and its length, TMPDIR, PYTHONHASHSEED, umask, TZ, LC_ALL,
SOURCE_DATE_EPOCH. Both codegens, the host and a cross board.
(tests/packaging/test_package.py checks two runs in one process.)"""
from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from support import MODELS

BUILDS = [("tflm_hello_world_int8.tflite", "host", "c"),
          ("mlperf_ad_fcae_int8.tflite", "host", "llvm"),
          ("tflm_hello_world_f32.tflite", "qemu-aarch64", "c")]


def environment(root: Path, k: int) -> tuple[dict, Path, Path, int]:
    """Run k's environment, working directory, output parent and umask."""
    env = dict(os.environ)
    tmp = root / ("t" if k == 0 else "a_much_longer_temporary_directory_name")
    cwd = root / ("c" if k == 0 else "elsewhere/deeper/cwd")
    out = root / ("o" if k == 0 else "output_dirs/with/a/long/path")
    for d in (tmp, cwd, out):
        d.mkdir(parents=True)
    env.update(TMPDIR=str(tmp), PYTHONHASHSEED=str(k * 977 + 1),
               TZ=("UTC", "Pacific/Chatham")[k], LC_ALL=("C", "C.UTF-8")[k],
               SOURCE_DATE_EPOCH=("0", "1999999999")[k], USER=f"user{k}")
    env.pop("AOT_DEBUG", None)
    return env, cwd, out, (0o022, 0o077)[k]


def package(model: str, board: str, codegen: str, env: dict, cwd: Path, out: Path,
            umask: int) -> Path:
    name_len = 3 if env["PYTHONHASHSEED"] == "1" else 40
    dest = out / f"{board}_{codegen}_{'p' * name_len}"
    r = subprocess.run([sys.executable, "-m", "aot", "package", str(MODELS / model),
                        "--board", board, "--codegen", codegen, "-o", str(dest)],
                       capture_output=True, text=True, cwd=cwd, env=env, timeout=600,
                       preexec_fn=lambda: os.umask(umask))
    assert r.returncode == 0, r.stderr
    return dest


def files(pkg: Path) -> dict[str, bytes]:
    return {str(p.relative_to(pkg)): p.read_bytes() for p in sorted(pkg.rglob("*"))
            if p.is_file()}


def archive_members(lib: Path, into: Path) -> dict[str, bytes]:
    into.mkdir()
    subprocess.run(["ar", "x", str(lib)], cwd=into, check=True)
    return files(into)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Every build of BUILDS in both environments, four at a time."""
    root = tmp_path_factory.mktemp("repro")
    envs = [environment(root / f"run{k}", k) for k in (0, 1)]
    with ThreadPoolExecutor(4) as pool:
        jobs = [[pool.submit(package, *b, *e) for b in BUILDS] for e in envs]
        return root, envs, [[j.result() for j in run] for run in jobs]


@pytest.mark.parametrize("build", range(len(BUILDS)), ids=["-".join(b) for b in BUILDS])
def test_package_bytes_do_not_depend_on_the_environment(two_runs, build):
    root, envs, pkgs = two_runs
    one, two = pkgs[0][build], pkgs[1][build]
    a, b = files(one), files(two)
    assert a.keys() == b.keys()
    assert {"metadata.json", "README.md", "bench/bench"} <= a.keys()
    assert any(k.startswith("lib/") and k.endswith(".a") for k in a)
    assert [k for k in a if a[k] != b[k]] == []
    # Permissions follow the umask (0o022 vs 0o077), executables stay executable.
    def exe(pkg):
        return sorted(k for k in a if (pkg / k).stat().st_mode & 0o100)
    assert exe(one) == exe(two) == ["bench/bench"]
    for path in (two, two / "metadata.json", two / "lib"):
        assert path.stat().st_mode & 0o077 == 0, path
    assert one.stat().st_mode & 0o777 == 0o755
    # Nothing in any file names where or when it was built.
    leaks = [str(root).encode(), b"/tmp/", os.environ.get("HOME", "/root").encode() + b"/",
             b"user0", b"user1"]
    for rel, data in a.items():
        for leak in leaks:
            assert leak not in data, f"{rel} holds {leak!r}"
    for lib in (k for k in a if k.endswith(".a")):
        members = archive_members(one / lib, root / f"ar{build}_{lib.replace('/', '_')}")
        assert members and all(data.count(b"/run0/") == 0 for data in members.values())
        listing = subprocess.run(["ar", "tv", str(one / lib)], capture_output=True, text=True,
                                 check=True).stdout
        # deterministic mode: uid/gid 0, mode 644, timestamp 0 for every member
        assert all(line.startswith("rw-r--r-- 0/0") for line in listing.splitlines()), listing
        assert all(" 1970 " in line for line in listing.splitlines()), listing
