"""The TIR printer (aot/ir/tir_print.py), the TIR pipeline
(aot/lower/tir_passes/__init__.py) and `aot package --dump-tir`.

The printer is checked against golden text on hand-built PrimFuncs; each
pass like the graph's (tests/passes/test_passes.py::check): it leaves its input
as it was and gives the same output twice; the pipeline on real kernels."""
from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace

import pytest

import aot
from aot.ir.tir import (BOOL, FLOAT32, INT32, Assign, Bin, Broadcast, Buffer, BufferKind, Call,
                        Cast, Comment, Const, Decl, DType, Fail, For, ForKind, If, Load, PrimFunc,
                        Select, Store, Unary, Var, seq, walk_stmt)
from aot.ir.tir_print import print_expr, print_func
from aot.lower import lower_graph
from aot.lower.tir_passes.bind import LIMIT, bind_values, fresh_namer
from aot.lower.tir_passes.inplace import ATTR as IN_PLACE
from aot.lower.tir_passes import PIPELINE, dump_to, run_passes
from aot.targets import get_board

from support import MODELS

TARGET = get_board("host").target
I8, U8, F64 = DType("int8"), DType("uint8"), DType("float64")
OUT, PARAM = BufferKind.OUTPUT, BufferKind.PARAM


def c32(v: int) -> Const:
    return Const(v, INT32)


def small_func() -> PrimFunc:
    """One of each statement and most expressions."""
    x = Buffer("x", I8, (4, 16))
    w = Buffer("w", I8, (16,), PARAM, align=64)
    y = Buffer("y", INT32, (4, 16), OUT)
    i, j, k, acc = Var("i"), Var("j"), Var("k"), Var("acc")
    v = Var("v", DType("int32", 8))
    body = seq(
        Comment("two\nlines"),
        If(Bin("<", Load(x, c32(0)), Const(-128, I8)), Fail(1)),
        For(i, 4, seq(
            Decl(acc, c32(0)),
            For(k, 16, Assign(acc, Bin("+", acc, Bin("*", Cast(INT32, Load(x, Bin("+", Bin(
                "*", i, c32(16)), k))), Cast(INT32, Load(w, k))))), ForKind.UNROLLED, 0, 4),
            For(j, 16, seq(
                Decl(v, Bin("-", Broadcast(acc, 8), Bin("-", Cast(DType("int32", 8),
                                                                    Load(x, j, 8)), c32(3)))),
                Store(y, Bin("+", Bin("*", i, c32(16)), j),
                      Call("aot_rdhm", (v, Broadcast(c32(7), 8)), DType("int32", 8)))),
                ForKind.VECTORIZED, 0, 8),
            If(Bin("or", Bin("==", acc, c32(0)), Unary("not", Bin(">=", Bin("*", Bin(
                "+", acc, c32(1)), c32(2)), Unary("neg", acc)))),
               Store(y, i, Select(Bin("<", acc, c32(0)), Unary("abs", acc), Bin("max", acc,
                                                                                  c32(5)))),
               Store(y, i, Cast(INT32, Bin("/", Const(1.5, FLOAT32),
                                          Const(float("inf"), FLOAT32))))))),
        For(k, 3, Store(y, k, Cast(INT32, Bin("<", Const(0.25, F64), Const(True, BOOL)))),
            start=1))
    return PrimFunc("small", (x, w, y), body, ("node/a", "node:b"), (("in_place", ()),))


GOLDEN = """\
# small: from node/a, node:b
# in_place = ()
func small(x: int8[4, 16] input, w: int8[16] param align=64, y: int32[4, 16] output):
  # two\\nlines
  if x[0] < int8(-128):
    fail(1)
  for i in range(4):
    var acc: int32 = 0
    for k in unrolled(0, 16, 4):
      acc = acc + int32(x[i * 16 + k]) * int32(w[k])
    for j in vectorized(0, 16, 8):
      var v: int32x8 = broadcast(acc, 8) - (int32x8(x[ramp(j, 8)]) - 3)
      y[ramp(i * 16 + j, 8)] = aot_rdhm(v, broadcast(7, 8))
    if acc == 0 || !((acc + 1) * 2 >= -acc):
      y[i] = select(acc < 0, abs(acc), max(acc, 5))
    else:
      y[i] = int32(1.5f / float32(inf))
  for k in range(1, 4):
    y[k] = int32(float64(0.25) < true)
"""


def test_printer_golden_text():
    func = small_func()
    assert print_func(func) == GOLDEN
    assert print_func(small_func()) == GOLDEN       # deterministic


