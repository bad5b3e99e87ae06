"""Accumulator strategies of the int8 convolution and dense kernels:
one algorithm parameterised by how its int32 accumulators take products).

- `pairs`: two input channels per 16-bit multiply-add (aot_dot2 / aot_dot2p,
  pmaddwd on x86, widening multiply-adds on NEON), activations x - zp.
- `quads`: four input channels per 4-way int8 dot product (aot_dot4: Arm's
  sdot), activations the raw int8 bytes, padding filled with the input zero
  point, zp * sum(w) folded into the bias.
- `quads_u8`: the same with the activation bytes unsigned (aot_dot4u:
  x86's vpdpbusd is u8 x s8): x ^ 0x80 = x + 128 is staged, so the bias
  also takes -128 * sum(w).
- `quads_mull`: quads for NEON without dotprod (Cortex-A72, A53): aot_dot4s,
  four int8 products a lane by SMULL / SMULL2, ADDP, SADALP (4 instructions
  per 16 products, against 1 for sdot and 8+ for the pairs' lane formula),
  whose int16 pair sums need weights without -128 (TFLite's are [-127,
  127]); a kernel whose weights hold -128 falls back to pairs.

The default policy asks the legalization pass: quads where the target turns
the generic 4-way call into an instruction at its vector width, else pairs
(the lane formula of aot_dot4 is slower than pmaddwd-style pairs). A first
layer's window rows (odd depth) take quads_u8 where the target has it:
VNNI's vpdpbusd broadcasts a quad from any byte of a row staged as bytes,
so the rows are copied a vector at a time (host-avx512 first convs: ic
2.97 -> 1.88 us, kws 2.15 -> 1.17, vww 9.26 -> 4.40 against pairs). They
stay in pairs where the pair multiply-add is an instruction but the quads
would be int32 groups staged element by element (x86 without VNNI), which
cost more than the dot products save (host-avx512 before byte rows, ic
int8 40.1 us in pairs, 46.9 in quads).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aot.isa.dots import pair_dot, quad_dot
from aot.isa.neon import saturating_narrow, sixteen_dot, widening_mla
from aot.ir.tir import Call, DType, Expr, Var
from aot.lower.schedule.space import choices, tunable
from aot.targets import Target


@dataclass(frozen=True)
class Accumulator:
    name: str
    group: int               # input channels per multiply-add call
    unsigned: bool = False   # quads: activation bytes read as uint8
    # Accumulator vectors per output pixel in dense tiles (None: the
    # schedule's). Arm's 4-lane sdot: a broadcast quad feeds four, 16
    # channels (qemu-aarch64 -cpu cortex-a76, ic int8 3.29 M -> 3.01 M
    # instructions); AVX-512's two 16-lane ones measured better than four
    # (ic int8 47.8 against 49.0 us).
    vectors: int | None = None
    # Dense convs 16 channels deep load each pixel's four quads as one
    # vector and take them by lane (sdot v.4s, v.16b, v.4b[j]: a quarter of
    # the broadcast loads); x86 keeps vpdpbusd's broadcast from memory.
    by_lane: bool = False
    symmetric: bool = False  # aot_dot4s: the weights must avoid -128

    def fits(self, weights) -> bool:
        """Whether weights (integers) suit this strategy's multiply-adds."""
        low = -127 if self.symmetric else -128
        return bool(weights.size) and weights.min() >= low and weights.max() <= 127

    def dot(self, acc: Expr, quad: Expr, w: Expr) -> Call:
        """The 4-way dot-product call of this (quad) strategy."""
        return quad_dot(acc, quad, w, self.unsigned, self.symmetric)

    def interleave(self, w: np.ndarray) -> np.ndarray:
        """Weights [..., C, D] (D a multiple of `group`) as [..., D / group,
        C, group]: each step's `group` input channels side by side for
        every output channel, in the order its multiply-adds read them."""
        *lead, c, d = w.shape
        steps = w.reshape(*lead, c, d // self.group, self.group)
        return np.ascontiguousarray(np.swapaxes(steps, -3, -2))

    @property
    def offset(self) -> int:
        """What the staged activation bytes add to x (x ^ 0x80 for uint8)."""
        return 128 if self.unsigned else 0


PAIRS = Accumulator("pairs", 2)
QUADS = Accumulator("quads", 4, vectors=4, by_lane=True)
QUADS_U8 = Accumulator("quads_u8", 4, unsigned=True)
QUADS_MULL = Accumulator("quads_mull", 4, vectors=4, by_lane=True, symmetric=True)
choices("accumulator", {s.name: s for s in (PAIRS, QUADS, QUADS_U8)})


@tunable("accumulator")
def int8_accumulator(target: Target) -> Accumulator:
    """The strategy the int8 kernels use on `target` (the module docstring)."""
    from aot.lower.tir_passes.legalize import instruction_for
    lanes = target.lanes(32)
    if lanes < 4:
        return PAIRS
    for s in (QUADS, QUADS_U8, QUADS_MULL):
        probe = s.dot(Var("acc", DType("int32", lanes)), Var("q", DType("int32")),
                      Var("w", DType("int8", 4 * lanes)))
        if instruction_for(probe, target) is not None:
            return s
    return PAIRS


def mlal_depthwise(target: Target) -> bool:
    """Whether depthwise convs take 8 channels per int16 vector, widened
    once, into two int32 accumulators (aot_mlal_lo / _hi): where the target
    makes them an instruction (NEON's SMLAL / SMLAL2), whichever strategy
    the dense convs use, since no dot product serves a depthwise conv
    (qemu-aarch64 -cpu cortex-a76, vww int8: quads' sdot target left
    depthwise in int32 lanes before)."""
    from aot.lower.tir_passes.legalize import instruction_for
    lanes = target.lanes(32)
    if lanes < 4:
        return False
    probe = widening_mla(Var("acc", DType("int32", lanes)), Var("x", DType("int16", 2 * lanes)),
                         Var("w", DType("int16", 2 * lanes)), False)
    return instruction_for(probe, target) is not None


def sixteen_dots(target: Target) -> bool:
    """Whether the 16-deep dense convs of the quads without a dot product
    instruction (quads_mull) take aot_dot16p (16 input channels of one output
    channel into 4 partial sums: SMULL, SMLAL2, SADALP, no broadcast):
    where the target makes it an instruction."""
    from aot.lower.tir_passes.legalize import instruction_for
    probe = sixteen_dot(Var("acc", DType("int32", 4)), Var("x", DType("int8", 16)),
                        Var("w", DType("int8", 16)))
    return target.lanes(32) == 4 and instruction_for(probe, target) is not None


def joined_stores(target: Target) -> bool:
    """Whether an int8 conv's tile stores a pixel's 16 channels (four 4-lane
    accumulators) together: requantized, narrowed to int8 by aot_qnarrow16,
    clamped once and stored as 16 bytes (the rule's `joined` says what it
    saves), where the target makes the narrowing an instruction (AArch64's
    SQXTN, SQXTN2 twice; the legalization table says where), not its lane
    formula."""
    from aot.lower.tir_passes.legalize import instruction_for
    probe = saturating_narrow(*(Var(f"v{k}", DType("int32", 4)) for k in range(4)))
    return instruction_for(probe, target) is not None


@tunable("quad_kernel")
def quad_kernel(default: str) -> str:
    """How a 16-deep dense int8 conv whose quads have no dot product
    instruction (quads_mull) multiplies: "sixteens" (aot_dot16p, 16 input
    channels of an output channel per SMULL, SMLAL2, SADALP) or "lanes"
    (each pixel's quads by lane, arm_smull_dot4). Asked only where both are
    legal; the default policy's answer passes through, a schedule config
    may pick the other."""
    return default


@tunable("unroll_taps")
def unroll_taps(default: int) -> int:
    """Whether an int8 quad conv's tile unrolls its window's columns (1) or
    loops over them (0), and a 16x8 dense conv's SMLAL rows their blocks of
    8 input channels: the default policy's answer passes through; a
    schedule config may give the other."""
    return default


def window_row_accumulator(target: Target) -> Accumulator:
    """The strategy for a first layer's window rows (the module docstring)."""
    from aot.lower.tir_passes.legalize import instruction_for
    kind = int8_accumulator(target)
    if kind.unsigned:       # VNNI: quads straight from rows of bytes
        return kind
    lanes = target.lanes(32)
    probe = pair_dot(Var("x0", DType("int16")), Var("x1", DType("int16")),
                     Var("w", DType("int16", 2 * lanes)))
    return PAIRS if instruction_for(probe, target) is not None else kind


@dataclass(frozen=True)
class KernelChoice:
    """An int8 layer's kernel (a name of the rules' CONV or FC tables, or
    "scalar": the plain loops) and every kernel that fits it, the default
    first."""
    name: str
    legal: tuple[str, ...]


@tunable("int8_kernel")
def int8_kernel(choice: KernelChoice) -> KernelChoice:
    """Which int8 kernel computes a layer (aot/lower/schedule/conv.py asks
    with the default policy's choice and the legal alternatives): the
    default passes through; a schedule config may pick any of `legal`."""
    return choice


@tunable("unroll")
def unroll_tiles(default: int) -> int:
    """How many channel tiles a conv's tile loop unrolls at most (0: none):
    the default policy's answer passes through; a schedule config may give
    any of space.COUNTS["unroll"]."""
    return default


@tunable("int8_rows")
def int8_rows(default: str) -> str:
    """How an int8 pair kernel reads its input rows: "staged" (even depths:
    rows staged as int32 pairs; the widening depthwise at row stride 1:
    int16), "flat" (odd depths: window rows staged as
    one run) or "direct" (from the input, border taps tested). The default
    policy's answer passes through; a schedule config may pick "direct"
    (aot/lower/schedule/space.py), never staging where the rule did not offer it."""
    return default


@tunable("pixel_rows")
def pixel_rows(default: str) -> str:
    """How a pointwise convolution blocks its pixels (a float one, a matrix
    product over them; an int8 one in Arm's quads by lane): "rows" (an
    image row at a time, each row's pixels in blocks) or "flat" (every
    pixel of the map as one run of blocks, each pixel's coordinates
    divided back out where it is read or stored). The default policy's
    answer (aot/lower/schedule/conv.py: flat_pixels) passes through; a
    schedule config may pick the other."""
    return default


@tunable("conv_algorithm")
def conv_algorithm(target: Target, width: int) -> str:
    """How a float convolution that aot/lower/kernels/winograd.py accepts, its
    output `width` pixels wide, is computed: by Winograd where that was
    measured faster, x86 with AVX2 or AVX-512, in 4x4 blocks on maps at
    least 16 wide (a row of 4+ blocks), else in 2x2 (on 8-wide maps 4x4
    was no faster). ResNet-8 f32's four 3x3 stride-1 convs, 32, 32, 16 and
    8 wide, pinned, C, us: host-avx512 direct 20.1 / 20.2 / 19.2 / 17.8,
    2x2 11.7 / 11.9 / 9.6 / 10.2, 4x4 8.5 / 8.3 / 7.0 / 10.2; host direct
    34.5 / 34.6 / 39.8 / 40.3, 2x2 21.2 / 21.4 / 18.8 / 19.1, 4x4 15.4 /
    16.6 / 12.6 / 19.4. Elsewhere "direct" (the register-tiled sliding
    window: Arm and Cortex-M, not measured, keep it). `aot tune` may pick
    any of the three (aot/lower/schedule/space.py)."""
    if target.arch != "x86_64" or not target.has("fma"):
        return "direct"
    return "winograd_4x4" if width >= 16 else "winograd_2x2"
