"""One internal layout: channels last (NHWC).

Every ONNX-style channels-first spatial op is rewritten to `layout="NHWC"`
between two Transposes (to NHWC before, back to NCHW after); Conv weights
are transposed to [O, k.., I] at compile time. Then the Transposes sink
towards the outputs through layout-agnostic ops (elementwise with their
constants permuted, Concat/Softmax/reductions/Pad/Slice with their axes
remapped) until they meet their inverse and cancel. A Transpose feeding a
Reshape into a dense layer disappears by permuting the dense weight rows.
What remains sits where the layout really changes, typically at the model's
boundary (inputs and outputs keep their external layout), and a Transpose
that only moves unit dimensions becomes a (free) Reshape.

What the pass may do with each op is the op's `layout` in the op table
(aot/ops/registry.py: Layout, Sink), set where the op is registered.
"""
from __future__ import annotations

import numpy as np

from aot.errors import AotError
from aot.ir.graph import Graph, Node
from aot.ops import OPS, Layout, Sink
from aot.passes.fold import fold_rule
from aot.passes.rewrite import Rewrite, Rewriter, invert, perm_of, rewrite
from aot.passes.simplify import make_reshape, reshape_rule, transpose_rule

# What an op the table does not know permits: nothing.
UNKNOWN = Layout(sink=Sink.STAY)


def facts(node: Node) -> Layout:
    opdef = OPS.get(node.op)
    return UNKNOWN if opdef is None else opdef.layout


def _to_last(rank: int) -> tuple[int, ...]:
    return (0,) + tuple(range(2, rank)) + (1,)


def _transpose(rw: Rewriter, x: str, perm, name: str, output: str | None = None) -> Node:
    return rw.node("Transpose", [x], name=name, attrs={"perm": tuple(int(p) for p in perm)},
                   outputs=[output] if output else None)


# ---- NCHW op -> Transpose, NHWC op, Transpose ---------------------------------------
def channels_last_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    layout = facts(node)
    if not layout.channels_first or node.attrs.get("layout", "NCHW") != "NCHW":
        return None
    rank = len(rw.type(node.inputs[0]).shape)
    if rank < 3 or any(o and (rw.consumers(o) or rw.pinned(o)) for o in node.outputs[1:]):
        return None  # e.g. MaxPool's Indices count in NCHW order
    to_last = _to_last(rank)
    before = _transpose(rw, node.inputs[0], to_last, f"{node.name}_to_nhwc")
    ins, extra = [before.outputs[0]] + list(node.inputs[1:]), []
    if layout.weighted:
        w = rw.const(ins[1])
        if w is not None:
            ins[1] = rw.constant(f"{ins[1]}_nhwc", np.transpose(w, to_last))
        else:
            extra.append(_transpose(rw, ins[1], to_last, f"{node.name}_w_to_nhwc"))
            ins[1] = extra[-1].outputs[0]
    outs = [rw.fresh(f"{node.outputs[0]}_nhwc")]  # the other outputs are unused: dropped
    try:
        new = rw.node(node.op, ins, name=node.name, attrs=dict(node.attrs, layout="NHWC"),
                      outputs=outs)
    except AotError:
        return None  # the op refuses NHWC for these attributes: leave it channels first
    after = _transpose(rw, outs[0], invert(to_last), f"{node.name}_to_nchw", node.outputs[0])
    return Rewrite([before, *extra, new, after])


# ---- sinking Transposes ------------------------------------------------------------
def _transposed(rw: Rewriter, name: str) -> tuple[str, tuple[int, ...]] | None:
    """(x, perm) when `name` is Transpose(x, perm) of a plainly typed tensor."""
    prod = rw.producer(name) if name else None
    if prod is None or prod.op != "Transpose":
        return None
    ty = rw.type(prod.inputs[0])
    if ty.quant is not None and ty.quant.per_channel:
        return None
    return prod.inputs[0], perm_of(prod, len(ty.shape))


def _sink(rw: Rewriter, node: Node, inputs, perm, attrs=None) -> Rewrite:
    """node on the untransposed inputs, then the Transpose on each output."""
    outs = [rw.fresh(f"{o}_t") for o in node.outputs]
    new = rw.node(node.op, inputs, name=node.name, attrs=attrs or node.attrs, outputs=outs)
    afters = [_transpose(rw, t, perm, f"{node.name}_transpose", o)
              for t, o in zip(outs, node.outputs)]
    return Rewrite([new, *afters])


