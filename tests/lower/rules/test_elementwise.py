"""Elementwise value rules (aot/lower/rules/elementwise.py): each op as a one-node
graph, compiled (C and LLVM backends) and run, against the numpy reference
interpreter. Scalar loops for every case; the vector form (4 and 8 lanes)
for the cases whose last axis allows it. All cases of a run share one
compile. Then the ONNX node conformance cases of all ops with rules in
elementwise/injective/reduce, through the C kernels."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from aot.testing.kernels import compare_with_interpreter, single_op_graph
from aot.check.inputs import random_inputs

F, I8, I32, I64, U8, B = "float32", "int8", "int32", "int64", "uint8", "bool"

UNARY_FLOAT = """Sqrt Exp Log Ceil Floor Round Reciprocal Tanh Sigmoid Erf Sin Cos Tan Asin
Acos Atan Sinh Cosh Asinh Acosh Atanh Softplus Softsign HardSwish Mish IsNaN""".split()

# name -> (op, inputs, attrs); inputs as for single_op_graph
CASES: dict[str, tuple] = {}


def case(name: str, op: str, inputs, outputs: int = 1, **attrs):
    assert name not in CASES
    CASES[name] = (op, inputs, attrs, outputs)


for _op in UNARY_FLOAT:
    case(_op, _op, [((3, 8), F)])
for _op, _attrs in (("LeakyRelu", {"alpha": 0.2}), ("Elu", {"alpha": 0.7}), ("Selu", {}),
                    ("Celu", {"alpha": 1.5}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
                    ("ThresholdedRelu", {"alpha": 0.1}), ("Shrink", {"lambd": 0.3, "bias": 0.1}),
                    ("Gelu", {}), ("Gelu", {"approximate": "tanh"})):
    case(f"{_op}-{'-'.join(map(str, _attrs.values()))}", _op, [((2, 8), F)], **_attrs)
for _dt in (F, I8, I32):
    for _op in ("Abs", "Neg", "Sign", "Relu"):
        case(f"{_op}-{_dt}", _op, [((2, 8), _dt)])
case("Abs-uint8", "Abs", [((8,), U8)])
case("Sign-uint8", "Sign", [((8,), U8)])

# binary arithmetic over a spread of broadcasts
BROADCASTS = {"same": ((2, 3, 8), (2, 3, 8)), "row": ((2, 3, 8), (8,)),
              "col": ((2, 3, 8), (3, 1)), "scalar": ((2, 3, 8), ()),
              "both": ((2, 1, 8), (1, 3, 1)), "left": ((1, 8), (4, 3, 8))}
for _op in ("Add", "Sub", "Mul", "Div", "Pow"):
    for _b, (_s0, _s1) in BROADCASTS.items():
        case(f"{_op}-{_b}", _op, [(_s0, F), (_s1, F)])
for _op in ("Add", "Sub", "Mul", "Div"):
    for _dt in (I8, I32, I64, U8):
        case(f"{_op}-{_dt}", _op, [((3, 8), _dt), ((8,), _dt)])
case("Div-int32-negative", "Div", [np.arange(-12, 12, dtype=np.int32).reshape(3, 8),
                                   ((3, 8), I32)])
case("Add-const", "Add", [((2, 8), F), np.float32(0.5).reshape(())])
case("Mul-const-row", "Mul", [((2, 8), F), np.linspace(-1, 1, 8, dtype=np.float32)])
case("Pow-int-exp", "Pow", [((2, 8), F), np.array(3, np.int64)])
case("Pow-square", "Pow", [((2, 8), F), np.float32(2)])
case("Pow-one", "Pow", [((2, 8), F), np.array([1], np.float32)])
case("Pow-int", "Pow", [((2, 8), I32), ((8,), I32)])
for _fmod in (0, 1):
    case(f"Mod-int32-fmod{_fmod}", "Mod", [np.arange(-12, 12, dtype=np.int32).reshape(3, 8),
                                           np.array([3, -3, 5, -5, 1, 7, 2, -2], np.int32)],
         fmod=_fmod)
    case(f"Mod-int8-runtime-fmod{_fmod}", "Mod", [((3, 8), I8), ((8,), I8)], fmod=_fmod)
case("Mod-float-fmod", "Mod", [((3, 8), F), np.full(8, 0.3, np.float32)], fmod=1)
case("Mod-float", "Mod", [((3, 8), F), np.array([0.3, -0.3, 2, -2, 0.5, -7, 1e-3, 3],
                                                np.float32)], fmod=0)
# shift counts in range, negative and of the width or more (0 / the sign fill)
_COUNTS = {I8: [0, 1, 3, 7, 8, 9, -1, 100], I32: [0, 1, 5, 31, 32, 33, -2, 100],
           U8: [0, 1, 3, 7, 8, 9, 200, 255], I64: [0, 1, 17, 63, 64, 65, -1, 1000]}
for _dt, _counts in _COUNTS.items():
    for _dir in ("LEFT", "RIGHT"):
        case(f"BitShift-{_dir}-{_dt}", "BitShift",
             [((3, 8), _dt), np.array(_counts, np.dtype(_dt))], direction=_dir)
case("BitwiseNot-int8", "BitwiseNot", [((2, 8), I8)])
case("BitwiseNot-uint8", "BitwiseNot", [((2, 8), U8)])
case("Swish", "Swish", [((2, 8), F)], alpha=0.7)
for _pos, _neg in ((1, 1), (1, 0), (0, 1), (0, 0)):
    case(f"IsInf-{_pos}{_neg}", "IsInf", [np.array([np.inf, -np.inf, np.nan, 0, 1, -1, 3e38,
                                                    -3e38], np.float32)],
         detect_positive=_pos, detect_negative=_neg)
for _op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
    case(_op, _op, [((3, 8), I32), ((8,), I32)])
for _op in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"):
    case(f"{_op}-float", _op, [((3, 8), F), ((3, 1), F)])
    case(f"{_op}-int32", _op, [((3, 8), I32), ((8,), I32)])
case("Equal-bool", "Equal", [((3, 8), B), ((8,), B)])
for _op in ("And", "Or", "Xor"):
    case(_op, _op, [((3, 8), B), ((3, 1), B)])
case("Not", "Not", [((2, 8), B)])
case("PRelu-channel", "PRelu", [((2, 3, 8), F), np.array([[0.1], [0.2], [-0.3]], np.float32)])
case("PRelu-runtime", "PRelu", [((2, 3, 8), F), ((8,), F)])
for _op in ("Max", "Min", "Sum", "Mean"):
    case(f"{_op}-3", _op, [((2, 3, 8), F), ((3, 8), F), ((2, 1, 1), F)])
    case(f"{_op}-1", _op, [((2, 8), F)])
case("Max-int8", "Max", [((2, 8), I8), ((8,), I8)])
case("Mean-int32", "Mean", [((2, 8), I32), ((8,), I32), ((2, 1), I32)])
case("Clip-both", "Clip", [((2, 8), F), np.float32(-0.5), np.float32(0.25)])
case("Clip-min", "Clip", [((2, 8), F), np.float32(-0.5)])
case("Clip-max", "Clip", [((2, 8), F), None, np.float32(0.5)])
case("Clip-runtime", "Clip", [((2, 8), F), ((), F), ((), F)])
case("Clip-int8", "Clip", [((2, 8), I8), np.int8(-20), np.int8(50)])
case("Where", "Where", [((2, 1, 8), B), ((3, 8), F), ((2, 3, 1), F)])
case("Where-int", "Where", [((8,), B), ((2, 8), I32), np.int32(7)])
# float -> int out of the target's range is undefined (ONNX, C): in-range values only
for _to, _code, _lo, _hi in (("float", 1, -300, 300), ("int32", 6, -300, 300),
                             ("int8", 3, -128.9, 127.9), ("uint8", 2, -0.9, 255.9),
                             ("bool", 9, -2, 2), ("int64", 7, -300, 300)):
    case(f"Cast-float-{_to}", "Cast", [np.linspace(_lo, _hi, 16, dtype=np.float32)
                                       .reshape(2, 8)], to=_code)
case("Cast-int32-float", "Cast", [((2, 8), I32)], to=1)
case("Cast-bool-float", "Cast", [((2, 8), B)], to=1)
case("Cast-int8-bool", "Cast", [((2, 8), I8)], to=9)
case("Cast-nan-int", "Cast", [np.array([np.nan, np.inf, -np.inf, 2.7, -2.7, 0, 1, -1],
                                       np.float32)], to=6)
case("CastLike", "CastLike", [((2, 8), F), np.zeros(1, np.int32)])
case("Identity", "Identity", [((2, 8), F)])
case("Dropout-mask", "Dropout", [((2, 8), F)], outputs=2)
case("Round-halves", "Round", [np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49999997],
                                        np.float32)])


def _inputs(graph, name: str) -> dict:
    ins = random_inputs(graph, seed=len(name))
    # a spread wider than [-1, 1): saturation of Sigmoid/Tanh, large exps, halves for Round
    for k, v in ins.items():
        if v.dtype == np.float32:
            ins[k] = (v * 4).astype(np.float32)
            if "Round" in name:
                ins[k] = np.round(ins[k] * 2) / 2
    return ins


@functools.lru_cache(maxsize=None)
def _graphs():
    out = {}
    for name, (op, inputs, attrs, outputs) in CASES.items():
        g = single_op_graph(op, inputs, attrs, outputs)
        out[name] = (g, _inputs(g, name))
    return out


@functools.lru_cache(maxsize=None)
def _results(lanes: int, codegen: str = "c"):
    cases = _graphs()
    if lanes > 1:
        cases = {k: v for k, v in cases.items() if _vectorizable(v[0], lanes)}
    return compare_with_interpreter(cases, lanes=lanes, codegen=codegen)


def _vectorizable(graph, lanes: int) -> bool:
    """One output whose last axis the lanes divide, and no vector in the
    kernel wider than the host's registers (as a schedule would choose)."""
    from aot.ir.tir import dtype_of, stmt_exprs, walk_expr, walk_stmt
    from aot.testing.kernels import host_target, vectorized_kernel
    shape = graph.types[graph.outputs[0]].shape
    if len(graph.outputs) != 1 or not shape or shape[-1] % lanes:
        return False
    body = vectorized_kernel(graph, lanes).func.body
    widest = max(dtype_of(e).bits * dtype_of(e).lanes for s in walk_stmt(body)
                 for top in stmt_exprs(s) for e in walk_expr(top))
    return widest <= host_target().vector_bits


