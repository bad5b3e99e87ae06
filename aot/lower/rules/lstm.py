"""Compute rule for `tfl.lstm` (UNIDIRECTIONAL_SEQUENCE_LSTM), float and int8.

Semantics: aot/ops/lstm.py (the int8 path is tflite-micro's integer LSTM,
TFLITE_INT8.md §11, bit for bit). The rule is purely input -> output: it
reads the state from the node's state inputs (18, 19), works on private
copies in scratch, writes the sequence output step by step and the final
hidden and cell state to outputs 1 and 2 at the end. The executor maps the
new state back onto the variables (Graph.updates); since the inputs are
copied first, it may give the state input and output the same memory.

Per step and batch row: the four gate pre-activations (input-side FC +
recurrent FC, each requantized to Q3.12 in the int8 path) into a gate
scratch row, then the cell and hidden update unit by unit. All gates read
the previous hidden state, so the hidden state is only overwritten after
every gate of the step is computed.
"""
from __future__ import annotations

import numpy as np

from aot.ir.tir import (Assign, Bin, Call, Cast, Const, Expr, Load, Select, Stmt, Store, Unary,
                        Var, dt, flat_index, seq)
from aot.lower.arith import qmath as q
from aot.lower.arith.requant import mbqm_block
from aot.lower.arith.loops import loop, nest
from aot.lower.arith.quant import weight_dtype, to_i32
from aot.lower.rules import LowerCtx, kernel_rule
from aot.ops import lstm as ref
from aot.ops.quant import qmath as ref_q
from aot.ops.quant.tflite_int8 import scale_zp

F32 = dt("float32")


def _neg(v: Expr) -> Expr:
    return Unary("neg", v)
INPUT, FORGET, CELL, OUTPUT = range(4)      # gate order of the inputs (aot/ops/lstm.GATES)


def _const_input(ctx: LowerCtx, ins, i: int, what: str) -> np.ndarray:
    r = ins[i] if i < len(ins) else None
    if r is None or r.value is None:
        raise ctx.unsupported(f"an LSTM whose {what} (input {i}) is not a constant")
    return r.value


class _Shapes:
    def __init__(self, ctx: LowerCtx, ins):
        x = ins[ref.X]
        self.time_major = bool(ctx.attrs.get("time_major", False))
        if self.time_major:
            self.steps, self.batch, self.features = x.shape
        else:
            self.batch, self.steps, self.features = x.shape
        self.units = ins[ref.R_INPUT].shape[0]

    def seq_index(self, b: Expr, t: Expr, k: Expr) -> tuple:
        return (t, b, k) if self.time_major else (b, t, k)


def _copy_state(ctx: LowerCtx, s: _Shapes, src, dst) -> Stmt:
    return nest(ctx, ("b", "u"), (s.batch, s.units),
                lambda i: Store(dst, flat_index(i, dst.shape), src.load(i)))


def _emit_state(ctx: LowerCtx, s: _Shapes, emit, k: int, buf) -> Stmt:
    return nest(ctx, ("b", "u"), (s.batch, s.units),
                lambda i: emit(k, i, Load(buf, flat_index(i, buf.shape))))


def _dot(ctx: LowerCtx, b: q.Block, acc: Var, n: int, lhs, rhs) -> None:
    """acc += Σ_k lhs(k) * rhs(k)."""
    b.add(loop(ctx, "k", n, lambda k: Assign(acc, Bin("+", acc, Bin("*", lhs(k), rhs(k))))))


def _gate_sums(ctx: LowerCtx, b: q.Block, s: "_Shapes", x, h_s, p, at, init_x: Expr,
               init_h: Expr, widen) -> tuple[Var, Var]:
    """The input-side and recurrent sums of one gate unit (weights [U, K] rows)."""
    bi, t, u = at
    ax = b.let("acc_x", init_x)
    _dot(ctx, b, ax, s.features, lambda k: widen(x.load(s.seq_index(bi, t, k))),
         lambda k: widen(Load(p["wx"], Bin("+", Bin("*", u, Const(s.features)), k))))
    ah = b.let("acc_h", init_h)
    _dot(ctx, b, ah, s.units, lambda k: widen(Load(h_s, flat_index((bi, k), h_s.shape))),
         lambda k: widen(Load(p["wh"], Bin("+", Bin("*", u, Const(s.units)), k))))
    return ax, ah


# ------------------------------------------------------------- int16 activations