def _common_perm(rw: Rewriter, names) -> tuple[int, ...] | None:
    perms = {t[1] for t in (_transposed(rw, n) for n in names) if t is not None}
    return perms.pop() if len(perms) == 1 else None


def _permuted_const(rw: Rewriter, name: str, perm, rank: int) -> str | None:
    """A constant operand for the untransposed op: c (right-aligned to rank)
    permuted by perm's inverse; size-1 constants stay as they are."""
    c = rw.const(name)
    if c is None or c.ndim > rank:
        return None
    if c.size == 1:
        return name
    full = c.reshape((1,) * (rank - c.ndim) + c.shape)
    return rw.constant(f"{name}_t", np.transpose(full, invert(perm)))


def sink_elementwise_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    layout = facts(node)
    if layout.sink not in (Sink.BROADCAST, Sink.PER_AXIS) or len(node.outputs) != 1:
        return None
    perm = _common_perm(rw, node.inputs)
    rank = len(rw.type(node.outputs[0]).shape)
    if perm is None or len(perm) != rank:
        return None
    if layout.sink is Sink.PER_AXIS:
        return _sink_per_axis(node, rw, perm, layout.axis)
    inputs = []
    for name in node.inputs:
        t = _transposed(rw, name)
        if t is not None and len(rw.type(name).shape) == rank:
            inputs.append(t[0])
        elif not name or rw.type(name).size == 1:
            inputs.append(name)  # absent or scalar-like: broadcasts the same either way
        elif "axis" in node.attrs:
            return None  # per-axis parameters (DequantizeLinear): not a broadcast operand
        else:
            c = _permuted_const(rw, name, perm, rank)
            if c is None:
                return None
            inputs.append(c)
    return _sink(rw, node, inputs, perm)


def _sink_per_axis(node: Node, rw: Rewriter, perm, default_axis: int) -> Rewrite | None:
    """Quantize/Dequantize: the parameters stay, a per-axis `axis` moves."""
    t = _transposed(rw, node.inputs[0])
    if t is None or int(node.attrs.get("block_size", 0)) or \
            any(_transposed(rw, i) for i in node.inputs[1:]):
        return None
    attrs = dict(node.attrs)
    if any(i and rw.type(i).size > 1 for i in node.inputs[1:]):
        attrs["axis"] = perm[_axis(int(node.attrs.get("axis", default_axis)), len(perm))]
    return _sink(rw, node, [t[0]] + list(node.inputs[1:]), perm, attrs)


def _axis(a: int, rank: int) -> int:
    return a + rank if a < 0 else a


def sink_axis_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    """Concat, Softmax-like ops, reductions, Resize, Pad and Slice: remap the axes."""
    layout = facts(node)
    if layout.sink is Sink.CONCAT:
        perm = _common_perm(rw, node.inputs)
        if perm is None or not all(_transposed(rw, n) for n in node.inputs):
            return None
        axis = perm[_axis(int(node.attrs.get("axis", layout.axis)), len(perm))]
        return _sink(rw, node, [_transposed(rw, n)[0] for n in node.inputs], perm,
                     dict(node.attrs, axis=axis))
    t = _transposed(rw, node.inputs[0]) if node.inputs else None
    if t is None:
        return None
    x, perm = t
    rank = len(perm)
    if layout.sink is Sink.AXIS:
        axis = perm[_axis(int(node.attrs.get("axis", layout.axis)), rank)]
        return _sink(rw, node, [x] + list(node.inputs[1:]), perm, dict(node.attrs, axis=axis))
    if layout.sink is Sink.REDUCE:
        return _sink_reduce(node, rw, x, perm)
    if layout.sink is Sink.RESIZE:
        # Resize works axis by axis: its scales/sizes/roi apply to `axes`
        # (all axes by default), so naming the untransposed axes is enough.
        axes = node.attrs.get("axes")
        axes = range(rank) if axes is None else axes
        moved = tuple(perm[_axis(int(a), rank)] for a in axes)
        return _sink(rw, node, [x] + list(node.inputs[1:]), perm, dict(node.attrs, axes=moved))
    pad = layout.sink is Sink.PAD
    if pad and (len(node.inputs) < 4 or not node.inputs[3]):
        pads = rw.const(node.inputs[1])
        if pads is None or pads.size != 2 * rank:
            return None
        new = np.empty_like(pads)
        for i in range(rank):
            new[perm[i]], new[rank + perm[i]] = pads[i], pads[rank + i]
        c = rw.constant(f"{node.inputs[1]}_t", new)
        return _sink(rw, node, [x, c] + list(node.inputs[2:]), perm)
    if pad or layout.sink is Sink.SLICE:
        k = 3  # the axes input of both
        starts = rw.const(node.inputs[1])
        if starts is None:
            return None
        axes = rw.const(node.inputs[k]) if len(node.inputs) > k and node.inputs[k] else \
            np.arange(rank if pad else starts.size, dtype=np.int64)
        if axes is None:
            return None
        moved = np.array([perm[_axis(int(a), rank)] for a in axes.reshape(-1)], dtype=axes.dtype)
        ins = list(node.inputs) + [""] * (k + 1 - len(node.inputs))
        ins[0], ins[k] = x, rw.constant(f"{node.name}_axes", moved)
        return _sink(rw, node, ins, perm)
    return None