def test_printer_parenthesizes_only_what_needs_it():
    a, b, c = Var("a"), Var("b"), Var("c")
    cases = {Bin("-", a, Bin("-", b, c)): "a - (b - c)",
             Bin("-", Bin("-", a, b), c): "a - b - c",
             Bin("*", Bin("+", a, b), c): "(a + b) * c",
             Bin("+", a, Bin("*", b, c)): "a + b * c",
             Bin("==", Bin("<", a, b), Bin("<", b, c)): "(a < b) == (b < c)",
             Bin("and", Bin("or", a, b), c): "(a || b) && c",
             Bin("<<", Bin("&", a, b), c): "(a & b) << c",
             Unary("neg", Bin("+", a, b)): "-(a + b)",
             Unary("bitnot", a): "~a",
             Unary("neg", c32(-3)): "-(-3)",
             Unary("neg", Unary("neg", a)): "-(-a)",
             Bin("*", c32(-3), a): "-3 * a",
             Bin("-", a, c32(-3)): "a - -3"}
    for e, text in cases.items():
        assert print_expr(e) == text


def test_printer_is_not_recursive():
    """Expressions nest as deep as a fused chain: deeper than Python recursion."""
    e = Var("a")
    for n in range(sys.getrecursionlimit() * 2):
        e = Bin("+", e, c32(n % 3))
    assert print_expr(e).startswith("a + 0 + 1 + 2 + 0")


# ------------------------------------------------------------------ the passes

def check(func: PrimFunc, run) -> PrimFunc:
    """Run a pass; check it leaves its input as it was and is deterministic."""
    text = print_func(func)
    after = run(func, TARGET)
    assert print_func(func) == text, "the pass changed its input"
    assert print_func(run(func, TARGET)) == print_func(after), "the pass is not deterministic"
    return after


@pytest.fixture(scope="module")
def resnet_lowered():
    """ResNet-8 int8's kernels as lowered, before any TIR pass (it has
    residual adds done in place and long requantization epilogues)."""
    graph = aot.optimize(aot.load(MODELS / "mlperf_ic_resnet8_int8.tflite"))
    seen = {}
    lower_graph(graph, TARGET, lambda step: lambda k, name, f: seen.setdefault(
        (step, k), f))
    return [seen[(s, 0)] for s in sorted({s for s, _ in seen})], seen


@pytest.mark.parametrize("name", [name for name, _ in PIPELINE])
def test_each_pass_is_pure_and_deterministic(name, resnet_lowered):
    run = dict(PIPELINE)[name]
    for func in [small_func(), *resnet_lowered[0]]:
        check(func, run)


def test_pipeline_marks_in_place_binds_and_simplifies(resnet_lowered):
    funcs, seen = resnet_lowered
    n = len(funcs)
    at = {name: k for k, (name, _) in enumerate(PIPELINE, 1)}    # dump numbers
    assert at["in_place"] < at["bind"] < at["simplify"]
    assert at["float16"] < at["in_place"] and at["bind"] == at["in_place"] + 1
    p, b = at["in_place"], at["bind"]
    # in place: the residual adds (their skip input) and the reshape, judged before bind
    marked = {seen[(s, p)].name: dict(seen[(s, p)].attrs)[IN_PLACE] for s in range(n)
              if IN_PLACE in dict(seen[(s, p)].attrs)}
    assert marked == {"conv2d_add_2": (("in3", "out0"),), "conv2d_add_5": (("in3", "out0"),),
                      "conv2d_add_8": (("in3", "out0"),), "reshape_10": (("in0", "out0"),)}
    assert not any(IN_PLACE in dict(seen[(s, p - 1)].attrs) for s in range(n))
    # bind: the residual adds' long rescaling epilogues split into steps
    bound = {seen[(s, b)].name for s in range(n)
             if print_func(seen[(s, p)]) != print_func(seen[(s, b)])}
    assert {"conv2d_add_2", "conv2d_add_5", "conv2d_add_8"} <= bound
    for s in range(n):
        assert seen[(s, b)].attrs == seen[(s, p)].attrs
        if seen[(s, b)].name.startswith("conv2d_add"):
            # steps of the rescaling bound to locals, beyond those the rule bound itself
            rdhm = re.compile(r"var \w+: int32x8 = aot_rdhm\(")
            assert len(rdhm.findall(print_func(seen[(s, b)]))) > \
                len(rdhm.findall(print_func(seen[(s, p)])))
    # what the driver returns is the end of the pipeline
    for s in range(n):
        assert run_passes(funcs[s], TARGET) == seen[(s, len(PIPELINE))]


