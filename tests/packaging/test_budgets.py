"""Compile-time budgets and wide fan-in: a model either packages or is one
line, exit 2; never a MemoryError or a RecursionError (exit 3).

The bombs are small hostile models: a few hundred bytes of ONNX whose
Range, ConstantOfShape or Tile would make hundreds of megabytes to billions
of elements at compile time, packaged by the real CLI under a 1 GiB address
space (RLIMIT_AS) for the host and a 4 MB Cortex-M board.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import aot
from aot.errors import AotError, BudgetError
from aot.limits import board_flash, parse_bytes

ADDRESS_SPACE = 1 << 30
BOMB_SECONDS = 60


def _model(nodes, consts: dict[str, np.ndarray], outputs=("y",), inputs=()) -> bytes:
    from onnx import TensorProto, helper, numpy_helper
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs]
    graph = helper.make_graph(nodes, "g", vi,
                              [helper.make_empty_tensor_value_info(o) for o in outputs],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]
                             ).SerializeToString()


def _node(op, ins, outs, **attrs):
    from onnx import helper
    return helper.make_node(op, ins, outs, **attrs)


def _range(limit: float, dtype=np.float32) -> bytes:
    return _model([_node("Range", ["a", "b", "c"], ["y"])],
                  {"a": np.array(0, dtype), "b": np.array(limit, dtype), "c": np.array(1, dtype)})


def _fill(*shape: int) -> bytes:
    return _model([_node("ConstantOfShape", ["s"], ["y"])], {"s": np.array(shape, np.int64)})


def _tile_weight(columns: int) -> bytes:
    """A MatMul whose [4, columns] weight is a Tile of 16 bytes: folding
    must build it (a weight exists in memory), 385 MB at 24M columns."""
    return _model([_node("Tile", ["c", "r"], ["w"]), _node("MatMul", ["x", "w"], ["y"])],
                  {"c": np.ones((4, 1), np.float32), "r": np.array([1, columns], np.int64)},
                  inputs=[("x", [1, 4])])


# A bare-metal board may refuse a bomb by its RAM (the harness's output buffer
# is priced from the shapes) before the compile-memory budget is reached.
PRICED = "compile-memory budget|flash|do not fit the RAM"

BOMBS = {
    # name: (model, what the one line says)
    "Range 260M elements": (_range(2.6e8), PRICED),
    "Range 4G elements": (_range(4e9), "AOT_MAX_TENSOR_ELEMENTS"),
    "Range int64 48M (385 MB)": (_range(48_000_000, np.int64), PRICED),
    "ConstantOfShape 4G elements": (_fill(65536, 65536), "AOT_MAX_TENSOR_ELEMENTS"),
    "Tile weight 385 MB": (_tile_weight(24_000_000), PRICED),
}


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


@pytest.mark.parametrize("board", ["host", "mps2-an386"])
@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_bombs_are_refused_under_1gib(bomb, board, tmp_path):
    import re
    data, message = BOMBS[bomb]
    assert len(data) < 1100
    model = tmp_path / "bomb.onnx"
    model.write_bytes(data)
    env = {k: v for k, v in os.environ.items()
           if k not in ("AOT_DEBUG", "AOT_COMPILE_MEMORY", "AOT_MAX_TENSOR_ELEMENTS")}
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "aot", "package", str(model), "--board", board,
                        "-o", str(tmp_path / "pkg")], capture_output=True, text=True, env=env,
                       preexec_fn=_limited, timeout=BOMB_SECONDS)
    seconds = time.monotonic() - start
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and lines[0].startswith("aot: error: "), lines
    assert re.search(message, lines[0]), lines[0]
    assert "out of memory" not in lines[0]      # priced before allocating, not caught after
    assert seconds < BOMB_SECONDS
    assert not (tmp_path / "pkg").exists()


def test_a_folded_weight_over_the_budget_is_refused_by_name(tmp_path, monkeypatch):
    model = tmp_path / "m.onnx"
    model.write_bytes(_tile_weight(100_000))
    monkeypatch.setenv("AOT_COMPILE_MEMORY", "1M")
    with pytest.raises(BudgetError, match=r"Tile node 'Tile_0': computing its 400000 elements"
                                          r".*budget of 1048576 bytes \(AOT_COMPILE_MEMORY"):
        aot.optimize(aot.load(model))
    monkeypatch.setenv("AOT_COMPILE_MEMORY", "16M")
    graph = aot.optimize(aot.load(model))
    assert sum(a.size for a in graph.constants.values()) >= 400_000


def test_a_folded_weight_larger_than_the_flash_is_refused(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(_tile_weight(1000))
    graph = aot.load(model)
    with board_flash("tiny", 8000):
        with pytest.raises(BudgetError, match="a 16000-byte constant does not fit the flash of "
                                              r"board 'tiny' \(8000 bytes\)"):
            aot.optimize(graph)
    aot.optimize(graph)     # no board: the weight is made


def test_the_constants_folding_makes_add_up(tmp_path, monkeypatch):
    """Eight 256 KB fills read as MatMul weights: each is within a 1 MB
    budget, together they are not."""
    nodes, consts = [], {}
    for k in range(8):
        consts[f"s{k}"] = np.array([4, 1 << 14], np.int64)
        nodes += [_node("ConstantOfShape", [f"s{k}"], [f"w{k}"]),
                  _node("MatMul", ["x", f"w{k}"], [f"y{k}"])]
    model = tmp_path / "m.onnx"
    model.write_bytes(_model(nodes, consts, [f"y{k}" for k in range(8)], [("x", [1, 4])]))
    monkeypatch.setenv("AOT_COMPILE_MEMORY", "1M")
    with pytest.raises(BudgetError, match="the constants made at compile time would take"):
        aot.optimize(aot.load(model))


def test_a_fill_over_the_budget_stays_a_kernel(tmp_path, monkeypatch):
    """Added to the input, a large ConstantOfShape is computed by the
    device (inlined into the Add) instead of folded."""
    model = tmp_path / "m.onnx"
    model.write_bytes(_model([_node("ConstantOfShape", ["s"], ["c"]),
                              _node("Add", ["x", "c"], ["y"])],
                             {"s": np.array([64, 1024], np.int64)}, inputs=[("x", [64, 1024])]))
    monkeypatch.setenv("AOT_COMPILE_MEMORY", "64K")
    graph = aot.optimize(aot.load(model))
    assert not any(a.size > 1024 for a in graph.constants.values())
    x = np.random.default_rng(0).standard_normal((64, 1024)).astype(np.float32)
    np.testing.assert_array_equal(aot.interpret(graph, {"x": x})["y"], x)


@pytest.mark.parametrize("text, value", [("268435456", 1 << 28), ("512M", 512 << 20),
                                         ("2G", 2 << 30), ("64KiB", 64 << 10), ("1gb", 1 << 30)])
def test_byte_counts(text, value):
    assert parse_bytes(text, "X") == value


def test_a_bad_budget_is_one_line(tmp_path, monkeypatch):
    model = tmp_path / "m.onnx"
    model.write_bytes(_tile_weight(1000))
    monkeypatch.setenv("AOT_COMPILE_MEMORY", "lots")
    with pytest.raises(AotError, match=r"AOT_COMPILE_MEMORY='lots': expected a byte count"):
        aot.optimize(aot.load(model))


def test_memory_exhaustion_is_exit_2(tmp_path, monkeypatch, capsys):
    """The backstop for what no budget priced: one line, exit 2."""
    from aot import api, cli

    def exhausted(*args, **kwargs):
        raise MemoryError("Unable to allocate 1.00 TiB for an array")
    monkeypatch.setattr(api, "package", exhausted)
    assert cli.main(["package", str(tmp_path / "m.onnx"), "--board", "host"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["aot: error: out of memory: Unable to allocate 1.00 TiB for an array (the "
                   "process's memory limit is lower than this model needs)"]


# ---- static data and board memories, refused before compiling -------------------------------

def _elementwise(n: int, ops=("Relu",)) -> bytes:
    """x [1, n] float through a chain of element-wise ops, as an exporter
    writes a pre-processing block: static output shapes, opset 17."""
    from onnx import TensorProto, helper
    names = ["x", *(f"t{i}" for i in range(len(ops) - 1)), "y"]
    graph = helper.make_graph(
        [_node(op, [a], [b]) for op, a, b in zip(ops, names, names[1:])], "pre",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]
                             ).SerializeToString()


@pytest.fixture
def never_compiled(monkeypatch):
    """Fails a test whose package (codegen c) gets as far as emitting or
    compiling code."""
    def compiled(*args, **kwargs):
        raise AssertionError("code emitted: the limit was not checked first")
    for where in ("aot.codegen.emit_c", "aot.packaging.toolchain.build_library"):
        monkeypatch.setattr(where, compiled)


def test_an_input_of_the_element_limit_is_refused_on_host_by_name(tmp_path, capsys,
                                                                   never_compiled):
    """2^28 float32 in and out: 2 GiB of harness buffers, all x86-64's small
    code model addresses (the link would fail in a libc function)."""
    from aot import cli

    (tmp_path / "big.onnx").write_bytes(_elementwise(1 << 28))
    assert cli.main(["package", str(tmp_path / "big.onnx"), "--board", "host",
                     "-o", str(tmp_path / "pkg")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "aot: error: the program's static data of 2.0 GiB (harness inputs 1.0 GiB, harness "
        "outputs 1.0 GiB) does not fit the 2.0 GiB of code and static data that the code model "
        "of target 'x86_64-linux' addresses (board 'host'); give the model smaller inputs "
        "(--input-shape for a symbolic dimension)"]
    assert os.listdir(tmp_path) == ["big.onnx"]


def test_an_arena_past_the_code_model_names_the_options_that_grow_it(tmp_path, never_compiled):
    """Planned, before any kernel is emitted: --io-in-arena and --checks each
    add a copy, and the error says so."""
    (tmp_path / "mid.onnx").write_bytes(_elementwise(1 << 27, ("Relu", "Neg")))
    with pytest.raises(BudgetError) as e:
        aot.package(tmp_path / "mid.onnx", board="host", out_dir=tmp_path / "pkg",
                    io_in_arena=True, checks=True)
    assert str(e.value) == (
        "the program's static data of 3.5 GiB (arena 1.0 GiB, harness inputs 512.0 MiB, "
        "harness outputs 512.0 MiB, --checks arena and input copies 1.5 GiB) does not fit the "
        "2.0 GiB of code and static data that the code model of target 'x86_64-linux' "
        "addresses (board 'host'); package without --io-in-arena (it copies the inputs and "
        "outputs into the arena); package without --checks; give the model smaller inputs "
        "(--input-shape for a symbolic dimension)")


def test_harness_buffers_past_a_cortex_m_ram_are_refused_before_linking(tmp_path,
                                                                        never_compiled):
    """The harness is the firmware: its input and output buffers share the
    board's RAM with the arena (the link would say "region `RAM' overflowed")."""
    (tmp_path / "m.onnx").write_bytes(_elementwise(600_000))
    with pytest.raises(BudgetError) as e:
        aot.package(tmp_path / "m.onnx", board="mps2-an386", out_dir=tmp_path / "pkg")
    assert str(e.value) == (
        "the arena, state and harness buffers (harness inputs 2.3 MiB, harness outputs 2.3 MiB: "
        "4800000 bytes) do not fit the RAM of board 'mps2-an386' (4194304 bytes); give the "
        "model smaller inputs (--input-shape for a symbolic dimension)")


