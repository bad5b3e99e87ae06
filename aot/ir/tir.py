"""The loop-level tensor IR (TIR): what one fused group becomes.

A PrimFunc is a loop nest over flat buffers. Expressions are scalar or
vector (`lanes` > 1): a vector Load reads `lanes` consecutive elements, a
Broadcast splats a scalar; arithmetic on vectors is lane-wise. That is all
the codegens need to emit explicit vector tiles (GCC/Clang vector types in
C, vector IR in LLVM) without guessing what a loop meant.

Compute rules (aot/lower) build the algorithm; schedules (aot/schedule)
rewrite the loop nests; codegens (aot/codegen) print them and decide
nothing themselves. Every node is a frozen dataclass, so TIR can be compared,
hashed and shared.
"""
from __future__ import annotations

import enum
import functools
import operator
import weakref
from dataclasses import dataclass, field
from typing import Callable, Union

# Scalar element types TIR knows, by numpy name.
SCALARS = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32",
           "int64", "uint64", "float16", "float32", "float64")
# bits per scalar, looked up (the codegens ask for it hundreds of thousands of times)
_BITS = {s: 8 if s == "bool" else int("".join(c for c in s if c.isdigit())) for s in SCALARS}


@dataclass(frozen=True)
class DType:
    scalar: str
    lanes: int = 1

    def __post_init__(self):
        if self.scalar not in SCALARS:
            raise ValueError(f"TIR has no dtype {self.scalar}")

    def with_lanes(self, lanes: int) -> "DType":
        return DType(self.scalar, lanes)

    @property
    def is_float(self) -> bool:
        return self.scalar.startswith("float")

    @property
    def bits(self) -> int:
        return _BITS[self.scalar]

    @property
    def compute_bits(self) -> int:
        """The width arithmetic on this type happens at: float16 is stored in
        16 bits but computed in float32 (aot/lower/tir_passes/float16.py), so vector
        widths are chosen for float32 lanes."""
        return 32 if self.scalar == "float16" else self.bits

    def __str__(self) -> str:
        return self.scalar if self.lanes == 1 else f"{self.scalar}x{self.lanes}"


def dt(s: str | DType, lanes: int = 1) -> DType:
    return s if isinstance(s, DType) else DType(s, lanes)


INT32 = DType("int32")
INT64 = DType("int64")
FLOAT32 = DType("float32")
BOOL = DType("bool")


# --------------------------------------------------------------------- buffers

class BufferKind(enum.Enum):
    INPUT = "input"       # read by the kernel, written by someone else
    OUTPUT = "output"     # written by the kernel
    PARAM = "param"       # constant weights, linked in as const data
    SCRATCH = "scratch"   # kernel-private workspace, planned in the arena


@dataclass(frozen=True)
class Buffer:
    """A flat, contiguous array; `shape` documents the logical layout."""
    name: str
    dtype: DType
    shape: tuple[int, ...]
    kind: BufferKind = BufferKind.INPUT
    align: int = 16

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.bits // 8


# ------------------------------------------------------------------ expressions

@dataclass(frozen=True)
class Var:
    name: str
    dtype: DType = INT32


@dataclass(frozen=True)
class Const:
    value: Union[int, float, bool]
    dtype: DType = INT32


@dataclass(frozen=True)
class Bin:
    """Binary arithmetic, comparison or logic, lane-wise on vectors.

    op: + - * / % min max << >> & | ^ < <= > >= == != and or.
    `/` and `%` on integers truncate toward zero, as in C.
    """
    op: str
    a: "Expr"
    b: "Expr"


@dataclass(frozen=True)
class Unary:
    op: str        # neg, not, abs
    a: "Expr"


@dataclass(frozen=True)
class Cast:
    """C's conversion of `a` to `dtype`; with `bits`, the same bits read as
    `dtype` instead (a float's IEEE bits as an integer of its width, or
    back: ONNX BitCast), which C spells with memcpy and LLVM as bitcast."""
    dtype: DType
    a: "Expr"
    bits: bool = False


@dataclass(frozen=True)
class Select:
    cond: "Expr"
    a: "Expr"
    b: "Expr"