def sigmoid16(b: q.Block, table, x: Expr) -> Var:
    """Q3.12 -> Q0.15 logistic by table interpolation (§11 SIG16)."""
    return sigmoid16_scaled(b, table, b.let("v", Bin("*", x, Const(3))))


def sigmoid16_scaled(b: q.Block, table, v: Var) -> Var:
    """SIG16's interpolation on v, the input already scaled by 3 * 2**12 (the
    int16 LOGISTIC kernel scales its own way first)."""
    a = b.let("a", Select(Bin("<", v, Const(0)), _neg(v), v))
    return _interpolate(b, table, v, a, 9, 32767 << 10, 10, 1 << 25)


def tanh16(b: q.Block, table, x: Expr, pot: int) -> Var:
    """int16 with scale 2**pot -> Q0.15 tanh (§11 TANH16)."""
    k = 12 + pot
    if k >= 0:
        v = b.let("v", Bin("*", q.i64(x), Const(3 << k, dt("int64"))))
    else:
        v = b.let("v", Bin(">>", Bin("+", Bin("*", q.i64(x), Const(3, dt("int64"))),
                                     Const(1 << (-k - 1), dt("int64"))),
                           Const(-k, dt("int64"))))
    return tanh16_scaled(b, table, v)


def tanh16_scaled(b: q.Block, table, v: Var) -> Var:
    """TANH16's interpolation on v (int32 or int64), already scaled by 3 * 2**12."""
    a = b.let("a", Select(Bin("<", v, Const(0, v.dtype)), _neg(v), v))
    return _interpolate(b, table, v, a, 8, 65535 << 8, 8, 1 << 23, tanh=True)


def _interpolate(b: q.Block, table, v: Var, a: Var, frac_bits: int, top: int,
                 out_shift: int, half_range: int, tanh: bool = False) -> Var:
    """The shared table interpolation of SIG16 and TANH16."""
    wide = a.dtype.scalar == "int64"
    j_raw = Bin(">>", a, Const(frac_bits, a.dtype))
    j = b.let("j", Cast(dt("int32"), Bin("min", j_raw, Const(255, a.dtype))) if wide else j_raw)
    f = b.let("f", Cast(dt("int32"), Bin("&", a, Const((1 << frac_bits) - 1, a.dtype)))
              if wide else Bin("&", a, Const((1 << frac_bits) - 1)))
    jj = b.let("jj", Bin("min", j, Const(254)))
    lo = to_i32(Load(table, jj))
    hi = to_i32(Load(table, Bin("+", jj, Const(1))))
    r = b.let("r", Select(Bin(">=", j, Const(255)), Const(top),
                          Bin("+", Bin("*", lo, Const(1 << frac_bits)),
                              Bin("*", f, Bin("-", hi, lo)))))
    zero = Const(0, v.dtype)
    if tanh:
        pos = Bin(">>", Bin("+", Bin("-", r, Const(half_range)), Const(128)), Const(out_shift))
        neg = Bin(">>", Bin("+", Bin("-", Const(half_range), r), Const(127)), Const(out_shift))
    else:
        pos = Bin(">>", Bin("+", r, Const(1 << (out_shift - 1))), Const(out_shift))
        neg = Bin(">>", Bin("+", Bin("-", Const(half_range), r),
                            Const((1 << (out_shift - 1)) - 1)), Const(out_shift))
    return b.let("act", Select(Bin(">=", v, zero), pos, neg))


# ------------------------------------------------------------------ int8 LSTM

