"""aot as a user installs it: the wheel, with the verify extra, in a fresh
venv, run from outside the checkout.

The dependencies' wheels are kept in $AOT_CACHE_DIR/wheels (~/.cache/aot):
the install reads only them (--no-index), and they are downloaded again only
when the install cannot be resolved from them (a new or changed dependency).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from support import MODELS

from aot.deploy.vm_image import cache_root
from aot.support.resources import DATA_DIRS

REPO = Path(__file__).resolve().parents[2]
MODEL = MODELS / "mlperf_kws_dscnn_int8.tflite"
# What `pip install .` reads from the checkout: the package and its data.
SOURCES = ("pyproject.toml", "aot", *DATA_DIRS)
# Imports every module the installed aot has, as pkgutil finds them, and
# says where aot and its data directories were found.
IMPORT_ALL = """
import importlib, json, pkgutil, aot, aot.support.resources as r
def fail(name):
    raise ImportError(f"walking {name} failed")
names = sorted(m.name for m in pkgutil.walk_packages(aot.__path__, "aot.", onerror=fail))
for name in names:
    importlib.import_module(name)
print(json.dumps({"modules": ["aot", *names], "aot": aot.__file__,
                  "data": [str(r.data_dir(k)) for k in r.DATA_DIRS]}))
"""


def test_pyproject_lists_every_package():
    """setuptools cannot discover the data packages (their directories are
    outside aot/), so pyproject.toml lists the packages: all of them."""
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    code = [".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "aot").rglob("__init__.py")]
    data = {f"aot._data.{d}": d for d in DATA_DIRS}
    listed, tree = set(tool["packages"]), {*code, *data}
    assert listed == tree, (f"pyproject.toml's packages: add {sorted(tree - listed)}, "
                            f"remove {sorted(listed - tree)}")
    assert {k: v for k, v in tool["package-dir"].items() if k != "aot"} == data
    assert sorted(tool["package-data"]) == sorted(data)


def source_modules() -> list[str]:
    """Every module of aot in the checkout, by its dotted name."""
    names = []
    for path in (REPO / "aot").rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(names)


def test_the_wheel_installed_in_a_fresh_venv_works(tmp_path, record_property):
    seconds = {}
    start = time.perf_counter()
    wheel = build_wheel(tmp_path)
    seconds["build"] = time.perf_counter() - start
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    start = time.perf_counter()
    install(venv / "bin" / "python", f"{wheel}[verify]", cache_root() / "wheels")
    seconds["install"] = time.perf_counter() - start

    start = time.perf_counter()
    work = tmp_path / "work"                      # outside the checkout
    work.mkdir()
    env = user_env(venv)
    run(work, env, venv / "bin" / "aot", "package", MODEL, "--board", "host", "-o", "kws")
    shown = run(work, env, venv / "bin" / "aot", "run", "kws", "--board", "host", "--input",
                MODEL.with_suffix(".input.npy"))
    assert shown.startswith("Identity: int8[1, 12]") and "top-5: " in shown, shown
    assert sorted(p.name for p in work.iterdir()) == ["kws"], "run without --out writes nothing"
    verified = run(work, env, venv / "bin" / "aot", "verify", "kws", "--board", "host",
                   "--model", MODEL)
    assert "OK against tflite-micro" in verified, verified

    found = json.loads(run(work, env, venv / "bin" / "python", "-c", IMPORT_ALL))
    assert found["modules"] == source_modules()
    site = venv / "lib"
    assert found["aot"].startswith(str(site)), found["aot"]
    for d in found["data"]:
        assert d.startswith(str(site)) and (Path(d) / "README.md").is_file(), d
    seconds["commands"] = time.perf_counter() - start
    record_property("summary", "wheel install test: " + ", ".join(
        f"{k} {v:.1f} s" for k, v in seconds.items()))


def build_wheel(tmp_path: Path) -> Path:
    """The wheel `pip install .` would build, from a copy of the checkout's
    sources: a build/ directory left in the checkout cannot leak into it."""
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, src / name)
    pip("wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path / "dist", src)
    (wheel,) = (tmp_path / "dist").glob("aot-*.whl")
    return wheel


def install(python: Path, requirement: str, wheelhouse: Path) -> None:
    """pip install into `python`'s venv from the wheelhouse alone; the
    dependencies are downloaded into it first when they are not all there."""
    offline = ["install", "--no-index", "--find-links", wheelhouse, requirement]
    if pip(*offline, python=python, check=False).returncode != 0:
        download(requirement, wheelhouse)
        pip(*offline, python=python)


def download(requirement: str, wheelhouse: Path) -> None:
    """The requirement's dependencies into the wheelhouse, each file moved in
    whole once downloaded (a concurrent run never sees half a wheel); aot's
    own wheel stays out (each run builds its own)."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    tmp = wheelhouse / f".download.{os.getpid()}"
    try:
        pip("download", "-d", tmp, requirement, timeout=900)
        for f in tmp.iterdir():
            if not f.name.startswith("aot-"):
                os.replace(f, wheelhouse / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def pip(*args, python: Path | None = None, check: bool = True,
        timeout: int = 300) -> subprocess.CompletedProcess:
    """The checkout's pip; with `python`, acting on that interpreter's venv
    (which then needs no pip of its own)."""
    target = ["--python", str(python)] if python else []
    r = subprocess.run([sys.executable, "-m", "pip", *target, "-q", *map(str, args)],
                       capture_output=True, text=True, timeout=timeout)
    assert not check or r.returncode == 0, r.stderr
    return r


def user_env(venv: Path) -> dict[str, str]:
    """The environment of a user with the venv first on PATH and nothing
    pointing into the checkout."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    return env


def run(cwd: Path, env: dict[str, str], *argv) -> str:
    r = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, (argv, r.stdout, r.stderr)
    return r.stdout