@dataclass(frozen=True)
class Call:
    """An intrinsic: math (expf, tanhf, sqrtf, ...) or a runtime helper
    (aot_srdhm, aot_rdbpot, ...). `dtype` is the result type."""
    fn: str
    args: tuple["Expr", ...]
    dtype: DType


@dataclass(frozen=True)
class Load:
    """buffer[index], or `lanes` consecutive elements from there."""
    buffer: Buffer
    index: "Expr"
    lanes: int = 1


@dataclass(frozen=True)
class Broadcast:
    value: "Expr"
    lanes: int


Expr = Union[Var, Const, Bin, Unary, Cast, Select, Call, Load, Broadcast]

_COMPARE = {"<", "<=", ">", ">=", "==", "!=", "and", "or"}
BOOL_OPS = frozenset(_COMPARE)     # the Bin ops whose value is a bool (dtype_of)


def dtype_of(e: Expr) -> DType:
    # Down the first operands, iteratively: a chain's depth is the model's.
    to_bool, lanes = False, None
    while True:
        if isinstance(e, (Var, Const, Call, Cast)):
            d = e.dtype
            break
        if isinstance(e, Load):
            d = e.buffer.dtype.with_lanes(e.lanes)
            break
        if isinstance(e, Broadcast):
            lanes = e.lanes if lanes is None else lanes
            e = e.value
        elif isinstance(e, Bin):
            to_bool = to_bool or e.op in _COMPARE
            e = e.a
        elif isinstance(e, Unary):
            to_bool = to_bool or e.op == "not"
            e = e.a
        elif isinstance(e, Select):
            e = e.a
        else:
            raise TypeError(f"not a TIR expression: {e!r}")
    if to_bool:
        d = BOOL.with_lanes(d.lanes)
    return d if lanes is None else d.with_lanes(lanes)


# ------------------------------------------------------------------- statements

class ForKind(enum.Enum):
    SERIAL = "serial"
    UNROLLED = "unrolled"
    VECTORIZED = "vectorized"   # the body uses `lanes`-wide accesses; printed as one step
    # Trips split over the tasks of a thread pool: task k of n runs trips
    # [k * trips / n, (k + 1) * trips / n). Set by aot/lower/tir_passes/parallel.py only
    # where iterations write disjoint elements; the kernel then takes TASK
    # and NTASKS as its last two arguments.
    PARALLEL = "parallel"


@dataclass(frozen=True)
class Store:
    buffer: Buffer
    index: Expr
    value: Expr


@dataclass(frozen=True)
class Decl:
    """A local variable (an accumulator in a register), assigned its init."""
    var: Var
    init: Expr


@dataclass(frozen=True)
class Assign:
    var: Var
    value: Expr


@dataclass(frozen=True)
class For:
    var: Var
    extent: int
    body: "Stmt"
    kind: ForKind = ForKind.SERIAL
    start: int = 0
    step: int = 1


@dataclass(frozen=True)
class If:
    cond: Expr
    then: "Stmt"
    orelse: "Stmt | None" = None


@dataclass(frozen=True)
class Seq:
    stmts: tuple["Stmt", ...]


@dataclass(frozen=True)
class Comment:
    text: str


@dataclass(frozen=True)
class Fail:
    """Stop the kernel and return `code` (> 0) to the entry point: a check on
    values only known at run time failed (an index out of range). A kernel
    with a Fail returns an int32 status, 0 when it ran to the end; one
    without returns nothing, so checks cost nothing where none are needed."""
    code: int


Stmt = Union[Store, Decl, Assign, For, If, Seq, Comment, Fail]


def seq(*stmts: Stmt) -> Stmt:
    """A Seq with nested Seqs flattened; a single statement stays itself."""
    flat: list[Stmt] = []
    for s in stmts:
        flat.extend(s.stmts if isinstance(s, Seq) else (s,))
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


@dataclass(frozen=True)
class PrimFunc:
    """One kernel: parameters in call order, a body, and where it came from."""
    name: str
    params: tuple[Buffer, ...]
    body: Stmt
    sources: tuple[str, ...] = ()      # graph node names, for the C comment
    attrs: tuple[tuple[str, object], ...] = field(default=())