@pytest.mark.parametrize("codegen", ["c", "llvm"])
@pytest.mark.parametrize("name", list(CASES))
def test_scalar(name, codegen):
    assert _results(1, codegen)[name] is None, _results(1, codegen)[name]


@pytest.mark.parametrize("codegen", ["c", "llvm"])
@pytest.mark.parametrize("name,lanes", [(n, lanes) for lanes in (4, 8)
                                        for n, (g, _) in _graphs().items()
                                        if _vectorizable(g, lanes)])
def test_vector(name, lanes, codegen):
    assert _results(lanes, codegen)[name] is None, _results(lanes, codegen)[name]


def test_vector_broadcast_splats_scalar_loads():
    """An input constant along the last axis is one scalar load splatted, not a
    vector load reading past it."""
    from aot.ir.tir import Broadcast, Load, walk_expr
    from aot.testing.kernels import vectorized_kernel
    g = single_op_graph("Add", [((3, 8), F), ((3, 1), F)])
    store = vectorized_kernel(g, 4).func.body.body.body
    splats = [e for e in walk_expr(store.value) if isinstance(e, Broadcast)]
    assert len(splats) == 1 and isinstance(splats[0].value, Load)
    assert splats[0].value.lanes == 1


# ---- ONNX node conformance through the code generator -------------------------------------

