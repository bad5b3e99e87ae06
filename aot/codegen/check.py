"""What both code generators require of a PrimFunc, checked once up front.

TIR is untyped Python data until here; a mistake in a compute rule (an int32
added to an int64, a float condition) would otherwise surface as a C compiler
error or an LLVM assertion far from its cause. `check_func` names the
function and the offending node instead.
"""
from __future__ import annotations

from aot.isa.half import HALF_OPS
from aot.isa.calls import LANE, check_call, lane_crossing
from aot.errors import UnsupportedError
from aot.ir.tir import (Assign, Bin, Broadcast, Call, Cast, Comment, Const, Decl, DType, Expr,
                        Fail, For, If, Load, NTASKS, PHASE, PrimFunc, Select, Seq, Stmt, Store,
                        TASK, Unary, Var, BOOL, BOOL_OPS, dtype_of, is_split)

BIN_OPS = frozenset("+ - * / % min max << >> & | ^ < <= > >= == != and or".split())
UNARY_OPS = frozenset(("neg", "not", "bitnot", "abs"))
_SHIFTS = ("<<", ">>")


class _Checker:
    def __init__(self, func: PrimFunc):
        self.func = func
        self.buffers = set(func.params)
        # a split kernel's task arguments (tir.ForKind.PARALLEL)
        self.declared: set[Var] = {TASK, NTASKS, PHASE} if is_split(func) else set()
        self.used: set = set()          # the buffers stored or loaded
        self.read: set[Var] = set()     # the variables the expressions read

    def fail(self, what: str) -> UnsupportedError:
        return UnsupportedError(f"code generation, function {self.func.name}: {what}")

    def stmt(self, s: Stmt):
        if isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, Store):
            self.buffer(s.buffer)
            self.index(s.index)
            d = self.expr(s.value)
            if d.scalar != s.buffer.dtype.scalar:
                raise self.fail(f"storing {d} into {s.buffer.name} of {s.buffer.dtype}")
        elif isinstance(s, (Decl, Assign)):
            value = s.init if isinstance(s, Decl) else s.value
            if self.expr(value) != s.var.dtype:
                raise self.fail(f"{s.var.name} of type {s.var.dtype} given a {dtype_of(value)}")
            if isinstance(s, Assign) and s.var not in self.declared:
                raise self.fail(f"assignment to undeclared variable {s.var.name}")
            self.declared.add(s.var)
        elif isinstance(s, For):
            if s.step <= 0:
                raise self.fail(f"loop {s.var.name} with step {s.step}")
            if s.var.dtype.lanes != 1 or s.var.dtype.is_float or s.var.dtype.scalar == "bool":
                raise self.fail(f"loop variable {s.var.name} of type {s.var.dtype}")
            self.scoped(s.body, s.var)
        elif isinstance(s, If):
            if self.expr(s.cond) != DType("bool"):
                raise self.fail(f"If on a {dtype_of(s.cond)} condition (needs a scalar bool)")
            self.scoped(s.then)
            if s.orelse is not None:
                self.scoped(s.orelse)
        elif isinstance(s, Fail):
            # 0 is the status of a kernel that ran to its end
            if not isinstance(s.code, int) or not 0 < s.code < 2**31:
                raise self.fail(f"Fail with code {s.code!r} (needs 1 <= code < 2**31)")
        elif not isinstance(s, Comment):
            raise self.fail(f"not a TIR statement: {s!r}")

    def scoped(self, body: Stmt, *new: Var):
        """A loop or branch body: what it declares is gone after it, as in C."""
        outer = set(self.declared)
        self.declared.update(new)
        self.stmt(body)
        self.declared = outer

    def buffer(self, b):
        if b not in self.buffers:
            raise self.fail(f"buffer {b.name} is used but not a parameter")
        self.used.add(b)

    def index(self, e: Expr):
        d = self.expr(e)
        if d.lanes != 1 or d.is_float or d.scalar == "bool":
            raise self.fail(f"index of type {d}")

    def expr(self, e: Expr) -> DType:
        """The type of e (dtype_of's), once its parts are checked: built from
        the operands' types, not asked of dtype_of a node (a walk down each)."""
        if isinstance(e, Var):
            if e not in self.declared:
                raise self.fail(f"variable {e.name} ({e.dtype}) is used but never declared")
            self.read.add(e)
            return e.dtype
        if isinstance(e, Const):
            if e.dtype.lanes != 1:
                raise self.fail(f"vector constant {e}: use Broadcast")
            return e.dtype
        if isinstance(e, Load):
            self.buffer(e.buffer)
            self.index(e.index)
            return e.buffer.dtype.with_lanes(e.lanes)
        if isinstance(e, Broadcast):
            d = self.expr(e.value)
            if d.lanes != 1:
                raise self.fail("Broadcast of a vector")
            return d.with_lanes(e.lanes)
        if isinstance(e, Bin):
            d = self.binary(e)
            return BOOL.with_lanes(d.lanes) if e.op in BOOL_OPS else d
        if isinstance(e, Unary):
            if e.op not in UNARY_OPS:
                raise self.fail(f"unknown unary op '{e.op}'")
            d = self.expr(e.a)
            _no_half_arithmetic(self, e.op, d)
            return BOOL.with_lanes(d.lanes) if e.op == "not" else d
        if isinstance(e, Cast):
            src = self.expr(e.a)
            if src.lanes != e.dtype.lanes:
                raise self.fail(f"cast {dtype_of(e.a)} -> {e.dtype} changes the lane count")
            if e.bits and src.bits != e.dtype.bits:
                raise self.fail(f"bit cast {src} -> {e.dtype} changes the width")
            return e.dtype
        if isinstance(e, Select):
            dc, da, db = self.expr(e.cond), self.expr(e.a), self.expr(e.b)
            if da != db or dc.lanes != da.lanes or dc.scalar != "bool":
                raise self.fail(f"Select({dc}, {da}, {db}): needs a bool condition of the "
                                "branches' lanes and branches of one type")
            return da
        if isinstance(e, Call):
            _no_half_arithmetic(self, e.fn, e.dtype)
            lanes = {self.expr(a).lanes for a in e.args} - {1}
            if lanes - {e.dtype.lanes} and not lane_crossing(e.fn):
                raise self.fail(f"{e.fn}: vector operands of other lanes than {e.dtype}")
            try:
                check_call(e.fn, e.args, e.dtype)
            except UnsupportedError as err:
                raise self.fail(str(err)) from None
            return e.dtype
        raise self.fail(f"not a TIR expression: {e!r}")

    def binary(self, e: Bin):
        if e.op not in BIN_OPS:
            raise self.fail(f"unknown binary op '{e.op}'")
        da, db = self.expr(e.a), self.expr(e.b)
        _no_half_arithmetic(self, e.op, da)
        if da.lanes != db.lanes or (da != db and e.op not in _SHIFTS):
            raise self.fail(f"operands of '{e.op}' have types {da} and {db}")
        if e.op in ("and", "or") and da.scalar != "bool":
            raise self.fail(f"'{e.op}' on {da}: logical ops take bool")
        if e.op in ("<<", ">>", "&", "|", "^") and (da.is_float or db.is_float):
            raise self.fail(f"'{e.op}' on {da}, {db}")
        if e.op in _SHIFTS and da.lanes > 1 and da != db:
            raise self.fail(f"vector shift of {da} by {db}: give both sides one type")
        return da


def _no_half_arithmetic(checker: _Checker, op: str, d: DType) -> None:
    if d.scalar == "float16" and op not in HALF_OPS and op != LANE.name:
        raise checker.fail(f"'{op}' on {d}: halves are only loaded, stored, converted, "
                           "picked from a vector and computed by aot/isa/half.py's calls "
                           "(aot/lower/tir_passes/float16.py computes them in float32)")


def check_func(func: PrimFunc) -> tuple[set, set[Var]]:
    """Raise UnsupportedError, naming func, for TIR the code generators cannot
    print; else (the buffers its body stores or loads, the variables its
    expressions read), which the C printer needs and this walk meets anyway."""
    checker = _Checker(func)
    if len(checker.buffers) != len(func.params):
        raise checker.fail("the same buffer is passed twice")
    for b in func.params:
        if b.dtype.lanes != 1:
            raise checker.fail(f"buffer {b.name} has vector type {b.dtype}")
    checker.stmt(func.body)
    return checker.used, checker.read
