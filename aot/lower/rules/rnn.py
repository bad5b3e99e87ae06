"""Compute rule for ONNX's `LSTM`, `GRU` and `RNN` (semantics: aot/ops/rnn.py).

One loop nest per direction: batch rows (a loop when every row has the
same sequence length, else one nest per row, since the lengths are loop
bounds), then time steps. Per step, phase one sums every gate row's
pre-activation from the input and the previous hidden state into a scratch
row (axpy loops over the transposed weights), phase two updates the cell
and hidden state unit by unit, in place, and emits Y (GRU computes its
reset gate first: the candidate's recurrent sum needs r * h). Steps past a
row's length emit zeros into Y; Y_h and Y_c are emitted after the row's
last step.

Weights, biases, peepholes and initial states are read through their
tensor refs, so they may be constants (params) or run-time tensors alike.
"""
from __future__ import annotations

from aot.ir.tir import (Bin, Const, Decl, Expr, Load, Select, Stmt, Store, Unary, dt, flat_index,
                        seq)
from aot.lower.arith import qmath as q
from aot.lower.arith.loops import loop
from aot.lower.rules.elementwise import UNARY_ANY, UNARY_FLOAT, const_like, math_call
from aot.lower.rules import LowerCtx, kernel_rule
from aot.ops import rnn as ref

F32 = dt("float32")
ZERO = Const(0.0, F32)
UNROLL = 4


def _tanh(v: Expr) -> Expr:
    """tanh through one expf: (1 - e^-2|v|) / (1 + e^-2|v|), signed. libm's
    tanhf goes through expm1f and was 36% of an LSTM's time; this form is
    within 2e-7 of it (absolute: near 0 the difference 1 - e^-2|v| loses
    the low bits), far inside the tolerance `aot verify` uses."""
    one = const_like(1, v)
    t = math_call("exp", Bin("*", const_like(-2, v), Unary("abs", v)))
    m = Bin("/", Bin("-", one, t), Bin("+", one, t))
    return Select(Bin("<", v, const_like(0, v)), Unary("neg", m), m)


def _activation(act: ref.Activation):
    attrs = {"alpha": act.alpha, "beta": act.beta}
    if act.name == "Tanh":
        return _tanh
    if act.name == "Affine":
        return lambda v: Bin("+", Bin("*", const_like(act.alpha, v), v),
                             const_like(act.beta, v))
    if act.name == "ScaledTanh":
        return lambda v: Bin("*", const_like(act.alpha, v),
                             _tanh(Bin("*", const_like(act.beta, v), v)))
    fn = UNARY_FLOAT.get(act.name) or UNARY_ANY[act.name]
    return lambda v: fn(v, attrs)


