"""An arm64 Python with LiteRT (XNNPACK) under qemu-aarch64: the anchor whose
instructions are counted on the same emulated CPU as aot's packages.

The sysroot is made the way the qemu-rpi4 image is: Debian's arm64 packages
(python3.11-minimal, libpython3.11-stdlib and the libraries they and the
wheels load) fetched with `apt-get download` (scripts/setup.sh adds the
arm64 architecture) and unpacked with dpkg-deb, plus the aarch64 wheels of
ai-edge-litert and numpy from `pip download --platform ... --only-binary`,
unzipped into its dist-packages. It is built into the cache
($AOT_CACHE_DIR or ~/.cache/aot, arm64-python/py3.11-<version>, the version
a hash of this file) only when missing, whole or not at all.

ai-edge-litert 1.4.0 is the newest release with a manylinux2014 (glibc 2.17)
aarch64 wheel for Python 3.11; the 2.x wheels (glibc 2.27) would load on
Debian 12, but 2.3.0 dies in Interpreter.__init__ under qemu-user 7.2. ONNX
Runtime's aarch64 wheel is left out: it dies at import under qemu-user 7.2
("qemu: uncaught target signal 11 (Segmentation fault)", onnxruntime 1.32.0).

Counting: the plugin of aot/deploy/insn_count.py gives the total of a whole
Python process. A run does the same setup (start Python, import LiteRT,
build the interpreter with its default delegate, XNNPACK, on one thread,
set the inputs), then 1 + k invocations; runs with k = 0, N and 2N give the
instructions of N invocations twice, (T(1+N) - T(1)) / N and
(T(1+2N) - T(1+N)) / N, and their spread. The second is the count per
inference: the first also carries the one-time cost of the loop's first
passes (Python 3.11 specializes bytecode after it has run a few times;
about 12,000 instructions on every model). The count is the same on every
run only with the process made deterministic: PYTHONHASHSEED fixed,
OpenBLAS (numpy's) on one thread instead of a pool of spinning ones, no
address randomization (setarch -R), the same environment and argv lengths,
and a sysroot nobody has written bytecode into (a Python run without -B
leaves __pycache__ behind, and the imports then execute a fifth of the
instructions; counting refuses such a sysroot). The k = 0 run is repeated to
show that. Some hosts still let two identical runs differ by a few hundred
instructions in 1.5e9 (an Intel Xeon: 166); that moves the count per
inference by at most 2d/N, accepted up to REPEAT_TOLERANCE of the count.

    python -m aot.deploy.arm64_python [--force]     # build (no-op when current)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from aot.support import tools
from aot.deploy.vm_image import cache_root, download, needed
from aot.errors import AotError
from aot.support.fsutil import write_dir_atomically

NAME = "arm64-python"
PYTHON = "python3.11"
# The interpreter and its standard library; the libraries they, the
# standard library's extension modules and the wheels link (checked by
# check_libraries after unpacking).
PACKAGES = ("python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib",
            "libc6", "libgcc-s1", "libstdc++6", "libexpat1", "zlib1g", "libssl3",
            "libbz2-1.0", "libcrypt1", "libffi8", "liblzma5", "libsqlite3-0", "libuuid1",
            "libncursesw6", "libtinfo6", "libreadline8", "libnsl2", "libtirpc3", "libdb5.3",
            "libgssapi-krb5-2", "libkrb5-3", "libk5crypto3", "libkrb5support0",
            "libkeyutils1", "libcom-err2")
# ai-edge-litert's wheel and what its interpreter imports, pinned: a new
# version is a new anchor and must be a change of this file.
WHEELS = ("ai-edge-litert==1.4.0", "numpy==2.2.6", "flatbuffers==25.12.19",
          "backports.strenum==1.2.8", "typing-extensions==4.16.0")
PLATFORMS = ("manylinux2014_aarch64", "manylinux_2_17_aarch64")
SITE = "usr/lib/python3/dist-packages"
DROPPED = ("usr/share",)
# What makes two runs of the same script count the same (see above).
ENV = {"PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
       "OPENBLAS_NUM_THREADS": "1", "LANG": "C.UTF-8", "PATH": "/usr/bin:/bin"}
INVOCATIONS = 20
# How far the count per inference may move with the difference between two
# identical runs: address randomization (about 28,000 instructions) or a
# spinning thread pool (millions) are far beyond it.
REPEAT_TOLERANCE = 0.001

# The script run under the emulator: argv = model, k (zero-padded, so every
# run's argv has the same length), outputs dir, input .npy files.
SCRIPT = """\
import sys
import numpy as np
from ai_edge_litert.interpreter import Interpreter

model, k, out_dir, *inputs = sys.argv[1:]
it = Interpreter(model_path=model, num_threads=1)
it.allocate_tensors()
for d, path in zip(it.get_input_details(), inputs):
    it.set_tensor(d["index"], np.load(path))
it.invoke()
for _ in range(int(k)):
    it.invoke()
for i, d in enumerate(it.get_output_details()):
    np.save(f"{out_dir}/{i}.npy", it.get_tensor(d["index"]))
