"""Schedule parameters of the heavy kernels, per target and element type.

A kernel's inner tile is MR output pixels x NR output channels, NR being
`vectors` accumulators of `lanes` elements each. The accumulators, one
broadcast input and the weight vectors must fit in the vector register file
(PERFORMANCE.md: 16 ymm registers on AVX2 hold 5 x 2 accumulators plus
three more), so the tile shrinks with the register count.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from aot.ir.tir import DType, dt
from aot.lower.schedule.space import tunable
from aot.targets import Target


@dataclass(frozen=True)
class Tile:
    lanes: int      # elements per vector (1: scalar code)
    vectors: int    # accumulators per output pixel along the channel axis
    mr: int = 1     # output pixels per tile (register blocking over pixels)
    max_accs: int = 12   # accumulators that fit in registers beside the operands
    # Reduction steps whose inputs are loaded as one vector, each step using
    # one lane (Arm's multiply-add by element); 1: a broadcast per input.
    k_lanes: int = 1
    registers: int = 0   # the vector registers a k_lanes tile is sized for
    # Depthwise: the channel tiles are the outer loop, the pixels inner, so
    # that a tile's weights (one per tap) stay in registers.
    weights_stay: bool = False
    taps: int = 0        # weights_stay: the weight vectors held (its budget's)
    # Blocks sized for the fewest per row first: where each block reloads
    # every weight (byte planes), a 5-pixel tile's tail beats more 4-pixel ones.
    fewest_blocks: bool = False

    def fit(self, vectors: int) -> int:
        """The most pixels of `vectors` accumulators each a tile can take.
        Sized by `registers`: every pixel also holds its input (a vector by
        lane, else a scalar), and the weights take `vectors` registers,
        twice by lane (the next step's loaded ahead)."""
        if self.registers:
            weights = 2 * vectors if self.k_lanes > 1 else vectors
            return max(1, (self.registers - weights) // (vectors + 1))
        return max(1, self.max_accs // vectors)

    @property
    def mr_max(self) -> int:
        """The most pixels a full-width tile can take."""
        return max(self.mr, self.fit(self.vectors))

    def block(self, count: int) -> int:
        """Pixels per block for a row of `count`: between mr and mr_max,
        preferring a size that divides the row, then the one whose last
        block is largest (a 1- or 2-pixel tail wastes most of its tile);
        with `fewest_blocks`, the fewest blocks first."""
        if self.mr == 1 or count <= self.mr_max:
            return max(1, min(count, self.mr_max if self.mr > 1 else 1))
        return max(range(self.mr, self.mr_max + 1),
                   key=lambda b: (-(-count // b) * -self.fewest_blocks, count % b == 0,
                                  count % b, b))

    @property
    def nr(self) -> int:
        return self.lanes * self.vectors

    @property
    def narrow(self) -> int:
        """The narrower vector used for a remainder before going scalar
        (half a vector, when that is still at least 4 lanes)."""
        return self.lanes // 2 if self.lanes >= 8 else 1


# A padded convolution input is copied into a zero-bordered workspace (so
# that every output row is one unguarded region of full pixel tiles) when
# at least this share of the output pixels are border pixels, whose tiles
# are mostly 1 pixel wide, and the copy is at most this big. Measured on
# ResNet-8 (AVX2): an 8x8 map (44% border) gains 8%, 16x16 and 32x32 maps
# (23% and 12%) lose 5-10% to the copy.
PAD_COPY_MIN_BORDER = 0.3
PAD_COPY_MAX_BYTES = 256 * 1024

# ISA families whose float vector multiply takes one operand from a lane of
# a vector register (AArch64's `fmla v.4s, v.4s, v.s[i]`, ARMv7 NEON's
# `vmul.f32 q, q, d[i]`): a float dense tile there loads its inputs four
# channels at a time (Tile.k_lanes), and a depthwise one keeps its weights
# in registers. x86 has no such operand (its tiles are as measured there).
BY_LANE = ("aarch64", "arm")

@tunable("tile")
def tile(target: Target, dtype: str | DType, vectorize: bool = True,
         pixels: bool = False) -> Tile:
    """The tile for a kernel whose innermost output axis is unit-stride
    (`vectorize`) or not (scalar accumulators, still blocked over channels).

    `pixels`: the kernel can also block over neighbouring output pixels
    that share each weight load (dense convolution), MR x NR accumulators.
    """
    lanes = target.lanes(dt(dtype).compute_bits) if vectorize else 1
    regs = target.vector_registers
    if lanes == 1:
        return Tile(1, 4)
    if pixels and dt(dtype).is_float and target.arch in BY_LANE:
        # 2 vectors of channels x up to (32 - 4) / 3 = 9 pixels on AArch64:
        # 18 accumulators, 9 input vectors, 4 weight vectors. Each step of
        # four input channels costs MR vector loads, 2 x 4 weight loads
        # (paired: ldp) and 8 MR multiply-adds. ARMv7 (16 registers): up to
        # 4 pixels.
        return Tile(lanes, 2, mr=4, k_lanes=lanes, registers=regs)
    if pixels:
        # MR x 2 accumulators + 2 weight vectors + a broadcast: MR = 4..6
        # uses 11..15 of 16 registers.
        return Tile(lanes, 2, mr=4 if regs >= 16 else 2, max_accs=regs - 4)
    # Up to 4 accumulators and their weight vectors plus a broadcast input:
    # 9 registers, comfortably within 16.
    return Tile(lanes, 4 if regs >= 16 else 2)


def matvec_tile(target: Target, dtype: str | DType, t: Tile) -> Tile:
    """A one-row dense tile (a matrix-vector product) `t`, reading its
    inputs four at a time by lane where the ISA multiplies by lane (after
    the tile site's answer, which tuning may have changed): ad f32 on the
    A72 152,570 -> 122,863 instructions per inference."""
    if dt(dtype).is_float and t.lanes > 1 and target.arch in BY_LANE:
        return replace(t, k_lanes=t.lanes, registers=target.vector_registers)
    return t


@tunable("nest_tile")
def nest_tile(default: tuple[int, int]) -> tuple[int, int]:
    """(rows, channels) of int32 accumulators in the matrix products of the
    Cortex-M and scalar RISC-V nests (aot/lower/kernels/cortex_m/dsp.py's
    matmul: pointwise convs and fully connected layers): each kernel's own
    default passes through; a schedule config may give another within the
    integer registers (space.legal_nest)."""
    return default


@tunable("depthwise_tile")
def depthwise_tile(target: Target, dtype: str | DType, taps: int) -> Tile:
    """The tile of a channel-last depthwise convolution with `taps` taps.

    On Arm, one vector of channels x MR neighbouring pixels, the weights
    kept in registers across the pixels: the taps' weight vectors, and per
    pixel an accumulator and about two inputs, within the register file
    (MR = 4 on AArch64, 2 on ARMv7 for a 3x3 kernel). Per 4 pixels x 4
    channels at stride 1: 3 x 6 input loads (neighbours share taps), 36
    multiply-adds, no weight load (vww f32's 32-channel layers on AArch64:
    1.74 instructions per MAC with 4 vectors of channels per pixel, where
    clang's unrolling spilled, 0.57 so). Elsewhere, and for kernels too big
    to keep, 4 vectors of channels per pixel (2 on small register files).
    """
    t = tile(target, dtype)
    mr = min(4, (target.vector_registers - taps) // 3)
    if t.lanes > 1 and dt(dtype).is_float and target.arch in BY_LANE and mr >= 2:
        return Tile(t.lanes, 1, mr=mr, max_accs=mr, weights_stay=True, taps=taps)
    return t
