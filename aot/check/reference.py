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


def onnxruntime(path: Path, graph: Graph, inputs: Sequence[np.ndarray],
                bound: Mapping[str, np.ndarray] | None = None) -> list[np.ndarray]:
    ort = runtime_module("onnxruntime", "onnxruntime")

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    # Inputs bound at compile time (aot.load's bind) are still the model's
    # inputs for ONNX Runtime: they are fed their bound values.
    bound = dict(bound or {})
    names = [i.name for i in sess.get_inputs() if i.name not in bound]
    feeds = dict(zip(graph.inputs, inputs))
    # np.asarray: a dataset's scalar input is a numpy scalar, which ORT refuses
    outs = sess.run(None, {**{n: np.asarray(feeds.get(n, x)) for n, x in zip(names, inputs)},
                           **bound})
    zipmaps = _zipmap_labels(path) if any(isinstance(o, list) for o in outs) else {}
    return [zipped_tensor(zipmaps, name, out) for name, out in zip(graph.outputs, outs)]


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


def tflite_micro(path: Path, graph: Graph, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    runtime = runtime_module("tflite_micro.python.tflite_micro.runtime", "tflite-micro")

    interp = runtime.Interpreter.from_file(str(path))
    for i, x in enumerate(inputs):
        interp.set_input(x, i)
    interp.invoke()
    return [np.array(interp.get_output(k)) for k in range(len(graph.outputs))]


def litert(path: Path, graph: Graph, inputs: Sequence[np.ndarray],
           delegates: bool = False) -> list[np.ndarray]:
    """LiteRT's outputs; delegates=True keeps its default delegates (XNNPACK)."""
    interpreter = runtime_module("ai_edge_litert.interpreter", "ai-edge-litert")
    Interpreter, OpResolverType = interpreter.Interpreter, interpreter.OpResolverType

    resolver = (OpResolverType.BUILTIN if delegates
                else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it = Interpreter(model_path=str(path), num_threads=1, experimental_op_resolver_type=resolver)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [np.array(it.get_tensor(d["index"])) for d in it.get_output_details()]


def _ops(graph: Graph) -> set[str]:
    """The ops of `graph`, those inside fused groups included."""
    out = set()
    for n in graph.nodes:
        out |= _ops(n.attrs["body"]) if n.op == "fused" else {n.op}
    return out


def _integer_io(graph: Graph) -> bool:
    return any(np.dtype(graph.types[t].dtype).kind in "iu"
               for t in (*graph.inputs, *graph.outputs))


def _with_bound(path: Path, graph: Graph, inputs: Sequence[np.ndarray],
                bound: Mapping[str, np.ndarray] | None) -> list[np.ndarray]:
    """A .tflite model's inputs in its own order, bound ones included (its
    runtimes take inputs by index)."""
    if not bound:
        return list(inputs)
    from aot.frontend.tflite.importer import import_tflite

    values = {**bound, **dict(zip(graph.inputs, inputs))}
    return [values[n] for n in import_tflite(path.read_bytes(), name=path.stem).inputs]


def reference_outputs(path: Path, graph: Graph, inputs: Sequence[np.ndarray],
                      bound: Mapping[str, np.ndarray] | None = None
                      ) -> tuple[str, list[np.ndarray]]:
    """(reference name, outputs) for the model file at `path`; `bound`: the
    values of the inputs bound at compile time (not in graph.inputs)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        return "onnxruntime", onnxruntime(path, graph, inputs, bound)
    if suffix != ".tflite":
        raise AotError(f"{path}: no reference runtime for '{suffix}' models")
    ops = _ops(graph)
    unrun = sorted(op.split(".", 1)[1] for op in ops & set(NO_RUNTIME_OPS))
    if unrun:
        from aot.interp import interpret

        out = interpret(graph, dict(zip(graph.inputs, inputs)))
        return (f"numpy-reference (of MediaPipe's kernels: no runtime here runs "
                f"{', '.join(unrun)})", [out[o] for o in graph.outputs])
    inputs = _with_bound(path, graph, inputs, bound)
    if ops & set(XNNPACK_OPS):
        return "litert+xnnpack", litert(path, graph, inputs, delegates=True)
    if _integer_io(graph):
        try:
            return "tflite-micro", tflite_micro(path, graph, inputs)
        except AotError:      # not installed: LiteRT is no substitute for TFLM's kernels
            raise
        except Exception:     # TFLM refuses the model (hybrid, missing op): LiteRT decides
            pass
    return "litert", litert(path, graph, inputs)


def saved_or_random_inputs(path: Path, graph: Graph, seed: int = 0
                           ) -> tuple[str, list[np.ndarray]]:
    """The inputs saved beside the model (<stem>.input.npy, <stem>.input.1.npy, ...)
    when they match the graph, else deterministic random ones."""
    from aot.check.inputs import random_inputs

    base = Path(path).with_suffix("")
    files = [base.with_name(base.name + (".input.npy" if i == 0 else f".input.{i}.npy"))
             for i in range(len(graph.inputs))]
    if files and all(f.is_file() for f in files):
        arrays = [np.load(f) for f in files]
        if all(list(a.shape) == list(graph.types[n].shape) and a.dtype.name ==
               graph.types[n].dtype for a, n in zip(arrays, graph.inputs)):
            return "saved", arrays
    ins = random_inputs(graph, seed)
    return "random", [ins[n] for n in graph.inputs]


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
    both_nan = np.isnan(g64) & np.isnan(w64)
    err = np.where(both_nan, 0.0, np.abs(g64 - w64))
    if np.dtype(got.dtype).kind in "iub":
        ok = bool(np.array_equal(got, want.astype(got.dtype)))
    else:
        ok = _within(err, both_nan, w64, atol, rtol, scaled)
    max_err = float(np.nanmax(err)) if err.size else 0.0
    return {"name": name, "max_abs_err": max_err if np.isfinite(max_err) else None, "ok": ok}


def _within(err: np.ndarray, both_nan: np.ndarray, ref: np.ndarray, atol: float,
            rtol: float, scaled: bool) -> bool:
    """compare()'s float rule, elementwise and in L2 norm."""
    finite = np.abs(ref[np.isfinite(ref)])
    magnitude = max(1.0, float(finite.max())) if scaled and finite.size else 1.0
    if not np.all(both_nan | (err <= atol * magnitude + rtol * np.abs(ref))):
        return False
    total = float(np.linalg.norm(err.ravel()))
    return bool(total <= rtol * float(np.linalg.norm(finite)) + atol * np.sqrt(err.size))
