"""TFLite-semantics integer ops (`tfl.*`), bit-exact with tflite-micro's
reference kernels as specified in ../shared/TFLITE_INT8.md.

Quantization comes from the tensor types (`TensorType.quant`); the output's
type carries the output quantization. Layout is NHWC, conv weights OHWI,
depthwise weights [1, KH, KW, C*M], fully-connected weights [O, I].
Accumulations are exact: float64 matmuls of int8 products stay below 2**53.
"""
from __future__ import annotations

import numpy as np

from aot.errors import ModelError, ShapeError, UnsupportedError, node_label
from aot.ir.graph import Quant, TensorType
from aot.ops.quant import qmath
from aot.ops.registry import Call, Pattern, Sig, per_weight_row_macs, register

INT_RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767),
             "int32": (qmath.INT32_MIN, qmath.INT32_MAX)}
# Ops whose activations are not int8 (aot/ops/quant/tflite_int16.py adds its
# int16 forms): the shared type inference below checks and gives this dtype.
ACTIVATION_DTYPE: dict[str, str] = {}


# ------------------------------------------------------------------ helpers

def _quant(ty: TensorType, what: str, node) -> Quant:
    if ty is None or ty.quant is None:
        raise UnsupportedError(f"{node_label(node)}: {what} has no quantization parameters")
    return ty.quant


def scale_zp(ty: TensorType, what: str, node) -> tuple[float, int]:
    q = _quant(ty, what, node)
    return float(q.scale[0]), int(q.zero_point[0])


def channel_scales(ty: TensorType, channels: int, node) -> np.ndarray:
    """The weight scales, one per output channel (a per-tensor scale is broadcast)."""
    q = _quant(ty, "the weight", node)
    scales = np.asarray(q.scale, dtype=np.float64)
    if scales.size == 1:
        return np.full(channels, scales[0])
    if scales.size != channels:
        raise ShapeError(f"{node_label(node)}: {scales.size} weight scales for {channels} channels")
    return scales


def _require_int8(sig_or_call, i: int = 0) -> None:
    ty = sig_or_call.in_types[i]
    want = ACTIVATION_DTYPE.get(sig_or_call.node.op, "int8")
    if ty.dtype != want:
        raise UnsupportedError(f"{node_label(sig_or_call.node)}: {ty.dtype} input "
                               f"(this kernel takes {want})")


def _out_type(sig: Sig, shape, dtype: str | None = None) -> TensorType:
    return TensorType(tuple(int(d) for d in shape),
                      dtype or ACTIVATION_DTYPE.get(sig.node.op, "int8"))


def windows(x: np.ndarray, kernel, strides, dilations, out_hw) -> np.ndarray:
    """[N, H, W, C] (already padded) -> view [N, OH, OW, KH, KW, C] of the taps."""
    n, _, _, c = x.shape
    kh, kw = kernel
    sh, sw = strides
    dh, dw = dilations
    oh, ow = out_hw
    s = x.strides
    return np.lib.stride_tricks.as_strided(
        x, (n, oh, ow, kh, kw, c),
        (s[0], s[1] * sh, s[2] * sw, s[1] * dh, s[2] * dw, s[3]), writeable=False)


def _pad_hw(x: np.ndarray, pads, value) -> np.ndarray:
    top, left, bottom, right = pads
    return np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=value)


def _spatial_out(sig: Sig, hw, kernel) -> tuple[int, int]:
    a = sig.attrs
    pads, strides = a["pads"], a["strides"]
    dil = a.get("dilations", (1, 1))
    out = []
    for i in range(2):
        eff = (kernel[i] - 1) * dil[i] + 1
        span = hw[i] + pads[i] + pads[i + 2] - eff
        if span < 0:
            raise sig.fail(f"kernel {kernel[i]} larger than padded input {hw[i]}")
        out.append(span // strides[i] + 1)
    return out[0], out[1]


def requantize(acc: np.ndarray, mult, shift, zp_out: int, lo: int, hi: int) -> np.ndarray:
    """int32 accumulator -> clamp(MBQM(acc) + zp): the epilogue of conv/FC."""
    return qmath.clamp(qmath.mbqm(qmath.wrap_int32(acc), mult, shift) + zp_out, lo, hi)


def conv_multipliers(s_in: float, w_scales: np.ndarray, s_out: float):
    """Per-channel (M, e): double product s_in*s_w[c] / s_out (§4)."""
    return qmath.quantize_multipliers([s_in * float(s) / s_out for s in w_scales])


# ------------------------------------------------------------------ conv 2d

def _is_hybrid(sig_or_call) -> bool:
    # Float activations with int8 weights: LiteRT's dynamic-range ("hybrid") kernel.
    return sig_or_call.in_types[0].dtype == "float32" and sig_or_call.in_types[1].dtype == "int8"


def _check_bias(sig: Sig, channels: int) -> None:
    """The optional bias: one value per output channel, int32 (float32 for a hybrid conv)."""
    if not sig.has(2):
        return
    b = sig.in_types[2]
    dtypes = ("float32",) if _is_hybrid(sig) else ("int32", "int64")
    if b.shape != (channels,) or b.dtype not in dtypes:
        raise sig.fail(f"bias {b} must be [{channels}] of {' or '.join(dtypes)}")


def _conv_infer(sig: Sig):
    if not _is_hybrid(sig):
        _require_int8(sig)
    x, w = sig.in_types[0], sig.in_types[1]
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise sig.fail(f"expects 4-D input and weight, got {list(x.shape)} and {list(w.shape)}")
    if x.shape[3] % w.shape[3]:
        raise sig.fail(f"input channels {x.shape[3]} not a multiple of filter depth {w.shape[3]}")
    oh, ow = _spatial_out(sig, x.shape[1:3], w.shape[1:3])
    _check_bias(sig, w.shape[0])
    if _is_hybrid(sig):
        q = sig.in_types[1].quant
        if q is None or len(set(q.scale)) > 1 or sig.attrs.get("dilations", (1, 1)) != (1, 1) \
                or x.shape[3] != w.shape[3]:
            raise UnsupportedError(f"{node_label(sig.node)}: hybrid convolution needs a "
                                   "per-tensor weight scale, no dilation and no groups")
        return [_out_type(sig, (x.shape[0], oh, ow, w.shape[0]), "float32")]
    return [_out_type(sig, (x.shape[0], oh, ow, w.shape[0]))]


def _conv_acc(call: Call, x: np.ndarray, w: np.ndarray, offset) -> np.ndarray:
    """Exact sum of w * (x - offset) over the in-image taps: [N, OH, OW, C_out] int64."""
    a = call.attrs
    n, oh, ow, cout = call.out_types[0].shape
    _, kh, kw, depth = w.shape
    groups = x.shape[3] // depth
    xp = _pad_hw(x.astype(np.float64) - offset, a["pads"], 0.0)
    taps = windows(xp, (kh, kw), a["strides"], a.get("dilations", (1, 1)), (oh, ow))
    per_group = cout // groups
    wf = w.astype(np.float64)
    outs = []
    for g in range(groups):  # groups is 1 in practice; grouped convs are rare
        cols = taps[..., g * depth:(g + 1) * depth].reshape(n * oh * ow, kh * kw * depth)
        wg = wf[g * per_group:(g + 1) * per_group].reshape(per_group, -1)
        outs.append(cols @ wg.T)
    return np.concatenate(outs, axis=1).astype(np.int64).reshape(n, oh, ow, cout)


def symmetric_quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LiteRT's SymmetricQuantizeFloats per batch row: int8 in [-127, 127] and
    the float32 scale max|x|/127 (1 for an all-zero row)."""
    rows = x.reshape(x.shape[0], -1).astype(np.float32)
    rng = np.max(np.abs(rows), axis=1)
    safe = np.where(rng == 0, np.float32(1), rng)
    inv = (np.float32(127) / safe).astype(np.float32)
    q = qmath.round_half_away_array((rows * inv[:, None]).astype(np.float32))
    q = np.where(rng[:, None] == 0, 0, np.clip(q, -127, 127)).astype(np.int64)
    scale = np.where(rng == 0, np.float32(1), (rng / np.float32(127)).astype(np.float32))
    return q.reshape(x.shape), scale.astype(np.float32)


def _hybrid_conv2d(call: Call, x, w, bias):
    """LiteRT's EvalHybrid: quantize each batch of x on the fly (symmetric
    int8), integer convolution, then scale back to float."""
    qx, scale = symmetric_quantize_rows(x)
    scale = (scale * np.float32(call.in_types[1].quant.scale[0])).astype(np.float32)
    acc = _conv_acc(call, qx, w, 0)
    y = acc.astype(np.float32) * scale[:, None, None, None]
    if bias is not None:
        y = y + bias.astype(np.float32)
    return [y.astype(np.float32)]   # the fused activation is a separate float node


@register("tfl.conv2d", infer=_conv_infer, pattern=Pattern.OUT_ELEMWISE_FUSABLE,
          macs=per_weight_row_macs(1))
def conv2d(call: Call, args):
    x, w, bias = args[0], args[1], args[2] if len(args) > 2 else None
    if _is_hybrid(call):
        return _hybrid_conv2d(call, x, w, bias)
    a, node = call.attrs, call.node
    s_in, zp_in = scale_zp(call.in_types[0], "the input", node)
    s_out, zp_out = scale_zp(call.out_types[0], "the output", node)
    cout = call.out_types[0].shape[3]
    acc = _conv_acc(call, x, w, zp_in)
    if bias is not None:
        acc = acc + bias.astype(np.int64)
    mult, shift = conv_multipliers(s_in, channel_scales(call.in_types[1], cout, node), s_out)
    y = requantize(acc, mult, shift, zp_out, a["act_min"], a["act_max"])
    return [y.astype(call.out_types[0].dtype)]


# ------------------------------------------------------------ depthwise conv

def _dw_infer(sig: Sig):
    _require_int8(sig)
    x, w = sig.in_types[0], sig.in_types[1]
    if len(x.shape) != 4 or len(w.shape) != 4 or w.shape[0] != 1:
        raise sig.fail(f"expects 4-D input and [1,KH,KW,C*M] weight, got "
                       f"{list(x.shape)} and {list(w.shape)}")
    dm = sig.attrs.get("depth_multiplier", 1)
    if w.shape[3] != x.shape[3] * dm:
        raise sig.fail(f"weight has {w.shape[3]} channels, input {x.shape[3]} x multiplier {dm}")
    oh, ow = _spatial_out(sig, x.shape[1:3], w.shape[1:3])
    _check_bias(sig, w.shape[3])
    return [_out_type(sig, (x.shape[0], oh, ow, w.shape[3]))]


def _dw_macs(call: Call) -> int:
    _, kh, kw, _ = call.in_types[1].shape     # each output element: one KH x KW window
    return call.out_types[0].size * kh * kw


def depthwise_acc(call: Call, x: np.ndarray, w: np.ndarray, offset) -> np.ndarray:
    """Exact sum of w * (x - offset) over each window's in-image taps: [N, OH, OW, C*M] int64."""
    a = call.attrs
    n, oh, ow, cout = call.out_types[0].shape
    _, kh, kw, _ = w.shape
    dm = cout // x.shape[3]
    xp = _pad_hw(x.astype(np.float64) - offset, a["pads"], 0.0)
    taps = windows(xp, (kh, kw), a["strides"], a.get("dilations", (1, 1)), (oh, ow))
    if dm > 1:  # output channel oc reads input channel oc // dm
        taps = np.repeat(taps, dm, axis=-1)
    acc = np.einsum("nhwklc,klc->nhwc", taps, w[0].astype(np.float64), optimize=True)
    return acc.astype(np.int64)


