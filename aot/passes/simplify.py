"""Inference simplifications: rewrite rules that remove or merge nodes.

Each rule is local and value-preserving (exactly, or up to float rounding
where weights are pre-multiplied: BatchNormalization and per-channel
Mul/Add folded into a Conv or Gemm). What stays on purpose:
QuantizeLinear -> DequantizeLinear on a float tensor is a fake-quant (it
rounds the values), so it is kept; the reverse pair with identical
parameters is an exact identity and goes.
"""
from __future__ import annotations

import numpy as np

from aot.ir.graph import Graph, Node, TensorType
from aot.passes.dce import dead_code
from aot.passes.rewrite import Rewrite, Rewriter, is_float, perm_of, remove, rewrite

RESHAPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


# ---- no-ops --------------------------------------------------------------------
# Ops that copy their (first) input unchanged when the output type equals it.
SAME_TYPE_NOOPS = ("Cast", "Expand", "Tile", "Concat", "Split")


def identity_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    if node.op == "Identity":
        return remove(node.outputs[0], node.inputs[0])
    if node.op in SAME_TYPE_NOOPS and len(node.outputs) == 1 and node.inputs[0] and \
            rw.type(node.inputs[0]) == rw.type(node.outputs[0]) and \
            (node.op != "Concat" or len(node.inputs) == 1):
        return remove(node.outputs[0], node.inputs[0])
    if node.op == "Dropout" and not _used(rw, node.outputs[1:]):
        # Inference-mode Dropout (infer rejects training mode) passes x through.
        return remove(node.outputs[0], node.inputs[0])
    return None


def _used(rw: Rewriter, names) -> bool:
    return any(n and (rw.consumers(n) or rw.pinned(n)) for n in names)


def _const_all(rw: Rewriter, name: str, value: float) -> bool:
    c = rw.const(name)
    return c is not None and c.size > 0 and bool(np.all(c == value))


def neutral_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    """x*1, x/1, x+0, x-0 on floats, when broadcasting does not grow x."""
    neutral = {"Add": 0.0, "Sub": 0.0, "Mul": 1.0, "Div": 1.0}.get(node.op)
    if neutral is None or len(node.inputs) != 2:
        return None
    out = rw.type(node.outputs[0])
    order = ((0, 1), (1, 0)) if node.op in ("Add", "Mul") else ((0, 1),)
    for xi, ci in order:
        x, c = node.inputs[xi], node.inputs[ci]
        if _const_all(rw, c, neutral) and rw.type(x) == out and is_float(out):
            return remove(node.outputs[0], x)
    return None


def sub_div_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    """x - c -> x + (-c) (exact), x / c -> x * (1/c) when 1/c is exact (c a
    power of two): Add/Mul chains merge and fold into Conv/Gemm, and a
    multiply is cheaper than a divide on a microcontroller."""
    if node.op not in ("Sub", "Div") or rw.const(node.inputs[0]) is not None:
        return None
    c = rw.const(node.inputs[1])
    if c is None or not is_float(rw.type(node.outputs[0])):
        return None
    if node.op == "Sub":
        op, value, suffix = "Add", -c, "neg"
    else:
        mantissa = np.frexp(c)[0]
        if not (np.all(np.isfinite(c)) and np.all(np.abs(mantissa) == 0.5)):
            return None
        op, value, suffix = "Mul", (1 / c).astype(c.dtype), "recip"
    const = rw.constant(f"{node.inputs[1]}_{suffix}", value)
    return Rewrite([rw.node(op, [node.inputs[0], const], name=node.name, outputs=node.outputs)])


# ---- quantize / dequantize pairs -------------------------------------------
def _same_const(rw: Rewriter, a: str, b: str, default_dtype: str | None = None) -> bool:
    if a == b:
        return True
    va, vb = rw.const(a), rw.const(b)
    if va is None and not a and default_dtype:
        va = np.zeros((), default_dtype)
    if vb is None and not b and default_dtype:
        vb = np.zeros((), default_dtype)
    return (va is not None and vb is not None and va.dtype == vb.dtype
            and va.shape == vb.shape and bool(np.array_equal(va, vb)))


