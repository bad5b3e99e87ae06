"""The float register tiles chosen per target (aot/lower/schedule/tile_sizes.py) and the
by-lane reduction they use on Arm (aot/lower/rules/nn.py: inputs loaded a
vector of reduction steps at a time, each step multiplying one lane,
`aot_lane`): the tile sizes against the register files, the TIR shape, and
the kernels computed by the by-lane schedule checked against the reference
interpreter through both code generators on this machine (the policy
switched on for x86 here, so that the same lowering runs natively, on 4
and 8 lanes)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import aot
from aot.isa.calls import LANE, check_call, lane
from aot.errors import UnsupportedError
from aot.ir.graph import Graph, Node, type_of
from aot.ir.tir import (Broadcast, Call, Const, DType, Var, stmt_exprs, walk_expr, walk_expr_loads,
                        walk_stmt)
from aot.lower import lower_graph
from aot.lower.schedule import tile_sizes as schedule
from aot.testing import kernels as testing
from aot.testing.kernels import host_target
from aot.targets import get_target
from aot.testing import assert_close

from support import float_kernels
from support.float_kernels import ATOL, CONVS, DENSE, RTOL, _conv_consts, _rnd, onnx_graph, run_many


def _calls(func, name: str) -> int:
    return sum(1 for s in walk_stmt(func.body) for e in stmt_exprs(s) for x in walk_expr(e)
               if isinstance(x, Call) and x.fn == name)


def _conv_kernel(g, target):
    """The conv's kernel (between the layout transposes of an NCHW graph)."""
    return next(k.func for k in lower_graph(g, target) if k.func.name.startswith("conv"))


def test_tiles_fit_the_register_files():
    """AArch64 (32 registers): 2 vectors of channels x up to 9 pixels by
    lane (18 accumulators, 9 input vectors, 4 weight vectors); ARMv7 (16):
    up to 4 pixels; x86 keeps its broadcast tile, integer tiles too."""
    a64 = schedule.tile(get_target("aarch64-linux"), "float32", pixels=True)
    v7 = schedule.tile(get_target("armv7-linux"), "float32", pixels=True)
    assert (a64.lanes, a64.vectors, a64.k_lanes, a64.mr_max) == (4, 2, 4, 9)
    assert (v7.lanes, v7.vectors, v7.k_lanes, v7.mr_max) == (4, 2, 4, 4)
    for t, regs in ((a64, 32), (v7, 16)):
        for v in (1, 2, 3, 4):
            pixels = t.fit(v)
            assert pixels * (v + 1) + 2 * v <= regs < (pixels + 1) * (v + 1) + 2 * v
    assert schedule.tile(get_target("aarch64-linux-a76"), "float32", pixels=True) == a64
    t = schedule.tile(get_target("x86_64-linux"), "float32", pixels=True)
    assert t.k_lanes == 1 and t.vectors == 2
    assert schedule.tile(get_target("aarch64-linux"), "int32", pixels=True).k_lanes == 1
    # one row (a matrix-vector product): 4 vectors of outputs, inputs by lane
    a64_target = get_target("aarch64-linux")
    row = schedule.matvec_tile(a64_target, "float32", schedule.tile(a64_target, "float32"))
    assert (row.vectors, row.mr, row.k_lanes) == (4, 1, 4)


@pytest.mark.fast
def test_fewest_blocks_first_where_each_block_reloads_its_weights():
    """Rows of 32 pixels: 4-pixel blocks divide them, 5-pixel ones take a
    block fewer (the byte planes' choice); rows of 7 and 16 take as many
    blocks either way and keep the larger tail (4 + 3, 4 x 4)."""
    t = schedule.Tile(4, 4, mr=4, max_accs=20)
    assert (t.block(32), t.block(7), t.block(16)) == (4, 4, 4)
    few = dataclasses.replace(t, fewest_blocks=True)
    assert (few.block(32), few.block(7), few.block(16), few.block(5)) == (5, 4, 4, 5)


def test_aarch64_conv_reads_four_input_channels_per_load():
    """ResNet-8's 3x3 conv (16 -> 16 channels) on AArch64: the input loads
    of the hot loop are 4-lane vectors, each feeding 4 multiply-adds by lane;
    on x86 no lane is taken."""
    g = onnx_graph("Conv", (1, 16, 16, 16), _conv_consts((16, 16, 3, 3), 0),
                   dict(pads=[1, 1, 1, 1]))
    func = _conv_kernel(g, get_target("aarch64-linux"))
    x_loads = [ld for s in walk_stmt(func.body) for ld in walk_expr_loads(s)
               if ld.buffer.name == "in0"]
    assert x_loads and all(ld.lanes == 4 for ld in x_loads)
    assert _calls(func, LANE.name) == 4 * len(x_loads)
    assert _calls(_conv_kernel(g, host_target()), LANE.name) == 0


# Depthwise: blocks of 4 pixels whose taps share input loads (stride 1 and
# 2, dilated, 1-D, a channel remainder), a 5x5 kernel (blocks of 2) and a
# 7x7 one (49 weight vectors: more than the registers hold, 4 vectors per
# pixel as elsewhere).
DEPTHWISE = [
    ((1, 32, 24, 24), (32, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=32)),
    ((1, 32, 13, 13), (32, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=32, strides=[2, 2])),
    ((1, 16, 9, 11), (16, 1, 3, 3), dict(pads=[2, 2, 2, 2], group=16, dilations=[2, 2])),
    ((1, 10, 14), (10, 1, 3), dict(pads=[1, 1], group=10)),
    ((1, 8, 7, 12), (8, 1, 5, 5), dict(pads=[2, 2, 2, 2], group=8)),
    ((1, 8, 9, 9), (8, 1, 7, 7), dict(pads=[3, 3, 3, 3], group=8)),
]


