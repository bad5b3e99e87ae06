"""The one op table (aot/ops/registry.py OPS): every op carries its lowering
next to inference, reference and fusion pattern, and aot.lower refuses to
import a table where they disagree. The ops that once had a reference but no
rule (GlobalLpPool, GroupNormalization, MaxUnpool, MeanVarianceNormalization,
RMSNormalization) and the multi-output value rules (Split, Dropout) are
compiled and run against the interpreter and ONNX's backend node cases."""
from __future__ import annotations

import ast
import functools
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import aot.lower  # noqa: F401 - fills the rules (and checks the table)
from aot.errors import AotError, UnsupportedError
from aot.ir.graph import TensorType
from aot.lower.rules import KERNEL_RULES, VALUE_RULES, check_op_table, kernel_rule, value_rule
from aot.testing.kernels import compare_with_interpreter, single_op_graph
from aot.ops import OPS, Layout, Pattern, Sink, register
from aot.ops.registry import RuleKind, lowering_problems
from aot.check.inputs import random_inputs

F = "float32"
AOT = Path(__file__).resolve().parents[2] / "aot"


def test_every_op_has_one_rule_of_the_kind_its_pattern_needs():
    assert lowering_problems() == []
    check_op_table()


@pytest.fixture
def scratch_op():
    """A throwaway op name, gone from the table afterwards."""
    name = "TestOnlyOp"
    yield name
    OPS.pop(name, None)


def _register(name: str, pattern: Pattern, **kw):
    register(name, infer=lambda sig: [sig.in_types[0]], pattern=pattern, **kw)(
        lambda call, args: [args[0]])


def test_a_missing_rule_is_named_at_import(scratch_op):
    _register(scratch_op, Pattern.ELEMWISE)
    with pytest.raises(RuntimeError) as e:
        check_op_table()
    (line,) = [s for s in str(e.value).splitlines() if scratch_op in s]
    assert "no compute rule" in line and "never_lowered=" in line


def test_a_rule_of_the_wrong_kind_is_named(scratch_op):
    _register(scratch_op, Pattern.ELEMWISE)
    kernel_rule(scratch_op)(lambda ctx, ins, emit: None)
    assert OPS[scratch_op].rule.kind is RuleKind.KERNEL
    (line,) = [s for s in lowering_problems() if scratch_op in s]
    assert "kernel rule" in line and "ELEMWISE" in line and "value rule" in line


def test_a_value_rule_on_an_opaque_op_is_named(scratch_op):
    _register(scratch_op, Pattern.OPAQUE)
    value_rule(scratch_op)(lambda ctx, ins, idx, lanes: None)
    (line,) = [s for s in lowering_problems() if scratch_op in s]
    assert "value rule" in line and "OPAQUE" in line


def test_never_lowered_ops_say_why_and_have_no_rule(scratch_op):
    _register(scratch_op, Pattern.OPAQUE, never_lowered="a pass always removes it")
    assert not [s for s in lowering_problems() if scratch_op in s]
    kernel_rule(scratch_op)(lambda ctx, ins, emit: None)
    (line,) = [s for s in lowering_problems() if scratch_op in s]
    assert "never_lowered" in line
    assert OPS["fused"].never_lowered and OPS["fused"].rule is None


@pytest.mark.parametrize("name, pattern, layout, sink", [
    ("TestOnlyOp", Pattern.BROADCAST, Layout(), Sink.BROADCAST),
    ("TestOnlyOp", Pattern.ELEMWISE, Layout(sink=Sink.STAY), Sink.STAY),
    ("TestOnlyOp", Pattern.INJECTIVE, Layout(), Sink.STAY),
    ("tfl.test_only_op", Pattern.ELEMWISE, Layout(), Sink.STAY),
    ("TestOnlyOp", Pattern.REDUCE, Layout(sink=Sink.AXIS, axis=-1), Sink.AXIS),
])
def test_layout_facts_default_by_pattern(name, pattern, layout, sink):
    try:
        _register(name, pattern, layout=layout)
        assert OPS[name].layout.sink is sink
        assert OPS[name].layout.axis == layout.axis
    finally:
        OPS.pop(name, None)


def test_the_layout_facts_are_the_ops():
    channels_first = {n for n, d in OPS.items() if d.layout.channels_first}
    assert {"Conv", "MaxPool", "GlobalAveragePool", "BatchNormalization"} <= channels_first
    assert {n for n, d in OPS.items() if d.layout.weighted} == {"Conv", "ConvTranspose"}
    assert all(d.layout.sink is not None for d in OPS.values())
    assert OPS["BatchNormalization"].layout.sink is Sink.STAY     # per-channel operands
    assert OPS["Add"].layout.sink is Sink.BROADCAST
    assert OPS["tfl.add"].layout.sink is Sink.STAY


