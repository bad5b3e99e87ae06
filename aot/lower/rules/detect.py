"""Rules for the detection ops (aot/ops/detect.py): TopK, NonMaxSuppression
and RoiAlign as kernel rules, Compress as a gather from a table of the kept
positions, NonZero and Unique (inputs known at compile time) as tables;
the bounded forms of NonZero, Compress and Unique (run-time inputs: a
static bound and a count) as kernels writing at a running count.

TopK needs no sort and no scratch: each step scans its row for the best
element strictly after the previous one in the op's total order (value,
then position, the lower first), so equal values come out in position
order, as ONNX's reference, and every element is taken once: O(k x n) per
row, fine for the few top-k of a classifier. NonMaxSuppression may walk
thousands of candidate boxes, so it orders them in a binary heap.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from aot.ir.tir import (Assign, Bin, Decl, Expr, For, If, Load, Select, Stmt, Store, Unary,
                        Var, const, seq)
from aot.lower.arith.bounds import position, precheck
from aot.lower.rules.elementwise import cast, const_like
from aot.lower.rules.reduce import loops
from aot.lower.rules import LowerCtx, TensorRef, kernel_rule, value_rule
from aot.lower.rules.signal import compile_time_tables
from aot.lower.arith.loops import unravel
from aot.ops.detect import bounded_compress_geometry, compress_positions, roi_attrs
from aot.ops.registry import Sig


def _or(*conds: Expr) -> Expr:
    out = conds[0]
    for c in conds[1:]:
        out = Bin("or", out, c)
    return out


def _and(*conds: Expr) -> Expr:
    out = conds[0]
    for c in conds[1:]:
        out = Bin("and", out, c)
    return out


def _index(at: dict, rank: int) -> tuple:
    """The multi-index of axis -> expression `at`."""
    return tuple(at[a] for a in range(rank))


def next_best(ctx: LowerCtx, n: int, value: Callable[[Expr], Expr], prev: tuple[Var, Var],
              largest: bool) -> tuple[Stmt, Var, Var]:
    """A scan for the element after `prev` = (value, position) in the order
    by value (descending when largest), then position: (statements, its
    value, its position or -1 when none is left). A previous position of -1
    means nothing was taken yet."""
    pv, pi = prev
    first = "<" if largest else ">"
    better = ">" if largest else "<"
    t, v = ctx.fresh("t"), ctx.fresh("v", pv.dtype)
    bv, bi = ctx.fresh("best", pv.dtype), ctx.fresh("best_i")
    after = _or(Bin("<", pi, const(0)), Bin(first, v, pv),
                Bin("and", Bin("==", v, pv), Bin(">", t, pi)))
    # equal values: the scan meets the lower position first and keeps it
    take = _and(after, _or(Bin("<", bi, const(0)), Bin(better, v, bv)))
    took = ctx.fresh("take", "bool")    # once: the updates below change its operands
    scan = For(t, n, seq(Decl(v, value(t)), Decl(took, take), Assign(bi, Select(took, t, bi)),
                         Assign(bv, Select(took, v, bv))))
    return seq(Decl(bv, value(const(0))), Decl(bi, const(-1)), scan), bv, bi


# ---- TopK ---------------------------------------------------------------------------------

@kernel_rule("TopK")
def _topk(ctx: LowerCtx, ins, emit):
    x = ins[0]
    rank = len(x.shape)
    axis = int(ctx.attrs.get("axis", -1)) % rank
    k = ctx.out_types[0].shape[axis]
    largest = bool(ctx.attrs.get("largest", 1))

    def row(at) -> Stmt:
        pv, pi = ctx.fresh("prev", x.dtype), ctx.fresh("prev_i")
        j = ctx.fresh("j")
        find, bv, bi = next_best(ctx, x.shape[axis],
                                 lambda t: x.load(_index({**at, axis: t}, rank)),
                                 (pv, pi), largest)
        out = _index({**at, axis: j}, rank)
        step = seq(find, emit(0, out, bv), emit(1, out, cast(bi, "int64")),
                   Assign(pv, bv), Assign(pi, bi))
        return seq(Decl(pv, x.load(_index({**at, axis: const(0)}, rank))), Decl(pi, const(-1)),
                   For(j, k, step))
    return loops(ctx, x.shape, [a for a in range(rank) if a != axis], row)


# ---- NonMaxSuppression --------------------------------------------------------------------

def _corners(box: Callable[[int], Expr], center: bool) -> tuple[Expr, Expr, Expr, Expr]:
    """(x_min, x_max, y_min, y_max) of a box from its 4 coordinates."""
    if center:
        half_w = Bin("/", box(2), const_like(2, box(2)))
        half_h = Bin("/", box(3), const_like(2, box(3)))
        return (Bin("-", box(0), half_w), Bin("+", box(0), half_w),
                Bin("-", box(1), half_h), Bin("+", box(1), half_h))
    return (Bin("min", box(1), box(3)), Bin("max", box(1), box(3)),
            Bin("min", box(0), box(2)), Bin("max", box(0), box(2)))


def _box_locals(ctx: LowerCtx, boxes: TensorRef, b: Expr, i: Expr, center: bool, name: str):
    """Statements declaring a box's corners and area; the corner variables."""
    corners = _corners(lambda c: boxes.load((b, i, const(c))), center)
    names = [ctx.fresh(f"{name}_{s}", "float32") for s in ("x0", "x1", "y0", "y1")]
    x0, x1, y0, y1 = names
    area = ctx.fresh(f"{name}_area", "float32")
    decls = [Decl(v, e) for v, e in zip(names, corners)]
    decls.append(Decl(area, Bin("*", Bin("-", x1, x0), Bin("-", y1, y0))))
    return seq(*decls), (x0, x1, y0, y1, area)


