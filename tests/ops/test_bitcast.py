"""BitCast compiled: a float's bits as an integer of its width and back
(tir.Cast with bits=True: memcpy in C, bitcast in LLVM), every runnable
backend node case of BitCast on the host with both code generators, and
the bit patterns a value conversion would lose (NaN payloads, -0.0,
subnormals, infinities) through one package."""
from __future__ import annotations

import functools
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

import support.conformance_package as pkg
from support.conformance import _compare, skip_reason

from aot.api import run
from aot.targets import get_board


@functools.lru_cache(maxsize=None)
def cases() -> dict[str, object]:
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        everything = collect_testcases(None)
    return {c.name: c for c in everything
            if c.model.graph.node[0].op_type == "BitCast" and not skip_reason(c)}


@pytest.mark.parametrize("codegen", ("c", "llvm"))
def test_every_bitcast_case_compiled_on_host(codegen):
    assert {"test_bitcast_float32_to_int32", "test_bitcast_int32_to_float32"} <= set(cases())
    board = get_board("host")
    packaged = {name: pkg.package_case(case, f"bc{n}", codegen, board)
                for n, (name, case) in enumerate(sorted(cases().items()))}
    with tempfile.TemporaryDirectory(prefix="aot-bitcast-") as tmp:
        lib, failed = pkg.build(Path(tmp), [r for rs in packaged.values() for r in rs], board)
        assert not failed, failed
        for name, runs in packaged.items():
            for r in runs:
                got = pkg.run_isolated(lib, r)
                for out, want in r.expected.items():
                    assert _compare(out, got[out], np.asarray(want)) is None, name


def test_bit_patterns_survive(tmp_path):
    """float32 -> int32 -> float32 and int32 -> float32 -> int32 keep every
    bit, where a value conversion would not: quiet and signalling NaNs with
    payloads, -0.0, subnormals, infinities (a vector of 16 lanes and a
    scalar tail: 35 elements)."""
    pattern = np.array([0x7FC00001, 0x7FA00000, 0xFFC12345, 0x80000000, 0x00000001,
                        0x807FFFFF, 0x7F800000, 0xFF800000, 0x3F800000, 0xC0490FDB],
                       np.uint32).view(np.int32)
    bits = np.resize(pattern, 35)
    floats = bits.view(np.float32)
    nodes = [helper.make_node("BitCast", ["f"], ["f_bits"], to=T.INT32),
             helper.make_node("BitCast", ["f_bits"], ["f_back"], to=T.FLOAT),
             helper.make_node("BitCast", ["i"], ["i_float"], to=T.FLOAT),
             helper.make_node("Neg", ["i_float"], ["i_neg"]),
             helper.make_node("BitCast", ["i_neg"], ["i_neg_bits"], to=T.INT32)]
    model = helper.make_model(helper.make_graph(
        nodes, "bits", [helper.make_tensor_value_info("f", T.FLOAT, [35]),
                        helper.make_tensor_value_info("i", T.INT32, [35])],
        [helper.make_tensor_value_info(n, t, None) for n, t in
         (("f_bits", T.INT32), ("f_back", T.FLOAT), ("i_neg_bits", T.INT32))]),
        opset_imports=[helper.make_opsetid("", 26)])
    onnx.save(model, tmp_path / "bits.onnx")
    for codegen in ("c", "llvm"):
        got = run(tmp_path / "bits.onnx", {"f": floats, "i": bits}, board="host",
                  codegen=codegen)
        np.testing.assert_array_equal(got["f_bits"], bits)
        np.testing.assert_array_equal(got["f_back"].view(np.int32), bits)
        # negation flips the sign bit alone, NaNs included
        np.testing.assert_array_equal(got["i_neg_bits"], bits ^ np.int32(-2**31))


@pytest.mark.parametrize("codegen", ("c", "llvm"))
@pytest.mark.parametrize("lanes", (4, 8))
def test_vector_bit_casts(codegen, lanes):
    """The value rule's vector form (a vector cast in C, a vector bitcast in
    LLVM), against the interpreter: int32 bits exact, NaNs where it has them."""
    from aot.testing.kernels import compare_with_interpreter, single_op_graph
    rng = np.random.default_rng(1)
    bits = rng.integers(-2**31, 2**31, (3, 16), dtype=np.int64).astype(np.int32)
    bits[0, :4] = np.array([0x7FC00001, 0x7FA00000, -0x80000000, 1], np.int64).astype(np.int32)
    cases = {
        "f32_to_i32": (single_op_graph("BitCast", [((3, 16), "float32")], {"to": T.INT32},
                                       opset=26), {"x0": bits.view(np.float32)}),
        "i32_to_f32": (single_op_graph("BitCast", [((3, 16), "int32")], {"to": T.FLOAT},
                                       opset=26), {"x0": bits}),
        "u32_to_i32": (single_op_graph("BitCast", [((3, 16), "uint32")], {"to": T.INT32},
                                       opset=26), {"x0": bits.view(np.uint32)}),
    }
    assert compare_with_interpreter(cases, lanes=lanes, codegen=codegen) == dict.fromkeys(cases)
