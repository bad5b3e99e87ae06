"""Hostile inputs for generated code: small random models run under ASan and
UBSan with out-of-range indices, NaN, infinities and extreme values.

`random_model(seed)` builds a small ONNX model with onnx.helper (the same
seed always gives the same bytes), from one of three families:

- index: Gather, GatherElements, GatherND, ScatterND, ScatterElements or
  OneHot with indices that are a model input or computed from one (an Add,
  a Cast from float, a Gather of a table), on data that is an initializer
  or an input, sometimes followed by an elementwise op or a reduction;
- value: a chain of elementwise ops on float32, int32, int64, int8 or
  uint8 inputs, some broadcasting, some casting;
- reduce: a value chain ended by a reduction, an arg-max or a softmax.

`fuzz_model(seed, cases, work)` packages the model once for the host with
`-fsanitize=address,undefined -fno-sanitize-recover=all` (the C codegen; one
model in eight with the LLVM codegen, whose kernels are not instrumented
but whose crashes still show) and runs it on `cases` input
sets from `hostile_inputs`. Each run is judged against the reference
interpreter on the same optimized graph:

- a sanitizer report, a crash, a timeout or any other harness failure is a
  failure;
- where the reference refuses an out-of-range index, the package must stop
  with its index error (AOT_ERR_INDEX: one line naming the input and the
  node), and where the reference takes the indices, it must not;
- outputs must match: exactly for integers and moved data, within 1e-4
  for float arithmetic where the reference is finite.

Used by tests/fuzz/test_fuzz_runtime.py (a fast seeded subset) and
scripts/fuzz_runtime.py (the long run).
"""
from __future__ import annotations

import contextlib
import os
import random
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

SANITIZE = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer", "-g", "-O1")
SANITIZER_ENV = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:handle_abort=1",
                 "UBSAN_OPTIONS": "print_stacktrace=1"}
RUN_TIMEOUT_S = 60
OPSET = 18
INDEX_ERROR = "gives an index out of range in node"

HOSTILE_F32 = (np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 3.4e38, -3.4e38, 1e-45, 1.0,
               -1.0, 0.5, -0.5, 2.0**31, -2.0**31 - 1024, 2.0**63, -2.0**64, 1e10, 255.5, -128.5)
HOSTILE_INDEX = (2**31 - 1, -2**31, 2**32, 2**32 + 1, -10**8, 10**8, 2**63 - 1, -2**63)


# ------------------------------------------------------------------ models

@dataclass(frozen=True)
class InputSpec:
    name: str
    dtype: str
    shape: tuple[int, ...]
    # An index input: the sizes its values index (one per last-axis component
    # when `components`); empty for a value input.
    dims: tuple[int, ...] = ()
    components: bool = False


@dataclass(frozen=True)
class RuntimeModel:
    seed: int
    family: str
    detail: str                      # what was built, for the reports
    data: bytes                      # the ONNX model
    inputs: tuple[InputSpec, ...]


class _Builder:
    """Nodes, inputs and initializers of one model, with fresh names."""

    def __init__(self, rng: random.Random, nrng: np.random.Generator):
        self.rng, self.nrng = rng, nrng
        self.nodes: list = []
        self.inits: dict[str, np.ndarray] = {}
        self.inputs: list[InputSpec] = []
        self.count = 0
        self.detail: list[str] = []

    def fresh(self, base: str) -> str:
        self.count += 1
        return f"{base}{self.count}"

    def node(self, op: str, inputs: Sequence[str], **attrs) -> str:
        from onnx import helper
        out = self.fresh("t")
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=f"{op}_{self.count}",
                                           **attrs))
        return out

    def const(self, value: np.ndarray, base: str = "c") -> str:
        name = self.fresh(base)
        self.inits[name] = np.asarray(value)
        return name

    def input(self, dtype: str, shape, dims: tuple[int, ...] = (), components=False,
              base: str = "x") -> str:
        name = self.fresh(base)
        self.inputs.append(InputSpec(name, dtype, tuple(int(d) for d in shape), dims,
                                     components))
        return name

    def build(self, output: str, out_dtype: str, family: str, seed: int) -> RuntimeModel:
        from onnx import helper, numpy_helper
        elem = {s.name: _onnx_type(s.dtype) for s in self.inputs}
        graph = helper.make_graph(
            self.nodes, f"fuzz{seed}",
            [helper.make_tensor_value_info(s.name, elem[s.name], list(s.shape))
             for s in self.inputs],
            [helper.make_tensor_value_info(output, _onnx_type(out_dtype), None)],
            [numpy_helper.from_array(v, k) for k, v in self.inits.items()])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        return RuntimeModel(seed, family, " -> ".join(self.detail), model.SerializeToString(),
                            tuple(self.inputs))


