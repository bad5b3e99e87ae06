"""Quantized ONNX in QDQ form runs as integer ops.

ONNX Runtime's `quantize_static` (QuantFormat.QDQ) writes a float graph in
which every quantized op reads DequantizeLinear outputs and feeds one
QuantizeLinear: DQ(x) -> Conv -> Q. Run as written, every tensor between
them is float. This pass does what ONNX Runtime's own graph transformer
does with such a group: the group becomes one integer op with ONNX
Runtime's arithmetic, reading and writing int8 (or uint8) tensors:

    DQ(x), DQ(w), DQ(b) -> Conv -> Q        QLinearConv
    DQ(a), DQ(b) -> MatMul -> Q             QLinearMatMul
    DQ(a), DQ(b), DQ(c) -> Gemm -> Q        QGemm
    DQ(a), DQ(b) -> Add / Mul -> Q          QLinearAdd / QLinearMul
    DQ(x) -> AveragePool -> Q               QLinearAveragePool (GlobalAveragePool alike)
    DQ(x) -> Sigmoid / LeakyRelu -> Q       QLinearSigmoid / QLinearLeakyRelu (tables)
    DQ(x)... -> Concat -> Q                 QLinearConcat
    DQ(x) -> Softmax (last axis) -> Q       QLinearSoftmax (an exp table)
    DQ(..) -> op -> Relu / Clip -> Q        the op, then a Clip of its integer output
    DQ(x) -> MaxPool / Reshape / ... -> Q   the op itself on the integers, when the
                                            DQ's and the Q's parameters are equal

The ops are the ones ONNX Runtime's QOperator format uses, so a model in
either format ends up as the same graph (docs/ops.md, "Quantized ONNX").
ConvTranspose becomes a QLinearConv over its input spread out by the
strides (_conv_transpose). A group that does not fit (a per-channel
activation, int16, a float bias, a grouped or dilated ConvTranspose, an op
not in the table such as a linear or cubic Resize) stays float and keeps
ONNX's exact semantics.
Runs before constant folding, which would turn DQ(weights) into float
weights.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from aot.ir.graph import Graph, Node, TensorType
from aot.passes.dce import dead_code
from aot.passes.rewrite import Rewrite, Rewriter, rewrite

QTYPES = ("int8", "uint8")
# Ops that only move or select values: Q(op(DQ(q))) is op(q) when DQ and Q
# share their parameters (a monotonic DQ commutes with max).
MOVERS = ("MaxPool", "GlobalMaxPool", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
          "Transpose", "Slice", "Gather", "DepthToSpace", "SpaceToDepth", "Identity",
          "Resize")   # mode nearest only (it picks values; linear would compute new ones)


def _qparams(rw: Rewriter, node: Node) -> tuple[str, str] | None:
    """A Q or DQ node's (scale, zero point) input names when they are constant
    (the zero point may be absent: "")."""
    ins = list(node.inputs) + [""] * (3 - len(node.inputs))
    if rw.const(ins[1]) is None or (ins[2] and rw.const(ins[2]) is None):
        return None
    if int(node.attrs.get("block_size", 0)):
        return None
    return ins[1], ins[2]


def _per_tensor(rw: Rewriter, params: tuple[str, str]) -> bool:
    return all(not p or rw.const(p).size == 1 for p in params)


def _dequantized(rw: Rewriter, name: str, per_tensor: bool = True
                 ) -> tuple[str, str, str] | None:
    """(q, scale, zero point) when `name` is DequantizeLinear(q) of an 8-bit q."""
    dq = rw.producer(name) if name else None
    if dq is None or dq.op != "DequantizeLinear" or rw.type(dq.inputs[0]).dtype not in QTYPES:
        return None
    params = _qparams(rw, dq)
    if params is None or (per_tensor and not _per_tensor(rw, params)):
        return None
    return (dq.inputs[0],) + params


def _same_params(rw: Rewriter, a: tuple[str, str], b: tuple[str, str], dtype: str) -> bool:
    def value(name):
        return rw.const(name) if name else np.zeros((), dtype)
    return all(np.array_equal(np.asarray(value(x)).reshape(-1), np.asarray(value(y)).reshape(-1))
               for x, y in zip(a, b))


Builder = Callable[[Node, tuple[str, str], Rewriter], "list[str] | None"]


def _conv_inputs(node: Node, out: tuple[str, str], rw: Rewriter) -> list[str] | None:
    x = _dequantized(rw, node.inputs[0])
    w = _dequantized(rw, node.inputs[1], per_tensor=False)
    if x is None or w is None or rw.const(w[0]) is None:
        return None
    if not _per_tensor(rw, w[1:]) and int(rw.producer(node.inputs[1]).attrs.get("axis", 1)) != 0:
        return None  # only per-output-channel weight scales
    ins = [*x, *w, *out]
    if len(node.inputs) > 2 and node.inputs[2]:
        bias = _int32_bias(rw, node.inputs[2], x[1], w[1])
        if bias is None:
            return None
        ins.append(bias)
    return ins


def _int32_bias(rw: Rewriter, name: str, x_scale: str, w_scale: str) -> str | None:
    """The bias as int32 in the accumulator's scale s_x * s_w: the DQ's
    integers when its scale is that one (what the quantizer writes), else
    rescaled and rounded. None unless `name` is a DequantizeLinear of
    constant integers with zero points 0."""
    dq = rw.producer(name)
    if dq is None or dq.op != "DequantizeLinear" or rw.const(dq.inputs[0]) is None:
        return None
    params = _qparams(rw, dq)
    if params is None or (params[1] and np.any(rw.const(params[1]) != 0)):
        return None
    q, values = dq.inputs[0], rw.const(dq.inputs[0])
    if values.dtype.kind not in "iu":
        return None
    acc_scale = rw.const(x_scale).astype(np.float32) * rw.const(w_scale).astype(np.float32)
    acc_scale = np.broadcast_to(acc_scale.reshape(-1), values.shape)
    b_scale = np.broadcast_to(rw.const(params[0]).astype(np.float32).reshape(-1), values.shape)
    if values.dtype == np.int32 and np.array_equal(acc_scale, b_scale):
        return q
    rescaled = values.astype(np.float64) * b_scale / acc_scale
    return rw.constant(f"{q}_acc", np.rint(rescaled).astype(np.int32))


def _matmul_inputs(node: Node, out, rw: Rewriter) -> list[str] | None:
    a = _dequantized(rw, node.inputs[0])
    b = _dequantized(rw, node.inputs[1], per_tensor=False)
    if a is None or b is None:
        return None
    if not _per_tensor(rw, b[1:]):
        dq = rw.producer(node.inputs[1])
        rank = len(rw.type(b[0]).shape)
        if rw.const(b[0]) is None or rank != 2 or int(dq.attrs.get("axis", 1)) % rank != 1:
            return None  # per-column scales of a constant [K, N] only
    return [*a, *b, *out]


def _gemm_inputs(node: Node, out, rw: Rewriter) -> list[str] | None:
    """QGemm adds its int32 C to the accumulator and scales the sum by alpha:
    alpha = beta = 1 only, B constant, per-column scales along N."""
    if node.attrs.get("transA", 0) or float(node.attrs.get("alpha", 1.0)) != 1.0 \
            or float(node.attrs.get("beta", 1.0)) != 1.0:
        return None
    a = _dequantized(rw, node.inputs[0])
    b = _dequantized(rw, node.inputs[1], per_tensor=False)
    if a is None or b is None or rw.const(b[0]) is None:
        return None
    if not _per_tensor(rw, b[1:]):
        axis = int(rw.producer(node.inputs[1]).attrs.get("axis", 1)) % 2
        if axis != (0 if node.attrs.get("transB", 0) else 1):
            return None
    bias = ""
    if len(node.inputs) > 2 and node.inputs[2]:
        bias = _int32_bias(rw, node.inputs[2], a[1], b[1])
        if bias is None:
            return None
    return [*a, *b, bias, *out]


def _binary_inputs(node: Node, out, rw: Rewriter) -> list[str] | None:
    a, b = _dequantized(rw, node.inputs[0]), _dequantized(rw, node.inputs[1])
    if a is None or b is None or rw.type(a[0]).dtype != rw.type(b[0]).dtype:
        return None
    return [*a, *b, *out]


def _unary_inputs(node: Node, out, rw: Rewriter) -> list[str] | None:
    x = _dequantized(rw, node.inputs[0])
    return None if x is None else [*x, *out]


def _concat_inputs(node: Node, out, rw: Rewriter) -> list[str] | None:
    parts = [_dequantized(rw, t) for t in node.inputs if t]
    if any(p is None for p in parts) or len({rw.type(p[0]).dtype for p in parts}) != 1:
        return None
    return list(out) + [t for p in parts for t in p]


def _softmax_inputs(node: Node, out, rw: Rewriter) -> list[str] | None:
    rank = len(rw.type(node.inputs[0]).shape)
    if int(node.attrs.get("axis", -1)) % rank != rank - 1:
        return None
    return _unary_inputs(node, out, rw)


# op -> (integer op, its inputs from the group's, or None when it does not fit)
GROUPS: dict[str, tuple[str, Builder]] = {
    "Conv": ("QLinearConv", _conv_inputs),
    "MatMul": ("QLinearMatMul", _matmul_inputs),
    "Gemm": ("QGemm", _gemm_inputs),
    "Add": ("QLinearAdd", _binary_inputs),
    "Mul": ("QLinearMul", _binary_inputs),
    "AveragePool": ("QLinearAveragePool", _unary_inputs),
    "GlobalAveragePool": ("QLinearGlobalAveragePool", _unary_inputs),
    "Sigmoid": ("QLinearSigmoid", _unary_inputs),
    "LeakyRelu": ("QLinearLeakyRelu", _unary_inputs),
    "Concat": ("QLinearConcat", _concat_inputs),
    "Softmax": ("QLinearSoftmax", _softmax_inputs),
}


def _group_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    """Fires on the QuantizeLinear closing a group."""
    if node.op != "QuantizeLinear" or rw.type(node.outputs[0]).dtype not in QTYPES:
        return None
    op = rw.producer(node.inputs[0])
    out = _qparams(rw, node)
    if op is None or out is None or not _per_tensor(rw, out) or not rw.single_use(node.inputs[0]):
        return None
    if any(o and (rw.consumers(o) or rw.pinned(o)) for o in op.outputs[1:]):
        return None
    if op.op in MOVERS:
        return _mover(op, node, out, rw)
    dtype = rw.type(node.outputs[0]).dtype
    bounds = _activation_codes(op, out, rw, dtype)
    if bounds is not None:
        op = rw.producer(op.inputs[0])
    if op is None:
        return None
    if op.op == "ConvTranspose":
        built = _conv_transpose(op, out, rw)
        if built is None:
            return None
        pre, int_op, ins, attrs = built
    elif op.op in GROUPS:
        int_op, build = GROUPS[op.op]
        ins = build(op, out, rw)
        if ins is None:
            return None
        pre, attrs = [], dict(op.attrs)
        if int_op == "QGemm":
            attrs.pop("beta", None)     # 1, checked: QGemm has no beta
        if int_op == "QLinearSoftmax":
            attrs["opset"] = 13
    else:
        return None
    info = np.iinfo(dtype)
    if bounds is None or bounds == (info.min, info.max):
        # (an activation the output range clamps anyway: a ReLU whose output
        # zero point is the type's minimum, what the quantizer picks)
        return Rewrite([*pre, rw.node(int_op, ins, name=op.name, attrs=attrs,
                                      outputs=node.outputs)])
    new = rw.node(int_op, ins, name=op.name, attrs=attrs)
    lo = rw.constant(f"{node.name}_min", np.array(bounds[0], dtype))
    hi = rw.constant(f"{node.name}_max", np.array(bounds[1], dtype))
    clip = rw.node("Clip", [new.outputs[0], lo, hi], name=f"{op.name}_clip",
                   outputs=node.outputs)
    return Rewrite([*pre, new, clip])


def _conv_transpose(node: Node, out, rw: Rewriter
                    ) -> tuple[list[Node], str, list[str], dict] | None:
    """ConvTranspose as QLinearConv (ONNX Runtime's CPU kernels have no
    integer ConvTranspose): the input spread out by the strides, the gaps
    holding its zero point (adding nothing), convolved with the kernel
    flipped and its channel axes swapped over pads k - 1 - pad (plus
    output_padding at the end): the same exact sums. 2-D, one group, no
    dilation, explicit pads."""
    a = node.attrs
    x = _dequantized(rw, node.inputs[0])
    w = _dequantized(rw, node.inputs[1], per_tensor=False)
    if x is None or w is None or rw.const(w[0]) is None or len(rw.type(x[0]).shape) != 4:
        return None
    wq = rw.const(w[0])
    kernel = wq.shape[2:]
    if int(a.get("group", 1)) != 1 or any(d != 1 for d in a.get("dilations", (1, 1))) \
            or a.get("auto_pad", "NOTSET") != "NOTSET" or a.get("output_shape") is not None:
        return None
    w_dq = rw.producer(node.inputs[1])
    if not _per_tensor(rw, w[1:]) and int(w_dq.attrs.get("axis", 1)) != 1:
        return None  # per-output-channel scales of a ConvTranspose weight are on axis 1
    strides = tuple(int(v) for v in a.get("strides", (1, 1)))
    pads = tuple(int(v) for v in a.get("pads", (0, 0, 0, 0)))
    extra = tuple(int(v) for v in a.get("output_padding", (0, 0)))
    conv_pads = tuple(k - 1 - p for k, p in zip(kernel * 2, pads))
    conv_pads = conv_pads[:2] + tuple(p + e for p, e in zip(conv_pads[2:], extra))
    if min(conv_pads) < 0:
        return None
    pre, spread = _spread(rw, node.name, x, strides)
    flipped = np.ascontiguousarray(np.transpose(wq, (1, 0, 2, 3))[:, :, ::-1, ::-1])
    ins = [spread, *x[1:], rw.constant(f"{w[0]}_flipped", flipped), *w[1:], *out]
    if len(node.inputs) > 2 and node.inputs[2]:
        bias = _int32_bias(rw, node.inputs[2], x[1], w[1])
        if bias is None:
            return None
        ins.append(bias)
    attrs = {"kernel_shape": tuple(kernel), "pads": conv_pads, "strides": (1, 1)}
    return pre, "QLinearConv", ins, attrs


def _spread(rw: Rewriter, name: str, x: tuple[str, str, str], strides) -> tuple[list[Node], str]:
    """x [N, C, H, W] with strides - 1 zero-point codes between its pixels:
    [N, C, (H - 1) * sh + 1, (W - 1) * sw + 1]."""
    q, _, zp = x
    if strides == (1, 1):
        return [], q
    n, c, h, w = rw.type(q).shape
    sh, sw = strides
    dtype = rw.type(q).dtype
    gap = np.array(rw.const(zp).reshape(-1)[0] if zp else 0, dtype)
    pads = np.zeros(12, np.int64)
    pads[6 + 3], pads[6 + 5] = sh - 1, sw - 1
    cols = rw.node("Reshape", [q, rw.constant(f"{name}_gaps", np.array(
        [n, c, h, 1, w, 1], np.int64))], name=f"{name}_gaps")
    filled = rw.node("Pad", [cols.outputs[0], rw.constant(f"{name}_gap_pads", pads),
                             rw.constant(f"{name}_gap_value", gap)], name=f"{name}_fill",
                     attrs={"mode": "constant"})
    flat = rw.node("Reshape", [filled.outputs[0], rw.constant(f"{name}_spread_shape", np.array(
        [n, c, h * sh, w * sw], np.int64))], name=f"{name}_spread")
    trim = rw.node("Slice", [flat.outputs[0], rw.constant(f"{name}_starts", np.zeros(2, np.int64)),
                             rw.constant(f"{name}_ends", np.array([(h - 1) * sh + 1,
                                                                   (w - 1) * sw + 1], np.int64)),
                             rw.constant(f"{name}_axes", np.array([2, 3], np.int64))],
                   name=f"{name}_trim")
    return [cols, filled, flat, trim], trim.outputs[0]


def _activation_codes(act: Node, out: tuple[str, str], rw: Rewriter, dtype: str
                      ) -> tuple[int, int] | None:
    """For op -> Relu/Clip -> Q: the activation's bounds as output codes.
    Q is monotonic, so Q(clip(v, a, b)) = clip(Q(v), Q(a), Q(b)) exactly:
    the activation becomes a Clip of the integers. None when `act` is no
    such activation (or a Clip with bounds known only at run time)."""
    if act.op not in ("Relu", "Clip") or not rw.single_use(act.inputs[0]):
        return None
    ins = list(act.inputs) + [""] * (3 - len(act.inputs))
    if act.op == "Clip" and any(t and rw.const(t) is None for t in ins[1:]):
        return None
    bounds = (0.0, None) if act.op == "Relu" else tuple(
        float(rw.const(t).reshape(-1)[0]) if t else None for t in ins[1:3])
    scale = np.float32(rw.const(out[0]).reshape(-1)[0])
    zp = int(rw.const(out[1]).reshape(-1)[0]) if out[1] else 0
    info = np.iinfo(dtype)

    def code(v: float | None, default: int) -> int:
        if v is None:
            return default
        return int(np.clip(np.rint(np.float32(v) / scale) + zp, info.min, info.max))
    return code(bounds[0], int(info.min)), code(bounds[1], int(info.max))


def _mover(op: Node, q: Node, out: tuple[str, str], rw: Rewriter) -> Rewrite | None:
    if op.op == "Resize" and op.attrs.get("mode", "nearest") != "nearest":
        return None
    x = _dequantized(rw, op.inputs[0])
    dtype = rw.type(q.outputs[0]).dtype
    if x is None or rw.type(x[0]).dtype != dtype or not _same_params(rw, x[1:], out, dtype):
        return None
    # typed as the float op's output: a shape input computed in the graph
    # (Shape -> Gather -> Concat) is a value only infer_types knows
    ty = rw.type(op.outputs[0])
    new = rw.node(op.op, [x[0], *op.inputs[1:]], name=op.name, attrs=op.attrs,
                  outputs=[q.outputs[0]], types=[TensorType(ty.shape, dtype)])
    return Rewrite([new])


# ---- channels last ------------------------------------------------------------
# The layout pass (aot/passes/layout.py) moves the float spatial ops to NHWC
# and sinks the Transposes it puts around them; the integer ones are put in
# NHWC here, before it runs, so that the same sinking cancels their
# Transposes too, and the convolutions get the int8 kernels' vector tiles
# (channels innermost).
SPATIAL_INT = ("QLinearConv", "QLinearAveragePool", "QLinearGlobalAveragePool")


def _channels_last_rule(node: Node, rw: Rewriter) -> Rewrite | None:
    if node.op not in SPATIAL_INT or node.attrs.get("layout", "NCHW") != "NCHW" \
            or int(node.attrs.get("channels_last", 0)) or len(rw.type(node.inputs[0]).shape) != 4:
        return None
    ins = list(node.inputs)
    if node.op == "QLinearConv":
        w = rw.const(ins[3])
        if w is None:
            return None
        ins[3] = rw.constant(f"{ins[3]}_nhwc", np.transpose(w, (0, 2, 3, 1)))
    before = rw.node("Transpose", [ins[0]], name=f"{node.name}_to_nhwc",
                     attrs={"perm": (0, 2, 3, 1)})
    new = rw.node(node.op, [before.outputs[0], *ins[1:]], name=node.name,
                  attrs=dict(node.attrs, layout="NHWC"))
    after = rw.node("Transpose", [new.outputs[0]], name=f"{node.name}_to_nchw",
                    attrs={"perm": (0, 3, 1, 2)}, outputs=node.outputs)
    return Rewrite([before, new, after])


def qdq(graph: Graph) -> Graph:
    return dead_code(rewrite(rewrite(graph, [_group_rule]), [_channels_last_rule]))
