"""Neural-network ops: convolution, pooling, normalization, dense, softmax,
resize and depth/space rearrangement, with ONNX (opset 21) semantics.

Spatial ops take the `layout` extension (docs/ops.md): "NCHW" is ONNX's,
"NHWC" puts the channel axis last. References run in NCHW; NHWC inputs are
transposed in and out, which keeps one code path per op. Windows are taken
with stride tricks (sliding_window_view) and convolution is im2col + matmul,
so no reference loops over pixels or channels.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from aot.errors import ShapeError, UnsupportedError, node_label
from aot.ir.graph import TensorType
from aot.ops.registry import (Call, Layout, Pattern, Sig, Sink, inner_dim_macs,
                              per_weight_row_macs, register)

# Ops with the `layout` attribute: the layout pass makes them channels last.
CHANNELS_FIRST = Layout(channels_first=True)
# Softmax-like ops work along `axis` (default: the last), which moves with a Transpose.
ROW_AXIS = Layout(sink=Sink.AXIS, axis=-1)

FLOATS = ("float32", "float64", "float16")


# --------------------------------------------------------------------------
# Shared helpers


def _axis(sig_or_call, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise _fail(sig_or_call, f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def _fail(sig_or_call, msg: str) -> ShapeError:
    return ShapeError(f"{node_label(sig_or_call.node)}: {msg}")


def _unsupported(sig_or_call, msg: str):
    return UnsupportedError(f"{node_label(sig_or_call.node)}: {msg}")


def _float_input(sig: Sig, i: int, what: str = "input") -> TensorType:
    t = sig.in_types[i]
    if t is None:
        raise sig.fail(f"{what} {i} is required")
    if t.dtype not in FLOATS:
        raise _unsupported(sig, f"{what} {i} has dtype {t.dtype}; only float is supported")
    return t


def _dense_input(sig: Sig, i: int) -> TensorType:
    """MatMul/Gemm operands: float or the wide integer types ONNX allows."""
    t = sig.in_types[i]
    if t is None:
        raise sig.fail(f"input {i} is required")
    if t.dtype not in FLOATS + ("int32", "int64", "uint32", "uint64"):
        raise _unsupported(sig, f"input {i} has dtype {t.dtype}")
    return t


def _same_dtype(sig: Sig, *idx: int) -> None:
    """Float operands (data, weights, bias) must share one dtype."""
    dts = {sig.in_types[i].dtype for i in idx if sig.has(i)}
    if len(dts) > 1:
        raise sig.fail(f"inputs {list(idx)} mix dtypes {sorted(dts)}")


def layout_of(sig_or_call) -> str:
    layout = sig_or_call.attrs.get("layout", "NCHW")
    if layout not in ("NCHW", "NHWC"):
        raise _unsupported(sig_or_call, f"layout {layout!r} (expected NCHW or NHWC)")
    return layout


def nchw_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """An activation shape seen in NCHW order."""
    if layout == "NHWC":
        return (shape[0], shape[-1]) + tuple(shape[1:-1])
    return tuple(shape)


def _from_nchw_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    if layout == "NHWC":
        return (shape[0],) + tuple(shape[2:]) + (shape[1],)
    return tuple(shape)


def to_nchw(x: np.ndarray, layout: str) -> np.ndarray:
    if layout == "NHWC":
        return np.moveaxis(x, -1, 1)
    return x


def from_nchw(x: np.ndarray, layout: str) -> np.ndarray:
    if layout == "NHWC":
        return np.ascontiguousarray(np.moveaxis(x, 1, -1))
    return x


def _ints(sig_or_call, name: str, n: int, default: int) -> tuple[int, ...]:
    v = sig_or_call.attrs.get(name)
    if v is None:
        return (default,) * n
    v = tuple(int(e) for e in np.atleast_1d(v))
    if len(v) != n:
        raise _fail(sig_or_call, f"{name} has {len(v)} entries, expected {n} (one per spatial dim)")
    return v


@dataclass(frozen=True)
class Window:
    """A resolved sliding window over the spatial dims."""
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pad_begin: tuple[int, ...]
    pad_end: tuple[int, ...]       # explicit padding (what count_include_pad counts)
    out: tuple[int, ...]

    @property
    def extent(self) -> tuple[int, ...]:
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations))

    def extra_end(self, spatial: tuple[int, ...]) -> tuple[int, ...]:
        """Padding beyond pad_end that ceil_mode windows read (never counted)."""
        return tuple(max(0, (o - 1) * s + e - (i + b + p))
                     for o, s, e, i, b, p in zip(self.out, self.strides, self.extent,
                                                 spatial, self.pad_begin, self.pad_end))


def resolve_window(sig_or_call, spatial: tuple[int, ...], kernel: tuple[int, ...],
                   ceil_mode: bool = False) -> Window:
    """Strides, dilations, pads and output size of a conv/pool window (ONNX rules)."""
    n = len(spatial)
    strides = _ints(sig_or_call, "strides", n, 1)
    dilations = _ints(sig_or_call, "dilations", n, 1)
    if any(s < 1 for s in strides) or any(d < 1 for d in dilations) or any(k < 1 for k in kernel):
        raise _fail(sig_or_call, f"kernel {list(kernel)}, strides {list(strides)} and "
                                 f"dilations {list(dilations)} must be positive")
    extent = tuple((k - 1) * d + 1 for k, d in zip(kernel, dilations))
    auto_pad = sig_or_call.attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = tuple(-(-i // s) for i, s in zip(spatial, strides))
        total = [max(0, (o - 1) * s + e - i) for o, s, e, i in zip(out, strides, extent, spatial)]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        begin, end = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
        return Window(kernel, strides, dilations, tuple(begin), tuple(end), out)
    if auto_pad == "VALID":
        begin = end = (0,) * n
    elif auto_pad == "NOTSET":
        pads = _ints(sig_or_call, "pads", 2 * n, 0)
        if any(p < 0 for p in pads):
            raise _unsupported(sig_or_call, f"negative pads {list(pads)}")
        begin, end = pads[:n], pads[n:]
    else:
        raise _unsupported(sig_or_call, f"auto_pad {auto_pad!r}")
    out = []
    for i, b, p, e, s in zip(spatial, begin, end, extent, strides):
        span = i + b + p - e
        if span < 0:
            raise _fail(sig_or_call, f"window extent {e} is larger than the padded input "
                                     f"{i + b + p} (spatial dims {list(spatial)})")
        o = (-(-span // s) if ceil_mode else span // s) + 1
        # A ceil_mode window may not start inside the end padding.
        if ceil_mode and (o - 1) * s >= i + b:
            o -= 1
        out.append(o)
    return Window(kernel, strides, dilations, tuple(begin), tuple(end), tuple(out))


def window_view(x: np.ndarray, win: Window, fill: float) -> np.ndarray:
    """View [N, C, *out, *kernel] of the (padded) NCHW input's windows."""
    n = len(win.kernel)
    spatial = x.shape[2:]
    extra = win.extra_end(spatial)
    pad = [(0, 0), (0, 0)] + [(b, p + x_) for b, p, x_ in zip(win.pad_begin, win.pad_end, extra)]
    if any(b or e for b, e in pad):
        x = np.pad(x, pad, constant_values=fill)
    axes = tuple(range(2, 2 + n))
    v = sliding_window_view(x, win.extent, axis=axes)
    sl = (slice(None), slice(None))
    sl += tuple(slice(None, (o - 1) * s + 1, s) for o, s in zip(win.out, win.strides))
    sl += tuple(slice(None, None, d) for d in win.dilations)
    return v[sl]


