"""ONNX's recurrent nets: `LSTM`, `GRU` and `RNN` (opsets 7-22), float32.

Inputs, in ONNX's order: X, W, R, B, sequence_lens, initial_h, then for LSTM
initial_c and the peepholes P. Outputs: Y (every step's hidden state), Y_h
(the last one) and, for LSTM, Y_c. Every direction, activation (with
activation_alpha/beta), clip, layout 0 and 1, GRU's linear_before_reset and
LSTM's input_forget is supported. `sequence_lens` must be known at compile
time (it decides the loop bounds): steps past a row's length give zeros in Y,
and a reverse direction starts at the row's last valid step, as ONNX
Runtime does.

The attributes are parsed once, by `rnn_spec`, into an `RnnSpec` that the
reference below and the lowering (aot/lower/rules/rnn.py) share.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aot.errors import ModelError, ShapeError, UnsupportedError, node_label
from aot.ir.graph import Node, TensorType
from aot.ops.registry import Call, Pattern, Sig, register

X, W, R, B, SEQ_LENS, INITIAL_H, INITIAL_C, P = range(8)
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"),
                       "RNN": ("Tanh",)}
# Activation -> its (alpha, beta) defaults; None: the function takes no such parameter.
# ONNX Runtime's: 0 where its table has no default (Affine, ScaledTanh,
# ThresholdedRelu, although the ThresholdedRelu op defaults to 1.0), so
# that a model verifies against the runtime it was checked with.
ACTIVATIONS = {
    "Relu": (None, None), "Tanh": (None, None), "Sigmoid": (None, None),
    "Affine": (0.0, 0.0), "LeakyRelu": (0.01, None), "ThresholdedRelu": (0.0, None),
    "ScaledTanh": (0.0, 0.0), "HardSigmoid": (0.2, 0.5), "Elu": (1.0, None),
    "Softsign": (None, None), "Softplus": (None, None),
}
_BY_LOWER = {k.lower(): k for k in ACTIVATIONS}


@dataclass(frozen=True)
class Activation:
    name: str                   # as in ACTIVATIONS
    alpha: float | None
    beta: float | None


@dataclass(frozen=True)
class RnnSpec:
    """One recurrent node's attributes and sizes, checked."""
    kind: str                               # LSTM, GRU, RNN
    hidden: int
    steps: int
    batch: int
    features: int
    reverse: tuple[bool, ...]               # per direction
    activations: tuple[tuple[Activation, ...], ...]   # per direction: f, g, h
    clip: float | None
    layout: int                             # 0: [T, B, ...]; 1: [B, T, ...]
    seq_lens: tuple[int, ...]               # per batch row
    linear_before_reset: bool
    input_forget: bool

    @property
    def gates(self) -> int:
        return GATES[self.kind]

    @property
    def directions(self) -> int:
        return len(self.reverse)


def _activations(node: Node, kind: str, directions: int) -> tuple[tuple[Activation, ...], ...]:
    per = len(DEFAULT_ACTIVATIONS[kind])
    names = node.attrs.get("activations") or DEFAULT_ACTIVATIONS[kind] * directions
    if len(names) != per * directions:
        raise UnsupportedError(f"{node_label(node)}: {len(names)} activations, expected "
                               f"{per * directions} ({per} per direction)")
    alphas = list(node.attrs.get("activation_alpha", ()))
    betas = list(node.attrs.get("activation_beta", ()))
    acts = []
    # ONNX Runtime's reading: each function that takes an alpha (a beta)
    # consumes the next value of the list, else its default.
    for raw in names:
        name = _BY_LOWER.get(str(raw).lower())
        if name is None:
            raise UnsupportedError(f"{node_label(node)}: activation '{raw}' is not supported "
                                   f"(supported: {', '.join(ACTIVATIONS)})")
        da, db = ACTIVATIONS[name]
        alpha = (alphas.pop(0) if alphas else da) if da is not None else None
        beta = (betas.pop(0) if betas else db) if db is not None else None
        acts.append(Activation(name, alpha, beta))
    return tuple(tuple(acts[d * per:(d + 1) * per]) for d in range(directions))