def _onnx_type(dtype: str) -> int:
    from onnx import helper
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _shape(rng: random.Random, rank_lo: int = 1, rank_hi: int = 3, hi: int = 5) -> tuple:
    return tuple(rng.randint(1, hi) for _ in range(rng.randint(rank_lo, rank_hi)))


def _values(nrng: np.random.Generator, dtype: str, shape) -> np.ndarray:
    if np.dtype(dtype).kind == "f":
        return nrng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return nrng.integers(max(info.min, -100), min(info.max, 100), shape, endpoint=True
                         ).astype(dtype)


def _data(b: _Builder, dtype: str, shape) -> str:
    """Data for an index op: a weight (usually) or a model input."""
    if b.rng.random() < 0.7:
        return b.const(_values(b.nrng, dtype, shape), "w")
    return b.input(dtype, shape)


def _indices(b: _Builder, shape, dims: tuple[int, ...], components: bool = False) -> str:
    """Indices into `dims`: a model input, or computed from one."""
    rng = b.rng
    itype = rng.choice(("int64", "int64", "int32"))
    how = rng.choice(("input",) * 5 + ("add", "cast", "gather"))
    if how == "input":
        return b.input(itype, shape, dims, components, "ids")
    if how == "add":
        raw = b.input(itype, shape, dims, components, "ids")
        b.detail.append("Add(ids, 1)")
        return b.node("Add", [raw, b.const(np.array(1, itype))])
    if how == "cast":
        raw = b.input("float32", shape, dims, components, "fids")
        b.detail.append("Cast(float ids)")
        return b.node("Cast", [raw], to=_onnx_type(itype))
    # a permutation table gathered by the input: its values are the indices
    top = max(dims)
    table = np.array([rng.randint(-top, top - 1) for _ in range(rng.randint(1, 6))], itype)
    raw = b.input(rng.choice(("int64", "int32")), shape, (len(table),), False, "ids")
    b.detail.append(f"Gather(table of {len(table)}, ids)")
    if components:   # the table's values index every component: keep them in all dims
        table = np.array([rng.randint(-min(dims), min(dims) - 1) for _ in table], itype)
    return b.node("Gather", [b.const(table, "table"), raw], axis=0)


