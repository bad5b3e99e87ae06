"""ONNX backend node conformance: every case of the onnx package's node tests
whose op is in the standard domain ("" / ai.onnx; not ai.onnx.ml, the
preview domains), run through import -> infer -> optimize -> interpret.

Not run, each counted in the summary by its reason (docs/ops.md, "ONNX
conformance"):
- cases with tensors of types aot does not compute in (float64, bfloat16,
  float8, int4, string, complex, sequences, optionals); float16 cases run
  (aot computes halves in float32 and rounds at each op's output, as ONNX
  Runtime does on CPU) and compare within the same tolerance, as ONNX's
  own backend tests do;
- EXCLUDED cases: training-only ops, random ops, text and image decoding,
  optional values; cases with empty tensors (aot plans no zero-size
  buffer) and models of opsets before 7 (the importer reads 7 to 28).
Everything else runs; an aot error or a mismatch is a failure. The summary
(passed / run / left out and each failure) prints at the end of every pytest
run, in the "aot summaries" section (tests/conftest.py).
"""
from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

from support.conformance import (EXCLUDED_OPS, FROZEN, _count_half, cases, left_out, rate_line,
                                 run_case)


MIN_PASS_RATE = 0.90


@functools.lru_cache(maxsize=None)
def results() -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """(passed, [(failed, reason)], [class of each case left out])."""
    passed, failed, left = [], [], []
    for op, case in cases():
        why = left_out(op, case)
        if why:
            left.append(why)
            continue
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            reason = run_case(case)
        (failed.append((case.name, reason)) if reason else passed.append(case.name))
    return passed, failed, left


def test_collection_is_every_standard_domain_case():
    ops = {op for op, _ in cases()}
    assert len(cases()) > 1500 and {"Abs", "Conv", "Loop", "BitShift"} <= ops
    assert not ops & {"TreeEnsemble", "LabelEncoder", "Adam", "FlexAttention"}, "other domains"
    stale = sorted(set(EXCLUDED_OPS) - ops - {"RandomNormal", "RandomNormalLike", "RandomUniform",
                                              "RandomUniformLike", "Multinomial", "Optional"})
    assert not stale, f"excluded ops without test cases: {stale}"


def test_onnx_node_conformance(record_property):
    passed, failed, left = results()
    run = len(passed) + len(failed)
    lines = [rate_line("ONNX node conformance (interpreter)", len(passed), run, left)
             + f"; {len(set(FROZEN))} run with shape-argument inputs bound at compile time; "
             f"float16: {_count_half(passed)} passed / {_count_half(passed + failed)} run"]
    lines += [f"  FAIL {name}: {reason[:200]}" for name, reason in failed]
    # printed at the end of the run by tests/conftest.py (also under xdist)
    record_property("summary", "\n".join(lines))
    assert run > 1000, f"only {run} cases ran"
    assert len(passed) >= MIN_PASS_RATE * run, (
        f"{len(passed)}/{run} passed, below {MIN_PASS_RATE:.0%}")


@pytest.mark.parametrize("name", ["test_abs", "test_add_bcast", "test_reshape_negative_dim",
                                  "test_slice_neg_steps", "test_split_equal_parts_1d_opset18"])
def test_basic_cases_pass(name):
    """A few cases that must always pass, so a regression names itself."""
    case = next(c for _, c in cases() if c.name == name)
    assert run_case(case) is None
