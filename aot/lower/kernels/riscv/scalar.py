"""int8 kernels for scalar RISC-V cores without vectors or a DSP extension
(rv32imc, rv32imac: ESP32-C3, FE310, GD32VF103): the nests of
aot/lower/kernels/cortex_m/dsp.py (matmul, dense, depthwise, fully
connected), which take their depth in Words, given words of plain int8
loads, 32-bit multiplies and adds. No SMLAD: each product is a MUL and an
ADD, so what the tiles save is loads. With 31 integer registers a tile
holds 4 rows x 4 output channels of int32 accumulators (16), and a step
of the depth keeps its 4 + 4 loaded values beside them; a pair of
neighbouring pixels x 4 channels for the convolutions that read their
taps where they lie. A word of `lanes` depth values is one unrolled step
(immediate load offsets, one loop counter per word).

As in dsp.py, the input zero point is folded into the bias, the inputs
are read as they are (a tap outside the image reads the zero point), and
each accumulator is requantized from its register in 32-bit arithmetic
where its bound proves that exact (the rules' TfliteRequant32).
"""
from __future__ import annotations

from functools import partial

import numpy as np

from aot.ir.tir import Assign, Bin, Buffer, Const, Decl, Expr, If, Load, Stmt, Var, add, mul, seq
from aot.lower.arith.quant import to_i32
from aot.lower.kernels.cortex_m import dsp
from aot.lower.rules import LowerCtx, TensorRef
from aot.targets import Target

# Depth values per unrolled step of the products.
LANES = 4
# rows x output channels of the matrix products' register tiles (12 accumulators)
MATMUL_TILE = (3, 4)
# neighbouring pixels x output channels of the convolutions reading taps in place
CONV_TILE = (2, 4)
# output channels of a depthwise group held in registers over the taps
DEPTHWISE_CHANNELS = 4


def scalar_target(t: Target) -> bool:
    """A 32-bit RISC-V core without a vector unit (its loads read bytes
    sign-extended: LB)."""
    return t.arch == "riscv32" and t.lanes(32) == 1


def _scalars(ctx: LowerCtx, body: list, name: str, load: Load, cond: Expr | None = None,
             fill: int = 0) -> list[Expr]:
    """The `load.lanes` int8 values of `load`, each an int32: the loads
    themselves, which the C compiler reads where a product first needs them
    (declared up front, a 4x4 tile's 32 values spilled its accumulators:
    3.7 instructions per MAC, 2.6 without); with `cond`, variables appended
    to body (`fill` where cond is false: a tap outside the image)."""
    reads = [to_i32(Load(load.buffer, add(load.index, Const(i)))) for i in range(load.lanes)]
    if cond is None:
        return reads
    vs = [ctx.fresh(name) for _ in range(load.lanes)]
    if True:
        body += [Decl(v, Const(fill)) for v in vs]
        body.append(If(cond, seq(*(Assign(v, r) for v, r in zip(vs, reads)))))
    return vs


def _dot_scalars(body: list, xs, ws, accs) -> None:
    """accs[i][k] += sum over the lanes of xs[i] * ws[k], lane by lane (each
    lane's values die after it: fewer registers live)."""
    for lane in range(len(xs[0])):
        for xv, row in zip(xs, accs):
            for wv, acc in zip(ws, row):
                body.append(Assign(acc, Bin("+", acc, Bin("*", xv[lane], wv[lane]))))


