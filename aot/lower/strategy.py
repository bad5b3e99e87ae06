"""Accumulator strategies of the int8 convolution and dense kernels (issue 16:
one algorithm parameterised by how its int32 accumulators take products).

- `pairs`: two input channels per 16-bit multiply-add (aot_dot2 / aot_dot2p,
  pmaddwd on x86, widening multiply-adds on NEON), activations x - zp.
- `quads`: four input channels per 4-way int8 dot product (aot_dot4: Arm's
  sdot), activations the raw int8 bytes, padding filled with the input zero
  point, zp * sum(w) folded into the bias.
- `quads_u8`: the same with the activation bytes unsigned (aot_dot4u:
  x86's vpdpbusd is u8 x s8): x ^ 0x80 = x + 128 is staged, so the bias
  also takes -128 * sum(w).

The default policy asks the legalization pass: quads where the target turns
the generic 4-way call into an instruction at its vector width, else pairs
(the lane formula of aot_dot4 is slower than pmaddwd-style pairs).
"""
from __future__ import annotations

from dataclasses import dataclass

from aot.codegen.intrinsics import quad_dot
from aot.ir.tir import DType, Var
from aot.lower.space import tunable
from aot.targets import Target


@dataclass(frozen=True)
class Accumulator:
    name: str
    group: int               # input channels per multiply-add call
    unsigned: bool = False   # quads: activation bytes read as uint8

    @property
    def offset(self) -> int:
        """What the staged activation bytes add to x (x ^ 0x80 for uint8)."""
        return 128 if self.unsigned else 0


PAIRS = Accumulator("pairs", 2)
QUADS = Accumulator("quads", 4)
QUADS_U8 = Accumulator("quads_u8", 4, unsigned=True)


@tunable("accumulator")
def int8_accumulator(target: Target) -> Accumulator:
    """The strategy the int8 kernels use on `target` (the module docstring)."""
    from aot.lower.legalize import instruction_for
    lanes = target.lanes(32)
    if lanes < 4:
        return PAIRS
    for s in (QUADS, QUADS_U8):
        probe = quad_dot(Var("acc", DType("int32", lanes)), Var("q", DType("int32")),
                         Var("w", DType("int8", 4 * lanes)), s.unsigned)
        if instruction_for(probe, target) is not None:
            return s
    return PAIRS
