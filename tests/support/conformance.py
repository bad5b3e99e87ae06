"""ONNX backend node cases: which run, which are left out and why, and one
case run through import -> infer -> optimize -> interpret against its
expected outputs (models/test_onnx_conformance.py runs them all; the op
tests in ops/ run the cases of their ops, also compiled)."""
from __future__ import annotations

import collections
import functools
import re
import warnings

import numpy as np
import onnx

from aot.errors import AotError
from aot.frontend.onnx import import_onnx
from aot.interp import interpret
from aot.ops.detect import count_outputs, valid_entries
from aot.passes.infer import infer_types
from aot.passes.pipeline import optimize


STANDARD_DOMAINS = ("", "ai.onnx")

# Cases aot leaves out on purpose, by op (its expanded function variants
# too: they compute the same thing) or by name, with the class of the
# reason. Each class and its case count is in docs/ops.md.
TRAINING = "training-only"
RANDOM = "random output"
TEXT = "strings and text featurization"
IMAGE = "image decoding"
OPTIONAL = "optional values"
EMPTY = "empty tensors (aot has none)"
OLD_OPSET = "opsets before 7 (aot reads 7 to 28)"
EXCLUDED_OPS = {
    "SoftmaxCrossEntropyLoss": TRAINING, "NegativeLogLikelihoodLoss": TRAINING,
    "Bernoulli": RANDOM, "RandomNormal": RANDOM, "RandomNormalLike": RANDOM,
    "RandomUniform": RANDOM, "RandomUniformLike": RANDOM, "Multinomial": RANDOM,
    "StringConcat": TEXT, "StringNormalizer": TEXT, "StringSplit": TEXT,
    "RegexFullMatch": TEXT, "TfIdfVectorizer": TEXT,
    "ImageDecoder": IMAGE,
    "OptionalHasElement": OPTIONAL, "OptionalGetElement": OPTIONAL, "Optional": OPTIONAL,
}
# Dropout in training mode with a ratio above 0: a random mask (ratio 0 runs)
EXCLUDED_CASES = {f"test_training_dropout{v}": TRAINING
                  for v in ("", "_default", "_mask", "_default_mask")}
RTOL, ATOL = 1e-3, 1e-5

T = onnx.TensorProto
UNSUPPORTED_TYPES = {T.DOUBLE, T.BFLOAT16, T.STRING, T.COMPLEX64, T.COMPLEX128}
UNSUPPORTED_TYPES |= {getattr(T, n) for n in dir(T)
                      if n.startswith(("FLOAT8", "INT4", "UINT4", "FLOAT4", "INT2", "UINT2"))}


@functools.lru_cache(maxsize=None)
def cases() -> list[tuple[str, object]]:
    """(op, case) for every standard-domain case, expanded function variants
    included.

    collect_testcases(op_type) fills a module-level list once per process, so
    all cases are collected once; an expanded case belongs to the op (and
    the domain) of the case it was expanded from.
    """
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        everything = collect_testcases(None)
    first = {c.name: c.model.graph.node[0] for c in everything if "_expanded" not in c.name}
    out = []
    for c in everything:
        node = first.get(c.name.split("_expanded")[0])
        if node is not None and node.domain in STANDARD_DOMAINS:
            out.append((node.op_type, c))
    return out


def excluded(op: str, case) -> str | None:
    """The class of reason a case is left out for, or None."""
    return EXCLUDED_OPS.get(op) or EXCLUDED_CASES.get(case.name) or (
        OLD_OPSET if _opset(case.model) < 7 else None)


def _opset(model) -> int:
    return min((o.version for o in model.opset_import if o.domain in STANDARD_DOMAINS),
               default=0)


def _has_empty_tensor(case) -> bool:
    """A tensor with no elements among the case's data: an output, or an
    input other than an empty list of integers (axes=[] is a shape argument
    aot reads, not a tensor it computes)."""
    for ins, outs in data_sets(case):
        if any(a.size == 0 for a in outs.values()):
            return True
        if any(a.size == 0 and (a.ndim != 1 or a.dtype.kind not in "iu") for a in ins.values()):
            return True
    return False