def _sink_reduce(node: Node, rw: Rewriter, x: str, perm) -> Rewrite | None:
    rank = len(perm)
    if len(node.inputs) < 2 or not node.inputs[1]:
        return None
    axes = rw.const(node.inputs[1])
    if axes is None or axes.size == 0:
        return None
    axes = sorted({_axis(int(a), rank) for a in axes.reshape(-1)})
    moved = np.array([perm[a] for a in axes], dtype=np.int64)
    ins = [x, rw.constant(f"{node.name}_axes", moved)] + list(node.inputs[2:])
    if int(node.attrs.get("keepdims", 1)):
        return _sink(rw, node, ins, perm)
    # Without kept dims the survivors of x stay in x's order; find where
    # each survivor of the transposed input went.
    kept = [a for a in range(rank) if a not in set(moved.tolist())]
    out_perm = [kept.index(perm[i]) for i in range(rank) if i not in axes]
    return _sink(rw, node, ins, out_perm)


# ---- Transpose -> Reshape -> dense: permute the weight instead -------------------
def dense_weight_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    if node.op not in ("MatMul", "Gemm") or int(node.attrs.get("transA", 0)):
        return None
    a, b = node.inputs[0], rw.const(node.inputs[1])
    reshape = rw.producer(a)
    if b is None or b.ndim != 2 or reshape is None or reshape.op != "Reshape" \
            or not rw.single_use(a):
        return None
    t = _transposed(rw, reshape.inputs[0])
    a_shape = rw.type(a).shape
    if t is None:
        return None
    x, perm = t
    x_shape = rw.type(x).shape
    if perm[0] != 0 or len(a_shape) != 2 or a_shape[0] != x_shape[0]:
        return None
    # Row k of the flattened transposed input is row m[k] of the flattened x.
    m = np.arange(a_shape[1]).reshape(x_shape[1:]).transpose([p - 1 for p in perm[1:]])
    m = m.reshape(-1)
    new_b = np.empty_like(b)
    if int(node.attrs.get("transB", 0)):
        new_b[:, m] = b
    else:
        new_b[m] = b
    flat = make_reshape(rw, x, rw.type(a), f"{reshape.name}", rw.fresh(f"{a}_nhwc"))
    bname = rw.constant(f"{node.inputs[1]}_nhwc", new_b)
    dense = rw.node(node.op, [flat.outputs[0], bname] + list(node.inputs[2:]), name=node.name,
                    attrs=node.attrs, outputs=node.outputs)
    return Rewrite([flat, dense])


# ---- finishing touches -----------------------------------------------------------
def unit_transpose_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    """A Transpose that keeps the order of the non-unit dims is a Reshape."""
    if node.op != "Transpose":
        return None
    shape = rw.type(node.inputs[0]).shape
    moved = [p for p in perm_of(node, len(shape)) if shape[p] != 1]
    if moved != sorted(moved):
        return None
    return Rewrite([make_reshape(rw, node.inputs[0], rw.type(node.outputs[0]), node.name,
                                 node.outputs[0])])


SINK_RULES = (fold_rule, channels_last_rule, transpose_rule, sink_elementwise_rule,
              sink_axis_rule, dense_weight_rule)
TIDY_RULES = (transpose_rule, unit_transpose_rule, reshape_rule)


def to_channels_last(graph: Graph) -> Graph:
    graph = rewrite(graph, SINK_RULES, retype=False)
    return rewrite(graph, TIDY_RULES)