# --------------------------------------------------------------------------
# Conv


def conv_output_shape(sig: Sig, x: TensorType, w: TensorType) -> tuple[int, ...]:
    """The output shape of a convolution of x by w (Conv, QLinearConv,
    ConvInteger), in the node's layout, after checking ranks, channels,
    groups and kernel_shape against each other."""
    layout = layout_of(sig)
    if len(x.shape) < 3 or len(x.shape) != len(w.shape):
        raise sig.fail(f"input {x} and weight {w} must have the same rank >= 3")
    nsp = len(x.shape) - 2
    if nsp > 3:
        raise _unsupported(sig, f"{nsp}-D convolution (1-D to 3-D are supported)")
    xs = nchw_shape(x.shape, layout)
    # The weight in ONNX order [O, I/group, k...].
    ws = (w.shape[0], w.shape[-1]) + tuple(w.shape[1:-1]) if layout == "NHWC" else w.shape
    group = int(sig.attrs.get("group", 1))
    c = xs[1]
    if group < 1 or c % group or ws[0] % group:
        raise sig.fail(f"group {group} must divide input channels {c} and output channels {ws[0]}")
    if ws[1] * group != c:
        raise sig.fail(f"weight expects {ws[1] * group} input channels "
                       f"({ws[1]} per group x {group} groups), input has {c}")
    kernel = tuple(ws[2:])
    ks = sig.attrs.get("kernel_shape")
    if ks is not None and tuple(int(k) for k in ks) != kernel:
        raise sig.fail(f"kernel_shape {list(ks)} differs from the weight's {list(kernel)}")
    win = resolve_window(sig, tuple(xs[2:]), kernel)
    return _from_nchw_shape((xs[0], ws[0]) + win.out, layout)


def _conv_infer(sig: Sig):
    x = _float_input(sig, 0)
    w = _float_input(sig, 1, "weight")
    _same_dtype(sig, 0, 1, 2)
    shape = conv_output_shape(sig, x, w)
    o = w.shape[0]
    if sig.has(2) and sig.in_types[2].shape != (o,):
        raise sig.fail(f"bias shape {list(sig.in_types[2].shape)} must be [{o}]")
    return [TensorType(shape, x.dtype)]


def conv_nchw(x: np.ndarray, w: np.ndarray, bias, win: Window, group: int) -> np.ndarray:
    """Grouped N-D convolution by im2col + batched matmul. x NCHW, w [O, I/g, k...]."""
    n, c = x.shape[:2]
    o = w.shape[0]
    cg, og = c // group, o // group
    nsp = x.ndim - 2
    cols = window_view(x, win, 0.0)                   # [N, C, *out, *k]
    cols = cols.reshape((n, group, cg) + cols.shape[2:])
    # -> [N, g, *out, cg, *k], flattened to [N, g, P, cg*K]
    order = (0, 1) + tuple(range(3, 3 + nsp)) + (2,) + tuple(range(3 + nsp, 3 + 2 * nsp))
    cols = cols.transpose(order)
    p = int(np.prod(win.out))
    kk = cg * int(np.prod(win.kernel))
    cols = cols.reshape(n, group, p, kk)
    wm = w.reshape(group, og, kk).transpose(0, 2, 1)   # [g, cg*K, og]
    y = np.matmul(cols, wm)                            # [N, g, P, og]
    y = y.transpose(0, 1, 3, 2).reshape((n, o) + win.out)
    if bias is not None:
        y = y + bias.reshape((1, o) + (1,) * nsp)
    return y


@register("Conv", infer=_conv_infer, pattern=Pattern.OUT_ELEMWISE_FUSABLE,
          macs=per_weight_row_macs(1), layout=Layout(channels_first=True, weighted=True))
def _conv(call: Call, args):
    x, w, b = (list(args) + [None])[:3]
    layout = layout_of(call)
    if layout == "NHWC":
        w = np.moveaxis(w, -1, 1)
    xn = to_nchw(x, layout)
    win = resolve_window(call, tuple(xn.shape[2:]), tuple(w.shape[2:]))
    y = conv_nchw(xn, w, b, win, int(call.attrs.get("group", 1)))
    return [from_nchw(y.astype(x.dtype, copy=False), layout)]


# --------------------------------------------------------------------------
# ConvTranspose


def convt_geometry(sig_or_call, xs, ws):
    """Kernel, strides, dilations, pads (begin, end) and output spatial size."""
    nsp = len(xs) - 2
    kernel = tuple(ws[2:])
    strides = _ints(sig_or_call, "strides", nsp, 1)
    dil = _ints(sig_or_call, "dilations", nsp, 1)
    opad = _ints(sig_or_call, "output_padding", nsp, 0)
    if any(s < 1 for s in strides) or any(d < 1 for d in dil):
        raise _fail(sig_or_call, "strides and dilations must be positive")
    extent = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    full = [s * (i - 1) + op + e for s, i, op, e in zip(strides, xs[2:], opad, extent)]
    auto_pad = sig_or_call.attrs.get("auto_pad", "NOTSET")
    oshape = sig_or_call.attrs.get("output_shape")
    if auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise _unsupported(sig_or_call, f"auto_pad {auto_pad!r}")
    if oshape is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        oshape = tuple(i * s for i, s in zip(xs[2:], strides))
    if oshape is not None:
        oshape = tuple(int(v) for v in oshape)
        if len(oshape) == nsp + 2:
            oshape = oshape[2:]
        if len(oshape) != nsp:
            raise _fail(sig_or_call, f"output_shape {list(oshape)} must list {nsp} spatial dims")
        # A negative total (output_shape past the full output) pads with zeros.
        total = [f - o for f, o in zip(full, oshape)]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        begin, end = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
        return kernel, strides, dil, tuple(begin), tuple(end), oshape
    pads = (0,) * (2 * nsp) if auto_pad == "VALID" else _ints(sig_or_call, "pads", 2 * nsp, 0)
    begin, end = pads[:nsp], pads[nsp:]
    out = tuple(f - b - e for f, b, e in zip(full, begin, end))
    if any(o < 1 for o in out):
        raise _fail(sig_or_call, f"pads {list(pads)} leave an empty output {list(out)}")
    return kernel, strides, dil, tuple(begin), tuple(end), out