def _bad_type(tp) -> str | None:
    kind = tp.WhichOneof("value")
    if kind != "tensor_type":
        return kind or "untyped"
    if tp.tensor_type.elem_type in UNSUPPORTED_TYPES:
        return T.DataType.Name(tp.tensor_type.elem_type)
    return None


def skip_reason(case) -> str | None:
    g = case.model.graph
    for vi in list(g.input) + list(g.output):
        bad = _bad_type(vi.type)
        if bad:
            return f"{vi.name}: {bad}"
    for t in g.initializer:
        if t.data_type in UNSUPPORTED_TYPES:
            return f"{t.name}: {T.DataType.Name(t.data_type)}"
    for inputs, outputs in case.data_sets:
        for a in list(inputs) + list(outputs):
            if isinstance(a, T):
                if a.data_type in UNSUPPORTED_TYPES:
                    return f"data: {T.DataType.Name(a.data_type)}"
            elif not isinstance(a, (np.ndarray, np.generic)):
                return f"data: {type(a).__name__}"
            elif a.dtype.kind in "OUSc" or a.dtype.name in ("float64", "bfloat16"):
                return f"data: {a.dtype}"
    return None


def _array(a) -> np.ndarray:
    """A case's input or output as an array (cases also hold scalars, TensorProtos)."""
    return onnx.numpy_helper.to_array(a) if isinstance(a, T) else np.asarray(a)


def _compare(name: str, got: np.ndarray, want: np.ndarray) -> str | None:
    if got.shape != want.shape:
        return f"{name}: shape {list(got.shape)} != {list(want.shape)}"
    if got.dtype != want.dtype:
        return f"{name}: dtype {got.dtype} != {want.dtype}"
    if want.dtype.kind == "f":
        ok = np.isclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True)
    else:
        ok = got == want
    if not np.all(ok):
        bad = int(np.size(ok) - np.count_nonzero(ok))
        diff = (np.nanmax(np.abs(got.astype(np.float64) - want)) if got.size else 0)
        return f"{name}: {bad}/{got.size} elements differ (max abs diff {diff:.3g})"
    return None


def _freeze(model, names: list[str], inputs: dict[str, np.ndarray]):
    """The model with the named inputs turned into initializers."""
    frozen = onnx.ModelProto()
    frozen.CopyFrom(model)
    keep = [vi for vi in frozen.graph.input if vi.name not in names]
    del frozen.graph.input[:]
    frozen.graph.input.extend(keep)
    frozen.graph.initializer.extend(onnx.numpy_helper.from_array(inputs[n], n) for n in names)
    return frozen


def _needs_constant(model, error: AotError, inputs: dict, frozen=()) -> str | None:
    """The graph input an error says must be known at compile time, if any.

    aot compiles static graphs: shape arguments (Reshape's shape, Slice's
    starts, Reduce's axes, Resize's scales, ...) must be constants, while the
    node tests feed them as graph inputs. Like other ahead-of-time compilers'
    test runners (TVM's freeze_params), the runner binds exactly those inputs
    to the case's values, one by one as aot asks for them.
    """
    msg = str(error)
    m = re.search(r"node '(.+?)': input (\d+) must be a compile-time constant", msg)
    if m:
        # a node inside a control-flow body is named '<outer node>/<node>'
        label, nested = m.group(1).split("/")[0], "/" in m.group(1)
        for index, node in enumerate(model.graph.node):
            if (node.name or f"{node.op_type}_{index}") == label:
                i = int(m.group(2))
                # normalization may have moved inputs (Upsample -> Resize): then
                # take the node's last graph input, its shape argument
                names = list(node.input) if nested else [node.input[i]] \
                    if i < len(node.input) else list(node.input[1:])[::-1]
                direct = next((n for n in names if n in inputs), None)
                if direct is not None and not nested:
                    return direct
                # computed from graph inputs (an expanded function's shape
                # arithmetic): the shape arguments it is computed from
                return _integer_sources(model, names, inputs, frozen)
    m = re.match(r"input '(.+?)': dimension \d+ is 0", msg)  # an empty shape argument
    if m and m.group(1) in inputs and inputs[m.group(1)].dtype.kind in "iu":
        return m.group(1)
    return None


