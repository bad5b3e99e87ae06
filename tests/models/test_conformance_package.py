"""ONNX backend node conformance through the real package, on the host.

The cases, what is left out and the shape-argument binding are those of
test_onnx_conformance (the interpreter run), over a seeded sample of the
runnable cases (`sample`: a fixed share of each op's cases, at least one, so
every op is compiled: 392 of the 1,381). Each sampled
case is packaged by `aot.packaging.build.generate` (entry point, planned arena, linked
params, kernels, runtime) under a unique name, for each codegen; all the
packages' sources are compiled into one shared library (their symbols are
prefixed by the package name, so they link together), and each case runs
through its own entry point `<name>_run_with_arena` on an arena and output
buffers filled with garbage, so a read of an unwritten byte shows.

One build, not one per package, keeps this quick: the compiler runs once at
-O1 over every source (a source that does not compile fails only its own
case: the build is retried without it), and objects are cached by content.
Each run happens in a forked child, so a crash or a hang fails that case
alone.

Like an ahead-of-time compiler's test runner binds shape arguments, this
one also binds a weight or quantization parameter the node tests feed as a
graph input when the code generator asks for a constant one (a deployed
model has them as initializers); the summary counts those cases.
"""
from __future__ import annotations

import functools
import random
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from support.conformance import _compare, _count_half, cases, left_out, rate_line

from aot.errors import AotError
from aot.ops.detect import count_outputs, valid_entries
from aot.targets import get_board
from support.conformance_package import (BOUND_SHAPES, BOUND_WEIGHTS, build, package_case,
                                         run_isolated)

CODEGENS = ("c", "llvm")
MIN_PASS_RATE = 0.85    # the floor for compiled cases, of the sampled runnable ones
# The sample: about SAMPLE_SIZE of the runnable cases, every op in it (171
# ops; test_onnx_conformance runs all the cases through the interpreter).
# Measured on the 2 shared cores from a cold object cache at a load of 4-5:
# 715 cases 229 s, 392 cases (every op still) 122 s.
SAMPLE_SIZE, SAMPLE_SEED = 350, 14


# ---- the sample ----------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def sample() -> tuple[list[tuple[int, object]], list[str]]:
    """([(index in cases(), case)] to compile, [class of each case left out]).

    Each op contributes the same share of its runnable cases, at least one,
    drawn by a generator seeded with SAMPLE_SEED and the op's name: the
    sample of one op does not move when another op's cases change."""
    left, by_op = [], {}
    for n, (op, case) in enumerate(cases()):
        why = left_out(op, case)
        if why:
            left.append(why)
        else:
            by_op.setdefault(op, []).append((n, case))
    share = min(1.0, SAMPLE_SIZE / max(sum(map(len, by_op.values())), 1))
    chosen = []
    for op, items in sorted(by_op.items()):
        k = max(1, round(share * len(items)))
        chosen += random.Random(f"{SAMPLE_SEED}:{op}").sample(items, k)
    return sorted(chosen, key=lambda item: item[0]), left


# ---- the whole conformance run ------------------------------------------------------------

@dataclass
class Outcome:
    passed: list[str]
    failed: list[tuple[str, str]]
    left: list[str]         # class of each case left out
    not_sampled: int
    seconds: dict[str, float]


@functools.lru_cache(maxsize=None)
def results(codegen: str) -> Outcome:
    board = get_board("host")
    failed: dict[str, str] = {}
    packaged = {}
    seconds = {}
    start = time.perf_counter()
    chosen, left = sample()
    for n, case in chosen:
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                packaged[case.name] = package_case(case, f"case{n}", codegen, board)
        except AotError as e:
            failed[case.name] = f"packaging: {type(e).__name__}: {e}"
        except Exception as e:  # noqa: BLE001 - a crash inside aot is a failure too
            failed[case.name] = f"packaging crash {type(e).__name__}: {e}"
    seconds["package"] = time.perf_counter() - start
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="aot-conformance-") as tmp:
        runs = [run for rs in packaged.values() for run in rs]
        lib, not_built = build(Path(tmp), runs, board)
        seconds["compile"] = time.perf_counter() - start
        start = time.perf_counter()
        for case_name, rs in packaged.items():
            for run in rs:
                if run.name in not_built:
                    failed[case_name] = f"compile: {not_built[run.name]}"
                    break
                try:
                    got = valid_entries(count_outputs(run.graph), run_isolated(lib, run))
                except AotError as e:
                    failed[case_name] = f"run: {e}"
                    break
                reason = next((r for out, want in run.expected.items()
                               if (r := _compare(out, got[out], np.asarray(want)))), None)
                if reason:
                    failed[case_name] = reason
                    break
        seconds["run"] = time.perf_counter() - start
    passed = [name for name in packaged if name not in failed]
    return Outcome(passed, sorted(failed.items()), left,
                   len(cases()) - len(left) - len(chosen), seconds)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_onnx_node_conformance_through_package(codegen, record_property):
    start = time.perf_counter()
    out = results(codegen)
    run = len(out.passed) + len(out.failed)
    times = ", ".join(f"{k} {v:.1f}s" for k, v in out.seconds.items())
    lines = [rate_line(f"ONNX node conformance through the host package (codegen {codegen})",
                       len(out.passed), run, out.left)
             + f"; a seeded sample: {out.not_sampled} runnable cases not compiled; "
             f"bound at compile time: shape arguments in {len(BOUND_SHAPES)}, weights in "
             f"{len(BOUND_WEIGHTS)}; float16: {_count_half(out.passed)} passed / "
             f"{_count_half(out.passed + out.failed)} run; "
             f"{time.perf_counter() - start:.0f}s ({times})"]
    lines += [f"  FAIL {name}: {reason.splitlines()[0][:200]}" for name, reason in out.failed]
    record_property("summary", "\n".join(lines))
    assert run > 300, f"only {run} cases ran"
    assert len(out.passed) >= MIN_PASS_RATE * run, "\n".join(lines)