def _suppresses(ctx: LowerCtx, a, b, iou: Expr) -> tuple[Stmt, Expr]:
    """Whether box b suppresses box a (IoU > iou), as the ONNX reference:
    no overlap, an empty box or an empty union never suppresses."""
    ax0, ax1, ay0, ay1, area_a = a
    bx0, bx1, by0, by1, area_b = b
    w, h = ctx.fresh("w", "float32"), ctx.fresh("h", "float32")
    inter = ctx.fresh("inter", "float32")
    union = ctx.fresh("union", "float32")
    zero = const_like(0, w)
    stmts = seq(Decl(w, Bin("-", Bin("min", ax1, bx1), Bin("max", ax0, bx0))),
                Decl(h, Bin("-", Bin("min", ay1, by1), Bin("max", ay0, by0))),
                Decl(inter, Bin("*", w, h)),
                Decl(union, Bin("-", Bin("+", area_a, area_b), inter)))
    overlap = _and(Bin(">", w, zero), Bin(">", h, zero), Bin(">", inter, zero),
                   Bin(">", area_a, zero), Bin(">", area_b, zero), Bin(">", union, zero))
    return stmts, Bin("and", overlap, Bin(">", Bin("/", inter, union), iou))


def _scalar(ref: TensorRef | None) -> Expr | None:
    return None if ref is None else ref.load((const(0),) * len(ref.shape))