def _lstm_int8(ctx: LowerCtx, ins, emit) -> Stmt:
    s = _Shapes(ctx, ins)
    types, node = ctx.in_types, ctx.node
    s_x, zp_x = scale_zp(types[ref.X], "the input", node)
    s_h, zp_h = scale_zp(types[ref.H_STATE], "the hidden state", node)
    s_c, _ = scale_zp(types[ref.C_STATE], "the cell state", node)
    act = ctx.attrs.get("activation", "TANH")
    if act not in ("TANH", "SIGMOID"):
        raise ctx.unsupported(f"integer LSTM activation {act}")
    x = ins[ref.X]
    table = ctx.param("sigmoid_table", ref_q.SIGMOID_TABLE_UINT16.astype(np.int32))

    gates = []
    for g in range(4):
        s_wx, zp_wx = scale_zp(types[ref.W_INPUT + g], f"{ref.GATES[g]} input weight", node)
        s_wh, zp_wh = scale_zp(types[ref.R_INPUT + g], f"{ref.GATES[g]} recurrent weight", node)
        wx = _const_input(ctx, ins, ref.W_INPUT + g, "input weight").astype(np.int64) - zp_wx
        wh = _const_input(ctx, ins, ref.R_INPUT + g, "recurrent weight").astype(np.int64) - zp_wh
        bias = _const_input(ctx, ins, ref.BIAS_INPUT + g, "gate bias").astype(np.int64)
        # no padding in a matrix product: fold the zero points into the biases
        bx = ref_q.wrap_int32(bias - zp_x * wx.sum(axis=1)).astype(np.int32)
        bh = ref_q.wrap_int32(-zp_h * wh.sum(axis=1)).astype(np.int32)
        name = ref.GATES[g]
        gates.append(dict(
            wx=ctx.param(f"{name}_input_weights", weight_dtype(wx)),
            wh=ctx.param(f"{name}_recurrent_weights", weight_dtype(wh)),
            bx=ctx.param(f"{name}_input_bias", bx), bh=ctx.param(f"{name}_recurrent_bias", bh),
            mx=ref.gate_fc_multiplier(s_x, s_wx), mh=ref.gate_fc_multiplier(s_h, s_wh)))

    m_ig, e_ig = ref_q.quantize_multiplier(2.0 ** -30 / s_c)
    m_h, e_h = ref_q.quantize_multiplier(2.0 ** -30 / s_h)
    cell_pot = int(round(np.log2(np.float32(s_c))))
    clip = float(ctx.attrs.get("cell_clip", 0.0))
    clip_q = int(np.trunc(min(max(clip / s_c, -32768.0), 32767.0))) if clip > 0 else 0

    h_s = ctx.scratch_buffer("hidden", "int8", (s.batch, s.units))
    c_s = ctx.scratch_buffer("cell", "int16", (s.batch, s.units))
    gate_s = ctx.scratch_buffer("gates", "int16", (4, s.units))

    def gate_unit(bi, t, g, u) -> Stmt:
        p = gates[g]
        b = q.Block(ctx)
        ax, ah = _gate_sums(ctx, b, s, x, h_s, p, (bi, t, u), Load(p["bx"], u),
                            Load(p["bh"], u), to_i32)
        gx = q.clamp(mbqm_block(b, ax, *map(int, p["mx"]), name="scaled_x"), -32768, 32767)
        gh = q.clamp(mbqm_block(b, ah, *map(int, p["mh"]), name="scaled_h"), -32768, 32767)
        z = b.let("z", q.clamp(Bin("+", gx, gh), -32768, 32767))
        if g == CELL and act == "TANH":
            y = tanh16(b, table, z, -12)
        else:
            y = sigmoid16(b, table, z)
        b.add(Store(gate_s, flat_index((Const(g), u), gate_s.shape), Cast(dt("int16"), y)))
        return b.stmt()

    def update_unit(bi, t, u) -> Stmt:
        b = q.Block(ctx)

        def gate(g):
            return to_i32(Load(gate_s, flat_index((Const(g), u), gate_s.shape)))
        at = flat_index((bi, u), c_s.shape)
        c = b.let("c", to_i32(Load(c_s, at)))
        forget = q.clamp(mbqm_block(b, Bin("*", gate(FORGET), c), 1 << 30, -14,
                                      name="forget"), -32768, 32767)
        b.add(Assign(c, forget))
        update = q.clamp(mbqm_block(b, Bin("*", gate(INPUT), gate(CELL)), m_ig, e_ig,
                                      name="update"), -32768, 32767)
        b.add(Assign(c, q.clamp(Bin("+", c, update), -32768, 32767)))
        if clip_q > 0:
            b.add(Assign(c, q.clamp(c, -clip_q, clip_q)))
        b.add(Store(c_s, at, Cast(dt("int16"), c)))
        th = tanh16(b, table, c, cell_pot)
        hv = q.offset(mbqm_block(b, Bin("*", th, gate(OUTPUT)), m_h, e_h, name="hidden"), zp_h)
        h = b.let("h", Cast(dt("int8"), q.clamp(hv, -128, 127)))
        b.add(Store(h_s, at, h), emit(0, s.seq_index(bi, t, u), h))
        return b.stmt()

    return _recurrence(ctx, ins, emit, s, h_s, c_s, gate_unit, update_unit)


