"""Addresses computed from tensor values are checked at run time
(aot/lower/arith/bounds.py, docs/package.md "Index checks").

Models are built with onnx.helper the way exporters write them: PyTorch's
embedding (Gather on axis 0 of a weight initializer with int64 ids), a
GatherElements on axis 1, a GatherND with batch_dims 0, ScatterND and
ScatterElements updates, a OneHot with a constant depth; the indices are
model inputs (int64 and int32). In range, the packages give what ONNX
Runtime gives; out of range ([11, 12, -11] into a 10-row table), far out
(-1e8) and past 2**32, `aot run` fails with one line naming the input and
the node, exit 2, also when built with ASan and UBSan (which then report
nothing); OneHot instead gives rows of off values, as the ONNX spec says.
Each package is built once per codegen and run on several inputs.
"""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import aot
from aot.api import package
from aot.cli import main as cli_main
from aot.deploy import run_package
from aot.errors import AotError
from aot.targets import get_board

HOST = get_board("host")
SANITIZE = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer", "-g", "-O1")
WARNINGS = ("-Wall", "-Wextra", "-Werror")
TABLE = (np.arange(40, dtype=np.float32).reshape(10, 4) * 0.5 - 3).astype(np.float32)
ONNX_INDEX = {"int64": T.INT64, "int32": T.INT32}

GOOD = ([1, -1, 0], [9, -10, 3])
BAD = {"int64": {"out of range": [11, 12, -11], "far out": [-100_000_000, 0, 0],
                 "past 2**32": [2**32, 2**32 + 3, 0]},
       "int32": {"out of range": [11, 12, -11], "far out": [-100_000_000, 0, 0],
                 "int32 extremes": [2**31 - 1, -2**31, 0]}}


def _model(nodes, inputs, outputs, inits=(), opset=18) -> onnx.ModelProto:
    g = h.make_graph(nodes, "m", inputs, outputs, [nh.from_array(v, k) for k, v in inits])
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def _vi(name, elem, shape):
    return h.make_tensor_value_info(name, elem, shape)


def build(op: str, itype: str = "int64") -> tuple[onnx.ModelProto, str, callable]:
    """(model, node name, ids -> the inputs in order): every model takes a
    vector of three ids into a dimension of size 10."""
    it, np_it = ONNX_INDEX[itype], np.dtype(itype)
    if op == "Gather":          # torch.nn.Embedding
        m = _model([h.make_node("Gather", ["weight", "ids"], ["y"], axis=0, name="Gather_3")],
                   [_vi("ids", it, [3])], [_vi("y", T.FLOAT, [3, 4])], [("weight", TABLE)])
        return m, "Gather_3", lambda v: [np.array(v, np_it)]
    if op == "GatherElements":
        m = _model([h.make_node("GatherElements", ["x", "ids"], ["y"], axis=1,
                                name="GatherElements_1")],
                   [_vi("ids", it, [4, 3])], [_vi("y", T.FLOAT, [4, 3])], [("x", TABLE.T.copy())])
        return m, "GatherElements_1", lambda v: [np.tile(np.array(v, np_it), (4, 1))]
    if op == "GatherND":
        m = _model([h.make_node("GatherND", ["weight", "ids"], ["y"], batch_dims=0,
                                name="GatherND_2")],
                   [_vi("ids", it, [3, 1])], [_vi("y", T.FLOAT, [3, 4])], [("weight", TABLE)])
        return m, "GatherND_2", lambda v: [np.array(v, np_it).reshape(3, 1)]
    if op == "ScatterND":
        upd = (-np.arange(1, 13, dtype=np.float32)).reshape(3, 4)
        m = _model([h.make_node("ScatterND", ["x", "ids", "upd"], ["y"], name="ScatterND_4")],
                   [_vi("x", T.FLOAT, [10, 4]), _vi("ids", it, [3, 1])],
                   [_vi("y", T.FLOAT, [10, 4])], [("upd", upd)])
        return m, "ScatterND_4", lambda v: [TABLE, np.array(v, np_it).reshape(3, 1)]
    if op == "ScatterElements":
        m = _model([h.make_node("ScatterElements", ["x", "ids", "upd"], ["y"], axis=1,
                                reduction="add", name="ScatterElements_5")],
                   [_vi("ids", it, [4, 3]), _vi("upd", T.FLOAT, [4, 3])],
                   [_vi("y", T.FLOAT, [4, 10])], [("x", TABLE.T.copy())])
        return m, "ScatterElements_5", lambda v: [np.tile(np.array(v, np_it), (4, 1)),
                                                  np.full((4, 3), 0.25, np.float32)]
    if op == "OneHot":
        m = _model([h.make_node("OneHot", ["ids", "depth", "values"], ["y"], axis=-1,
                                name="OneHot_6")],
                   [_vi("ids", it, [3])], [_vi("y", T.FLOAT, [3, 10])],
                   [("depth", np.array(10, np_it)), ("values", np.array([-1, 2], np.float32))])
        return m, "OneHot_6", lambda v: [np.array(v, np_it)]
    raise ValueError(op)


