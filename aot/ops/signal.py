"""Signal ops with ONNX semantics: DFT (opset 20 form), STFT, the Hann,
Hamming and Blackman windows and MelWeightMatrix.

Complex tensors are real ones with a trailing axis of 2 (real, imaginary),
as ONNX writes them; a trailing axis of 1 is a real signal. Lengths, steps
and axes are shape arguments and must be known at compile time. The windows
and MelWeightMatrix depend on such arguments alone, so their values are
known at compile time: they fold into constants, or a kernel copies the
table where they make a model output.
"""
from __future__ import annotations

import numpy as np

from aot.errors import UnsupportedError, node_label
from aot.ir.graph import TensorType
from aot.ops.elementwise import ONNX_DTYPES, arity
from aot.ops.registry import Call, Sig, register

FLOATS = ("float32",)


def scalar_int(sig: Sig, i: int, what: str) -> int:
    """A scalar (or one-element) shape argument known at compile time."""
    v = np.asarray(sig.const(i))
    if v.size != 1:
        raise sig.fail(f"{what} must be a scalar, got shape {list(v.shape)}")
    return int(v.reshape(-1)[0])


def _signal_type(sig: Sig, i: int, min_rank: int, what: str) -> TensorType:
    t = sig.in_types[i]
    if t.dtype not in FLOATS:
        raise sig.fail(f"{what} must be float32, got {t.dtype}")
    if len(t.shape) < min_rank or t.shape[-1] not in (1, 2):
        raise sig.fail(f"{what} {list(t.shape)} must have rank >= {min_rank} and a last axis "
                       "of 1 (real) or 2 (real, imaginary)")
    return t


def _complex(x: np.ndarray) -> np.ndarray:
    """[..., 1|2] float -> [...] complex128."""
    x = x.astype(np.float64)
    return x[..., 0] if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]


def _pairs(z: np.ndarray) -> np.ndarray:
    """[...] complex -> [..., 2] float64."""
    return np.stack([z.real, z.imag], axis=-1)


# ---- DFT ----------------------------------------------------------------------------------

def dft_params(sig_or_call, shape: tuple[int, ...], lengths=None) -> tuple[int, int, bool, bool]:
    """(axis, dft length, inverse, onesided) of a DFT node on input `shape`.

    lengths: (dft_length, axis) read from the inputs, None where absent. The
    axis is input 2 from opset 20 and the attribute before it."""
    dft_length, axis = lengths
    if axis is None:
        axis = int(sig_or_call.attrs.get("axis", -2))
    axis %= len(shape)
    inverse = bool(sig_or_call.attrs.get("inverse", 0))
    onesided = bool(sig_or_call.attrs.get("onesided", 0))
    if dft_length is None:
        # an inverse of a one-sided spectrum gives an even signal by default
        dft_length = 2 * (shape[axis] - 1) if inverse and onesided else shape[axis]
    return axis, int(dft_length), inverse, onesided


