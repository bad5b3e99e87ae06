"""Validation on the user's data: `aot verify --dataset` (docs/deploy.md
"Validation on your data").

Two halves, both pure (no board, no runtime):

- `load_dataset(path, graph)`: the samples of an .npz file or a directory,
  checked against the model's inputs, as lists in the graph's input order.
- `output_metrics(...)`: how far the board's outputs are from the
  reference's over all samples, per output: max_abs, rmse, l2r, cosine,
  top1_agreement, max_lsb, and the pass/fail `ok` under a Tolerance.
"""
from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from aot.errors import InputError, MismatchError
from aot.ir.graph import Graph, Quant, TensorType
from aot.deploy.host import quantize_float
from aot.passes.float_io import quantizable

SUFFIXES = (".npz", ".npy")


# ------------------------------------------------------------------- datasets

def load_dataset(path: str | Path, graph: Graph) -> list[list[np.ndarray]]:
    """The samples of `path`, each [one array per graph input, in order].

    An .npz holds one array per input name with a leading sample axis (a
    single-input model also takes one unnamed array, `arr_0`); a directory
    holds one .npz (input names as keys, no sample axis) or .npy (single-input
    models) per sample, in sorted file-name order.
    """
    path = Path(path)
    if path.is_dir():
        return _directory_samples(path, graph)
    if not path.is_file():
        raise InputError(f"dataset {path}: no such file or directory")
    if path.suffix.lower() != ".npz":
        raise InputError(f"dataset {path}: not an .npz file (a dataset is an .npz with one "
                         "array per input, or a directory of .npz/.npy files, one per sample)")
    arrays = _read(path)
    stacks = [_as_samples(path, name, graph.types[name], _pick(path, arrays, graph, name))
              for name in graph.inputs]
    counts = [len(s) for s in stacks]
    if counts and any(c != counts[0] for c in counts):
        first, other = graph.inputs[0], next(n for n, c in zip(graph.inputs, counts)
                                             if c != counts[0])
        raise InputError(f"dataset {path}: input '{first}' has {counts[0]} samples, input "
                         f"'{other}' has {counts[graph.inputs.index(other)]}")
    if not counts or counts[0] == 0:
        raise InputError(f"dataset {path}: no samples (the leading sample axis is empty)")
    return [[s[i] for s in stacks] for i in range(counts[0])]