# ---- wide fan-in ---------------------------------------------------------------------------

def _wide(op: str, n: int, dtype="float32", **attrs) -> bytes:
    from onnx import helper
    code = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    ins = [helper.make_tensor_value_info(f"x{i}", code, [1, 4]) for i in range(n)]
    graph = helper.make_graph([_node(op, [f"x{i}" for i in range(n)], ["y"], **attrs)], "g", ins,
                              [helper.make_empty_tensor_value_info("y")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]
                             ).SerializeToString()


@pytest.mark.parametrize("op, dtype, attrs", [("Sum", "float32", {}), ("Max", "float32", {}),
                                              ("Min", "int8", {}), ("Mean", "float32", {}),
                                              ("Mean", "int32", {}),
                                              ("Concat", "float32", {"axis": 1})])
def test_wide_fan_in_is_split_into_narrow_nodes(op, dtype, attrs, tmp_path):
    from aot.passes.fanin import MAX_FAN_IN

    model = tmp_path / "wide.onnx"
    model.write_bytes(_wide(op, 1000, dtype, **attrs))
    imported = aot.load(model)
    graph = aot.optimize(imported)
    bodies = [m for n in graph.nodes for m in (n.attrs["body"].nodes if n.op == "fused" else [n])]
    assert max(len(m.inputs) for m in bodies) <= MAX_FAN_IN
    rng = np.random.default_rng(1)
    info = np.iinfo(dtype) if dtype.startswith("int") else None
    inputs = {f"x{i}": (rng.integers(info.min // 1000, info.max // 1000, (1, 4)).astype(dtype)
                        if info else rng.standard_normal((1, 4)).astype(dtype))
              for i in range(1000)}
    want = aot.interpret(imported, inputs)["y"]
    got = aot.interpret(graph, inputs)["y"]
    if op == "Mean" and dtype == "float32":   # the split sums in float32, as the kernel does
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    else:                                     # the same operations in the same order
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["Sum", "Concat"])
def test_a_1000_input_node_packages_and_runs(op, tmp_path):
    from aot.deploy import run_package
    from aot.targets import get_board

    model = tmp_path / "wide.onnx"
    model.write_bytes(_wide(op, 1000, axis=1) if op == "Concat" else _wide(op, 1000))
    info = aot.package(model, board="host", out_dir=tmp_path / "pkg")
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal((1, 4)).astype(np.float32) for _ in range(1000)]
    got = run_package(info.path, get_board("host"), inputs, warmup=0, runs=1).outputs[0]
    want = aot.interpret(aot.load(model), {f"x{i}": x for i, x in enumerate(inputs)})["y"]
    np.testing.assert_array_equal(got, want)