def dft_out_shape(shape, axis: int, n: int, inverse: bool, onesided: bool) -> tuple[int, ...]:
    out = list(shape)
    if inverse and onesided:
        out[axis], out[-1] = n, 1          # the real signal of a one-sided spectrum
    else:
        out[axis], out[-1] = (n // 2 + 1 if onesided else n), 2
    return tuple(out)


@arity(1, 3)
def _infer_dft(sig: Sig):
    x = _signal_type(sig, 0, 2, "the input")
    rank = len(x.shape)
    length = scalar_int(sig, 1, "dft_length") if sig.has(1) else None
    axis = scalar_int(sig, 2, "axis") if sig.has(2) else int(sig.attrs.get("axis", -2))
    if not -rank <= axis < rank:
        raise sig.fail(f"axis {axis} is out of range for rank {rank}")
    if axis % rank == rank - 1:
        raise sig.fail("the DFT axis cannot be the last (real, imaginary) axis")
    axis, n, inverse, onesided = dft_params(sig, x.shape, (length, axis))
    if n < 1:
        raise sig.fail(f"dft_length {n} must be positive")
    if inverse and onesided and x.shape[-1] != 2:
        raise sig.fail("an inverse one-sided DFT takes a complex (last axis 2) spectrum")
    return [TensorType(dft_out_shape(x.shape, axis, n, inverse, onesided), x.dtype)]


def dft_reference(x: np.ndarray, axis: int, n: int, inverse: bool, onesided: bool) -> np.ndarray:
    """The DFT by numpy's FFT, in float64: [..., 1|2] -> [..., 1|2]."""
    z = _complex(x)
    if inverse and onesided:
        return np.fft.irfft(z, n=n, axis=axis)[..., None]
    y = np.fft.ifft(z, n=n, axis=axis) if inverse else np.fft.fft(z, n=n, axis=axis)
    if onesided:
        y = np.take(y, np.arange(n // 2 + 1), axis=axis)
    return _pairs(y)


def optional_int(values, i: int) -> int | None:
    """Input i (a scalar) as an int; None when absent."""
    v = values[i] if i < len(values) else None
    return None if v is None else int(np.asarray(v).reshape(-1)[0])


@register("DFT", infer=_infer_dft)
def _dft(call: Call, args):
    x = args[0]
    lengths = (optional_int(args, 1), optional_int(args, 2))
    axis, n, inverse, onesided = dft_params(call, x.shape, lengths)
    return [dft_reference(x, axis, n, inverse, onesided).astype(x.dtype)]


# ---- STFT ---------------------------------------------------------------------------------

def stft_params(sig: Sig) -> tuple[int, int, int, bool]:
    """(frame step, frame length = DFT length, frames, onesided)."""
    x = sig.in_types[0]
    step = scalar_int(sig, 1, "frame_step")
    window = sig.in_types[2] if sig.has(2) else None
    if window is not None and len(window.shape) != 1:
        raise sig.fail(f"the window must be 1-D, got {list(window.shape)}")
    if sig.has(3):
        length = scalar_int(sig, 3, "frame_length")
        if window is not None and window.shape[0] != length:
            raise sig.fail(f"a window of {window.shape[0]} for frame_length {length}")
    else:
        length = window.shape[0] if window is not None else x.shape[-2]
    if step < 1 or not 1 <= length <= x.shape[-2]:
        raise sig.fail(f"frame_step {step} and frame_length {length} do not fit a signal of "
                       f"{x.shape[-2]}")
    onesided = bool(sig.attrs.get("onesided", 1))
    if onesided and x.shape[-1] == 2:
        raise sig.fail("a one-sided STFT takes a real signal (last axis 1)")
    return step, length, 1 + (x.shape[-2] - length) // step, onesided


@arity(2, 4)
def _infer_stft(sig: Sig):
    x = _signal_type(sig, 0, 3, "the signal")
    if len(x.shape) != 3:
        raise sig.fail(f"the signal must be [batch, length, 1|2], got {list(x.shape)}")
    if sig.has(2) and sig.in_types[2].dtype != x.dtype:
        raise sig.fail(f"the window must be {x.dtype}, got {sig.in_types[2].dtype}")
    _, n, frames, onesided = stft_params(sig)
    return [TensorType((x.shape[0], frames, n // 2 + 1 if onesided else n, 2), x.dtype)]


@register("STFT", infer=_infer_stft)
def _stft(call: Call, args):
    x = args[0]
    sig = Sig(call.node, call.in_types, tuple(args))
    step, n, frames, onesided = stft_params(sig)
    window = args[2].astype(np.float64) if len(args) > 2 and args[2] is not None \
        else np.ones(n)
    starts = np.arange(frames) * step
    framed = _complex(x)[:, starts[:, None] + np.arange(n)] * window      # [batch, frames, n]
    y = np.fft.fft(framed, n=n, axis=-1)
    if onesided:
        y = y[..., :n // 2 + 1]
    return [_pairs(y).astype(x.dtype)]


# ---- windows ------------------------------------------------------------------------------

def _output_dtype(sig: Sig) -> str:
    to = int(sig.attrs.get("output_datatype", 1))
    if to not in ONNX_DTYPES or ONNX_DTYPES[to] in ("float16", "float64"):
        raise UnsupportedError(f"{node_label(sig.node)}: output_datatype {to} is not supported")
    return ONNX_DTYPES[to]


@arity(1, 1)
def _infer_window(sig: Sig):
    size = scalar_int(sig, 0, "size")
    if size < 0:
        raise sig.fail(f"size {size} must not be negative")
    return [TensorType((size,), _output_dtype(sig))]


# Generalized cosine windows: w[i] = sum_k a_k cos(2 pi k i / N) (signs in a_k),
# N the size (periodic) or the size - 1 (symmetric).
WINDOWS = {
    "HannWindow": (0.5, -0.5),
    "HammingWindow": (25 / 46, -21 / 46),
    "BlackmanWindow": (0.42, -0.5, 0.08),
}


def cosine_window(coeffs, size: int, periodic: bool) -> np.ndarray:
    span = size if periodic else size - 1
    i = np.arange(size, dtype=np.float64)
    with np.errstate(all="ignore"):        # size 1 symmetric: 0/0, as the spec's formula
        return sum(a * np.cos(2 * np.pi * k * i / span) for k, a in enumerate(coeffs))


def _window(call: Call, args):
    size = int(np.asarray(args[0]).reshape(-1)[0])
    w = cosine_window(WINDOWS[call.node.op], size, bool(call.attrs.get("periodic", 1)))
    return [w.astype(call.out_types[0].dtype)]


for _name in WINDOWS:
    register(_name, infer=_infer_window)(_window)


# ---- MelWeightMatrix ----------------------------------------------------------------------

@arity(5, 5)
def _infer_mel(sig: Sig):
    bins = scalar_int(sig, 0, "num_mel_bins")
    n = scalar_int(sig, 1, "dft_length")
    for i in (2, 3, 4):
        sig.const(i)
    if bins < 1 or n < 1:
        raise sig.fail(f"num_mel_bins {bins} and dft_length {n} must be positive")
    return [TensorType((n // 2 + 1, bins), _output_dtype(sig))]


def mel_weight_matrix(bins: int, n: int, rate, low, high) -> np.ndarray:
    """[n // 2 + 1, bins] triangular filters, equally spaced on the mel scale
    (2595 log10(1 + f / 700)) between the edges; each filter rises from its
    left DFT bin to its centre and falls to its right one."""
    # log1p / expm1 as the ONNX reference: an edge on a bin boundary then
    # rounds the same way
    def mel(f):
        return 2595 * np.log1p(np.float64(f) / 700) / np.log(10)
    lo, hi = mel(low), mel(high)
    # bins + 2 edges, spaced (hi - lo) / (bins + 2) apart, as the ONNX reference
    mels = np.arange(bins + 2) * ((hi - lo) / (bins + 2)) + lo
    hz = 700 * np.expm1(mels / 2595 * np.log(10))
    edge = (((n + 1) * hz) // np.float64(rate)).astype(np.int64)
    out = np.zeros((n // 2 + 1, bins))
    for m in range(bins):
        left, centre, right = edge[m], edge[m + 1], edge[m + 2]
        if centre == left:
            out[centre, m] = 1
        else:
            j = np.arange(left, centre + 1)
            out[j, m] = (j - left) / (centre - left)
        if right > centre:
            j = np.arange(centre, right)
            out[j, m] = (right - j) / (right - centre)
    return out


@register("MelWeightMatrix", infer=_infer_mel)
def _mel(call: Call, args):
    bins, n, rate, low, high = (np.asarray(a).reshape(-1)[0] for a in args)
    return [mel_weight_matrix(int(bins), int(n), rate, low, high)
            .astype(call.out_types[0].dtype)]