def _convt_infer(sig: Sig):
    x = _float_input(sig, 0)
    w = _float_input(sig, 1, "weight")
    _same_dtype(sig, 0, 1, 2)
    layout = layout_of(sig)
    if len(x.shape) < 3 or len(x.shape) != len(w.shape):
        raise sig.fail(f"input {x} and weight {w} must have the same rank >= 3")
    xs = nchw_shape(x.shape, layout)
    # NHWC weight is [I, k..., O/group]; NCHW is ONNX's [I, O/group, k...].
    ws = (w.shape[0], w.shape[-1]) + tuple(w.shape[1:-1]) if layout == "NHWC" else w.shape
    group = int(sig.attrs.get("group", 1))
    if group < 1 or xs[1] % group or ws[0] != xs[1]:
        raise sig.fail(f"weight has {ws[0]} input channels, input has {xs[1]} (group {group})")
    o = ws[1] * group
    if sig.has(2) and sig.in_types[2].shape != (o,):
        raise sig.fail(f"bias shape {list(sig.in_types[2].shape)} must be [{o}]")
    *_, out = convt_geometry(sig, xs, ws)
    return [TensorType(_from_nchw_shape((xs[0], o) + tuple(out), layout), x.dtype)]


def _convt_macs(call: Call) -> int:
    # Each input element scatters into O/group x kernel outputs (weight [I, ...]).
    w = call.in_types[1]
    return call.in_types[0].size * (w.size // w.shape[0])


@register("ConvTranspose", infer=_convt_infer, pattern=Pattern.OUT_ELEMWISE_FUSABLE,
          macs=_convt_macs, layout=Layout(channels_first=True, weighted=True))
def _conv_transpose(call: Call, args):
    x, w, b = (list(args) + [None])[:3]
    layout = layout_of(call)
    if layout == "NHWC":
        w = np.moveaxis(w, -1, 1)
    xn = to_nchw(x, layout)
    kernel, strides, dil, begin, end, out = convt_geometry(call, xn.shape, w.shape)
    group = int(call.attrs.get("group", 1))
    n, c = xn.shape[:2]
    cg, og = c // group, w.shape[1]
    nsp = xn.ndim - 2
    insp = xn.shape[2:]
    # cols[n, g, og, *k, *in] = sum_c x[n, g, c, *in] * w[g, c, og, *k]
    xg = xn.reshape((n, group, cg, -1))
    wg = w.reshape((group, cg, og * int(np.prod(kernel))))
    cols = np.matmul(wg.transpose(0, 2, 1)[None], xg)   # [N, g, og*K, P]
    cols = cols.reshape((n, group * og) + tuple(kernel) + tuple(insp))
    # Scatter each kernel tap into the full output, then crop the pads.
    full = [s * (i - 1) + (k - 1) * d + 1 for s, i, k, d in zip(strides, insp, kernel, dil)]
    # The output window [begin, begin + out) may reach outside the taps'
    # span (output_padding, negative pads): those positions stay zero.
    lo = [min(0, b_) for b_ in begin]
    size = [max(f, b_ + o) - l_ for f, b_, o, l_ in zip(full, begin, out, lo)]
    y = np.zeros((n, group * og) + tuple(size), dtype=np.float32)
    for tap in np.ndindex(*kernel):
        sl = (slice(None), slice(None)) + tuple(
            slice(t * d - l_, t * d - l_ + (i - 1) * s + 1, s)
            for t, d, i, s, l_ in zip(tap, dil, insp, strides, lo))
        y[sl] += cols[(slice(None), slice(None)) + tap]
    y = y[(slice(None), slice(None)) + tuple(slice(b_ - l_, b_ - l_ + o)
                                             for b_, o, l_ in zip(begin, out, lo))]
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * nsp)
    return [from_nchw(y.astype(x.dtype, copy=False), layout)]


# --------------------------------------------------------------------------
# Pooling


def pool_infer_common(sig: Sig):
    x = sig.in_types[0]
    if x.dtype not in FLOATS and not (sig.node.op == "MaxPool" and x.dtype in ("int8", "uint8")):
        raise _unsupported(sig, f"input dtype {x.dtype}")
    layout = layout_of(sig)
    if len(x.shape) < 3:
        raise sig.fail(f"input {x} must have rank >= 3 (N, C, spatial...)")
    xs = nchw_shape(x.shape, layout)
    nsp = len(xs) - 2
    ks = sig.attrs.get("kernel_shape")
    if ks is None:
        raise sig.fail("kernel_shape is required")
    kernel = tuple(int(k) for k in ks)
    if len(kernel) != nsp:
        raise sig.fail(f"kernel_shape {list(kernel)} must have {nsp} entries")
    win = resolve_window(sig, tuple(xs[2:]), kernel, bool(sig.attrs.get("ceil_mode", 0)))
    out = _from_nchw_shape(xs[:2] + win.out, layout)
    return x, layout, win, out


def _pool_infer(sig: Sig):
    x, _, _, out = pool_infer_common(sig)
    return [TensorType(out, x.dtype)]


def _maxpool_infer(sig: Sig):
    x, layout, _, out = pool_infer_common(sig)
    so = int(sig.attrs.get("storage_order", 0))
    if so not in (0, 1):
        raise sig.fail(f"storage_order {so} must be 0 or 1")
    if len(sig.node.outputs) > 1 and sig.node.outputs[1] and layout != "NCHW":
        raise _unsupported(sig, "the Indices output with layout NHWC")
    return [TensorType(out, x.dtype, sig.in_types[0].quant), TensorType(out, "int64")]


def pool_setup(call: Call, x: np.ndarray):
    layout = layout_of(call)
    xn = to_nchw(x, layout)
    kernel = tuple(int(k) for k in call.attrs["kernel_shape"])
    win = resolve_window(call, tuple(xn.shape[2:]), kernel, bool(call.attrs.get("ceil_mode", 0)))
    return layout, xn, win


def kernel_axes(nsp: int) -> tuple[int, ...]:
    return tuple(range(2 + nsp, 2 + 2 * nsp))


