"""Sampling ops with ONNX semantics: GridSample (nearest, linear and cubic
interpolation at normalized grid positions, zeros/border/reflection
padding, 2-D and 3-D), AffineGrid (the grid of an affine map) and Col2Im
(columns summed back into an image). Their kernel rules: aot/lower/rules/sampling.py.

GridSample's coordinate arithmetic is written once as a function of an
arithmetic namespace (`Numpy` here, TIR expressions in the lowering), so the
reference and the generated code take the same steps.
"""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from aot.errors import UnsupportedError, node_label
from aot.ir.graph import TensorType
from aot.ops.attrs import ints
from aot.ops.elementwise import FLOATS, arity
from aot.ops.registry import Call, Pattern, Sig, register

CUBIC_ALPHA = -0.75
GRID_MODES = {"nearest": "nearest", "linear": "linear", "bilinear": "linear",
              "cubic": "cubic", "bicubic": "cubic"}        # opset 16 said bi-


# ---- GridSample --------------------------------------------------------------------------------

def grid_sample_params(sig_or_call) -> tuple[str, str, bool]:
    """(mode: nearest|linear|cubic, padding_mode, align_corners)."""
    a = sig_or_call.attrs
    mode = GRID_MODES.get(a.get("mode", "linear"))
    padding = a.get("padding_mode", "zeros")
    if mode is None or padding not in ("zeros", "border", "reflection"):
        raise UnsupportedError(f"{node_label(sig_or_call.node)}: GridSample mode "
                               f"{a.get('mode')!r} with padding {padding!r} is not supported")
    return mode, padding, bool(a.get("align_corners", 0))


class Numpy:
    """The arithmetic GridSample's steps use, on numpy arrays."""
    floor = staticmethod(np.floor)
    rint = staticmethod(np.rint)           # half to even, as the reference's np.rint
    where = staticmethod(np.where)
    fmod = staticmethod(np.fmod)
    clip = staticmethod(np.clip)

    @staticmethod
    def lt(a, b):
        return a < b

    @staticmethod
    def either(a, b):
        return a | b

    @staticmethod
    def both(a, b):
        return a & b

    @staticmethod
    def to_int(x, length: int):
        """Truncated toward zero, from [-1, length] (where far-off values
        land: outside either way)."""
        return np.clip(x, -1, length).astype(np.int64)

    @staticmethod
    def keep(x):
        """A value used many times (a local in generated code)."""
        return x


def _bounds(length: int, align: bool) -> tuple[float, float]:
    """The range of valid (denormalized) coordinates along an axis."""
    return (0.0, length - 1.0) if align else (-0.5, length - 0.5)


def _reflect(m, x, lo: float, hi: float):
    """x folded into [lo, hi] by reflecting at the borders (as often as needed)."""
    span = hi - lo
    below, above = m.lt(x, lo), m.lt(hi, x)
    dx = m.where(below, lo - x, x - hi)
    n = m.floor(dx / span) if span else dx * 0
    r = dx - n * span
    odd = m.lt(0.5, m.fmod(n, 2.0))
    near = m.where(below, lo + r, hi - r)        # an even number of folds
    far = m.where(below, hi - r, lo + r)
    return m.where(m.either(below, above), m.where(odd, far, near), x)


def _cubic_weights(t) -> list:
    """Keys' cubic convolution weights (alpha -0.75) of the 4 taps around
    a point t past the second one (0 <= t < 1)."""
    a = CUBIC_ALPHA
    u, v, w = t + 1, 1 - t, 2 - t
    return [((a * u - 5 * a) * u + 8 * a) * u - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            ((a + 2) * v - (a + 3)) * v * v + 1,
            ((a * w - 5 * a) * w + 8 * a) * w - 4 * a]


def grid_taps(m, g, length: int, mode: str, padding: str, align: bool):
    """One axis of GridSample: the normalized coordinate g -> the taps
    [(integer position, weight or None, in-range test or None)]; the
    position is always inside [0, length), the test says whether the tap
    reads the image (else it reads a zero: zeros padding)."""
    x = (g + 1) * ((length - 1) / 2) if align else ((g + 1) * length - 1) / 2
    return pixel_taps(m, x, length, mode, padding, align)