def _integer_sources(model, names: list[str], inputs: dict, frozen) -> str | None:
    """The first integer or scalar graph input (a shape argument: Range's
    limits may be floats), not bound yet, that the named tensors are
    computed from (through the top-level graph's nodes)."""
    producer = {out: node for node in model.graph.node for out in node.output}
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += producer[name].input if name in producer else []
    return next((n for n in inputs if n in seen and n not in frozen
                 and (inputs[n].dtype.kind in "iu" or inputs[n].size == 1)), None)


def _run(model, name: str, inputs: dict, outputs: dict) -> str | None:
    graph = import_onnx(model.SerializeToString(), name)
    graph = optimize(infer_types(graph))
    got = interpret(graph, {k: v for k, v in inputs.items() if k in graph.inputs})
    got = valid_entries(count_outputs(graph), got)     # a value-sized output's valid part
    for out, want in outputs.items():
        reason = _compare(out, np.asarray(got[out]), np.asarray(want))
        if reason:
            return reason
    return None


def data_sets(case):
    """(inputs, expected outputs) per data set of a case, as {name: array}."""
    g = case.model.graph
    init = {t.name for t in g.initializer}
    in_names = [i.name for i in g.input if i.name not in init]
    out_names = [o.name for o in g.output]
    for inputs, outputs in case.data_sets:
        yield ({n: _array(a) for n, a in zip(in_names, inputs)},
               {n: _array(a) for n, a in zip(out_names, outputs)})


def bind_and_retry(model, inputs: dict, attempt, finders=(_needs_constant,)):
    """attempt(model) for a case; while aot refuses it because a graph input
    must be known at compile time, bind that input to the case's value and
    try again. A finder (model, error, inputs, frozen) names the input to
    bind, or None. Returns attempt's result and [(bound input, its finder)];
    an error no finder answers (or a repeat) is raised."""
    bound: list = []
    current = model
    while True:
        try:
            return attempt(current), bound
        except AotError as e:
            frozen = [n for n, _ in bound]
            for finder in finders:
                name = finder(model, e, inputs, frozen)
                if name is not None:
                    break
            if name is None or name in frozen:
                raise
            bound.append((name, finder))
            current = _freeze(model, frozen + [name], inputs)


def run_case(case) -> str | None:
    """None if aot reproduces the expected outputs, else a one-line reason."""
    try:
        for ins, outs in data_sets(case):
            reason, bound = bind_and_retry(
                case.model, ins, lambda model: _run(model, case.name, ins, outs))
            if bound:
                FROZEN.append(case.name)
            if reason:
                return reason
    except AotError as e:
        return f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - a crash inside aot is a failure too
        return f"crash {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


FROZEN: list[str] = []  # cases run with shape-argument inputs bound at compile time


TYPES = "tensor types aot does not compute in"


def has_float16(case) -> bool:
    """Whether a case has a float16 input, output or initializer."""
    g = case.model.graph
    return T.FLOAT16 in ({vi.type.tensor_type.elem_type for vi in [*g.input, *g.output]}
                         | {t.data_type for t in g.initializer})


def left_out(op: str, case) -> str | None:
    """Why a case is not run (a class of reason), or None: it runs."""
    return excluded(op, case) or (TYPES if skip_reason(case) else None) or (
        EMPTY if _has_empty_tensor(case) else None)


def left_out_counts(classes) -> str:
    """'272 tensor types aot does not compute in, 108 training-only, ...'."""
    counts = collections.Counter(classes)
    return ", ".join(f"{n} {why}" for why, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def rate_line(what: str, passed: int, run: int, left: list[str]) -> str:
    """The summary's first line, the same for the interpreter and the package."""
    return (f"{what}: {passed} passed / {run} run ({100 * passed / max(run, 1):.1f}%) of "
            f"{len(cases())} standard-domain cases; left out {len(left)} "
            f"({left_out_counts(left)})")


def _count_half(names) -> int:
    half = {c.name for _, c in cases() if has_float16(c)}
    return sum((n if isinstance(n, str) else n[0]) in half for n in names)