RULE_MODULES = ("aot.lower.rules.elementwise", "aot.lower.rules.tensor", "aot.lower.rules.reduce")


def _rule_module(op: str) -> str | None:
    from aot.lower.rules import KERNEL_RULES, VALUE_RULES
    rule = VALUE_RULES.get(op) or KERNEL_RULES.get(op)
    return rule.__module__ if rule else None


def _prepare(case):
    """[(graph, inputs, expected)] per data set, shape-argument inputs bound
    at compile time as the interpreter conformance test does; or an error."""
    from support.conformance import bind_and_retry, data_sets

    from aot.frontend.onnx import import_onnx
    from aot.passes.infer import infer_types
    from aot.passes.pipeline import optimize

    def attempt(model):
        return optimize(infer_types(import_onnx(model.SerializeToString(), case.name)))

    runs = []
    for ins, outs in data_sets(case):
        graph, _ = bind_and_retry(case.model, ins, attempt)
        runs.append((graph, {k: v for k, v in ins.items() if k in graph.inputs}, outs))
    return runs


@functools.lru_cache(maxsize=None)
def _conformance():
    """(passed, failed: [(case, reason)]) for the node test cases of the ops
    whose rules live in elementwise/injective/reduce, all compiled at once."""
    import warnings

    from support.conformance import _compare, cases, skip_reason

    from aot.errors import AotError
    from aot.lower import lower_graph
    from aot.testing.kernels import compile_kernels, host_target, run_kernels
    import dataclasses

    failed, prepared, front_end = [], {}, []
    for op, case in cases():
        if _rule_module(op) not in RULE_MODULES or skip_reason(case):
            continue
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                prepared[case.name] = _prepare(case)
        except AotError:     # import/optimize refuse it: the interpreter test reports that
            front_end.append(case.name)
    kernels = {}
    for n, (name, runs) in enumerate(prepared.items()):
        try:
            kernels[name] = [[dataclasses.replace(k, func=dataclasses.replace(
                k.func, name=f"c{n}_{r}_{k.func.name}")) for k in lower_graph(g, host_target())]
                for r, (g, _, _) in enumerate(runs)]
        except AotError as e:
            failed.append((name, f"lowering: {type(e).__name__}: {e}"))
    lib, symbols = compile_kernels([k for ks in kernels.values() for run in ks for k in run])
    passed = []
    for name, ks in kernels.items():
        reason = None
        for (graph, ins, outs), run in zip(prepared[name], ks):
            with np.errstate(all="ignore"):
                got = run_kernels(lib, symbols, graph, run, ins)
            for out, want in outs.items():
                reason = reason or _compare(out, np.asarray(got[out]), np.asarray(want))
        (failed.append((name, reason)) if reason else passed.append(name))
    return passed, failed, front_end