def qdq_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    """Dequantize -> Quantize with the same parameters gives back q exactly.

    (q - zp) * s / s rounds back to q - zp: the float error is far below
    half a step, and q was already in range, so the clamp does nothing.
    """
    if node.op == "QuantizeLinear":
        dq = rw.producer(node.inputs[0])
        if dq is None or dq.op != "DequantizeLinear":
            return None
        q = dq.inputs[0]
        ins_q = list(node.inputs) + [""] * (3 - len(node.inputs))
        ins_d = list(dq.inputs) + [""] * (3 - len(dq.inputs))
        same = (_same_const(rw, ins_q[1], ins_d[1])
                and _same_const(rw, ins_q[2], ins_d[2], rw.type(q).dtype)
                and node.attrs.get("axis", 1) == dq.attrs.get("axis", 1)
                and node.attrs.get("block_size", 0) == dq.attrs.get("block_size", 0))
        if same and rw.type(node.outputs[0]).dtype == rw.type(q).dtype:
            return remove(node.outputs[0], q)
    if node.op == "tfl.quantize":
        src = node.inputs[0]
        prod = rw.producer(src)
        if prod is not None and prod.op == "tfl.dequantize" and \
                rw.type(prod.inputs[0]) == rw.type(node.outputs[0]):
            return remove(node.outputs[0], prod.inputs[0])
        if rw.type(src) == rw.type(node.outputs[0]) and rw.type(src).quant is not None:
            return remove(node.outputs[0], src)  # requantize to the same params
    return None


# ---- BatchNormalization ------------------------------------------------------
def _bn_affine(node: Node, rw: Rewriter) -> tuple[np.ndarray, np.ndarray] | None:
    """BN as y = x * a + b with per-channel a, b (float64), if its params are constant."""
    params = [rw.const(i) for i in node.inputs[1:5]]
    if len(params) != 4 or any(p is None for p in params) or _used(rw, node.outputs[1:]):
        return None
    scale, bias, mean, var = (p.astype(np.float64) for p in params)
    eps = float(node.attrs.get("epsilon", 1e-5))
    # Same float32 rounding of the factor as the op's reference.
    a = (params[0] / np.sqrt(params[3].astype(np.float32) + np.float32(eps))).astype(np.float64)
    return a, bias - mean * a


def batchnorm_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    if node.op != "BatchNormalization" or not is_float(rw.type(node.inputs[0])):
        return None
    affine = _bn_affine(node, rw)
    if affine is None:
        return None
    a, b = affine
    x = node.inputs[0]
    layout = node.attrs.get("layout", "NCHW")
    rank = len(rw.type(x).shape)
    axis = rank - 1 if layout == "NHWC" else 1
    folded = _fold_into_producer(rw, x, axis, scale=a, shift=b, out=node.outputs[0])
    if folded is not None:
        return folded
    # Standalone: a per-channel Mul and Add the fusion pass can attach anywhere.
    shape = (-1,) + (1,) * (rank - 1 - axis)
    dtype = rw.type(x).dtype
    ca = rw.constant(f"{node.name}_scale", a.astype(dtype).reshape(shape))
    cb = rw.constant(f"{node.name}_shift", b.astype(dtype).reshape(shape))
    mul = rw.node("Mul", [x, ca], name=f"{node.name}_mul")
    add = rw.node("Add", [mul.outputs[0], cb], name=f"{node.name}_add", outputs=node.outputs)
    return Rewrite([mul, add])


# ---- per-channel affine into Conv / Gemm --------------------------------------
def _channel_vector(c: np.ndarray, out_shape: tuple[int, ...], axis: int) -> np.ndarray | None:
    """c as one value per channel of `axis`, if it only varies along that axis
    and broadcasting it does not change the output shape."""
    rank = len(out_shape)
    if c.ndim > rank:
        return None
    full = c.reshape((1,) * (rank - c.ndim) + c.shape)
    if any(d != 1 and (i != axis or d != out_shape[axis]) for i, d in enumerate(full.shape)):
        return None
    return np.broadcast_to(full.reshape(-1).astype(np.float64), (out_shape[axis],))