class _Kernel:
    """The statements of one node; d (direction) and b (batch row) are loop
    values or constants, u the unit, t the time index."""

    def __init__(self, ctx: LowerCtx, ins, emit, s: ref.RnnSpec):
        self.ctx, self.ins, self.emit, self.s = ctx, ins, emit, s
        self.outs = len(ctx.out_types)
        rows = s.gates * s.hidden
        self.h = ctx.scratch_buffer("hidden", "float32", (s.hidden,))
        self.c = ctx.scratch_buffer("cell", "float32", (s.hidden,))
        self.pre = ctx.scratch_buffer("gates", "float32", (rows,))
        self.rec = ctx.scratch_buffer("candidate", "float32", (s.hidden,))
        self.d = 0
        # Weights transposed to [K, rows] per direction: the gate sums are
        # then axpy loops over contiguous rows, which vectorize (a dot
        # product per unit is a float reduction the compiler must keep in
        # order, one add at a time).
        self.wt = [self.transposed(ref.W, d) for d in range(s.directions)]
        self.rt = [self.transposed(ref.R, d) for d in range(s.directions)]

    def has(self, i: int) -> bool:
        return i < len(self.ins) and self.ins[i] is not None

    def transposed(self, i: int, d: int):
        value = self.ins[i].value
        if value is None:
            return None
        name = "input_weights" if i == ref.W else "recurrent_weights"
        return self.ctx.param(f"{name}_t{d}", value[d].T.astype("float32"))

    def weight(self, i: int, k: Expr, row: Expr) -> Expr:
        """W or R of direction d at (row, k)."""
        wt = (self.wt if i == ref.W else self.rt)[self.d]
        if wt is None:
            return self.ins[i].load((Const(self.d), row, k))
        return Load(wt, flat_index((k, row), wt.shape))

    # ---- loads -----------------------------------------------------------------------
    def x(self, b, t, k) -> Expr:
        return self.ins[ref.X].load((t, b, k) if self.s.layout == 0 else (b, t, k))

    def bias(self, row: Expr, recurrent: bool) -> Expr:
        """Wb (or Rb) of gate row `row`."""
        if not self.has(ref.B):
            return ZERO
        if recurrent:
            row = Bin("+", row, Const(self.s.gates * self.s.hidden))
        return self.ins[ref.B].load((Const(self.d), row))

    def state_index(self, b: Expr, u: Expr) -> tuple:
        d = Const(self.d)
        return (d, b, u) if self.s.layout == 0 else (b, d, u)

    # ---- pieces ------------------------------------------------------------------------
    def axpy(self, buf, n: int, lhs, w: int, first: int, count: int) -> Stmt:
        """buf[r] += sum_k lhs(k) * weight(first + r, k) for r < count, UNROLL
        values of k per pass over buf (one pass per k is bound by buf's
        loads and stores)."""
        def block(k0: Expr, width: int) -> Stmt:
            vs, decls = [], []
            for i in range(width):
                v = self.ctx.fresh("v", "float32")
                decls.append(Decl(v, lhs(Bin("+", k0, Const(i)) if i else k0)))
                vs.append((v, Bin("+", k0, Const(i)) if i else k0))

            def row(r):
                at = Bin("+", r, Const(first))
                terms = [Bin("*", v, self.weight(w, k, at)) for v, k in vs]
                total = terms[0]
                for term in terms[1:]:
                    total = Bin("+", total, term)
                return Store(buf, r, Bin("+", Load(buf, r), total))
            return seq(*decls, loop(self.ctx, "r", count, row))
        main = n // UNROLL
        body = []
        if main:
            body.append(loop(self.ctx, "k", main, lambda k: block(k, UNROLL), step=UNROLL))
        if n % UNROLL:
            body.append(block(Const(main * UNROLL), n % UNROLL))
        return seq(*body)

    def gate_sums(self, b, t, recurrent_rows: int) -> Stmt:
        """pre = x_t W^T + Wb (+ h R^T + Rb on the first recurrent_rows rows)."""
        rows = self.s.gates * self.s.hidden

        def init(first: int, count: int, recurrent: bool) -> Stmt:
            def one(r):
                row = Bin("+", r, Const(first))
                v = self.bias(row, False)
                return Store(self.pre, row, Bin("+", v, self.bias(row, True)) if recurrent else v)
            return loop(self.ctx, "r", count, one) if count else seq()
        init = seq(init(0, recurrent_rows, True), init(recurrent_rows, rows - recurrent_rows,
                                                       False))
        return seq(init, self.axpy(self.pre, self.s.features, lambda k: self.x(b, t, k),
                                   ref.W, 0, rows),
                   self.axpy(self.pre, self.s.hidden, lambda k: Load(self.h, k), ref.R, 0,
                             recurrent_rows))

    def clip(self, v: Expr) -> Expr:
        if self.s.clip is None:
            return v
        return Bin("min", Bin("max", v, Const(-self.s.clip, F32)), Const(self.s.clip, F32))

    def act(self, i: int, v: Expr) -> Expr:
        return _activation(self.s.activations[self.d][i])(self.clip(v))

    def gate(self, j: int, u: Expr) -> Expr:
        return Load(self.pre, Bin("+", Const(j * self.s.hidden), u))

    def units(self, body) -> Stmt:
        def one(u):
            blk = q.Block(self.ctx)
            body(blk, u)
            return blk.stmt()
        return loop(self.ctx, "u", self.s.hidden, one)

    def emit_y(self, b, t, u, v: Expr) -> Stmt:
        d = Const(self.d)
        return self.emit(0, (t, d, b, u) if self.s.layout == 0 else (b, t, d, u), v)

    # ---- the cells: gate sums from the previous state, then the update -----------------
    def rnn(self, b, t) -> Stmt:
        def update(blk, u):
            v = blk.let("h", self.act(0, self.gate(0, u)))
            blk.add(Store(self.h, u, v), self.emit_y(b, t, u, v))
        return seq(self.gate_sums(b, t, self.s.hidden), self.units(update))

    def gru(self, b, t) -> Stmt:
        hs, lbr = self.s.hidden, self.s.linear_before_reset

        def zr(blk, u):
            for j in (0, 1):
                at = Bin("+", Const(j * hs), u)
                blk.add(Store(self.pre, at, self.act(0, Load(self.pre, at))))

        # the candidate's recurrent sum: Rh h + Rbh, or Rh (r * h) + Rbh
        rec_init = loop(self.ctx, "u", hs, lambda u: Store(
            self.rec, u, self.bias(Bin("+", Const(2 * hs), u), True)))
        rec = self.axpy(self.rec, hs, (lambda k: Load(self.h, k)) if lbr else
                        (lambda k: Bin("*", self.gate(1, k), Load(self.h, k))),
                        ref.R, 2 * hs, hs)

        def update(blk, u):
            r_part = Bin("*", self.gate(1, u), Load(self.rec, u)) if lbr else Load(self.rec, u)
            cand = blk.let("cand", self.act(1, Bin("+", self.gate(2, u), r_part)))
            z = blk.let("z", self.gate(0, u))
            v = blk.let("h", Bin("+", Bin("*", Bin("-", Const(1.0, F32), z), cand),
                                 Bin("*", z, Load(self.h, u))))
            blk.add(Store(self.h, u, v), self.emit_y(b, t, u, v))
        return seq(self.gate_sums(b, t, 2 * hs), self.units(zr), rec_init, rec,
                   self.units(update))

    def peephole(self, j: int, u: Expr, c: Expr) -> Expr:
        """P_j * c (P's rows: input, output, forget), 0 without P."""
        if not self.has(ref.P):
            return ZERO
        return Bin("*", self.ins[ref.P].load(
            (Const(self.d), Bin("+", Const(j * self.s.hidden), u))), c)

    def lstm(self, b, t) -> Stmt:
        # ONNX's gate rows: input 0, output 1, forget 2, cell 3. Every sum
        # is in `pre` before the loop, so h and c are updated in place.
        def update(blk, u):
            c_old = blk.let("c_old", Load(self.c, u))
            i = blk.let("i", self.act(0, Bin("+", self.gate(0, u), self.peephole(0, u, c_old))))
            if self.s.input_forget:
                f = Bin("-", Const(1.0, F32), i)
            else:
                f = self.act(0, Bin("+", self.gate(2, u), self.peephole(2, u, c_old)))
            c = blk.let("c", Bin("+", Bin("*", f, c_old),
                                 Bin("*", i, self.act(1, self.gate(3, u)))))
            o = self.act(0, Bin("+", self.gate(1, u), self.peephole(1, u, c)))
            v = blk.let("h", Bin("*", o, _activation(self.s.activations[self.d][2])(c)))
            blk.add(Store(self.c, u, c), Store(self.h, u, v), self.emit_y(b, t, u, v))
        return seq(self.gate_sums(b, t, 4 * self.s.hidden), self.units(update))

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
