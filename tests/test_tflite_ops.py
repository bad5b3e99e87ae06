"""TFLite ops of the TFLite Micro op set, float16 and sparse weights, on
single-op models built by aot.testing_tflite: int8 bit-exact with
tflite-micro (TFLite's reference kernels), float32 against LiteRT."""
from __future__ import annotations

import numpy as np
import pytest

import aot
from aot.deploy.reference import litert
from aot.errors import ModelError
from aot.frontend.tflite import import_tflite
from aot.frontend.tflite_sparse import SparseLevel, SparseSpec, densify
from aot.testing_tflite import DENSE, SPARSE_CSR, TFLiteBuilder, sparsify


def _ours(data: bytes, xs):
    g = aot.optimize(import_tflite(data, "op"))
    out = aot.interpret(g, dict(zip(g.inputs, xs)))
    return [out[o] for o in g.outputs]


def _litert(tmp_path, data: bytes, xs):
    path = tmp_path / "op.tflite"
    path.write_bytes(data)
    return litert(path, import_tflite(data, "op"), xs)


# ------------------------------------------------------- float16 and sparse weights

def _sparse_weight(rng, shape, zero_fraction=0.6):
    w = rng.standard_normal(shape).astype(np.float16)
    w[rng.random(shape) < zero_fraction] = 0
    return w


def _fc_with_weight(w_dense, values, sparsity, densify_op=True):
    m = TFLiteBuilder()
    x = m.tensor("x", [3, w_dense.shape[1]], "float32")
    ws = m.tensor("w_f16", w_dense.shape, "float16", data=values, sparsity=sparsity)
    wf = m.tensor("w", w_dense.shape, "float32")
    y = m.tensor("y", [3, w_dense.shape[0]], "float32")
    if densify_op:
        wd = m.tensor("w_f16_dense", w_dense.shape, "float16")
        m.op("DENSIFY", [ws], [wd])
        ws = wd
    m.op("DEQUANTIZE", [ws], [wf])
    m.op("FULLY_CONNECTED", [x, wf, -1], [y], "FullyConnectedOptions")
    return m.build([x], [y])


@pytest.mark.parametrize("formats, block_map, block_size", [
    ([DENSE, SPARSE_CSR, DENSE], [1], [4]),          # the converter's 1x4 blocks
    ([DENSE, SPARSE_CSR], [], []),                    # plain CSR
    ([SPARSE_CSR, SPARSE_CSR], [], []),               # both dims compressed
])
def test_sparse_float16_fc_weight_against_litert(tmp_path, formats, block_map, block_size):
    rng = np.random.default_rng(1)
    w = _sparse_weight(rng, (8, 16))
    w[:, 4:8] = 0      # a whole empty block
    w[5] = 0           # an empty row
    values, sp = sparsify(w, formats, block_map, block_size)
    assert values.size < w.size
    data = _fc_with_weight(w, values, sp)
    g = import_tflite(data, "op")
    assert not [n for n in g.nodes if n.op == "tfl.dequantize"]   # folded at import
    x = rng.standard_normal((3, 16)).astype(np.float32)
    ours = _ours(data, [x])[0]
    np.testing.assert_allclose(ours, _litert(tmp_path, data, [x])[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours, x @ w.astype(np.float32).T, rtol=1e-5, atol=1e-5)


def test_sparse_float16_conv_weight_against_litert(tmp_path):
    rng = np.random.default_rng(2)
    w = _sparse_weight(rng, (4, 3, 3, 2))
    values, sp = sparsify(w, [DENSE, SPARSE_CSR, SPARSE_CSR, DENSE])
    m = TFLiteBuilder()
    x = m.tensor("x", [1, 6, 5, 2], "float32")
    ws = m.tensor("w_f16", w.shape, "float16", data=values, sparsity=sp)
    wd = m.tensor("w_f16_dense", w.shape, "float16")
    wf = m.tensor("w", w.shape, "float32")
    b = m.const("b", rng.standard_normal(4), "float32")
    y = m.tensor("y", [1, 6, 5, 4], "float32")
    m.op("DENSIFY", [ws], [wd])
    m.op("DEQUANTIZE", [wd], [wf])
    m.op("CONV_2D", [x, wf, b], [y], "Conv2DOptions", Padding=0, StrideH=1, StrideW=1)
    data = m.build([x], [y])
    xs = rng.standard_normal((1, 6, 5, 2)).astype(np.float32)
    np.testing.assert_allclose(_ours(data, [xs])[0], _litert(tmp_path, data, [xs])[0],
                               rtol=1e-5, atol=1e-5)


def test_sparse_weight_without_densify_op_imports():
    # the issue's model: a sparse float16 weight read as if dense ("buffer has
    # 154 bytes, ... needs 512")
    rng = np.random.default_rng(3)
    w = _sparse_weight(rng, (16, 16), 0.8)
    values, sp = sparsify(w, [DENSE, SPARSE_CSR])
    x = rng.standard_normal((3, 16)).astype(np.float32)
    ours = _ours(_fc_with_weight(w, values, sp, densify_op=False), [x])[0]
    np.testing.assert_allclose(ours, x @ w.astype(np.float32).T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("order", [(1, 0, 2), (0, 1, 2), (1, 2, 0)])
def test_densify_inverts_sparsify_in_any_traversal_order(order):
    rng = np.random.default_rng(4)
    w = _sparse_weight(rng, (6, 8)).astype(np.float32)
    formats = [DENSE if dim == 2 else SPARSE_CSR for dim in order]   # block dims are dense
    values, sp = sparsify(w, formats, [1], [2], order)
    levels = tuple(SparseLevel(DENSE, lv[1]) if lv[0] == "dense" else
                   SparseLevel(SPARSE_CSR, 0, lv[1], lv[2]) for lv in sp.levels)
    spec = SparseSpec(sp.traversal_order, sp.block_map, levels)
    np.testing.assert_array_equal(densify(values, spec, w.shape, "w"), w)


@pytest.mark.parametrize("break_it, message", [
    (lambda v, s: (v[:-1], s), "addresses"),
    (lambda v, s: (v, SparseSpec(s.traversal_order, s.block_map, s.levels[:1])), "traversal"),
    (lambda v, s: (v, SparseSpec(s.traversal_order, s.block_map,
                                 (s.levels[0], SparseLevel(SPARSE_CSR, 0, (0, 99), (0,))))),
     "corrupt sparse"),
])
def test_corrupt_sparsity_is_one_line_model_error(break_it, message):
    w = np.eye(4, dtype=np.float32)
    values, sp = sparsify(w, [DENSE, SPARSE_CSR])
    spec = SparseSpec(sp.traversal_order, sp.block_map,
                      (SparseLevel(DENSE, 4), SparseLevel(SPARSE_CSR, 0, *sp.levels[1][1:])))
    values, spec = break_it(values, spec)
    with pytest.raises(ModelError, match=message) as e:
        densify(values, spec, w.shape, "w")
    assert "\n" not in str(e.value) and "'w'" in str(e.value)