def _fold_into_producer(rw: Rewriter, x: str, axis: int, *, out: str,
                        scale: np.ndarray | None = None,
                        shift: np.ndarray | None = None) -> Rewrite | None:
    """Rebuild the Conv/Gemm producing x so it computes x * scale + shift
    (per channel of `axis`) directly, writing `out`."""
    prod = rw.producer(x)
    if prod is None or not rw.single_use(x) or not is_float(rw.type(x)):
        return None
    rank = len(rw.type(x).shape)
    if prod.op == "Conv":
        chan = rank - 1 if prod.attrs.get("layout", "NCHW") == "NHWC" else 1
        w_axis = 0  # both layouts put output channels first in the weight
    elif prod.op == "Gemm":
        chan = 1
        w_axis = 0 if prod.attrs.get("transB", 0) else 1
    else:
        return None
    ins = list(prod.inputs) + [""] * (3 - len(prod.inputs))
    w, bias = rw.const(ins[1]), rw.const(ins[2]) if ins[2] else None
    if axis != chan or w is None or (ins[2] and bias is None):
        return None
    n = rw.type(x).shape[chan]
    attrs = dict(prod.attrs)
    if prod.op == "Gemm":
        # Y = alpha*A@B + beta*C: scaling columns scales B and beta*C, a shift
        # adds to beta*C; the new C carries beta, so beta becomes 1.
        if bias is not None:
            bias = bias * float(prod.attrs.get("beta", 1.0))
        attrs["beta"] = 1.0
    if bias is None:
        bias = np.zeros((n,), w.dtype)
    new_w, new_b = w.astype(np.float64), bias.astype(np.float64)
    if scale is not None:
        shape = [1] * w.ndim
        shape[w_axis] = n
        new_w = new_w * scale.reshape(shape)
        new_b = new_b * scale  # broadcasts over a Gemm's [M, N] or [N] bias
    if shift is not None:
        new_b = new_b + shift
    wname = rw.constant(f"{prod.name}_w", new_w.astype(w.dtype)) if scale is not None else ins[1]
    bname = rw.constant(f"{prod.name}_b", new_b.astype(w.dtype))
    node = rw.node(prod.op, [ins[0], wname, bname], name=rw.take_over(prod), attrs=attrs,
                   outputs=[out])
    return Rewrite([node])


def affine_into_dense_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    """Conv/Gemm followed by Add/Mul/Div of a per-channel constant."""
    if node.op not in ("Add", "Mul", "Div") or len(node.inputs) != 2:
        return None
    out = rw.type(node.outputs[0])
    order = ((0, 1), (1, 0)) if node.op != "Div" else ((0, 1),)
    for xi, ci in order:
        x, c = node.inputs[xi], rw.const(node.inputs[ci])
        prod = rw.producer(x)
        if c is None or prod is None or prod.op not in ("Conv", "Gemm") or rw.type(x) != out:
            continue
        rank = len(out.shape)
        chan = rank - 1 if prod.attrs.get("layout", "NCHW") == "NHWC" else 1
        vec = _channel_vector(c, out.shape, chan)
        if vec is None:
            continue
        if node.op == "Add":
            return _fold_into_producer(rw, x, chan, shift=vec, out=node.outputs[0])
        if node.op == "Div" and not np.all(vec != 0):
            continue
        scale = vec if node.op == "Mul" else 1.0 / vec
        return _fold_into_producer(rw, x, chan, scale=scale, out=node.outputs[0])
    return None


def constant_chain_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    """(x * c1) * c2 -> x * (c1 * c2), same for Add: one op, one constant."""
    if node.op not in ("Add", "Mul") or not is_float(rw.type(node.outputs[0])):
        return None
    x, c2 = _split_const(node, rw)
    inner = rw.producer(x) if x else None
    if inner is None or inner.op != node.op or not rw.single_use(x):
        return None
    y, c1 = _split_const(inner, rw)
    if y is None:
        return None
    value = rw.const(c1) * rw.const(c2) if node.op == "Mul" else rw.const(c1) + rw.const(c2)
    out = rw.type(node.outputs[0])
    if value.ndim > len(out.shape) or np.broadcast_shapes(value.shape, out.shape) != out.shape:
        return None
    c = rw.constant(f"{c1}_{c2}", value.astype(out.dtype))
    return Rewrite([rw.node(node.op, [y, c], name=node.name, outputs=node.outputs)])


def _split_const(node: Node, rw: Rewriter) -> tuple[str | None, str | None]:
    """(activation, constant) operands of a binary op, else (None, None)."""
    if len(node.inputs) != 2:
        return None, None
    a, b = node.inputs
    if rw.const(b) is not None and rw.const(a) is None:
        return a, b
    if rw.const(a) is not None and rw.const(b) is None:
        return b, a
    return None, None


# ---- reshapes and transposes ---------------------------------------------------
def _plain(ty: TensorType) -> bool:
    """Reshaping keeps the meaning of ty's quantization (none or per-tensor)."""
    return ty.quant is None or not ty.quant.per_channel