def _recurrence(ctx, ins, emit, s: _Shapes, h_s, c_s, gate_unit, update_unit) -> Stmt:
    def step(t, bi):
        return seq(*(loop(ctx, "u", s.units, lambda u, g=g: gate_unit(bi, t, g, u))
                     for g in range(4)),
                   loop(ctx, "u", s.units, lambda u: update_unit(bi, t, u)))
    return seq(_copy_state(ctx, s, ins[ref.H_STATE], h_s),
               _copy_state(ctx, s, ins[ref.C_STATE], c_s),
               nest(ctx, ("t", "b"), (s.steps, s.batch), lambda v: step(*v)),
               _emit_state(ctx, s, emit, 1, h_s), _emit_state(ctx, s, emit, 2, c_s))


# ----------------------------------------------------------------- float LSTM

def _float_activation(ctx: LowerCtx, name: str):
    zero = Const(0.0, F32)
    if name == "TANH":
        return lambda v: Call("tanhf", (v,), F32)
    if name == "SIGMOID":
        return _sigmoid
    if name == "RELU":
        return lambda v: Bin("max", v, zero)
    if name == "RELU6":
        return lambda v: Bin("min", Bin("max", v, zero), Const(6.0, F32))
    if name == "NONE":
        return lambda v: v
    raise ctx.unsupported(f"LSTM activation {name}")


def _sigmoid(v: Expr) -> Expr:
    one = Const(1.0, F32)
    return Bin("/", one, Bin("+", one, Call("expf", (_neg(v),), F32)))


def _lstm_float(ctx: LowerCtx, ins, emit) -> Stmt:
    s = _Shapes(ctx, ins)
    act = _float_activation(ctx, ctx.attrs.get("activation", "TANH"))
    x = ins[ref.X]
    params = []
    for g in range(4):
        name = ref.GATES[g]
        params.append(dict(
            wx=ctx.param(f"{name}_input_weights", _const_input(
                ctx, ins, ref.W_INPUT + g, "input weight").astype(np.float32)),
            wh=ctx.param(f"{name}_recurrent_weights", _const_input(
                ctx, ins, ref.R_INPUT + g, "recurrent weight").astype(np.float32)),
            bias=ctx.param(f"{name}_bias", _const_input(
                ctx, ins, ref.BIAS_INPUT + g, "gate bias").astype(np.float32))))
    clip = float(ctx.attrs.get("cell_clip", 0.0))
    h_s = ctx.scratch_buffer("hidden", "float32", (s.batch, s.units))
    c_s = ctx.scratch_buffer("cell", "float32", (s.batch, s.units))
    gate_s = ctx.scratch_buffer("gates", "float32", (4, s.units))

    def gate_unit(bi, t, g, u) -> Stmt:
        p = params[g]
        b = q.Block(ctx)
        ax, ah = _gate_sums(ctx, b, s, x, h_s, p, (bi, t, u), Load(p["bias"], u),
                            Const(0.0, F32), lambda v: v)
        pre = Bin("+", ax, ah)
        y = act(pre) if g == CELL else _sigmoid(pre)
        b.add(Store(gate_s, flat_index((Const(g), u), gate_s.shape), y))
        return b.stmt()

    def update_unit(bi, t, u) -> Stmt:
        b = q.Block(ctx)

        def gate(g):
            return Load(gate_s, flat_index((Const(g), u), gate_s.shape))
        at = flat_index((bi, u), c_s.shape)
        c = b.let("c", Bin("+", Bin("*", gate(FORGET), Load(c_s, at)),
                           Bin("*", gate(INPUT), gate(CELL))))
        if clip > 0:
            b.add(Assign(c, Bin("min", Bin("max", c, Const(-clip, F32)), Const(clip, F32))))
        h = b.let("h", Bin("*", gate(OUTPUT), act(c)))
        b.add(Store(c_s, at, c), Store(h_s, at, h), emit(0, s.seq_index(bi, t, u), h))
        return b.stmt()

    return _recurrence(ctx, ins, emit, s, h_s, c_s, gate_unit, update_unit)


@kernel_rule("tfl.lstm")
def lstm(ctx: LowerCtx, ins, emit):
    ref.check_form(_View(ctx))
    if ins[ref.X].type.dtype == "int8":
        return _lstm_int8(ctx, ins, emit)
    if ins[ref.X].type.dtype == "float32":
        return _lstm_float(ctx, ins, emit)
    raise ctx.unsupported(f"LSTM on {ins[ref.X].type.dtype}")


class _View:
    def __init__(self, ctx: LowerCtx):
        self.node, self.in_types = ctx.node, ctx.in_types