"""


def version() -> str:
    """A hash of this builder: a changed builder makes a new sysroot."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def sysroot_dir() -> Path:
    return cache_root() / NAME / f"py3.11-{version()}"


def find_sysroot() -> Path:
    """The current sysroot, or a clear error saying how to build it."""
    root = sysroot_dir()
    if not (root / "sysroot.json").is_file():
        raise AotError(f"the arm64 Python sysroot is not built ({root} is missing): run "
                       "python -m aot.deploy.arm64_python")
    return root


# --- building ---------------------------------------------------------------------

def download_wheels(dest: Path) -> list[Path]:
    """The pinned aarch64 wheels for CPython 3.11, fetched into dest by pip."""
    platforms = [a for p in PLATFORMS for a in ("--platform", p)]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.11", "--implementation", "cp", *platforms, "-d", str(dest),
           *WHEELS]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no message"])[-1]
        raise AotError(f"the arm64 Python sysroot: pip download of {', '.join(WHEELS)} "
                       f"failed: {last}")
    return sorted(dest.glob("*.whl"))


def unpack_debs(debs: Sequence[Path], root: Path) -> None:
    for deb in debs:
        r = subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            raise AotError(f"the arm64 Python sysroot: dpkg-deb -x {deb.name} failed: "
                           f"{r.stderr.strip() or r.returncode}")
    for rel in DROPPED:
        shutil.rmtree(root / rel, ignore_errors=True)


def check_libraries(root: Path) -> None:
    """Every shared library that Python or an extension module names is in the
    sysroot (by file name: the wheels' own libraries are found through their
    rpath, the rest in Debian's library dirs)."""
    elves = [root / "usr/bin" / PYTHON, *sorted(p for p in root.rglob("*.so*")
                                                if p.is_file() and not p.is_symlink())]
    have = {p.name for p in root.rglob("*.so*")}
    missing = sorted({(so, e.relative_to(root).as_posix()) for e in elves for so in needed(e)
                      if so not in have})
    if missing:
        so, by = missing[0]
        raise AotError(f"the arm64 Python sysroot lacks {so} (needed by {by}; "
                       f"{len(missing)} missing in all): add its package to "
                       "arm64_python.PACKAGES")


def build_sysroot(force: bool = False) -> Path:
    """Build the current sysroot into the cache (nothing to do when it is there)."""
    target = sysroot_dir()
    if (target / "sysroot.json").is_file() and not force:
        return target
    t0 = time.monotonic()

    def fill(out: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="aot-arm64-python-") as tmp:
            debs_dir, wheels_dir = Path(tmp) / "debs", Path(tmp) / "wheels"
            debs_dir.mkdir()
            debs = download(list(PACKAGES), debs_dir)
            unpack_debs([debs[p] for p in PACKAGES], out)
            wheels = download_wheels(wheels_dir)
            for whl in wheels:
                with zipfile.ZipFile(whl) as z:
                    z.extractall(out / SITE)
            for so in (out / SITE).rglob("*.so*"):   # zip files keep no modes
                so.chmod(0o755)
            for cache in sorted((out / SITE).rglob("__pycache__")):
                shutil.rmtree(cache)                  # see check_no_bytecode
            check_libraries(out)
            info = {"name": NAME, "version": version(),
                    "packages": sorted(d.name for d in debs.values()),
                    "wheels": [w.name for w in wheels],
                    "build_seconds": round(time.monotonic() - t0, 2)}
            (out / "sysroot.json").write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")

    write_dir_atomically(target, fill, force=True)
    for old in target.parent.glob("py3.11-*"):     # older builders' sysroots are dead
        if old != target and old.is_dir() and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)
    return target


# --- counting ---------------------------------------------------------------------

def check_no_bytecode(root: Path) -> None:
    """The sysroot holds no bytecode caches: it is built without them and the
    anchor runs with -B, so one there was written by another Python run in
    it; imports would then load it instead of compiling, and the totals
    would count a fifth of what they count otherwise."""
    found = sorted(root.rglob("__pycache__"))
    if found:
        raise AotError(f"the arm64 Python sysroot {root} holds bytecode written after it "
                       f"was built ({found[0].relative_to(root)}, {len(found)} in all; a "
                       "Python run in it without -B?): its counts would not compare; "
                       "rebuild it with python -m aot.deploy.arm64_python --force")


def python_command(root: Path, cpu: str, log: Path | None = None) -> list[str]:
    """The sysroot's Python under qemu-aarch64 modelling `cpu`, with the
    instruction counter's total written to `log`; without address
    randomization (setarch -R), no user site, no bytecode written."""
    from aot.deploy.insn_count import build_plugin

    setarch = tools.require("setarch", "counting the XNNPACK anchor's instructions")
    qemu = tools.require("qemu-aarch64", "the XNNPACK anchor on the emulated Arm CPU")
    counter = []
    if log is not None:
        counter = ["-plugin", str(build_plugin()).replace(",", ",,"), "-d", "plugin",
                   "-D", str(log)]
    return [setarch, "-R", qemu, "-L", str(root), "-cpu", cpu, *counter,
            str(root / "usr/bin" / PYTHON), "-s", "-B"]


