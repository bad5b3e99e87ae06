"""The direct convolution computed in half on targets with FP16
arithmetic: conv_tile's float strategy (FloatFma) with its reduction per
tap in half_dense's chunks (FMLA on 8 half lanes by element, sums of
CHUNK input channels widened into float32 accumulators that start at the
bias). Channel-last, one group, whole half vectors of input and output
channels (half_dense.direct_fits); the schedule (aot/lower/schedule/conv.py)
gives it half_dense.TILE."""
from __future__ import annotations

from dataclasses import dataclass

from aot.ir.tir import Const, Load, Stmt, add, flat_index, mul
from aot.lower.kernels.conv_tile import FloatFma, TileAt
from aot.lower.kernels.half_dense import LANES, half_chunks
from aot.lower.kernels.windows import neighbours, tap_nest
from aot.lower.rules import LowerCtx

__all__ = ["HalfFma"]


@dataclass(frozen=True)
class HalfFma(FloatFma):
    """FloatFma whose per-tap reduction is summed in half."""

    def reduce(self, ctx: LowerCtx, at: TileAt) -> Stmt | None:
        fc = self.fc
        return tap_nest(ctx, at.region, at.pixels[0], fc.win, fc.xin.spatial,
                        lambda ipos, tap: _tap(ctx, fc, at, ipos, tap))


def _tap(ctx: LowerCtx, fc, at: TileAt, ipos, tap) -> Stmt | None:
    last = len(fc.xin.spatial) - 1
    rows = [ipos[:last] + [pos]
            for pos in neighbours(ipos[last], len(at.pixels), fc.win.strides[last])]

    def x_load(r: int, ic):
        ch = add(mul(at.g, Const(fc.icg)), ic)
        return fc.x.load(fc.xin.index(at.n, rows[r], ch), LANES)

    def w_load(ic, off: int):
        return Load(fc.wp, flat_index((at.g, *tap, ic, add(at.c0, Const(off))), fc.shape), LANES)
    return half_chunks(ctx, at.accs, at.widths, fc.icg, x_load, w_load)