# A split kernel's (ForKind.PARALLEL) last two arguments: which task of
# how many runs it now. Statements outside the split loops are guarded by
# an If on TASK, so exactly one task runs them.
TASK = Var("task")
NTASKS = Var("ntasks")
# A split kernel in phases (PrimFunc attrs "phases" > 1: a later part reads
# what an earlier one wrote) takes PHASE before TASK: the pool runs phase 0
# on every task, then phase 1, ...; the body is an If on PHASE per phase.
PHASE = Var("phase")


def per_object(fn: Callable[[Stmt], bool]) -> Callable[[Stmt], bool]:
    """fn, a question about a statement tree, answered once per tree object
    while it lives: TIR is immutable, and the passes, the printer and the
    entry point ask the same few questions of each kernel, each a walk over
    its statements (~10^4 of a large kernel). By identity, not equality:
    hashing a frozen tree hashes all of it."""
    answers: dict[int, tuple[weakref.ref, bool]] = {}

    def asked(body: Stmt) -> bool:
        key = id(body)
        hit = answers.get(key)
        if hit is not None and hit[0]() is body:
            return hit[1]
        answer = fn(body)
        answers[key] = (weakref.ref(body, lambda _: answers.pop(key, None)), answer)
        return answer
    return functools.wraps(fn)(asked)


@per_object
def _has_parallel(body: Stmt) -> bool:
    return any(isinstance(s, For) and s.kind is ForKind.PARALLEL for s in walk_stmt(body))


@per_object
def _has_fail(body: Stmt) -> bool:
    return any(isinstance(s, Fail) for s in walk_stmt(body))


def is_split(func: PrimFunc) -> bool:
    """Whether the kernel runs as tasks of a thread pool (has a PARALLEL loop)."""
    return _has_parallel(func.body)


def phases(func: PrimFunc) -> int:
    """How many pool jobs a split kernel takes, one after the other."""
    return dict(func.attrs).get("phases", 1)


def can_fail(func: PrimFunc) -> bool:
    """Whether the kernel returns a status (it has a Fail)."""
    return _has_fail(func.body)


# ------------------------------------------------------------------- traversal

def map_stmt(s: Stmt, f: Callable[[Stmt], Stmt | None]) -> Stmt:
    """Rebuild s bottom-up; f may return a replacement for a node (or None to keep it)."""
    if isinstance(s, For):
        body = map_stmt(s.body, f)
        if body is not s.body:
            s = For(s.var, s.extent, body, s.kind, s.start, s.step)
    elif isinstance(s, Seq):
        s = seq(*(map_stmt(x, f) for x in s.stmts))
    elif isinstance(s, If):
        then, orelse = map_stmt(s.then, f), map_stmt(s.orelse, f) if s.orelse else None
        if then is not s.then or orelse is not s.orelse:
            s = If(s.cond, then, orelse)
    out = f(s)
    return s if out is None else out


def walk_stmt(s: Stmt):
    """Every statement in s, pre-order."""
    yield s
    if isinstance(s, For):
        yield from walk_stmt(s.body)
    elif isinstance(s, Seq):
        for x in s.stmts:
            yield from walk_stmt(x)
    elif isinstance(s, If):
        yield from walk_stmt(s.then)
        if s.orelse is not None:
            yield from walk_stmt(s.orelse)


def expr_children(e: Expr) -> tuple[Expr, ...]:
    """The operands of e, in order."""
    get = _CHILDREN.get(e.__class__)       # by exact class: the walks' hottest line
    if get is not None:
        return get(e)
    if isinstance(e, Bin):
        return (e.a, e.b)
    if isinstance(e, (Unary, Cast)):
        return (e.a,)
    if isinstance(e, Select):
        return (e.cond, e.a, e.b)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Load):
        return (e.index,)
    if isinstance(e, Broadcast):
        return (e.value,)
    if isinstance(e, (Var, Const)):
        return ()
    raise TypeError(f"not a TIR expression: {e!r}")


_CHILDREN: dict[type, Callable[[Expr], tuple[Expr, ...]]] = {
    Bin: operator.attrgetter("a", "b"), Unary: lambda e: (e.a,), Cast: lambda e: (e.a,),
    Select: operator.attrgetter("cond", "a", "b"), Call: operator.attrgetter("args"),
    Load: lambda e: (e.index,), Broadcast: lambda e: (e.value,), Var: lambda e: (),
    Const: lambda e: (),
}