def rnn_spec(node: Node, in_types, seq_lens: np.ndarray | None) -> RnnSpec:
    """The node's RnnSpec; seq_lens is the constant sequence_lens input, if given."""
    kind, a = node.op, node.attrs
    x = in_types[X]
    if len(x.shape) != 3:
        raise ShapeError(f"{node_label(node)}: X is {list(x.shape)}, expected 3-D")
    layout = int(a.get("layout", 0))
    if layout not in (0, 1):
        raise ModelError(f"{node_label(node)}: layout {layout} (ONNX defines 0 and 1)")
    steps, batch, features = x.shape if layout == 0 else (x.shape[1], x.shape[0], x.shape[2])
    direction = a.get("direction", "forward")
    reverse = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}.get(
        direction)
    if reverse is None:
        raise ModelError(f"{node_label(node)}: direction '{direction}' (ONNX defines forward, "
                         "reverse and bidirectional)")
    w = in_types[W]
    hidden = int(a.get("hidden_size", w.shape[1] // GATES[kind] if w is not None else 0))
    if seq_lens is None:
        lens = (steps,) * batch
    else:
        lens = tuple(int(v) for v in np.asarray(seq_lens).reshape(-1))
        if len(lens) != batch or not all(1 <= v <= steps for v in lens):
            raise UnsupportedError(f"{node_label(node)}: sequence_lens {list(lens)} (expected "
                                   f"{batch} lengths from 1 to {steps})")
    clip = a.get("clip")
    return RnnSpec(kind, hidden, steps, batch, features, reverse,
                   _activations(node, kind, len(reverse)),
                   float(clip) if clip is not None else None, layout, lens,
                   bool(a.get("linear_before_reset", 0)), bool(a.get("input_forget", 0)))


def _check_types(sig: Sig, s: RnnSpec) -> None:
    d, g, h = s.directions, s.gates, s.hidden
    state = (d, s.batch, h) if s.layout == 0 else (s.batch, d, h)
    want = {W: (d, g * h, s.features), R: (d, g * h, h), B: (d, 2 * g * h),
            INITIAL_H: state, INITIAL_C: state, P: (d, 3 * h)}
    names = {W: "W", R: "R", B: "B", INITIAL_H: "initial_h", INITIAL_C: "initial_c", P: "P"}
    for i, shape in want.items():
        if i >= INITIAL_C and s.kind != "LSTM":
            continue
        ty = sig.in_types[i] if sig.has(i) else None
        if ty is None:
            if i in (W, R):
                raise sig.fail(f"needs input {names[i]}")
            continue
        if ty.shape != shape:
            raise sig.fail(f"{names[i]} is {list(ty.shape)}, expected {list(shape)}")
        if ty.dtype != "float32":
            raise UnsupportedError(f"{node_label(sig.node)}: {names[i]} of type {ty.dtype} "
                                   "(only float32 recurrent nets are supported)")
    if len(sig.in_types) > (8 if s.kind == "LSTM" else 6):
        raise sig.fail(f"has {len(sig.in_types)} inputs")


def _seq_lens(sig: Sig) -> np.ndarray | None:
    if not sig.has(SEQ_LENS):
        return None
    if SEQ_LENS >= len(sig.values) or sig.values[SEQ_LENS] is None:
        raise UnsupportedError(
            f"{node_label(sig.node)}: input {SEQ_LENS} must be a compile-time constant "
            "(sequence_lens bounds the time loops: make it an initializer, or --bind it)")
    return sig.values[SEQ_LENS]


def _infer(sig: Sig):
    x = sig.in_types[X]
    if x.dtype != "float32":
        raise UnsupportedError(f"{node_label(sig.node)}: {sig.node.op} on {x.dtype} "
                               "(only float32 recurrent nets are supported)")
    s = rnn_spec(sig.node, sig.in_types, _seq_lens(sig))
    _check_types(sig, s)
    d, h = s.directions, s.hidden
    y = (s.steps, d, s.batch, h) if s.layout == 0 else (s.batch, s.steps, d, h)
    state = (d, s.batch, h) if s.layout == 0 else (s.batch, d, h)
    outs = [TensorType(y, "float32"), TensorType(state, "float32")]
    if s.kind == "LSTM":
        outs.append(TensorType(state, "float32"))
    if len(sig.node.outputs) > len(outs):
        raise sig.fail(f"has {len(sig.node.outputs)} outputs, {sig.node.op} gives {len(outs)}")
    return outs


# ---- the reference --------------------------------------------------------------------

def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def activation_fn(act: Activation):
    """The numpy form of one activation (float64 in, float64 out)."""
    a, b = act.alpha, act.beta
    return {
        "Relu": lambda v: np.maximum(v, 0), "Tanh": np.tanh, "Sigmoid": _sigmoid,
        "Affine": lambda v: a * v + b,
        "LeakyRelu": lambda v: np.where(v >= 0, v, a * v),
        "ThresholdedRelu": lambda v: np.where(v > a, v, 0),
        "ScaledTanh": lambda v: a * np.tanh(b * v),
        "HardSigmoid": lambda v: np.clip(a * v + b, 0, 1),
        "Elu": lambda v: np.where(v > 0, v, a * np.expm1(v)),
        "Softsign": lambda v: v / (1 + np.abs(v)),
        "Softplus": lambda v: np.logaddexp(0, v),
    }[act.name]


def _cell(s: RnnSpec, d: int, w, r, wb, rb, p):
    """step(x_t, h, c) -> (h, c) of direction d for one batch row."""
    hs = s.hidden
    fns = [activation_fn(a) for a in s.activations[d]]
    clip = (lambda v: np.clip(v, -s.clip, s.clip)) if s.clip is not None else (lambda v: v)

    def rnn(xt, h, c):
        return fns[0](clip(w @ xt + wb + r @ h + rb)), c

    def gru(xt, h, c):
        xw, hr = w @ xt + wb, r[:2 * hs] @ h + rb[:2 * hs]
        z = fns[0](clip(xw[:hs] + hr[:hs]))
        rg = fns[0](clip(xw[hs:2 * hs] + hr[hs:]))
        rh, rbh = r[2 * hs:], rb[2 * hs:]
        rec = rg * (rh @ h + rbh) if s.linear_before_reset else rh @ (rg * h) + rbh
        cand = fns[1](clip(xw[2 * hs:] + rec))
        return (1 - z) * cand + z * h, c

    def lstm(xt, h, c):
        pre = w @ xt + wb + r @ h + rb          # gates i, o, f, c
        pi, po, pf = p[:hs], p[hs:2 * hs], p[2 * hs:]
        i = fns[0](clip(pre[:hs] + pi * c))
        f = 1 - i if s.input_forget else fns[0](clip(pre[2 * hs:3 * hs] + pf * c))
        c = f * c + i * fns[1](clip(pre[3 * hs:]))
        o = fns[0](clip(pre[hs:2 * hs] + po * c))
        return o * fns[2](c), c

    return {"RNN": rnn, "GRU": gru, "LSTM": lstm}[s.kind]


def _state(args, i: int, s: RnnSpec) -> np.ndarray:
    """initial_h / initial_c as [D, B, H] (zeros when absent)."""
    if i >= len(args) or args[i] is None:
        return np.zeros((s.directions, s.batch, s.hidden))
    v = args[i].astype(np.float64)
    return v if s.layout == 0 else np.swapaxes(v, 0, 1)


@dataclass(frozen=True)
class _Weights:
    w: np.ndarray
    r: np.ndarray
    wb: np.ndarray
    rb: np.ndarray
    p: np.ndarray


def _weights(args, s: RnnSpec, d: int) -> _Weights:
    gh = s.gates * s.hidden
    has = [i < len(args) and args[i] is not None for i in range(8)]
    bias = args[B][d].astype(np.float64) if has[B] else np.zeros(2 * gh)
    peep = (args[P][d].astype(np.float64) if s.kind == "LSTM" and has[P]
            else np.zeros(3 * s.hidden))
    return _Weights(args[W][d].astype(np.float64), args[R][d].astype(np.float64),
                    bias[:gh], bias[gh:], peep)


def _reference(call: Call, args):
    seq = args[SEQ_LENS] if len(args) > SEQ_LENS else None
    s = rnn_spec(call.node, call.in_types, seq)
    x = args[X].astype(np.float64)
    x = x if s.layout == 0 else np.swapaxes(x, 0, 1)            # [T, B, I]
    h0, c0 = _state(args, INITIAL_H, s), _state(args, INITIAL_C, s)
    y = np.zeros((s.steps, s.directions, s.batch, s.hidden))
    yh, yc = np.zeros_like(h0), np.zeros_like(c0)
    for d in range(s.directions):
        wt = _weights(args, s, d)
        step = _cell(s, d, wt.w, wt.r, wt.wb, wt.rb, wt.p)
        for b in range(s.batch):
            n = s.seq_lens[b]
            h, c = h0[d, b], c0[d, b]
            for k in range(n):
                t = n - 1 - k if s.reverse[d] else k
                h, c = step(x[t, b], h, c)
                y[t, d, b] = h
            yh[d, b], yc[d, b] = h, c
    if s.layout == 1:
        y, yh, yc = np.transpose(y, (2, 0, 1, 3)), np.swapaxes(yh, 0, 1), np.swapaxes(yc, 0, 1)
    outs = [y, yh, yc][:len(call.out_types)]
    return [o.astype(np.float32) for o in outs]


def _macs(call: Call) -> int:
    """Per direction, batch row and step: each gate row a dot product over
    the input and the hidden state (activations count 0; steps past a
    row's sequence length are counted too: the call has no input values)."""
    s = rnn_spec(call.node, call.in_types, None)
    return s.directions * s.batch * s.steps * s.gates * s.hidden * (s.features + s.hidden)


for _kind in GATES:
    register(_kind, infer=_infer, pattern=Pattern.OPAQUE, macs=_macs)(_reference)
