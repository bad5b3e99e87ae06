"""Compute rules: how each op becomes TIR.

This folder's rule modules mirror aot/ops/ by stem (rules/nn.py lowers the
ops of ops/nn.py; rules/quant/ mirrors ops/quant/); nn's satellites pool,
batchnorm and resize sit beside it. They build on aot/lower/kernels,
schedule and arith, never on each other's private names.

A rule lives on its op's entry in the one op table (`OpDef.rule`, put there
by the decorators below); `check_op_table` verifies the table when aot.lower
is imported. Two kinds of rule, as in TVM's TE, and the op's fusion pattern
decides which:

- A **value rule** gives one output element as an expression of its inputs:
  `rule(ctx, ins, idx, lanes) -> Expr`, the value of output `ctx.output`
  (0 but for Split and Dropout's mask) at multi-index `idx` (`lanes`
  consecutive elements along the last axis when lanes > 1). Elementwise,
  broadcast and injective ops (Relu, Add, Reshape, Transpose, Pad, Concat,
  Split, tfl.quantize ...) are value rules, so the driver can inline them
  into their consumer or producer: no pass over memory of their own.
- A **kernel rule** builds a whole loop nest: `rule(ctx, ins, emit) -> Stmt`.
  Conv, pooling, dense, softmax, LSTM ... are kernel rules. Where the rule
  has an output value in hand it calls `emit(k, idx, value)` for output k,
  which returns the statement storing it, with the group's fused epilogue
  (bias, activation, requantize) applied in registers first.

Rules read inputs only through `TensorRef.load(idx, lanes)`, which may be a
buffer load or an inlined producer. A rule that needs the raw buffer (to
repack weights, or for pointer-style access) checks `ref.buffer` /
`ref.value`. Shapes are always compile-time constants.
"""
from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aot.errors import UnsupportedError, node_label
from aot.ir.graph import Node, TensorType
from aot.ir.tir import Buffer, BufferKind, DType, Expr, Stmt, Var, dt
from aot.limits import check_created, check_flash
from aot.ops import OPS    # every op registered before a rule attaches to it
from aot.ops.registry import Rule, RuleKind, attach_rule, lowering_problems
from aot.targets import Target


@dataclass(frozen=True)
class TensorRef:
    """A tensor as a compute rule sees it."""
    name: str
    type: TensorType
    load: Callable[..., Expr]            # load(idx: tuple[Expr, ...], lanes: int = 1) -> Expr
    buffer: Buffer | None = None         # set when the tensor is materialized in memory
    value: np.ndarray | None = None      # set when the tensor is a compile-time constant

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def in_memory(self) -> bool:
        """Whether the tensor is a buffer of its own (neither an inlined
        producer nor a constant): kernels may read it where it lies."""
        return self.buffer is not None and self.value is None

    @property
    def dtype(self) -> DType:
        return dt(self.type.dtype)


Emit = Callable[[int, tuple, Expr], Stmt]


