"""Hostile names end to end: a model whose every name is an attack on the
generated C (quotes, backslashes, newlines, comment delimiters, trigraphs,
preprocessor lines, unicode, keywords, reserved and colliding names) packages
into C that compiles warning-free under gcc and clang, runs correctly, keeps
the original names in metadata.json and defines nothing the names planted.
Neither `--name` nor a model's name can put a file outside the output
directory.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import aot
from aot.api import package
from aot.deploy import run_package
from aot.targets import get_board
from aot.testing import assert_close, random_inputs
from support import MODELS
from support.c_sources import WARNINGS, compile_api_and_sources, sources
from support.tflite_models import TinyModel

HOST = get_board("host")
PAYLOAD = "AOT_PWNED"          # a macro the names try to define
GLOBAL = "aot_injected_global"  # a variable the names try to declare
LONG = "L" * 300

# Each name attacks differently; the graph uses all of them.
X = f'x"quote\\back\nnew*/ %s%n #define {PAYLOAD} 1 /*'
Y = "a-b"            # collides with two outputs after sanitizing
W = "??=trigraph??/ é"
B = "0bias"
SHAPE = f"#define {PAYLOAD} 2\n#error injected\n"
M = "中文😀 \\"
SCALE = "__x\0nul"
SHIFT = "_Bool"
OUTS = ["a_b", "a.b", "main", LONG + "1", LONG + "2", "aot_model_run\0tail"]
GRAPH_NAME = f'../../x "*/ #define {PAYLOAD} 3'


def hostile_onnx(path: Path, graph_name: str = GRAPH_NAME) -> Path:
    rng = np.random.default_rng(0)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)    # noqa: E731
    node = helper.make_node
    nodes = [
        node("Conv", [X, W, B], ["int"], name="", pads=[1, 1, 1, 1]),
        node("Relu", ["int"], ["a_b"], name=f"*/ int {GLOBAL} = 1; /*"),
        node("Add", ["a_b", Y], ["a.b"], name="return"),
        node("Reshape", ["a.b", SHAPE], ["return"], name="aot_run"),
        node("MatMul", ["return", M], ["main"], name="main\n#include <stdio.h>"),
        node("Mul", ["main", SCALE], [OUTS[3]], name=LONG + "1"),
        node("Add", ["main", SHIFT], [OUTS[4]], name=LONG + "2"),
        node("Sigmoid", ["main"], [OUTS[5]], name="'\\''"),
    ]
    vi = helper.make_tensor_value_info
    inits = [(W, f32(3, 2, 3, 3)), (B, f32(3)), (SHAPE, np.array([1, 75], np.int64)),
             (M, f32(75, 4)), (SCALE, f32(4)), (SHIFT, f32(4))]
    shapes = {"a_b": [1, 3, 5, 5], "a.b": [1, 3, 5, 5]}
    g = helper.make_graph(
        nodes, graph_name,
        [vi(X, TensorProto.FLOAT, [1, 2, 5, 5]), vi(Y, TensorProto.FLOAT, [1, 3, 5, 5])],
        [vi(o, TensorProto.FLOAT, shapes.get(o, [1, 4])) for o in OUTS],
        [numpy_helper.from_array(a, n) for n, a in inits])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8,
                              producer_name=f"*/ #define {PAYLOAD} 4", doc_string="\n*/\n")
    path.write_bytes(model.SerializeToString())
    return path


def run(info, inputs: dict) -> dict:
    meta = info.metadata
    result = run_package(info.path, HOST, [inputs[i["name"]] for i in meta["inputs"]])
    return {o["name"]: a for o, a in zip(meta["outputs"], result.outputs)}


def outside_comments_and_literals(src: Path) -> str:
    """The C code of src with comments (gcc, not expanding anything) and
    string and character literals removed: what the compiler acts on."""
    text = subprocess.run(["gcc", "-std=c99", "-fpreprocessed", "-dD", "-E", "-P", str(src)],
                          capture_output=True, text=True, check=True).stdout
    return re.sub(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', '""', text)


def check_inert(pkg: Path, name: str) -> None:
    """gcc and clang -Werror on the header alone and every source; the planted
    macro and global do not exist."""
    compile_api_and_sources(pkg, name)
    for src in sources(pkg):
        macros = subprocess.run(["gcc", "-std=c99", "-E", "-dM", f"-I{pkg}/include",
                                 f"-I{pkg}/runtime_c", f"-I{pkg}/src", str(src)],
                                capture_output=True, text=True, check=True).stdout
        defined = {line.split()[1].split("(")[0] for line in macros.splitlines()}
        assert PAYLOAD not in defined, src.name
        code = outside_comments_and_literals(src)
        assert f"define {PAYLOAD}" not in code and "#error" not in code, src.name
        assert f"int {GLOBAL}" not in code, src.name
    lib = next((pkg / "lib").glob("*.a"))
    symbols = subprocess.run(["nm", str(lib)], capture_output=True, text=True,
                             check=True).stdout
    assert GLOBAL not in symbols
    for path in pkg.rglob("*"):
        if path.suffix in (".c", ".h", ".S"):
            text = path.read_text()
            assert text.isascii(), path.name
            assert "??" not in text, path.name


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_hostile_onnx_names_compile_clean_and_run(tmp_path, codegen):
    import onnxruntime as ort
    path = hostile_onnx(tmp_path / "hostile.onnx")
    graph = aot.optimize(aot.load(path))
    assert graph.name == GRAPH_NAME
    # clang (the host compiler) builds every source and the harness with -Werror.
    info = package(graph, board="host", codegen=codegen, out_dir=tmp_path / "pkg", extra_cflags=WARNINGS)
    assert info.name.isidentifier() and info.name.isascii()
    assert sorted(os.listdir(tmp_path)) == ["hostile.onnx", "pkg"]
    check_inert(info.path, info.name)
    inputs = random_inputs(graph, 1)
    got = run(info, inputs)
    want = aot.interpret(graph, inputs)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ref = dict(zip(OUTS, sess.run(OUTS, inputs)))
    for name in OUTS:
        assert_close(repr(name), got[name], want[name], 1e-4, 1e-4)
        assert_close(repr(name), got[name], ref[name], 1e-4, 1e-4)
    meta = json.loads((info.path / "metadata.json").read_text())
    assert [i["name"] for i in meta["inputs"]] == [X, Y]
    assert [o["name"] for o in meta["outputs"]] == OUTS
    assert meta["model"] == GRAPH_NAME
    for direction in ("inputs", "outputs"):     # struct members: unique per struct
        c_names = [t["c_name"] for t in meta[direction]]
        assert all(n.isidentifier() and n.isascii() for n in c_names), c_names
        assert len(set(c_names)) == len(c_names), c_names
    assert {B, SCALE, SHIFT} <= {s for p in meta["params"] for s in p["sources"]}
    # Every file is inside the package, named after the C name.
    assert {p.name for p in (info.path / "src").iterdir()} >= {f"{info.name}.c"}
    if codegen == "c":      # the model's name is in the Makefile's comments too
        r = subprocess.run(["make", "-s"], cwd=info.path, capture_output=True, text=True)
        assert r.returncode == 0 and (info.path / "build" / f"lib{info.name}.a").is_file(), r
        run_out_writes_c_names(info.path, inputs, got, tmp_path)


def run_out_writes_c_names(pkg: Path, inputs: dict, want: dict, tmp_path: Path) -> None:
    """`aot run --out DIR` writes each output to DIR/<its C name>.npy: the
    hostile tensor names stay in the report, the files stay inside DIR."""
    from aot.cli import main

    files = []
    for i, (name, array) in enumerate(inputs.items()):
        np.save(tmp_path / f"in{i}.npy", array)
        files += ["--input", f"{name}={tmp_path / f'in{i}.npy'}"]
    out = tmp_path / "out"
    assert main(["run", str(pkg), "--board", "host", *files, "--out", str(out)]) == 0
    meta = json.loads((pkg / "metadata.json").read_text())
    assert sorted(os.listdir(out)) == sorted(f"{o['c_name']}.npy" for o in meta["outputs"])
    for o in meta["outputs"]:
        np.testing.assert_array_equal(np.load(out / f"{o['c_name']}.npy"), want[o["name"]])


def test_hostile_tflite_names(tmp_path):
    m = TinyModel()
    a = m.tensor(X, [1, 4, 5, 3], scale=[0.031], zp=[-5])
    b = m.tensor("", [1, 1, 5, 3], scale=[0.077], zp=[12])      # empty: named by index
    y = m.tensor(SHAPE, [1, 4, 5, 3], scale=[0.05], zp=[2])
    m.op("ADD", [a, b], [y], ("AddOptions", dict(FusedActivationFunction=1)))
    path = tmp_path / "hostile.tflite"
    path.write_bytes(m.build([a, b], [y]))
    graph = aot.optimize(aot.load(path))
    info = package(graph, board="host", out_dir=tmp_path / "pkg", extra_cflags=WARNINGS)
    check_inert(info.path, info.name)
    inputs = random_inputs(graph, 2)
    got = run(info, inputs)
    np.testing.assert_array_equal(got[SHAPE], aot.interpret(graph, inputs)[SHAPE])
    meta = info.metadata
    assert [i["name"] for i in meta["inputs"]] == [X, "tensor_1"]
    assert [o["name"] for o in meta["outputs"]] == [SHAPE]


# ------------------------------------------------------------- file names

def cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "aot", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=600)


@pytest.mark.parametrize("name, c_name", [("../../evil", "evil"), ("/tmp/a/b", "tmp_a_b"),
                                          ("..", "unnamed"), ("x\0y", "x_y"),
                                          ("int", "int_"), ("aot_x", "aot_x_"),
                                          ("9lives", "t9lives"), ("é/中", "e")])
def test_package_names_become_c_names_inside_the_output(tmp_path, monkeypatch, name, c_name):
    """--name is the model's C name and the stem of the package's files: a
    path, a separator, NUL, a keyword become a C identifier, and the package
    goes in -o DIR, or in ./<C name> without -o."""
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    info = package(MODELS / "tflm_hello_world_int8.tflite", board="host", name=name, codegen="llvm")
    assert info.name == c_name and info.path == Path(c_name)
    assert (work / c_name / "include" / f"{c_name}.h").is_file()
    assert os.listdir(tmp_path) == ["a"] and os.listdir(work) == [c_name]
    fixed = {"aot_platform.c", "aot_runtime.h", "main.c", "bench", "metadata.json",
             "Makefile", "CMakeLists.txt", "README.md"}
    files = [p.name for p in (work / c_name).rglob("*") if p.is_file()]
    assert all(f in fixed or f.startswith((c_name, f"lib{c_name}.")) for f in files), files


def test_cli_name_and_model_name_stay_inside_the_output(tmp_path):
    work = tmp_path / "a" / "b" / "work"
    work.mkdir(parents=True)
    model = hostile_onnx(work / "hostile.onnx", graph_name="../../x")
    # Without -o, the default directory is the model file's C name, in the
    # cwd (not the graph's, which is hostile here).
    r = cli("package", model, "--codegen", "llvm", cwd=work)
    assert r.returncode == 0, r.stderr
    r = cli("package", model, "--codegen", "llvm", "--name", "../../evil", "-o", "pkg",
            cwd=work)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path)) == ["a"] and os.listdir(tmp_path / "a") == ["b"]
    assert sorted(os.listdir(work)) == ["hostile", "hostile.onnx", "pkg"]
    assert (work / "pkg" / "include" / "evil.h").is_file()
    assert (work / "hostile" / "include" / "hostile.h").is_file()
    # A file name that is no C name.
    odd = hostile_onnx(tmp_path / '9 "odd*¿ #define\n.onnx', graph_name="")
    r = cli("package", odd, "--codegen", "llvm", cwd=work)
    assert r.returncode == 0, r.stderr
    assert (work / "t9_odd_define" / "include" / "t9_odd_define.h").is_file()
