"""Reference runtimes for `aot verify`, by model kind (DESIGN.md "Semantics
to match exactly"):

- .onnx: ONNX Runtime.
- int8 .tflite (integer inputs or outputs): tflite-micro's interpreter, i.e.
  TFLite's reference kernels; models TFLM refuses (hybrid ones, ops it
  lacks) fall back to LiteRT.
- float .tflite: LiteRT with its builtin kernels (no XNNPACK delegate).
- .tflite with MediaPipe's custom ops (aot/ops/mediapipe.py): LiteRT with
  its default delegates when XNNPACK is what runs them there
  ("litert+xnnpack"); with a transform no runtime here executes, aot's
  numpy reference of MediaPipe's kernels ("numpy-reference (...)").
"""
from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Mapping, Sequence

import numpy as np

from aot.errors import AotError, MissingToolError
from aot.ir.graph import Graph
from aot.ops.mediapipe import NO_RUNTIME_OPS, XNNPACK_OPS


def runtime_module(module: str, pip: str) -> ModuleType:
    """A reference runtime's module; an AotError naming its pip package and
    aot's verify extra, which brings them all, when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        detail = (str(e).splitlines() or [type(e).__name__])[0]
        raise MissingToolError(f"the reference runtime {pip} is not installed ({detail}): pip "
                               f"install 'aot[verify]' (or {pip}), or run `make setup` in a "
                               "checkout (`aot doctor` lists what is missing)") from None


class OnnxRuntime:
    """One ONNX Runtime session for the model at `path`, run sample after sample."""

    def __init__(self, path: Path, graph: Graph,
                 bound: Mapping[str, np.ndarray] | None = None) -> None:
        ort = runtime_module("onnxruntime", "onnxruntime")
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        self._sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self._path, self._graph = path, graph
        # Inputs bound at compile time (aot.load's bind) are still the model's
        # inputs for ONNX Runtime: they are fed their bound values.
        self._bound = dict(bound or {})
        self._names = [i.name for i in self._sess.get_inputs() if i.name not in self._bound]
        self._zipmaps: dict | None = None

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        feeds = dict(zip(self._graph.inputs, inputs))
        # np.asarray: a dataset's scalar input is a numpy scalar, which ORT refuses
        outs = self._sess.run(None, {**{n: np.asarray(feeds.get(n, x))
                                        for n, x in zip(self._names, inputs)}, **self._bound})
        if self._zipmaps is None and any(isinstance(o, list) for o in outs):
            self._zipmaps = _zipmap_labels(self._path)
        return [zipped_tensor(self._zipmaps or {}, name, out)
                for name, out in zip(self._graph.outputs, outs)]


def onnxruntime(path: Path, graph: Graph, inputs: Sequence[np.ndarray],
                bound: Mapping[str, np.ndarray] | None = None) -> list[np.ndarray]:
    return OnnxRuntime(path, graph, bound)(inputs)


def _zipmap_labels(path: Path) -> dict[str, list[int]]:
    """{output: class labels} of the model's ZipMap nodes."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return {n.output[0]: list(onnx.helper.get_attribute_value(a))
            for n in model.graph.node if n.op_type == "ZipMap"
            for a in n.attribute if a.name == "classlabels_int64s"}


def zipped_tensor(zipmaps: Mapping[str, Sequence[int]], name: str, out) -> np.ndarray:
    """ONNX Runtime's output `name` as aot computes it: a ZipMap's sequence of
    {label: probability} maps becomes the [N, labels] tensor it zips, the
    columns in the node's label order (aot/ops/ml.py)."""
    if not isinstance(out, list):
        return out
    if name not in zipmaps:
        raise AotError(f"onnxruntime gives output '{name}' as a sequence, which aot does not "
                       "compare (it reads sequences of maps made by ZipMap only)")
    labels = zipmaps[name]
    return np.array([[row[k] for k in labels] for row in out], np.float32).reshape(
        len(out), len(labels))


class TfliteMicro:
    """One tflite-micro interpreter, reset before each sample (a stateful
    model starts from its initial state every time, as the harness does)."""

    def __init__(self, path: Path, graph: Graph) -> None:
        runtime = runtime_module("tflite_micro.python.tflite_micro.runtime", "tflite-micro")
        self._interp = runtime.Interpreter.from_file(str(path))
        self._outputs = len(graph.outputs)
        self._used = False

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if self._used:
            self._interp.reset()
        self._used = True
        for i, x in enumerate(inputs):
            self._interp.set_input(x, i)
        self._interp.invoke()
        return [np.array(self._interp.get_output(k)) for k in range(self._outputs)]


