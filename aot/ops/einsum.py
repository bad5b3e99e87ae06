"""ONNX Einsum: type inference and the numpy reference.

Einsum has no kernel of its own: the `decompose` pass
(aot/passes/decompose.py) rewrites it into ReduceSum, Transpose, Reshape
and MatMul, which the compiler already makes fast. The parsed equation
(`Equation`) is shared by the inference here and that rewrite.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aot.errors import UnsupportedError, node_label
from aot.ir.graph import TensorType
from aot.ops.registry import Call, Pattern, Sig, register

# Stand-ins for the axes an ellipsis covers: capitals after the ones an
# equation may use itself are not enough, so the ellipsis takes characters
# outside the letters ONNX allows in an equation.
_ELLIPSIS_AXES = "0123456789"


@dataclass(frozen=True)
class Equation:
    """An Einsum equation with its ellipses expanded: one string of axis
    labels per input and one for the output."""
    inputs: tuple[str, ...]
    output: str

    @property
    def labels(self) -> str:
        return "".join(dict.fromkeys("".join(self.inputs)))


def parse_equation(sig: Sig, ranks: tuple[int, ...]) -> Equation:
    """The node's equation for inputs of these ranks, or a clear error."""
    eq = str(sig.attrs.get("equation", "")).replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise sig.fail(f"equation {eq!r} has {len(terms)} operands, the node {len(ranks)} inputs")
    widths = [rank - len(t.replace("...", "")) for t, rank in zip(terms, ranks)]
    if any(w < 0 or (w > 0 and "..." not in t) for t, w in zip(terms, widths)):
        raise sig.fail(f"equation {eq!r} does not match the inputs' ranks {list(ranks)}")
    ell = max(widths, default=0)
    if ell > len(_ELLIPSIS_AXES):
        raise sig.fail(f"an ellipsis of {ell} axes")
    expand = lambda t, w: t.replace("...", _ELLIPSIS_AXES[ell - w:ell])   # noqa: E731
    inputs = tuple(expand(t, w) for t, w in zip(terms, widths))
    for t in inputs:
        if not all(c.isalpha() or c in _ELLIPSIS_AXES for c in t):
            raise sig.fail(f"equation {eq!r}: labels must be letters")
        if len(set(t)) != len(t):
            raise UnsupportedError(f"{node_label(sig.node)}: equation {eq!r} repeats a label in "
                                   "one operand (a diagonal): not supported yet")
    if arrow:
        output = rhs.replace("...", _ELLIPSIS_AXES[:ell])
        if len(set(output)) != len(output) or not set(output) <= set("".join(inputs)):
            raise sig.fail(f"equation {eq!r}: every output label must appear once, in an input")
    else:   # implicit: the ellipsis, then the labels used once, in alphabetical order
        counts = {c: "".join(inputs).count(c) for c in "".join(inputs)}
        output = _ELLIPSIS_AXES[:ell] + "".join(
            sorted(c for c, n in counts.items() if n == 1 and c not in _ELLIPSIS_AXES))
    return Equation(inputs, output)


def label_sizes(sig: Sig, eq: Equation, shapes) -> dict[str, int]:
    """Each label's size; a label of different sizes in two operands is an
    error (broadcasting a label of size 1 is not supported yet)."""
    sizes: dict[str, int] = {}
    for term, shape in zip(eq.inputs, shapes):
        for c, d in zip(term, shape):
            if sizes.setdefault(c, d) != d:
                what = "an ellipsis axis" if c in _ELLIPSIS_AXES else f"label {c!r}"
                raise UnsupportedError(f"{node_label(sig.node)}: {what} is {sizes[c]} in one "
                                       f"operand and {d} in another (broadcasting a size-1 "
                                       "label is not supported yet)")
    return sizes


def _infer(sig: Sig):
    types = sig.in_types
    if not types or any(t is None for t in types):
        raise sig.fail("Einsum needs at least one input, none absent")
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise sig.fail(f"inputs of different types {sorted(dtypes)}")
    eq = parse_equation(sig, tuple(len(t.shape) for t in types))
    sizes = label_sizes(sig, eq, [t.shape for t in types])
    return [TensorType(tuple(sizes[c] for c in eq.output), types[0].dtype)]


@register("Einsum", infer=_infer, pattern=Pattern.OPAQUE,
          never_lowered="the decompose pass rewrites it into ReduceSum, Transpose, Reshape "
                        "and MatMul")
def _einsum(call: Call, args):
    eq = str(call.attrs["equation"]).replace(" ", "")
    out = np.einsum(eq, *args)
    return [np.asarray(out).astype(call.out_types[0].dtype, copy=False)]