def _index_model(b: _Builder) -> tuple[str, str]:
    rng = b.rng
    op = rng.choice(("Gather", "Gather", "GatherElements", "GatherND", "ScatterND",
                     "ScatterElements", "OneHot"))
    dtype = rng.choice(("float32", "float32", "int32", "int8", "int64"))
    shape = _shape(rng)
    r = len(shape)
    if op == "OneHot":
        depth = rng.randint(1, 6)
        ids = _indices(b, _shape(rng, 0, 2, 4), (depth,))
        values = b.const(_values(b.nrng, dtype, (2,)), "values")
        axis = rng.randint(-1, 0) if rng.random() < 0.5 else 0
        b.detail.insert(0, f"OneHot(depth {depth}, axis {axis})")
        out = b.node("OneHot", [ids, b.const(np.array(depth, np.int64), "depth"), values],
                     axis=axis)
        return out, dtype
    data = _data(b, dtype, shape)
    if op == "Gather":
        axis = rng.randrange(-r, r)
        ids = _indices(b, _shape(rng, 0, 2, 4), (shape[axis],))
        out = b.node("Gather", [data, ids], axis=axis)
    elif op in ("GatherElements", "ScatterElements"):
        axis = rng.randrange(-r, r)
        ishape = tuple(rng.randint(1, 5) if a == axis % r else rng.randint(1, d)
                       for a, d in enumerate(shape))
        ids = _indices(b, ishape, (shape[axis],))
        if op == "GatherElements":
            out = b.node(op, [data, ids], axis=axis)
        else:
            upd = _data(b, dtype, ishape)
            red = rng.choice(("none", "add", "mul", "max", "min"))
            out = b.node(op, [data, ids, upd], axis=axis, reduction=red)
            op += f" {red}"
    elif op == "GatherND":
        bd = rng.randint(0, 1) if r >= 2 else 0
        k = rng.randint(1, r - bd)
        ishape = shape[:bd] + _shape(rng, 0, 1, 4) + (k,)
        ids = _indices(b, ishape, shape[bd:bd + k], components=True)
        out = b.node(op, [data, ids], batch_dims=bd)
        op += f" batch_dims {bd}"
    else:   # ScatterND
        k = rng.randint(1, r)
        n = rng.randint(1, 4)
        ids = _indices(b, (n, k), shape[:k], components=True)
        upd = _data(b, dtype, (n,) + shape[k:])
        red = rng.choice(("none", "add", "mul", "max", "min"))
        out = b.node(op, [data, ids, upd], reduction=red)
        op += f" {red}"
    b.detail.insert(0, f"{op} of {dtype}{list(shape)}")
    return out, dtype


# elementwise ops by operand kind: (op, arity, attrs)
FLOAT_OPS = [("Add", 2), ("Sub", 2), ("Mul", 2), ("Div", 2), ("Pow", 2), ("Max", 2), ("Min", 2),
             ("Sum", 3), ("Mean", 2), ("Neg", 1), ("Abs", 1), ("Sqrt", 1), ("Exp", 1), ("Log", 1),
             ("Sigmoid", 1), ("Tanh", 1), ("Relu", 1), ("Floor", 1), ("Ceil", 1), ("Round", 1),
             ("Reciprocal", 1), ("Sign", 1), ("Softplus", 1), ("Erf", 1), ("HardSwish", 1),
             ("Mod", 2, {"fmod": 1}), ("LeakyRelu", 1), ("Elu", 1), ("Clip", 1)]
INT_OPS = [("Add", 2), ("Sub", 2), ("Mul", 2), ("Div", 2), ("Mod", 2), ("Mod", 2, {"fmod": 1}),
           ("Max", 2), ("Min", 2), ("Sum", 3), ("Neg", 1), ("Abs", 1), ("Sign", 1), ("Relu", 1),
           ("BitwiseAnd", 2), ("BitwiseXor", 2), ("Pow", 2), ("Clip", 1), ("Mean", 2)]
CASTS = ("float32", "int32", "int64", "int8", "uint8", "bool")


def _chain(b: _Builder, x: str, dtype: str, shape, steps: int) -> tuple[str, str]:
    rng = b.rng
    for _ in range(steps):
        if rng.random() < 0.15:
            to = rng.choice([c for c in CASTS if c != dtype])
            b.detail.append(f"Cast to {to}")
            x, dtype = b.node("Cast", [x], to=_onnx_type(to)), to
            if dtype == "bool":
                b.detail.append("Where")
                a, c = (b.const(_values(b.nrng, "float32", ()), "c") for _ in range(2))
                x, dtype = b.node("Where", [x, a, c]), "float32"
            continue
        if rng.random() < 0.1 and dtype == "float32":
            b.detail.append("QuantizeLinear")
            x = b.node("QuantizeLinear", [x, b.const(np.array(0.05, np.float32), "scale"),
                                          b.const(np.array(3, np.int8), "zp")])
            dtype = "int8"
            continue
        table = FLOAT_OPS if dtype.startswith("float") else INT_OPS
        if dtype in ("int8", "uint8"):
            table = [t for t in table if t[0] not in ("Pow", "Mean", "Neg", "Abs", "Sign")
                     or dtype == "int8" and t[0] in ("Neg", "Abs", "Sign")]
        op, arity, *attrs = rng.choice(table)
        attrs = dict(attrs[0]) if attrs else {}
        operands = [x]
        for _ in range(arity - 1):
            other = shape if rng.random() < 0.6 else tuple(
                d if rng.random() < 0.5 else 1 for d in shape)[rng.randint(0, len(shape) - 1):]
            operands.append(b.input(dtype, other) if rng.random() < 0.7
                            else b.const(_values(b.nrng, dtype, other)))
        if op == "Clip":
            lo, hi = sorted(_values(b.nrng, dtype, (2,)).tolist())
            operands += [b.const(np.array(lo, dtype)), b.const(np.array(hi, dtype))]
        b.detail.append(op + (f"{attrs}" if attrs else ""))
        x = b.node(op, operands, **attrs)
    return x, dtype