def tflite_micro(path: Path, graph: Graph, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return TfliteMicro(path, graph)(inputs)


class Litert:
    """One LiteRT interpreter, its variables reset before each sample;
    delegates=True keeps its default delegates (XNNPACK)."""

    def __init__(self, path: Path, delegates: bool = False) -> None:
        interpreter = runtime_module("ai_edge_litert.interpreter", "ai-edge-litert")
        Interpreter, OpResolverType = interpreter.Interpreter, interpreter.OpResolverType
        resolver = (OpResolverType.BUILTIN if delegates
                    else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        self._it = Interpreter(model_path=str(path), num_threads=1,
                               experimental_op_resolver_type=resolver)
        self._it.allocate_tensors()
        self._used = False

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        it = self._it
        if self._used:
            it.reset_all_variables()
        self._used = True
        for d, x in zip(it.get_input_details(), inputs):
            it.set_tensor(d["index"], x)
        it.invoke()
        return [np.array(it.get_tensor(d["index"])) for d in it.get_output_details()]


def litert(path: Path, graph: Graph, inputs: Sequence[np.ndarray],
           delegates: bool = False) -> list[np.ndarray]:
    """LiteRT's outputs; delegates=True keeps its default delegates (XNNPACK)."""
    return Litert(path, delegates)(inputs)


def _ops(graph: Graph) -> set[str]:
    """The ops of `graph`, those inside fused groups included."""
    out = set()
    for n in graph.nodes:
        out |= _ops(n.attrs["body"]) if n.op == "fused" else {n.op}
    return out


def _integer_io(graph: Graph) -> bool:
    return any(np.dtype(graph.types[t].dtype).kind in "iu"
               for t in (*graph.inputs, *graph.outputs))


def _tflite_inputs(path: Path) -> list[str]:
    """A .tflite model's own input names, in its order (its runtimes take
    inputs by index, bound ones included)."""
    from aot.frontend.tflite.importer import import_tflite

    return list(import_tflite(path.read_bytes(), name=path.stem).inputs)


class ReferenceSession:
    """The reference runtime of the model file at `path`, opened once and
    run sample after sample: `session(inputs)` is the list of outputs,
    `session.name` the runtime's name (after the first sample: an int8
    model tflite-micro refuses falls back to LiteRT on it). `bound`: the
    values of the inputs bound at compile time (not in graph.inputs)."""

    def __init__(self, path: Path, graph: Graph,
                 bound: Mapping[str, np.ndarray] | None = None) -> None:
        self.path, self.graph, self.bound = Path(path), graph, dict(bound or {})
        suffix = self.path.suffix.lower()
        self._run = None
        self._order = _tflite_inputs(self.path) if suffix == ".tflite" and bound else None
        if suffix == ".onnx":
            self.name, self._run = "onnxruntime", OnnxRuntime(self.path, graph, bound)
            return
        if suffix != ".tflite":
            raise AotError(f"{path}: no reference runtime for '{suffix}' models")
        ops = _ops(graph)
        unrun = sorted(op.split(".", 1)[1] for op in ops & set(NO_RUNTIME_OPS))
        if unrun:
            self.name = (f"numpy-reference (of MediaPipe's kernels: no runtime here runs "
                         f"{', '.join(unrun)})")
        elif ops & set(XNNPACK_OPS):
            self.name, self._run = "litert+xnnpack", Litert(self.path, delegates=True)
        elif _integer_io(graph):
            self.name = "tflite-micro"       # opened by the first sample: it may refuse
        else:
            self.name, self._run = "litert", Litert(self.path)

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if self.name.startswith("numpy-reference"):
            from aot.interp import interpret

            out = interpret(self.graph, dict(zip(self.graph.inputs, inputs)))
            return [out[o] for o in self.graph.outputs]
        if self._order is not None:
            values = {**self.bound, **dict(zip(self.graph.inputs, inputs))}
            inputs = [values[n] for n in self._order]
        if self._run is None:
            return self._first_tflm(inputs)
        return self._run(inputs)

    def _first_tflm(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        try:
            run = TfliteMicro(self.path, self.graph)
            out = run(inputs)
        except AotError:      # not installed: LiteRT is no substitute for TFLM's kernels
            raise
        except Exception:     # TFLM refuses the model (hybrid, missing op): LiteRT decides
            self.name, run = "litert", Litert(self.path)
            out = run(inputs)
        self._run = run
        return out


def reference_outputs(path: Path, graph: Graph, inputs: Sequence[np.ndarray],
                      bound: Mapping[str, np.ndarray] | None = None
                      ) -> tuple[str, list[np.ndarray]]:
    """(reference name, outputs) for the model file at `path` on one sample."""
    session = ReferenceSession(path, graph, bound)
    out = session(inputs)
    return session.name, out


def saved_or_random_inputs(path: Path, graph: Graph, seed: int = 0
                           ) -> tuple[str, list[np.ndarray], list[str]]:
    """(origin, inputs, notes): the inputs saved beside the model
    (<stem>.input.npy, <stem>.input.1.npy, ...) when they match the graph,
    else deterministic random ones. A saved file that cannot be used (not an
    .npy, a pickle, another shape or dtype) is read no further than its
    header and gives random inputs with a note saying why."""
    from aot.check.inputs import random_inputs
    from aot.support.npyfile import read_npy

    base = Path(path).with_suffix("")
    files = [base.with_name(base.name + (".input.npy" if i == 0 else f".input.{i}.npy"))
             for i in range(len(graph.inputs))]
    notes: list[str] = []
    if files and all(f.is_file() for f in files):
        arrays = []
        for f, name in zip(files, graph.inputs):
            ty = graph.types[name]
            try:
                a = read_npy(f, f.name, limit_elements=int(np.prod(ty.shape, dtype=np.int64)))
            except AotError as e:
                notes.append(f"{e}: random inputs instead")
                break
            if list(a.shape) != list(ty.shape) or a.dtype.name != ty.dtype:
                notes.append(f"{f.name} holds {a.dtype.name}{list(a.shape)}, input '{name}' is "
                             f"{ty.dtype}{list(ty.shape)}: random inputs instead")
                break
            arrays.append(a)
        else:
            return "saved", arrays, notes
    ins = random_inputs(graph, seed)
    return "random", [ins[n] for n in graph.inputs], notes


def compare(name: str, got: np.ndarray, want: np.ndarray, rtol: float = 1e-4,
            atol: float = 1e-4, scaled: bool = True) -> dict:
    """{name, max_abs_err, ok}: integers bit-exact; floats pass when every
    element has |got - ref| <= atol * m + rtol * |ref|, m = max(1, max|ref|)
    (m = 1 when not `scaled`: atol counts quantization steps), and the whole
    output has ||got - ref|| <= rtol * ||ref|| + atol * sqrt(size).

    Why both: an element near zero that came out of a large sum carries the
    rounding of the sum's terms, which are as large as the output, not as the
    element; so the elementwise absolute term grows with the output. The L2
    bound is the unscaled elementwise rule over the output as a whole: the
    looser elementwise term cannot hide an error spread over every element."""
    want = np.asarray(want)
    if got.shape != want.shape:
        if got.size != want.size:
            return {"name": name, "max_abs_err": None, "ok": False,
                    "error": f"shape {list(got.shape)} vs reference {list(want.shape)}"}
        want = want.reshape(got.shape)
    if got.size == 0:
        return {"name": name, "max_abs_err": 0.0, "ok": True}
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    # inf - inf is NaN, 0 * inf too: equal elements (the same infinity) and
    # NaN facing NaN agree before any arithmetic, and a NaN left in `err`
    # (a NaN facing a number) fails and makes max_abs_err null
    with np.errstate(invalid="ignore", over="ignore"):
        agree = (g64 == w64) | (np.isnan(g64) & np.isnan(w64))
        err = np.where(agree, 0.0, np.abs(g64 - w64))
        if np.dtype(got.dtype).kind in "iub":
            ok = bool(np.array_equal(got, want.astype(got.dtype)))
        else:
            ok = _within(err, agree, w64, atol, rtol, scaled)
    max_err = float(np.max(err))
    return {"name": name, "max_abs_err": max_err if np.isfinite(max_err) else None, "ok": ok}


def _within(err: np.ndarray, agree: np.ndarray, ref: np.ndarray, atol: float,
            rtol: float, scaled: bool) -> bool:
    """compare()'s float rule, elementwise and in L2 norm; `agree`: the
    elements equal on both sides (NaN facing NaN included)."""
    finite = np.abs(ref[np.isfinite(ref)])
    magnitude = max(1.0, float(finite.max())) if scaled and finite.size else 1.0
    if not np.all(agree | (err <= atol * magnitude + rtol * np.abs(ref))):
        return False
    total = float(np.linalg.norm(err.ravel()))
    return bool(total <= rtol * float(np.linalg.norm(finite)) + atol * np.sqrt(err.size))