def pixel_taps(m, x, length: int, mode: str, padding: str, align: bool):
    """grid_taps from the pixel coordinate x (denormalized)."""
    lo, hi = _bounds(length, align)
    if mode == "nearest":
        x = m.rint(x)
    x = m.keep(x)
    outside = m.either(m.lt(x, lo), m.lt(hi, x))
    if padding == "border":
        x = m.where(outside, m.clip(x, 0.0, length - 1.0), x)
    elif padding == "reflection":
        x = m.keep(_reflect(m, x, lo, hi))
    if mode == "nearest":
        first, weights = x, [None]
    else:
        first = m.keep(m.floor(x))
        t = m.keep(x - first)
        weights = [1 - t, t] if mode == "linear" else _cubic_weights(t)
        if mode == "cubic":
            first = first - 1
    taps = []
    for k, w in enumerate(weights):
        pos = first + k if k else first
        if padding == "reflection":
            pos = _reflect(m, pos, lo, hi)
        i = m.keep(m.to_int(pos, length))             # truncates, as the reference's int()
        ok = None
        if padding == "zeros":
            ok = m.both(m.lt(-1, i), m.lt(i, length))
        taps.append((m.clip(i, 0, length - 1), w, ok))
    return taps


def _infer_grid_sample(sig: Sig):
    x, grid = sig.in_types
    r = len(x.shape) - 2
    if x.dtype not in FLOATS or grid.dtype not in FLOATS or r not in (2, 3):
        raise sig.fail(f"needs float X [N, C, D1..Dr] (r 2 or 3) and grid, got {x} and {grid}")
    if len(grid.shape) != r + 2 or grid.shape[0] != x.shape[0] or grid.shape[-1] != r:
        raise sig.fail(f"grid {list(grid.shape)} must be [N, O1..O{r}, {r}] for X {list(x.shape)}")
    grid_sample_params(sig)
    return [TensorType(x.shape[:2] + grid.shape[1:-1], x.dtype)]


@register("GridSample", infer=arity(2, 2)(_infer_grid_sample), pattern=Pattern.OPAQUE)
def _grid_sample(call: Call, args):
    x, grid = args
    mode, padding, align = grid_sample_params(call)
    dims = x.shape[2:]
    out = np.zeros(call.out_types[0].shape, np.float64)
    for n in range(x.shape[0]):
        g = grid[n].astype(np.float64)
        # grid's last axis lists the coordinates innermost axis first (x, y, z)
        axes = [grid_taps(Numpy, g[..., len(dims) - 1 - i], d, mode, padding, align)
                for i, d in enumerate(dims)]
        for combo in itertools.product(*axes):
            weight = np.ones(g.shape[:-1])
            for _, w, ok in combo:
                weight = weight * (1 if w is None else w) * (1 if ok is None else ok)
            values = x[n][(slice(None),) + tuple(i for i, _, _ in combo)]
            out[n] += weight * values
    return [out.astype(call.out_types[0].dtype)]


# ---- AffineGrid ----------------------------------------------------------------------------------

def affine_size(sig: Sig) -> list[int]:
    """The output size [N, C, D1..Dr] (input 1, known at compile time)."""
    size = ints(sig.const(1))
    theta = sig.in_types[0]
    r = len(size) - 2
    if r not in (2, 3) or theta.shape != (size[0], r, r + 1) or min(size) <= 0:
        raise sig.fail(f"theta {list(theta.shape)} and size {size} must be [N, r, r + 1] "
                       "and [N, C, D1..Dr], r 2 or 3")
    return size


def base_coordinate(i, length: int, align: bool):
    """The normalized coordinate of position i along an axis of `length`."""
    if align:
        return i * (2.0 / (length - 1)) - 1.0 if length > 1 else i * 0.0
    return (2.0 * i + 1.0) / length - 1.0


def _infer_affine_grid(sig: Sig):
    size = affine_size(sig)
    if sig.in_types[0].dtype not in FLOATS:
        raise sig.fail(f"theta must be float, got {sig.in_types[0].dtype}")
    return [TensorType((size[0], *size[2:], len(size) - 2), sig.in_types[0].dtype)]


