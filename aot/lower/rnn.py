"""Compute rule for ONNX's `LSTM`, `GRU` and `RNN` (semantics: aot/ops/rnn.py).

One loop nest per direction: batch rows (a loop when every row has the
same sequence length, else one nest per row, since the lengths are loop
bounds), then time steps. Per step, phase one computes every gate of every
unit into a gate scratch row (all gates read the previous hidden state, so
the state is only overwritten after that), phase two updates the cell and
hidden state unit by unit and emits Y. Steps past a row's length emit
zeros into Y; Y_h and Y_c are emitted after the row's last step.

Weights, biases, peepholes and initial states are read through their
tensor refs, so they may be constants (params) or run-time tensors alike.
"""
from __future__ import annotations

from aot.ir.tir import Assign, Bin, Const, Expr, Load, Stmt, Store, dt, flat_index, seq
from aot.lower import qmath as q
from aot.lower.elementwise import UNARY_ANY, UNARY_FLOAT, const_like, math_call
from aot.lower.rules import LowerCtx, kernel_rule
from aot.lower.tflite_int8 import loop
from aot.ops import rnn as ref

F32 = dt("float32")
ZERO = Const(0.0, F32)


def _activation(act: ref.Activation):
    attrs = {"alpha": act.alpha, "beta": act.beta}
    if act.name == "Affine":
        return lambda v: Bin("+", Bin("*", const_like(act.alpha, v), v),
                             const_like(act.beta, v))
    if act.name == "ScaledTanh":
        return lambda v: Bin("*", const_like(act.alpha, v),
                             math_call("tanh", Bin("*", const_like(act.beta, v), v)))
    fn = UNARY_FLOAT.get(act.name) or UNARY_ANY[act.name]
    return lambda v: fn(v, attrs)