def _maxpool_indices(call: Call, v: np.ndarray, win: Window, shape) -> np.ndarray:
    """Flat NCHW index of each window's first maximum (ONNX's Indices)."""
    nsp = len(win.kernel)
    flat = v.reshape(v.shape[:2 + nsp] + (-1,))
    tap = np.argmax(flat, axis=-1)                          # row-major over the kernel
    taps = np.unravel_index(tap, win.kernel)
    coords = []
    for a in range(nsp):
        o = np.arange(win.out[a]).reshape((-1,) + (1,) * (nsp - 1 - a))
        coords.append(o * win.strides[a] - win.pad_begin[a] + taps[a] * win.dilations[a])
    spatial = shape[2:]
    if int(call.attrs.get("storage_order", 0)) == 1:
        pos = np.ravel_multi_index(coords, spatial, order="F", mode="clip")
    else:
        pos = np.ravel_multi_index(coords, spatial, mode="clip")
    nc = np.arange(shape[0] * shape[1]).reshape(shape[:2] + (1,) * nsp)
    return (nc * int(np.prod(spatial)) + pos).astype(np.int64)


@register("MaxPool", infer=_maxpool_infer, pattern=Pattern.REDUCE,
          layout=CHANNELS_FIRST)
def _maxpool(call: Call, args):
    x = args[0]
    layout, xn, win = pool_setup(call, x)
    fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    v = window_view(xn, win, fill)
    y = v.max(axis=kernel_axes(len(win.kernel)))
    outs = [from_nchw(y, layout)]
    if len(call.node.outputs) > 1:
        outs.append(_maxpool_indices(call, v, win, xn.shape))
    return outs


def _maxunpool_infer(sig: Sig):
    x = _float_input(sig, 0)
    idx = sig.in_types[1]
    if idx is None or idx.shape != x.shape or idx.dtype != "int64":
        raise sig.fail(f"indices {idx} must be int64 with the input's shape {list(x.shape)}")
    nsp = len(x.shape) - 2
    if sig.has(2):
        out = tuple(int(v) for v in sig.const(2))
        if len(out) != len(x.shape):
            raise sig.fail(f"output_shape {list(out)} must have rank {len(x.shape)}")
        return [TensorType(out, x.dtype)]
    kernel = _ints(sig, "kernel_shape", nsp, 0)
    strides = _ints(sig, "strides", nsp, 1)
    pads = _ints(sig, "pads", 2 * nsp, 0)
    sp = tuple((i - 1) * s + k - pads[a] - pads[nsp + a]
               for a, (i, s, k) in enumerate(zip(x.shape[2:], strides, kernel)))
    return [TensorType(tuple(x.shape[:2]) + sp, x.dtype)]


@register("MaxUnpool", infer=_maxunpool_infer, pattern=Pattern.OPAQUE)
def _maxunpool(call: Call, args):
    x, idx = args[0], args[1]
    shape = call.out_types[0].shape
    size = int(np.prod(shape))
    flat = idx.reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= size):
        raise _fail(call, f"indices fall outside the output of {size} elements")
    y = np.zeros(size, dtype=x.dtype)
    y[flat] = x.reshape(-1)
    return [y.reshape(shape)]


def window_counts(win: Window, spatial, include_pad: bool) -> np.ndarray:
    """How many taps of each output window fall inside the (padded) input.

    The count is separable over the spatial axes, so it is an outer product
    of one vector per axis.
    """
    total = np.ones((), dtype=np.float64)
    for a, size in enumerate(spatial):
        lo, hi = (-win.pad_begin[a], size + win.pad_end[a]) if include_pad else (0, size)
        pos = (np.arange(win.out[a])[:, None] * win.strides[a] - win.pad_begin[a]
               + np.arange(win.kernel[a])[None, :] * win.dilations[a])
        cnt = ((pos >= lo) & (pos < hi)).sum(axis=1).astype(np.float64)
        total = np.multiply.outer(total, cnt)
    return total


@register("AveragePool", infer=_pool_infer, pattern=Pattern.REDUCE,
          layout=CHANNELS_FIRST)
def _avgpool(call: Call, args):
    x = args[0]
    layout, xn, win = pool_setup(call, x)
    v = window_view(xn, win, 0.0)
    s = v.sum(axis=kernel_axes(len(win.kernel)), dtype=np.float64)
    cnt = window_counts(win, xn.shape[2:], bool(call.attrs.get("count_include_pad", 0)))
    y = (s / np.maximum(cnt, 1)).astype(x.dtype)
    return [from_nchw(y, layout)]


@register("LpPool", infer=_pool_infer, pattern=Pattern.REDUCE,
          layout=CHANNELS_FIRST)
def _lppool(call: Call, args):
    x = args[0]
    p = float(call.attrs.get("p", 2))
    layout, xn, win = pool_setup(call, x)
    v = window_view(np.abs(xn).astype(np.float64), win, 0.0)
    y = np.power(np.power(v, p).sum(axis=kernel_axes(len(win.kernel))), 1.0 / p)
    return [from_nchw(y.astype(x.dtype), layout)]


def global_infer(sig: Sig):
    x = sig.in_types[0]
    ints = ("int8", "uint8") if sig.node.op == "GlobalMaxPool" else ()
    if x.dtype not in FLOATS + ints:
        raise _unsupported(sig, f"input dtype {x.dtype}")
    layout = layout_of(sig)
    if len(x.shape) < 3:
        raise sig.fail(f"input {x} must have rank >= 3 (N, C, spatial...)")
    xs = nchw_shape(x.shape, layout)
    return [TensorType(_from_nchw_shape(xs[:2] + (1,) * (len(xs) - 2), layout), x.dtype,
                       sig.in_types[0].quant if sig.node.op == "GlobalMaxPool" else None)]


def _spatial_axes(x: np.ndarray, layout: str) -> tuple[int, ...]:
    return tuple(range(1, x.ndim - 1)) if layout == "NHWC" else tuple(range(2, x.ndim))


@register("GlobalAveragePool", infer=global_infer, pattern=Pattern.REDUCE,
          layout=CHANNELS_FIRST)
def _gap(call: Call, args):
    x = args[0]
    axes = _spatial_axes(x, layout_of(call))
    return [x.mean(axis=axes, keepdims=True, dtype=np.float64).astype(x.dtype)]


@register("GlobalMaxPool", infer=global_infer, pattern=Pattern.REDUCE,
          layout=CHANNELS_FIRST)
def _gmp(call: Call, args):
    x = args[0]
    return [x.max(axis=_spatial_axes(x, layout_of(call)), keepdims=True)]


@register("GlobalLpPool", infer=global_infer, pattern=Pattern.REDUCE,
          layout=CHANNELS_FIRST)
def _glp(call: Call, args):
    x = args[0]
    p = float(call.attrs.get("p", 2))
    axes = _spatial_axes(x, layout_of(call))
    y = np.power(np.power(np.abs(x.astype(np.float64)), p).sum(axis=axes, keepdims=True), 1 / p)
    return [y.astype(x.dtype)]


# --------------------------------------------------------------------------
# Normalization


def _channel_param(sig: Sig, i: int, c: int, what: str):
    t = sig.in_types[i] if sig.has(i) else None
    if t is None:
        raise sig.fail(f"{what} (input {i}) is required")
    if t.shape != (c,):
        raise sig.fail(f"{what} shape {list(t.shape)} must be [{c}] (one per channel)")


