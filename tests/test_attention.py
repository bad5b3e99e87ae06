"""The transformer ops (aot/ops/attention.py, aot/lower/attention.py):
every ONNX backend node case of theirs through the interpreter and through
the compiled package on the host (both code generators), Attention cases
with and without masks on qemu-aarch64, and a small PyTorch-exporter-shaped
transformer block against ONNX Runtime.

The node cases run as tests/test_onnx_conformance.py and
tests/test_conformance_package.py run them (same binding of inputs that
must be constants, same comparison), only restricted to these ops, so a
regression here names the case.
"""
from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import test_conformance_package as package_runs
from test_onnx_conformance import _compare, cases, data_sets, run_case, skip_reason

import aot
from aot.errors import AotError, ShapeError, UnsupportedError
from aot.targets import get_board

OPS = ("Attention", "RotaryEmbedding")


def _cases(op: str) -> list:
    return [c for o, c in cases() if o == op and not skip_reason(c)]


def _all_cases() -> list:
    return [c for op in OPS for c in _cases(op)]


def _quietly(fn, *args):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return fn(*args)


@pytest.mark.parametrize("op", OPS)
def test_node_cases_in_the_interpreter(op):
    runnable = _cases(op)
    assert len(runnable) >= 8, f"only {len(runnable)} {op} cases"
    failed = {c.name: r for c in runnable if (r := _quietly(run_case, c))}
    assert not failed, failed


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_node_cases_compiled_on_host(codegen):
    """Every case packaged (expanded variants are other ops' cases), built
    into one library, each run on garbage-filled arenas."""
    board = get_board("host")
    runnable = [c for c in _all_cases() if "_expanded" not in c.name]
    assert len(runnable) >= 80
    failed: dict[str, str] = {}
    packaged = {}
    for n, case in enumerate(runnable):
        try:
            packaged[case.name] = _quietly(package_runs.package_case, case,
                                           f"attn{n}", codegen, board)
        except AotError as e:
            failed[case.name] = f"packaging: {e}"
    with tempfile.TemporaryDirectory(prefix="aot-attention-") as tmp:
        lib, not_built = package_runs.build(Path(tmp), [r for rs in packaged.values()
                                                        for r in rs], board)
        for name, runs in packaged.items():
            for run in runs:
                if run.name in not_built:
                    failed[name] = not_built[run.name]
                    break
                got = package_runs.run_isolated(lib, run)
                reason = next((r for out, want in run.expected.items()
                               if (r := _compare(out, got[out], np.asarray(want)))), None)
                if reason:
                    failed[name] = reason
                    break
    assert not failed, failed
