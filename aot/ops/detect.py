"""Ops of detector heads and their kin, with ONNX semantics: TopK,
NonMaxSuppression, RoiAlign, and the ops whose output size follows from
values: Compress, NonZero and Unique.

A static package cannot size an output at run time, so each value-sized
output gets one of two answers (docs/ops.md, "Signal and detection ops"):

- A static upper bound and a count, where the output is the model's and
  no other node reads it (`with_counts`, at import): NonMaxSuppression
  always (batches x classes x min(max_output_boxes_per_class, boxes) rows),
  NonZero, Compress (as BoundedCompress) and Unique on run-time inputs
  (bound: the input's size, its slices along Unique's axis, or the
  condition's positions).
  The valid entries come first, in ONNX's order, the rest is padding (-1 in
  index outputs, 0 in the others), and one more model output, int32 [1],
  says how many are valid.
- Exact sizes otherwise: the input deciding the size must be a
  compile-time constant (else the node is refused by name); NonZero and
  Unique fold to constants, and Compress is a gather with constant
  positions. A NonMaxSuppression selection that other nodes read keeps its
  bound and -1 rows, without a count.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from aot.errors import AotError, UnsupportedError, node_label
from aot.ir.graph import Graph, TensorType, claim_name
from aot.ops.attrs import normalize_axis
from aot.ops.elementwise import arity
from aot.ops.index import check_indices, wrapped_indices
from aot.ops.registry import Call, Pattern, Sig, register
from aot.ops.signal import scalar_int


def value_sized(sig: Sig, i: int, what: str) -> np.ndarray:
    """Input i, which decides the output's size, known at compile time."""
    if i >= len(sig.values) or sig.values[i] is None:
        raise UnsupportedError(
            f"{node_label(sig.node)}: input {i} must be a compile-time constant: the output "
            f"size depends on the values of {what}, and a static package sizes every output "
            "at compile time (a model output no other node reads gets a static bound and a "
            "count instead)")
    return sig.values[i]


# ---- TopK ---------------------------------------------------------------------------------

def topk_k(sig: Sig) -> int:
    return scalar_int(sig, 1, "k") if sig.has(1) else int(sig.attrs["k"])


@arity(1, 2)
def _infer_topk(sig: Sig):
    x = sig.in_types[0]
    if not x.shape:
        raise sig.fail("the input must have rank >= 1")
    if x.dtype == "bool":
        raise sig.fail("the input must be numeric, got bool")
    axis = normalize_axis(sig, int(sig.attrs.get("axis", -1)), len(x.shape))
    k = topk_k(sig)
    if not 0 <= k <= x.shape[axis]:
        raise sig.fail(f"k {k} is out of range for an axis of {x.shape[axis]}")
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]
    return [TensorType(shape, x.dtype, x.quant), TensorType(shape, "int64")]


def topk_order(x: np.ndarray, axis: int, largest: bool) -> np.ndarray:
    """Positions along `axis` in TopK's order: by value (descending when
    largest), equal values by position, the lower first."""
    if not largest:
        return np.argsort(x, axis=axis, kind="stable")
    # a stable ascending sort of the reversed axis, reversed: descending,
    # and equal values keep their original order
    n = x.shape[axis]
    up = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
    return (n - 1) - np.flip(up, axis)


@register("TopK", infer=_infer_topk)
def _topk(call: Call, args):
    x = args[0]
    axis = int(call.attrs.get("axis", -1)) % x.ndim
    k = call.out_types[0].shape[axis]
    order = np.take(topk_order(x, axis, bool(call.attrs.get("largest", 1))),
                    np.arange(k), axis=axis)
    return [np.take_along_axis(x, order, axis=axis), order.astype(np.int64)]


# ---- NonMaxSuppression --------------------------------------------------------------------

def nms_per_class(boxes: TensorType, value) -> int:
    """Rows each (batch, class) may select: min(max_output_boxes_per_class, boxes)."""
    if value is None:
        return 0        # absent: the spec's default of 0 selects nothing
    return max(0, min(int(np.asarray(value).reshape(-1)[0]), boxes.shape[1]))


