"""float16 tensors: imported, interpreted (ONNX Runtime's CPU arithmetic:
float32 compute, rounded at each op's output) and compiled (halves stored
as 16 bits, computed in float32: aot/lower/tir_passes/float16.py; the conversions the C
and LLVM backends print)."""
from __future__ import annotations

import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

from aot.interp import interpret
from aot.ir.graph import Graph, TensorType
from aot.ir.tir import (Buffer, BufferKind, Cast, Decl, DType, For, ForKind, Load, PrimFunc, Store,
                        Var, dtype_of, stmt_exprs, walk_expr, walk_stmt)
from aot.lower import lower_graph
from aot.lower.driver import Arg, Kernel
from aot.testing.kernels import (build_and_run, compile_kernels, host_target, run_kernels,
                                 single_op_graph)
from aot.lower.tir_passes import run_passes

CODEGENS = ("c", "llvm")


def _floats_to_round() -> np.ndarray:
    """float32 values around every rounding decision a half conversion makes:
    each half's neighbourhood and midpoints (ties), subnormals, overflow,
    infinities, NaNs with payloads, signed zeros, plus random bit patterns."""
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    base = halves.astype(np.float32).view(np.uint32)
    base = base[np.isfinite(halves)]
    # float32 bits at and around a half, and at and around the midpoint to the next one
    offsets = np.array([0, 1, -1, 0xfff, 0x1000, 0x1001, 0x1fff, 0x2000], dtype=np.int64)
    near = (base.astype(np.int64)[:, None] + offsets[None, :]).reshape(-1)
    near = near[(near >= 0) & (near < 1 << 32)].astype(np.uint32)
    rng = np.random.default_rng(16)
    special = np.array([0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001, 0x7fbfffff,
                        0x477fefff, 0x477ff000, 0x477fffff, 0x33000000, 0x33000001, 0x32ffffff,
                        0x80000000, 0x00000001, 0x387fc000, 0x387fe000], dtype=np.uint32)
    bits = np.concatenate([near, special, rng.integers(0, 1 << 32, 200_000, dtype=np.uint32)])
    n = -(-bits.size // 64) * 64                     # whole vectors of any lane count
    bits = np.concatenate([bits, np.zeros(n - bits.size, np.uint32)])
    return bits.view(np.float32)


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Bit for bit, except that any NaN matches any NaN of the same sign (quiet bit set)."""
    g = got.view(np.uint16 if got.dtype == np.float16 else np.uint32)
    w = want.view(g.dtype)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(np.signbit(got[nan]), np.signbit(want[nan]))
    bad = np.flatnonzero((g != w) & ~nan)
    k = bad[0] if bad.size else 0
    assert bad.size == 0, (f"{bad.size} differ, first at {want.reshape(-1)[k]!r}: got "
                           f"{hex(int(g.reshape(-1)[k]))}, want {hex(int(w.reshape(-1)[k]))}")


def _cast_kernel(src: str, dst: str, n: int, lanes: int) -> Kernel:
    """out[i] = (dst) in[i], `lanes` elements a step, through the TIR passes."""
    i = Var("i")
    inp = Buffer("in0", DType(src), (n,), BufferKind.INPUT)
    out = Buffer("out0", DType(dst), (n,), BufferKind.OUTPUT)
    body = For(i, n, Store(out, i, Cast(DType(dst, lanes), Load(inp, i, lanes))),
               ForKind.VECTORIZED if lanes > 1 else ForKind.SERIAL, step=lanes)
    func = run_passes(PrimFunc(f"cast_{src}_{dst}_{lanes}", (inp, out), body), host_target())
    return Kernel(func, (Arg("tensor", "x"), Arg("tensor", "y")), None)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_conversions_match_numpy_bit_for_bit(codegen):
    """Both directions, scalar and vector, C and LLVM: every half to float32
    exactly, and float32 to half rounded to nearest even (numpy's astype)."""
    floats = _floats_to_round()
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    kernels = [_cast_kernel(s, d, a.size, lanes)
               for s, d, a in (("float32", "float16", floats), ("float16", "float32", halves))
               for lanes in (1, 8)]
    lib, symbols = compile_kernels(kernels, codegen)
    for k in kernels:
        src = k.func.params[0]
        x = floats if src.dtype.scalar == "float32" else halves
        out = k.func.params[1].dtype.scalar
        g = Graph("cast", ("x",), ("y",), (), {"x": TensorType(x.shape, src.dtype.scalar),
                                               "y": TensorType(x.shape, out)}, {})
        got = run_kernels(lib, symbols, g, [k], {"x": x})["y"]
        with np.errstate(over="ignore"):        # float32 beyond 65504 -> inf, as meant
            _same_bits(got, x.astype(out))


# ---- a model as fp16 exporters write it ----------------------------------------------------

def _classifier(dtype: int, io: int) -> onnx.ModelProto:
    """A small image classifier in `dtype` (weights and compute) with inputs
    and outputs of type `io`: Conv, Relu, MaxPool, MatMul, Add, Softmax and,
    where io differs (onnxconverter-common's keep_io_types), Casts at the
    boundaries, as PyTorch's `.half()` export and the fp16 converters write."""
    rng = np.random.default_rng(11)
    np_t = helper.tensor_dtype_to_np_dtype(dtype)

    def init(name, shape, scale):
        return onnx.numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np_t),
                                            name)
    inits = [init("conv_w", (8, 3, 3, 3), 0.4), init("conv_b", (8,), 0.1),
             init("fc_w", (8 * 4 * 4, 10), 0.2), init("fc_b", (10,), 0.1),
             onnx.numpy_helper.from_array(np.array([1, -1], np.int64), "flat")]
    nodes = [helper.make_node("Conv", ["x16", "conv_w", "conv_b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Reshape", ["p", "flat"], ["f"]),
             helper.make_node("MatMul", ["f", "fc_w"], ["m"]),
             helper.make_node("Add", ["m", "fc_b"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["y16"], axis=-1)]
    if io != dtype:
        nodes = [helper.make_node("Cast", ["x"], ["x16"], to=dtype), *nodes,
                 helper.make_node("Cast", ["y16"], ["y"], to=io)]
    else:
        nodes = [helper.make_node("Identity", ["x"], ["x16"]), *nodes[:-1],
                 helper.make_node("Softmax", ["logits"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "classifier",
                          [helper.make_tensor_value_info("x", io, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", io, [1, 10])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


@pytest.fixture(scope="module")
def fp16_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("fp16")
    paths = {}
    for tag, dtype, io in (("fp16", T.FLOAT16, T.FLOAT16), ("keep_io", T.FLOAT16, T.FLOAT),
                           ("fp32", T.FLOAT, T.FLOAT)):
        paths[tag] = d / f"{tag}.onnx"
        onnx.save(_classifier(dtype, io), paths[tag])
    return paths


def _input(dtype) -> np.ndarray:
    return np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(dtype)


def test_interpreter_matches_onnxruntime(fp16_models):
    import aot
    for tag in ("fp16", "keep_io"):
        graph = aot.load(fp16_models[tag])
        io = np.float16 if tag == "fp16" else np.float32
        assert graph.types["x"].dtype == np.dtype(io).name
        assert {v.dtype.name for v in graph.constants.values()} >= {"float16"}
        x = _input(io)
        got = interpret(aot.optimize(graph), {"x": x})["y"]
        want = _ort(onnx.load(fp16_models[tag]), x)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                                   rtol=2e-3, atol=1e-4)


@pytest.mark.parametrize("board, codegen", [("host", "c"), ("host", "llvm"),
                                            ("qemu-aarch64", "c"), ("qemu-aarch64", "llvm"),
                                            ("mps3-an547", "c")])
def test_fp16_package_matches_onnxruntime(fp16_models, board, codegen, tmp_path):
    """Packaged and run on the board: halves in, halves out, 2-byte weights
    and activations (half the float32 model's arena and weights)."""
    import aot
    from aot.targets import get_board
    from aot.deploy import run_package
    sizes = {}
    # the keep_io_types form and the float32 twin's sizes: once, on the host in C
    full = (board, codegen) == ("host", "c")
    for tag in ("fp16", "keep_io", "fp32") if full else ("fp16",):
        info = aot.package(fp16_models[tag], board, codegen, out_dir=tmp_path / tag)
        sizes[tag] = info.summary()
        # the conversions are the package's own arithmetic: no compiler-runtime half calls
        symbols = subprocess.run(["nm", *map(str, (info.path / "lib").glob("*.a"))],
                                 capture_output=True, text=True, check=True).stdout
        assert "hf2" not in symbols          # __extendhfsf2, __truncsfhf2
        if tag == "fp32":
            continue
        x = _input(np.float16 if tag == "fp16" else np.float32)
        (got,) = run_package(info.path, get_board(board), [x]).outputs
        want = _ort(onnx.load(fp16_models[tag]), x)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                                   rtol=2e-3, atol=1e-4)
    if full:
        half, single = sizes["fp16"], sizes["fp32"]
        assert half["params_bytes"] <= single["params_bytes"] // 2 + 64
        assert half["arena_bytes"] <= single["arena_bytes"] // 2 + 64


# ---- the pass -------------------------------------------------------------------------------

def _half_graph(op: str, shapes, attrs=None, consts=()) -> Graph:
    return single_op_graph(op, [*((s, np.float16) for s in shapes), *consts], attrs)


def test_pass_leaves_halves_only_at_memory():
    """After the pipeline a kernel loads and stores halves and converts them;
    its locals (a reduction's accumulator) are float32; a data movement op
    copies the 16-bit values without converting them at all."""
    for graph in (_half_graph("ReduceSum", [(4, 64)], {"keepdims": 0},
                              [np.array([1], np.int64)]),
                  _half_graph("Softmax", [(3, 40)], {"axis": -1})):
        for k in lower_graph(graph, host_target()):
            for s in walk_stmt(k.func.body):
                if isinstance(s, Decl):
                    assert s.var.dtype.scalar != "float16"
                for e in (x for top in stmt_exprs(s) for x in walk_expr(top)):
                    if dtype_of(e).scalar == "float16":
                        assert isinstance(e, (Load, Cast)), e
    (k,) = lower_graph(_half_graph("Transpose", [(6, 10)], {"perm": [1, 0]}), host_target())
    assert not any(isinstance(e, Cast) for s in walk_stmt(k.func.body)
                   for top in stmt_exprs(s) for e in walk_expr(top))


# ---- interpreter: ONNX Runtime's CPU arithmetic ---------------------------------------------

def test_interpreter_computes_in_float32_and_rounds_each_output():
    rng = np.random.default_rng(5)
    x = (rng.random((2, 4096)) + 0.5).astype(np.float16)
    g = _half_graph("ReduceSum", [(2, 4096)], {"keepdims": 0}, [np.array([1], np.int64)])
    got = interpret(g, {"x0": x})["y0"]
    assert got.dtype == np.float16
    # float16 accumulation would stall near 2048 (its step there is 2)
    np.testing.assert_array_equal(got, x.astype(np.float32).sum(axis=1).astype(np.float16))
    a, b = (rng.standard_normal((3, 5)).astype(np.float16) for _ in range(2))
    got = interpret(_half_graph("Mul", [(3, 5), (3, 5)]), {"x0": a, "x1": b})["y0"]
    np.testing.assert_array_equal(got, (a.astype(np.float32) * b.astype(np.float32))
                                  .astype(np.float16))


def test_constant_folding_rounds_like_the_runtime():
    """Folded at compile time, a float16 op gives the halves it gives at run time."""
    import aot
    from aot.frontend.onnx import import_onnx
    a = np.array([0.1, 1000.3, 3.3e-5, 60000], np.float16)
    b = np.array([0.2, 0.7, 1.1e-5, 8000], np.float16)
    g = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["t"]), helper.make_node("Mul", ["x", "t"], ["y"])],
        "fold", [helper.make_tensor_value_info("x", T.FLOAT16, [4])],
        [helper.make_tensor_value_info("y", T.FLOAT16, [4])],
        [onnx.numpy_helper.from_array(a, "a"), onnx.numpy_helper.from_array(b, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    graph = aot.optimize(import_onnx(model.SerializeToString(), "fold"))
    (folded,) = [v for k, v in graph.constants.items() if k not in ("a", "b")]
    with np.errstate(over="ignore"):
        want = (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16)   # 68000: inf
    _same_bits(folded.reshape(want.shape), want)


# ---- compiled against the interpreter --------------------------------------------------------

_W = np.random.default_rng(8).standard_normal((4, 3, 3, 3)).astype(np.float16)
# (op, float16 input shapes, attributes, constant inputs after them)
OPS = [("Add", [(4, 33), (4, 33)], {}, []), ("Exp", [(4, 33)], {}, []),
       ("Sigmoid", [(2, 65)], {}, []), ("Softmax", [(3, 40)], {"axis": -1}, []),
       ("MatMul", [(5, 24), (24, 9)], {}, []),
       ("ReduceMean", [(6, 70)], {"keepdims": 1}, [np.array([1], np.int64)]),
       ("Conv", [(1, 3, 9, 9)], {"pads": [1, 1, 1, 1]}, [_W]),
       ("MaxPool", [(1, 2, 8, 8)], {"kernel_shape": [2, 2], "strides": [2, 2]}, []),
       ("Cast", [(4, 33)], {"to": T.FLOAT}, []),
       ("Transpose", [(5, 7, 3)], {"perm": [2, 0, 1]}, []), ("Where", None, {}, [])]


def _op_case(op, shapes, attrs, consts, rng):
    if op == "Where":
        g = single_op_graph("Where", [((4, 20), np.bool_), ((4, 20), np.float16),
                                      ((4, 20), np.float16)])
    else:
        g = _half_graph(op, shapes, attrs, consts)
    ins = {}
    for name in g.inputs:
        t = g.types[name]
        ins[name] = (rng.random(t.shape) > 0.5 if t.dtype == "bool" else
                     (rng.standard_normal(t.shape) * 2).astype(t.dtype))
    return g, ins


@pytest.mark.parametrize("codegen", CODEGENS)
def test_compiled_matches_interpreter(codegen):
    """Compiled rounds once at each kernel's output (fused ops compute in
    float32 together); the interpreter rounds at each op's: one half step."""
    rng = np.random.default_rng(7)
    for op, shapes, attrs, consts in OPS:
        g, ins = _op_case(op, shapes, attrs, consts, rng)
        want = interpret(g, ins)
        got = build_and_run(g, ins, codegen)
        for name, w in want.items():
            assert got[name].dtype == w.dtype, op
            np.testing.assert_allclose(got[name].astype(np.float32), w.astype(np.float32),
                                       rtol=1e-3, atol=1e-3, err_msg=op)


def test_verify_takes_halves_at_their_precision(fp16_models):
    """aot verify on an fp16 model: float16 inputs to both runtimes, the
    outputs compared within half-precision defaults (validate.HALF_ATOL)."""
    import aot
    r = aot.verify(fp16_models["fp16"], "host", count=4)
    assert r["ok"] and r["reference"] == "onnxruntime", r
    (row,) = r["outputs"]
    assert 0 < row["max_abs"] <= 1e-3     # not bit-exact: rounded at other points


@pytest.mark.parametrize("codegen", CODEGENS)
def test_bitcast_keeps_a_halfs_bits(codegen):
    """BitCast to and from float16, alone and fused with arithmetic: the 16
    bits themselves (NaN payloads, -0.0, subnormals), never a widened value."""
    halves = np.array([1.5, -0.0, np.inf, 65504, 6e-8, np.nan, 3.14, -2], np.float16)
    bits = halves.view(np.int16).copy()
    bits[5] = 0x7c01                          # a signalling NaN's payload
    one = onnx.numpy_helper.from_array(np.ones(8, np.float16), "one")
    g = helper.make_graph(
        [helper.make_node("BitCast", ["x"], ["h"], to=T.FLOAT16),
         helper.make_node("Add", ["h", "one"], ["s"]),
         helper.make_node("BitCast", ["s"], ["y"], to=T.INT16),
         helper.make_node("BitCast", ["x"], ["z"], to=T.FLOAT16)],
        "bits", [helper.make_tensor_value_info("x", T.INT16, [8])],
        [helper.make_tensor_value_info(n, t, [8]) for n, t in (("y", T.INT16),
                                                               ("z", T.FLOAT16))], [one])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 26)])
    from aot.frontend.onnx import import_onnx
    from aot.passes.pipeline import optimize
    graph = optimize(import_onnx(model.SerializeToString(), "bits"))
    want = interpret(graph, {"x": bits})
    assert np.array_equal(want["z"].view(np.int16), bits)
    got = build_and_run(graph, {"x": bits}, codegen)
    for name in ("y", "z"):
        assert np.array_equal(got[name].view(np.int16), want[name].view(np.int16)), name


@pytest.mark.parametrize("codegen", CODEGENS)
def test_clip_before_opset_11_on_halves(codegen):
    """ReLU6 as older fp16 exports write it (opset 10: Clip's float
    attributes, imported as float32 bounds), fused into its Conv."""
    import aot
    from aot.frontend.onnx import import_onnx
    w = onnx.numpy_helper.from_array(
        np.random.default_rng(2).standard_normal((4, 3, 1, 1)).astype(np.float16) * 3, "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"]),
                           helper.make_node("Clip", ["c"], ["y"], min=0.1, max=6.0)], "relu6",
                          [helper.make_tensor_value_info("x", T.FLOAT16, [1, 3, 4, 4])],
                          [helper.make_tensor_value_info("y", T.FLOAT16, [1, 4, 4, 4])], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 10)])
    model.ir_version = 7
    graph = aot.optimize(import_onnx(model.SerializeToString(), "relu6"))
    assert ["Conv", "Clip"] in [[b.op for b in n.attrs["body"].nodes] for n in graph.nodes]
    x = _input(np.float16).reshape(1, 3, 8, 8)[:, :, :4, :4].copy()
    want = _ort(model, x)
    got = build_and_run(graph, {"x": x}, codegen)["y"]
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-3)
    assert got.min() == np.float16(0.1) and got.max() == np.float16(6.0)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_half_winograd_conv_within_a_half_step(codegen):
    """A 3x3 stride-1 half conv with 16 channels takes the Winograd kernel
    (float32 workspaces and transformed weights) and stays within a half's
    tolerance of the interpreter; its conversions are the target's
    instructions (F16C on the host)."""
    from aot.isa.half import HALF_CONVERSIONS
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((16, 16, 3, 3)) * 0.2).astype(np.float16)
    b = (rng.standard_normal(16) * 0.1).astype(np.float16)
    g = _half_graph("Conv", [(1, 16, 10, 12)], {"pads": [1, 1, 1, 1]}, [w, b])
    (k,) = [k for k in lower_graph(g, host_target()) if any(
        "Winograd" in getattr(s, "text", "") for s in walk_stmt(k.func.body))]
    assert dict(k.func.attrs).get(HALF_CONVERSIONS)
    x = rng.standard_normal((1, 16, 10, 12)).astype(np.float16)
    got = build_and_run(g, {"x0": x}, codegen)["y0"]
    want = interpret(g, {"x0": x})["y0"]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                               rtol=2.0 ** -9, atol=2.0 ** -10)