CHECKED = ("Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements")
INT64_ONLY = ("GatherND", "ScatterND")     # the ONNX schema's choice


def op_itypes(ops) -> list[tuple[str, str]]:
    """(op, index type) pairs the ONNX schema allows."""
    return [(op, it) for op in ops for it in ("int64", "int32")
            if it == "int64" or op not in INT64_ONLY]


def onnxruntime(model: onnx.ModelProto, inputs) -> np.ndarray:
    import onnxruntime as ort
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, dict(zip([i.name for i in model.graph.input], inputs)))[0]


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """(op, index type, codegen, sanitized) -> (model, node, feeds, package dir), built once."""
    root = tmp_path_factory.mktemp("index")
    made = {}

    def get(op: str, itype: str, codegen: str, sanitized: bool = False):
        key = (op, itype, codegen, sanitized)
        if key not in made:
            m, node, feeds = build(op, itype)
            stem = "_".join([op.lower(), itype, codegen] + (["asan"] if sanitized else []))
            path = root / f"{stem}.onnx"
            onnx.save(m, path)
            info = package(path, board="host", codegen=codegen, out_dir=root / stem,
                           extra_cflags=(*SANITIZE, *WARNINGS) if sanitized else ())
            made[key] = (m, node, feeds, info.path)
        return made[key]
    return get


@pytest.fixture
def asan_env(monkeypatch):
    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=0")
    monkeypatch.setenv("UBSAN_OPTIONS", "print_stacktrace=1")


def run_cli(capsys, *argv: str) -> tuple[int, list[str]]:
    code = cli_main(["run", *argv])
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("codegen", ["c", "llvm"])
@pytest.mark.parametrize("op,itype", op_itypes([*CHECKED, "OneHot"]))
def test_in_range_indices_give_what_onnxruntime_gives(packages, op, itype, codegen):
    m, _, feeds, pkg = packages(op, itype, codegen)
    for v in GOOD:
        got = run_package(pkg, HOST, feeds(v)).outputs[0]
        np.testing.assert_array_equal(got, onnxruntime(m, feeds(v)), err_msg=f"{op} {v}")