@arity(2, 5)
def _infer_nms(sig: Sig):
    boxes, scores = sig.in_types[0], sig.in_types[1]
    if boxes.dtype != "float32" or scores.dtype != "float32":
        raise sig.fail(f"boxes and scores must be float32, got {boxes.dtype}, {scores.dtype}")
    if len(boxes.shape) != 3 or boxes.shape[2] != 4:
        raise sig.fail(f"boxes must be [batches, boxes, 4], got {list(boxes.shape)}")
    if len(scores.shape) != 3 or (scores.shape[0], scores.shape[2]) != boxes.shape[:2]:
        raise sig.fail(f"scores {list(scores.shape)} must be [batches, classes, boxes] for "
                       f"boxes {list(boxes.shape)}")
    if int(sig.attrs.get("center_point_box", 0)) not in (0, 1):
        raise sig.fail(f"center_point_box {sig.attrs['center_point_box']} must be 0 or 1")
    for i, what in ((3, "iou_threshold"), (4, "score_threshold")):
        if sig.has(i) and (sig.in_types[i].dtype != "float32" or sig.in_types[i].size != 1):
            raise sig.fail(f"{what} must be one float32, got {sig.in_types[i]}")
    per_class = nms_per_class(boxes, sig.const(2) if sig.has(2) else None)
    selected = TensorType((boxes.shape[0] * scores.shape[1] * per_class, 3), "int64")
    return [selected, COUNT_TYPE][:len(sig.node.outputs)]


def _corners(box: np.ndarray, center: bool):
    """(x_min, x_max, y_min, y_max) in float32, as the ONNX reference."""
    if center:
        xc, yc, w, h = box
        return xc - w / 2, xc + w / 2, yc - h / 2, yc + h / 2
    y1, x1, y2, x2 = box
    return min(x1, x2), max(x1, x2), min(y1, y2), max(y1, y2)