def _sift_down(ctx: LowerCtx, heap, size: Var, start: Expr, n: int,
               score: Callable[[Expr], Expr]) -> Stmt:
    """Move heap[start] down the binary heap of box indices heap[0 .. size)
    until no child comes before it (at most log2(n) levels). Box i comes
    before box j with a higher score, or an equal one and a lower index:
    the reference's order."""
    pos, moving, level = ctx.fresh("pos"), ctx.fresh("sifting", "bool"), ctx.fresh("level")
    top, top_box = ctx.fresh("first"), ctx.fresh("first_box")
    top_score = ctx.fresh("first_score", "float32")
    held = ctx.fresh("held")

    def child(side: int) -> Stmt:
        c, box = ctx.fresh("child"), ctx.fresh("child_box")
        s, take = ctx.fresh("child_score", "float32"), ctx.fresh("take", "bool")
        before = Bin("or", Bin(">", s, top_score),
                     Bin("and", Bin("==", s, top_score), Bin("<", box, top_box)))
        return seq(Decl(c, Bin("+", Bin("*", pos, const(2)), const(side))),
                   # in bounds past the heap's end too; then not taken
                   Decl(box, Load(heap, Bin("min", c, const(n - 1)))), Decl(s, score(box)),
                   Decl(take, Bin("and", Bin("<", c, size), before)),
                   Assign(top, Select(take, c, top)), Assign(top_box, Select(take, box, top_box)),
                   Assign(top_score, Select(take, s, top_score)))
    swap = seq(Decl(held, Load(heap, pos)), Store(heap, pos, top_box), Store(heap, top, held),
               Assign(pos, top))
    step = If(moving, seq(
        Decl(top, pos), Decl(top_box, Load(heap, pos)), Decl(top_score, score(top_box)),
        child(1), child(2),
        If(Bin("==", top, pos), Assign(moving, const(False, "bool")), swap)))
    return seq(Decl(pos, start), Decl(moving, const(True, "bool")),
               For(level, n.bit_length(), step))


