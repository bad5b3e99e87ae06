"""The 16x8 kernels' (int16 activations) target paths.

Byte planes in SDOT quads: where the schedule takes them (the A76's
signed dot products by lane, dense convs 16k channels deep whose sums fit
int32 with the planes' margin), bit-exact on the host through the quads'
lane formula (padding, strides, several plane runs, weights holding -128)
and in an rpi5 package under qemu-aarch64 -cpu cortex-a76 against
tflite-micro; the one-multiply epilogue against the int64 MBQM.

Cortex-M4 (DSP): dense convs and FC in SMLADs of int16 activation words,
depthwise in SMLABB / SMLATT, bit-exact on mps2-an386 against tflite-micro."""
from __future__ import annotations

import numpy as np
import pytest

import aot
from aot.api import verify
from aot.frontend.tflite.importer import import_tflite
from aot.ir.tir import Call, stmt_exprs, walk_expr, walk_stmt
from aot.lower import lower_graph
from aot.lower.schedule.strategy import QUADS
from aot.targets import get_target
from aot.testing.kernels import build_and_run_many
from aot.testing.tflite_builder import TFLiteBuilder

# (input shape, output channels, kernel, stride, padding 0 SAME / 1 VALID)
CONVS = [((1, 6, 7, 16), 16, 3, 1, 0), ((1, 7, 6, 32), 8, 3, 2, 0),
         ((1, 5, 5, 16), 12, 3, 1, 1), ((1, 4, 4, 48), 16, 1, 1, 0)]


