"""`tfl.lstm`: TFLite's UNIDIRECTIONAL_SEQUENCE_LSTM, float and int8.

Inputs are TFLite's 24, in TFLite's order (x; input-side weights for the
input, forget, cell, output gates; recurrent weights, same order; peepholes;
gate biases; projection weight and bias; hidden state; cell state; layer-norm
coefficients). Outputs: the sequence output, then the hidden and cell state
after the last step, which the importer maps onto the state variables
(`Graph.updates`), so the state persists across runs as on a device.

The int8 path (int8 activations and weights, int16 cell, int32 biases) is
tflite-micro's integer LSTM bit for bit (TFLITE_INT8.md §11). Only the
standard form is supported: no CIFG, peephole, projection or layer norm.
"""
from __future__ import annotations

import numpy as np

from aot.errors import UnsupportedError, node_label
from aot.ir.graph import Quant, TensorType
from aot.ops.quant import qmath
from aot.ops.quant.tflite_int8 import fc_multipliers, scale_zp
from aot.ops.registry import Call, Pattern, Sig, register

X, W_INPUT, R_INPUT, BIAS_INPUT, H_STATE, C_STATE = 0, 1, 5, 12, 18, 19
GATES = ("input", "forget", "cell", "output")
_OPTIONAL_UNSUPPORTED = {9: "peephole", 10: "peephole", 11: "peephole", 16: "projection",
                         17: "projection", 20: "layer norm", 21: "layer norm",
                         22: "layer norm", 23: "layer norm"}


def check_form(sig_or_call) -> None:
    has = [i < len(sig_or_call.in_types) and sig_or_call.in_types[i] is not None
           for i in range(24)]
    for i, what in _OPTIONAL_UNSUPPORTED.items():
        if has[i]:
            raise UnsupportedError(f"{node_label(sig_or_call.node)}: LSTM with {what} "
                                   "(only the standard LSTM is supported)")
    missing = [i for i in (0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 14, 15, 18, 19) if not has[i]]
    if missing:
        what = "CIFG (no input gate)" if 1 in missing else f"missing input {missing[0]}"
        raise UnsupportedError(f"{node_label(sig_or_call.node)}: LSTM {what} is not supported")


def _infer(sig: Sig):
    check_form(sig)
    x, h, c = sig.in_types[X], sig.in_types[H_STATE], sig.in_types[C_STATE]
    if len(x.shape) != 3:
        raise sig.fail(f"expects a 3-D input, got {list(x.shape)}")
    units = sig.in_types[R_INPUT].shape[0]
    for i in range(4):
        w, r = sig.in_types[W_INPUT + i], sig.in_types[R_INPUT + i]
        if w.shape != (units, x.shape[2]) or r.shape != (units, units):
            raise sig.fail(f"gate {GATES[i]} weights {list(w.shape)}/{list(r.shape)} do not "
                           f"match input {list(x.shape)} and {units} units")
        bias = sig.in_types[BIAS_INPUT + i]
        if bias.shape != (units,):
            raise sig.fail(f"gate {GATES[i]} bias {list(bias.shape)}, expected [{units}]")
    batch = x.shape[1] if sig.attrs.get("time_major", False) else x.shape[0]
    if h.shape != (batch, units) or c.shape != (batch, units):
        raise sig.fail(f"state shapes {list(h.shape)}/{list(c.shape)}, expected {[batch, units]}")
    if x.dtype == "int8":
        if c.dtype != "int16" or h.dtype != "int8":
            raise UnsupportedError(f"{node_label(sig.node)}: int8 LSTM needs an int8 hidden "
                                   f"and int16 cell state, got {h.dtype}/{c.dtype}")
    elif x.dtype != "float32":
        raise UnsupportedError(f"{node_label(sig.node)}: LSTM on {x.dtype}")
    out = TensorType(x.shape[:2] + (units,), x.dtype)
    return [out, h, c]


def _batch_major(x: np.ndarray, time_major: bool) -> np.ndarray:
    return np.swapaxes(x, 0, 1) if time_major else x


def _float_activation(name: str, node):
    if name == "TANH":
        return np.tanh
    if name == "SIGMOID":
        return _sigmoid
    if name == "RELU":
        return lambda v: np.maximum(v, 0)
    if name == "RELU6":
        return lambda v: np.clip(v, 0, 6)
    if name == "NONE":
        return lambda v: v
    raise UnsupportedError(f"{node_label(node)}: LSTM activation {name}")


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-v))).astype(v.dtype)