def test_onnx_conformance_through_codegen(record_property):
    passed, failed, front_end = _conformance()
    run = len(passed) + len(failed)
    lines = [f"ONNX node conformance through C (elementwise/injective/reduce rules): "
             f"{len(passed)} passed / {run} run; {len(front_end)} not run (refused before "
             "lowering, see the interpreter conformance test)"]
    lines += [f"  FAIL {name}: {reason[:200]}" for name, reason in failed]
    record_property("summary", "\n".join(lines))
    print("\n".join(lines))
    assert run > 200
    assert not failed, "\n".join(lines)


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_tanh_and_exp_float32_vectorize_within_tolerance(codegen):
    """float32 Tanh and Exp through the vectorizing helpers (aot_tanh,
    aot_exp; a libm call is one call per lane): tanh within 2.8e-7 of the
    exact value, absolute and relative, exp within 1e-7 relative, over the
    whole float range; NaN stays NaN, the infinities give the limits."""
    from aot.ir.tir import Call, stmt_exprs, walk_expr, walk_stmt
    from aot.testing.kernels import build_and_run, vectorized_kernel

    special = [np.inf, -np.inf, np.nan, 0.0, -0.0, 3e38, -3e38]
    x = np.concatenate([np.linspace(-30, 30, 8001), np.geomspace(1e-30, 10, 2000),
                        -np.geomspace(1e-30, 10, 2000), special]).astype(np.float32)
    graph = single_op_graph("Tanh", [((x.size,), np.float32)])
    got = build_and_run(graph, {"x0": x}, codegen=codegen)["y0"]
    want = np.tanh(x.astype(np.float64))
    assert np.array_equal(np.isnan(got), np.isnan(x))
    ok = ~np.isnan(x)
    err = np.abs(got[ok] - want[ok])
    assert err.max() <= 2.8e-7 and (err / np.maximum(np.abs(want[ok]), 1e-38)).max() <= 2.8e-7
    assert list(got[-7:-5]) == [1.0, -1.0] and np.signbit(got[-3])
    e = np.concatenate([np.linspace(-110, 95, 8001), special]).astype(np.float32)
    graph = single_op_graph("Exp", [((e.size,), np.float32)])
    got = build_and_run(graph, {"x0": e}, codegen=codegen)["y0"]
    with np.errstate(over="ignore"):
        want = np.exp(e.astype(np.float64))
    normal = (want > np.finfo(np.float32).tiny) & (want < np.finfo(np.float32).max)
    assert (np.abs(got[normal] - want[normal]) / want[normal]).max() <= 1e-7
    assert list(got[-7:-5]) == [np.inf, 0.0] and np.isnan(got[-5])
    for op, helper in (("Tanh", "aot_tanh"), ("Exp", "aot_exp")):
        body = vectorized_kernel(single_op_graph(op, [((64,), np.float32)]), 8).func.body
        calls = {(e.fn, e.dtype.lanes) for s in walk_stmt(body) for top in stmt_exprs(s)
                 for e in walk_expr(top) if isinstance(e, Call)}
        assert calls == {(helper, 8)}, calls