def _conv16(x_shape, cout, k, stride, padding, seed, bias_spread=4000) -> bytes:
    """One int16 CONV_2D (int8 weights per channel, -128 among them, int64 bias)."""
    rng = np.random.default_rng(seed)
    cin = x_shape[3]
    w = rng.integers(-128, 128, (cout, k, k, cin))
    w[0, 0, 0, 0] = -128
    ws = list(rng.uniform(0.002, 0.02, cout))
    m = TFLiteBuilder()
    x = m.tensor("x", x_shape, "int16", scale=[0.02], zp=[0])
    oh = -(-x_shape[1] // stride) if padding == 0 else (x_shape[1] - k) // stride + 1
    ow = -(-x_shape[2] // stride) if padding == 0 else (x_shape[2] - k) // stride + 1
    y = m.tensor("y", (1, oh, ow, cout), "int16", scale=[0.5], zp=[0])
    wt = m.const("w", w, "int8", scale=ws, zp=[0] * cout, qdim=0)
    bt = m.const("bias", rng.integers(-bias_spread, bias_spread, cout), "int64",
                 scale=[0.02 * s for s in ws], zp=[0] * cout)
    m.op("CONV_2D", [x, wt, bt], [y], "Conv2DOptions", Padding=padding, StrideH=stride,
         StrideW=stride, FusedActivationFunction=0)
    return m.build([x], [y])


def _graph(data: bytes):
    return aot.optimize(import_tflite(data, "conv16"))


def _lowered(graph, target: str):
    funcs = [k.func for k in lower_graph(graph, get_target(target))]
    calls = {x.fn for f in funcs for st in walk_stmt(f.body) for e in stmt_exprs(st)
             for x in walk_expr(e) if isinstance(x, Call)}
    return calls, {p.name for f in funcs for p in f.params}


@pytest.mark.fast
def test_int16_dense_convs_take_byte_planes_where_sdot_is():
    g = _graph(_conv16(*CONVS[0], seed=1))
    calls, params = _lowered(g, "aarch64-linux-a76")
    assert "arm_sdot" in calls and "plane_rows" in params
    calls, params = _lowered(g, "aarch64-linux")       # A72: no dot product, SMLAL
    assert "plane_rows" not in params and any(c.startswith("arm_smlal") for c in calls)
    # a bias near int32's end: the planes' partial sums could overflow
    big = _graph(_conv16(*CONVS[0], seed=1, bias_spread=2 ** 31 - 2 ** 26))
    assert "plane_rows" not in _lowered(big, "aarch64-linux-a76")[1]


@pytest.mark.fast
def test_rdhm_mbqm_equals_the_int64_one_at_the_ends():
    """The 16x8 epilogue as one rounding doubling high multiply against
    qmath.mbqm_int64 on accumulators at int32's ends and around 2^16
    multiples, for M16 and shifts at the ends rdhm_fits allows."""
    from aot.lower.arith.requant import rdhm_fits, rdhm_multipliers, reduced_multipliers
    from aot.ops.quant.qmath import mbqm_int64
    acc = np.array([-2**31, -2**31 + 1, -65537, -65536, -65535, -1, 0, 1, 65535, 65536,
                    2**31 - 65536, 2**31 - 1], np.int64)
    for mult, shift in [(2**31 - 1, -2), (0x7FFF0000 - 1, -16), (2**30, -16), (2**30, -2),
                        (1 << 30 | 12345, -9), (0, -5), (2**31 - 1, -1), (2**30, 0)]:
        m16, rounding, total = reduced_multipliers(mult, shift)
        assert rdhm_fits(m16, rounding, total)
        m = rdhm_multipliers(m16, rounding, total)[0]
        assert 0 <= m < 2**31
        # SQRDMULH / aot_rdhm: floor((acc m + 2^30) / 2^31)
        np.testing.assert_array_equal((acc * m + (1 << 30)) >> 31, mbqm_int64(acc, mult, shift))
    m16, rounding, total = reduced_multipliers(2**30, -17)      # a shift of 32: the int64 form
    assert not rdhm_fits(m16, rounding, total)
    m16, rounding, total = reduced_multipliers(2**30, 7)        # shift 8: M16 2^23 is too big
    assert not rdhm_fits(m16, rounding, total)


def test_byte_planes_bit_exact_in_the_lane_formula(monkeypatch):
    """The A76's schedule (signed quads by lane) and its one-multiply
    epilogue on this host's C: the quads' lane formula, against the
    interpreter."""
    import aot.lower.schedule.conv as policy        # the module whose schedule asks
    monkeypatch.setattr(policy, "int8_accumulator", lambda target: QUADS)
    target = get_target("x86_64-linux")
    graphs = [_graph(_conv16(*c, seed=k)) for k, c in enumerate(CONVS)]
    rng = np.random.default_rng(3)
    cases = [(g, {n: rng.integers(-32768, 32768, g.types[n].shape).astype(np.int16)
                  for n in g.inputs}) for g in graphs for _ in range(2)]
    # the extremes: every high byte -128 or 127, every low byte 0 or 255
    for g in graphs:
        shape = g.types[g.inputs[0]].shape
        cases += [(g, {g.inputs[0]: np.full(shape, v, np.int16)}) for v in (-32768, 32767)]
    for (g, feeds), got in zip(cases, build_and_run_many(cases, "c", target)):
        want = aot.interpret(g, feeds)
        for name in g.outputs:
            np.testing.assert_array_equal(got[name], want[name])
    for g in graphs:
        assert "plane_rows" in _lowered(g, "x86_64-linux")[1]


def test_rpi5_int16_conv_in_planes_bit_exact_with_tflm(tmp_path):
    path = tmp_path / "conv16.tflite"
    path.write_bytes(_conv16(*CONVS[1], seed=9))
    pkg = tmp_path / "pkg"
    aot.package(path, board="rpi5", out_dir=pkg)
    assert "plane_rows" in (pkg / "src" / "conv16_kernels.c").read_text()
    out = verify(pkg, board="qemu-aarch64", source=path)
    assert out["reference"] == "tflite-micro", out
    assert out["ok"] and all(r["max_abs_err"] == 0.0 for r in out["outputs"]), out


@pytest.mark.parametrize("board,kind", [("rpi4", "conv"), ("rpi5", "fc")])
def test_one_multiply_epilogue_bit_exact_with_tflm_on_the_pis(board, kind, tmp_path):
    """The 16x8 epilogue's SQRDMULH under qemu-aarch64: the A72's SMLAL conv
    and the A76's FC, per-channel and per-tensor multipliers."""
    path = tmp_path / "m16.tflite"
    path.write_bytes(_conv16(*CONVS[2], seed=11) if kind == "conv" else _fc16(3, 40, 12, seed=12))
    pkg = tmp_path / "pkg"
    aot.package(path, board=board, out_dir=pkg)
    assert "sqrdmulh" in (pkg / "src" / "m16_kernels.c").read_text()
    out = verify(pkg, board="qemu-aarch64", source=path)
    assert out["reference"] == "tflite-micro", out
    assert out["ok"] and all(r["max_abs_err"] == 0.0 for r in out["outputs"]), out


def _fc16(rows: int, depth: int, units: int, seed: int) -> bytes:
    """One int16 FULLY_CONNECTED (int8 weights per tensor, int64 bias)."""
    rng = np.random.default_rng(seed)
    m = TFLiteBuilder()
    x = m.tensor("x", (rows, depth), "int16", scale=[0.02], zp=[0])
    y = m.tensor("y", (rows, units), "int16", scale=[0.5], zp=[0])
    wt = m.const("w", rng.integers(-128, 128, (units, depth)), "int8", scale=[0.01], zp=[0])
    bt = m.const("bias", rng.integers(-4000, 4000, units), "int64", scale=[0.0002], zp=[0])
    m.op("FULLY_CONNECTED", [x, wt, bt], [y], "FullyConnectedOptions",
         FusedActivationFunction=0)
    return m.build([x], [y])


def _dw16(x_shape, stride: int, seed: int) -> bytes:
    """One int16 DEPTHWISE_CONV_2D, 3x3 SAME, multiplier 1 (int64 bias)."""
    rng = np.random.default_rng(seed)
    c = x_shape[3]
    ws = list(rng.uniform(0.002, 0.02, c))
    m = TFLiteBuilder()
    x = m.tensor("x", x_shape, "int16", scale=[0.02], zp=[0])
    oh, ow = -(-x_shape[1] // stride), -(-x_shape[2] // stride)
    y = m.tensor("y", (1, oh, ow, c), "int16", scale=[0.05], zp=[0])
    wt = m.const("w", rng.integers(-128, 128, (1, 3, 3, c)), "int8", scale=ws, zp=[0] * c,
                 qdim=3)
    bt = m.const("bias", rng.integers(-4000, 4000, c), "int64", scale=[0.02 * s for s in ws],
                 zp=[0] * c)
    m.op("DEPTHWISE_CONV_2D", [x, wt, bt], [y], "DepthwiseConv2DOptions", Padding=0,
         StrideH=stride, StrideW=stride, DepthMultiplier=1)
    return m.build([x], [y])


@pytest.mark.fast
def test_int16_convs_and_fc_take_smlad_on_the_m4():
    for data, instruction in ((_conv16(*CONVS[1], seed=2), "arm_smlad"),
                              (_fc16(2, 22, 6, seed=2), "arm_smlad"),
                              (_dw16((1, 5, 6, 10), 1, seed=2), "arm_smlatt")):
        calls, _ = _lowered(_graph(data), "cortex-m4")
        assert instruction in calls, sorted(calls)


@pytest.mark.parametrize("data", [_conv16(*CONVS[1], seed=4), _conv16(*CONVS[2], seed=5),
                                  _fc16(2, 22, 6, seed=6), _dw16((1, 5, 6, 10), 1, seed=7),
                                  _dw16((1, 7, 7, 8), 2, seed=8)],
                         ids=["conv_s2", "conv_valid", "fc", "depthwise", "depthwise_s2"])
def test_m4_int16_smlad_bit_exact_with_tflm(data, tmp_path):
    path = tmp_path / "m16.tflite"
    path.write_bytes(data)
    out = verify(path, board="mps2-an386", count=2)
    assert out["reference"] == "tflite-micro", out
    assert out["ok"] and all(r["max_abs_err"] == 0.0 for r in out["outputs"]), out


def _staged_chain() -> bytes:
    """Four int16 CONV_2Ds in SMLAL on the A72: 12 deep (a channel at a
    time from the input), then three on staged int16 rows: 24 deep on
    12-pixel rows (three blocks of 8 channels unrolled, two 6-pixel
    blocks a row), dilated 2 with SAME padding, then 32 deep at stride 2
    VALID (the blocks in a loop)."""
    rng = np.random.default_rng(21)
    m = TFLiteBuilder()

    def conv(x, name, shape, cin, cout, scale, stride=1, dilation=1, padding=0):
        ws = list(rng.uniform(0.005, 0.01, cout))
        y = m.tensor(name, shape, "int16", scale=[scale], zp=[0])
        w = m.const(f"{name}_w", rng.integers(-128, 128, (cout, 3, 3, cin)), "int8", scale=ws,
                    zp=[0] * cout, qdim=0)
        b = m.const(f"{name}_b", rng.integers(-40000, 40000, cout), "int64",
                    scale=[s * 0.02 for s in ws], zp=[0] * cout)
        m.op("CONV_2D", [x, w, b], [y], "Conv2DOptions", Padding=padding, StrideH=stride,
             StrideW=stride, DilationHFactor=dilation, DilationWFactor=dilation,
             FusedActivationFunction=0)
        return y
    x = m.tensor("x", (1, 9, 12, 12), "int16", scale=[0.02], zp=[0])
    x24 = conv(x, "x24", (1, 9, 12, 24), 12, 24, 0.2)
    a = conv(x24, "a", (1, 9, 12, 16), 24, 16, 3.0)
    b = conv(a, "b", (1, 9, 12, 32), 16, 32, 4.0, dilation=2)
    y = conv(b, "y", (1, 4, 5, 16), 32, 16, 60.0, stride=2, padding=1)
    return m.build([x], [y])


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_rpi4_int16_convs_on_staged_rows_bit_exact_with_tflm(tmp_path, codegen):
    """The A72's 16x8 dense convs: SMLAL by element over int16 rows staged
    with zero padding (one untested region), under qemu-aarch64 -cpu
    cortex-a72 against tflite-micro."""
    path = tmp_path / "staged16.tflite"
    path.write_bytes(_staged_chain())
    kernels = lower_graph(_graph(path.read_bytes()), get_target("aarch64-linux"))
    assert [("wide_rows" in {p.name for p in k.func.params}) for k in kernels] == [
        False, True, True, True]
    assert any(c.startswith("arm_smlal") for c in _lowered(_graph(path.read_bytes()),
                                                           "aarch64-linux")[0])
    out = verify(path, board="qemu-aarch64", codegen=codegen, count=2)
    assert out["reference"] == "tflite-micro", out
    assert out["ok"] and all(r["max_abs_err"] == 0.0 for r in out["outputs"]), out
