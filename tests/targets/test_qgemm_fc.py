"""QGemm and QLinearMatMul with a constant B on the int8 fully connected
kernels of tfl.fully_connected (VNNI's vpdpbusd on host-avx512), bit-exact
with ONNX Runtime: uint8 and int8 rows, a per-tensor B zero point folded
into the weights, the int32 C, per-column scales, a float output (QGemm
without y_zero_point), a depth with a tail of single steps and a column
count with a remainder tile."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T, helper, numpy_helper

from aot.api import verify
from aot.deploy.host import cpu_flags
from aot.targets import get_board
from support.speech_models import u8s8_inexact

M, K, N = 2, 70, 40


def _fc_model(path):
    rng = np.random.default_rng(3)

    def init(name, v):
        return numpy_helper.from_array(np.asarray(v), name)
    b_t = rng.integers(-126, 126, (N, K)).astype(np.int8)     # QGemm's B, transB=1
    inits = [init("su", np.float32(0.04)), init("zu", np.array(131, np.uint8)),
             init("si", np.float32(0.05)), init("zi", np.array(-7, np.int8)),
             init("bt", b_t), init("b", np.ascontiguousarray(b_t.T)),
             init("bs", rng.uniform(0.002, 0.02, N).astype(np.float32)),
             init("bz", np.zeros(N, np.int8)), init("bz0", np.array(0, np.int8)),
             init("bz2", np.array(2, np.int8)),
             init("bs1", np.float32(0.01)),
             init("c", rng.integers(-3000, 3000, N).astype(np.int32)),
             init("ys", np.float32(0.25)), init("yu", np.array(120, np.uint8)),
             init("yi", np.array(-3, np.int8))]
    ms = "com.microsoft"
    nodes = [
        helper.make_node("QGemm", ["au", "su", "zu", "bt", "bs", "bz", "c", "ys", "yu"], ["y_u8"],
                         domain=ms, transB=1),
        helper.make_node("QGemm", ["ai", "si", "zi", "bt", "bs1", "bz2", "c", "ys", "yi"],
                         ["y_i8"], domain=ms, transB=1, alpha=0.5),
        helper.make_node("QGemm", ["au", "su", "zu", "bt", "bs", "bz", "c"], ["y_float"],
                         domain=ms, transB=1),
        helper.make_node("QLinearMatMul", ["au", "su", "zu", "b", "bs1", "bz0", "ys", "yu"],
                         ["y_matmul"]),
    ]
    graph = helper.make_graph(
        nodes, "fc", [helper.make_tensor_value_info("au", T.UINT8, [M, K]),
                      helper.make_tensor_value_info("ai", T.INT8, [M, K])],
        [helper.make_tensor_value_info(n, t, None) for n, t in
         (("y_u8", T.UINT8), ("y_i8", T.INT8), ("y_float", T.FLOAT), ("y_matmul", T.UINT8))],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(ms, 1)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize("board", ["host-avx512"])
def test_qgemm_and_qlinear_matmul_run_on_the_int8_fc_kernels_bit_exact(board, tmp_path):
    if u8s8_inexact():
        pytest.skip(u8s8_inexact())
    if not set(get_board(board).options["cpu_flags"]) <= cpu_flags():
        pytest.skip(f"this CPU lacks {board}'s features")
    out = verify(_fc_model(tmp_path / "fc.onnx"), board=board, count=3,
                 out_dir=tmp_path / "pkg").check()
    assert out.reference == "onnxruntime" and len(out.outputs) == 4
    for row in out.outputs:
        assert row.max_abs == 0.0, row
    source = "".join(p.read_text() for p in (tmp_path / "pkg" / "src").glob("*kernels*.c"))
    kernels = source.split("\nvoid ")[1:]
    assert len(kernels) == 4
    for kernel in kernels:      # each product in vpdpbusd tiles
        assert "x86_vpdpbusd_i32x16(" in kernel, kernel[:200]