def test_two_rules_and_rules_for_unknown_ops_are_refused(scratch_op):
    with pytest.raises(RuntimeError, match=f"'{scratch_op}', which no module"):
        value_rule(scratch_op)(lambda ctx, ins, idx, lanes: None)
    with pytest.raises(RuntimeError, match="op 'Relu' has two compute rules: "
                                           "aot.lower.rules.elementwise"):
        kernel_rule("Relu")(lambda ctx, ins, emit: None)
    assert OPS["Relu"].rule.kind is RuleKind.VALUE


def test_the_rule_views_read_and_write_the_table(monkeypatch):
    assert "Relu" in VALUE_RULES and "Relu" not in KERNEL_RULES and "Conv" in KERNEL_RULES
    assert VALUE_RULES["Relu"] is OPS["Relu"].rule.fn
    assert len(VALUE_RULES) + len(KERNEL_RULES) == sum(d.rule is not None for d in OPS.values())
    monkeypatch.delitem(VALUE_RULES, "Relu")
    assert OPS["Relu"].rule is None
    g = single_op_graph("Relu", [((4,), F)])
    from aot.lower import lower_graph
    from aot.testing.kernels import host_target
    with pytest.raises(UnsupportedError, match="no rule for op 'Relu' yet"):
        lower_graph(g, host_target())


def _private_reaches(path: Path) -> list[str]:
    """`from aot.x import _name` and `module._name` (module an aot import) in one file."""
    tree = ast.parse(path.read_text())
    modules, found = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aot"):
            found += [f"{node.lineno}: {a.name}" for a in node.names if a.name.startswith("_")]
            modules.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Import):
            modules.update(a.asname or a.name for a in node.names if a.name.startswith("aot"))
    found += [f"{n.lineno}: {n.value.id}.{n.attr}" for n in ast.walk(tree)
              if isinstance(n, ast.Attribute) and n.attr.startswith("_")
              and not n.attr.startswith("__") and isinstance(n.value, ast.Name)
              and n.value.id in modules]
    return found


def test_lower_reaches_no_private_name():
    """What the lowering shares with the references (parsed attributes,
    quantization parameters, windows) and with other rule modules is public:
    no `ref._name` reaches into aot/ops, no `_name` imports across modules."""
    bad = [f"{p.relative_to(AOT)}:{r}" for p in sorted((AOT / "lower").rglob("*.py"))
           for r in _private_reaches(p)]
    assert not bad, bad


# ---- the rules, compiled, against the interpreter -------------------------------------

CASES = {
    "GlobalLpPool-p3-NCHW": ("GlobalLpPool", [((2, 3, 4, 5), F)], {"p": 3}, 1, False),
    "GlobalLpPool-p2-NHWC": ("GlobalLpPool", [((1, 16, 3, 2), F)], {}, 1, True),
    "GlobalLpPool-p1-1d": ("GlobalLpPool", [((2, 3, 7), F)], {"p": 1}, 1, False),
    "GroupNorm": ("GroupNormalization",
                  [((2, 6, 3, 2), F), np.linspace(0.5, 2, 6, dtype=np.float32),
                   np.linspace(-1, 1, 6, dtype=np.float32)], {"num_groups": 3}, 1, True),
    "GroupNorm-runtime-scale": ("GroupNormalization", [((1, 4, 5), F), ((4,), F), ((4,), F)],
                                {"num_groups": 2, "epsilon": 1e-3}, 1, True),
    "RMSNorm-last": ("RMSNormalization", [((3, 8), F), np.linspace(0.5, 2, 8, dtype=np.float32)],
                     {}, 1, True),
    "RMSNorm-two-axes": ("RMSNormalization",
                         [((2, 3, 4), F), np.full((1, 4), 1.5, np.float32)], {"axis": 1}, 1, True),
    "MVN-default": ("MeanVarianceNormalization", [((2, 3, 4, 5), F)], {}, 1, False),
    "MVN-last": ("MeanVarianceNormalization", [((3, 7), F)], {"axes": (1,)}, 1, True),
    "MaxUnpool-shape": ("MaxUnpool", [((1, 1, 2, 2), F), np.array(
        [[[[5, 7], [13, 15]]]], np.int64), np.array([1, 1, 4, 4], np.int64)],
        {"kernel_shape": (2, 2), "strides": (2, 2)}, 1, False),
    "MaxUnpool-runtime-indices": ("MaxUnpool", [((2, 2, 2), F), ((2, 2, 2), "int64")],
                                  {"kernel_shape": (2,), "strides": (2,)}, 1, False),
    "Split-3": ("Split", [((4, 6), F), np.array([1, 2, 3], np.int64)], {"axis": 1}, 3, True),
    "Split-one-used-of-2": ("Split", [((4, 6), F)], {"axis": 0, "num_outputs": 2}, 2, True),
    "Dropout-mask": ("Dropout", [((3, 5), F)], {}, 2, True),
}