def _reduction(b: _Builder, x: str, dtype: str, shape) -> tuple[str, str]:
    rng = b.rng
    r = len(shape)
    ops = ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean", "ReduceProd", "ArgMax", "ArgMin"]
    if dtype.startswith("float"):
        ops += ["ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp", "Softmax",
                "LogSoftmax"]
    op = rng.choice(ops)
    axis = rng.randrange(-r, r)
    b.detail.append(f"{op}(axis {axis})")
    if op in ("Softmax", "LogSoftmax"):
        return b.node(op, [x], axis=axis), dtype
    if op in ("ArgMax", "ArgMin"):
        return b.node(op, [x], axis=axis, keepdims=rng.randint(0, 1)), "int64"
    return b.node(op, [x, b.const(np.array([axis], np.int64), "axes")],
                  keepdims=rng.randint(0, 1)), dtype


def random_model(seed: int) -> RuntimeModel:
    rng = random.Random(seed)
    b = _Builder(rng, np.random.default_rng(seed))
    family = ("index", "index", "value", "reduce")[seed % 4]
    if family == "index":
        out, dtype = _index_model(b)
        if rng.random() < 0.3 and dtype in ("float32", "int32"):
            b.detail.append("Relu")
            out = b.node("Relu", [out])
    else:
        dtype = rng.choice(("float32", "float32", "int32", "int64", "int8", "uint8"))
        shape = _shape(rng)
        x = b.input(dtype, shape)
        b.detail.append(f"{dtype}{list(shape)}")
        out, dtype = _chain(b, x, dtype, shape, rng.randint(1, 3))
        if family == "reduce":
            out, dtype = _reduction(b, out, dtype, shape)
    return b.build(out, dtype, family, seed)


# ------------------------------------------------------------------ inputs

def hostile_inputs(model: RuntimeModel, rng: np.random.Generator, mode: str
                   ) -> list[np.ndarray]:
    """An input set: `mode` "plain" (indices in range, ordinary values),
    "values" (in range, hostile values), "indices" (some indices out of
    range, far out, past 2**32) or "all"."""
    out = []
    for spec in model.inputs:
        out.append(_index_values(spec, rng, mode) if spec.dims else
                   _value_array(spec, rng, mode in ("values", "all")))
    return out


def _value_array(spec: InputSpec, rng: np.random.Generator, hostile: bool) -> np.ndarray:
    dt = np.dtype(spec.dtype)
    if dt.kind == "f":
        x = rng.standard_normal(spec.shape).astype(dt)
        if hostile:
            mask = rng.random(spec.shape) < 0.5
            x = np.where(mask, rng.choice(np.array(HOSTILE_F32, np.float32), spec.shape), x)
        return np.asarray(x, dt)
    info = np.iinfo(dt)
    x = rng.integers(max(info.min, -20), min(info.max, 20), spec.shape, endpoint=True)
    if hostile:
        extremes = np.array([info.min, info.max, info.min + 1, info.max - 1, 0, -1 if
                             info.min < 0 else 1], dtype=object)
        mask = rng.random(spec.shape) < 0.5
        x = np.where(mask, rng.choice(extremes, spec.shape), x.astype(object))
    return np.asarray(x).astype(dt)