def _lstm_float(call: Call, args):
    a = call.attrs
    act = _float_activation(a.get("activation", "TANH"), call.node)
    x = _batch_major(args[X], a.get("time_major", False)).astype(np.float32)
    wx = [args[W_INPUT + i].astype(np.float32) for i in range(4)]
    wh = [args[R_INPUT + i].astype(np.float32) for i in range(4)]
    bias = [args[BIAS_INPUT + i].astype(np.float32) for i in range(4)]
    h, c = args[H_STATE].astype(np.float32), args[C_STATE].astype(np.float32)
    clip = float(a.get("cell_clip", 0.0))
    # Input-side products for every step at once; only the recurrence loops.
    xs = [x @ w.T + b for w, b in zip(wx, bias)]
    outs = []
    for t in range(x.shape[1]):
        pre = [xs[g][:, t] + h @ wh[g].T for g in range(4)]
        i, f, o = _sigmoid(pre[0]), _sigmoid(pre[1]), _sigmoid(pre[3])
        c = f * c + i * act(pre[2])
        if clip > 0:
            c = np.clip(c, -clip, clip)
        h = o * act(c)
        outs.append(h)
    y = np.stack(outs, axis=1)
    return [_batch_major(y, a.get("time_major", False)).astype(np.float32), h, c]


def _clamp16(v):
    return np.clip(v, -32768, 32767)


def gate_fc_multiplier(s_in: float, s_w: float) -> tuple[int, int]:
    # Per-tensor FC into Q3.12 (§11 Prepare): the same float32-product rule as FC.
    return fc_multipliers(s_in, Quant((s_w,), (0,)), 2.0 ** -12)


def _lstm_int8(call: Call, args):
    a, node, types = call.attrs, call.node, call.in_types
    s_x, zp_x = scale_zp(types[X], "the input", node)
    s_h, zp_h = scale_zp(types[H_STATE], "the hidden state", node)
    s_c, _ = scale_zp(types[C_STATE], "the cell state", node)
    act = a.get("activation", "TANH")
    if act not in ("TANH", "SIGMOID"):
        raise UnsupportedError(f"{node_label(node)}: integer LSTM activation {act}")
    x = _batch_major(args[X], a.get("time_major", False)).astype(np.int64)
    h = args[H_STATE].astype(np.int64)
    c = args[C_STATE].astype(np.int64)

    gx_all, rec = [], []
    for g in range(4):
        s_wx, zp_wx = scale_zp(types[W_INPUT + g], f"{GATES[g]} input weight", node)
        s_wh, zp_wh = scale_zp(types[R_INPUT + g], f"{GATES[g]} recurrent weight", node)
        wx = args[W_INPUT + g].astype(np.float64) - zp_wx
        acc = ((x - zp_x).astype(np.float64) @ wx.T).astype(np.int64) + args[BIAS_INPUT + g]
        mx, ex = gate_fc_multiplier(s_x, s_wx)
        gx_all.append(_clamp16(qmath.mbqm(qmath.wrap_int32(acc), mx, ex)))
        mh, eh = gate_fc_multiplier(s_h, s_wh)
        rec.append((args[R_INPUT + g].astype(np.float64) - zp_wh, mh, eh))

    m_ig, e_ig = qmath.quantize_multiplier(2.0 ** -30 / s_c)
    m_h, e_h = qmath.quantize_multiplier(2.0 ** -30 / s_h)
    cell_pot = int(round(np.log2(np.float32(s_c))))
    clip = float(a.get("cell_clip", 0.0))
    clip_q = int(np.trunc(min(max(clip / s_c, -32768.0), 32767.0))) if clip > 0 else 0

    outs = []
    for t in range(x.shape[1]):
        hc = (h - zp_h).astype(np.float64)
        z = []
        for g in range(4):
            w, mh, eh = rec[g]
            gh = _clamp16(qmath.mbqm((hc @ w.T).astype(np.int64), mh, eh))
            z.append(_clamp16(gx_all[g][:, t] + gh))
        i_gate, f_gate = qmath.sigmoid16(z[0]), qmath.sigmoid16(z[1])
        g_gate = qmath.tanh16(z[2], -12) if act == "TANH" else qmath.sigmoid16(z[2])
        c = _clamp16(qmath.mbqm(f_gate * c, 1 << 30, -14))
        c = _clamp16(c + _clamp16(qmath.mbqm(i_gate * g_gate, m_ig, e_ig)))
        if clip_q > 0:
            c = np.clip(c, -clip_q, clip_q)
        o_gate = qmath.sigmoid16(z[3])
        h = np.clip(zp_h + qmath.mbqm(qmath.tanh16(c, cell_pot) * o_gate, m_h, e_h), -128, 127)
        outs.append(h)
    y = _batch_major(np.stack(outs, axis=1), a.get("time_major", False))
    return [y.astype(np.int8), h.astype(np.int8), c.astype(np.int16)]


def _macs(call: Call) -> int:
    """Four gates, each a dot product over the input and the hidden state,
    per unit, batch row and time step (the gate nonlinearities count 0)."""
    x = call.in_types[X]
    units = call.in_types[R_INPUT].shape[0]
    return (x.size // x.shape[2]) * 4 * units * (x.shape[2] + units)


@register("tfl.lstm", infer=_infer, pattern=Pattern.OPAQUE, macs=_macs)
def lstm(call: Call, args):
    if call.in_types[X].dtype == "int8":
        return _lstm_int8(call, args)
    return _lstm_float(call, args)