@dataclass
class LowerCtx:
    """Per-kernel state a rule may use: the node, the target, extra buffers.

    Mutable on purpose while one kernel is being built (it collects the
    buffers rules ask for); the finished PrimFunc is immutable.
    """
    node: Node
    in_types: tuple[TensorType | None, ...]
    out_types: tuple[TensorType, ...]
    target: Target
    params: dict[str, tuple[Buffer, np.ndarray]] = field(default_factory=dict)
    scratch: dict[str, Buffer] = field(default_factory=dict)
    _names: dict[str, int] = field(default_factory=dict)
    # Run-time index checks (aot/lower/arith/bounds.py): each Fail(k) stands for
    # checks[k - 1]; prechecks, by node and input, run before the loops.
    checks: list = field(default_factory=list)
    prechecks: dict[str, Stmt] = field(default_factory=dict)
    # Which output a value rule computes: ops with several outputs (Split,
    # Dropout and its mask) are computed one output at a time.
    output: int = 0
    # The thread pool the package is built for (--threads): a kernel whose
    # split needs a scratch share per task (Winograd's workspaces) lays out
    # that many, and one thread gets one.
    threads: int = 1

    @property
    def attrs(self) -> Mapping[str, Any]:
        return self.node.attrs

    def fresh(self, base: str, dtype: str | DType = "int32") -> Var:
        """A loop or local variable with a name unique in this kernel."""
        # _names counts each base's uses and holds every name given out, so a
        # numbered name ("k" twice -> "k1") never equals another base ("k1")
        n = self._names.get(base, 0)
        sep = "_" if base[-1:].isdigit() else ""
        name = base if n == 0 else f"{base}{sep}{n}"
        while n > 0 and name in self._names:
            n += 1
            name = f"{base}{sep}{n}"
        self._names[base] = n + 1
        self._names.setdefault(name, 1)
        return Var(name, dt(dtype))

    def param(self, base: str, array: np.ndarray) -> Buffer:
        """A compile-time array (repacked weights, a table) linked in as const data."""
        check_flash(array.nbytes, node_label(self.node))
        check_created(array.nbytes, 0, node_label(self.node))
        array = np.ascontiguousarray(array)
        name = self.fresh(base).name
        buf = Buffer(name, dt(array.dtype.name), tuple(array.shape), BufferKind.PARAM)
        self.params[name] = (buf, array)
        return buf

    def scratch_buffer(self, base: str, dtype: str | DType, shape: tuple[int, ...]) -> Buffer:
        """Kernel-private workspace; the memory planner gives it arena space."""
        name = self.fresh(base).name
        buf = Buffer(name, dt(dtype), tuple(shape), BufferKind.SCRATCH)
        self.scratch[name] = buf
        return buf

    def unsupported(self, what: str) -> UnsupportedError:
        return UnsupportedError(f"{node_label(self.node)}: {what} is not supported by the "
                                "code generator yet")


ValueRule = Callable[[LowerCtx, Sequence[TensorRef], tuple, int], Expr]
KernelRule = Callable[[LowerCtx, Sequence[TensorRef], Emit], Stmt]


def rule_of(op: str) -> Rule | None:
    opdef = OPS.get(op)
    return opdef.rule if opdef is not None else None


def _rule_decorator(kind: RuleKind, ops: tuple[str, ...]):
    def wrap(fn):
        for op in ops:
            have = rule_of(op)
            if have is not None:
                raise RuntimeError(f"op '{op}' has two compute rules: {_where(have.fn)} "
                                   f"and {_where(fn)}")
            attach_rule(op, Rule(kind, fn))
        return fn
    return wrap


def _where(fn) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def value_rule(*ops: str) -> Callable[[ValueRule], ValueRule]:
    """Decorator: `fn` computes each of `ops` one element at a time."""
    return _rule_decorator(RuleKind.VALUE, ops)


def kernel_rule(*ops: str) -> Callable[[KernelRule], KernelRule]:
    """Decorator: `fn` builds the loop nest of each of `ops`."""
    return _rule_decorator(RuleKind.KERNEL, ops)


class _RulesOfKind(MutableMapping):
    """op -> rule function for the ops whose rule is of one kind: a view of
    OPS, where the rules live (deleting an entry removes the op's rule)."""

    def __init__(self, kind: RuleKind):
        self.kind = kind

    def __getitem__(self, op: str):
        rule = rule_of(op)
        if rule is None or rule.kind is not self.kind:
            raise KeyError(op)
        return rule.fn

    def __setitem__(self, op: str, fn) -> None:
        attach_rule(op, Rule(self.kind, fn))

    def __delitem__(self, op: str) -> None:
        self[op]    # KeyError unless the op has a rule of this kind
        attach_rule(op, None)

    def __iter__(self):
        return iter([op for op, d in OPS.items() if d.rule and d.rule.kind is self.kind])

    def __len__(self) -> int:
        return len(list(iter(self)))


VALUE_RULES: MutableMapping[str, ValueRule] = _RulesOfKind(RuleKind.VALUE)
KERNEL_RULES: MutableMapping[str, KernelRule] = _RulesOfKind(RuleKind.KERNEL)


def check_op_table() -> None:
    """Raise unless every op in OPS has one compute rule of the kind its
    pattern needs, or says why it never reaches code generation. Run when
    aot.lower has imported every rule module, so an op added without its
    lowering fails there, by name, rather than on the first model using it."""
    problems = lowering_problems()
    if problems:
        raise RuntimeError("the op table is inconsistent (aot/ops/registry.py):\n  "
                           + "\n  ".join(problems))
