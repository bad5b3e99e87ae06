"""Float convolutions with few output channels over many input channels (a
detector's heads) on x86: the channel_dot kernel (input channels in the
lanes) with its lane sums folded together by aot_pair_sums, for AVX2 (8
lanes) and AVX-512 (16), C and LLVM, against ONNX Runtime. On AVX-512 the
heads' tiles hold 16, 12, 9, 8, 6 and 3 accumulators, so runs of 16, 8, 4,
2 and 1 are folded (every fold depth); on AVX2 the 3x3 head's 6 and 3."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.api import package
from aot.deploy import run_package
from aot.deploy.host import cpu_flags
from aot.errors import UnsupportedError
from aot.ir.tir import FLOAT32, Var
from aot.isa.calls import check_call, pair_sums
from aot.targets import get_board


def heads_model() -> bytes:
    """x [1, 64, 5, 7] -> a 1x1 64 -> 6 head and a padded 3x3 64 -> 3 one."""
    rng = np.random.default_rng(0)
    inits, nodes, outs = [], [], []
    for name, oc, k in (("box", 6, 1), ("cls", 3, 3)):
        w = (rng.standard_normal((oc, 64, k, k)) / np.sqrt(64 * k * k)).astype(np.float32)
        b = (rng.standard_normal(oc) * 0.1).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w_{name}"), numpy_helper.from_array(b, f"b_{name}")]
        nodes.append(helper.make_node("Conv", ["x", f"w_{name}", f"b_{name}"], [name],
                                      kernel_shape=[k, k], pads=[k // 2] * 4))
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, oc, 5, 7]))
    graph = helper.make_graph(nodes, "heads", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 64, 5, 7])], outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("board, codegen", [("host", "c"), ("host-avx512", "c"),
                                             ("host-avx512", "llvm")])
def test_heads_fold_their_sums_and_match_onnxruntime(board, codegen, tmp_path):
    import onnxruntime as ort

    brd = get_board(board)
    if not set(brd.options["cpu_flags"]) <= cpu_flags():
        pytest.skip(f"this CPU lacks {board}'s features")
    path = tmp_path / "heads.onnx"
    path.write_bytes(heads_model())
    x = np.random.default_rng(1).standard_normal((1, 64, 5, 7)).astype(np.float32)
    info = package(path, board=board, codegen=codegen, out_dir=tmp_path / "pkg")
    if codegen == "c":
        source = "".join(p.read_text() for p in (info.path / "src").glob("*kernels*.c"))
        assert "aot_pair_sums_f32x" in source and "__builtin_shufflevector" in source
    got = run_package(info.path, brd, [x]).outputs
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_pair_sums_takes_two_vectors_of_one_type():
    a, b = Var("a", FLOAT32.with_lanes(8)), Var("b", FLOAT32.with_lanes(8))
    call = pair_sums(a, b)
    assert check_call(call.fn, call.args, call.dtype).name == "aot_pair_sums"
    with pytest.raises(UnsupportedError, match="aot_pair_sums takes two vectors of one type"):
        check_call("aot_pair_sums", (a, Var("c", FLOAT32.with_lanes(4))), call.dtype)
    with pytest.raises(UnsupportedError, match="aot_pair_sums takes two vectors of one type"):
        check_call("aot_pair_sums", (Var("s", FLOAT32), Var("t", FLOAT32)), FLOAT32)
