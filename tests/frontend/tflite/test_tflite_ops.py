"""TFLite ops of the TFLite Micro op set, float16 and sparse weights, on
single-op models built by aot.testing.tflite_builder: int8 bit-exact with
tflite-micro (TFLite's reference kernels), float32 against LiteRT."""
from __future__ import annotations

import numpy as np
import pytest

import aot
from aot.check.reference import litert
from aot.errors import ModelError, UnsupportedError
from aot.frontend.tflite.importer import import_tflite
from aot.frontend.tflite.sparse import SparseLevel, SparseSpec, densify
from aot.testing.tflite_builder import DENSE, SPARSE_CSR, TFLiteBuilder, sparsify
from support.tflite_op_cases import (CASES, S, X, Y, _model, _ours, _ours_graph, _q, _random,
                                     _tflm_outputs)


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
    # a model seen in the wild: a sparse float16 weight read as if dense ("buffer has
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


# ------------------------------------------------------------ single-op models

@pytest.mark.parametrize("s_in, zp_in, s_out, zp_out", [
    (0.05, 3, 0.07, -5), (0.1, -128, 0.02, 127), (0.002, 0, 0.003, -20), (0.5, 10, 0.4, -100),
    (0.03, -7, 0.0312, 0), (1.7, 0, 0.25, 0)])
def test_int8_hard_swish_every_input_against_tflm(s_in, zp_in, s_out, zp_out):
    """All 256 inputs at once, across scales whose relu-ish shift is left, none or right."""
    data = _model("HARD_SWISH", [X((256,), "int8", s_in, zp_in)],
                  [Y((256,), "int8", s_out, zp_out)])
    x = np.arange(-128, 128, dtype=np.int8)
    np.testing.assert_array_equal(_ours(data, [x])[0], _tflm_outputs(data, [x])[0])


@pytest.mark.parametrize("s_in, zp_in, s_out, zp_out", [
    (0.05, -128, 0.1, -128), (0.002, -128, 0.5, -100), (0.3, -128, 0.01, 0),
    (1.0, -128, 1 / 16, -128), (0.02, 10, 0.05, -3)])
def test_int8_rsqrt_every_input_against_tflm(s_in, zp_in, s_out, zp_out):
    """All inputs at or above the zero point (TFLM fails the invoke below it)."""
    data = _model("RSQRT", [X((128 - zp_in,), "int8", s_in, zp_in)],
                  [Y((128 - zp_in,), "int8", s_out, zp_out)])
    x = np.arange(zp_in, 128, dtype=np.int8)
    np.testing.assert_array_equal(_ours(data, [x])[0], _tflm_outputs(data, [x])[0])


def test_int8_l2_normalization_long_rows_generated_code():
    """Sums of squares past 2^29 take the inverse square root's first scaling
    step (tflite-micro's Python arena cannot hold such rows: the generated
    code against the interpreter, which is bit-exact with it on short rows)."""
    from aot.testing.kernels import compare_with_interpreter
    data = _model("L2_NORMALIZATION", [X((3, 8300), "int8", 0.05, -128)],
                  [Y((3, 8300), "int8", 1 / 128, 0)], "L2NormOptions")
    x = np.full((3, 8300), 127, np.int8)
    x[1, ::2] = -128          # a row of half the energy, under 2^29
    x[2] = -128               # all at the zero point: a zero norm
    x[0, :5] = [-128, -1, 0, 60, 126]
    assert int(((x[0].astype(np.int64) + 128) ** 2).sum()) >= 1 << 29
    g = _ours_graph(data)
    assert compare_with_interpreter({"long": (g, {g.inputs[0]: x})}) == {"long": None}


@pytest.mark.parametrize("s1, z1, s2, z2, so, zo", [
    (0.05, 3, 0.04, -7, 0.1, 2), (0.1, -128, 0.02, 0, 0.5, -3), (0.01, 0, 0.2, 10, 0.003, 0)])