def test_arm_depthwise_keeps_its_weights():
    """A 3x3 depthwise tile is 1 vector x 4 pixels on AArch64 (x 2 on
    ARMv7) with the channel tiles outermost; 5x5 on AArch64: 2 pixels; a
    7x7 one (ARMv7: a 5x5) and x86's stay 4 vectors x 1 pixel."""
    a64, v7 = get_target("aarch64-linux"), get_target("armv7-linux")
    for target, taps, mr in ((a64, 9, 4), (a64, 25, 2), (v7, 9, 2)):
        t = schedule.depthwise_tile(target, "float32", taps)
        assert (t.vectors, t.mr_max, t.weights_stay) == (1, mr, True), (target.name, taps)
    assert not schedule.depthwise_tile(a64, "float32", 49).weights_stay
    assert not schedule.depthwise_tile(v7, "float32", 25).weights_stay
    host = schedule.depthwise_tile(get_target("x86_64-linux"), "float32", 9)
    assert (host.vectors, host.mr, host.weights_stay) == (4, 1, False)


@pytest.fixture(params=[128, 256], ids=["4-lanes", "8-lanes"])
def by_lane_here(request, monkeypatch):
    """This machine as a target with AArch64's policy (by-lane tiles, 32
    registers), 4 or 8 float lanes (the target the kernels of
    float_kernels.run_many are built for)."""
    target = dataclasses.replace(host_target(), vector_bits=request.param, declared_registers=32)
    monkeypatch.setattr(schedule, "BY_LANE", (*schedule.BY_LANE, target.arch))
    for module in (testing, float_kernels):
        monkeypatch.setattr(module, "host_target", lambda: target)
    return target


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_by_lane_kernels_match_the_interpreter(by_lane_here, codegen):
    """Convolutions (padded, strided, grouped, 1x1 over rows and flattened,
    fewer input channels than lanes, a remainder of them, a row of taps as
    one reduction), depthwise ones
    (pixel blocks, weights kept) and Gemm/MatMul computed by AArch64's
    schedules."""
    convs = CONVS + [((1, 11, 7, 9), (8, 11, 3, 3), dict(pads=[1, 1, 1, 1])),
                     ((1, 32, 12, 12), (16, 32, 1, 1), {}),
                     # a row's taps and channels as one reduction (icg a multiple of lanes)
                     ((1, 16, 9, 10), (8, 16, 3, 3), dict(pads=[1, 0, 1, 2], strides=[2, 2])),
                     ((1, 16, 20, 20), (12, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
                     ((1, 8, 12), (12, 8, 5), dict(pads=[2, 2]))] + DEPTHWISE
    graphs = [onnx_graph("Conv", x, _conv_consts(w, i), a) for i, (x, w, a) in enumerate(convs)]
    graphs += [onnx_graph(op, x, {k: _rnd(*v, seed=i) for k, v in c.items()}, a)
               for i, (op, x, c, a) in enumerate(DENSE)]
    lanes = sum(_calls(k.func, LANE.name) for g in graphs for k in lower_graph(g, by_lane_here))
    assert lanes > 0
    cases = [(g, {"x": _rnd(*g.types["x"].shape, seed=i)}) for i, g in enumerate(graphs)]
    for (g, ins), got in zip(cases, run_many(cases, codegen)):
        want = aot.interpret(g, ins)
        for name in g.outputs:
            assert_close(f"{g.name}:{name}", got[name], want[name], RTOL, ATOL)


def test_lane_intrinsic_is_checked():
    v = Var("v", DType("float32", 4))
    assert check_call(LANE.name, lane(v, 3).args, DType("float32")) is LANE
    with pytest.raises(UnsupportedError, match="aot_lane"):
        check_call(LANE.name, (v, Const(4)), DType("float32"))
    with pytest.raises(UnsupportedError, match="aot_lane"):
        check_call(LANE.name, (Broadcast(Const(1.0, DType("float32")), 4), Var("i")),
                   DType("float32"))


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_by_lane_matmul_of_two_activations(by_lane_here, codegen):
    """Both operands computed at run time: A's rows read by lane, B's rows
    loaded per step (no panels), k = 11: a remainder after the lanes."""
    types = {"x": type_of(np.zeros((2, 9, 11), np.float32)),
             "z": type_of(np.zeros((2, 11, 12), np.float32))}
    node = Node("MatMul", "m", ("x", "z"), ("y",), {})
    g = aot.optimize(Graph("g", ("x", "z"), ("y",), (node,), types, {}))
    assert sum(_calls(k.func, LANE.name) for k in lower_graph(g, by_lane_here)) > 0
    ins = {"x": _rnd(2, 9, 11), "z": _rnd(2, 11, 12, seed=1)}
    assert_close("y", run_many([(g, ins)], codegen)[0]["y"], aot.interpret(g, ins)["y"],
                 RTOL, ATOL)