def _bn_infer(sig: Sig):
    x = _float_input(sig, 0)
    layout = layout_of(sig)
    if len(x.shape) < 2:
        raise sig.fail(f"input {x} must have rank >= 2")
    c = nchw_shape(x.shape, layout)[1]
    for i, what in enumerate(("scale", "B", "input_mean", "input_var"), start=1):
        _channel_param(sig, i, c, what)
    training = int(sig.attrs.get("training_mode", 0))
    if not training and len(sig.node.outputs) > 1 and any(sig.node.outputs[1:]):
        raise sig.fail("running_mean/running_var outputs need training_mode=1")
    stat = TensorType((c,), x.dtype)
    return [TensorType(x.shape, x.dtype), stat, stat]


def _channel_shape(x: np.ndarray, layout: str) -> tuple[int, ...]:
    """Shape that broadcasts a per-channel vector against x."""
    if layout == "NHWC":
        return (-1,)
    return (1, -1) + (1,) * (x.ndim - 2)


# Its scale, bias, mean and variance are per channel, not broadcast operands.
@register("BatchNormalization", infer=_bn_infer, pattern=Pattern.BROADCAST,
          layout=Layout(channels_first=True, sink=Sink.STAY))
def _batchnorm(call: Call, args):
    x, scale, bias, mean, var = args[:5]
    eps = float(call.attrs.get("epsilon", 1e-5))
    layout = layout_of(call)
    shp = _channel_shape(x, layout)
    outs = []
    if int(call.attrs.get("training_mode", 0)):
        # Training mode normalizes with the batch statistics (population
        # variance) and also returns the updated running statistics.
        axes = tuple(a for a in range(x.ndim) if a != (x.ndim - 1 if layout == "NHWC" else 1))
        bmean = x.mean(axis=axes, dtype=np.float64)
        bvar = x.astype(np.float64).var(axis=axes)
        mom = float(call.attrs.get("momentum", 0.9))
        outs = [(mean * mom + bmean * (1 - mom)).astype(x.dtype),
                (var * mom + bvar * (1 - mom)).astype(x.dtype)]
        y = (x - bmean.reshape(shp)) / np.sqrt(bvar.reshape(shp) + eps) * scale.reshape(shp) \
            + bias.reshape(shp)
        return [y.astype(x.dtype)] + outs
    f = (scale / np.sqrt(var.astype(np.float32) + np.float32(eps))).astype(np.float32)
    y = (x - mean.reshape(shp)) * f.reshape(shp) + bias.reshape(shp)
    return [y.astype(x.dtype)]


def _instnorm_infer(sig: Sig):
    x = _float_input(sig, 0)
    layout = layout_of(sig)
    if len(x.shape) < 3:
        raise sig.fail(f"input {x} must have rank >= 3")
    c = nchw_shape(x.shape, layout)[1]
    _channel_param(sig, 1, c, "scale")
    _channel_param(sig, 2, c, "B")
    return [TensorType(x.shape, x.dtype)]


@register("InstanceNormalization", infer=_instnorm_infer, pattern=Pattern.OPAQUE,
          layout=CHANNELS_FIRST)
def _instnorm(call: Call, args):
    x, scale, bias = args[:3]
    layout = layout_of(call)
    eps = float(call.attrs.get("epsilon", 1e-5))
    axes = _spatial_axes(x, layout)
    xd = x.astype(np.float64)
    mean = xd.mean(axis=axes, keepdims=True)
    var = ((xd - mean) ** 2).mean(axis=axes, keepdims=True)
    shp = _channel_shape(x, layout)
    y = (xd - mean) / np.sqrt(var + eps) * scale.reshape(shp) + bias.reshape(shp)
    return [y.astype(x.dtype)]


def _layernorm_infer(sig: Sig):
    x = _float_input(sig, 0)
    rank = len(x.shape)
    axis = _axis(sig, int(sig.attrs.get("axis", -1)), rank)
    norm_shape = x.shape[axis:]
    for i, what in ((1, "Scale"), (2, "B")):
        if sig.has(i):
            t = sig.in_types[i]
            if np.broadcast_shapes(t.shape, norm_shape) != norm_shape:
                raise sig.fail(f"{what} shape {list(t.shape)} does not broadcast to "
                               f"the normalized shape {list(norm_shape)}")
        elif i == 1:
            raise sig.fail("Scale (input 1) is required")
    stat = TensorType(x.shape[:axis] + (1,) * (rank - axis), "float32")
    return [TensorType(x.shape, x.dtype), stat, stat]


@register("LayerNormalization", infer=_layernorm_infer, pattern=Pattern.OPAQUE)
def _layernorm(call: Call, args):
    x, scale = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    axis = int(call.attrs.get("axis", -1)) % x.ndim
    eps = float(call.attrs.get("epsilon", 1e-5))
    axes = tuple(range(axis, x.ndim))
    xd = x.astype(np.float64)
    mean = xd.mean(axis=axes, keepdims=True)
    var = ((xd - mean) ** 2).mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + eps)
    y = (xd - mean) * inv * scale
    if bias is not None:
        y = y + bias
    return [y.astype(x.dtype), mean.astype(np.float32), inv.astype(np.float32)]


def _groupnorm_infer(sig: Sig):
    x = _float_input(sig, 0)
    if len(x.shape) < 3:
        raise sig.fail(f"input {x} must have rank >= 3")
    c = x.shape[1]
    g = int(sig.attrs.get("num_groups", 0))
    if g < 1 or c % g:
        raise sig.fail(f"num_groups {g} must divide the {c} channels")
    _channel_param(sig, 1, c, "scale")
    _channel_param(sig, 2, c, "bias")
    return [TensorType(x.shape, x.dtype)]


@register("GroupNormalization", infer=_groupnorm_infer, pattern=Pattern.OPAQUE)
def _groupnorm(call: Call, args):
    x, scale, bias = args[:3]
    g = int(call.attrs["num_groups"])
    eps = float(call.attrs.get("epsilon", 1e-5))
    xg = x.astype(np.float64).reshape((x.shape[0], g, -1))
    mean = xg.mean(axis=2, keepdims=True)
    var = xg.var(axis=2, keepdims=True)
    y = ((xg - mean) / np.sqrt(var + eps)).reshape(x.shape)
    shp = (1, -1) + (1,) * (x.ndim - 2)
    return [(y * scale.reshape(shp) + bias.reshape(shp)).astype(x.dtype)]


def _rmsnorm_infer(sig: Sig):
    x = _float_input(sig, 0)
    axis = _axis(sig, int(sig.attrs.get("axis", -1)), len(x.shape))
    norm_shape = x.shape[axis:]
    t = sig.in_types[1] if sig.has(1) else None
    if t is None or np.broadcast_shapes(t.shape, norm_shape) != norm_shape:
        raise sig.fail(f"scale {t} must broadcast to the normalized shape {list(norm_shape)}")
    return [TensorType(x.shape, x.dtype)]