def _index_values(spec: InputSpec, rng: np.random.Generator, mode: str) -> np.ndarray:
    dt = np.dtype(spec.dtype)
    shape = spec.shape
    if spec.components:
        lo = np.array([-d for d in spec.dims])
        hi = np.array(spec.dims)
        x = rng.integers(lo, hi, shape) if shape[-1] == len(spec.dims) else \
            rng.integers(-min(spec.dims), min(spec.dims), shape)
    else:
        x = rng.integers(-spec.dims[0], spec.dims[0], shape)
    x = x.astype(object)
    if mode in ("indices", "all") and x.size:
        flat = x.reshape(-1)
        d = max(spec.dims)
        # out of range as the model reads them: after wrapping to an integer
        # type (2**32 is 0 in int32), or, for float ids, what Cast keeps
        picks = [v for v in (d, -d - 1, d + 7, *HOSTILE_INDEX)
                 if not -d <= (_wrap(v, dt) if dt.kind != "f" else v) < d
                 and (dt.kind != "f" or abs(v) < 2**63)]
        for _ in range(rng.integers(1, 3, endpoint=True)):
            flat[rng.integers(0, flat.size)] = picks[rng.integers(0, len(picks))]
        x = flat.reshape(shape)
    if dt.kind == "f":
        if mode in ("values", "all") and x.size:
            xf = x.astype(np.float64)
            mask = rng.random(shape) < 0.3
            return np.where(mask, rng.choice(np.array(HOSTILE_F32), shape), xf).astype(dt)
        return x.astype(np.float64).astype(dt)
    # what does not fit the type wraps, as a device's own producer would write it
    return np.array([_wrap(v, dt) for v in x.reshape(-1)], dtype=dt).reshape(shape)


def _wrap(v: int, dt: np.dtype) -> int:
    info = np.iinfo(dt)
    return (int(v) - info.min) % (1 << info.bits) + info.min


# ------------------------------------------------------------------ judging

@dataclass(frozen=True)
class CaseResult:
    status: str        # ok, index_error (expected), refused (packaging), failed
    kind: str = ""     # for failures: sanitizer, crash, missed index error, ...
    message: str = ""


@dataclass
class ModelReport:
    seed: int
    family: str
    detail: str
    codegen: str
    results: list[CaseResult] = field(default_factory=list)
    seconds: float = 0.0
    failures: list[tuple[int, CaseResult]] = field(default_factory=list)


def _reference(graph, inputs: dict) -> tuple[dict | None, str]:
    from aot.errors import AotError
    from aot.interp import interpret
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            return interpret(graph, inputs), ""
        except AotError as e:
            return None, str(e)


def nan_free(graph, inputs: dict) -> bool:
    """Whether no tensor of the (unoptimized) graph holds a NaN on these
    inputs: min, max, clamps and arg-max pick other operands than numpy does
    for NaN (codegen/c.py), which is not what this fuzzer is after."""
    from dataclasses import replace

    every = tuple(dict.fromkeys(o for n in graph.nodes for o in n.outputs if o))
    values, _ = _reference(replace(graph, outputs=every), inputs)
    arrays = [*(values or {}).values(), *inputs.values()]
    return values is not None and not any(
        np.asarray(a).dtype.kind == "f" and np.isnan(a).any() for a in arrays)


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if got.dtype.kind != "f":
        return np.array_equal(got, want)
    g, w = got.astype(np.float64), want.astype(np.float64)
    sure = np.isfinite(w) & (np.abs(w) < 1e30)
    if not np.allclose(g[sure], w[sure], rtol=1e-4, atol=1e-5):
        return False
    # NaN stays NaN, an infinity keeps its sign
    return bool(np.all((np.isnan(g) == np.isnan(w))[~sure]) and
                np.all((g == w)[np.isinf(w)]))