@register("tfl.depthwise_conv2d", infer=_dw_infer, pattern=Pattern.OUT_ELEMWISE_FUSABLE,
          macs=_dw_macs)
def depthwise_conv2d(call: Call, args):
    x, w, bias = args[0], args[1], args[2] if len(args) > 2 else None
    a, node = call.attrs, call.node
    s_in, zp_in = scale_zp(call.in_types[0], "the input", node)
    s_out, zp_out = scale_zp(call.out_types[0], "the output", node)
    cout = call.out_types[0].shape[3]
    acc = depthwise_acc(call, x, w, zp_in)
    if bias is not None:
        acc = acc + bias.astype(np.int64)
    mult, shift = conv_multipliers(s_in, channel_scales(call.in_types[1], cout, node), s_out)
    y = requantize(acc, mult, shift, zp_out, a["act_min"], a["act_max"])
    return [y.astype(call.out_types[0].dtype)]


# ----------------------------------------------------------- fully connected

def _fc_infer(sig: Sig):
    _require_int8(sig)
    x, w = sig.in_types[0], sig.in_types[1]
    if len(w.shape) != 2:
        raise sig.fail(f"weight must be 2-D [O, I], got {list(w.shape)}")
    depth = w.shape[1]
    if x.size % depth:
        raise sig.fail(f"input {list(x.shape)} is not a whole number of rows of {depth}")
    if sig.attrs.get("keep_num_dims", False):
        if x.shape[-1] != depth:
            raise sig.fail(f"last input dim {x.shape[-1]} != weight depth {depth}")
        shape = x.shape[:-1] + (w.shape[0],)
    else:
        shape = (x.size // depth, w.shape[0])
    _check_bias(sig, w.shape[0])
    return [_out_type(sig, shape)]


def fc_multipliers(s_in: float, w_quant: Quant, s_out: float):
    """FC (M, e): per-channel double product; per-tensor product rounded to float32 (§6)."""
    if len(w_quant.scale) > 1:
        return conv_multipliers(s_in, np.asarray(w_quant.scale), s_out)
    prod = float(np.float32(np.float32(s_in) * np.float32(w_quant.scale[0])))
    m, e = qmath.quantize_multiplier(prod / s_out)
    return np.int64(m), np.int64(e)


def _fc_macs(call: Call) -> int:
    return call.out_types[0].size * call.in_types[1].shape[1]     # weight [O, I]


@register("tfl.fully_connected", infer=_fc_infer, pattern=Pattern.OUT_ELEMWISE_FUSABLE,
          macs=_fc_macs)
def fully_connected(call: Call, args):
    x, w, bias = args[0], args[1], args[2] if len(args) > 2 else None
    a, node = call.attrs, call.node
    s_in, zp_in = scale_zp(call.in_types[0], "the input", node)
    s_out, zp_out = scale_zp(call.out_types[0], "the output", node)
    wq = _quant(call.in_types[1], "the weight", node)
    out_ty = call.out_types[0]
    depth = w.shape[1]
    rows = x.reshape(-1, depth).astype(np.float64) - zp_in
    wf = w.astype(np.float64)
    if len(wq.scale) == 1:  # per-tensor kernels subtract the filter zero point
        wf = wf - int(wq.zero_point[0])
    acc = (rows @ wf.T).astype(np.int64)
    if bias is not None:
        acc = acc + bias.astype(np.int64)
    mult, shift = fc_multipliers(s_in, wq, s_out)
    y = requantize(acc, mult, shift, zp_out, a["act_min"], a["act_max"])
    return [y.reshape(out_ty.shape).astype(out_ty.dtype)]


# ------------------------------------------------------ add / sub / mul

def _binary_infer(sig: Sig):
    a, b = sig.in_types[0], sig.in_types[1]
    want = ACTIVATION_DTYPE.get(sig.node.op, "int8")
    if a.dtype != want or b.dtype != want:
        raise UnsupportedError(f"{node_label(sig.node)}: {a.dtype} x {b.dtype} inputs "
                               f"(this kernel takes {want})")
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise sig.fail(f"shapes {list(a.shape)} and {list(b.shape)} do not broadcast") from None
    return [_out_type(sig, shape)]


# CalculateOpDataAdd's left shift before rescaling, by the output's dtype.
ADD_LEFT_SHIFT = {"int8": 20, "int16": 15}


def add_params(s1: float, s2: float, s_out: float, left_shift: int = 20):
    """CalculateOpDataAdd (§8): ((M1,e1), (M2,e2), (Mo,eo)); left shift 20 (int16: 15)."""
    twice_max = 2.0 * max(s1, s2)
    q1 = qmath.quantize_multiplier_smaller_than_one(s1 / twice_max)
    q2 = qmath.quantize_multiplier_smaller_than_one(s2 / twice_max)
    qo = qmath.quantize_multiplier_smaller_than_one(twice_max / ((1 << left_shift) * s_out))
    return q1, q2, qo


def _add_sub(call: Call, args, sign: int):
    node = call.node
    s1, z1 = scale_zp(call.in_types[0], "input 0", node)
    s2, z2 = scale_zp(call.in_types[1], "input 1", node)
    so, zo = scale_zp(call.out_types[0], "the output", node)
    out_ty = call.out_types[0]
    shift = ADD_LEFT_SHIFT[out_ty.dtype]
    (m1, e1), (m2, e2), (mo, eo) = add_params(s1, s2, so, shift)
    u1 = qmath.mbqm_smaller_than_one((args[0].astype(np.int64) - z1) << shift, m1, e1)
    u2 = qmath.mbqm_smaller_than_one((args[1].astype(np.int64) - z2) << shift, m2, e2)
    y = qmath.mbqm_smaller_than_one(u1 + sign * u2, mo, eo) + zo
    y = qmath.clamp(y, call.attrs["act_min"], call.attrs["act_max"])
    return [np.broadcast_to(y, out_ty.shape).astype(out_ty.dtype)]


@register("tfl.add", infer=_binary_infer, pattern=Pattern.BROADCAST)
def add(call: Call, args):
    return _add_sub(call, args, 1)


@register("tfl.sub", infer=_binary_infer, pattern=Pattern.BROADCAST)
def sub(call: Call, args):
    return _add_sub(call, args, -1)


@register("tfl.mul", infer=_binary_infer, pattern=Pattern.BROADCAST)
def mul(call: Call, args):
    node = call.node
    s1, z1 = scale_zp(call.in_types[0], "input 0", node)
    s2, z2 = scale_zp(call.in_types[1], "input 1", node)
    so, zo = scale_zp(call.out_types[0], "the output", node)
    m, e = qmath.quantize_multiplier(s1 * s2 / so)
    prod = (args[0].astype(np.int64) - z1) * (args[1].astype(np.int64) - z2)
    y = qmath.clamp(zo + qmath.mbqm(prod, m, e), call.attrs["act_min"], call.attrs["act_max"])
    return [np.broadcast_to(y, call.out_types[0].shape).astype(call.out_types[0].dtype)]


# ------------------------------------------------------------------ pooling

def _pool_infer(sig: Sig):
    _require_int8(sig)
    x = sig.in_types[0]
    if len(x.shape) != 4:
        raise sig.fail(f"expects a 4-D NHWC input, got {list(x.shape)}")
    oh, ow = _spatial_out(sig, x.shape[1:3], sig.attrs["kernel"])
    return [_out_type(sig, (x.shape[0], oh, ow, x.shape[3]))]


def check_pool_quant(call: Call) -> None:
    # Pooling does not requantize: TFLM's Prepare requires equal parameters.
    s_in, zp_in = scale_zp(call.in_types[0], "the input", call.node)
    s_out, zp_out = scale_zp(call.out_types[0], "the output", call.node)
    if zp_in != zp_out or abs(s_in - s_out) > 1e-6:
        raise UnsupportedError(f"{node_label(call.node)}: input and output quantization "
                               f"differ ({s_in}, {zp_in} vs {s_out}, {zp_out})")


def _pool_taps(call: Call, x: np.ndarray, fill):
    check_pool_quant(call)
    a = call.attrs
    n, oh, ow, c = call.out_types[0].shape
    xp = _pad_hw(x, a["pads"], fill)
    return windows(xp, a["kernel"], a["strides"], (1, 1), (oh, ow))


@register("tfl.avg_pool2d", infer=_pool_infer, pattern=Pattern.REDUCE)
def avg_pool2d(call: Call, args):
    x = args[0].astype(np.int64)
    total = _pool_taps(call, x, 0).sum(axis=(3, 4))
    # Padded taps are not counted: count in-bounds taps per output position.
    ones = np.ones((1,) + x.shape[1:3] + (1,), dtype=np.int64)
    count = _pool_taps(call, ones, 0).sum(axis=(3, 4))
    half = count // 2
    avg = np.where(total > 0, (total + half) // count, -((-total + half) // count))
    y = qmath.clamp(avg, call.attrs["act_min"], call.attrs["act_max"])
    return [y.astype(call.out_types[0].dtype)]


@register("tfl.max_pool2d", infer=_pool_infer, pattern=Pattern.REDUCE)
def max_pool2d(call: Call, args):
    x = args[0].astype(np.int64)
    m = _pool_taps(call, x, -(1 << 40)).max(axis=(3, 4))
    lowest = INT_RANGE[call.out_types[0].dtype][0]   # where TFLM's running max starts
    y = qmath.clamp(np.maximum(m, lowest), call.attrs["act_min"], call.attrs["act_max"])
    return [y.astype(call.out_types[0].dtype)]


# --------------------------------------------------------------------- mean

def mean_axes(sig_or_call, values) -> tuple[int, ...]:
    rank = len(sig_or_call.in_types[0].shape)
    axes = sorted({int(a) % rank for a in np.ravel(values)})
    return tuple(axes)


def _mean_infer(sig: Sig):
    _require_int8(sig)
    x = sig.in_types[0]
    axes = mean_axes(sig, sig.const(1))
    keep = sig.attrs.get("keep_dims", False)
    shape = tuple((1 if i in axes else d) for i, d in enumerate(x.shape) if keep or i not in axes)
    return [_out_type(sig, shape)]


def mean_count(attrs, reduced_dims) -> int:
    """What MEAN divides by; SUM (attr sum=True) is the same kernel without it."""
    return 1 if attrs.get("sum", False) else int(np.prod(reduced_dims, dtype=np.int64))


@register("tfl.mean", infer=_mean_infer, pattern=Pattern.REDUCE)
def mean(call: Call, args):
    """MEAN int8: sum of (x - zp_in), MBQM by s_in/s_out, then divide by the
    count rounding half away from zero, plus zp_out."""
    node = call.node
    s_in, zi = scale_zp(call.in_types[0], "the input", node)
    s_out, zo = scale_zp(call.out_types[0], "the output", node)
    axes = mean_axes(call, args[1])
    count = mean_count(call.attrs, [args[0].shape[i] for i in axes])
    acc = (args[0].astype(np.int64) - zi).sum(axis=axes)
    m, e = qmath.quantize_multiplier(s_in / s_out)
    acc = qmath.mbqm(acc, m, e)
    half = count // 2
    acc = np.where(acc > 0, (acc + half) // count, -((-acc + half) // count))
    y = qmath.clamp(acc + zo, -128, 127)
    return [y.reshape(call.out_types[0].shape).astype("int8")]


# ------------------------------------------------------------------ softmax

EXP_BARREL = ((24, 1672461947), (25, 1302514674), (26, 790015084), (27, 290630308),
              (28, 39332535), (29, 720401), (30, 242))


def exp_on_negative_values(a: np.ndarray) -> np.ndarray:
    """exp(a) for a <= 0 in Q5.26, result in Q0.31 (§9 EXP)."""
    r = (a & ((1 << 24) - 1)) - (1 << 24)
    y = qmath.exp_poly(qmath.satshl(r, 5))
    rem = r - a
    for bit, c in EXP_BARREL:
        y = np.where((rem >> bit) & 1, qmath.srdhm(y, c), y)
    return np.where(a == 0, qmath.INT32_MAX, y)


def one_over_one_plus_x(t: np.ndarray) -> np.ndarray:
    """1/(1+x) for x in [0,1) in Q0.31, result in Q0.31 (§9 RECIP)."""
    h = (t + (1 << 31)) >> 1
    x = 1515870810 + qmath.srdhm(h, -1010580540)
    for _ in range(3):
        x = x + qmath.satshl(qmath.srdhm(x, (1 << 29) - qmath.srdhm(h, x)), 2)
    return qmath.satshl(x, 1)


def softmax_params(beta: float, s_in: float):
    real = min(beta * s_in * float(1 << 26), float((1 << 31) - 1))
    mult, left = qmath.quantize_multiplier_greater_than_one(real)
    diff_min = -((31 * (1 << 26)) >> left) if left < 31 else 0
    return mult, left, diff_min


def _clz32(v: np.ndarray) -> np.ndarray:
    # v is in [1, 2**32): the number of leading zeros of its 32-bit form.
    bits = np.floor(np.log2(v.astype(np.float64))).astype(np.int64)
    # log2 of values just below a power of two can round up: correct it.
    bits = np.where((np.int64(1) << bits) > v, bits - 1, bits)
    return 31 - bits


def _softmax_infer(sig: Sig):
    _require_int8(sig)
    beta = float(sig.attrs.get("beta", 1.0))
    s_in, _ = scale_zp(sig.in_types[0], "the input", sig.node)
    if not beta * s_in * float(1 << 26) > 1.0:  # also refuses NaN
        raise ModelError(f"{node_label(sig.node)}: beta {beta} with input scale {s_in} "
                         "(the int8 kernel needs beta * scale * 2**26 > 1)")
    return [_out_type(sig, sig.in_types[0].shape)]


@register("tfl.softmax", infer=_softmax_infer, pattern=Pattern.REDUCE)
def softmax(call: Call, args):
    node = call.node
    s_in, _ = scale_zp(call.in_types[0], "the input", node)
    s_out, zp_out = scale_zp(call.out_types[0], "the output", node)
    if zp_out != -128 or s_out != 1.0 / 256:
        raise UnsupportedError(f"{node_label(node)}: int8 softmax output must have "
                               f"scale 1/256 and zero point -128, got {s_out}, {zp_out}")
    mult, left, diff_min = softmax_params(float(call.attrs.get("beta", 1.0)), s_in)
    x = args[0].astype(np.int64)
    d = x - x.max(axis=-1, keepdims=True)
    active = d >= diff_min
    z = qmath.srdhm(d << left, mult)
    e = exp_on_negative_values(np.where(active, z, 0))
    total = np.where(active, qmath.rdbpot(e, 12), 0).sum(axis=-1, keepdims=True)
    c = _clz32(total)
    k = 12 - c
    t = ((total << c) & 0xFFFFFFFF) - (1 << 31)
    recip = one_over_one_plus_x(t)
    y = qmath.rdbpot(qmath.srdhm(recip, e), k + 23) - 128
    y = np.where(active, np.clip(y, -128, 127), -128)
    return [y.astype("int8")]


# -------------------------------------------------------- quantize / dequantize

def _quantize_infer(sig: Sig):
    dtype = sig.attrs.get("dtype", "int8")
    if dtype not in ("int8", "uint8", "int16"):
        raise UnsupportedError(f"{node_label(sig.node)}: quantize to {dtype}")
    return [_out_type(sig, sig.in_types[0].shape, dtype)]


@register("tfl.quantize", infer=_quantize_infer, pattern=Pattern.ELEMWISE)
def quantize(call: Call, args):
    node = call.node
    out_ty = call.out_types[0]
    s_out, zp_out = scale_zp(out_ty, "the output", node)
    lo, hi = INT_RANGE[out_ty.dtype]
    x = args[0]
    if x.dtype.kind == "f":
        return [quantize_array(x, s_out, zp_out, out_ty.dtype)]
    s_in, zp_in = scale_zp(call.in_types[0], "the input", node)
    m, e = qmath.quantize_multiplier(s_in / s_out)
    y = qmath.clamp(qmath.mbqm(x.astype(np.int64) - zp_in, m, e) + zp_out, lo, hi)
    return [y.astype(out_ty.dtype)]


def quantize_array(x: np.ndarray, scale: float, zero_point: int, dtype: str) -> np.ndarray:
    """TFLite's float QUANTIZE (AffineQuantize): round half away from zero
    of float32(x) / float32(scale), plus the zero point, clamped to dtype."""
    lo, hi = INT_RANGE[dtype]
    q = qmath.round_half_away_array(np.asarray(x).astype(np.float32) / np.float32(scale))
    q = np.clip(q, -2.0 ** 31, 2.0 ** 31)      # an int64 holds it (the clamp saturates anyway)
    return np.clip(q.astype(np.int64) + int(zero_point), lo, hi).astype(dtype)


def _dequantize_infer(sig: Sig):
    x = sig.in_types[0]
    if x.dtype not in ("int8", "uint8", "int16", "int32") and x.dtype != "float16":
        raise UnsupportedError(f"{node_label(sig.node)}: dequantize from {x.dtype}")
    return [_out_type(sig, x.shape, "float32")]


def dequantize_array(x: np.ndarray, q: Quant | None) -> np.ndarray:
    """(float)((double)scale * (x - zp)), per-tensor or per-channel."""
    if q is None:
        return x.astype(np.float32)
    scale = np.asarray(q.scale, dtype=np.float64)
    zp = np.asarray(q.zero_point, dtype=np.int64)
    if q.axis is not None and scale.size > 1:
        shape = [1] * x.ndim
        shape[q.axis] = scale.size
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    return (scale * (x.astype(np.int64) - zp)).astype(np.float32)


@register("tfl.dequantize", infer=_dequantize_infer, pattern=Pattern.ELEMWISE)
def dequantize(call: Call, args):
    ty = call.in_types[0]
    if ty.dtype == "float16":
        return [args[0].astype(np.float32)]
    return [dequantize_array(args[0], _quant(ty, "the input", call.node))]


# ------------------------------------------- leaky relu / prelu / squared difference

def _unary_int8_infer(sig: Sig):
    _require_int8(sig)
    return [_out_type(sig, sig.in_types[0].shape)]


def leaky_relu_params(s_in: float, alpha: float, s_out: float):
    """((M, e) for x >= zp, (M, e) for x < zp): TFLM forms both ratios in
    float32 before QuantizeMultiplier (a negative alpha gives a negative M)."""
    f32 = np.float32
    identity = float(f32(s_in) / f32(s_out))
    scaled = float(f32(f32(s_in) * f32(alpha)) / f32(s_out))
    return qmath.quantize_multiplier(identity), qmath.quantize_multiplier(scaled)


@register("tfl.leaky_relu", infer=_unary_int8_infer, pattern=Pattern.ELEMWISE)
def leaky_relu(call: Call, args):
    node = call.node
    s_in, zi = scale_zp(call.in_types[0], "the input", node)
    s_out, zo = scale_zp(call.out_types[0], "the output", node)
    (m1, e1), (m2, e2) = leaky_relu_params(s_in, float(call.attrs["alpha"]), s_out)
    x = args[0].astype(np.int64) - zi
    y = np.where(x >= 0, qmath.mbqm(x, m1, e1), qmath.mbqm(x, m2, e2)) + zo
    out_dtype = call.out_types[0].dtype
    return [qmath.clamp(y, *INT_RANGE[out_dtype]).astype(out_dtype)]


def prelu_params(s_in: float, s_alpha: float, s_out: float):
    """CalculatePreluParams: both ratios in double."""
    return (qmath.quantize_multiplier(s_in / s_out),
            qmath.quantize_multiplier(s_in * s_alpha / s_out))


@register("tfl.prelu", infer=_binary_infer, pattern=Pattern.BROADCAST)
def prelu(call: Call, args):
    node = call.node
    s_in, zi = scale_zp(call.in_types[0], "the input", node)
    s_a, za = scale_zp(call.in_types[1], "alpha", node)
    s_out, zo = scale_zp(call.out_types[0], "the output", node)
    (m1, e1), (m2, e2) = prelu_params(s_in, s_a, s_out)
    x = args[0].astype(np.int64) - zi
    a = args[1].astype(np.int64) - za
    y = np.where(x >= 0, qmath.mbqm(x, m1, e1), qmath.mbqm(x * a, m2, e2)) + zo
    return [np.broadcast_to(qmath.clamp(y, -128, 127), call.out_types[0].shape).astype("int8")]


SQUARED_DIFFERENCE_SHIFT = 7   # 255^2 << 14 still fits in int32
# by the output dtype: int16 has no room to shift (TFLM's left_shift 0)
SQUARED_DIFFERENCE_SHIFTS = {"int8": SQUARED_DIFFERENCE_SHIFT, "int16": 0}


def squared_difference_params(s1: float, s2: float, s_out: float,
                              shift: int = SQUARED_DIFFERENCE_SHIFT):
    """((M1, e1), (M2, e2), (Mo, eo)): the inputs rescaled to a common scale
    as in ADD, the squared difference by twice_max^2 / (2^14 s_out)."""
    twice_max = 2.0 * max(s1, s2)
    q1 = qmath.quantize_multiplier_smaller_than_one(s1 / twice_max)
    q2 = qmath.quantize_multiplier_smaller_than_one(s2 / twice_max)
    qo = qmath.quantize_multiplier(
        twice_max * twice_max / float(np.float32((1 << 2 * shift) * s_out)))
    return q1, q2, qo


@register("tfl.squared_difference", infer=_binary_infer, pattern=Pattern.BROADCAST)
def squared_difference(call: Call, args):
    node = call.node
    s1, z1 = scale_zp(call.in_types[0], "input 0", node)
    s2, z2 = scale_zp(call.in_types[1], "input 1", node)
    so, zo = scale_zp(call.out_types[0], "the output", node)
    out_ty = call.out_types[0]
    bits = SQUARED_DIFFERENCE_SHIFTS[out_ty.dtype]
    (m1, e1), (m2, e2), (mo, eo) = squared_difference_params(s1, s2, so, bits)
    u1 = qmath.mbqm_smaller_than_one((args[0].astype(np.int64) - z1) << bits, m1, e1)
    u2 = qmath.mbqm_smaller_than_one((args[1].astype(np.int64) - z2) << bits, m2, e2)
    d = u1 - u2
    y = qmath.clamp(qmath.mbqm(d * d, mo, eo) + zo, *INT_RANGE[out_ty.dtype])
    return [np.broadcast_to(y, out_ty.shape).astype(out_ty.dtype)]


# --------------------------------------------------------------- hard swish

def _int16_wrap(x: np.ndarray) -> np.ndarray:
    return ((x + (1 << 15)) & 0xFFFF) - (1 << 15)


def _srdhm16(a: np.ndarray, b: int) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul on int16 (the product's
    nudge toward the sign, then C division by 2^15)."""
    ab = a * b
    nudged = ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    q = np.sign(nudged) * (np.abs(nudged) >> 15)
    return np.where((a == -32768) & (b == -32768), 32767, q)


def _rdbpot16(x: np.ndarray, e: int) -> np.ndarray:
    """gemmlowp RoundingDivideByPOT: ties away from zero."""
    if e == 0:
        return x
    mask = (1 << e) - 1
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + ((x & mask) > threshold)


def _sat_shl16(x: np.ndarray, amount: int) -> np.ndarray:
    return np.clip(x * (1 << amount), -32768, 32767)


def _int16_multiplier(m: float) -> tuple[int, int]:
    """QuantizeMultiplier, then DownScaleInt32ToInt16Multiplier (round the
    Q31 multiplier to its top 16 bits, saturating)."""
    m32, e = qmath.quantize_multiplier(m)
    if m32 >= qmath.INT32_MAX - (1 << 15):
        return 32767, e
    return (m32 + (1 << 15)) >> 16, e


def hard_swish_table(s_in: float, zp_in: int, s_out: float, zp_out: int, node) -> np.ndarray:
    """TFLM's int8 HARD_SWISH for each of the 256 inputs (reference_ops::HardSwish:
    int16 fixed point, the relu-ish factor in [0, 1] times the input)."""
    f32 = np.float32
    hires = f32(f32(1.0 / 128.0) * f32(s_in))
    out_m, out_e = _int16_multiplier(float(f32(hires / f32(s_out))))
    relu_m, relu_e = _int16_multiplier(float(f32(hires / f32(3.0 / 32768.0))))
    if out_e > 0:
        raise UnsupportedError(f"{node_label(node)}: int8 HARD_SWISH with input scale "
                               f"{s_in} over output scale {s_out} above 128 (TFLM refuses it)")
    x = np.arange(-128, 128, dtype=np.int64) - zp_in
    hires_x = x * 128
    preshift = _srdhm16(hires_x, out_m)
    relu = hires_x
    if relu_e > 0:
        relu = _sat_shl16(relu, relu_e - 1)
    relu = _srdhm16(relu, relu_m)
    if relu_e > 0:
        relu = _sat_shl16(relu, 1)
    if relu_e < 0:
        relu = _rdbpot16(relu, -relu_e)
    relu = (relu + (1 << 15)) >> 1
    prod = relu * preshift   # SaturatingDoublingHighMul: C division, toward zero
    high = np.sign(prod) * (np.abs(prod) >> 15)
    y = _int16_wrap(_rdbpot16(high, -out_e) + zp_out)
    return np.clip(y, -128, 127).astype(np.int8)


# ------------------------------------------------------------ int8 tables

# op -> fn(node, input type, output type): its 256 int8 outputs, indexed by
# input + 128. The reference looks them up; the lowering (aot/lower/rules/quant/tflite_lut.py)
# stores them as a table, so both compute exactly TFLM's arithmetic.
INT8_TABLES: dict = {}


def int8_table(op: str):
    def wrap(fn):
        INT8_TABLES[op] = fn

        def lookup(call: Call, args):
            t = fn(call.node, call.in_types[0], call.out_types[0])
            return [t[args[0].astype(np.int64) + 128]]
        register(op, infer=_unary_int8_infer, pattern=Pattern.OPAQUE)(lookup)
        return fn
    return wrap


def _int8_inputs(zp_in: int) -> np.ndarray:
    return np.arange(-128, 128, dtype=np.int64) - zp_in


@int8_table("tfl.hard_swish")
def _hard_swish_lut(node, in_ty, out_ty) -> np.ndarray:
    s_in, zi = scale_zp(in_ty, "the input", node)
    s_out, zo = scale_zp(out_ty, "the output", node)
    return hard_swish_table(s_in, zi, s_out, zo, node)


@int8_table("tfl.relu")
def _relu_lut(node, in_ty, out_ty) -> np.ndarray:
    """ReluQuantized: requantized by s_in / s_out (double), clamped below at
    the output's zero point."""
    s_in, zi = scale_zp(in_ty, "the input", node)
    s_out, zo = scale_zp(out_ty, "the output", node)
    m, e = qmath.quantize_multiplier(s_in / s_out)
    y = zo + qmath.mbqm(_int8_inputs(zi), m, e)
    return np.clip(y, max(-128, zo), 127).astype(np.int8)


@int8_table("tfl.relu6")
def _relu6_lut(node, in_ty, out_ty) -> np.ndarray:
    """Relu6Quantized: no requantization, the input clamped to [zp, q(6)]
    with q(6) = zp + round(6 / s_in) (TFLM refuses a q(6) outside int8)."""
    s_in, zi = scale_zp(in_ty, "the input", node)
    six = zi + int(qmath.round_half_away(float(np.float32(6.0) / np.float32(s_in))))
    if not -128 <= six <= 127:
        raise UnsupportedError(f"{node_label(node)}: int8 RELU6 whose 6.0 is {six}, outside "
                               "int8 (TFLM refuses it)")
    return np.clip(np.arange(-128, 128), zi, six).astype(np.int8)


@int8_table("tfl.abs")
def _abs_lut(node, in_ty, out_ty) -> np.ndarray:
    s_in, zi = scale_zp(in_ty, "the input", node)
    s_out, zo = scale_zp(out_ty, "the output", node)
    value = np.abs(_int8_inputs(zi))
    if np.float32(s_in) != np.float32(s_out):
        m, e = qmath.quantize_multiplier(s_in / s_out)
        value = qmath.mbqm(value, m, e)
    return np.clip(value + zo, -128, 127).astype(np.int8)


# ---------------------------------------------------------- resize bilinear

def _c_div(a: np.ndarray, b: int) -> np.ndarray:
    """C integer division (toward zero)."""
    return np.sign(a) * (np.abs(a) // b)


def resize_bilinear_taps(n_in: int, n_out: int, align_corners: bool, half_pixel: bool):
    """ResizeBilinearInteger along one axis: per output position the lower and
    upper source index and the source position in 1/1024ths minus 1024 x lower
    (the upper tap's weight; it may leave [0, 1024] at a clamped border)."""
    if align_corners and n_out > 1:
        scale = ((1 << 10) * (n_in - 1) + (n_out - 1) // 2) // (n_out - 1)
    else:
        scale = ((1 << 10) * n_in + n_out // 2) // n_out
    scaled = np.arange(n_out, dtype=np.int64) * scale
    if half_pixel:
        scaled = scaled + scale // 2 - (1 << 9)
    lo = np.maximum(_c_div(scaled, 1 << 10), 0)
    hi = np.minimum(_c_div(scaled + (1 << 10) - 1, 1 << 10), n_in - 1)
    return lo, hi, scaled - (1 << 10) * lo


def _resize_bilinear_infer(sig: Sig):
    _require_int8(sig)
    x = sig.in_types[0]
    if len(x.shape) != 4:
        raise sig.fail(f"expects a 4-D NHWC input, got {list(x.shape)}")
    h, w = sig.attrs["size"]
    return [_out_type(sig, (x.shape[0], h, w, x.shape[3]))]


def resize_bilinear_round(total: np.ndarray) -> np.ndarray:
    """(total + sign(total) 2^19) / 2^20 in C: halves away from zero."""
    return np.sign(total) * ((np.abs(total) + (1 << 19)) >> 20)


@register("tfl.resize_bilinear", infer=_resize_bilinear_infer, pattern=Pattern.INJECTIVE)
def resize_bilinear(call: Call, args):
    """TFLM's int8 RESIZE_BILINEAR: 10-bit fixed-point weights on the raw
    int8 values (input and output share their quantization)."""
    x = args[0].astype(np.int64)
    a = call.attrs
    _, h, w, _ = call.out_types[0].shape
    y0, y1, fy = resize_bilinear_taps(x.shape[1], h, a["align_corners"], a["half_pixel_centers"])
    x0, x1, fx = resize_bilinear_taps(x.shape[2], w, a["align_corners"], a["half_pixel_centers"])
    fy, fx = fy[None, :, None, None], fx[None, None, :, None]
    rows0, rows1 = x[:, y0], x[:, y1]
    total = (rows0[:, :, x0] * (1024 - fy) * (1024 - fx) + rows1[:, :, x0] * fy * (1024 - fx)
             + rows0[:, :, x1] * (1024 - fy) * fx + rows1[:, :, x1] * fy * fx)
    return [resize_bilinear_round(total).astype(np.int8)]


# ------------------------------------------------------------------- tanh

def one_minus_x_over_one_plus_x(t: np.ndarray) -> np.ndarray:
    """(1-x)/(1+x) for x in [0,1) in Q0.31 (gemmlowp's Newton-Raphson division,
    as one_over_one_plus_x, ending with x - 1 rescaled from Q2.29)."""
    h = (t + (1 << 31)) >> 1
    x = 1515870810 + qmath.srdhm(h, -1010580540)
    for _ in range(3):
        x = x + qmath.satshl(qmath.srdhm(x, (1 << 29) - qmath.srdhm(h, x)), 2)
    return qmath.satshl(x - (1 << 29), 2)


@int8_table("tfl.tanh")
def _tanh_lut(node, in_ty, out_ty) -> np.ndarray:
    """reference_integer_ops::Tanh: the input rescaled to Q4.27 (the radius
    beyond which it saturates), gemmlowp's tanh in Q0.31, then Q0.7."""
    s_in, zi = scale_zp(in_ty, "the input", node)
    q, shift = np.frexp(float(np.float32(s_in)) * float(1 << 27))
    mult = int(qmath.round_half_away(q * (1 << 31)))
    radius = int(np.floor(15 * float(1 << 27) / float(2.0 ** int(shift))))
    x = _int8_inputs(zi)
    a = qmath.mbqm(x, mult, int(shift))
    neg = a < 0
    t = one_minus_x_over_one_plus_x(qmath.exp_on_negative_values(np.where(neg, a, -a), 5))
    r = np.where(a == 0, 0, np.where(neg, -t, t))
    y = np.clip(qmath.rdbpot(r, 24), -128, 127)
    y = np.where(x <= -radius, -128, np.where(x >= radius, 127, y))
    return y.astype(np.int8)


# ------------------------------------------------------------------ rsqrt



def inv_sqrt_multiplier(value: int) -> tuple[int, int]:
    """GetInvSqrtQuantizedMultiplierExp(value, reverse_shift=-1): 1/sqrt(value)
    as (Q0.31 multiplier, left shift), by gemmlowp Newton-Raphson in Q3.28."""
    if value <= 1:
        return qmath.INT32_MAX, 0
    shift = 11
    while value >= (1 << 29):
        value //= 4
        shift += 1
    pairs = (32 - value.bit_length() - 1) // 2 - 1   # CountLeadingZeros(uint32)
    shift -= pairs
    value <<= 2 * pairs
    x_in = np.int64(value >> 1)
    half_in = qmath.rdbpot(x_in, 1)
    half_three = (1 << 28) + (1 << 27)
    x = np.int64(1 << 28)   # F3 one
    for _ in range(5):
        x3 = qmath.satshl(qmath.srdhm(qmath.srdhm(x, x), x), 6)
        x = qmath.satshl(qmath.srdhm(half_three, x) - qmath.srdhm(half_in, x3), 3)
    m = int(qmath.srdhm(x, 1518500250))
    if shift < 0:
        m = int(qmath.wrap_int32(m << -shift))
        shift = 0
    return m, -shift


@int8_table("tfl.rsqrt")
def _rsqrt_lut(node, in_ty, out_ty) -> np.ndarray:
    """RsqrtEvalQuantized: 1/sqrt(x - zp) as a multiplier applied to 1 with 20
    extra bits, then rescaled by 1/(sqrt(s_in) s_out). TFLM fails the whole
    invoke on an input below the zero point; the table gives 127 there, as
    for the zero point itself."""
    s_in, zi = scale_zp(in_ty, "the input", node)
    s_out, zo = scale_zp(out_ty, "the output", node)
    m_out, e_out = qmath.quantize_multiplier(1.0 / (np.sqrt(float(np.float32(s_in)))
                                                    * float(np.float32(s_out))))
    out = np.full(256, 127, np.int64)
    for k, v in enumerate(_int8_inputs(zi)):
        if v <= 0:
            continue
        m, e = inv_sqrt_multiplier(int(v))
        data = qmath.mbqm(1, m, e + 20)
        out[k] = min(max(int(qmath.mbqm(data, m_out, e_out - 20)) + zo, -128), 127)
    return out.astype(np.int8)


# ------------------------------------------------------------- comparisons

COMPARISONS = {"EQUAL": np.equal, "NOT_EQUAL": np.not_equal, "LESS": np.less,
               "LESS_EQUAL": np.less_equal, "GREATER": np.greater,
               "GREATER_EQUAL": np.greater_equal}
COMPARE_SHIFT = 8


def compare_params(ty: TensorType, what: str, node) -> tuple[int, int, int]:
    """(zero point, M, e): ComparisonsPrepare rescales each input by its own
    scale (QuantizeMultiplierSmallerThanOneExp), after a left shift of 8."""
    s, zp = scale_zp(ty, what, node)
    if not 0 < s < 1:
        raise UnsupportedError(f"{node_label(node)}: int8 comparison of {what} at scale {s} "
                               "(TFLM needs a scale below 1)")
    m, e = qmath.quantize_multiplier_smaller_than_one(float(np.float32(s)))
    return zp, m, e


def _compare_infer(sig: Sig):
    out = _binary_infer(sig)[0]
    return [TensorType(out.shape, "bool")]


@register("tfl.compare", infer=_compare_infer, pattern=Pattern.BROADCAST)
def compare(call: Call, args):
    node = call.node
    scaled = []
    for k, x in enumerate(args[:2]):
        zp, m, e = compare_params(call.in_types[k], f"input {k}", node)
        scaled.append(qmath.mbqm_smaller_than_one((x.astype(np.int64) - zp) << COMPARE_SHIFT,
                                                  m, e))
    fn = COMPARISONS[call.attrs["comparison"]]
    return [np.broadcast_to(fn(*scaled), call.out_types[0].shape)]


@int8_table("tfl.elu")
def _elu_lut(node, in_ty, out_ty) -> np.ndarray:
    """TFLM's ELU table: each input dequantized in float32, expm1 below 0,
    rounded at the output scale."""
    s_in, zi = scale_zp(in_ty, "the input", node)
    s_out, zo = scale_zp(out_ty, "the output", node)
    f32 = np.float32
    x = f32(s_in) * (np.arange(-128, 128) - zi).astype(f32)
    y = np.where(x < 0, np.expm1(np.minimum(x, f32(0))), x).astype(f32)
    q = qmath.round_half_away_array(y * (f32(1) / f32(s_out))).astype(np.int64) + zo
    return np.clip(q, -128, 127).astype(np.int8)


# ------------------------------------------------------------------- add_n

ADD_N_SHIFT = 20


def add_n_params(s_in: float, s_out: float, node):
    """((M_in, e_in), (M_out, e_out)) as TFLM's ADD_N: every input at 1/2 of
    twice its scale, the sum by 2 s_in / (2^20 s_out)."""
    twice = 2.0 * float(np.float32(s_in))
    out = twice / ((1 << ADD_N_SHIFT) * float(np.float32(s_out)))
    if not 0 < out < 1:
        raise UnsupportedError(f"{node_label(node)}: int8 ADD_N output multiplier {out:g} is "
                               "not below 1 (TFLM needs it so)")
    return (qmath.quantize_multiplier_smaller_than_one(float(np.float32(s_in)) / twice),
            qmath.quantize_multiplier_smaller_than_one(out))


def _add_n_infer(sig: Sig):
    first = sig.in_types[0]
    for k, ty in enumerate(sig.in_types):
        if ty.dtype != "int8" or ty.shape != first.shape or ty.quant != first.quant:
            raise UnsupportedError(f"{node_label(sig.node)}: int8 ADD_N input {k} differs from "
                                   "input 0 in shape or quantization")
    return [_out_type(sig, first.shape)]


@register("tfl.add_n", infer=_add_n_infer, pattern=Pattern.ELEMWISE)
def add_n(call: Call, args):
    """reference_ops::AddN: the sum starts from the rescaled input offset
    (-zp), then adds each rescaled input (x - zp) << 20."""
    node = call.node
    s_in, zi = scale_zp(call.in_types[0], "input 0", node)
    s_out, zo = scale_zp(call.out_types[0], "the output", node)
    (mi, ei), (mo, eo) = add_n_params(s_in, s_out, node)
    total = qmath.mbqm_smaller_than_one(np.int64(-zi) << ADD_N_SHIFT, mi, ei)
    for x in args:
        total = total + qmath.mbqm_smaller_than_one((x.astype(np.int64) - zi) << ADD_N_SHIFT,
                                                    mi, ei)
    y = qmath.clamp(qmath.mbqm_smaller_than_one(total, mo, eo) + zo, -128, 127)
    return [np.broadcast_to(y, call.out_types[0].shape).astype(np.int8)]


# --------------------------------------------------------- l2 normalization

def _l2_norm_infer(sig: Sig):
    _require_int8(sig)
    return [_out_type(sig, sig.in_types[0].shape)]


@register("tfl.l2_normalization", infer=_l2_norm_infer, pattern=Pattern.REDUCE)
def l2_normalization(call: Call, args):
    """reference_integer_ops::L2Normalization along the last axis: the row's
    sum of squares, its 1/sqrt as a multiplier (inv_sqrt_multiplier), the
    output in Q0.7."""
    _, zp = scale_zp(call.in_types[0], "the input", call.node)
    d = args[0].astype(np.int64) - zp
    rows = d.reshape(-1, d.shape[-1])
    out = np.empty_like(rows)
    for r, row in enumerate(rows):
        m, e = inv_sqrt_multiplier(int((row * row).sum()))
        out[r] = np.clip(qmath.mbqm(row, m, e + 7), -128, 127)
    return [out.reshape(d.shape).astype(np.int8)]


# ------------------------------------------------------------------ cumsum

def _cumsum_infer(sig: Sig):
    _require_int8(sig)
    return [_out_type(sig, sig.in_types[0].shape)]


@register("tfl.cumsum", infer=_cumsum_infer, pattern=Pattern.OPAQUE)
def cumsum(call: Call, args):
    """reference_ops::CumSum int8: ADD_N's arithmetic (add_n_params) as a
    running sum along the axis, from the rescaled input offset."""
    node = call.node
    s_in, zi = scale_zp(call.in_types[0], "the input", node)
    s_out, zo = scale_zp(call.out_types[0], "the output", node)
    (mi, ei), (mo, eo) = add_n_params(s_in, s_out, node)
    a = call.attrs
    x = np.moveaxis(args[0].astype(np.int64), a["axis"], -1)
    if a["reverse"]:
        x = x[..., ::-1]
    scaled = qmath.mbqm_smaller_than_one((x - zi) << ADD_N_SHIFT, mi, ei)
    start = qmath.mbqm_smaller_than_one(np.int64(-zi) << ADD_N_SHIFT, mi, ei)
    running = start + np.cumsum(scaled, axis=-1)
    if a["exclusive"]:
        running = np.concatenate([np.broadcast_to(start, running[..., :1].shape),
                                  running[..., :-1]], axis=-1)
    y = qmath.clamp(qmath.mbqm_smaller_than_one(running, mo, eo) + zo, -128, 127)
    if a["reverse"]:
        y = y[..., ::-1]
    return [np.moveaxis(y, -1, a["axis"]).astype(np.int8)]


# --------------------------------------------------------------------- div

def _clz_u32(v: np.ndarray) -> np.ndarray:
    """CountLeadingZeros of uint32 values (32 for 0)."""
    v = np.asarray(v, np.int64) & 0xFFFFFFFF
    out = np.full(v.shape, 32, np.int64)
    nz = v > 0
    out[nz] = 32 - np.floor(np.log2(v[nz])).astype(np.int64) - 1
    return out


def reciprocal_table() -> tuple[np.ndarray, np.ndarray]:
    """GetReciprocal(d, 31) for d = 0..255: (Q0.31 reciprocal, bits over unit);
    entry 0 is unused (TFLM divides by a nonzero value)."""
    d = np.arange(256, dtype=np.int64)
    headroom = _clz_u32(d)
    over_unit = 31 - headroom
    shifted = np.where(d > 0, ((d << headroom) & 0xFFFFFFFF) - (1 << 31), 0)
    return one_over_one_plus_x(shifted), over_unit


def count_leading_sign_bits(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.int64)
    return np.where(x >= 0, _clz_u32(x) - 1, _clz_u32(2 * np.abs(x) - 1))


def div_multiplier(s1: float, s2: float, s_out: float, node) -> tuple[int, int]:
    m, e = qmath.quantize_multiplier(float(np.float32(s1)) / (float(np.float32(s2))
                                                               * float(np.float32(s_out))))
    return m, e


def div_int8(x1: np.ndarray, x2: np.ndarray, z1: int, z2: int, zo: int, m: int, e: int,
             lo: int, hi: int) -> np.ndarray:
    """reference_ops::DivElementwise on int8: the divisor's reciprocal by
    GetReciprocal, the dividend normalized by its sign bits. A divisor at its
    zero point (real 0; TFLM asserts against it) reads the table's entry 0:
    some defined value, the same in the generated code."""
    a = x1.astype(np.int64) - z1
    d = x2.astype(np.int64) - z2
    a, d = np.where(d < 0, -a, a), np.abs(d)
    inv, over_unit = reciprocal_table()
    inv, over_unit = inv[np.clip(d, 0, 255)], over_unit[np.clip(d, 0, 255)]
    headroom = count_leading_sign_bits(a)
    unscaled = qmath.srdhm(qmath.wrap_int32(a << headroom), inv)
    right = over_unit + headroom - e
    # RoundingDivideByPOT by 32 bits or more is undefined in TFLM's C (x86 gives
    # the zero point + 1 for a zero dividend): the quotient rounds to 0 here
    y = np.where(right >= 32, 0, qmath.rdbpot(qmath.srdhm(unscaled, m),
                                              np.clip(right, 0, 31))) + zo
    return np.clip(y, lo, hi)


@register("tfl.div", infer=_binary_infer, pattern=Pattern.OPAQUE)
def div(call: Call, args):
    node = call.node
    s1, z1 = scale_zp(call.in_types[0], "input 0", node)
    s2, z2 = scale_zp(call.in_types[1], "input 1", node)
    so, zo = scale_zp(call.out_types[0], "the output", node)
    m, e = div_multiplier(s1, s2, so, node)
    x1, x2 = np.broadcast_arrays(args[0], args[1])
    y = div_int8(x1, x2, z1, z2, zo, m, e, call.attrs["act_min"], call.attrs["act_max"])
    return [y.reshape(call.out_types[0].shape).astype(np.int8)]


# ------------------------------------------------------------- log softmax

LOG_2, SQRT_SQRT_HALF, SQRT_HALF = 1488522236, 1805811301, 1518500250
LOG_ALPHA_N, LOG_ALPHA_D, LOG_ALPHA_I, LOG_ALPHA_F = 117049297, 127690142, 1057819769, 638450708


def _rounding_half_sum(a: int, b: int) -> int:
    s = a + b
    t = s + (1 if s >= 0 else -1)
    return t // 2 if t >= 0 else -((-t) // 2)


def _sat_shl_param(x: int, e: int) -> int:
    return x if e == 0 else int(qmath.satshl(np.int64(x), e))


def log_x_ge_1(z: int, in_bits: int = 12, out_bits: int = 5) -> int:
    """gemmlowp-style log_x_for_x_greater_than_or_equal_to_1<out_bits>(z in
    Q(in_bits)): TFLite's common.h, in Python integers."""
    acc_bits = out_bits + 1
    wrap = qmath.wrap_int32
    quarter = 536870912 >> acc_bits
    ha = 32 - int(z).bit_length()
    r_a = _sat_shl_param(int(qmath.srdhm(_sat_shl_param(z, ha - 1), SQRT_HALF)), 1)
    za_adj = min(max(_sat_shl_param(in_bits - ha, 31 - acc_bits) + quarter, -(1 << 31)),
                 (1 << 31) - 1)
    zb = int(qmath.srdhm(np.int64(z), SQRT_HALF))
    hb = 32 - zb.bit_length() - 1
    r_b = _sat_shl_param(z, hb)
    zb_adj = min(max(_sat_shl_param(in_bits - hb, 31 - acc_bits) - quarter, -(1 << 31)),
                 (1 << 31) - 1)
    r, adj = min(r_a, r_b), max(za_adj, zb_adj)
    p = _rounding_half_sum(r, SQRT_SQRT_HALF)
    q = int(wrap(r - SQRT_SQRT_HALF))
    q = int(wrap(q + q))
    cs = qmath.srdhm(q, q)
    num = wrap(qmath.srdhm(q, r) + qmath.srdhm(qmath.srdhm(q, cs), LOG_ALPHA_N))
    inner = wrap(wrap(LOG_ALPHA_I + q) + qmath.srdhm(LOG_ALPHA_D, cs))
    den = wrap(qmath.srdhm(p, inner) + qmath.srdhm(LOG_ALPHA_F, q))
    recip = one_over_one_plus_x(np.int64(den))
    total = wrap(qmath.srdhm(adj, LOG_2) + qmath.srdhm(qmath.rdbpot(num, acc_bits), recip))
    return int(qmath.satshl(total, 1))


def log_softmax_params(s_in: float):
    """(input multiplier, left shift, diff_min, reverse divisor, its shift):
    PreprocessLogSoftmaxScalingExp with beta 1 and 5 integer bits."""
    mult, left, diff_min = softmax_params(1.0, float(np.float32(s_in)))
    rdiv, rshift = qmath.quantize_multiplier_smaller_than_one((1 << (31 - left)) / float(mult))
    return mult, left, diff_min, rdiv, rshift


def _log_softmax_infer(sig: Sig):
    _require_int8(sig)
    return [_out_type(sig, sig.in_types[0].shape)]


@register("tfl.log_softmax", infer=_log_softmax_infer, pattern=Pattern.REDUCE)
def log_softmax(call: Call, args):
    """LogSoftmaxQuantized (int8, output scale 16/256, zero point 127): the
    row's exps summed in Q12, their log in Q5, each diff minus it in Q4.3."""
    s_in, _ = scale_zp(call.in_types[0], "the input", call.node)
    mult, left, diff_min, rdiv, rshift = log_softmax_params(s_in)
    x = args[0].astype(np.int64)
    rows = x.reshape(-1, x.shape[-1])
    out = np.empty_like(rows)
    for r, row in enumerate(rows):
        diff = row - row.max()
        q5 = qmath.mbqm(diff, mult, left)
        exps = qmath.rdbpot(qmath.exp_on_negative_values(q5, 5), 12)
        lg = log_x_ge_1(int(np.where(diff >= diff_min, exps, 0).sum()))
        adjusted = max(diff_min - 1, int(qmath.mbqm(np.int64(lg - (1 << 31)), rdiv, rshift)))
        y = np.clip(qmath.rdbpot(q5 - lg, 22) + 127, -128, 127)
        out[r] = np.where(diff > adjusted, y, -128)
    return [out.reshape(x.shape).astype(np.int8)]