def _with_children(e: Expr, kids: list[Expr]) -> Expr:
    if isinstance(e, Bin):
        return Bin(e.op, kids[0], kids[1])
    if isinstance(e, Unary):
        return Unary(e.op, kids[0])
    if isinstance(e, Cast):
        return Cast(e.dtype, kids[0], e.bits)
    if isinstance(e, Select):
        return Select(kids[0], kids[1], kids[2])
    if isinstance(e, Call):
        return Call(e.fn, tuple(kids), e.dtype)
    if isinstance(e, Load):
        return Load(e.buffer, kids[0], e.lanes)
    if isinstance(e, Broadcast):
        return Broadcast(kids[0], e.lanes)
    return e


def map_expr(e: Expr, f: Callable[[Expr], Expr | None],
             memo: dict[int, Expr] | None = None) -> Expr:
    """Rebuild e bottom-up; f may return a replacement for a node (or None to keep it).

    Iterative (an explicit stack, post-order, operands left to right): no
    recursion depth tied to how deep a model's expression nests.

    With memo (by id of a node of e, so only while e lives), what each node
    became is kept: a sub-expression shared by several places, as the
    lowering rules' unrolled kernels share about a third of their inner
    nodes, is rebuilt once and f is not called on it again. Only for an f
    that depends on the node alone (without memo, f sees every place)."""
    seen = memo.get if memo is not None else _NOTHING.get
    done: list[Expr] = []
    todo: list = [e]        # nodes to visit; _AFTER above a node: its operands are done
    pop, push, extend, append = todo.pop, todo.append, todo.extend, done.append
    reversed_kids = _REVERSED_CHILDREN.get
    while todo:
        x = pop()
        if x is _AFTER:
            x = pop()
            kids = expr_children(x)
            n = len(kids)
            new = done[-n:]
            del done[-n:]
            # unchanged operands keep the node itself: most of a pass's
            # nodes are kept, and rebuilding each one cost the most
            key = id(x)
            if any(map(operator.is_not, new, kids)):
                x = _with_children(x, new)
        else:
            key = id(x)
            out = seen(key)
            if out is not None:
                append(out)
                continue
            get = reversed_kids(x.__class__)
            kids = get(x) if get is not None else tuple(reversed(expr_children(x)))
            if kids:
                push(x)
                push(_AFTER)
                extend(kids)
                continue
        out = f(x)
        out = x if out is None else out
        if memo is not None:
            memo[key] = out
        append(out)
    return done[0]


_AFTER = object()       # map_expr's marker: the node below it is visited next
_NOTHING: dict = {}     # map_expr's memo when it has none: never a hit


def map_stmt_exprs(s: Stmt, f: Callable[[Expr], Expr | None]) -> Stmt:
    """s with map_expr(., f) applied to every expression in it (f depends
    on the node alone: a node shared by several statements is mapped once)."""
    memo: dict[int, Expr] = {}

    def mapped(e: Expr) -> Expr:
        return map_expr(e, f, memo)

    def one(x: Stmt):       # None where nothing changed: the statement is kept
        if isinstance(x, Store):
            index, value = mapped(x.index), mapped(x.value)
            changed = index is not x.index or value is not x.value
            return Store(x.buffer, index, value) if changed else None
        if isinstance(x, Decl):
            init = mapped(x.init)
            return Decl(x.var, init) if init is not x.init else None
        if isinstance(x, Assign):
            value = mapped(x.value)
            return Assign(x.var, value) if value is not x.value else None
        if isinstance(x, If):
            cond = mapped(x.cond)
            return If(cond, x.then, x.orelse) if cond is not x.cond else None
        return None
    return map_stmt(s, one)


def substitute(e: Expr, mapping: dict[Var, Expr]) -> Expr:
    """Replace variables in an expression."""
    return map_expr(e, lambda x: mapping.get(x) if isinstance(x, Var) else None)


def substitute_stmt(s: Stmt, mapping: dict[Var, Expr]) -> Stmt:
    return map_stmt_exprs(s, lambda x: mapping.get(x) if isinstance(x, Var) else None)