def reshape_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    """A chain of Reshape/Flatten/Squeeze/Unsqueeze becomes one Reshape with a
    constant shape, or nothing when the shape does not change."""
    if node.op not in RESHAPES:
        return None
    out = rw.type(node.outputs[0])
    src = node.inputs[0]
    if not _plain(out) or not _plain(rw.type(src)):
        return None
    prod = rw.producer(src)
    while prod is not None and prod.op in RESHAPES and _plain(rw.type(prod.inputs[0])):
        src = prod.inputs[0]
        prod = rw.producer(src)
    if rw.type(src).shape == out.shape:
        return remove(node.outputs[0], src)
    shape = rw.const(node.inputs[1]) if node.op == "Reshape" else None
    canonical = (node.op == "Reshape" and src == node.inputs[0] and shape is not None
                 and tuple(int(d) for d in shape) == out.shape)
    if canonical:
        return None
    return Rewrite([make_reshape(rw, src, out, node.name, node.outputs[0])])


def make_reshape(rw: Rewriter, src: str, out: TensorType, name: str, output: str) -> Node:
    shape = rw.constant(f"{name}_shape", np.array(out.shape, dtype=np.int64))
    return rw.node("Reshape", [src, shape], name=name, outputs=[output],
                   types=[TensorType(out.shape, rw.type(src).dtype, rw.type(src).quant)])


def transpose_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    """Identity permutations vanish; Transpose(Transpose(x)) is one Transpose."""
    if node.op != "Transpose":
        return None
    rank = len(rw.type(node.inputs[0]).shape)
    perm = perm_of(node, rank)
    if perm == tuple(range(rank)):
        return remove(node.outputs[0], node.inputs[0])
    prod = rw.producer(node.inputs[0])
    if prod is None or prod.op != "Transpose":
        return None
    inner = perm_of(prod, rank)
    composed = tuple(inner[p] for p in perm)
    if composed == tuple(range(rank)):
        return remove(node.outputs[0], prod.inputs[0])
    return Rewrite([rw.node("Transpose", [prod.inputs[0]], name=node.name,
                            attrs={"perm": composed}, outputs=node.outputs)])


def softmax_reshape_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    """Reshape -> Softmax(last axis) -> Reshape back (ONNX's pre-13 Softmax,
    as the importer upgrades it) is a Softmax on the last axis of the
    original tensor when the reshapes keep the last dimension."""
    if node.op != "Reshape":
        return None
    sm = rw.producer(node.inputs[0])
    if sm is None or sm.op not in ("Softmax", "LogSoftmax") or not rw.single_use(node.inputs[0]):
        return None
    rank = len(rw.type(sm.inputs[0]).shape)
    first = rw.producer(sm.inputs[0])
    if first is None or first.op not in RESHAPES or _axis_of(sm, rank) != rank - 1:
        return None
    x = first.inputs[0]
    shape_x, out = rw.type(x).shape, rw.type(node.outputs[0])
    if shape_x != out.shape or shape_x[-1] != rw.type(sm.inputs[0]).shape[-1]:
        return None
    return Rewrite([rw.node(sm.op, [x], name=rw.take_over(sm), attrs=dict(sm.attrs, axis=-1),
                            outputs=node.outputs)])


def silu_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    """x * Sigmoid(x) (SiLU as torch.onnx writes it) is Swish(x): one
    elementwise op, which fusion puts into the producer's epilogue (as two
    readers of x, Sigmoid and Mul kept x in memory and ran as a kernel of
    their own after every convolution of a YOLO net)."""
    if node.op != "Mul" or len(node.inputs) != 2:
        return None
    for xi in (0, 1):
        x, s = node.inputs[xi], node.inputs[1 - xi]
        sig = rw.producer(s)
        if (sig is not None and sig.op == "Sigmoid" and sig.inputs[0] == x
                and rw.single_use(s) and rw.type(x) == rw.type(node.outputs[0])
                and is_float(rw.type(x))):
            return Rewrite([rw.node("Swish", [x], name=node.name, attrs={"alpha": 1.0},
                                    outputs=node.outputs)])
    return None


def _axis_of(node: Node, rank: int) -> int:
    axis = int(node.attrs.get("axis", -1))
    return axis + rank if axis < 0 else axis


RULES = (identity_rule, neutral_rule, qdq_rule, sub_div_rule, batchnorm_rule,
         affine_into_dense_rule, constant_chain_rule, softmax_reshape_rule, reshape_rule,
         transpose_rule, silu_rule)


def simplify(graph: Graph) -> Graph:
    return dead_code(rewrite(graph, RULES))