def depthwise_group(ctx: LowerCtx, x: TensorRef, wbuf: Buffer, bias: np.ndarray, zp: int,
                    kw: int, finish) -> object:
    """group(n, oy, ox, tests, c, taps): channels c..c+3 of an output pixel of
    dsp.depthwise (filter `wbuf` [KH, KW, C], taps as there), each an int32
    accumulator from the folded `bias` over the window."""
    channels = len(bias)
    vbias = ctx.param("bias", bias.astype(np.int32))

    def group(n, oy, ox, tests, c: Expr, taps) -> Stmt:
        accs = [ctx.fresh("acc") for _ in range(DEPTHWISE_CHANNELS)]
        parts: list[Stmt] = [Decl(a, Load(vbias, add(c, Const(k)))) for k, a in enumerate(accs)]

        def tap(ky, kx, at, cond) -> Stmt:
            body: list[Stmt] = []
            xs = _scalars(ctx, body, "x", Load(x.buffer, add(at, c), DEPTHWISE_CHANNELS),
                          cond, zp)
            w_at = add(mul(add(mul(ky, Const(kw)), kx), Const(channels)), c)
            ws = _scalars(ctx, body, "w", Load(wbuf, w_at, DEPTHWISE_CHANNELS))
            for acc, xv, wv in zip(accs, xs, ws):
                body.append(Assign(acc, Bin("+", acc, Bin("*", xv, wv))))
            return seq(*body)
        parts.append(taps(n, oy, ox, tests, tap))
        parts += [finish((n, oy, ox, add(c, Const(k))), a) for k, a in enumerate(accs)]
        return seq(*parts)
    return group


def words(lanes: int) -> dsp.Words:
    """Words of `lanes` plain int8 loads (depthwise: groups of 4 channels)."""
    return dsp.Words(lanes, _scalars, _dot_scalars, depthwise_group)


WORDS = words(LANES)


def conv_lanes(depth: int) -> int:
    """The widest word (4, 2, 1 values) whose multiples make up `depth`, so
    that no word spans two taps."""
    return next(n for n in (LANES, 2, 1) if depth % n == 0)


# `on`: the cores a kernel is offered on by default (these nests are plain
# C: a tuning config may pick them on any core, aot/lower/schedule/conv.py).
def fits_pointwise(target: Target, g, weights: np.ndarray, on=scalar_target) -> bool:
    """A 1x1 convolution of one group at stride 1 without padding (a product
    of pixel rows), int8 weights."""
    return on(target) and dsp.pointwise_shape(g) and dsp.fits_int8(weights)


def fits_dense(target: Target, g, weights: np.ndarray, on=scalar_target) -> bool:
    """Any other convolution of one group, int8 weights: its taps read in
    place in words of conv_lanes(depth)."""
    return on(target) and g.groups == 1 and dsp.fits_int8(weights)


def fits_rows(target: Target, g, weights: np.ndarray, on=scalar_target) -> bool:
    """A first layer: one group over fewer than 4 (or an odd number of)
    input channels whose window rows (kernel width x channels, contiguous)
    hold a word of 4 or more: read a row at a time rather than a tap."""
    return (on(target) and g.groups == 1 and g.depth % LANES != 0
            and g.dilations[1] == 1 and g.kw * g.depth >= LANES and dsp.fits_int8(weights))


def fits_depthwise(target: Target, g, weights: np.ndarray, on=scalar_target) -> bool:
    """A depthwise convolution with multiplier 1 over 4 channels or more."""
    return (on(target) and g.depth == 1 and g.per_group == 1
            and g.groups >= DEPTHWISE_CHANNELS and dsp.fits_int8(weights))


def fits_fc(target: Target, w: np.ndarray, on=scalar_target) -> bool:
    return on(target) and w.shape[1] >= LANES and dsp.fits_int8(w)


def pointwise(ctx, x, g, weights, bias, zp, finish) -> Stmt:
    return dsp.pointwise(ctx, x, g, weights, bias, zp, finish, words=WORDS, tile=MATMUL_TILE)


def dense(ctx, x, g, weights, bias, zp, finish) -> Stmt:
    return dsp.dense(ctx, x, g, weights, bias, zp, finish, words=words(conv_lanes(g.depth)),
                     tile=CONV_TILE)


def window_rows(ctx, x, g, weights, bias, zp, finish) -> Stmt:
    return dsp.window_rows(ctx, x, g, weights, bias, zp, finish, words=WORDS, tile=CONV_TILE)


depthwise = partial(dsp.depthwise, words=WORDS, unroll_border=True)
fully_connected = partial(dsp.fully_connected, words=WORDS, tile=MATMUL_TILE)