@kernel_rule("NonMaxSuppression")
def _nms(ctx: LowerCtx, ins, emit):
    """Per batch and class: the boxes above the score threshold in a binary
    heap by score (scratch), popped best first; each kept unless a kept box
    suppresses it, until per_class are kept. O(boxes log boxes) for the
    order, O(candidates x kept) for the IoU tests. Kept rows are written at
    a running count; the rows after the last are -1, and the count is
    output 1 when the node has it (aot.ops.detect.with_counts)."""
    boxes, scores = ins[0], ins[1]
    iou = _scalar(ins[3] if len(ins) > 3 else None)
    threshold = _scalar(ins[4] if len(ins) > 4 else None)
    iou = const(0.0, "float32") if iou is None else iou
    center = bool(ctx.attrs.get("center_point_box", 0))
    batches, classes, n = scores.shape
    rows = ctx.out_types[0].shape[0]
    per_class = rows // (batches * classes) if rows else 0
    counted = len(ctx.out_types) > 1

    def count_out(count: Expr) -> list[Stmt]:
        return [emit(1, (const(0),), cast(count, "int32"))] if counted else []
    if per_class == 0:
        return seq(loops(ctx, (rows, 3), (0, 1), lambda at: emit(0, (at[0], at[1]),
                                                                  const(-1, "int64"))),
                   *count_out(const(0)))
    kept = ctx.scratch_buffer("kept", "int32", (per_class,))
    heap = ctx.scratch_buffer("heap", "int32", (n,))
    count = ctx.fresh("count")

    def one_class(at) -> Stmt:
        b, c = at[0], at[1]

        def score(i: Expr) -> Expr:
            return scores.load((b, c, i))
        size, taken = ctx.fresh("size"), ctx.fresh("taken")
        t, k = ctx.fresh("t"), ctx.fresh("k")
        # every entry a box index, then the candidates moved to the front
        fill = seq(For(t, n, Store(heap, t, t)), Decl(size, const(0)), For(t, n, seq(
            Store(heap, size, t),
            *([] if threshold is None else [If(Bin(">", score(t), threshold),
                                               Assign(size, Bin("+", size, const(1))))]),
            *([Assign(size, Bin("+", size, const(1)))] if threshold is None else []))))
        heapify = For(k, n // 2, If(
            Bin("<", Bin("+", Bin("*", Bin("-", const(n // 2 - 1), k), const(2)), const(1)),
                size),
            _sift_down(ctx, heap, size, Bin("-", const(n // 2 - 1), k), n, score)))
        bi = ctx.fresh("box")
        pop = seq(Decl(bi, Load(heap, const(0))), Assign(size, Bin("-", size, const(1))),
                  Store(heap, const(0), Load(heap, size)),
                  _sift_down(ctx, heap, size, const(0), n, score))
        cand, a = _box_locals(ctx, boxes, b, bi, center, "a")
        q = ctx.fresh("q")
        other, o = _box_locals(ctx, boxes, b, Load(kept, q), center, "b")
        test, hit = _suppresses(ctx, a, o, iou)
        keep = ctx.fresh("keep", "bool")
        check = For(q, per_class, If(Bin("<", q, taken), seq(
            other, test, Assign(keep, Bin("and", keep, Unary("not", hit))))))
        store = seq(Store(kept, taken, bi),
                    *(emit(0, (count, const(j)), cast(v, "int64"))
                      for j, v in enumerate((b, c, bi))),
                    Assign(taken, Bin("+", taken, const(1))),
                    Assign(count, Bin("+", count, const(1))))
        r = ctx.fresh("r")
        rounds = For(r, n, If(
            Bin("and", Bin(">", size, const(0)), Bin("<", taken, const(per_class))),
            seq(pop, cand, Decl(keep, const(True, "bool")), check, If(keep, store))))
        return seq(fill, heapify, Decl(taken, const(0)), rounds)
    pad = loops(ctx, (rows, 3), (0, 1), lambda at: If(
        Bin(">=", at[0], count), emit(0, (at[0], at[1]), const(-1, "int64"))), "p")
    return seq(Decl(count, const(0)), loops(ctx, (batches, classes), (0, 1), one_class), pad,
               *count_out(count))


# ---- Compress -----------------------------------------------------------------------------

@value_rule("Compress")
def _compress(ctx: LowerCtx, ins, idx, lanes):
    x = ins[0]
    rank = len(x.shape)
    sig = Sig(ctx.node, ctx.in_types, tuple(r.value if r is not None else None for r in ins))
    axis, kept = compress_positions(sig)
    # whole runs of the last axis stay together unless it is the one compressed
    if lanes > 1 and (axis is None or axis == rank - 1):
        raise ctx.unsupported(f"a {lanes}-lane vector of Compress (positions from a table)")
    table = ctx.param("kept", kept.astype(np.int32))
    if axis is not None:
        at = list(idx)
        at[axis] = Load(table, idx[axis])
        return x.load(tuple(at), lanes)
    flat = Load(table, idx[0])         # a position in the flattened input
    strides = np.cumprod((1,) + x.shape[::-1])[-2::-1] if rank else ()
    at = tuple(Bin("%", Bin("/", flat, const(int(s))), const(int(d)))
               for s, d in zip(strides, x.shape))
    return x.load(at, lanes)


# ---- bounded forms: a static bound and a count (aot.ops.detect.with_counts) --------------

def _flat_load(x: TensorRef, flat: Expr) -> Expr:
    """x at a position of its flattened form (its buffer's own index when
    it has one)."""
    if x.buffer is not None:
        return Load(x.buffer, flat)
    return x.load(unravel(flat, x.shape) if x.shape else ())


def _padding(ctx: LowerCtx, emit, k: int, shape: tuple[int, ...], axis: int, count: Var,
             fill: Expr) -> Stmt:
    """Output k's entries at or past `count` along axis set to `fill`."""
    return loops(ctx, shape, range(len(shape)), lambda at: If(
        Bin(">=", at[axis], count), emit(k, _index(at, len(shape)), fill)), "p")


def _count_out(emit, k: int, count: Var) -> Stmt:
    return emit(k, (const(0),), cast(count, "int32"))


def _nonzero_bounded(ctx: LowerCtx, ins, emit):
    """The positions of the nonzero elements in row-major order, each
    written at a running count; -1 after the last."""
    x = ins[0]
    rank = len(x.shape)
    count = ctx.fresh("count")

    def visit(at) -> Stmt:
        coords = [at[a] for a in range(rank)] or [const(0)]
        return If(cast(x.load(_index(at, rank)), "bool"), seq(
            *(emit(0, (const(d), count), cast(c, "int64")) for d, c in enumerate(coords)),
            Assign(count, Bin("+", count, const(1)))))
    pad = _padding(ctx, emit, 0, ctx.out_types[0].shape, 1, count, const(-1, "int64"))
    return seq(Decl(count, const(0)), loops(ctx, x.shape, range(rank), visit), pad,
               _count_out(emit, 1, count))


@kernel_rule("NonZero")
def _nonzero(ctx: LowerCtx, ins, emit):
    if len(ctx.out_types) > 1:
        return _nonzero_bounded(ctx, ins, emit)
    return compile_time_tables(ctx, ins, emit)


@kernel_rule("BoundedCompress")
def _bounded_compress(ctx: LowerCtx, ins, emit):
    """Each position the condition keeps copies its slice to the next
    place; zeros after the last."""
    x, cond = ins
    axis, bound = bounded_compress_geometry(ctx)
    out = ctx.out_types[0].shape
    count, p = ctx.fresh("count"), ctx.fresh("p")
    if axis is None:
        copy = emit(0, (count,), _flat_load(x, p))
    else:
        others = [a for a in range(len(out)) if a != axis]
        copy = loops(ctx, out, others, lambda at: emit(
            0, _index({**at, axis: count}, len(out)), x.load(_index({**at, axis: p}, len(out)))))
    keep = If(cast(cond.load((p,)), "bool"),
              seq(copy, Assign(count, Bin("+", count, const(1)))))
    pad = _padding(ctx, emit, 0, out, axis or 0, count, const_like(0, x.load((const(0),) *
                                                                              len(x.shape))))
    return seq(Decl(count, const(0)), For(p, bound, keep), pad, _count_out(emit, 1, count))


def _unique_bounded(ctx: LowerCtx, ins, emit):
    """Unique of the flattened input's elements, or of its slices along
    `axis`; O(n^2) slice compares and no sort: a slice is a first
    occurrence unless an equal one comes before it; a first occurrence's
    place is the number of first occurrences before it in the output's
    order (smaller slices, compared lexicographically, when sorted; earlier
    positions otherwise). Scratch: the first-occurrence flags and places
    (two int32 per slice). Values compare with C's ==, so every NaN is its
    own value (numpy's unique puts NaNs together)."""
    x = ins[0]
    axis = ctx.attrs.get("axis")
    axis = None if axis is None else int(axis) % len(x.shape)
    shape = (x.type.size,) if axis is None else x.shape
    a = axis or 0
    n, others = shape[a], [d for d in range(len(shape)) if d != a]
    m = int(np.prod([shape[d] for d in others], dtype=np.int64))

    def elem(s: Expr, k: Expr) -> Expr:
        """Element k (row-major over the other axes) of slice s."""
        if axis is None:
            return _flat_load(x, s)
        rest = unravel(k, [shape[d] for d in others]) if others else ()
        at = dict(zip(others, rest))
        return x.load(_index({**at, a: s}, len(shape)))
    sort = bool(ctx.attrs.get("sorted", 1))
    first = ctx.scratch_buffer("first", "int32", (n,))
    place = ctx.scratch_buffer("place", "int32", (n,))
    count = ctx.fresh("count")
    i, j, k = ctx.fresh("i"), ctx.fresh("j"), ctx.fresh("k")
    xi, xj = ctx.fresh("xi", x.dtype), ctx.fresh("xj", x.dtype)
    is_first, rank, same = ctx.fresh("is_first"), ctx.fresh("rank"), ctx.fresh("same")
    occurs = ctx.fresh("occurrence")
    equal, less = ctx.fresh("equal", "bool"), ctx.fresh("less", "bool")

    def hold_i() -> list[Stmt]:
        return [Decl(xi, elem(i, const(0)))] if m == 1 else []

    def compare(order: bool) -> tuple[list[Stmt], Expr, Expr | None]:
        """Statements, whether slice j equals slice i and, with order,
        whether it is smaller."""
        if m == 1:
            return [Decl(xj, elem(j, const(0)))], Bin("==", xj, xi), Bin("<", xj, xi)
        a_k, b_k = ctx.fresh("a", x.dtype), ctx.fresh("b", x.dtype)
        # the first element that differs decides the order
        differ = [Assign(equal, const(False, "bool"))]
        if order:
            differ.insert(0, Assign(less, Bin("<", a_k, b_k)))
        scan = For(k, m, seq(Decl(a_k, elem(j, k)), Decl(b_k, elem(i, k)), If(
            Bin("and", equal, Bin("!=", a_k, b_k)), seq(*differ))))
        decls = [Decl(equal, const(True, "bool"))]
        if order:
            decls.append(Decl(less, const(False, "bool")))
        return [*decls, scan], equal, less if order else None

    def add_if(var: Var, cond: Expr) -> Stmt:
        return Assign(var, Bin("+", var, cast(cond, "int32")))
    test, eq, _ = compare(False)
    flags = For(i, n, seq(
        *hold_i(), Decl(is_first, const(1)),
        For(j, n, If(Bin("<", j, i), seq(*test, If(eq, Assign(is_first, const(0)))))),
        Store(first, i, is_first), Assign(count, Bin("+", count, is_first))))
    test, eq, lt = compare(sort)
    before = lt if sort else Bin("<", j, i)
    if axis is None:
        copy = emit(0, (rank,), xi)
    else:
        copy = loops(ctx, shape, others, lambda at: emit(
            0, _index({**at, a: rank}, len(shape)), x.load(_index({**at, a: i}, len(shape)))),
                     "c")
    places = For(i, n, If(Bin("!=", Load(first, i), const(0)), seq(
        *hold_i(), Decl(rank, const(0)), Decl(same, const(0)),
        For(j, n, seq(*test, add_if(rank, Bin("and", Bin("!=", Load(first, j), const(0)),
                                              before)),
                      add_if(same, eq))),
        Store(place, i, rank), copy, emit(1, (rank,), cast(i, "int64")),
        emit(3, (rank,), cast(same, "int64")))))
    # each slice's unique one is at the place of its first occurrence
    test, eq, _ = compare(False)
    inverse = For(i, n, seq(
        *hold_i(), Decl(occurs, const(-1)),
        For(j, n, If(Bin("<", occurs, const(0)), seq(*test, If(eq, Assign(occurs, j))))),
        emit(2, (i,), cast(Load(place, Bin("max", occurs, const(0))), "int64"))))
    zero = const_like(0, elem(const(0), const(0)))
    pads = [_padding(ctx, emit, 0, ctx.out_types[0].shape, a, count, zero)]
    pads += [_padding(ctx, emit, out, (n,), 0, count, fill)
             for out, fill in ((1, const(-1, "int64")), (3, const(0, "int64")))]
    return seq(Decl(count, const(0)), flags, places, inverse, *pads, _count_out(emit, 4, count))


@kernel_rule("Unique")
def _unique(ctx: LowerCtx, ins, emit):
    if len(ctx.out_types) > 4:
        return _unique_bounded(ctx, ins, emit)
    return compile_time_tables(ctx, ins, emit)


# ---- RoiAlign -----------------------------------------------------------------------------

def _taps(ctx: LowerCtx, coord: Expr, size: int, name: str):
    """Statements and (low, high, weight of low, weight of high, outside)
    of the bilinear taps at `coord` along an axis of `size`, as the ONNX
    reference (aot.ops.detect._axis_samples)."""
    f32 = "float32"
    at, c, low0 = ctx.fresh(name, f32), ctx.fresh(f"{name}c", f32), ctx.fresh(f"{name}_int")
    low, high, frac = ctx.fresh(f"{name}_lo"), ctx.fresh(f"{name}_hi"), ctx.fresh(f"{name}f", f32)
    edge = Bin(">=", low0, const(size - 1))
    stmts = seq(
        Decl(at, coord),
        # clamped to [0, size] before the conversion: past it the tap is outside anyway
        Decl(c, Bin("min", Bin("max", at, const(0.0, f32)), const(float(size), f32))),
        Decl(low0, cast(c, "int32")),
        Decl(low, Select(edge, const(size - 1), low0)),
        Decl(high, Select(edge, const(size - 1), Bin("+", low0, const(1)))),
        Decl(frac, Select(edge, const(0.0, f32), Bin("-", c, cast(low, f32)))))
    outside = Bin("or", Bin("<", at, const(-1.0, f32)), Bin(">", at, const(float(size), f32)))
    return stmts, (low, high, Bin("-", const(1.0, f32), frac), frac, outside)


@kernel_rule("RoiAlign")
def _roi_align(ctx: LowerCtx, ins, emit):
    x, rois, batch = ins
    out_h, out_w, ratio, scale, mode, half_pixel = roi_attrs(ctx)
    if ratio <= 0:
        raise ctx.unsupported("RoiAlign with sampling_ratio 0 (a sampling grid sized by the "
                              "ROI values at run time)")
    n, channels, height, width = x.shape
    if batch.value is None:
        precheck(ctx, batch, (n,))
    f32 = "float32"

    def f(v) -> Expr:
        return const(float(v), f32)

    def roi(at) -> Stmt:
        r = at[0]
        b = ctx.fresh("b")
        corner = [ctx.fresh(v, f32) for v in ("x0", "y0", "x1", "y1")]
        size_w, size_h = ctx.fresh("roi_w", f32), ctx.fresh("roi_h", f32)
        bin_w, bin_h = ctx.fresh("bin_w", f32), ctx.fresh("bin_h", f32)

        def scaled(v: Expr) -> Expr:
            v = v if scale == 1.0 else Bin("*", v, f(scale))
            return Bin("-", v, f(0.5)) if half_pixel else v
        w = Bin("-", corner[2], corner[0])
        h = Bin("-", corner[3], corner[1])
        if not half_pixel:      # malformed ROIs are forced to 1 x 1
            w, h = Bin("max", w, f(1)), Bin("max", h, f(1))
        setup = seq(
            Decl(b, position(batch.load((r,)), n)),
            *(Decl(v, scaled(rois.load((r, const(j))))) for j, v in enumerate(corner)),
            Decl(size_w, w), Decl(size_h, h),
            Decl(bin_w, Bin("/", size_w, f(out_w))), Decl(bin_h, Bin("/", size_h, f(out_h))))

        def cell(c: Var, ph: Var, pw: Var) -> Stmt:
            acc = ctx.fresh("acc", f32)
            iy, ix = ctx.fresh("iy"), ctx.fresh("ix")

            def coord(start, cell_index, bin_size, i):
                within = Bin("/", Bin("*", Bin("+", cast(i, f32), f(0.5)), bin_size), f(ratio))
                return Bin("+", Bin("+", start, Bin("*", cast(cell_index, f32), bin_size)),
                           within)
            ys, (yl, yh, wyl, wyh, oy) = _taps(ctx, coord(corner[1], ph, bin_h, iy), height, "y")
            xs, (xl, xh, wxl, wxh, ox) = _taps(ctx, coord(corner[0], pw, bin_w, ix), width, "x")
            taps = [Bin("*", Bin("*", wy, wx), x.load((b, c, yi, xi)))
                    for yi, wy in ((yl, wyl), (yh, wyh)) for xi, wx in ((xl, wxl), (xh, wxh))]
            if mode == "avg":
                value, init = Bin("+", Bin("+", taps[0], taps[1]), Bin("+", taps[2], taps[3])), 0.0
                update = Bin("+", acc, Select(Bin("or", oy, ox), f(0), value))
            else:
                value = Bin("max", Bin("max", taps[0], taps[1]), Bin("max", taps[2], taps[3]))
                init = -np.inf
                update = Bin("max", acc, Select(Bin("or", oy, ox), f(0), value))
            samples = For(iy, ratio, seq(ys, For(ix, ratio, seq(xs, Assign(acc, update)))))
            result = Bin("/", acc, f(ratio * ratio)) if mode == "avg" else acc
            return seq(Decl(acc, f(init)), samples, emit(0, (r, c, ph, pw), result))
        cells = loops(ctx, (channels, out_h, out_w), (0, 1, 2),
                      lambda o: cell(o[0], o[1], o[2]), "o")
        return seq(setup, cells)
    return loops(ctx, rois.shape, (0,), roi, "r")