@register("RMSNormalization", infer=_rmsnorm_infer, pattern=Pattern.OPAQUE)
def _rmsnorm(call: Call, args):
    x, scale = args[0], args[1]
    axis = int(call.attrs.get("axis", -1)) % x.ndim
    eps = float(call.attrs.get("epsilon", 1e-5))
    xd = x.astype(np.float64)
    ms = (xd * xd).mean(axis=tuple(range(axis, x.ndim)), keepdims=True)
    return [(xd / np.sqrt(ms + eps) * scale).astype(x.dtype)]


def _mvn_infer(sig: Sig):
    x = _float_input(sig, 0)
    for a in sig.attrs.get("axes", (0, 2, 3)):
        _axis(sig, int(a), len(x.shape))
    return [TensorType(x.shape, x.dtype)]


@register("MeanVarianceNormalization", infer=_mvn_infer, pattern=Pattern.OPAQUE)
def _mvn(call: Call, args):
    x = args[0]
    axes = tuple(int(a) % x.ndim for a in call.attrs.get("axes", (0, 2, 3)))
    xd = x.astype(np.float64)
    mean = xd.mean(axis=axes, keepdims=True)
    # ONNX's definition: sqrt(E[x^2] - E[x]^2) + 1e-9.
    std = np.sqrt(np.maximum((xd * xd).mean(axis=axes, keepdims=True) - mean * mean, 0))
    return [((xd - mean) / (std + 1e-9)).astype(x.dtype)]


def _lrn_infer(sig: Sig):
    x = _float_input(sig, 0)
    layout_of(sig)
    if len(x.shape) < 3:
        raise sig.fail(f"input {x} must have rank >= 3")
    size = sig.attrs.get("size")
    if size is None or int(size) < 1:
        raise sig.fail(f"size must be a positive integer, got {size}")
    return [TensorType(x.shape, x.dtype)]


@register("LRN", infer=_lrn_infer, pattern=Pattern.OPAQUE,
          layout=CHANNELS_FIRST)
def _lrn(call: Call, args):
    x = args[0]
    layout = layout_of(call)
    size = int(call.attrs["size"])
    alpha = float(call.attrs.get("alpha", 1e-4))
    beta = float(call.attrs.get("beta", 0.75))
    bias = float(call.attrs.get("bias", 1.0))
    xn = to_nchw(x, layout).astype(np.float64)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = np.pad(xn * xn, [(0, 0), (lo, hi)] + [(0, 0)] * (xn.ndim - 2))
    # Windowed channel sums from a cumulative sum (no loop over channels).
    cs = np.cumsum(np.concatenate([np.zeros_like(sq[:, :1]), sq], axis=1), axis=1)
    c = xn.shape[1]
    ssum = cs[:, size:size + c] - cs[:, :c]
    y = xn / np.power(bias + alpha / size * ssum, beta)
    return [from_nchw(y.astype(x.dtype), layout)]


# --------------------------------------------------------------------------
# Dense


def _gemm_infer(sig: Sig):
    a = _dense_input(sig, 0)
    b = _dense_input(sig, 1)
    _same_dtype(sig, 0, 1, 2)
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise sig.fail(f"A {a} and B {b} must be 2-D")
    m, k = a.shape[::-1] if int(sig.attrs.get("transA", 0)) else a.shape
    k2, n = b.shape[::-1] if int(sig.attrs.get("transB", 0)) else b.shape
    if k != k2:
        raise sig.fail(f"inner dimensions differ: A gives K={k}, B gives K={k2}")
    if sig.has(2):
        c = sig.in_types[2]
        try:
            if np.broadcast_shapes(c.shape, (m, n)) != (m, n):
                raise ValueError
        except ValueError:
            raise sig.fail(f"C shape {list(c.shape)} does not broadcast to [{m}, {n}]") from None
    return [TensorType((m, n), a.dtype)]


def _gemm_macs(call: Call) -> int:
    a = call.in_types[0].shape
    return call.out_types[0].size * (a[0] if int(call.attrs.get("transA", 0)) else a[1])


@register("Gemm", infer=_gemm_infer, pattern=Pattern.OUT_ELEMWISE_FUSABLE, macs=_gemm_macs)
def _gemm(call: Call, args):
    a, b = args[0], args[1]
    c = args[2] if len(args) > 2 else None
    if int(call.attrs.get("transA", 0)):
        a = a.T
    if int(call.attrs.get("transB", 0)):
        b = b.T
    alpha = float(call.attrs.get("alpha", 1.0))
    beta = float(call.attrs.get("beta", 1.0))
    y = np.matmul(a, b)
    if alpha != 1.0:
        y = y * (np.float32(alpha) if y.dtype.kind == "f" else alpha)
    if c is not None and beta != 0.0:
        y = y + (c * (np.float32(beta) if c.dtype.kind == "f" else beta) if beta != 1.0 else c)
    return [y.astype(call.out_types[0].dtype, copy=False)]