@pytest.mark.parametrize("codegen", ["c", "llvm"])
@pytest.mark.parametrize("op,itype", op_itypes(CHECKED))
def test_out_of_range_indices_are_one_line_naming_input_and_node(packages, op, itype, codegen,
                                                                 tmp_path, capsys):
    m, node, feeds, pkg = packages(op, itype, codegen)
    for what, v in BAD[itype].items():
        with pytest.raises(Exception):      # ONNX Runtime refuses them too
            onnxruntime(m, feeds(v))
        args = []
        for name, array in zip([i.name for i in m.graph.input], feeds(v)):
            np.save(tmp_path / f"{name}.npy", array)
            args += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
        code, err = run_cli(capsys, str(pkg), *args, "--out", str(tmp_path / "out"))
        assert code == 2, (what, err)
        assert len(err) == 1, (what, err)
        assert err[0] == (f"aot: error: input 'ids' gives an index out of range in node "
                          f"'{node}' ({op}: a dimension of size 10)"), what
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("itype", ["int64", "int32"])
def test_one_hot_out_of_range_is_a_row_of_off_values(packages, itype):
    """The spec defines it (ONNX Runtime agrees): no address, no error."""
    m, _, feeds, pkg = packages("OneHot", itype, "c")
    for v in BAD[itype].values():
        got = run_package(pkg, HOST, feeds(v)).outputs[0]
        np.testing.assert_array_equal(got, onnxruntime(m, feeds(v)))
        outside = [not -10 <= i < 10 for i in v]
        assert (got[outside] == -1).all() and (got[~np.array(outside)] == 2).sum() == 3 - sum(outside)


@pytest.mark.parametrize("codegen", ["c", "llvm"])
@pytest.mark.parametrize("op", [*CHECKED, "OneHot"])
def test_sanitized_packages_are_clean_on_hostile_indices(packages, op, codegen, asan_env):
    """ASan and UBSan report nothing (any report would abort the harness):
    in range the rows are right, out of range the run stops at the check.
    The package compiles warning-free (-Wall -Wextra -Werror).
    (With codegen llvm the kernels are LLVM's objects, not instrumented;
    the entry point and harness are.)"""
    m, node, feeds, pkg = packages(op, "int64", codegen, sanitized=True)
    for v in GOOD:
        np.testing.assert_array_equal(run_package(pkg, HOST, feeds(v)).outputs[0],
                                      onnxruntime(m, feeds(v)))
    for v in BAD["int64"].values():
        if op == "OneHot":
            run_package(pkg, HOST, feeds(v))
            continue
        with pytest.raises(AotError) as e:
            run_package(pkg, HOST, feeds(v))
        assert str(e.value).startswith(f"input 'ids' gives an index out of range in node "
                                       f"'{node}'"), str(e.value)


def test_sanitizers_see_an_unchecked_gather(tmp_path, monkeypatch, asan_env):
    """The test above can fail: the same Gather with its check taken out of
    the TIR reads outside the table, and ASan stops the harness."""
    import aot.lower.rules.tensor as injective

    monkeypatch.setattr(injective, "precheck", lambda *a, **k: None)
    m, _, feeds = build("Gather")
    onnx.save(m, tmp_path / "m.onnx")
    info = package(tmp_path / "m.onnx", board="host", codegen="c", out_dir=tmp_path / "pkg",
                   extra_cflags=SANITIZE)
    assert info.metadata["index_checks"] == []
    with pytest.raises(AotError, match="AddressSanitizer|ABORTING"):
        run_package(info.path, HOST, feeds([11, 12, -11]))


