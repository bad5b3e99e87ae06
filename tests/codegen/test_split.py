"""Kernels split over several C files / LLVM objects (built in parallel):
every kernel defined exactly once, the package still runs like the
interpreter, and the split and its bytes do not depend on the machine."""
from __future__ import annotations

import numpy as np
import pytest

import aot
from aot.api import package
from aot.codegen import c as c_codegen
from aot.codegen import llvm as llvm_codegen
from aot.deploy import run_package
from aot.targets import get_board
from aot.check.inputs import random_inputs
from aot.testing import assert_close

from support import MODELS

HOST = get_board("host")
MODEL = MODELS / "tflm_hello_world_int8.tflite"      # small, several kernels


def _small_parts(monkeypatch):
    """Split into as many parts as the model has kernels."""
    monkeypatch.setattr(c_codegen, "PART_CHARS", 1)
    monkeypatch.setattr(llvm_codegen, "PART_STMTS", 1)


def _kernel_files(pkg, pattern: str) -> list[str]:
    return sorted(p.name for p in pkg.glob(pattern))


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_split_package_runs_like_the_interpreter(tmp_path, monkeypatch, codegen):
    _small_parts(monkeypatch)
    graph = aot.optimize(aot.load(MODEL))
    info = package(graph, board="host", codegen=codegen, out_dir=tmp_path / "pkg")
    kernels = info.metadata["kernels"]
    files = _kernel_files(info.path / ("src" if codegen == "c" else "lib"),
                          "*_kernels*." + ("c" if codegen == "c" else "o"))
    assert len(files) == min(len(kernels), c_codegen.MAX_PARTS) > 1, files
    inputs = random_inputs(graph, 3)
    want = aot.interpret(graph, inputs)
    meta = info.metadata
    got = run_package(info.path, HOST, [inputs[i["name"]] for i in meta["inputs"]]).outputs
    for o, a in zip(meta["outputs"], got):
        assert_close(o["name"], a, want[o["name"]], rtol=0, atol=0)


def test_c_parts_define_each_kernel_once(monkeypatch):
    """The parts are the single translation unit's functions, regrouped: each
    defined in exactly one part, each part with the helpers it calls."""
    from aot.executor.liveness import elide_views
    monkeypatch.setattr(c_codegen, "PART_CHARS", 40_000)
    from aot.lower import lower_graph
    graph = aot.optimize(aot.load(MODELS / "mlperf_kws_dscnn_int8.tflite"))
    funcs = [k.func for k in elide_views(graph, lower_graph(graph, HOST.target))]
    src = c_codegen.emit_c(funcs, "t")
    assert len(src.parts) >= 2
    for symbol in src.symbols.values():
        head = f"\nvoid {symbol}("
        assert src.source.count(head) == 1
        assert sum(part.count(head) for part in src.parts) == 1, symbol
    for part in src.parts:
        used = {w for w in ("aot_dot2p_i32x8", "aot_load_i32x8") if w + "(" in part}
        for name in used:
            assert f" {name}(" in part.split("\nvoid t_")[0], f"{name} not defined in its part"


def test_split_is_the_same_on_one_core(tmp_path, monkeypatch):
    """One core or two: the same files, byte for byte (only the build
    runs differently)."""
    _small_parts(monkeypatch)
    graph = aot.optimize(aot.load(MODEL))
    a = package(graph, board="host", codegen="llvm", out_dir=tmp_path / "a")
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    b = package(graph, board="host", codegen="llvm", out_dir=tmp_path / "b")
    for path in sorted(p for p in a.path.rglob("*") if p.is_file()):
        other = b.path / path.relative_to(a.path)
        assert np.array_equal(np.frombuffer(path.read_bytes(), np.uint8),
                              np.frombuffer(other.read_bytes(), np.uint8)), path


def _package_in_worker(out: str) -> int:
    """In a multiprocessing pool's (daemonic) worker, which may not fork."""
    info = package(aot.optimize(aot.load(MODEL)), board="host", codegen="llvm", out_dir=out)
    return len(list(info.path.rglob("*")))


def test_llvm_packages_build_inside_a_pool_worker(tmp_path, monkeypatch):
    """A pool worker may not have children: the LLVM objects are then built
    one after another there (this was 'daemonic processes are not allowed to
    have children' from scripts/verify_matrix.py's workers)."""
    import multiprocessing

    _small_parts(monkeypatch)          # several parts: the build would fork
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(_package_in_worker, (str(tmp_path / "pkg"),)) > 0
    assert (tmp_path / "pkg" / "metadata.json").is_file()


@pytest.mark.fast
def test_clang_units_are_smaller_than_gccs():
    """KWS's kernels (~115 KB of C) are two units for clang (two cores busy)
    and one for GCC, whose units keep their size: it optimizes a unit's
    functions together, so a split would change a Cortex-M kernel's code."""
    from aot.packaging.build import generate
    graph = aot.optimize(aot.load(MODELS / "mlperf_kws_dscnn_int8.tflite"))
    for board, units in (("host", 2), ("mps2-an386", 1)):
        gen = generate(graph, get_board(board), "c", "kws", io_in_arena=False)
        assert len([s for s in gen.sources if "_kernels" in s]) == units, board