def test_int8_div_against_tflm(s1, z1, s2, z2, so, zo):
    """Every dividend against random nonzero divisors, bit-exact with
    tflite-micro where its arithmetic is defined (it shifts a dividend of 0 or
    ±1 by 32 bits or more over a large divisor: undefined in C; aot rounds
    the quotient to 0 there); the generated code equal to the interpreter."""
    from aot.testing.kernels import compare_with_interpreter
    from aot.ops.quant.tflite_int8 import (count_leading_sign_bits, div_multiplier,
                                     reciprocal_table)
    data = _model("DIV", [X((256,), "int8", s1, z1), X((256,), "int8", s2, z2, "b")],
                  [Y((256,), "int8", so, zo)], "DivOptions")
    g = _ours_graph(data)
    x1 = np.arange(-128, 128, dtype=np.int8)
    rng = np.random.default_rng(3)
    _, e = div_multiplier(s1, s2, so, None)
    for _ in range(10):
        x2 = rng.integers(-128, 128, 256).astype(np.int8)
        x2[x2 == z2] = z2 + 1
        ours, want = _ours(data, [x1, x2])[0], _tflm_outputs(data, [x1, x2])[0]
        a = (x1.astype(np.int64) - z1) * np.sign(x2.astype(np.int64) - z2)
        right = reciprocal_table()[1][np.abs(x2.astype(np.int64) - z2)] + \
            count_leading_sign_bits(a) - e
        defined = right < 32
        assert defined.sum() > 200
        np.testing.assert_array_equal(ours[defined], want[defined])
        np.testing.assert_array_equal(ours[~defined & (a == 0)], zo)
        assert compare_with_interpreter({"div": (g, dict(zip(g.inputs, [x1, x2])))}) == \
            {"div": None}


@pytest.mark.parametrize("s_in, zp_in, s_out, zp_out", [
    (0.05, 3, 0.07, -5), (0.1, -128, 0.02, 127), (0.002, 0, 0.003, -20), (0.5, 10, 0.4, -100),
    (0.03, -7, 0.0312, 0)])
def test_int8_elu_every_input_against_tflm(s_in, zp_in, s_out, zp_out):
    data = _model("ELU", [X((256,), "int8", s_in, zp_in)], [Y((256,), "int8", s_out, zp_out)])
    x = np.arange(-128, 128, dtype=np.int8)
    np.testing.assert_array_equal(_ours(data, [x])[0], _tflm_outputs(data, [x])[0])


@pytest.mark.parametrize("s_in, zp_in", [(0.05, 3), (0.002, -128), (0.1, 127), (0.0625, 0),
                                         (0.013, -40)])
def test_int8_tanh_every_input_against_tflm(s_in, zp_in):
    data = _model("TANH", [X((256,), "int8", s_in, zp_in)], [Y((256,), "int8", 1 / 128, 0)])
    x = np.arange(-128, 128, dtype=np.int8)
    np.testing.assert_array_equal(_ours(data, [x])[0], _tflm_outputs(data, [x])[0])


def _inputs(data: bytes, seed: int = 0):
    g = import_tflite(data, "op")
    rng = np.random.default_rng(seed)
    return [_random(rng, g.types[i].shape, g.types[i].dtype) for i in g.inputs]