def matmul_shape(sig: Sig, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """numpy.matmul's output shape, or a ShapeError."""
    if not a or not b:
        raise sig.fail("MatMul operands must have rank >= 1")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise sig.fail(f"inner dimensions differ: {list(a)} x {list(b)}")
    try:
        batch = np.broadcast_shapes(a2[:-2], b2[:-2])
    except ValueError:
        raise sig.fail(f"batch dimensions of {list(a)} and {list(b)} do not broadcast") from None
    out = tuple(batch) + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _matmul_infer(sig: Sig):
    a = _dense_input(sig, 0)
    b = _dense_input(sig, 1)
    _same_dtype(sig, 0, 1)
    return [TensorType(matmul_shape(sig, a.shape, b.shape), a.dtype)]


@register("MatMul", infer=_matmul_infer, pattern=Pattern.OUT_ELEMWISE_FUSABLE,
          macs=inner_dim_macs(0))
def _matmul(call: Call, args):
    return [np.matmul(args[0], args[1]).astype(call.out_types[0].dtype, copy=False)]


# --------------------------------------------------------------------------
# Softmax


def _softmax_infer(sig: Sig):
    x = _float_input(sig, 0)
    _axis(sig, int(sig.attrs.get("axis", -1)), max(len(x.shape), 1))
    return [TensorType(x.shape, x.dtype)]


def _softmax_parts(call: Call, x: np.ndarray):
    axis = int(call.attrs.get("axis", -1)) % max(x.ndim, 1)
    xd = x.astype(np.float64)
    z = xd - xd.max(axis=axis, keepdims=True)
    return z, np.exp(z).sum(axis=axis, keepdims=True), axis


@register("Softmax", infer=_softmax_infer, pattern=Pattern.REDUCE, layout=ROW_AXIS)
def _softmax(call: Call, args):
    z, s, _ = _softmax_parts(call, args[0])
    return [(np.exp(z) / s).astype(args[0].dtype)]


@register("LogSoftmax", infer=_softmax_infer, pattern=Pattern.REDUCE, layout=ROW_AXIS)
def _log_softmax(call: Call, args):
    z, s, _ = _softmax_parts(call, args[0])
    return [(z - np.log(s)).astype(args[0].dtype)]


@register("Hardmax", infer=_softmax_infer, pattern=Pattern.REDUCE, layout=ROW_AXIS)
def _hardmax(call: Call, args):
    x = args[0]
    axis = int(call.attrs.get("axis", -1)) % max(x.ndim, 1)
    idx = np.expand_dims(np.argmax(x, axis=axis), axis)
    y = np.zeros_like(x)
    np.put_along_axis(y, idx, 1, axis=axis)
    return [y]


# --------------------------------------------------------------------------
# DepthToSpace / SpaceToDepth


def _d2s_infer(sig: Sig):
    x = sig.in_types[0]
    layout = layout_of(sig)
    if len(x.shape) != 4:
        raise sig.fail(f"input {x} must be 4-D")
    bs = int(sig.attrs.get("blocksize", 0))
    if bs < 1:
        raise sig.fail(f"blocksize must be positive, got {bs}")
    n, c, h, w = nchw_shape(x.shape, layout)
    if sig.node.op == "DepthToSpace":
        mode = sig.attrs.get("mode", "DCR")
        if mode not in ("DCR", "CRD"):
            raise _unsupported(sig, f"mode {mode!r}")
        if c % (bs * bs):
            raise sig.fail(f"channels {c} are not divisible by blocksize^2 = {bs * bs}")
        out = (n, c // (bs * bs), h * bs, w * bs)
    else:
        mode = sig.attrs.get("mode", "DCR")
        if mode not in ("DCR", "CRD"):
            raise _unsupported(sig, f"mode {mode!r}")
        if h % bs or w % bs:
            raise sig.fail(f"spatial dims {h}x{w} are not divisible by blocksize {bs}")
        out = (n, c * bs * bs, h // bs, w // bs)
    return [TensorType(_from_nchw_shape(out, layout), x.dtype, x.quant)]


@register("DepthToSpace", infer=_d2s_infer, pattern=Pattern.INJECTIVE,
          layout=CHANNELS_FIRST)
def _depth_to_space(call: Call, args):
    layout = layout_of(call)
    x = to_nchw(args[0], layout)
    bs = int(call.attrs["blocksize"])
    n, c, h, w = x.shape
    oc = c // (bs * bs)
    if call.attrs.get("mode", "DCR") == "DCR":
        y = x.reshape(n, bs, bs, oc, h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, oc, bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    return [from_nchw(y.reshape(n, oc, h * bs, w * bs), layout)]


@register("SpaceToDepth", infer=_d2s_infer, pattern=Pattern.INJECTIVE,
          layout=CHANNELS_FIRST)
def _space_to_depth(call: Call, args):
    layout = layout_of(call)
    x = to_nchw(args[0], layout)
    bs = int(call.attrs["blocksize"])
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // bs, bs, w // bs, bs)
    if call.attrs.get("mode", "DCR") == "DCR":
        y = y.transpose(0, 3, 5, 1, 2, 4)
    else:
        y = y.transpose(0, 1, 3, 5, 2, 4)
    return [from_nchw(y.reshape(n, c * bs * bs, h // bs, w // bs), layout)]


# --------------------------------------------------------------------------
# Resize
#
# scales, sizes, roi and axes index the tensor's own axes, so `layout` does
# not change the arithmetic (it is accepted for uniformity with other
# spatial ops). Interpolation is separable: each resized axis is one gather
# of a few taps per output position plus a weighted sum.

_COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn")


@dataclass(frozen=True)
class _ResizePlan:
    axes: tuple[int, ...]
    scales: tuple[float, ...]      # per tensor axis
    out: tuple[int, ...]           # output shape


def resize_optional(sig_or_call, i: int, values) -> np.ndarray | None:
    """A scales/sizes/roi input, or None when absent or empty."""
    v = values[i] if i < len(values) else None
    if v is None:
        return None
    v = np.asarray(v)
    return v if v.size else None


def resize_plan(sig_or_call, shape: tuple[int, ...], scales, sizes) -> _ResizePlan:
    rank = len(shape)
    axes = sig_or_call.attrs.get("axes")
    axes = tuple(range(rank)) if axes is None else tuple(
        _axis(sig_or_call, int(a), rank) for a in axes)
    if len(set(axes)) != len(axes):
        raise _fail(sig_or_call, f"axes {list(axes)} repeat an axis")
    if (scales is None) == (sizes is None):
        raise _fail(sig_or_call, "exactly one of scales and sizes must be given")
    given = scales if scales is not None else sizes
    if given.ndim != 1 or given.size != len(axes):
        raise _fail(sig_or_call, f"{'scales' if scales is not None else 'sizes'} has "
                                 f"{given.size} entries, expected {len(axes)}")
    sc = [1.0] * rank
    out = list(shape)
    if scales is not None:
        for a, s in zip(axes, scales.astype(np.float64)):
            if not s > 0:
                raise _fail(sig_or_call, f"scale {s} must be positive")
            sc[a] = float(s)
            out[a] = int(math.floor(s * shape[a]))
    else:
        policy = sig_or_call.attrs.get("keep_aspect_ratio_policy", "stretch")
        want = [int(v) for v in sizes]
        if any(v < 1 for v in want):
            raise _fail(sig_or_call, f"sizes {want} must be positive")
        ratios = [w / shape[a] for a, w in zip(axes, want)]
        if policy == "stretch":
            for a, w, r in zip(axes, want, ratios):
                sc[a], out[a] = r, w
        elif policy in ("not_larger", "not_smaller"):
            r = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                sc[a], out[a] = r, int(r * shape[a] + 0.5)
        else:
            raise _unsupported(sig_or_call, f"keep_aspect_ratio_policy {policy!r}")
    return _ResizePlan(axes, tuple(sc), tuple(out))


def _resize_infer(sig: Sig):
    x = sig.in_types[0]
    layout_of(sig)
    mode = sig.attrs.get("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        raise _unsupported(sig, f"mode {mode!r}")
    ctm = sig.attrs.get("coordinate_transformation_mode", "half_pixel")
    if ctm not in _COORD_MODES:
        raise _unsupported(sig, f"coordinate_transformation_mode {ctm!r}")
    if mode != "nearest" and x.dtype not in FLOATS + ("int8", "uint8", "int32"):
        raise _unsupported(sig, f"{mode} interpolation of {x.dtype}")
    if mode == "nearest" and int(sig.attrs.get("antialias", 0)):
        raise _unsupported(sig, "antialias with mode nearest")
    vals = [None] * 4
    for i in (2, 3):
        if sig.has(i):
            vals[i] = sig.const(i)
    if ctm == "tf_crop_and_resize":
        if not sig.has(1):
            raise sig.fail("tf_crop_and_resize needs the roi input")
        sig.const(1)
    plan = resize_plan(sig, x.shape, resize_optional(sig, 2, vals),
                        resize_optional(sig, 3, vals))
    return [TensorType(plan.out, x.dtype, x.quant if mode == "nearest" else None)]


def source_coords(ctm: str, n_out: int, n_in: int, scale: float, roi) -> tuple:
    """Source coordinate of each output position along one axis, and the
    mask of positions that fall outside the crop (tf_crop_and_resize)."""
    y = np.arange(n_out, dtype=np.float64)
    length = scale * n_in     # ONNX uses the unrounded resized length
    outside = None
    if ctm == "align_corners":
        x = np.zeros(n_out) if length == 1 else y * (n_in - 1) / (length - 1)
    elif ctm == "asymmetric":
        x = y / scale
    elif ctm == "tf_half_pixel_for_nn":
        x = (y + 0.5) / scale
    elif ctm == "pytorch_half_pixel":
        x = np.full(n_out, -0.5) if length == 1 else (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / length)
        x = offset + (y + 0.5) / scale - 0.5
    else:  # tf_crop_and_resize
        start, end = roi
        if length == 1:
            x = np.full(n_out, (end - start) * (n_in - 1) / 2)
        else:
            x = y * (end - start) * (n_in - 1) / (length - 1)
        x = x + start * (n_in - 1)
        outside = (x < 0) | (x > n_in - 1)
    return x, outside


def _cubic_kernel(t: np.ndarray, a: float) -> np.ndarray:
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def resize_taps(call: Call, x: np.ndarray, n_in: int, scale: float):
    """Indices [out, n] and weights [out, n] of the interpolation taps."""
    mode = call.attrs.get("mode", "nearest")
    x_int = np.floor(x)
    # The tap left of the point is preferred: an exact integer counts as
    # ratio 1 from the previous pixel (as ONNX's reference does).
    ratio = np.where(x == x_int, 1.0, x - x_int)
    s = min(scale, 1.0) if int(call.attrs.get("antialias", 0)) else 1.0
    if mode == "nearest":
        n = 2
        nm = call.attrs.get("nearest_mode", "round_prefer_floor")
        right = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                 "floor": np.zeros_like(ratio, bool), "ceil": np.ones_like(ratio, bool)}.get(nm)
        if right is None:
            raise _unsupported(call, f"nearest_mode {nm!r}")
        right = right | (ratio == 1.0)
        w = np.stack([~right, right], axis=1).astype(np.float64)
    elif mode == "linear":
        start = int(math.floor(-1 / s)) + 1
        n = 2 - 2 * start
        t = (np.arange(start, start + n)[None, :] - ratio[:, None]) * s
        w = np.clip(1 - np.abs(t), 0, 1)
    else:
        start = int(math.floor(-2 / s)) + 1
        n = 2 - 2 * start
        t = (np.arange(start, start + n)[None, :] - ratio[:, None]) * s
        w = _cubic_kernel(t, float(call.attrs.get("cubic_coeff_a", -0.75)))
    if s != 1.0:
        w = w / w.sum(axis=1, keepdims=True)
    # The n taps nearest to x, ties going to the smaller index.
    pad = (n + 1) // 2
    xp = x + pad
    p = np.floor(xp)
    frac = xp - p
    if n % 2 == 0:
        off = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        off = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    idx = (p + off).astype(np.int64)[:, None] + np.arange(n)[None, :] - pad
    if int(call.attrs.get("exclude_outside", 0)):
        w = np.where((idx < 0) | (idx >= n_in), 0.0, w)
        tot = w.sum(axis=1, keepdims=True)
        w = w / np.where(tot == 0, 1.0, tot)
    return np.clip(idx, 0, n_in - 1), w


def _resize_axis(call: Call, data: np.ndarray, axis: int, n_out: int, scale: float, roi):
    n_in = data.shape[axis]
    ctm = call.attrs.get("coordinate_transformation_mode", "half_pixel")
    x, outside = source_coords(ctm, n_out, n_in, scale, roi)
    idx, w = resize_taps(call, x, n_in, scale)
    if call.attrs.get("mode", "nearest") == "nearest":
        pick = idx[np.arange(n_out), np.argmax(w, axis=1)]
        y = np.take(data, pick, axis=axis)
    else:
        g = np.take(data, idx, axis=axis)       # [..., out, n, ...]
        wshape = (1,) * axis + w.shape + (1,) * (data.ndim - axis - 1)
        y = (g * w.reshape(wshape)).sum(axis=axis + 1)
    if outside is not None and outside.any():
        mshape = (1,) * axis + (n_out,) + (1,) * (data.ndim - axis - 1)
        y = np.where(outside.reshape(mshape),
                     np.asarray(call.attrs.get("extrapolation_value", 0.0), y.dtype), y)
    return y


@register("Resize", infer=_resize_infer, pattern=Pattern.INJECTIVE,
          layout=Layout(sink=Sink.RESIZE))
def _resize(call: Call, args):
    x = args[0]
    args = list(args) + [None] * (4 - len(args))
    plan = resize_plan(call, x.shape, resize_optional(call, 2, args),
                        resize_optional(call, 3, args))
    roi = resize_optional(call, 1, args)
    rank = x.ndim
    if roi is not None:
        roi = roi.astype(np.float64)
        naxes = len(plan.axes)
        if roi.size != 2 * naxes:
            raise _fail(call, f"roi has {roi.size} entries, expected {2 * naxes}")
        full = np.array([0.0] * rank + [1.0] * rank)
        for i, a in enumerate(plan.axes):
            full[a], full[rank + a] = roi[i], roi[naxes + i]
        roi = full
    linear = call.attrs.get("mode", "nearest") != "nearest"
    y = x.astype(np.float64) if linear else x
    ctm = call.attrs.get("coordinate_transformation_mode", "half_pixel")
    for a in plan.axes:
        axis_roi = None if roi is None else (roi[a], roi[rank + a])
        identity = plan.out[a] == x.shape[a] and plan.scales[a] == 1.0 and (
            ctm != "tf_crop_and_resize" or axis_roi == (0.0, 1.0))
        if not identity:
            y = _resize_axis(call, y, a, plan.out[a], plan.scales[a], axis_roi)
    if linear and x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        y = np.clip(np.rint(y), info.min, info.max)
    return [np.asarray(y).astype(x.dtype, copy=False)]
