"""Validation on the user's data: `aot verify --dataset` (docs/deploy.md
"Validation on your data").

Two halves, both pure (no board, no runtime):

- `quantize_samples`, `float_samples`: a dataset's samples (aot/check/dataset.py
  reads them) as the board and the reference take them.
- `output_metrics(...)`: how far the board's outputs are from the
  reference's over all samples, per output: max_abs, rmse, l2r, cosine,
  top1_agreement, max_lsb, and the pass/fail `ok` under a Tolerance.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from aot.errors import InputError, MismatchError
from aot.ir.graph import Graph, Quant, TensorType
from aot.deploy.host import quantize_float

# ------------------------------------------------------------------- datasets

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
    """|got - ref|, 0 where they are equal (the same infinity too: inf - inf
    is no error) or both NaN (they agree); NaN where a NaN faces a number."""
    with np.errstate(invalid="ignore", over="ignore"):
        agree = (got == ref) | (np.isnan(got) & np.isnan(ref))
        return np.where(agree, 0.0, np.abs(got - ref))


class OutputMetrics:
    """output_metrics over samples given one at a time (`add`), in memory
    that does not grow with their number: running sums, maxima and counts;
    `row()` is the result."""

    def __init__(self, name: str, ty: TensorType, tol: Tolerance = Tolerance(),
                 step: float | None = None) -> None:
        self.name, self.ty, self.tol, self.step = name, ty, tol, step
        atol, rtol = tol.floats
        if ty.dtype == "float16":
            atol = HALF_ATOL if tol.atol is None else atol
            rtol = HALF_RTOL if tol.rtol is None else rtol
        if step and tol.atol is None:
            atol = max(atol, step * (1 + 1e-6))    # the product's float rounding
        integer = np.dtype(ty.dtype).kind in "iub"
        # atol in quantization steps (stored integers, a dequantized output's
        # step) is the same at every magnitude; a float output's grows with it
        self.atol, self.rtol, self.scaled = atol, rtol, not integer and not step
        self.bit_exact = integer and tol.exact_integers
        self.error: str | None = None
        self.samples, self.ok, self.max_abs_err = 0, True, 0.0
        self._shapes: set = set()
        self._n = self._nan = self._rows = self._agree = self._lsb = 0
        self._max = self._err2 = self._ref2 = self._got2 = self._dot = 0.0
        self._equal = self._quantized = True

    def add(self, got: np.ndarray, want: np.ndarray) -> None:
        """One sample's output on the board (`got`) and the reference's."""
        from aot.check.reference import compare

        if self.error is not None:
            return
        g, w = np.asarray(got), np.asarray(want)
        gc, wc = ((g.astype(np.float64), w.astype(np.float64))
                  if g.dtype.kind in "iub" and not self.tol.exact_integers else (g, w))
        check = compare(self.name, gc, wc, rtol=self.rtol, atol=self.atol, scaled=self.scaled)
        if "error" in check:
            self.error = check["error"]
            return
        self.samples += 1
        self.ok = self.ok and check["ok"]
        err = check["max_abs_err"]
        self.max_abs_err = None if err is None or self.max_abs_err is None else max(
            self.max_abs_err, err)
        w = w.reshape(g.shape)
        w = w.astype(g.dtype, copy=False) if g.dtype.kind in "iub" else w
        quant = self.ty.quant if g.dtype.kind in "iu" else None
        self._quantized = quant is not None
        if quant:
            self._lsb = max(self._lsb, max_lsb(g, w))
        real_g, real_w = ((dequantize(g, quant), dequantize(w, quant)) if quant else
                          (g.astype(np.float64), w.astype(np.float64)))
        self._shapes.add(g.shape)
        self._sums(real_g.ravel(), real_w.ravel())
        if g.ndim and g.shape[-1] >= 2 and g.size:
            rows_g, rows_w = real_g.reshape(-1, g.shape[-1]), real_w.reshape(-1, g.shape[-1])
            self._rows += len(rows_g)
            self._agree += int(np.count_nonzero(np.argmax(rows_g, 1) == np.argmax(rows_w, 1)))

    def _sums(self, g: np.ndarray, w: np.ndarray) -> None:
        # NaN and infinities flow into the sums and come out as null metrics:
        # numpy's warnings about them would say nothing more
        with np.errstate(all="ignore"):
            err = _abs_error(g, w)
            self._nan += int(np.count_nonzero(np.isnan(g) & np.isnan(w)))
            self._equal = self._equal and np.array_equal(g, w, equal_nan=True)
            if err.size:
                top = float(np.max(err))
                self._max = top if np.isnan(top) or np.isnan(self._max) else max(self._max, top)
            self._n += err.size
            self._err2 += float(np.dot(err, err))
            self._ref2 += float(np.dot(w, w))
            self._got2 += float(np.dot(g, g))
            self._dot += float(np.dot(g, w))

    def row(self) -> dict:
        """The output's row, as `aot verify --json` prints it."""
        row: dict = {"name": self.name}
        if self.step:
            row["step"] = self.step
        row["tolerance"] = {"atol": self.atol, "rtol": self.rtol,
                            "bit_exact": bool(self.bit_exact), "scaled": self.scaled}
        if self.error is not None or not self.samples:
            return {**row, **dict.fromkeys(METRICS), "max_abs_err": None, "ok": False,
                    "error": self.error or "no samples"}
        if self._nan:
            row["nan_matched"] = self._nan
        with np.errstate(all="ignore"):
            biggest = _number(self._max) if self._n else 0.0
            row.update(max_abs=biggest,
                       rmse=_number(np.sqrt(self._err2 / self._n)) if self._n else 0.0,
                       l2r=self._l2r(), cosine=self._cosine(), top1_agreement=self._top1(),
                       max_lsb=(self._lsb if self._quantized else
                                self._steps(biggest) if self.step else None),
                       max_abs_err=self.max_abs_err, ok=self.ok)
        return row

    def _l2r(self) -> float | None:
        """||got - ref|| / ||ref||: 0 when every element agrees (both all
        zeros too; an infinity or NaN in the reference does not matter then),
        None when only the reference is all zeros."""
        err, norm = np.sqrt(self._err2), np.sqrt(self._ref2)
        if self._equal or norm == 0.0:
            return 0.0 if err == 0.0 else None
        return _number(err / norm)

    def _cosine(self) -> float | None:
        """1 when every element agrees (all zeros too), 0 when only one is all
        zeros."""
        if self._equal:
            return 1.0
        ng, nr = np.sqrt(self._got2), np.sqrt(self._ref2)
        if ng == 0.0 or nr == 0.0:
            return 1.0 if ng == nr else 0.0
        return _number(np.clip(self._dot / (ng * nr), -1.0, 1.0))

    def _top1(self) -> float | None:
        """None without classes (last axis < 2) and for an output sized by
        values (its samples' rows are not the same rows)."""
        if not self._rows or len(self._shapes) > 1:
            return None
        return self._agree / self._rows

    def _steps(self, biggest: float | None) -> int | None:
        return None if biggest is None else int(np.rint(biggest / self.step))


def output_metrics(name: str, got: Sequence[np.ndarray], want: Sequence[np.ndarray],
                   ty: TensorType, tol: Tolerance = Tolerance(),
                   step: float | None = None) -> dict:
    """Every metric of one output over all samples (got[i] is sample i's
    output on the board, want[i] the reference's), as `aot verify --json`
    prints it (OutputMetrics: one sample at a time). Values are compared as
    real numbers: a quantized output is dequantized first, and max_lsb counts
    its steps; so it does for a float output the model dequantizes at `step`
    (a QDQ model's DequantizeLinear), which by default passes within one step
    (an explicit atol replaces that); a float16 output by default within
    HALF_ATOL and HALF_RTOL (the rule applied is the row's "tolerance": atol,
    rtol, or bit_exact): the reference's own arithmetic moves such outputs by
    whole steps (ONNX Runtime runs part of a QDQ graph in float,
    docs/deploy.md). max_abs_err is the largest error in the stored values
    (int8 codes for an int8 output)."""
    metrics = OutputMetrics(name, ty, tol, step)
    for g, w in zip(got, want):
        metrics.add(g, w)
    return metrics.row()


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