# tflite-micro never sets SpaceToBatchParams.output_offset, so its int8
# padding is whatever the persistent buffer held (111 here); LiteRT pads with
# the output zero point, as the op means.
LITERT_FOR_INT8 = {"SPACE_TO_BATCH_ND-int8"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_against_reference_runtime(name, tmp_path):
    """int8: bit-exact with tflite-micro; float32: LiteRT within 1e-5."""
    fn, dtype = CASES[name]
    data = fn(dtype)
    for seed in (0, 1):
        xs = _inputs(data, seed)
        ours = _ours(data, xs)
        tflm = dtype == "int8" and name not in LITERT_FOR_INT8
        want = _tflm_outputs(data, xs) if tflm else _litert(tmp_path, data, xs)
        assert len(ours) == len(want)
        for got, ref in zip(ours, want):
            assert got.dtype == ref.dtype and got.shape == ref.shape, (got.dtype, ref.dtype)
            if got.dtype.kind == "f":
                np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
            else:
                np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("lanes", [1, 4])
def test_generated_code_matches_the_interpreter(lanes):
    """Every case's kernels, compiled once, bit-exact (int8) or within 1e-5
    (float) with aot.interpret; lanes 4: the single value op vectorized."""
    from aot.testing.kernels import compare_with_interpreter
    cases = {}
    for name, (fn, dtype) in sorted(CASES.items()):
        g = _ours_graph(fn(dtype))
        if lanes > 1 and not (len(g.nodes) == 1 and g.nodes[0].op.startswith("tfl.")):
            continue
        cases[name] = (g, dict(zip(g.inputs, _inputs(fn(dtype)))))
    result = compare_with_interpreter(cases, lanes=lanes, rtol=1e-5, atol=1e-5)
    assert {k: v for k, v in result.items() if v} == {}


# ------------------------------------------------- ops TFLM has no int8 kernel for

def _tflm_raw(data: bytes, seed: int = 0):
    """Runs the model in tflite-micro alone (random inputs from its own tensor types)."""
    import tflite
    from tflite_micro.python.tflite_micro import runtime
    sg = tflite.Model.GetRootAsModel(data, 0).Subgraphs(0)
    interp = runtime.Interpreter.from_bytes(data)
    rng = np.random.default_rng(seed)
    types = {0: "float32", 2: "int32", 6: "bool", 9: "int8"}
    for i in range(sg.InputsLength()):
        t = sg.Tensors(sg.Inputs(i))
        interp.set_input(_random(rng, tuple(t.ShapeAsNumpy()), types[t.Type()]), i)
    interp.invoke()


_I8 = "int8"
NO_TFLM_INT8 = {
    "CEIL": lambda: _model("CEIL", [X(S, _I8)], [Y(S, _I8)]),
    "COS": lambda: _model("COS", [X(S, _I8)], [Y(S, _I8)]),
    "EXP": lambda: _model("EXP", [X(S, _I8)], [Y(S, _I8)]),
    "FLOOR": lambda: _model("FLOOR", [X(S, _I8)], [Y(S, _I8)]),
    "FLOOR_DIV": lambda: _model("FLOOR_DIV", [X(S, _I8), X(S, _I8, name="b")], [Y(S, _I8)]),
    "FLOOR_MOD": lambda: _model("FLOOR_MOD", [X(S, _I8), X(S, _I8, name="b")], [Y(S, _I8)]),
    "L2_POOL_2D": lambda: _model("L2_POOL_2D", [X((1, 4, 4, 2), _I8)], [Y((1, 2, 2, 2), _I8)],
                                 "Pool2DOptions", Padding=1, StrideH=2, StrideW=2,
                                 FilterHeight=2, FilterWidth=2),
    "LOG": lambda: _model("LOG", [X(S, _I8)], [Y(S, _I8)]),
    "NEG": lambda: _model("NEG", [X(S, _I8)], [Y(S, _I8)]),
    "ROUND": lambda: _model("ROUND", [X(S, _I8)], [Y(S, _I8)]),
    "SIN": lambda: _model("SIN", [X(S, _I8)], [Y(S, _I8)]),
    "SQRT": lambda: _model("SQRT", [X(S, _I8)], [Y(S, _I8)]),
    "SQUARE": lambda: _model("SQUARE", [X(S, _I8)], [Y(S, _I8)]),
}


@pytest.mark.parametrize("op", sorted(NO_TFLM_INT8))
def test_tflm_has_no_int8_kernel(op):
    """The docs table's "no int8 kernel in tflite-micro": it refuses the model."""
    with pytest.raises(RuntimeError):
        _tflm_raw(NO_TFLM_INT8[op]())


# ------------------------------------------------------------ the docs table

def _tflm_builtins() -> set[str]:
    """The builtin ops the installed tflite-micro registers (its Register_* kernels)."""
    import re
    from pathlib import Path

    import tflite
    from tflite_micro.python.tflite_micro import runtime
    lib = next(Path(runtime.__file__).parent.glob("_runtime*.so"))
    # mangled C++ names end the op's name with "E" (end of the nested name)
    found = {m.decode().removesuffix("E")
             for m in re.findall(rb"Register_([A-Z0-9_]+)", lib.read_bytes())}
    return found & {k for k in vars(tflite.BuiltinOperator) if not k.startswith("_")}


def _docs_table() -> dict[str, tuple[str, str, str]]:
    from pathlib import Path
    text = (Path(__file__).resolve().parents[3] / "docs" / "ops.md").read_text()
    section = text.split("## The TFLite Micro op set", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`"):   # the int16 column: test_tflite_int16
            rows[cells[0].strip("`")] = (cells[1], cells[2], cells[4])
    return rows


def test_tflm_op_table_matches_the_importer():
    import re
    from pathlib import Path

    from aot.frontend.tflite.importer import _Builder
    table = _docs_table()
    assert set(table) == _tflm_builtins()
    # the table names test files, which live in tests/'s folders
    by_name = {t.name: t for t in Path(__file__).resolve().parents[2].rglob("test_*.py")}
    for op, (float_col, int8_col, tested) in table.items():
        names = re.findall(r"`([^`]+)`", tested)
        files = [n for n in names if n.endswith(".py")]
        functions = [n for n in names if n.startswith("test_") and n not in files]
        for fn in functions:   # each named test exists in one of the named files
            assert any(f"def {fn}(" in by_name[f].read_text() for f in files), (op, fn)
        for col, dtypes in ((float_col, ("float32", "bool")), (int8_col, ("int8",))):
            claimed = col.startswith(("yes", "bool", "float", "int"))
            has_case = any(f"{n}-{d}" in CASES for n in names for d in dtypes)
            if claimed:
                assert has_case or functions or "folded" in col, (op, col)
            elif col.startswith("— (no int8 kernel in tflite-micro)"):
                assert op in NO_TFLM_INT8 and "test_tflm_has_no_int8_kernel" in tested, op
            else:
                assert col in ("not supported yet", "—", "— (bool op)"), (op, col)
                assert not has_case, (op, col)
        supported = any(col.startswith(("yes", "bool", "float", "int"))
                        for col in (float_col, int8_col))
        assert hasattr(_Builder, f"_op_{op}") == supported, op


# -------------------------------------------------------------------- SVDF

def _svdf_model(memory: int, rank: int, bias: bool, act: int, batch=2, inputs=5, units=3):
    rng = np.random.default_rng(memory * 10 + rank)
    filters = units * rank
    m = TFLiteBuilder()
    x = m.tensor("x", (batch, inputs), "float32")
    wf = m.const("weights_feature", rng.standard_normal((filters, inputs)), "float32")
    wt = m.const("weights_time", rng.standard_normal((filters, memory)), "float32")
    b = m.const("bias", rng.standard_normal(units), "float32") if bias else -1
    state = m.tensor("state", (batch, filters * memory), "float32", variable=True)
    y = m.tensor("y", (batch, units), "float32")
    m.op("SVDF", [x, wf, wt, b, state], [y], "SVDFOptions", Rank=rank,
         FusedActivationFunction=act)
    return m.build([x], [y])


@pytest.mark.parametrize("memory, rank, bias, act", [(4, 1, True, 0), (10, 2, False, 1),
                                                     (1, 1, True, 3), (3, 3, True, 0)])
def test_float_svdf_state_over_invocations_against_litert(memory, rank, bias, act):
    """The state shifts through five invocations, as in LiteRT (and on the device:
    the generated code too)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    data = _svdf_model(memory, rank, bias, act)
    g = _ours_graph(data)
    assert set(g.updates) == set(g.variables) == {"state"}
    it = Interpreter(model_content=data, num_threads=1, experimental_op_resolver_type=(
        OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
    it.allocate_tensors()
    rng = np.random.default_rng(7)
    state: dict = {}
    for step in range(5):
        x = rng.standard_normal((2, 5)).astype(np.float32)
        ours = aot.interpret(g, {g.inputs[0]: x}, state)[g.outputs[0]]
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        want = it.get_tensor(it.get_output_details()[0]["index"])
        np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-5, err_msg=f"step {step}")


# ------------------------------------------------------- packaged on a board

def _int8_chain() -> bytes:
    """CONV_2D -> LEAKY_RELU -> RESIZE_BILINEAR -> HARD_SWISH -> TANH -> PRELU -> SUM."""
    rng = np.random.default_rng(0)
    m = TFLiteBuilder()

    def q(s, z):
        return dict(scale=[s], zp=[z])
    x = m.tensor("x", (1, 6, 6, 3), "int8", **q(0.05, 3))
    w = m.const("w", rng.integers(-127, 128, (4, 3, 3, 3)), "int8",
                scale=list(rng.uniform(0.005, 0.02, 4)), zp=[0] * 4, qdim=0)
    conv = m.tensor("conv", (1, 6, 6, 4), "int8", **q(0.1, -2))
    m.op("CONV_2D", [x, w, -1], [conv], "Conv2DOptions", Padding=0, StrideH=1, StrideW=1)
    leaky = m.tensor("leaky", (1, 6, 6, 4), "int8", **q(0.08, -10))
    m.op("LEAKY_RELU", [conv], [leaky], "LeakyReluOptions", Alpha=0.1)
    resized = m.tensor("resized", (1, 9, 9, 4), "int8", **q(0.08, -10))
    m.op("RESIZE_BILINEAR", [leaky, m.const("size", [9, 9], "int32")], [resized],
         "ResizeBilinearOptions", HalfPixelCenters=True)
    hswish = m.tensor("hswish", (1, 9, 9, 4), "int8", **q(0.06, -20))
    m.op("HARD_SWISH", [resized], [hswish])
    tanh = m.tensor("tanh", (1, 9, 9, 4), "int8", **q(1 / 128, 0))
    m.op("TANH", [hswish], [tanh])
    prelu = m.tensor("prelu", (1, 9, 9, 4), "int8", **q(0.01, 0))
    m.op("PRELU", [tanh, m.const("alpha", [1, 3, -2, 5], "int8", **q(0.1, 0))], [prelu])
    y = m.tensor("y", (1, 4), "int8", **q(0.005, 1))
    m.op("SUM", [prelu, m.const("axes", [1, 2], "int32")], [y], "ReducerOptions")
    return m.build([x], [y])


@pytest.mark.parametrize("board, count", [("host", 20), ("mps2-an386", 5)])
def test_int8_chain_packaged_bit_exact_with_tflm(tmp_path, board, count):
    path = tmp_path / "chain.tflite"
    path.write_bytes(_int8_chain())
    report = aot.verify(path, board=board, count=count)
    assert report["ok"] and report["reference"] == "tflite-micro"
    assert report["outputs"][0]["max_abs_err"] == 0


def _int8_svdf_model(memory: int, rank: int, bias: bool, batch=2, inputs=5, units=3):
    rng = np.random.default_rng(memory * 10 + rank)
    filters = units * rank
    m = TFLiteBuilder()
    x = m.tensor("x", (batch, inputs), "int8", scale=[0.05], zp=[4])
    wf = m.const("weights_feature", rng.integers(-127, 128, (filters, inputs)), "int8",
                 scale=[0.01], zp=[0])
    wt = m.const("weights_time", rng.integers(-3000, 3000, (filters, memory)), "int16",
                 scale=[0.0005], zp=[0])
    b = m.const("bias", rng.integers(-5000, 5000, units), "int32", scale=[3e-6],
                zp=[0]) if bias else -1
    state = m.tensor("state", (batch, filters * memory), "int16", scale=[0.004], zp=[0],
                     variable=True)
    y = m.tensor("y", (batch, units), "int8", scale=[0.03], zp=[-3])
    m.op("SVDF", [x, wf, wt, b, state], [y], "SVDFOptions", Rank=rank)
    return m.build([x], [y])


@pytest.mark.parametrize("memory, rank", [(4, 1), (10, 2), (1, 1), (3, 3)])
def test_int8_svdf_state_over_invocations_against_tflm(memory, rank):
    """Eight invocations, the int16 state carried, bit-exact with tflite-micro
    (which crashes on an integer SVDF without bias: that case is checked
    against the interpreter only, by the generated-code test below)."""
    bias = True
    from tflite_micro.python.tflite_micro import runtime
    data = _int8_svdf_model(memory, rank, bias)
    g = _ours_graph(data)
    assert set(g.updates) == set(g.variables) == {"state"}
    interp = runtime.Interpreter.from_bytes(data)
    rng = np.random.default_rng(8)
    state: dict = {}
    for step in range(8):
        x = rng.integers(-128, 128, (2, 5)).astype(np.int8)
        ours = aot.interpret(g, {g.inputs[0]: x}, state)[g.outputs[0]]
        interp.set_input(x, 0)
        interp.invoke()
        np.testing.assert_array_equal(ours, interp.get_output(0), err_msg=f"step {step}")


def test_int8_svdf_generated_code():
    from aot.testing.kernels import compare_with_interpreter
    cases = {}
    for memory, rank, bias in ((4, 1, True), (10, 2, False)):
        g = _ours_graph(_int8_svdf_model(memory, rank, bias))
        x = np.random.default_rng(memory).integers(-128, 128, (2, 5)).astype(np.int8)
        cases[f"svdf_{memory}_{rank}_{bias}"] = (g, {g.inputs[0]: x})
    assert set(compare_with_interpreter(cases).values()) == {None}


# ---------------------------------------------------------------------- IF

def _if_model(dtype: str, cond_value=None) -> bytes:
    """IF(cond, x): then x * c (MUL), else LEAKY_RELU(x); cond an input or a constant."""
    qx, qy = _q(dtype), _q(dtype, 0.07, -5)
    then = TFLiteBuilder()
    tx = then.tensor("x", S, dtype, **qx)
    ty = then.tensor("y", S, dtype, **qy)
    then.op("MUL", [tx, then.const("c", 1.5 if dtype == "float32" else 60, dtype, **qx)], [ty],
            "MulOptions")
    other = TFLiteBuilder()
    ex = other.tensor("x", S, dtype, **qx)
    ey = other.tensor("y", S, dtype, **qy)
    other.op("LEAKY_RELU", [ex], [ey], "LeakyReluOptions", Alpha=0.3)
    m = TFLiteBuilder()
    if cond_value is None:
        cond = m.tensor("cond", (1,), "bool")
    else:
        cond = m.const("cond", [cond_value], "bool")
    x = m.tensor("x", S, dtype, **qx)
    y = m.tensor("y", S, dtype, **qy)
    then_k, else_k = m.subgraph(then, [tx], [ty]), m.subgraph(other, [ex], [ey])
    m.op("IF", [cond, x], [y], "IfOptions", ThenSubgraphIndex=then_k, ElseSubgraphIndex=else_k)
    return m.build([cond, x] if cond_value is None else [x], [y])


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_if_run_time_condition_against_reference(dtype, tmp_path):
    """Both branches taken in turn: int8 bit-exact with tflite-micro, float against LiteRT."""
    data = _if_model(dtype)
    g = _ours_graph(data)
    rng = np.random.default_rng(2)
    for taken in (True, False, True):
        xs = [np.array([taken]), _random(rng, S, dtype)]
        ours = _ours(data, xs)[0]
        want = _tflm_outputs(data, xs)[0] if dtype == "int8" else _litert(tmp_path, data, xs)[0]
        if dtype == "int8":
            np.testing.assert_array_equal(ours, want)
        else:
            np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-5)
    from aot.testing.kernels import compare_with_interpreter
    assert compare_with_interpreter({"if": (g, dict(zip(g.inputs, xs)))}) == {"if": None}


@pytest.mark.parametrize("cond", [True, False])
def test_if_constant_condition_inlines_the_taken_branch(cond):
    data = _if_model("int8", cond)
    g = import_tflite(data, "op")
    ops = {n.op for n in g.nodes}
    assert ("tfl.mul" in ops) == cond and ("tfl.leaky_relu" in ops) != cond and "Where" not in ops
    x = _random(np.random.default_rng(1), S, "int8")
    np.testing.assert_array_equal(_ours(data, [x])[0], _tflm_outputs(data, [x])[0])


# ------------------------------------------------------------------- WHILE

def _while_model(dtype: str, limit: int = 3, data_cond: bool = False) -> bytes:
    """WHILE(i < limit): i += 1, x = x * c (MUL). data_cond: the condition
    reads x instead (a run-time condition)."""
    qx = _q(dtype)
    cond = TFLiteBuilder()
    ci = cond.tensor("i", (), "int32")
    cx = cond.tensor("x", S, dtype, **qx)
    flag = cond.tensor("flag", (), "bool")
    if data_cond:
        total = cond.tensor("total", (), dtype, **qx)
        cond.op("SUM", [cx, cond.const("axes", [0, 1, 2, 3], "int32")], [total],
                "ReducerOptions")
        cond.op("LESS", [total, cond.const("bound", 0.0, dtype)], [flag])
    else:
        cond.op("LESS", [ci, cond.const("limit", limit, "int32")], [flag])
    body = TFLiteBuilder()
    bi = body.tensor("i", (), "int32")
    bx = body.tensor("x", S, dtype, **qx)
    bi2 = body.tensor("i_next", (), "int32")
    bx2 = body.tensor("x_next", S, dtype, **qx)
    body.op("ADD", [bi, body.const("one", 1, "int32")], [bi2], "AddOptions")
    body.op("MUL", [bx, body.const("c", 0.9 if dtype == "float32" else 110, dtype, **qx)],
            [bx2], "MulOptions")
    m = TFLiteBuilder()
    i0 = m.const("i0", 0, "int32")
    x = m.tensor("x", S, dtype, **qx)
    i_out = m.tensor("i_out", (), "int32")
    y = m.tensor("y", S, dtype, **qx)
    cond_k = m.subgraph(cond, [ci, cx], [flag])
    body_k = m.subgraph(body, [bi, bx], [bi2, bx2])
    m.op("WHILE", [i0, x], [i_out, y], "WhileOptions", CondSubgraphIndex=cond_k,
         BodySubgraphIndex=body_k)
    return m.build([x], [y])


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_while_with_a_counter_is_unrolled(dtype, tmp_path):
    data = _while_model(dtype)
    g = import_tflite(data, "op")
    assert sum(n.op in ("Mul", "tfl.mul") for n in g.nodes) == 3
    x = _random(np.random.default_rng(4), S, dtype)
    ours = _ours(data, [x])[0]
    if dtype == "int8":
        np.testing.assert_array_equal(ours, _tflm_outputs(data, [x])[0])
    else:
        np.testing.assert_allclose(ours, _litert(tmp_path, data, [x])[0], rtol=1e-5, atol=1e-5)
    from aot.testing.kernels import compare_with_interpreter
    opt = _ours_graph(data)
    assert compare_with_interpreter({"while": (opt, {opt.inputs[0]: x})}) == {"while": None}


def test_while_with_a_run_time_condition_is_refused_in_one_line():
    with pytest.raises(UnsupportedError, match="WHILE whose condition depends on run-time") as e:
        import_tflite(_while_model("float32", data_cond=True), "op")
    assert "\n" not in str(e.value) and "WHILE node 'i_out'" in str(e.value)


@pytest.mark.parametrize("op, scale, zp, want", [
    ("LOG_SOFTMAX", 0.1, 127, "scale 16/256 and zero point 127"),
    ("L2_NORMALIZATION", 1 / 128, 5, "scale 1/128 and zero point 0")])
def test_an_int8_output_off_tflms_fixed_scale_is_refused(op, scale, zp, want):
    data = _model(op, [X((2, 8), "int8")], [Y((2, 8), "int8", scale, zp)])
    with pytest.raises(UnsupportedError, match=f"int8 output must have {want} \\(TFLM's\\)"):
        import_tflite(data, "op")