def _read(path: Path) -> dict[str, np.ndarray]:
    """Every array of an .npz or .npy file (an .npy's under the key arr_0)."""
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.ndarray):
            return {"arr_0": loaded}
        with loaded:
            return {k: loaded[k] for k in loaded.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InputError(f"dataset {path}: cannot read it ({reason})") from None


def _pick(where: Path, arrays: dict[str, np.ndarray], graph: Graph, name: str) -> np.ndarray:
    if name in arrays:
        return arrays[name]
    if len(graph.inputs) == 1 and "arr_0" in arrays:
        return arrays["arr_0"]
    held = ", ".join(repr(k) for k in sorted(arrays)) or "no arrays"
    raise InputError(f"dataset {where}: no array for input '{name}' (it holds {held})")


def _as_samples(where: Path, name: str, ty: TensorType, array: np.ndarray) -> np.ndarray:
    """`array` as [samples, *input shape]: the sample axis leads, or stands
    in for the input's batch axis of 1 (a Keras-style [N, 49, 10, 1] for a
    [1, 49, 10, 1] input)."""
    shape = tuple(ty.shape)
    if array.ndim == len(shape) + 1 and array.shape[1:] == shape:
        stacked = array
    elif shape[:1] == (1,) and array.ndim == len(shape) and array.shape[1:] == shape[1:]:
        stacked = array.reshape(array.shape[0], *shape)
    else:
        alt = f" or [N, {', '.join(map(str, shape[1:]))}]" if shape[:1] == (1,) else ""
        raise InputError(f"dataset {where}: input '{name}' needs an array of shape "
                         f"[N, {', '.join(map(str, shape))}]{alt}, got {list(array.shape)}")
    return _cast(where, name, ty, stacked)


def _one_sample(where: Path, name: str, ty: TensorType, array: np.ndarray) -> np.ndarray:
    """One sample file's array: the input's shape, or that shape without its
    batch axis of 1."""
    shape = tuple(ty.shape)
    if array.shape != shape:
        if shape[:1] == (1,) and array.shape == shape[1:]:
            array = array.reshape(shape)
        else:
            raise InputError(f"dataset {where}: input '{name}' has shape {list(shape)}, got "
                             f"{list(array.shape)}")
    return _cast(where, name, ty, array)


def _cast(where: Path, name: str, ty: TensorType, array: np.ndarray) -> np.ndarray:
    """The exact dtype, except float64 data for a float32 input (numpy's
    default float): that cast is what any float32 runtime would do to it;
    and float data for a per-tensor quantized input, kept as float32 for
    quantize_samples."""
    if array.dtype.name == ty.dtype:
        return array
    if array.dtype.kind == "f" and (ty.dtype == "float32" or quantizable(ty)):
        return array.astype(np.float32)
    raise InputError(f"dataset {where}: input '{name}' is {ty.dtype}, got {array.dtype.name}")


def quantize_samples(samples: Sequence[Sequence[np.ndarray]], graph: Graph
                     ) -> tuple[list[list[np.ndarray]], list[str]]:
    """(samples, notes): each sample's float data for the graph's quantizable
    inputs quantized (quantize_float), and one note per input so fed."""
    notes: dict[str, None] = {}
    out = []
    for sample in samples:
        row = []
        for name, array in zip(graph.inputs, sample):
            array, note = quantize_float(name, array, graph.types[name])
            row.append(array)
            if note:
                notes[note] = None
        out.append(row)
    return out, list(notes)


def float_samples(samples: Sequence[Sequence[np.ndarray]], graph: Graph,
                  float_io: Mapping[str, TensorType]) -> list[list[np.ndarray]]:
    """The samples a --float-io package takes: the integer data of each
    input in `float_io` dequantized to its real values (float32, as TFLite's
    DEQUANTIZE gives them)."""
    from aot.ops.quant.tflite_int8 import dequantize_array

    return [[dequantize_array(x, float_io[n].quant) if n in float_io and
             np.asarray(x).dtype.kind in "iu" else x for n, x in zip(graph.inputs, sample)]
            for sample in samples]


def _directory_samples(folder: Path, graph: Graph) -> list[list[np.ndarray]]:
    files = sorted(p for p in folder.iterdir()
                   if p.suffix.lower() in SUFFIXES and p.is_file())
    if not files:
        raise InputError(f"dataset {folder}: no .npz or .npy files (one per sample)")
    samples = []
    for f in files:
        if f.suffix.lower() == ".npy" and len(graph.inputs) != 1:
            raise InputError(f"dataset {f}: an .npy holds one array, the model takes "
                             f"{len(graph.inputs)} inputs ({', '.join(graph.inputs)}): use one "
                             ".npz per sample")
        arrays = _read(f)
        samples.append([_one_sample(f, n, graph.types[n], _pick(f, arrays, graph, n))
                        for n in graph.inputs])
    return samples


def dequantize_outputs(outputs: Sequence[np.ndarray], graph: Graph,
                       float_io: Mapping[str, TensorType]) -> list[np.ndarray]:
    """The model's outputs with each one in `float_io` dequantized as
    TFLite's DEQUANTIZE does: what a --float-io package gives."""
    from aot.ops.quant.tflite_int8 import dequantize_array

    return [dequantize_array(np.asarray(y), float_io[n].quant) if n in float_io else y
            for n, y in zip(graph.outputs, outputs)]


# -------------------------------------------------------------------- metrics

METRICS = ("max_abs", "rmse", "l2r", "cosine", "top1_agreement", "max_lsb")

# compare()'s defaults (aot/check/reference.py): what `aot verify` always held floats to.
DEFAULT_ATOL = 1e-4
DEFAULT_RTOL = 1e-4
# float16 outputs: one half step at 1.0 absolute, two relative. A half has
# 11 significant bits, and aot and ONNX Runtime round a float16 chain at
# different points (a fused kernel once, at its output): an fp16 classifier's
# softmax differs by up to 4.9e-4 (tests/lower/tir_passes/test_float16.py).
HALF_ATOL = 2.0 ** -10
HALF_RTOL = 2.0 ** -9


@dataclass(frozen=True)
class Tolerance:
    """When an output passes. Floats: |got - ref| <= atol * max(1, max|ref|)
    + rtol * |ref| elementwise, and ||got - ref|| <= rtol * ||ref|| + atol *
    sqrt(size) (aot.check.reference.compare says why). Integer outputs are
    bit-exact unless atol or rtol is given; then the same rule applies to
    their stored values, atol unscaled (atol=1: one quantization step)."""
    atol: float | None = None
    rtol: float | None = None

    def __post_init__(self):
        for name, v in (("atol", self.atol), ("rtol", self.rtol)):
            if v is not None and not (np.isfinite(v) and v >= 0):
                raise InputError(f"--{name} must be a finite number >= 0, got {v}")

    @property
    def exact_integers(self) -> bool:
        return self.atol is None and self.rtol is None

    @property
    def floats(self) -> tuple[float, float]:
        """(atol, rtol) of the elementwise rule, an unset one at its default."""
        return (DEFAULT_ATOL if self.atol is None else self.atol,
                DEFAULT_RTOL if self.rtol is None else self.rtol)


def dequantize(q: np.ndarray, quant: Quant, axis_offset: int = 0) -> np.ndarray:
    """real = scale * (q - zero_point), float64; a per-channel axis counts
    from the tensor's first axis plus `axis_offset` (1 under a sample axis)."""
    scale = np.asarray(quant.scale, np.float64)
    zero = np.asarray(quant.zero_point, np.float64)
    if quant.axis is not None:
        shape = [1] * q.ndim
        shape[quant.axis + axis_offset] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    else:
        scale, zero = scale[0], zero[0]
    return scale * (q.astype(np.float64) - zero)


def _number(x) -> float | None:
    """A metric for JSON: None when it is not a finite number."""
    x = float(x)
    return x if np.isfinite(x) else None


def max_abs(got: np.ndarray, ref: np.ndarray) -> float | None:
    return _number(np.max(_abs_error(got, ref))) if got.size else 0.0


def rmse(got: np.ndarray, ref: np.ndarray) -> float | None:
    return _number(np.sqrt(np.mean(_abs_error(got, ref) ** 2))) if got.size else 0.0


def l2r(got: np.ndarray, ref: np.ndarray) -> float | None:
    """||got - ref|| / ||ref||: 0 when both are all zeros, None when only
    the reference is."""
    err = float(np.linalg.norm(_abs_error(got, ref).ravel()))
    norm = float(np.linalg.norm(ref.ravel()))
    if norm == 0.0:
        return 0.0 if err == 0.0 else None
    return _number(err / norm)


def cosine(got: np.ndarray, ref: np.ndarray) -> float | None:
    """got . ref / (||got|| ||ref||): 1 when they are equal (all zeros too),
    0 when only one is all zeros (nothing of one points along the other)."""
    g, r = got.ravel(), ref.ravel()
    if np.array_equal(g, r):        # exactly 1, not 1 - an ulp of the norms' rounding
        return 1.0
    ng, nr = float(np.linalg.norm(g)), float(np.linalg.norm(r))
    if ng == 0.0 or nr == 0.0:
        return 1.0 if ng == nr else 0.0
    return _number(np.clip(np.dot(g, r) / (ng * nr), -1.0, 1.0))


def top1_agreement(got: np.ndarray, ref: np.ndarray) -> float | None:
    """The fraction of rows (every index of the other axes, in every sample)
    whose argmax over the last axis is the same; None when the last axis has
    fewer than 2 entries (no class to pick)."""
    if got.ndim == 0 or got.shape[-1] < 2 or got.size == 0:
        return None
    rows_g = got.reshape(-1, got.shape[-1])
    rows_r = ref.reshape(-1, ref.shape[-1])
    return float(np.mean(np.argmax(rows_g, axis=1) == np.argmax(rows_r, axis=1)))


def max_lsb(got_q: np.ndarray, ref_q: np.ndarray) -> int:
    """The largest difference of two quantized tensors, in quantization steps."""
    if got_q.size == 0:
        return 0
    return int(np.max(np.abs(got_q.astype(np.int64) - ref_q.astype(np.int64))))


def _steps(got: np.ndarray, ref: np.ndarray, step: float) -> int:
    """The largest difference of two dequantized tensors, in steps of
    `step` (each value a whole number of steps, up to float rounding)."""
    if got.size == 0:
        return 0
    return int(np.rint(np.max(_abs_error(got, ref)) / step))


def dequantized_steps(graph: Graph) -> dict[str, float]:
    """The quantization step of each float output the model computes by
    dequantizing (an ONNX DequantizeLinear with a constant per-tensor scale:
    a QDQ model's outputs), read from the model as loaded (optimization
    fuses the DequantizeLinear away)."""
    steps = {}
    for node in graph.nodes:
        out = node.outputs[0] if node.outputs else ""
        if node.op != "DequantizeLinear" or out not in graph.outputs or len(node.inputs) < 2:
            continue
        scale = graph.constants.get(node.inputs[1])
        if scale is not None and scale.size == 1 and float(scale.reshape(-1)[0]) > 0:
            steps[out] = float(scale.reshape(-1)[0])
    return steps


def _abs_error(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|got - ref|, 0 where both are NaN (they agree)."""
    both_nan = np.isnan(got) & np.isnan(ref)
    return np.where(both_nan, 0.0, np.abs(got - ref))


def output_metrics(name: str, got: Sequence[np.ndarray], want: Sequence[np.ndarray],
                   ty: TensorType, tol: Tolerance = Tolerance(),
                   step: float | None = None) -> dict:
    """Every metric of one output over all samples (got[i] is sample i's
    output on the board, want[i] the reference's), as `aot verify --json`
    prints it. Values are compared as real numbers: a quantized output is
    dequantized first, and max_lsb counts its steps; so it does for a float
    output the model dequantizes at `step` (a QDQ model's DequantizeLinear),
    which by default passes within one step (an explicit atol replaces that);
    a float16 output by default within HALF_ATOL and HALF_RTOL (the rule
    applied is the row's "tolerance": atol, rtol, or bit_exact):
    the reference's own arithmetic moves such outputs by whole steps (ONNX
    Runtime runs part of a QDQ graph in float, docs/deploy.md). max_abs_err
    is the largest error in the stored values (int8 codes for an int8
    output)."""
    from aot.check.reference import compare

    row: dict = {"name": name}
    atol, rtol = tol.floats
    if ty.dtype == "float16":
        atol = HALF_ATOL if tol.atol is None else atol
        rtol = HALF_RTOL if tol.rtol is None else rtol
    if step:
        row["step"] = step
        if tol.atol is None:
            atol = max(atol, step * (1 + 1e-6))    # the product's float rounding
    integer = np.dtype(ty.dtype).kind in "iub"
    exact = integer and tol.exact_integers
    # atol in quantization steps (stored integers, a dequantized output's
    # step) is the same at every magnitude; a float output's grows with it
    scaled = not integer and not step
    row["tolerance"] = {"atol": atol, "rtol": rtol, "bit_exact": bool(exact),
                        "scaled": scaled}
    checks = []
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        if g.dtype.kind in "iub" and not tol.exact_integers:
            g, w = g.astype(np.float64), w.astype(np.float64)
        checks.append(compare(name, g, w, rtol=rtol, atol=atol, scaled=scaled))
    failed = next((c for c in checks if "error" in c), None)
    if failed is not None or not checks:
        return {**row, **dict.fromkeys(METRICS), "max_abs_err": None, "ok": False,
                "error": failed["error"] if failed else "no samples"}
    if len({np.shape(x) for x in got}) > 1:
        # a value-sized output's valid entries, as many as each sample has:
        # the metrics are over all of them, as one sample
        got = [np.concatenate([np.ravel(x) for x in got])]
        want = [np.concatenate([np.ravel(y) for y in want])]
    g = np.stack([np.asarray(x) for x in got])
    w = np.stack([np.asarray(y).reshape(np.shape(x)) for x, y in zip(got, want)])
    w = w.astype(g.dtype, copy=False) if g.dtype.kind in "iub" else w
    quant = ty.quant if g.dtype.kind in "iu" else None
    real_g, real_w = ((dequantize(g, quant, 1), dequantize(w, quant, 1)) if quant else
                      (g.astype(np.float64), w.astype(np.float64)))
    errs = [c["max_abs_err"] for c in checks]
    row.update(max_abs=max_abs(real_g, real_w), rmse=rmse(real_g, real_w),
               l2r=l2r(real_g, real_w), cosine=cosine(real_g, real_w),
               top1_agreement=top1_agreement(real_g, real_w),
               max_lsb=(max_lsb(g, w) if quant else
                        _steps(real_g, real_w, step) if step else None),
               max_abs_err=None if None in errs else max(errs),
               ok=all(c["ok"] for c in checks))
    return row


# ------------------------------------------------- a package's own model

def package_model(pkg: Path, meta: dict, model: str | Path | None = None) -> Path:
    """The model file package `pkg` was built from: `model` if given, else
    the file its metadata names (source.file), in the working directory or
    beside the package. A file whose sha256 is not the recorded one is
    refused: the comparison would judge the package against another model."""
    from aot.packaging.build import model_source

    recorded = meta.get("source") or {}
    sha = recorded.get("sha256")
    if model is None:
        name = Path(str(recorded.get("file", ""))).name
        if not name:
            raise InputError(f"{pkg} does not record the model it was built from (packaged "
                             "from a Graph, or by an older aot): give it with --model FILE")
        model = next((c for c in (Path(name), Path(pkg).parent / name) if c.is_file()), None)
        if model is None:
            raise InputError(f"{pkg} was built from {name} (sha256 {sha}), which is neither in "
                             "the working directory nor beside the package: give it with "
                             "--model FILE")
    model = Path(model)
    if not model.is_file():
        raise InputError(f"--model {model}: no such file")
    if sha:
        have = model_source(model)["sha256"]
        if have != sha:
            raise MismatchError(f"{pkg} was built from a model with sha256 {sha}; {model} has "
                                f"{have}")
    return model


def check_package_io(graph: Graph, meta: dict, model: Path, pkg: Path) -> None:
    """The model's inputs and outputs are the package's (names, shapes,
    dtypes): a model without a recorded sha256 is checked this far."""
    def listing(rows) -> str:
        return ", ".join(f"{n} {d}{s}" for n, s, d in rows)

    for kind in ("inputs", "outputs"):
        theirs = [(s["name"], list(s["shape"]), s["dtype"]) for s in meta[kind]]
        ours = [(n, list(graph.types[n].shape), graph.types[n].dtype)
                for n in getattr(graph, kind)]
        if theirs != ours:
            raise MismatchError(f"{model} is not the model of {pkg}: the package's {kind} are "
                                f"{listing(theirs)}, the model's {listing(ours)}")