def overlaps(a: np.ndarray, b: np.ndarray, center: bool, iou_threshold) -> bool:
    """Whether box b suppresses box a: IoU > iou_threshold, in float32."""
    ax0, ax1, ay0, ay1 = _corners(a, center)
    bx0, bx1, by0, by1 = _corners(b, center)
    w = min(ax1, bx1) - max(ax0, bx0)
    h = min(ay1, by1) - max(ay0, by0)
    if w <= 0 or h <= 0:
        return False
    inter = w * h
    area_a, area_b = (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
    union = area_a + area_b - inter
    if area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return inter / union > iou_threshold


def nms_select(boxes, scores, per_class: int, iou_threshold, score_threshold,
               center: bool) -> list[tuple[int, int, int]]:
    """The selected (batch, class, box) triples in ONNX's order: batch, class,
    then score descending (equal scores: the lower box first)."""
    selected = []
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = topk_order(s, 0, True)
            if score_threshold is not None:
                order = order[s[order] > score_threshold]
            kept: list[int] = []
            for i in order:
                if len(kept) == per_class:
                    break
                if not any(overlaps(boxes[b, i], boxes[b, j], center, iou_threshold)
                           for j in kept):
                    kept.append(int(i))
            selected += [(b, c, i) for i in kept]
    return selected


@register("NonMaxSuppression", infer=_infer_nms)
def _nms(call: Call, args):
    boxes, scores = args[0], args[1]
    per_class = nms_per_class(call.in_types[0], args[2] if len(args) > 2 else None)

    def scalar(i):
        a = args[i] if len(args) > i else None
        return None if a is None else np.float32(np.asarray(a).reshape(-1)[0])
    iou = scalar(3)
    rows = nms_select(boxes, scores, per_class, np.float32(0) if iou is None else iou,
                      scalar(4), bool(call.attrs.get("center_point_box", 0)))
    out = np.full(call.out_types[0].shape, -1, np.int64)
    if rows:
        out[:len(rows)] = rows
    return [out, _count(len(rows))][:len(call.out_types)]


# ---- count outputs ------------------------------------------------------------------------
#
# A value-sized model output gets a static bound and a count: its node
# takes its bounded form, one more output holding the count (int32 [1]:
# the number of valid entries along the padded axis, as TFLite's
# NonMaxSuppressionV4 gives its valid_outputs), appended to the model's
# outputs. Entries past the count are padding: -1 in index outputs, 0 in
# the others.

@dataclass(frozen=True)
class Counted:
    """An op's bounded form: output `count` is the count, each output of
    `padded(attrs, input rank)` ((output, axis, fill), ...) is padded along
    its axis with `fill`. `sized_by`: the input whose values size the outputs (None:
    always, as NonMaxSuppression's scores); `source`: the op the importer
    turns into this one, when they differ."""
    count: int
    padded: Callable[[Mapping, int], tuple[tuple[int, int, int], ...]]
    sized_by: int | None = None
    source: str = ""


def _axis_or_zero(attrs: Mapping, rank: int) -> int:
    """The `axis` attribute in [0, rank); 0 without one (the flattened input)."""
    axis = attrs.get("axis")
    return 0 if axis is None else int(axis) % max(rank, 1)


COUNTED = {
    "NonMaxSuppression": Counted(1, lambda a, r: ((0, 0, -1),)),
    "NonZero": Counted(1, lambda a, r: ((0, 1, -1),), sized_by=0),
    "BoundedCompress": Counted(1, lambda a, r: ((0, _axis_or_zero(a, r), 0),), sized_by=1,
                               source="Compress"),
    "Unique": Counted(4, lambda a, r: ((0, _axis_or_zero(a, r), 0), (1, 0, -1), (3, 0, 0)),
                      sized_by=0),
}
BOUNDED = {c.source or op: op for op, c in COUNTED.items()}
COUNT_TYPE = TensorType((1,), "int32")


def bounded(node) -> bool:
    """Whether the node is in its bounded form (has its count output)."""
    spec = COUNTED.get(node.op)
    return spec is not None and len(node.outputs) == spec.count + 1


def with_counts(graph: Graph) -> Graph:
    """The graph with each value-sized model output in its bounded form,
    its count (<output>_count) appended to the model's outputs in node
    order. Left as they are: outputs sized by compile-time constants (they
    fold, exact), and value-sized outputs other nodes read (which would
    read the padding): a run-time one is refused by type inference."""
    taken = set(graph.tensor_names()) | set(graph.constants)
    readers = {t for n in graph.nodes for t in n.inputs}
    nodes, counts = [], []
    for node in graph.nodes:
        op = BOUNDED.get(node.op)
        spec = COUNTED.get(op)
        if spec is not None and len(node.outputs) <= spec.count:
            outs = list(node.outputs) + [""] * (spec.count - len(node.outputs))
            padded = [outs[k] for k, _, _ in spec.padded(node.attrs, 0) if outs[k]]
            run_time = spec.sized_by is None or (
                len(node.inputs) > spec.sized_by and node.inputs[spec.sized_by]
                not in graph.constants)
            if run_time and any(o in graph.outputs for o in padded) and (
                    spec.sized_by is None or not readers & set(padded)):
                outs = [o or claim_name(f"{node.name}_unused{k}", taken)
                        for k, o in enumerate(outs)]
                count = claim_name(f"{padded[0]}_count", taken)
                node = node.with_(op=op, outputs=(*outs, count))
                counts.append(count)
        nodes.append(node)
    if not counts:
        return graph
    return graph.replace(nodes=tuple(nodes), outputs=(*graph.outputs, *counts))


def _counted_nodes(graph: Graph):
    for node in graph.nodes:
        if "body" in node.attrs:
            yield from ((n, node.attrs["body"]) for n, _ in _counted_nodes(node.attrs["body"]))
        elif bounded(node):
            yield node, graph


def count_outputs(graph: Graph) -> dict[str, tuple[tuple[str, int, int], ...]]:
    """{count output: ((an output it counts, its padded axis, the padding
    value), ...)} of a model, optimized or not."""
    out = {}
    for node, where in _counted_nodes(graph):
        spec = COUNTED[node.op]
        count = node.outputs[spec.count]
        if count in graph.outputs:
            rank = len(where.types[node.inputs[0]].shape) if node.inputs[0] in where.types else 0
            out[count] = tuple((node.outputs[k], axis, fill)
                               for k, axis, fill in spec.padded(node.attrs, rank)
                               if node.outputs[k] in graph.outputs)
    return out


def valid_entries(counts: Mapping[str, tuple[tuple[str, int, int], ...]],
                  outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The outputs as a runtime that sizes them by value gives them: each
    counted output cut to its first `count` entries, the counts left out."""
    out = {k: v for k, v in outputs.items() if k not in counts}
    for count, counted in counts.items():
        if count not in outputs:
            continue
        n = int(np.asarray(outputs[count]).reshape(-1)[0])
        for name, axis, _ in counted:
            a = np.asarray(out[name])
            if not 0 <= n <= a.shape[axis]:
                raise AotError(f"output '{count}' says {n} valid entries of the "
                               f"{a.shape[axis]} of output '{name}'")
            out[name] = np.take(a, np.arange(n), axis=axis)
    return out


def _pad(exact: np.ndarray, ty: TensorType, fill) -> np.ndarray:
    """`exact` in the bounded output of type ty, whose shape it has but
    along the padded axis: its entries first, then `fill`."""
    out = np.full(ty.shape, fill, ty.dtype)
    out[tuple(slice(0, d) for d in exact.shape)] = exact
    return out


def _count(n: int) -> np.ndarray:
    return np.array([n], COUNT_TYPE.dtype)


# ---- Compress -----------------------------------------------------------------------------

def compress_positions(sig: Sig) -> tuple[int | None, np.ndarray]:
    """(axis or None for the flattened input, the positions kept)."""
    x = sig.in_types[0]
    cond = np.asarray(value_sized(sig, 1, "the condition")).reshape(-1)
    if len(sig.in_types[1].shape) != 1:
        raise sig.fail(f"the condition must be 1-D, got {list(sig.in_types[1].shape)}")
    axis = sig.attrs.get("axis")
    axis = None if axis is None else normalize_axis(sig, int(axis), len(x.shape))
    dim = x.size if axis is None else x.shape[axis]
    if np.any(cond[dim:]):
        raise sig.fail(f"the condition selects beyond the {dim} positions of the input")
    return axis, np.flatnonzero(cond[:dim])


def _compress_shape(x: TensorType, axis: int | None, kept: int) -> tuple[int, ...]:
    return (kept,) if axis is None else x.shape[:axis] + (kept,) + x.shape[axis + 1:]


@arity(2, 2)
def _infer_compress(sig: Sig):
    x = sig.in_types[0]
    axis, kept = compress_positions(sig)
    return [TensorType(_compress_shape(x, axis, kept.size), x.dtype, x.quant)]


@register("Compress", infer=_infer_compress, pattern=Pattern.INJECTIVE)
def _compress(call: Call, args):
    axis, kept = compress_positions(Sig(call.node, call.in_types, tuple(args)))
    x = args[0].reshape(-1) if axis is None else args[0]
    return [np.take(x, kept, axis=0 if axis is None else axis)]


def bounded_compress_geometry(sig_or_call) -> tuple[int | None, int]:
    """(axis or None for the flattened input, the bound: the positions the
    condition can select, min(its length, the axis))."""
    x, cond = sig_or_call.in_types[0], sig_or_call.in_types[1]
    axis = sig_or_call.attrs.get("axis")
    axis = None if axis is None else int(axis) % max(len(x.shape), 1)
    dim = x.size if axis is None else x.shape[axis]
    return axis, min(dim, cond.size)


@arity(2, 2)
def _infer_bounded_compress(sig: Sig):
    x, cond = sig.in_types[0], sig.in_types[1]
    if len(cond.shape) != 1:
        raise sig.fail(f"the condition must be 1-D, got {list(cond.shape)}")
    if sig.attrs.get("axis") is not None:
        normalize_axis(sig, int(sig.attrs["axis"]), len(x.shape))
    axis, bound = bounded_compress_geometry(sig)
    return [TensorType(_compress_shape(x, axis, bound), x.dtype, x.quant), COUNT_TYPE]


@register("BoundedCompress", infer=_infer_bounded_compress)
def _bounded_compress(call: Call, args):
    """Compress of a run-time condition (with_counts): the kept slices
    first, zeros after them; positions past the input's axis are ignored."""
    x, cond = args
    axis, bound = bounded_compress_geometry(call)
    kept = np.flatnonzero(np.asarray(cond).reshape(-1)[:bound])
    exact = np.take(x.reshape(-1) if axis is None else x, kept, axis=axis or 0)
    out = np.moveaxis(np.zeros(call.out_types[0].shape, x.dtype), axis or 0, 0)
    out[:kept.size] = np.moveaxis(exact, axis or 0, 0)
    return [np.moveaxis(out, 0, axis or 0), _count(kept.size)]


# ---- NonZero and Unique: folded, or bounded -----------------------------------------------

@arity(1, 1)
def _infer_nonzero(sig: Sig):
    if bounded(sig.node):
        x = sig.in_types[0]
        return [TensorType((max(len(x.shape), 1), x.size), "int64"), COUNT_TYPE]
    x = value_sized(sig, 0, "the input")
    return [TensorType((max(x.ndim, 1), int(np.count_nonzero(x))), "int64")]


@register("NonZero", infer=_infer_nonzero)
def _nonzero(call: Call, args):
    x = np.asarray(args[0])
    exact = np.array(np.nonzero(x.reshape(-1) if x.ndim == 0 else x), np.int64)
    if not bounded(call.node):
        return [exact.reshape(call.out_types[0].shape)]
    return [_pad(exact, call.out_types[0], -1), _count(exact.shape[1])]


def unique(x: np.ndarray, axis: int | None, sort: bool):
    """(values, first positions, inverse, counts) along axis (None: flattened)."""
    flat = x.reshape(-1) if axis is None else x
    ax = 0 if axis is None else axis
    y, first, inverse, counts = np.unique(flat, True, True, True, axis=ax)
    inverse = inverse.reshape(-1)
    if not sort:
        # in the order of first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        first, counts, inverse = first[order], counts[order], rank[inverse]
        y = np.take(flat, first, axis=ax)
    return y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)


@arity(1, 1)
def _infer_unique(sig: Sig):
    t = sig.in_types[0]
    if bounded(sig.node):      # bound: every slice (element) unique
        if sig.attrs.get("axis") is None:
            return [TensorType((t.size,), t.dtype, t.quant)] + [
                TensorType((t.size,), "int64")] * 3 + [COUNT_TYPE]
        if not t.shape:
            raise sig.fail("a scalar has no axis to take unique slices along")
        n = t.shape[normalize_axis(sig, int(sig.attrs["axis"]), len(t.shape))]
        return [t] + [TensorType((n,), "int64")] * 3 + [COUNT_TYPE]
    x = value_sized(sig, 0, "the input")
    axis = sig.attrs.get("axis")
    axis = None if axis is None else normalize_axis(sig, int(axis), x.ndim)
    y, first, inverse, counts = unique(x, axis, bool(sig.attrs.get("sorted", 1)))
    types = [TensorType(y.shape, t.dtype, t.quant)] + [
        TensorType(a.shape, "int64") for a in (first, inverse, counts)]
    return types[:len(sig.node.outputs)]


@register("Unique", infer=_infer_unique)
def _unique(call: Call, args):
    axis = call.attrs.get("axis")
    axis = None if axis is None else int(axis) % args[0].ndim
    out = unique(args[0], axis, bool(call.attrs.get("sorted", 1)))
    if not bounded(call.node):
        return list(out[:len(call.out_types)])
    y, first, inverse, counts = out
    return [_pad(y, call.out_types[0], 0), _pad(first, call.out_types[1], -1), inverse,
            _pad(counts, call.out_types[3], 0), _count(first.size)]


# ---- RoiAlign -----------------------------------------------------------------------------

ROI_MODES = ("avg", "max")
ROI_COORDINATES = ("half_pixel", "output_half_pixel")


def roi_attrs(sig_or_call) -> tuple[int, int, int, float, str, bool]:
    """(output height, width, sampling ratio, spatial scale, mode, half_pixel)."""
    a = sig_or_call.attrs
    mode = a.get("mode", "avg")
    coords = a.get("coordinate_transformation_mode", "half_pixel")
    if mode not in ROI_MODES or coords not in ROI_COORDINATES:
        raise UnsupportedError(f"{node_label(sig_or_call.node)}: mode '{mode}' with coordinate "
                               f"transformation '{coords}' is not supported (modes "
                               f"{', '.join(ROI_MODES)}; {', '.join(ROI_COORDINATES)})")
    return (int(a.get("output_height", 1)), int(a.get("output_width", 1)),
            int(a.get("sampling_ratio", 0)), float(a.get("spatial_scale", 1.0)), mode,
            coords == "half_pixel")


@arity(3, 3)
def _infer_roi_align(sig: Sig):
    x, rois, batch = sig.in_types
    if x.dtype != "float32" or rois.dtype != "float32":
        raise sig.fail(f"X and rois must be float32, got {x.dtype}, {rois.dtype}")
    if len(x.shape) != 4:
        raise sig.fail(f"X must be [N, C, H, W], got {list(x.shape)}")
    if len(rois.shape) != 2 or rois.shape[1] != 4 or batch.shape != rois.shape[:1]:
        raise sig.fail(f"rois {list(rois.shape)} must be [R, 4] and batch_indices "
                       f"{list(batch.shape)} [R]")
    if batch.dtype not in ("int32", "int64"):
        raise sig.fail(f"batch_indices must be int32 or int64, got {batch.dtype}")
    out_h, out_w, ratio, _, _, _ = roi_attrs(sig)
    if out_h < 1 or out_w < 1 or ratio < 0:
        raise sig.fail(f"output {out_h}x{out_w} and sampling_ratio {ratio} must be positive")
    check_indices(sig, 2, (x.shape[0],))
    return [TensorType((rois.shape[0], x.shape[1], out_h, out_w), "float32")]


def _axis_samples(coords: np.ndarray, size: int):
    """Bilinear taps along one axis at `coords`, as the ONNX reference:
    (low, high, weight of low, weight of high, outside the map)."""
    outside = (coords < -1.0) | (coords > size)
    c = np.maximum(coords, 0.0)
    low = np.minimum(c.astype(np.int64), size - 1)
    edge = c.astype(np.int64) >= size - 1
    high = np.where(edge, size - 1, low + 1)
    frac = np.where(edge, 0.0, c - low)
    return low, high, 1.0 - frac, frac, outside


def roi_align_one(x: np.ndarray, roi, out_h: int, out_w: int, ratio: int, scale: float,
                  mode: str, half_pixel: bool) -> np.ndarray:
    """[C, out_h, out_w] for one ROI (x1, y1, x2, y2) of the [C, H, W] map x."""
    offset = 0.5 if half_pixel else 0.0
    x0, y0, x1, y1 = (float(v) * scale - offset for v in roi)
    width, height = x1 - x0, y1 - y0
    if not half_pixel:       # malformed ROIs are forced to 1 x 1
        width, height = max(width, 1.0), max(height, 1.0)
    bin_h, bin_w = height / out_h, width / out_w
    grid_h = ratio if ratio > 0 else int(np.ceil(height / out_h))
    grid_w = ratio if ratio > 0 else int(np.ceil(width / out_w))
    # sample coordinates: [out, grid] per axis
    ys = y0 + np.arange(out_h)[:, None] * bin_h + (np.arange(grid_h) + 0.5) * bin_h / grid_h
    xs = x0 + np.arange(out_w)[:, None] * bin_w + (np.arange(grid_w) + 0.5) * bin_w / grid_w
    yl, yh, wyl, wyh, oy = _axis_samples(ys, x.shape[1])
    xl, xh, wxl, wxh, ox = _axis_samples(xs, x.shape[2])

    def tap(yi, xi, wy, wx):   # [C, out_h, grid_h, out_w, grid_w]
        return (wy[:, :, None, None] * wx[None, None]) * x[:, yi[:, :, None, None],
                                                           xi[None, None]]
    taps = [tap(yl, xl, wyl, wxl), tap(yl, xh, wyl, wxh), tap(yh, xl, wyh, wxl),
            tap(yh, xh, wyh, wxh)]
    outside = oy[:, :, None, None] | ox[None, None]
    if mode == "avg":
        v = np.where(outside, 0.0, sum(taps))
        return v.sum(axis=(2, 4)) / max(grid_h * grid_w, 1)
    v = np.where(outside, 0.0, np.maximum.reduce(taps))
    return v.max(axis=(2, 4), initial=-np.inf)


@register("RoiAlign", infer=_infer_roi_align)
def _roi_align(call: Call, args):
    x, rois, batch = args
    out_h, out_w, ratio, scale, mode, half_pixel = roi_attrs(call)
    batch = wrapped_indices(call, batch, x.shape[0])
    out = np.zeros(call.out_types[0].shape, np.float64)
    for r in range(rois.shape[0]):
        out[r] = roi_align_one(x[batch[r]].astype(np.float64), rois[r], out_h, out_w, ratio,
                               scale, mode, half_pixel)
    return [out.astype(np.float32)]
