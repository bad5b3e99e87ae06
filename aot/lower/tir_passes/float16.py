"""Half-precision tensors computed in float32: the TIR pass.

A float16 tensor is stored as 16-bit values (arena, weights, inputs and
outputs: 2 bytes an element), but no compute rule has float16 cases. This
pass rewrites a kernel so that float16 exists only at memory:

- a load of a float16 buffer becomes Cast(float32, load);
- a store into a float16 buffer stores Cast(float16, value): the one
  rounding, to nearest even, at the kernel's output;
- every other float16 type (constants, locals, math calls, kernel-private
  scratch buffers) becomes float32, so accumulators and intermediates are
  float32 as ONNX Runtime computes fp16 on CPU;
- a Cast to float16 inside an expression (an ONNX Cast fused with what
  follows) keeps its rounding: Cast(float32, Cast(float16, x)).

Half arithmetic (`aot_hfma`, `aot_hadd`, `aot_hsub`: aot/isa/half.py, which a kernel asks for only
where the target computes in half) is the exception: its operands stay
halves (a promoted load or local taken back to its half), the locals it
accumulates into stay float16 (read elsewhere, they are converted like a
load), and so does a workspace it reads (its stores round to half).

Afterwards a float16 expression is only a Load of a float16 buffer under a
Cast to float32, or a Cast to float16 (or a float16 constant) under a Store
or a Cast to float32: the code generators print those two conversions
(aot/codegen/c.py, aot/codegen/llvm.py) and nothing else in half precision.
A float16 value converted from float64 or a 64-bit integer goes through
float32 (two roundings; exact for every integer a half can hold).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from aot.isa.calls import lane, libm
from aot.isa.half import HALF_OPS
from aot.ir.tir import (FLOAT32, Assign, Broadcast, Buffer, BufferKind, Call, Cast, Const, Decl,
                        DType, Expr, If, Load, PrimFunc, Select, Stmt, Store, Var, dtype_of,
                        expr_children, map_expr, map_stmt, nodes_of, stmt_exprs, walk_expr,
                        walk_stmt)

HALF = "float16"


def _f32(d: DType) -> DType:
    return FLOAT32.with_lanes(d.lanes)


def _is_half(d: DType) -> bool:
    return d.scalar == HALF


def _uses_half(func: PrimFunc) -> bool:
    """Whether any value of func is a half. An expression's type comes from
    its leaves, casts and calls (dtype_of), so only those are asked: the
    question is then one look a node, not a walk down each one."""
    if any(_is_half(b.dtype) for b in func.params):
        return True
    for s in walk_stmt(func.body):
        if isinstance(s, (Decl, Assign)) and _is_half(s.var.dtype):
            return True
        for e in stmt_exprs(s):
            if any(_is_half(x.buffer.dtype if isinstance(x, Load) else x.dtype)
                   for x in nodes_of(e, _TYPED)):
                return True
    return False


_TYPED = (Var, Const, Cast, Call, Load)     # the nodes whose dtype is their own


def half_const(value: float, lanes: int = 1) -> Const:
    """A float16 constant holding `value` rounded to the nearest half."""
    return Const(float(np.float16(value)), DType(HALF, lanes))


def to_half(v: Expr) -> Expr:
    """v (float32 after promotion, or another type) rounded to float16."""
    d = dtype_of(v)
    if _is_half(d):
        return v
    if isinstance(v, Cast) and _is_half(dtype_of(v.a)):
        return v.a                      # half -> float32 -> half is the identity
    if isinstance(v, Const):
        return half_const(v.value, d.lanes)
    if isinstance(v, Select):           # a choice between halves (Where, Pad) stays one
        return Select(v.cond, to_half(v.a), to_half(v.b))
    if d.scalar != "float32":
        v = Cast(_f32(d), v)
    return Cast(DType(HALF, d.lanes), v)


def _half_operand(e: Expr) -> Expr:
    """An operand of half arithmetic, promoted by now, as the half it was:
    Cast(float32, h) -> h, through broadcasts and lane picks; anything
    else rounded to half."""
    if isinstance(e, Cast) and not e.bits and _is_half(dtype_of(e.a)):
        return e.a
    if isinstance(e, Broadcast):
        return Broadcast(_half_operand(e.value), e.lanes)
    if isinstance(e, Call) and e.fn == "aot_lane":
        return lane(_half_operand(e.args[0]), e.args[1].value)
    return to_half(e)


def _native(func: PrimFunc) -> tuple[set, set]:
    """What stays float16 around half arithmetic: the locals it assigns
    (its accumulators) and the half locals read only as its operands (its
    loaded inputs), and the buffers those operands or locals load."""
    def is_half_op(e: Expr) -> bool:
        return isinstance(e, Call) and e.fn in HALF_OPS
    inits: dict = {}
    operands, reads = set(), set()
    for s in walk_stmt(func.body):
        if isinstance(s, (Decl, Assign)) and _is_half(s.var.dtype):
            inits.setdefault(s.var, []).append(s.init if isinstance(s, Decl) else s.value)
        todo = list(stmt_exprs(s))
        while todo:                    # the reads outside half arithmetic's operands
            x = todo.pop()
            if is_half_op(x):
                operands.update(v for a in x.args for v in walk_expr(a)
                                if isinstance(v, (Var, Load)))
                continue
            if isinstance(x, Var):
                reads.add(x)
            todo.extend(expr_children(x))
    accs = {v for v, es in inits.items() if any(is_half_op(e) for e in es)}
    inputs = {v for v in inits if v in operands and v not in reads and v not in accs}
    loads = {x for x in operands if isinstance(x, Load)}
    loads |= {x for v in inputs for e in inits[v] for x in walk_expr(e) if isinstance(x, Load)}
    return accs | inputs, {x.buffer for x in loads}


def _copied_half(e: Expr) -> bool:
    """Whether e is a half taken as it is: a load, a constant, a choice of those."""
    if isinstance(e, Select):
        return _copied_half(e.a) and _copied_half(e.b)
    if isinstance(e, Broadcast):
        return _copied_half(e.value)
    return isinstance(e, (Load, Const)) and _is_half(dtype_of(e))


class _Promote:
    """The rewrite of one kernel; scratch buffers retyped consistently."""

    def __init__(self, func: PrimFunc):
        # a workspace holding computed values keeps them in float32; one that
        # only holds copies of halves (a zero-padded input) stays 2 bytes each
        self.half_locals, half_read = _native(func)
        computed = {s.buffer for s in walk_stmt(func.body)
                    if isinstance(s, Store) and not _copied_half(s.value)} - half_read
        self.scratch = {b: replace(b, dtype=_f32(b.dtype)) for b in func.params
                        if b.kind is BufferKind.SCRATCH and _is_half(b.dtype) and b in computed}

    def buffer(self, b: Buffer) -> Buffer:
        return self.scratch.get(b, b)

    def var(self, v: Var) -> Var:
        if v in self.half_locals:
            return v
        return Var(v.name, _f32(v.dtype)) if _is_half(v.dtype) else v

    def expr(self, e: Expr) -> Expr:
        return map_expr(e, self.node)

    def node(self, e: Expr) -> Expr | None:
        if isinstance(e, Load):
            b = self.buffer(e.buffer)
            if b is not e.buffer:
                return Load(b, e.index, e.lanes)
            return Cast(_f32(b.dtype.with_lanes(e.lanes)), e) if _is_half(b.dtype) else None
        if isinstance(e, Var) and e in self.half_locals:
            return Cast(_f32(e.dtype), e)
        if isinstance(e, Var):
            return self.var(e) if _is_half(e.dtype) else None
        if isinstance(e, Call) and e.fn in HALF_OPS:
            return Call(e.fn, tuple(_half_operand(a) for a in e.args), e.dtype)
        if isinstance(e, Const):
            return Const(e.value, _f32(e.dtype)) if _is_half(e.dtype) else None
        if isinstance(e, Cast) and e.bits:
            # a reinterpretation keeps the width: its half operand (promoted
            # by now) goes back to its bits, a half result is promoted
            a = to_half(e.a) if dtype_of(e.a).bits != e.dtype.bits else e.a
            same = Cast(e.dtype, a, bits=True)
            return Cast(_f32(e.dtype), same) if _is_half(e.dtype) else same
        if isinstance(e, Cast) and _is_half(e.dtype):
            return Cast(_f32(e.dtype), to_half(e.a))
        if isinstance(e, Call) and _is_half(e.dtype):
            f = libm(e.fn, FLOAT32)
            return Call(f.c_name if f else e.fn, e.args, _f32(e.dtype))
        return None

    def stmt(self, s: Stmt) -> Stmt | None:
        if isinstance(s, Store):
            b = self.buffer(s.buffer)
            value = self.expr(s.value)
            return Store(b, self.expr(s.index), to_half(value) if _is_half(b.dtype) else value)
        if isinstance(s, Decl) and s.var in self.half_locals:
            return Decl(s.var, _half_operand(self.expr(s.init)))
        if isinstance(s, Assign) and s.var in self.half_locals:
            return Assign(s.var, _half_operand(self.expr(s.value)))
        if isinstance(s, Decl):
            return Decl(self.var(s.var), self.expr(s.init))
        if isinstance(s, Assign):
            return Assign(self.var(s.var), self.expr(s.value))
        if isinstance(s, If):
            return If(self.expr(s.cond), s.then, s.orelse)
        return None


def promote_float16(func: PrimFunc) -> PrimFunc:
    """The pass (aot/lower/tir_passes/__init__.py): func with float16 only at memory."""
    if not _uses_half(func):
        return func
    p = _Promote(func)
    return replace(func, params=tuple(p.buffer(b) for b in func.params),
                   body=map_stmt(func.body, p.stmt))