def judge(graph, output_names: Sequence[str], run: Callable[[], list[np.ndarray]],
          inputs: dict, compare: bool = True) -> CaseResult:
    """Run the package on one input set and judge it against the reference;
    the outputs are compared when `compare`."""
    from aot.errors import AotError
    ref, ref_error = _reference(graph, inputs)
    ref_index = "index out of range" in ref_error
    try:
        got = run()
    except AotError as e:
        msg = str(e)
        if INDEX_ERROR in msg:
            if ref_index:
                return CaseResult("index_error")
            return CaseResult("failed", "false index error",
                              f"the package refused indices the reference takes: {msg}")
        kind = ("sanitizer" if any(s in msg for s in ("Sanitizer", "runtime error", "ABORTING"))
                else "crash" if "crashed" in msg else "timeout" if "timed out" in msg
                else "harness")
        return CaseResult("failed", kind, msg)
    if ref_index:
        return CaseResult("failed", "missed index error",
                          f"the reference refuses ({ref_error}), the package ran")
    if ref is None or not compare:   # the reference refuses for another reason
        return CaseResult("ok", "", ref_error)
    for name, g in zip(output_names, got):
        w = np.asarray(ref[name])
        if not _close(g, w):
            return CaseResult("failed", "wrong value",
                              f"output '{name}' differs from the reference: got "
                              f"{np.array2string(g.reshape(-1)[:6])}, want "
                              f"{np.array2string(w.reshape(-1)[:6])}")
    return CaseResult("ok")


MODES = ("plain", "values", "indices", "all")


@contextlib.contextmanager
def _sanitized_runs():
    """The sanitizers' options and a shorter harness timeout, while fuzzing."""
    from aot.deploy import host

    saved = {k: os.environ.get(k) for k in SANITIZER_ENV}, host.TIMEOUT_S
    os.environ.update(SANITIZER_ENV)
    host.TIMEOUT_S = RUN_TIMEOUT_S
    try:
        yield
    finally:
        for k, v in saved[0].items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        host.TIMEOUT_S = saved[1]


def fuzz_model(seed: int, cases: int, work: Path, codegen: str | None = None) -> ModelReport:
    """Package random_model(seed) once, sanitized, and judge `cases` input sets."""
    with _sanitized_runs():
        return _fuzz_model(seed, cases, work, codegen)


def _fuzz_model(seed: int, cases: int, work: Path, codegen: str | None) -> ModelReport:
    import aot
    from aot.deploy import run_package
    from aot.errors import AotError
    from aot.packaging.build import package_graph
    from aot.targets import get_board

    model = random_model(seed)
    codegen = codegen or ("llvm" if seed % 8 == 5 else "c")
    report = ModelReport(seed, model.family, model.detail, codegen)
    start = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"fuzz{seed}.onnx"
    path.write_bytes(model.data)
    board = get_board("host")
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            loaded = aot.load(path)
            graph = aot.optimize(loaded)
        pkg = package_graph(graph, board, work / f"pkg{seed}", codegen,
                            extra_cflags=SANITIZE, force=True).path
    except AotError as e:
        report.results = [CaseResult("refused", "", str(e))] * cases
        report.seconds = time.monotonic() - start
        return report
    rng = np.random.default_rng(seed)
    names = [s.name for s in model.inputs]
    floats = any(np.dtype(s.dtype).kind == "f" for s in model.inputs)
    for i in range(cases):
        arrays = hostile_inputs(model, rng, MODES[i % len(MODES)])
        feeds = dict(zip(names, arrays))
        ordered = [feeds[n] for n in graph.inputs]
        compare = not floats or nan_free(loaded, feeds)
        result = judge(graph, graph.outputs,
                       lambda: run_package(pkg, board, ordered).outputs, feeds, compare)
        report.results.append(result)
        if result.status == "failed":
            report.failures.append((i, result))
    report.seconds = time.monotonic() - start
    return report


def replay_inputs(seed: int, case: int) -> list[np.ndarray]:
    """The input set `case` of model `seed`, as fuzz_model made it."""
    model = random_model(seed)
    rng = np.random.default_rng(seed)
    arrays = []
    for i in range(case + 1):
        arrays = hostile_inputs(model, rng, MODES[i % len(MODES)])
    return arrays