def test_aot_run_command(packages, tmp_path):
    """The whole command in its own process: one line, exit 2."""
    _, node, feeds, pkg = packages("Gather", "int64", "c")
    np.save(tmp_path / "ids.npy", feeds([-100_000_000, 0, 0])[0])
    r = subprocess.run([sys.executable, "-m", "aot", "run", str(pkg), "--board", "host",
                        "--input", str(tmp_path / "ids.npy"), "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"aot: error: input 'ids' gives an index out of range in node '{node}' "
        "(Gather: a dimension of size 10)"]


def test_metadata_and_the_c_api_name_the_check(packages):
    _, node, _, pkg = packages("Gather", "int64", "c")
    meta = json.loads((pkg / "metadata.json").read_text())
    assert meta["index_checks"] == [{
        "check": 0, "step": 0, "kernel": meta["kernels"][0]["name"], "node": node,
        "op": "Gather", "indices": "ids", "dims": [10], "inputs": ["ids"],
        "message": f"input 'ids' gives an index out of range in node '{node}' "
                   "(Gather: a dimension of size 10)"}]
    header = (pkg / "include" / f"{meta['name']}.h").read_text()
    assert f"int {meta['name']}_failed_check(void);" in header
    runtime = (pkg / "runtime_c" / "aot_runtime.h").read_text()
    assert "#define AOT_ERR_INDEX 3" in runtime


def test_serve_session_names_the_node(packages):
    _, node, feeds, pkg = packages("GatherND", "int64", "c")
    with aot.connect("host") as dev:
        out = dev.run(pkg, feeds(GOOD[0]))
        assert list(out) == ["y"]
        with pytest.raises(AotError, match=f"^input 'ids' gives an index out of range in node "
                                           f"'{node}'"):
            dev.run(pkg, feeds([11, 12, -11]))


def test_constant_indices_cost_nothing(tmp_path, capsys):
    """Checked when packaging: no check in the kernel, which returns nothing."""
    m = _model([h.make_node("Gather", ["weight", "ids"], ["y"], axis=0, name="g")],
               [], [_vi("y", T.FLOAT, [3, 4])],
               [("weight", TABLE), ("ids", np.array([1, -1, 0], np.int64))])
    x = _vi("x", T.FLOAT, [3, 4])   # a model input, so the Gather is not folded away
    m.graph.input.append(x)
    m.graph.node.append(h.make_node("Add", ["y0", "x"], ["y"]))
    m.graph.node[0].output[0] = "y0"
    onnx.save(m, tmp_path / "m.onnx")
    info = package(tmp_path / "m.onnx", board="host", out_dir=tmp_path / "pkg")
    assert info.metadata["index_checks"] == []
    source = "".join(p.read_text() for p in (info.path / "src").glob("*_kernels*.c"))
    assert "int32_t m_kernel" not in source and "return" not in source.split("{", 1)[1]
    x = np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(run_package(info.path, HOST, [x]).outputs[0],
                                  TABLE[[1, -1, 0]] + 1)
    m.graph.initializer[1].CopyFrom(nh.from_array(np.array([1, 10, 0], np.int64), "ids"))
    onnx.save(m, tmp_path / "bad.onnx")
    assert cli_main(["package", str(tmp_path / "bad.onnx"), "--board", "host",
                     "-o", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "index out of range for dimension 10" in err[0], err


def test_computed_and_nested_indices(tmp_path):
    """Indices computed from two inputs name both; a Gather of a Gather checks
    the inner indices first, each with its own number."""
    m = _model([h.make_node("Add", ["a", "b"], ["s"], name="add"),
                h.make_node("Gather", ["perm", "s"], ["t"], axis=0, name="inner"),
                h.make_node("Gather", ["weight", "t"], ["y"], axis=0, name="outer")],
               [_vi("a", T.INT64, [3]), _vi("b", T.INT64, [3])], [_vi("y", T.FLOAT, [3, 4])],
               [("weight", TABLE), ("perm", np.array([3, 1, 4, 1, 5, 12], np.int64))])
    onnx.save(m, tmp_path / "m.onnx")
    for codegen in ("c", "llvm"):
        info = package(tmp_path / "m.onnx", board="host", codegen=codegen,
                       out_dir=tmp_path / codegen)
        checks = info.metadata["index_checks"]
        assert [(c["node"], c["dims"], c["inputs"]) for c in checks] == [
            ("inner", [6], ["a", "b"]), ("outer", [10], ["a", "b"])]
        a, b = np.array([0, 1, 2], np.int64), np.array([1, 1, 0], np.int64)
        np.testing.assert_array_equal(run_package(info.path, HOST, [a, b]).outputs[0],
                                      onnxruntime(m, [a, b]))
        with pytest.raises(AotError, match="^inputs 'a', 'b' give an index out of range in "
                                           "node 'inner' .Gather: a dimension of size 6.$"):
            run_package(info.path, HOST, [a, b + 4])
        # perm[5] = 12: in range for perm, out of range for the table
        with pytest.raises(AotError, match="in node 'outer'"):
            run_package(info.path, HOST, [a, np.array([5, 0, 0], np.int64)])


MORE = {
    "GatherND-tuples": ("GatherND", {}, (4, 5, 3), (2, 2)),
    "GatherND-batch": ("GatherND", {"batch_dims": 1}, (2, 5, 3), (2, 4, 1)),
    "GatherND-whole": ("GatherND", {"batch_dims": 1}, (2, 5, 3), (2, 4, 2)),
    "GatherElements-axis0": ("GatherElements", {"axis": 0}, (5, 3), (4, 3)),
    "ScatterND-tuples": ("ScatterND", {}, (4, 5, 3), (3, 2)),
    "ScatterND-mul": ("ScatterND", {"reduction": "mul"}, (6, 3), (4, 1)),
    "ScatterElements-max": ("ScatterElements", {"axis": 0, "reduction": "max"}, (5, 3), (4, 3)),
    "ScatterElements-min": ("ScatterElements", {"axis": -1, "reduction": "min"}, (5, 3), (5, 2)),
    "ScatterElements-none": ("ScatterElements", {"axis": 1}, (5, 3), (5, 2)),
    "OneHot-axis0": ("OneHot", {"axis": 0}, None, (2, 3)),
}


def _more_model(op, attrs, data_shape, idx_shape, rng):
    """A model of `op` with runtime indices, and random in-range inputs."""
    inputs, feeds, inits = [], [], []
    if op == "OneHot":
        inits = [("depth", np.array(7.0, np.float32)), ("values", np.array([3, 5], np.int32))]
        ids = rng.integers(-7, 7, idx_shape)
        inputs = [_vi("ids", T.INT64, list(idx_shape))]
        node = h.make_node(op, ["ids", "depth", "values"], ["y"], **attrs)
        return _model([node], inputs, [_vi("y", T.INT32, None)], inits), [ids]
    data = rng.standard_normal(data_shape).astype(np.float32)
    b = attrs.get("batch_dims", 0)
    if op in ("GatherND", "ScatterND"):
        k = idx_shape[-1]
        dims = data_shape[b:b + k]
        if op == "ScatterND":   # distinct targets: ONNX leaves duplicates' order open
            every = np.array(list(np.ndindex(*dims)))
            ids = every[rng.choice(len(every), idx_shape[0], replace=False)]
            ids = ids - np.array(dims) * rng.integers(0, 2, ids.shape)   # some negative
        else:
            ids = np.stack([rng.integers(-d, d, idx_shape[:-1]) for d in dims], -1)
    else:
        axis = attrs.get("axis", 0) % len(data_shape)
        ids = rng.integers(-data_shape[axis], data_shape[axis], idx_shape)
    inputs = [_vi("data", T.FLOAT, list(data_shape)), _vi("ids", T.INT64, list(ids.shape))]
    feeds = [data, ids.astype(np.int64)]
    names = ["data", "ids"]
    if op.startswith("Scatter"):
        upd_shape = idx_shape if op == "ScatterElements" else \
            tuple(ids.shape[:-1]) + tuple(data_shape[ids.shape[-1]:])
        feeds.append(rng.standard_normal(upd_shape).astype(np.float32))
        inputs.append(_vi("upd", T.FLOAT, list(upd_shape)))
        names.append("upd")
    node = h.make_node(op, names, ["y"], **attrs)
    return _model([node], inputs, [_vi("y", T.FLOAT, None)]), feeds


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_more_forms_against_onnxruntime(tmp_path, codegen):
    """Tuples of several indices, batch dimensions, other axes, reductions:
    one package each, random in-range inputs, exactly ONNX Runtime's."""
    rng = np.random.default_rng(15)
    for name, (op, attrs, data_shape, idx_shape) in MORE.items():
        m, feeds = _more_model(op, attrs, data_shape, idx_shape, rng)
        onnx.save(m, tmp_path / f"{name}.onnx")
        info = package(tmp_path / f"{name}.onnx", board="host", codegen=codegen,
                       out_dir=tmp_path / name)
        got = run_package(info.path, HOST, feeds).outputs[0]
        np.testing.assert_array_equal(got, onnxruntime(m, feeds), err_msg=name)
