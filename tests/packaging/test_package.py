"""Packages on the host board: built, run and checked against the interpreter
and the reference runtimes; deterministic to the byte; the C API compiles
cleanly; the output directory appears whole or not at all."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import aot
from aot.api import package
from aot.cli import main as cli_main
from aot.deploy import run_package
from aot.errors import AotError, UnsupportedError
from aot.executor.plan import Buffer, Plan, check_plan
from aot.frontend.onnx import import_onnx
from aot.passes.infer import infer_types
from aot.targets import get_board
from aot.check.inputs import random_inputs
from aot.testing import assert_close, run_twice

from support import MODELS
from support.c_sources import compile_api_and_sources

HOST = get_board("host")
REPO = Path(__file__).resolve().parents[2]


def onnx_model(path: Path, nodes, inputs, outputs, inits=(), name="g") -> Path:
    """Write a small float ONNX model: inputs/outputs as (name, shape)."""
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, name, [vi(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [vi(n, TensorProto.FLOAT, s) for n, s in outputs],
                          [numpy_helper.from_array(a, n) for n, a in inits])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path


def graph_of(path: Path) -> aot.Graph:
    return aot.optimize(aot.load(path))


def run_pkg(info, inputs: dict) -> dict:
    meta = info.metadata
    result = run_package(info.path, HOST, [inputs[i["name"]] for i in meta["inputs"]])
    return {o["name"]: a for o, a in zip(meta["outputs"], result.outputs)}


def check_against_interpreter(graph, info, seed=0):
    inputs = random_inputs(graph, seed)
    want = aot.interpret(graph, inputs)
    got = run_pkg(info, inputs)
    for name in graph.outputs:
        assert_close(name, got[name], want[name], rtol=1e-4, atol=1e-4)


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "aot", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=600)


def _rng_array(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ------------------------------------------------------------ models end to end

@pytest.mark.parametrize("model,codegen", [("tflm_hello_world_int8.tflite", "c"),
                                           ("tflm_hello_world_f32.tflite", "c"),
                                           ("tflm_hello_world_int8.tflite", "llvm"),
                                           ("tflm_mnist_lstm_int8.tflite", "llvm")])
def test_model_runs_like_the_interpreter(tmp_path, model, codegen):
    graph = graph_of(MODELS / model)
    info = package(graph, board="host", codegen=codegen, out_dir=tmp_path / "pkg")
    assert (tmp_path / "pkg" / "lib" / f"lib{info.name}.a").is_file()
    if codegen == "llvm":
        assert (tmp_path / "pkg" / "lib" / f"{info.name}_kernels.o").is_file()
        assert not (tmp_path / "pkg" / "src" / f"{info.name}_kernels.c").exists()
    check_against_interpreter(graph, info, seed=1)
    saved_in = MODELS / model.replace(".tflite", ".input.npy")
    saved_out = np.load(MODELS / model.replace(".tflite", ".output.npy"))
    got = run_pkg(info, {graph.inputs[0]: np.load(saved_in)})[graph.outputs[0]]
    assert_close("saved", got, saved_out.astype(got.dtype), rtol=1e-4, atol=1e-4) \
        if got.dtype.kind == "f" else np.testing.assert_array_equal(got, saved_out)


@pytest.mark.parametrize("model", ["tflm_hello_world_int8.tflite", "onnx_mnist8.onnx"])
def test_verify_cli_against_reference_runtime(model):
    r = cli("verify", MODELS / model, "--board", "host", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] is True
    assert out["reference"] == ("onnxruntime" if model.endswith(".onnx") else "tflite-micro")
    assert out["inputs"] == "saved"
    assert len(out["outputs"]) == 1 and out["outputs"][0]["max_abs_err"] <= 1e-4


def test_verify_reports_a_mismatch(monkeypatch, capsys):
    """A wrong package must fail verification: exit 1 and ok false."""
    import aot.deploy.host as host
    real = host.parse_report

    def corrupt(stdout, meta, outs, runs=None):
        res = real(stdout, meta, outs, runs)
        return host.RunResult([o + np.ones_like(o) for o in res.outputs], res.times_ns,
                              res.report)
    monkeypatch.setattr(host, "parse_report", corrupt)
    code = cli_main(["verify", str(MODELS / "tflm_hello_world_int8.tflite"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["ok"] is False and out["outputs"][0]["max_abs_err"] == 1.0


# -------------------------------------------------------------- hand-built graphs

def two_layer(tmp_path, hidden=16, name="mlp") -> Path:
    """y1 = relu(x @ w1 + b1) is an output *and* the next layer's input."""
    w1, b1 = _rng_array((8, hidden), 1), _rng_array((hidden,), 2)
    w2 = _rng_array((hidden, 4), 3)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["a"]),
             helper.make_node("Relu", ["a"], ["y1"]),
             helper.make_node("MatMul", ["y1", "w2"], ["y2"])]
    return onnx_model(tmp_path / f"{name}.onnx", nodes, [("x", [2, 8])],
                      [("y1", [2, hidden]), ("y2", [2, 4])],
                      [("w1", w1), ("b1", b1), ("w2", w2)], name=name)