def total_of(log: Path) -> int:
    """The plugin's "total N" line."""
    try:
        for line in log.read_text(errors="replace").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "total" and parts[1].isdigit():
                return int(parts[1])
    except OSError as e:
        raise AotError(f"the instruction counter wrote no log ({e.strerror or e})") from None
    raise AotError(f"the instruction counter's log {log} has no total")


@dataclass(frozen=True)
class AnchorCount:
    """LiteRT with XNNPACK on one emulated core: instructions per inference."""
    per_inference: int           # (T(1+2N) - T(1+N)) / N
    halves: tuple[int, int]      # (T(1+N) - T(1)) / N and (T(1+2N) - T(1+N)) / N
    invocations: int             # N
    totals: dict[int, list[int]] # k -> the totals of the runs with 1 + k invocations
    outputs: list[np.ndarray]
    noise: int = 0               # how far the repeated 1-invocation runs differ

    @property
    def spread(self) -> float:
        """How far the two halves differ, relative to the per-inference count."""
        return abs(self.halves[0] - self.halves[1]) / max(self.per_inference, 1)

    def as_json(self) -> dict:
        return {"per_inference": self.per_inference, "halves": list(self.halves),
                "invocations": self.invocations, "spread": self.spread,
                "noise": self.noise, "totals": {str(k): v for k, v in self.totals.items()}}


def per_inference(totals: dict[int, list[int]], n: int) -> tuple[int, tuple[int, int], int]:
    """From the totals of runs with 1, 1+N and 1+2N invocations: the count per
    inference (the second N, warmed up), over each half, and the noise: how
    far the repeated 1-invocation runs differ. Noise d in every total moves
    the count by up to 2d/N; beyond REPEAT_TOLERANCE of the count the
    process is refused as not deterministic."""
    base = totals[0]
    t0, t1, t2 = base[0], totals[n][0], totals[2 * n][0]
    halves = (round((t1 - t0) / n), round((t2 - t1) / n))
    noise = max(base) - min(base)
    if 2 * noise / n > REPEAT_TOLERANCE * max(halves[1], 1):
        raise AotError(f"two identical runs counted {min(base):,} and {max(base):,} "
                       f"instructions: the process is not deterministic (their difference "
                       f"moves the count per inference, {halves[1]:,}, by up to "
                       f"{2 * noise / n:,.0f}; at most {REPEAT_TOLERANCE:.1%} is accepted)")
    return halves[1], halves, noise


def count_xnnpack(model: Path, inputs: Sequence[np.ndarray], cpu: str,
                  invocations: int = INVOCATIONS, root: Path | None = None) -> AnchorCount:
    """Instructions per inference of `model` in LiteRT (XNNPACK, one thread)
    on the emulated `cpu`, and its outputs (from the 1-invocation run)."""
    if invocations < 1:
        raise AotError("the anchor's invocations must be >= 1")
    root = root or build_sysroot()
    check_no_bytecode(root)
    totals: dict[int, list[int]] = {}
    outputs: list[np.ndarray] = []
    with tempfile.TemporaryDirectory(prefix="aot-xnnpack-count-") as tmp:
        work = Path(tmp)
        (work / "count.py").write_text(SCRIPT)
        paths = []
        for i, x in enumerate(inputs):
            np.save(work / f"in{i}.npy", x)
            paths.append(str(work / f"in{i}.npy"))
        (work / "out").mkdir()
        log = work / "plugin.log"
        for k in (0, 0, invocations, 2 * invocations):
            cmd = [*python_command(root, cpu, log), str(work / "count.py"), str(model),
                   f"{k:06d}", str(work / "out"), *paths]
            r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=work)
            if r.returncode != 0:
                last = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
                raise AotError(f"LiteRT on the emulated {cpu} failed on {model.name}: {last}")
            if "XNNPACK delegate" not in r.stderr:
                raise AotError(f"LiteRT on the emulated {cpu} did not apply XNNPACK to "
                               f"{model.name}")
            totals.setdefault(k, []).append(total_of(log))
            if not outputs:
                outputs = [np.load(p) for p in sorted((work / "out").glob("*.npy"),
                                                      key=lambda p: int(p.stem))]
    per, halves, noise = per_inference(totals, invocations)
    return AnchorCount(per, halves, invocations, totals, outputs, noise)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m aot.deploy.arm64_python",
                                 description="build the arm64 Python sysroot (LiteRT, "
                                 "XNNPACK) into the cache")
    ap.add_argument("--force", action="store_true", help="rebuild even when current")
    args = ap.parse_args(argv)
    try:
        existed = (sysroot_dir() / "sysroot.json").is_file()
        root = build_sysroot(force=args.force)
    except AotError as e:
        print(f"aot: error: {e}", file=sys.stderr)
        return 2
    info = json.loads((root / "sysroot.json").read_text())
    what = "up to date" if existed and not args.force else f"built in {info['build_seconds']} s"
    print(f"arm64 Python sysroot {what}: {root} ({', '.join(info['wheels'])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
