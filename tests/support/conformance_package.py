"""ONNX backend node cases packaged and run on the host: each case packaged
under a unique name by aot.packaging.build.generate, all of them compiled into one
shared library (objects cached by content; a source that does not compile
fails only its own case), each run in a forked child on an arena and outputs
filled with garbage, so a crash, a hang or a read of an unwritten byte fails
that case alone (models/test_conformance_package.py; the op tests in ops/)."""
from __future__ import annotations

import ctypes
import hashlib
import os
import pickle
import re
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from support.conformance import _needs_constant, bind_and_retry, data_sets

from aot.errors import AotError
from aot.frontend.onnx import import_onnx
from aot.ir.graph import Graph
from aot.testing.kernels import aligned
from aot.packaging.build import Generated, generate
from aot.passes.infer import infer_types
from aot.passes.pipeline import optimize
from aot.packaging.toolchain import PACKAGE_CFLAGS, toolchain_for


# The target's flags at -O1 (a test build), as a shared library, warnings as errors.
EXTRA_CFLAGS = ("-O1", "-fPIC", "-Wall", "-Wextra", "-Werror")
GARBAGE = 0xA5          # fills the arena and the outputs before a run
RUN_TIMEOUT_S = 20


@dataclass
class Run:
    """One data set of a case, packaged."""
    gen: Generated
    graph: Graph
    inputs: dict
    expected: dict

    @property
    def name(self) -> str:
        return self.gen.context["name"]


# ---- binding what the code generator needs constant --------------------------------------

def _node(model, label: str):
    for index, node in enumerate(model.graph.node):
        if (node.name or f"{node.op_type}_{index}") == label:
            return node
    return None


def _needs_weight(model, error: AotError, inputs: dict, frozen: list[str]) -> str | None:
    """The next graph input to bind when the code generator refuses a node
    for a run-time operand ("Conv with a weight computed at run time", "a
    non-constant y_scale"): the node's first operand after its data input
    that is still a graph input. The messages name the operand in words, so
    the operands are bound one by one, each only when asked for."""
    m = re.search(r"node '(.+?)': .*(non-constant|computed at run time)", str(error))
    node = m and _node(model, m.group(1))
    if not node:
        return None
    return next((n for n in node.input[1:] if n in inputs and n not in frozen), None)


# cases run with shape arguments / weights bound at compile time
BOUND_SHAPES: set[str] = set()
BOUND_WEIGHTS: set[str] = set()


def package_case(case, tag: str, codegen: str, board) -> list[Run]:
    """A package per data set of the case (named <tag>_<set>), the inputs the
    codegen needs constant bound to the data set's values; or an AotError."""
    runs = []
    for r, (ins, outs) in enumerate(data_sets(case)):
        def attempt(model):
            graph = optimize(infer_types(import_onnx(model.SerializeToString(), case.name)))
            return graph, generate(graph, board, codegen, f"{tag}_{r}", io_in_arena=False)
        (graph, gen), bound = bind_and_retry(case.model, ins, attempt,
                                             (_needs_constant, _needs_weight))
        for _, finder in bound:
            (BOUND_SHAPES if finder is _needs_constant else BOUND_WEIGHTS).add(case.name)
        runs.append(Run(gen, graph, {k: ins[k] for k in graph.inputs}, outs))
    return runs


# ---- one build of every package -----------------------------------------------------------

# Objects cached by what they are compiled from (as aot.testing.kernels caches
# its libraries): the LLVM packages' entry points and params are the C
# packages' byte for byte, and a re-run rebuilds only what changed.
_CACHE = Path(tempfile.gettempdir()) / f"aot-conformance-objects-{os.getuid()}"


@dataclass(frozen=True)
class Source:
    path: str           # relative to the batch directory
    package: str
    key: str            # hash of the compiler, its flags, the source and its package's headers


def _write(batch: Path, run: Run, identity: str) -> tuple[list[Source], list[str]]:
    """The package's files in the batch's shared layout (file names are unique
    per package): its sources to compile and its prebuilt objects."""
    files = run.gen.files
    for path, data in files.items():
        if path.startswith(("src/", "include/", "runtime_c/", "lib/")):
            (batch / path).parent.mkdir(parents=True, exist_ok=True)
            (batch / path).write_bytes(data)
    deps = hashlib.sha256(identity.encode())
    for path in sorted(p for p in files if p.endswith((".h", ".bin"))):
        deps.update(path.encode() + b"\0" + files[path])
    sources = []
    for path in run.gen.sources:
        if not path.startswith("runtime_c/"):     # the platform hooks: once for all
            key = deps.copy()
            key.update(path.encode() + b"\0" + files[path])
            sources.append(Source(path, run.name, key.hexdigest()[:24]))
    return sources, list(run.gen.prebuilt)


def _errors(stderr: str, sources: list[Source]) -> dict[str, str]:
    """{package: its first error line} from the compiler's messages."""
    owner = {s.path: s.package for s in sources}
    bad: dict[str, str] = {}
    for line in stderr.splitlines():
        m = re.match(r"((?:src|include)/[\w.]+?):[\d:]* *(?:fatal )?error", line)
        if m and m.group(1) in owner:
            bad.setdefault(owner[m.group(1)], line.strip())
    return bad


