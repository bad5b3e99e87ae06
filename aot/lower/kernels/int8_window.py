"""The integer kernels' scalar window nest: per output pixel, an int32
accumulator row over the output channels, filled tap by tap and finished
channel by channel, region by region of the one window geometry
(aot/lower/kernels/windows.py: ConvGeom, tap_nest), its output walked by the one
walk (conv_walk.plane_walk: border regions, the accumulator row one channel
tile). The scalar convolutions (aot/lower/kernels/int8_conv.py: conv_nest, for
tflite_conv.py, tflite_int16.py and onnx_quant.py) and the integer pools
(tflite_pool.py) run on it.
"""
from __future__ import annotations

from typing import Callable

from aot.ir.tir import Expr, Load, Stmt, Store, seq
from aot.lower.arith.loops import loop
from aot.lower.kernels.conv_walk import plane_walk
from aot.lower.rules import LowerCtx
from aot.lower.kernels.windows import ConvGeom, tap_nest


def window_nest(ctx: LowerCtx, g: ConvGeom, acc, init: Callable[[Expr, bool], Expr],
                taps: Callable[[Expr, Expr, Expr, Expr, Expr, bool], Stmt],
                finish: Callable[[tuple, Expr, bool], Stmt],
                prologue: Callable[[Expr], Stmt] | None = None) -> Stmt:
    """The sliding-window loop nest shared by the int8 convolutions and pools.

    Per output pixel: acc[oc] = init(oc, inside); for each in-image tap
    (ky, kx) at (iy, ix), taps(n, ky, kx, iy, ix, inside) updates the
    accumulator row; then finish((n, oy, ox, oc), acc[oc], inside) per
    channel. prologue(n) runs once per image before its pixels.

    The output plane is split into regions: the interior, where every
    window is inside the image and the taps need no test (`inside`), and
    the border rows and columns, which test each kernel row and column
    only on the sides where their windows can leave the image.
    """
    win = g.window()

    def pixel(n, oy, oxs, region) -> Stmt:
        (ox,), (rows, cols) = oxs, region
        inside = not rows.guarded and not cols.guarded
        return seq(loop(ctx, "oc", g.cout, lambda oc: Store(acc, oc, init(oc, inside))),
                   tap_nest(ctx, (rows, cols), (oy, ox), win, (g.h, g.w), lambda ipos, tap:
                            taps(n, *tap, *ipos, inside), ("ky", "kx"), from_origin=True),
                   loop(ctx, "oc", g.cout,
                        lambda oc: finish((n, oy, ox, oc), Load(acc, oc), inside)))
    return plane_walk(ctx, g, pixel, prologue=prologue)
