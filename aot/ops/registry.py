"""The one table of operator definitions.

Each op family module registers its ops here with `register`. An OpDef says
everything the compiler needs to know about an op: type inference, a numpy
reference implementation (which makes every Graph executable), its fusion
pattern and its lowering: the TIR compute rule, which aot/lower attaches to
the op's entry (`attach_rule`; this floor imports nothing above it), or the
reason the op never reaches code generation (`never_lowered=`), and its
layout facts (`Layout`: what aot/passes/layout.py may do with it).
Importing aot.lower checks that every entry has exactly one of the two and
that the rule's kind fits the pattern (`lowering_problems`).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aot.errors import ShapeError, UnsupportedError, node_label
from aot.ir.graph import Node, TensorType


class Pattern(enum.IntEnum):
    """Fusion patterns, ordered as in TVM: lower values fuse more freely."""
    ELEMWISE = 0          # out[i] = f(in[i]), same shapes
    BROADCAST = 1         # elementwise with broadcasting
    INJECTIVE = 2         # each output element reads one input element (reshape, transpose, ...)
    REDUCE = 3            # reductions (pooling, mean, softmax rows)
    OUT_ELEMWISE_FUSABLE = 4  # conv, dense: elementwise epilogues fuse into them
    OPAQUE = 8            # never fused


@dataclass(frozen=True)
class Sig:
    """What type inference sees of one node."""
    node: Node
    in_types: tuple[TensorType | None, ...]   # None: absent optional input
    values: tuple[np.ndarray | None, ...]     # known constant values, else None

    @property
    def attrs(self) -> Mapping[str, Any]:
        return self.node.attrs

    def has(self, i: int) -> bool:
        return i < len(self.in_types) and self.in_types[i] is not None

    def const(self, i: int) -> np.ndarray:
        """The value of input i, which must be known at compile time."""
        if i >= len(self.values) or self.values[i] is None:
            raise UnsupportedError(
                f"{node_label(self.node)}: input {i} must be a compile-time constant "
                "(dynamic shapes are not supported)")
        return self.values[i]

    def fail(self, msg: str) -> ShapeError:
        return ShapeError(f"{node_label(self.node)}: {msg}")


@dataclass(frozen=True)
class Call:
    """What a reference implementation sees of one node."""
    node: Node
    in_types: tuple[TensorType | None, ...]
    out_types: tuple[TensorType, ...]

    @property
    def attrs(self) -> Mapping[str, Any]:
        return self.node.attrs


InferFn = Callable[[Sig], Sequence[TensorType]]
RefFn = Callable[[Call, Sequence[np.ndarray | None]], Sequence[np.ndarray]]
# Multiply-accumulates of one call, from its types alone (aot analyze, the
# profile's MACs per us). Ops without one count 0: elementwise, pooling,
# reductions and data movement are memory-bound, and a MAC count would
# mislead there.
MacsFn = Callable[[Call], int]


class RuleKind(enum.Enum):
    """How an op becomes TIR (aot/lower/rules/__init__.py describes both kinds)."""
    VALUE = "value rule"      # one output element as an expression: inlined into its group
    KERNEL = "kernel rule"    # a whole loop nest: the group's one anchor


# The patterns whose ops are computed one element at a time from their
# inputs, so that fusion may chain them: exactly the ops with value rules.
VALUE_PATTERNS = (Pattern.ELEMWISE, Pattern.BROADCAST, Pattern.INJECTIVE)


@dataclass(frozen=True)
class Rule:
    kind: RuleKind
    fn: Callable[..., Any]    # typed in aot/lower/rules/__init__.py (ValueRule, KernelRule)


class Sink(enum.Enum):
    """How the layout pass (aot/passes/layout.py) moves a Transpose of an
    op's input past the op, towards the outputs (TVM's FRelaxInferLayout,
    as data): each value is one way of rewriting the op's axes."""
    STAY = "stay"               # the Transpose stays before the op
    BROADCAST = "broadcast"     # every input transposed alike, a permuted constant or a scalar
    PER_AXIS = "per axis"       # input 0; a per-axis `axis` (scale, zero point) moves
    AXIS = "axis"               # input 0; the `axis` attribute moves (Softmax, Split)
    CONCAT = "concat"           # every input transposed alike; the `axis` attribute moves
    REDUCE = "reduce"           # the axes input moves; without keepdims so does the output order
    RESIZE = "resize"           # the `axes` attribute moves
    PAD = "pad"                 # the pads input (or the axes input) moves
    SLICE = "slice"             # the axes input moves


@dataclass(frozen=True)
class Layout:
    """What the layout pass needs to know of an op. `register` resolves
    sink=None from the pattern: elementwise ops take their operands
    broadcast (BROADCAST), except TFLite's (`tfl.*`), which arrive
    channels last with their quantization fixed per tensor (STAY), as do
    all other ops."""
    # Takes the `layout` attribute ("NCHW" / "NHWC", docs/ops.md): the
    # pass rewrites it channels last between two Transposes.
    channels_first: bool = False
    weighted: bool = False      # channels_first with a weight (input 1) whose axis 1 moves last too
    sink: Sink | None = None
    axis: int = 0               # the default of the `axis` attribute AXIS, CONCAT, PER_AXIS move