def _compile(batch: Path, compiler: list[str], sources: list[Source]) -> dict[str, str]:
    """Compile the sources not cached yet in one compiler run (a failing
    source drops its package and the rest are compiled again); the packages
    that did not compile, with the reason."""
    _CACHE.mkdir(parents=True, exist_ok=True)
    todo = [s for s in sources if not (_CACHE / f"{s.key}.o").exists()]
    failed: dict[str, str] = {}
    while todo:      # objects land in the batch directory as <stem>.o
        r = subprocess.run([*compiler, "-c", *(s.path for s in todo)], cwd=batch,
                           capture_output=True, text=True)
        bad = _errors(r.stderr, todo)
        if r.returncode and not bad:
            raise AotError(f"compiling the batch failed: {r.stderr[-2000:]}")
        failed.update(bad)
        done = [s for s in todo if s.package not in failed
                and (batch / f"{Path(s.path).stem}.o").exists()]
        for s in done:
            os.replace(batch / f"{Path(s.path).stem}.o", _CACHE / f"{s.key}.o")
        todo = [s for s in todo if s.package not in failed and s not in done]
        if todo and not r.returncode:
            raise AotError(f"the compiler made no object for {todo[0].path}")
    return failed


def build(batch: Path, runs: list[Run], board) -> tuple[ctypes.CDLL, dict[str, str]]:
    """(one shared library of every package, {package: why it did not build})."""
    tc = toolchain_for(board.target)
    compiler = [tc.cc, *(f for f in tc.cflags if not f.startswith("-O")), *PACKAGE_CFLAGS,
                *EXTRA_CFLAGS]
    version = subprocess.run([tc.cc, "--version"], capture_output=True, text=True).stdout
    sources, prebuilt = [], {}
    for run in runs:
        srcs, objs = _write(batch, run, " ".join(compiler) + "\n" + version)
        sources += srcs
        prebuilt.update((o, run.name) for o in objs)
    failed = _compile(batch, compiler, sources)
    platform = subprocess.run([*compiler, "-c", "runtime_c/aot_platform.c"], cwd=batch,
                              capture_output=True, text=True)
    if platform.returncode:
        raise AotError(f"compiling the platform hooks failed: {platform.stderr[-2000:]}")
    objects = [str(_CACHE / f"{s.key}.o") for s in sources if s.package not in failed]
    objects += [o for o, package in prebuilt.items() if package not in failed]
    lib = batch / "libconformance.so"
    r = subprocess.run([tc.cc, "-shared", *objects, "aot_platform.o", "-lm", "-o", lib.name],
                       cwd=batch, capture_output=True, text=True)
    if r.returncode:
        raise AotError(f"linking the batch failed: {r.stderr[-2000:]}")
    return ctypes.CDLL(str(lib)), failed


# ---- running one package ------------------------------------------------------------------

def _garbage(nbytes: int, align: int) -> np.ndarray:
    buf = aligned(np.zeros(max(nbytes, 1), np.uint8), align)
    buf[...] = GARBAGE
    return buf


def _call(lib, run: Run) -> dict[str, np.ndarray]:
    """The outputs of one run of the package's entry point."""
    ctx = run.gen.context
    ins = []
    for io in ctx["inputs"]:
        ty = run.graph.types[io["tensor"]]
        a = np.asarray(run.inputs[io["tensor"]])
        if a.dtype != np.dtype(ty.dtype) or a.shape != tuple(ty.shape):
            raise AotError(f"input {io['tensor']}: {a.dtype}{list(a.shape)} given, the "
                           f"package takes {ty}")
        ins.append(np.ascontiguousarray(a))
    outs = {}
    for io in ctx["outputs"]:
        ty = run.graph.types[io["tensor"]]
        raw = _garbage(ty.nbytes, 64)
        outs[io["tensor"]] = raw[:ty.nbytes].view(ty.dtype).reshape(ty.shape)
    in_struct = (ctypes.c_void_p * max(len(ins), 1))(*(a.ctypes.data for a in ins))
    out_struct = (ctypes.c_void_p * len(outs))(*(a.ctypes.data for a in outs.values()))
    arena = _garbage(run.gen.mem.arena_bytes, run.gen.mem.align)
    fn = getattr(lib, f"{run.name}_run_with_arena")
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] * 3
    status = fn(ctypes.addressof(in_struct), ctypes.addressof(out_struct), arena.ctypes.data)
    if status != 0:
        raise AotError(f"{run.name}_run_with_arena returned {status}")
    return outs


def run_isolated(lib, run: Run) -> dict[str, np.ndarray]:
    """_call in a forked child: a crash or a hang fails this run only."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:     # the child: run, send the outputs (or the error) back, leave
        os.close(read)
        signal.alarm(RUN_TIMEOUT_S)
        try:
            result = _call(lib, run)
        except Exception as e:  # noqa: BLE001 - reported by the parent
            result = AotError(f"{type(e).__name__}: {e}")
        with os.fdopen(write, "wb") as f:
            pickle.dump(result, f)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        raise AotError(f"the run died of {signal.Signals(os.WTERMSIG(status)).name}")
    result = pickle.loads(data)
    if isinstance(result, Exception):
        raise result
    return result