@pytest.mark.parametrize("io_in_arena", [False, True])
def test_output_read_by_a_later_kernel(tmp_path, io_in_arena):
    graph = graph_of(two_layer(tmp_path))
    info = package(graph, board="host", out_dir=tmp_path / "pkg", io_in_arena=io_in_arena)
    check_against_interpreter(graph, info)
    meta = info.metadata
    out_bytes = sum(t["bytes"] for t in meta["outputs"])    # all live at the end
    assert meta["arena_bytes_io_inside"] >= meta["arena_bytes_io_outside"]
    assert meta["arena_bytes_io_inside"] >= out_bytes
    header = (info.path / "include" / f"{info.name}.h").read_text()
    assert ("_OFFSET " in header) == io_in_arena
    if io_in_arena:
        assert all("arena_offset" in t for t in meta["inputs"] + meta["outputs"])


def test_output_that_is_an_input_and_a_large_blob(tmp_path):
    """An output no kernel writes is copied; > 64 KiB of weights go to the blob."""
    w = _rng_array((64, 512), 4)          # 128 KiB
    nodes = [helper.make_node("Identity", ["x"], ["same"]),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    path = onnx_model(tmp_path / "big.onnx", nodes, [("x", [1, 64])],
                      [("same", [1, 64]), ("y", [1, 512])], [("w", w)])
    graph = graph_of(path)
    info = package(graph, board="host", out_dir=tmp_path / "pkg")
    check_against_interpreter(graph, info)
    src = info.path / "src"
    assert (src / f"{info.name}_params.bin").stat().st_size >= w.nbytes
    assert (src / f"{info.name}_params_blob.S").is_file()
    assert len((src / f"{info.name}_params.c").read_text()) < 20_000, "weights as C text"


HOSTILE = ['x*/ "evil"\n#define', "int", "1st input", "aot_run", "ünïcode/name"]


def test_hostile_names_make_valid_c(tmp_path):
    a, b, c, d, e = HOSTILE
    nodes = [helper.make_node("Relu", [a], [c]), helper.make_node("Mul", [c, b], [d]),
             helper.make_node("Exp", [d], [e])]
    path = onnx_model(tmp_path / "hostile.onnx", nodes, [(a, [3]), (b, [3])],
                      [(d, [3]), (e, [3])], name='model "*/ name')
    graph = graph_of(path)
    info = package(graph, board="host", name="static", out_dir=tmp_path / "pkg")
    assert info.name != "static"          # a C keyword is not a usable prefix
    check_against_interpreter(graph, info)
    meta = info.metadata
    assert [t["name"] for t in meta["inputs"]] == [a, b]
    assert [t["name"] for t in meta["outputs"]] == [d, e]
    compile_api_and_sources(info.path, info.name)
    readme = (info.path / "README.md").read_text()      # its tables keep their columns
    rows = [line for line in readme.splitlines() if line.startswith(("| input", "| output"))]
    assert len(rows) == 4 and all(len(re.split(r"(?<!\\)\|", r)) == 9 for r in rows), rows


# ------------------------------------------------------------------ the C API

GOLDEN_INPUT = """\
/* input 0: x: float32[2x8] */
#define MLP_INPUT_X_NAME "x"
#define MLP_INPUT_X_DTYPE "float32"
#define MLP_INPUT_X_SIZE 16
#define MLP_INPUT_X_BYTES 64
#define MLP_INPUT_X_RANK 2
#define MLP_INPUT_X_SHAPE {2, 8}
"""

GOLDEN_API = """\
struct mlp_inputs {
    const float* x;
};

struct mlp_outputs {
    float* y1;
    float* y2;
};

/* Runs the model on the static arena. */
int mlp_run(const struct mlp_inputs* inputs, struct mlp_outputs* outputs);

/* Runs the model on the caller's arena: MLP_ARENA_SIZE bytes aligned to
 * MLP_ARENA_ALIGN. */
int mlp_run_with_arena(const struct mlp_inputs* inputs,
    struct mlp_outputs* outputs, void* arena);

/* Restores the model's state to its initial value (this model has none). */
void mlp_reset(void);
"""


def test_c_api_compiles_warning_free(tmp_path):
    info = package(MODELS / "tflm_mnist_lstm_int8.tflite", board="host", out_dir=tmp_path / "pkg")
    compile_api_and_sources(info.path, info.name)
    empty = package(two_layer(tmp_path), board="host", out_dir=tmp_path / "empty" / "pkg")
    assert empty.arena_bytes == 0         # every tensor is the caller's
    compile_api_and_sources(empty.path, empty.name)
    header = (empty.path / "include" / "mlp.h").read_text()
    assert GOLDEN_API in header
    assert GOLDEN_INPUT in header
    header = (info.path / "include" / f"{info.name}.h").read_text()
    N = info.name.upper()
    for macro in ("ARENA_SIZE", "ARENA_ALIGN", "INPUT_SERVING_DEFAULT_FIXED_INPUT_0_SIZE",
                  "INPUT_SERVING_DEFAULT_FIXED_INPUT_0_SCALE",
                  "INPUT_SERVING_DEFAULT_FIXED_INPUT_0_ZERO_POINT"):
        assert f"#define {N}_{macro} " in header, macro
    for fn in ("_run(", "_run_with_arena(", "_reset(void)"):
        assert info.name + fn in header
    assert "malloc" not in (info.path / "src" / f"{info.name}.c").read_text()


# --------------------------------------------------------------- determinism

def test_packaging_twice_gives_the_same_bytes(tmp_path):
    path = two_layer(tmp_path)
    for d in ("one", "two"):
        package(path, board="host", out_dir=tmp_path / d / "pkg")
        package(path, board="host", codegen="llvm", out_dir=tmp_path / d / "llvm")
    one = {p.relative_to(tmp_path / "one"): p.read_bytes()
           for p in sorted((tmp_path / "one").rglob("*")) if p.is_file()}
    two = {p.relative_to(tmp_path / "two"): p.read_bytes()
           for p in sorted((tmp_path / "two").rglob("*")) if p.is_file()}
    assert one.keys() == two.keys()
    assert [k for k in one if one[k] != two[k]] == []
    for rel, data in one.items():
        assert str(tmp_path).encode() not in data, f"{rel} holds an absolute path"


# ---------------------------------------------------------------- metadata

def test_metadata_describes_the_package(tmp_path):
    graph = graph_of(two_layer(tmp_path))
    info = package(graph, board="host", out_dir=tmp_path / "pkg")
    text = (info.path / "metadata.json").read_text()
    meta = json.loads(text)
    assert text == json.dumps(meta, sort_keys=True, indent=2) + "\n"
    assert meta["inputs"][0] == {"name": "x", "c_name": "x", "shape": [2, 8],
                                 "dtype": "float32", "bytes": 64}
    assert [o["name"] for o in meta["outputs"]] == ["y1", "y2"]
    assert meta["codegen"] == "c" and meta["board"] == "host"
    assert meta["target"]["triple"] == HOST.target.triple
    assert set(meta["versions"]) >= {"aot", "numpy", "onnx", "llvmlite"}
    assert [k["step"] for k in meta["kernels"]] == list(range(len(graph.nodes)))
    assert meta["arena_lower_bound_bytes"] <= meta["arena_bytes"]
    assert meta["params_bytes"] >= meta["params_data_bytes"] > 0
    # The plan is a valid placement: no two live buffers share bytes.
    rows = meta["plan"]["buffers"]
    bufs = [Buffer(f"{r['kind']}{r.get('step', '')}:{r['name']}", r["size"], r["first"],
                   r["last"], meta["arena_align"]) for r in rows]
    check_plan(bufs, Plan({b.name: r["offset"] for b, r in zip(bufs, rows)},
                          meta["arena_bytes"], meta["arena_lower_bound_bytes"], ""))
    assert "time" not in text and str(tmp_path) not in text


def test_inspect_reads_the_footprint(tmp_path):
    info = package(MODELS / "tflm_hello_world_int8.tflite", board="host", out_dir=tmp_path / "pkg")
    r = cli("inspect", info.path, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    fp = out["footprint"]
    assert fp["weights"] == out["params_bytes"] == info.params_bytes
    assert fp["bss"] >= info.arena_bytes          # the static arena
    assert 500 < fp["text"] < 200_000
    assert fp["flash"] >= fp["text"] + fp["weights"]
    assert sum(m["weights"] for m in fp["members"].values()) == fp["weights"]


# ---------------------------------------------------- atomic output and errors

def test_existing_directory_is_kept_without_force(tmp_path):
    out = tmp_path / "pkg"
    out.mkdir()
    (out / "keep").write_text("mine")
    r = cli("package", MODELS / "tflm_hello_world_int8.tflite", "-o", out)
    assert r.returncode == 2 and "already exists" in r.stderr
    assert [p.name for p in out.iterdir()] == ["keep"]
    r = cli("package", MODELS / "tflm_hello_world_int8.tflite", "-o", out, "--force", "--json")
    assert r.returncode == 0, r.stderr
    assert set(json.loads(r.stdout)) == {"package", "arena_bytes", "arena_lower_bound_bytes",
                                         "params_bytes", "compile_seconds"}
    assert not (out / "keep").exists() and (out / "metadata.json").is_file()


def test_unsupported_op_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    from aot.lower import rules
    monkeypatch.delitem(rules.VALUE_RULES, "Relu")
    path = two_layer(tmp_path)
    code = cli_main(["package", str(path), "-o", str(tmp_path / "pkg")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "Relu" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp.onnx"]
    with pytest.raises(UnsupportedError):
        package(path, board="host", out_dir=tmp_path / "pkg2")
    assert not (tmp_path / "pkg2").exists()


def test_models_larger_than_the_board_are_refused(tmp_path, monkeypatch):
    import dataclasses
    import aot.api
    small = dataclasses.replace(HOST, flash_bytes=100)
    monkeypatch.setattr(aot.api, "get_board", lambda name: small)
    with pytest.raises(AotError, match="do not fit the flash"):
        package(two_layer(tmp_path), board="host", out_dir=tmp_path / "pkg")
    assert not (tmp_path / "pkg").exists()
    tiny_ram = dataclasses.replace(HOST, ram_bytes=100)
    monkeypatch.setattr(aot.api, "get_board", lambda name: tiny_ram)
    with pytest.raises(AotError, match="do not fit the RAM"):
        package(two_layer(tmp_path), board="host", out_dir=tmp_path / "pkg", io_in_arena=True)
    assert not (tmp_path / "pkg").exists()


# ------------------------------------------------------------------ aot run

def test_run_cli_by_name_and_position(tmp_path):
    path = two_layer(tmp_path)
    x = _rng_array((2, 8), 9)
    np.save(tmp_path / "x.npy", x)
    want = aot.interpret(graph_of(path), {"x": x})
    r = cli("package", path, "-o", tmp_path / "pkg")
    assert r.returncode == 0, r.stderr
    for source, spec in ((tmp_path / "pkg", f"x={tmp_path / 'x.npy'}"),
                         (path, str(tmp_path / "x.npy"))):
        out = tmp_path / f"out_{len(spec)}"
        r = cli("run", source, "--board", "host", "--input", spec, "--out", out, "--json")
        assert r.returncode == 0, r.stderr
        assert [o["name"] for o in json.loads(r.stdout)["outputs"]] == ["y1", "y2"]
        for name in ("y1", "y2"):                      # files named after the outputs
            assert_close(name, np.load(out / f"{name}.npy"), want[name], 1e-4, 1e-4)
    r = cli("run", tmp_path / "pkg", "--input", f"nope={tmp_path / 'x.npy'}", "--out",
            tmp_path / "o3")
    assert r.returncode == 2 and "no input 'nope'" in r.stderr and len(r.stderr.splitlines()) == 1
    assert not (tmp_path / "o3").exists()
    (tmp_path / "empty.npy").write_bytes(b"")
    r = cli("run", tmp_path / "pkg", "--input", tmp_path / "empty.npy", "--out", tmp_path / "o4")
    assert r.returncode == 2 and "cannot read" in r.stderr and len(r.stderr.splitlines()) == 1
    assert not (tmp_path / "o4").exists()


def test_stateful_model_harness_starts_from_the_initial_state(tmp_path):
    """The harness resets before each run (carrying state: test_firmware_build)."""
    graph = graph_of(MODELS / "tflm_mnist_lstm_int8.tflite")
    assert graph.variables
    info = package(graph, board="host", out_dir=tmp_path / "pkg")
    inputs = random_inputs(graph, 3)
    first, second = run_twice(graph, inputs)[:2]
    got = run_pkg(info, inputs)      # the harness resets before each run
    np.testing.assert_array_equal(got[graph.outputs[0]], first[graph.outputs[0]])
    assert not np.array_equal(first[graph.outputs[0]], second[graph.outputs[0]])
    meta = info.metadata
    # State lives outside the arena; each update source stays live to the end.
    assert {s["name"] for s in meta["state"]} == set(graph.variables)
    assert meta["state_bytes"] == sum(graph.types[v].nbytes for v in graph.variables)
    rows = {r["name"]: r for r in meta["plan"]["buffers"] if r["kind"] == "tensor"}
    assert not set(graph.variables) & set(rows)
    for s in meta["state"]:
        assert rows[s["update"]]["last"] == len(meta["kernels"])
    # Scratch is live at its own kernel's step only.
    scratch = [r for r in meta["plan"]["buffers"] if r["kind"] == "scratch"]
    assert scratch and all(r["first"] == r["last"] == r["step"] for r in scratch)


def test_reshapes_are_views_not_kernels(tmp_path):
    """A reshape between two layers costs no kernel; one that is a graph output
    keeps its own bytes."""
    w1, w2 = _rng_array((8, 16), 5), _rng_array((8, 3), 6)
    shape_a = np.array([4, 8], np.int64)
    shape_b = np.array([2, 2, 8], np.int64)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Reshape", ["h", "shape_a"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"]),
             helper.make_node("Reshape", ["h", "shape_b"], ["view_out"])]
    path = onnx_model(tmp_path / "views.onnx", nodes, [("x", [2, 8])],
                      [("y", [4, 3]), ("view_out", [2, 2, 8])],
                      [("w1", w1), ("w2", w2), ("shape_a", shape_a), ("shape_b", shape_b)])
    graph = graph_of(path)
    for io_in_arena in (False, True):
        info = package(graph, board="host", out_dir=tmp_path / f"pkg{io_in_arena}", io_in_arena=io_in_arena)
        check_against_interpreter(graph, info)
        ops = [k["ops"] for k in info.metadata["kernels"]]
        assert ops.count(["Reshape"]) == 1, ops          # only the graph output's
        assert len(ops) == len(graph.nodes) - 1


def test_compiler_failure_is_a_clear_error(tmp_path, monkeypatch):
    import dataclasses
    import aot.api
    bad = dataclasses.replace(HOST, target=dataclasses.replace(
        HOST.target, cflags=("-fno-such-flag-for-aot",)))
    monkeypatch.setattr(aot.api, "get_board", lambda name: bad)
    with pytest.raises(AotError, match=r"compiling src/.*failed: .*no-such-flag") as e:
        package(MODELS / "tflm_hello_world_int8.tflite", board="host", out_dir=tmp_path / "pkg")
    assert "\n" not in str(e.value)
    assert not (tmp_path / "pkg").exists() and list(tmp_path.iterdir()) == []


def test_boards_lists_host():
    r = cli("boards", "--json")
    assert r.returncode == 0, r.stderr
    boards = {b["name"]: b for b in json.loads(r.stdout)["boards"]}
    assert boards["host"]["transport"] == "local"


def test_state_starts_from_its_nonzero_initial_value(tmp_path):
    from aot.ir.graph import Graph, Node, TensorType
    t = TensorType((4,), "float32")
    init = np.array([1, -2, 3, -4], np.float32)
    g = Graph("acc", ("x",), ("y",), (Node("Add", "add", ("x", "s"), ("s_new",)),
                                       Node("Relu", "relu", ("s_new",), ("y",))),
              {"x": t, "s": t, "s_new": t, "y": t}, variables={"s": init},
              updates={"s": "s_new"})
    graph = aot.optimize(infer_types(g))
    info = package(graph, board="host", out_dir=tmp_path / "pkg")
    x = np.full(4, 0.5, np.float32)
    np.testing.assert_array_equal(run_pkg(info, {"x": x})["y"], np.maximum(x + init, 0))
    assert info.metadata["state"] == [{"name": "s", "c_name": "acc_state_s", "update": "s_new",
                                       "bytes": 16}]


# ------------------------------------------------------------------ README.md

def readme_blocks(text: str) -> list[str]:
    """The C code blocks of a README."""
    import re
    return re.findall(r"```c\n(.*?)```", text, re.S)


def test_readme_describes_the_package_and_its_example_compiles(tmp_path):
    info = package(MODELS / "mlperf_kws_dscnn_int8.tflite", board="host", threads=2,
                   out_dir=tmp_path / "pkg")
    meta, name = info.metadata, info.name
    text = (info.path / "README.md").read_text()
    assert f"| arena (RAM, the working memory of a run; aligned to {meta['arena_align']}) | " \
        f"{meta['arena_bytes']:,} |" in text
    assert f"| weights (flash, section `.rodata.aot`) | {meta['params_bytes']:,} |" in text
    assert "| input 0 | `input_1` | `input_1` | int8 | 1x49x10x1 | 490 | scale 0.584702909, " \
        "zero point 83 |" in text
    assert "| output 0 | `Identity` | `Identity` | int8 | 1x12 | 12 | scale 0.00390625, " \
        "zero point -128 |" in text
    decls, example = readme_blocks(text)
    header = (info.path / "include" / f"{name}.h").read_text()
    for fn in ("run", "run_with_arena", "init", "deinit", "reset", "failed_check"):
        assert f" {name}_{fn}(" in decls and f" {name}_{fn}(" in header, fn
    assert len(decls.strip().splitlines()) == 6
    assert "-pthread" in text
    for build_file in ("CMakeLists.txt", "Makefile", f"{name}_sections.ld",
                       f"lib/lib{name}.a"):
        assert f"`{build_file}`" in text and (info.path / build_file).is_file(), build_file
    (tmp_path / "use.c").write_text(example)
    r = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-c",
                        f"-I{info.path}/include", f"-I{info.path}/runtime_c",
                        str(tmp_path / "use.c"), "-o", str(tmp_path / "use.o")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # a name with Markdown's table and code characters stays in its cell
    from aot.packaging.readme import render_readme
    odd = {**meta, "inputs": [{**meta["inputs"][0], "name": "a|b`c\nd"}]}
    (row,) = [line for line in render_readme(odd, header).splitlines()
              if line.startswith("| input 0")]
    assert row.startswith("| input 0 | ``a\\|b`c d`` | `input_1` |")
    assert len(re.split(r"(?<!\\)\|", row)) == 9