@register("AffineGrid", infer=arity(2, 2)(_infer_affine_grid), pattern=Pattern.OPAQUE)
def _affine_grid(call: Call, args):
    theta = args[0].astype(np.float64)
    size = affine_size(Sig(call.node, call.in_types, tuple(args)))
    align = bool(call.attrs.get("align_corners", 0))
    dims = size[2:]
    # the base grid's points as (x, y[, z], 1): innermost axis first
    axes = np.meshgrid(*[base_coordinate(np.arange(d), d, align) for d in dims], indexing="ij")
    points = np.stack([*axes[::-1], np.ones(dims)], axis=-1)
    out = np.einsum("nij,...j->n...i", theta, points)
    return [out.astype(call.out_types[0].dtype)]


# ---- Col2Im ------------------------------------------------------------------------------------

def col2im_geometry(sig: Sig) -> dict[str, Any]:
    """image and block shapes, strides, dilations, pads (begins then ends)
    and the number of blocks along each axis."""
    x = sig.in_types[0]
    image, block = ints(sig.const(1)), ints(sig.const(2))
    r = len(image)
    a = sig.attrs
    strides = list(a.get("strides", [1] * r))
    dilations = list(a.get("dilations", [1] * r))
    pads = list(a.get("pads", [0] * 2 * r))
    if len(block) != r or len(x.shape) != 3 or len(strides) != r or len(dilations) != r \
            or len(pads) != 2 * r:
        raise sig.fail(f"image_shape {image}, block_shape {block}, strides, dilations and pads "
                       f"disagree for input {list(x.shape)}")
    counts = [(image[i] + pads[i] + pads[i + r] - dilations[i] * (block[i] - 1) - 1)
              // strides[i] + 1 for i in range(r)]
    if x.shape[1] % int(np.prod(block)) or int(np.prod(counts)) != x.shape[2]:
        raise sig.fail(f"input {list(x.shape)} does not hold C x {int(np.prod(block))} columns "
                       f"of {int(np.prod(counts))} blocks")
    return dict(image=image, block=block, strides=strides, dilations=dilations, pads=pads,
                counts=counts, channels=x.shape[1] // int(np.prod(block)))


def _infer_col2im(sig: Sig):
    geo = col2im_geometry(sig)
    return [TensorType((sig.in_types[0].shape[0], geo["channels"], *geo["image"]),
                       sig.in_types[0].dtype)]


@register("Col2Im", infer=arity(3, 3)(_infer_col2im), pattern=Pattern.OPAQUE)
def _col2im(call: Call, args):
    x = args[0]
    geo = col2im_geometry(Sig(call.node, call.in_types, tuple(args)))
    r, image = len(geo["image"]), geo["image"]
    padded = [image[i] + geo["pads"][i] + geo["pads"][i + r] for i in range(r)]
    out = np.zeros((x.shape[0], geo["channels"], *padded), x.dtype)
    cols = x.reshape(x.shape[0], geo["channels"], *geo["block"], *geo["counts"])
    for k in itertools.product(*[range(b) for b in geo["block"]]):
        at = tuple(slice(k[i] * geo["dilations"][i],
                         k[i] * geo["dilations"][i] + geo["strides"][i] * (geo["counts"][i] - 1)
                         + 1, geo["strides"][i]) for i in range(r))
        out[(slice(None), slice(None)) + at] += cols[(slice(None), slice(None)) + k]
    crop = tuple(slice(geo["pads"][i], geo["pads"][i] + image[i]) for i in range(r))
    return [np.ascontiguousarray(out[(slice(None), slice(None)) + crop])]


# ---- DeformConv -----------------------------------------------------------------------------

def deform_geometry(sig: Sig) -> dict[str, Any]:
    """kernel, strides, dilations, pads, groups and channel counts of a 2-D
    DeformConv, checked against its inputs."""
    x, w, off = sig.in_types[:3]
    a = sig.attrs
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise UnsupportedError(f"{node_label(sig.node)}: DeformConv on {len(x.shape) - 2}-D "
                               "images is not supported (2-D only)")
    kernel = list(a.get("kernel_shape", w.shape[2:]))
    strides, dilations = list(a.get("strides", [1, 1])), list(a.get("dilations", [1, 1]))
    pads = list(a.get("pads", [0, 0, 0, 0]))
    group, offset_group = int(a.get("group", 1)), int(a.get("offset_group", 1))
    c, oc = x.shape[1], w.shape[0]
    out = [(x.shape[2 + i] + pads[i] + pads[i + 2] - dilations[i] * (kernel[i] - 1) - 1)
           // strides[i] + 1 for i in range(2)]
    taps = kernel[0] * kernel[1]
    if c != w.shape[1] * group or oc % group or c % offset_group \
            or off.shape != (x.shape[0], 2 * offset_group * taps, *out):
        raise sig.fail(f"X {list(x.shape)}, W {list(w.shape)} and offset {list(off.shape)} "
                       f"disagree (group {group}, offset_group {offset_group}, output {out})")
    if sig.has(3) and sig.in_types[3].shape != (oc,):
        raise sig.fail(f"B must be [{oc}], got {list(sig.in_types[3].shape)}")
    if sig.has(4) and sig.in_types[4].shape != (x.shape[0], offset_group * taps, *out):
        raise sig.fail(f"mask {list(sig.in_types[4].shape)} must be "
                       f"[{x.shape[0]}, {offset_group * taps}, {out[0]}, {out[1]}]")
    return dict(kernel=kernel, strides=strides, dilations=dilations, pads=pads, group=group,
                offset_group=offset_group, out=out, in_per_group=c // group,
                out_per_group=oc // group, in_per_offset_group=c // offset_group)


def _infer_deform_conv(sig: Sig):
    if any(sig.in_types[i].dtype not in FLOATS for i in range(3)):
        raise sig.fail("needs float X, W and offset")
    geo = deform_geometry(sig)
    x, w = sig.in_types[:2]
    return [TensorType((x.shape[0], w.shape[0], *geo["out"]), x.dtype)]


def _deform_macs(call: Call) -> int:
    w = call.in_types[1]
    return call.out_types[0].size * (w.size // w.shape[0])


@register("DeformConv", infer=arity(3, 5)(_infer_deform_conv), pattern=Pattern.OPAQUE,
          macs=_deform_macs)
def _deform_conv(call: Call, args):
    x, w, off = (a.astype(np.float64) for a in args[:3])
    bias = args[3] if len(args) > 3 and args[3] is not None else None
    mask = args[4] if len(args) > 4 and args[4] is not None else None
    geo = deform_geometry(Sig(call.node, call.in_types, tuple(args)))
    (kh, kw), (oh, ow), og = geo["kernel"], geo["out"], geo["offset_group"]
    n_, c_ = x.shape[:2]
    off = off.reshape(n_, og, kh, kw, 2, oh, ow)
    mask = np.ones((n_, og, kh, kw, oh, ow)) if mask is None else mask.reshape(
        n_, og, kh, kw, oh, ow)
    # the sampling positions, [kh, kw, oh, ow] per image and offset group
    rows = (np.arange(kh) * geo["dilations"][0])[:, None, None, None] \
        + (np.arange(oh) * geo["strides"][0] - geo["pads"][0])[None, None, :, None]
    cols = (np.arange(kw) * geo["dilations"][1])[None, :, None, None] \
        + (np.arange(ow) * geo["strides"][1] - geo["pads"][1])[None, None, None, :]
    samples = np.zeros((n_, c_, kh, kw, oh, ow))
    per = geo["in_per_offset_group"]
    for n in range(n_):
        for g in range(og):
            ys = pixel_taps(Numpy, rows + off[n, g, :, :, 0], x.shape[2], "linear", "zeros", True)
            xs = pixel_taps(Numpy, cols + off[n, g, :, :, 1], x.shape[3], "linear", "zeros", True)
            image = x[n, g * per:(g + 1) * per]
            for (iy, wy, oky), (ix, wx, okx) in itertools.product(ys, xs):
                samples[n, g * per:(g + 1) * per] += wy * wx * (oky & okx) * image[:, iy, ix]
            samples[n, g * per:(g + 1) * per] *= mask[n, g]
    out = np.zeros(call.out_types[0].shape)
    ipg, opg = geo["in_per_group"], geo["out_per_group"]
    for g in range(geo["group"]):
        out[:, g * opg:(g + 1) * opg] = np.einsum(
            "nckluv,ockl->nouv", samples[:, g * ipg:(g + 1) * ipg], w[g * opg:(g + 1) * opg])
    if bias is not None:
        out += bias.reshape(1, -1, 1, 1)
    return [out.astype(call.out_types[0].dtype)]
