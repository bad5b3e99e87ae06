"""The ONNX-ML rules (aot/lower/rules/ml.py) compiled and run against the
interpreter, every case of tests/support/ml_cases.py in one build, with C
and with LLVM; and what the generated C of a classifier is made of."""
from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import pytest

import aot
from aot.testing.kernels import compare_with_interpreter
from support.ml_cases import CASES, inputs, model


@functools.lru_cache(maxsize=None)
def _graphs():
    folder = Path(tempfile.mkdtemp(prefix="aot-ml-"))
    out = {}
    for name, case in CASES.items():
        path = folder / f"{len(out)}.onnx"
        path.write_bytes(model(case).SerializeToString())
        out[name] = (aot.optimize(aot.load(path)), inputs(case, seed=3))
    return out


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_rules_match_the_interpreter(codegen):
    got = compare_with_interpreter(_graphs(), codegen=codegen)
    assert not {k: v for k, v in got.items() if v}


def test_a_classifier_is_loops_over_const_tables():
    """Support vectors, coefficients and labels are const data (PARAM
    buffers), the work rows arena scratch; every loop has a compile-time
    trip count and the only calls are libm's."""
    from aot.ir.tir import BufferKind, Call, For, stmt_exprs, walk_expr, walk_stmt
    from aot.lower import lower_graph
    from aot.testing.kernels import host_target

    g, _ = _graphs()["SVMClassifier-3-RBF-proba"]
    (kernel,) = lower_graph(g, host_target())
    kinds = {p.name.rstrip("0123456789_"): p.kind for p in kernel.func.params}
    assert kinds["support_vectors"] is BufferKind.PARAM and kinds["labels"] is BufferKind.PARAM
    assert kinds["kernel"] is BufferKind.SCRATCH
    stmts = list(walk_stmt(kernel.func.body))
    assert all(isinstance(s.extent, int) for s in stmts if isinstance(s, For))
    calls = {e.fn for s in stmts for x in stmt_exprs(s) for e in walk_expr(x)
             if isinstance(e, Call)}
    assert calls <= {"expf", "fabsf", "sqrtf", "logf"}, calls
