"""int8 kernels for Cortex-M cores without SIMD (Cortex-M0/M0+, ARMv6-M;
Cortex-M3, ARMv7-M): the nests of dsp.py (its register tiles, interleaved
weights, zero point folded into the bias, no im2col buffer) given words of
four int8 read byte by byte.

Without the DSP extension, SXTB16 and SMLAD are formulas slower than plain
code, but what makes those nests fast besides them still holds: 32-bit
accumulators of a tile (2 pixels x 2 output channels, 1 row x 4 units for a
fully connected layer, 4 channels for a depthwise one) kept in registers
over the whole depth, each input and weight byte loaded once per tile
(LDRSB, sign-extending) and used by every accumulator it feeds, with a
32x32->32 multiply-add (MLA on the M3, MULS and ADDS on the M0: the only
multiply ARMv6-M has, and all int8 products need), the weights streamed in
the order the tile reads them. The plain scalar loops reload every operand
per product, test the border per term and keep one accumulator.

The schedule (aot/lower/schedule/conv.py) offers these on a core
`scalar_target` accepts, where dsp.py's fits_* hold for it, by their names
in this package's CONV and FC tables ("scalar_pointwise", ...; on ARMv6-M
"v6m_pointwise" and "v6m_dense", in V6M_TILE).
Requantization takes the 32-bit form where the bounds prove it
(aot/lower/arith/requant.py's TfliteRequant32, as on the DSP cores); its
rounded high multiply is aot_smmulr, one SMULL and adds on the M3 and, on
the M0, which has no 32x32->64 multiply, four MULS on 16-bit halves
(aot/isa/armv6m.py) instead of a call to __aeabi_lmul.
"""
from __future__ import annotations

from functools import partial

from aot.ir.tir import Assign, Bin, Const, Decl, Expr, If, Load, add, seq
from aot.lower.arith.quant import to_i32
from aot.lower.kernels.cortex_m import dsp
from aot.targets import Target


def scalar_target(t: Target) -> bool:
    """A Cortex-M core (Thumb) with neither the DSP extension nor vectors."""
    return t.arch == "thumb" and not t.has("dsp") and t.lanes(32) == 1


def _bytes(ctx, body: list, name: str, load: Load, cond: Expr | None = None,
           fill: int = 0) -> tuple[Expr, ...]:
    """The `load.lanes` int8 of a word as int32 values: the loads themselves
    (the compiler loads each once per tile), or, where `cond` may be false
    (a tap outside the image), variables holding `fill` there."""
    values = [to_i32(Load(load.buffer, add(load.index, Const(i)))) for i in range(load.lanes)]
    if cond is None:
        return tuple(values)
    vs = [ctx.fresh(f"{name}{i}") for i in range(load.lanes)]
    body += [Decl(v, Const(fill)) for v in vs]
    body.append(If(cond, seq(*(Assign(v, value) for v, value in zip(vs, values)))))
    return tuple(vs)


def _dot_bytes(body: list, xs, ws, accs) -> None:
    """accs[i][k] += the products of input word i and weight word k, byte
    position by byte position (every accumulator of the tile per byte)."""
    for j in range(len(xs[0]) if xs else 0):
        for x, row in zip(xs, accs):
            for w, acc in zip(ws, row):
                body.append(Assign(acc, Bin("+", acc, Bin("*", x[j], w[j]))))


def _lanewise_bytes(body: list, x, w, accs) -> None:
    """accs[k] += byte k of x times byte k of w."""
    for xk, wk, acc in zip(x, w, accs):
        body.append(Assign(acc, Bin("+", acc, Bin("*", xk, wk))))


BYTES = dsp.Words(4, _bytes, _dot_bytes, lanewise=_lanewise_bytes)
# The M0's tile of the pointwise and dense nests: ARMv6-M's data processing
# reaches only r0-r7, where a 2 x 2 tile's accumulators, four operands and
# pointers spill; 1 pixel x 3 output channels (the M3 keeps dsp.CONV_TILE,
# 2 x 2). Instructions per inference on bench-m0-an385, 2x2 -> 1x3: kws
# 20.09 M -> 18.82 M, vww 59.84 M -> 56.27 M, ic 90.95 M -> 87.39 M (1x4:
# kws 19.18 M, ic 92.38 M; on the M3 1x4 costs kws 8.99 M against 8.61 M).
V6M_TILE = (1, 3)

fits_pointwise = partial(dsp.fits_pointwise, on=scalar_target)
fits_dense = partial(dsp.fits_dense, on=scalar_target)
fits_rows = partial(dsp.fits_rows, on=scalar_target)
fits_depthwise = partial(dsp.fits_depthwise, on=scalar_target)
fits_fc = partial(dsp.fits_fc, on=scalar_target)