def test_tir_walkers_have_no_depth_limit():
    from aot.ir.tir import (FLOAT32, Bin, Buffer, Const, Load, Var, dtype_of, map_expr,
                            walk_expr)
    b = Buffer("b", FLOAT32, (4,))
    e = Const(0.0, FLOAT32)
    for _ in range(20_000):
        e = Bin("+", e, Load(b, Var("i")))
    assert sum(1 for _ in walk_expr(e)) == 60_001
    assert dtype_of(Bin("<", e, e)).scalar == "bool"
    doubled = map_expr(e, lambda x: Const(1.0, FLOAT32) if isinstance(x, Const) else None)
    assert sum(isinstance(x, Const) and x.value == 1.0 for x in walk_expr(doubled)) == 1


def test_interpolation_over_many_axes_is_refused_not_a_recursion(tmp_path):
    """Linear Resize sums one term per combination of the axes' taps: over
    10 axes 1,024 terms nested in one expression (a RecursionError)."""
    from aot.errors import UnsupportedError
    from onnx import TensorProto, helper, numpy_helper

    def resize(rank: int) -> Path:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2] * rank)
        scales = numpy_helper.from_array(np.full(rank, 1.5, np.float32), "s")
        graph = helper.make_graph([_node("Resize", ["x", "", "s"], ["y"], mode="linear")], "g",
                                  [x], [helper.make_empty_tensor_value_info("y")], [scales])
        path = tmp_path / f"resize{rank}.onnx"
        path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
                         .SerializeToString())
        return path

    from aot.api import package
    with pytest.raises(UnsupportedError, match=r"interpolating over 10 axes at once \(1024 taps"):
        package(resize(10), board="host", out_dir=tmp_path / "p10")
    package(resize(6), board="host", out_dir=tmp_path / "p6")      # 64 terms: within reach