@dataclass(frozen=True)
class OpDef:
    name: str
    infer: InferFn
    ref: RefFn
    pattern: Pattern
    # False for ops whose outputs follow from input types alone (Shape,
    # Size): their ref is called with None for every input array.
    needs_values: bool = True
    macs: MacsFn | None = None
    rule: Rule | None = None
    # Why the op never reaches code generation (a pass always rewrites it
    # away, or it is the fusion group itself); empty for ops that do.
    never_lowered: str = ""
    # The ONNX domain a model's node names the op in ("" for the default
    # domain): the importer reads a node only in its op's domain.
    domain: str = ""
    layout: Layout = Layout(sink=Sink.STAY)


OPS: dict[str, OpDef] = {}


def register(name: str, *, infer: InferFn, pattern: Pattern = Pattern.OPAQUE,
             needs_values: bool = True, macs: MacsFn | None = None,
             never_lowered: str = "", domain: str = "",
             layout: Layout = Layout()) -> Callable[[RefFn], RefFn]:
    """Decorator on a reference implementation: adds the op to OPS."""
    def wrap(ref: RefFn) -> RefFn:
        if name in OPS:
            raise RuntimeError(f"op {name} registered twice")
        OPS[name] = OpDef(name, infer, ref, pattern, needs_values, macs,
                          never_lowered=never_lowered, domain=domain,
                          layout=_resolved(layout, name, pattern))
        return ref
    return wrap


def _resolved(layout: Layout, name: str, pattern: Pattern) -> Layout:
    """`layout` with its sink named (Layout says what None stands for)."""
    if layout.sink is not None:
        return layout
    broadcast = pattern in (Pattern.ELEMWISE, Pattern.BROADCAST) and not name.startswith("tfl.")
    return replace(layout, sink=Sink.BROADCAST if broadcast else Sink.STAY)


def attach_rule(name: str, rule: Rule | None) -> None:
    """Record (or with None, remove) op `name`'s compute rule on its entry.
    Called by aot/lower's rule decorators, which check the op has none yet."""
    if name not in OPS:
        raise RuntimeError(f"a {rule.kind.value if rule else 'rule'} for op '{name}', "
                           "which no module under aot/ops registers")
    OPS[name] = replace(OPS[name], rule=rule)


def lowering_problems() -> list[str]:
    """Where the table's lowering disagrees with the rest of an entry, one
    line per op naming it and what is missing or wrong (empty: consistent)."""
    problems = []
    for name, opdef in sorted(OPS.items()):
        rule, why = opdef.rule, opdef.never_lowered
        inlined = opdef.pattern in VALUE_PATTERNS
        if rule is None and not why:
            problems.append(f"op '{name}' has no compute rule: give it @value_rule or "
                            "@kernel_rule (aot/lower), or register it with never_lowered="
                            "'<why it never reaches code generation>'")
        elif rule is not None and why:
            problems.append(f"op '{name}' has a {rule.kind.value} but is registered with "
                            f"never_lowered={why!r}")
        elif rule is not None and (rule.kind is RuleKind.VALUE) != inlined:
            problems.append(f"op '{name}' has a {rule.kind.value} but the pattern "
                            f"{opdef.pattern.name}, {_KIND_ADVICE[rule.kind]}")
    return problems


_KIND_ADVICE = {
    RuleKind.KERNEL: "which fusion chains with other ops (a group holds one loop nest): give "
                     "it a value rule, or the pattern REDUCE, OUT_ELEMWISE_FUSABLE or OPAQUE",
    RuleKind.VALUE: "which fusion never inlines: give it a kernel rule, or the pattern "
                    "ELEMWISE, BROADCAST or INJECTIVE",
}


def op_def(node: Node) -> OpDef:
    try:
        return OPS[node.op]
    except KeyError:
        raise UnsupportedError(f"unsupported op {node_label(node)}") from None


def node_macs(node: Node, types: Mapping[str, TensorType]) -> int:
    """The multiply-accumulates one node performs (0 for ops without a count)."""
    opdef = op_def(node)
    if opdef.macs is None:
        return 0
    call = Call(node, tuple(types.get(i) if i else None for i in node.inputs),
                tuple(types[o] for o in node.outputs))
    return int(opdef.macs(call))


def per_weight_row_macs(w: int) -> MacsFn:
    """Convolutions whose weight (input w) is [O, ...] and each output
    element a dot product with one of its rows: O x (I/group) x kernel."""
    def macs(call: Call) -> int:
        wt = call.in_types[w]
        return call.out_types[0].size * (wt.size // wt.shape[0])
    return macs


def inner_dim_macs(a: int) -> MacsFn:
    """Dense products: each output element a dot product along the last
    axis of input a (MatMul and its quantized forms)."""
    def macs(call: Call) -> int:
        return call.out_types[0].size * call.in_types[a].shape[-1]
    return macs