# ------------------------------------------------------- constant-folding builders
# Index arithmetic is built with these so that the printed code reads
# `out[i * 16 + j]`, not `out[((i * 16) + (j * 1)) + 0]`.

def const(value, dtype: str | DType = "int32") -> Const:
    return Const(value, dt(dtype))


def _is_const(e: Expr, value=None) -> bool:
    return isinstance(e, Const) and (value is None or e.value == value)


def add(a: Expr, b: Expr) -> Expr:
    if _is_const(a) and _is_const(b) and dtype_of(a) == dtype_of(b):
        return Const(a.value + b.value, a.dtype)
    if _is_const(b, 0):
        return a
    if _is_const(a, 0):
        return b
    return Bin("+", a, b)


def sub(a: Expr, b: Expr) -> Expr:
    if _is_const(a) and _is_const(b) and dtype_of(a) == dtype_of(b):
        return Const(a.value - b.value, a.dtype)
    if _is_const(b, 0):
        return a
    return Bin("-", a, b)


def mul(a: Expr, b: Expr) -> Expr:
    if _is_const(a) and _is_const(b) and dtype_of(a) == dtype_of(b):
        return Const(a.value * b.value, a.dtype)
    if _is_const(b, 1):
        return a
    if _is_const(a, 1):
        return b
    if (_is_const(a, 0) or _is_const(b, 0)) and not dtype_of(a).is_float:
        return Const(0, dtype_of(a))
    return Bin("*", a, b)


def flat_index(idx: tuple[Expr, ...], shape: tuple[int, ...]) -> Expr:
    """Row-major offset of a multi-index into a contiguous array of `shape`."""
    offset: Expr = Const(0, INT32)
    stride = 1
    for i, d in zip(reversed(idx), reversed(shape)):
        offset = add(mul(i, Const(stride, INT32)) if stride != 1 else i, offset)
        stride *= d
    return offset


def walk_expr(e: Expr):
    """Every sub-expression of e, pre-order (iteratively, see map_expr)."""
    todo = [e]
    pop, extend, reversed_kids = todo.pop, todo.extend, _REVERSED_CHILDREN.get
    while todo:
        x = pop()
        yield x
        get = reversed_kids(x.__class__)      # by exact class, as expr_children
        if get is not None:
            extend(get(x))
        else:
            extend(reversed(expr_children(x)))


def nodes_of(e: Expr, cls: type | tuple[type, ...], out: list | None = None) -> list:
    """The sub-expressions of e that are `cls`, pre-order, appended to `out`
    (a new list without it): walk_expr's order in one loop, for the passes
    that collect every Load or Var of a kernel (no generator step a node)."""
    out = [] if out is None else out
    todo = [e]
    pop, extend, append, reversed_kids = todo.pop, todo.extend, out.append, \
        _REVERSED_CHILDREN.get
    while todo:
        x = pop()
        if isinstance(x, cls):
            append(x)
        get = reversed_kids(x.__class__)
        extend(get(x) if get is not None else reversed(expr_children(x)))
    return out


# The operands of each node class last to first: what walk_expr pushes, so
# that it pops them first to last. The walks run over every node of every
# kernel several times (a large kernel has ~10^5): no reversed() object or
# empty tuple a node.
_REVERSED_CHILDREN: dict[type, Callable[[Expr], tuple[Expr, ...]]] = {
    Bin: operator.attrgetter("b", "a"), Unary: lambda e: (e.a,), Cast: lambda e: (e.a,),
    Select: operator.attrgetter("b", "a", "cond"), Call: lambda e: e.args[::-1],
    Load: lambda e: (e.index,), Broadcast: lambda e: (e.value,), Var: lambda e: (),
    Const: lambda e: (),
}


def stmt_exprs(s: Stmt):
    """The expressions directly in one statement (not in nested statements)."""
    if isinstance(s, Store):
        return (s.index, s.value)
    if isinstance(s, Decl):
        return (s.init,)
    if isinstance(s, Assign):
        return (s.value,)
    if isinstance(s, If):
        return (s.cond,)
    return ()


def walk_expr_loads(s: Stmt):
    """The Loads in one statement's own expressions."""
    for e in stmt_exprs(s):
        yield from nodes_of(e, Load)