def test_bind_names_its_locals_apart_from_every_name():
    x = Buffer("high", INT32, (8,))
    y = Buffer("y", INT32, (8,), OUT)
    i = Var("i")
    value = Load(x, i)
    for k in range(LIMIT + 4):
        value = Call("aot_rdhm", (value, Var("high1")), INT32)
    func = PrimFunc("f", (x, y), For(i, 8, Store(y, i, value)))
    after = bind_values(func)
    names = [s.var.name for s in walk_stmt(after.body) if isinstance(s, Decl)]
    assert names and not {"high", "high1", "i", "y"} & set(names)
    assert len(set(names)) == len(names)
    fresh = fresh_namer(func)
    assert [fresh("i", INT32).name, fresh("i", INT32).name, fresh("x2", INT32).name] == \
        ["i1", "i2", "x2"]


def test_simplify_folds_what_the_range_decides():
    u8 = Buffer("u8", U8, (4,))
    y = Buffer("y", BOOL, (4,), OUT)
    i = Var("i")
    func = PrimFunc("f", (u8, y), For(i, 4, Store(y, i, Bin(
        "and", Bin(">=", Load(u8, i), Const(0, U8)), Bin("<", Load(u8, i), c32(300))))))
    after = check(func, dict(PIPELINE)["simplify"])
    assert "y[i] = true" in print_func(after)
    assert check(after, dict(PIPELINE)["simplify"]) == after      # a fixed point


# ---------------------------------------------------------------- --dump-tir

def cli(*args):
    return subprocess.run([sys.executable, "-m", "aot", *map(str, args)], capture_output=True,
                          text=True, timeout=600)


def test_package_dump_tir(tmp_path):
    model = MODELS / "tflm_hello_world_int8.tflite"
    dump = tmp_path / "tir"
    r = cli("package", model, "--board", "host", "-o", tmp_path / "pkg", "--dump-tir", dump)
    assert r.returncode == 0, r.stderr
    steps = sorted(p.name for p in dump.iterdir())
    graph = aot.optimize(aot.load(model))
    assert steps == [f"{k:03d}_{n.name}" for k, n in enumerate(graph.nodes)]
    names = ["00_lowered.tir", *(f"{k:02d}_{name}.tir" for k, (name, _) in
                                 enumerate(PIPELINE, 1))]
    for step in steps:
        assert sorted(p.name for p in (dump / step).iterdir()) == names
        assert (dump / step / names[0]).read_text().startswith(f"# {step[4:]}: from ")
    # the dump is the TIR the package was built from, and the same each time
    kernels = lower_graph(graph, TARGET)
    assert (dump / steps[0] / names[-1]).read_text() == print_func(kernels[0].func)
    again = tmp_path / "again"
    aot.package(model, board="host", out_dir=tmp_path / "pkg2", dump_tir=again)
    for step in steps:
        for name in names:
            assert (again / step / name).read_bytes() == (dump / step / name).read_bytes()
    # an existing directory is kept without --force, replaced with it
    r = cli("package", model, "--board", "host", "-o", tmp_path / "pkg3", "--dump-tir", dump)
    assert r.returncode == 2 and "already exists" in r.stderr
    assert not (tmp_path / "pkg3").exists()
    (dump / "mine").write_text("x")
    r = cli("package", model, "--board", "host", "-o", tmp_path / "pkg3", "--dump-tir", dump,
            "--force")
    assert r.returncode == 0, r.stderr
    assert not (dump / "mine").exists() and sorted(p.name for p in dump.iterdir()) == steps


def test_dump_file_names_are_one_path_component(tmp_path):
    write = dump_to(tmp_path)(7)
    func = replace(small_func(), name="../a/b:c d")
    write(0, "lowered", func)
    assert [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.tir")] == \
        ["007_a_b_c_d/00_lowered.tir"]
    assert all(p.parent == tmp_path for p in tmp_path.iterdir())


def test_a_failed_package_leaves_no_dump(tmp_path, monkeypatch, capsys):
    from onnx import TensorProto, helper

    from aot.cli import main as cli_main
    from aot.lower import rules

    vi = helper.make_tensor_value_info
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [vi("x", TensorProto.FLOAT, [4])], [vi("y", TensorProto.FLOAT, [4])])
    model = tmp_path / "relu.onnx"
    model.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                      .SerializeToString())
    monkeypatch.delitem(rules.VALUE_RULES, "Relu")
    code = cli_main(["package", str(model), "-o", str(tmp_path / "pkg"), "--board", "host",
                     "--dump-tir", str(tmp_path / "tir")])
    assert code == 2 and "Relu" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["relu.onnx"]