@functools.lru_cache(maxsize=None)
def _graphs():
    out = {}
    for name, (op, inputs, attrs, outputs, layout) in CASES.items():
        g = single_op_graph(op, inputs, attrs, outputs, opset=23, layout=layout)
        ins = random_inputs(g, seed=len(name))
        if name == "MaxUnpool-runtime-indices":    # distinct positions of the 2 x 2 x 4 output
            ins[g.inputs[1]] = np.array([[[0, 3], [5, 6]], [[9, 10], [12, 15]]], np.int64)
        out[name] = (g, ins)
    return out


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_rules_match_the_interpreter(codegen):
    got = compare_with_interpreter(_graphs(), codegen=codegen)
    assert not {k: v for k, v in got.items() if v}


def test_split_and_dropout_are_one_loop_nest_per_output():
    from aot.lower import lower_graph
    from aot.testing.kernels import host_target
    g, _ = _graphs()["Split-3"]
    (kernel,) = lower_graph(g, host_target())
    assert [p.name for p in kernel.func.params] == ["in0", "out0", "out1", "out2"]


def test_max_unpool_checks_its_indices_at_run_time():
    """An index outside the output stops the kernel (AOT_ERR_INDEX), as the
    reference refuses it; here the compiled kernel is asked to."""
    from aot.lower import lower_graph
    from aot.lower.arith.bounds import ATTR
    from aot.testing.kernels import host_target
    g, _ = _graphs()["MaxUnpool-runtime-indices"]
    (kernel,) = lower_graph(g, host_target())
    (check,) = dict(kernel.func.attrs)[ATTR]
    assert check.op == "MaxUnpool" and check.dims == (16,)


# ---- ONNX's backend node cases through the package ------------------------------------

NEW_RULES = ("GlobalLpPool", "GroupNormalization", "MaxUnpool", "MeanVarianceNormalization",
             "RMSNormalization", "Split", "Dropout")


# Cases whose expected outputs follow the ONNX reference where aot's reference
# (aot/ops) reads the spec as ONNX Runtime does: compared with the interpreter.
READS_DIFFERENTLY = {
    # indices into the inferred 4 x 4 shape, padded to output_shape 5 x 5; ONNX
    # Runtime and PyTorch's max_unpool index the output_shape itself
    "test_maxunpool_export_with_output_shape",
}


def test_backend_node_cases_through_the_package():
    """Each runnable node case of the ops above packaged, built and run on
    the host like test_conformance_package does for its sample."""
    from support.conformance_package import build, package_case, run_isolated
    from support.conformance import _compare, cases, left_out

    from aot.interp import interpret
    from aot.targets import get_board

    start = time.perf_counter()
    board = get_board("host")
    chosen = [(n, case) for n, (op, case) in enumerate(cases())
              if op in NEW_RULES and "_expanded" not in case.name and not left_out(op, case)]
    assert {case.name.split("_")[1] for _, case in chosen} >= {
        "group", "maxunpool", "mvn", "rms", "split", "dropout"}
    failed, runs, refused = {}, {}, {}
    for n, case in chosen:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            try:
                runs[case.name] = package_case(case, f"optable{n}", "c", board)
            except AotError as e:
                refused[case.name] = str(e)
    # the importer's refusal of empty tensors, before any rule runs
    assert all("aot has no empty tensors" in why for why in refused.values()), refused
    with tempfile.TemporaryDirectory(prefix="aot-op-table-") as tmp:
        lib, not_built = build(Path(tmp), [r for rs in runs.values() for r in rs], board)
        for name, rs in runs.items():
            for run in rs:
                if run.name in not_built:
                    failed[name] = not_built[run.name]
                    continue
                got = run_isolated(lib, run)
                expected = run.expected
                if name in READS_DIFFERENTLY:
                    expected = interpret(run.graph, run.inputs)
                reason = next((r for out, want in expected.items()
                               if (r := _compare(out, got[out], np.asarray(want)))), None)
                if reason:
                    failed[name] = reason
    assert not failed, failed
    assert len(runs) >= 35, sorted(runs)
    print(f"{len(runs)} cases in {time.perf_counter() - start:.1f}s, {len(refused)} refused")


def test_dtype_of_split_outputs_is_kept():
    g, _ = _graphs()["Split-3"]
    assert [g.types[o] for o in g.outputs] == [TensorType((4, k), F) for k in (1, 2, 3)]