class _Kernel:
    """The statements of one node; d (direction) and b (batch row) are loop
    values or constants, u the unit, t the time index."""

    def __init__(self, ctx: LowerCtx, ins, emit, s: ref.RnnSpec):
        self.ctx, self.ins, self.emit, self.s = ctx, ins, emit, s
        self.outs = len(ctx.out_types)
        self.h = ctx.scratch_buffer("hidden", "float32", (s.hidden,))
        self.c = ctx.scratch_buffer("cell", "float32", (s.hidden,))
        self.g = ctx.scratch_buffer("gates", "float32", (s.gates, s.hidden))
        self.d = 0

    def has(self, i: int) -> bool:
        return i < len(self.ins) and self.ins[i] is not None

    # ---- loads -----------------------------------------------------------------------
    def x(self, b, t, k) -> Expr:
        return self.ins[ref.X].load((t, b, k) if self.s.layout == 0 else (b, t, k))

    def bias(self, j: int, u: Expr) -> Expr:
        """Wb + Rb of gate row j * H + u."""
        if not self.has(ref.B):
            return ZERO
        gh = self.s.gates * self.s.hidden
        row = Bin("+", Const(j * self.s.hidden), u)
        return Bin("+", self.ins[ref.B].load((Const(self.d), row)),
                   self.ins[ref.B].load((Const(self.d), Bin("+", row, Const(gh)))))

    def rec_bias(self, j: int, u: Expr) -> Expr:
        if not self.has(ref.B):
            return ZERO
        row = Bin("+", Const((self.s.gates + j) * self.s.hidden), u)
        return self.ins[ref.B].load((Const(self.d), row))

    def input_bias(self, j: int, u: Expr) -> Expr:
        if not self.has(ref.B):
            return ZERO
        return self.ins[ref.B].load((Const(self.d), Bin("+", Const(j * self.s.hidden), u)))

    def hidden(self, k: Expr) -> Expr:
        return Load(self.h, k)

    def gate(self, j: int, u: Expr) -> Expr:
        return Load(self.g, flat_index((Const(j), u), self.g.shape))

    def state_index(self, b: Expr, u: Expr) -> tuple:
        d = Const(self.d)
        return (d, b, u) if self.s.layout == 0 else (b, d, u)

    # ---- pieces ------------------------------------------------------------------------
    def dot(self, blk: q.Block, init: Expr, n: int, lhs, w: int, j: int, u: Expr) -> Expr:
        """init + sum_k lhs(k) * weight(d, j*H + u, k) of W or R."""
        acc = blk.let("acc", init)
        row = Bin("+", Const(j * self.s.hidden), u)
        blk.add(loop(self.ctx, "k", n, lambda k: Assign(acc, Bin("+", acc, Bin(
            "*", lhs(k), self.ins[w].load((Const(self.d), row, k)))))))
        return acc

    def pre(self, blk: q.Block, b, t, j: int, u: Expr, bias: Expr, rec=True) -> Expr:
        """x_t W_j^T (+ h R_j^T) + bias at unit u."""
        acc = self.dot(blk, bias, self.s.features, lambda k: self.x(b, t, k), ref.W, j, u)
        if rec:
            acc = self.dot(blk, acc, self.s.hidden, self.hidden, ref.R, j, u)
        return acc

    def clip(self, v: Expr) -> Expr:
        if self.s.clip is None:
            return v
        return Bin("min", Bin("max", v, Const(-self.s.clip, F32)), Const(self.s.clip, F32))

    def act(self, i: int, v: Expr) -> Expr:
        return _activation(self.s.activations[self.d][i])(self.clip(v))

    def units(self, body) -> Stmt:
        def one(u):
            blk = q.Block(self.ctx)
            body(blk, u)
            return blk.stmt()
        return loop(self.ctx, "u", self.s.hidden, one)

    def emit_y(self, b, t, u, v: Expr) -> Stmt:
        d = Const(self.d)
        return self.emit(0, (t, d, b, u) if self.s.layout == 0 else (b, t, d, u), v)

    # ---- the cells: phase one (gates), phase two (state update) ----------------------
    def rnn(self, b, t) -> Stmt:
        def gates(blk, u):
            blk.add(Store(self.g, u, self.act(0, self.pre(blk, b, t, 0, u, self.bias(0, u)))))

        def update(blk, u):
            v = blk.let("h", self.gate(0, u))
            blk.add(Store(self.h, u, v), self.emit_y(b, t, u, v))
        return seq(self.units(gates), self.units(update))

    def gru(self, b, t) -> Stmt:
        hs = self.s.hidden

        def zr(blk, u):
            for j in (0, 1):
                v = self.act(0, self.pre(blk, b, t, j, u, self.bias(j, u)))
                blk.add(Store(self.g, flat_index((Const(j), u), self.g.shape), v))

        def candidate(blk, u):
            xw = self.pre(blk, b, t, 2, u, self.input_bias(2, u), rec=False)
            if self.s.linear_before_reset:
                hr = self.dot(blk, self.rec_bias(2, u), hs, self.hidden, ref.R, 2, u)
                v = Bin("+", xw, Bin("*", self.gate(1, u), hr))
            else:
                hr = self.dot(blk, self.rec_bias(2, u), hs,
                              lambda k: Bin("*", self.gate(1, k), self.hidden(k)), ref.R, 2, u)
                v = Bin("+", xw, hr)
            blk.add(Store(self.g, flat_index((Const(2), u), self.g.shape), self.act(1, v)))

        def update(blk, u):
            z = blk.let("z", self.gate(0, u))
            v = blk.let("h", Bin("+", Bin("*", Bin("-", Const(1.0, F32), z), self.gate(2, u)),
                                 Bin("*", z, self.hidden(u))))
            blk.add(Store(self.h, u, v), self.emit_y(b, t, u, v))
        return seq(self.units(zr), self.units(candidate), self.units(update))

    def peephole(self, j: int, u: Expr, c: Expr) -> Expr:
        """P_j * c (P's rows: input, output, forget), 0 without P."""
        if not self.has(ref.P):
            return ZERO
        return Bin("*", self.ins[ref.P].load(
            (Const(self.d), Bin("+", Const(j * self.s.hidden), u))), c)

    def lstm(self, b, t) -> Stmt:
        # ONNX's gate rows: input 0, output 1, forget 2, cell 3
        def gates(blk, u):
            c = Load(self.c, u)
            for j in (0, 2, 3, 1):
                if j == 2 and self.s.input_forget:
                    continue
                v = self.pre(blk, b, t, j, u, self.bias(j, u))
                if j == 0 or j == 2:
                    v = self.act(0, Bin("+", v, self.peephole(j, u, c)))
                elif j == 3:
                    v = self.act(1, v)
                # the output gate's peephole reads the new cell: applied in update
                blk.add(Store(self.g, flat_index((Const(j), u), self.g.shape), v))

        def update(blk, u):
            i = blk.let("i", self.gate(0, u))
            f = Bin("-", Const(1.0, F32), i) if self.s.input_forget else self.gate(2, u)
            c = blk.let("c", Bin("+", Bin("*", f, Load(self.c, u)), Bin("*", i, self.gate(3, u))))
            o = self.act(0, Bin("+", self.gate(1, u), self.peephole(1, u, c)))
            v = blk.let("h", Bin("*", o, _activation(self.s.activations[self.d][2])(c)))
            blk.add(Store(self.c, u, c), Store(self.h, u, v), self.emit_y(b, t, u, v))
        return seq(self.units(gates), self.units(update))

    # ---- one direction, one group of rows ------------------------------------------------
    def init_state(self, b) -> Stmt:
        def one(blk, u):
            for buf, i in ((self.h, ref.INITIAL_H), (self.c, ref.INITIAL_C)):
                if buf is self.c and self.s.kind != "LSTM":
                    continue
                v = self.ins[i].load(self.state_index(b, u)) if self.has(i) else ZERO
                blk.add(Store(buf, u, v))
        return self.units(one)

    def final_state(self, b) -> Stmt:
        def one(blk, u):
            for k, buf in ((1, self.h), (2, self.c)):
                if k < self.outs:
                    blk.add(self.emit(k, self.state_index(b, u), Load(buf, u)))
        return self.units(one)

    def row(self, b, n: int) -> Stmt:
        """Direction self.d over batch row b (an Expr) of sequence length n."""
        cell = {"RNN": self.rnn, "GRU": self.gru, "LSTM": self.lstm}[self.s.kind]
        rev = self.s.reverse[self.d]

        def step(k):
            return cell(b, Bin("-", Const(n - 1), k) if rev else k)
        body = [self.init_state(b), loop(self.ctx, "t", n, step)]
        if n < self.s.steps:
            body.append(loop(self.ctx, "t", self.s.steps - n, lambda k: self.units(
                lambda blk, u: blk.add(self.emit_y(b, Bin("+", k, Const(n)), u, ZERO)))))
        body.append(self.final_state(b))
        return seq(*body)

    def direction(self, d: int) -> Stmt:
        self.d = d
        lens = self.s.seq_lens
        if len(set(lens)) == 1:
            return loop(self.ctx, "b", self.s.batch, lambda b: self.row(b, lens[0]))
        return seq(*(self.row(Const(b), n) for b, n in enumerate(lens)))


@kernel_rule("LSTM", "GRU", "RNN")
def rnn(ctx: LowerCtx, ins, emit):
    seq_ref = ins[ref.SEQ_LENS] if len(ins) > ref.SEQ_LENS else None
    if seq_ref is not None and seq_ref.value is None:
        raise ctx.unsupported("sequence_lens computed at run time")
    spec = ref.rnn_spec(ctx.node, ctx.in_types, seq_ref.value if seq_ref is not None else None)
    k = _Kernel(ctx, ins, emit, spec)
    return seq(*(k.direction(d) for d in range(spec.directions)))
