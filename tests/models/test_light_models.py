"""The onnx package's "light" ImageNet models on the host, as `aot verify`
does it: package, run the harness, compare with ONNX Runtime (random
deterministic input, rtol = atol = 1e-4).

The light files are the zoo architectures with their weights stripped: each
weight is `ConstantOfShape(shape) = 0.02`, so a file is a few KB. Packaging
needs the weights as data (aot folds only small constants; a large fill is
cheaper to compute than to store), and equal weights would make every
channel alike. So each model is first given real weights: every fill
becomes an initializer of deterministic random values (unit-gain kernels,
scales and variances near 1, small biases and means).
The final Softmax is dropped too: with random weights it saturates to one
hot, where any kernel error would vanish; the logits show it.

The files as shipped verify too (test_shipped_light_model_verifies): aot
materializes a fill a Conv reads as its weight, so it links a real blob;
with equal weights the check is weaker, hence both tests.

Only models with at most 50 MB of weights run (the weights one would put
in a large MCU's flash or an MPU's); they must reach the package as a
binary blob linked as an object, not as megabytes of C text.
"""
from __future__ import annotations

import subprocess
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from aot.api import verify
from aot.cli import main as cli_main

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MAX_WEIGHTS = 50 * 2**20
EXPECTED = {"light_squeezenet", "light_shufflenet", "light_inception_v1",
            "light_inception_v2", "light_densenet121"}
# The LLVM backend emits in-process: densenet121 alone takes ~25 s CPU there,
# the inceptions 15 to 38 s, and their kernels are squeezenet's and
# shufflenet's again (convolutions, a folded BatchNormalization, pools,
# concat, gemm); all three still verify through C.
LLVM_TOO = {"light_squeezenet", "light_shufflenet"}
MAX_PARAMS_C = 64 * 1024   # the params .c holds declarations and small arrays only


def fills(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Weight name -> shape, for every ConstantOfShape of a constant shape."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return {n.output[0]: [int(d) for d in inits[n.input[0]]] for n in model.graph.node
            if n.op_type == "ConstantOfShape" and n.input[0] in inits}


def weight_bytes(path: Path) -> int:
    """Bytes of weights the model computes: its fills plus real initializers."""
    model = onnx.load(path)
    shapes = fills(model)
    used = {i for n in model.graph.node if n.op_type != "ConstantOfShape" for i in n.input}
    real = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer
               if t.name in used)
    return real + sum(4 * int(np.prod(s)) for s in shapes.values())


# Operand positions that scale (rather than shift) a tensor.
SCALING = {"BatchNormalization": (1, 4), "Mul": (0, 1)}


def multipliers(model: onnx.ModelProto) -> set[str]:
    """Tensors used as scales or variances, also through an Unsqueeze or
    Reshape (densenet's BatchNorm is Unsqueeze + Mul + Add)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    out = set()
    for n in model.graph.node:
        for k in SCALING.get(n.op_type, ()):
            name = n.input[k] if k < len(n.input) else ""
            while name in producer and producer[name].op_type in ("Unsqueeze", "Reshape"):
                out.add(name)
                name = producer[name].input[0]
            out.add(name)
    return out


def with_weights(src: Path, dst: Path) -> Path:
    """`src` with every fill replaced by random weights, and logits out."""
    model = onnx.load(src)
    shapes = fills(model)
    rng = np.random.default_rng(zlib.crc32(src.stem.encode()))
    scales = multipliers(model)
    weights = []
    for name, shape in shapes.items():
        if len(shape) >= 2:       # kernels: unit gain (LeCun), the logits stay O(10)
            a = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
        elif name in scales:      # BatchNorm scale and variance, Mul: near 1
            a = rng.uniform(0.5, 1.5, shape)
        else:                     # biases, means: small, either sign
            a = rng.uniform(-0.1, 0.1, shape)
        weights.append(numpy_helper.from_array(a.astype(np.float32), name))
    g = model.graph
    nodes = [n for n in g.node if n.output[0] not in shapes]
    last = nodes[-1]
    if last.op_type == "Softmax" and [o.name for o in g.output] == list(last.output):
        nodes.pop()
        g.ClearField("output")
        g.output.append(helper.make_tensor_value_info(last.input[0], onnx.TensorProto.FLOAT,
                                                      None))
    used = {i for n in nodes for i in n.input}
    inits = [t for t in g.initializer if t.name in used]
    # IR 3 lists every initializer as a graph input too: keep the data inputs.
    consts = {t.name for t in g.initializer} | set(shapes)
    inputs = [i for i in g.input if i.name not in consts]
    for field, items in (("node", nodes), ("initializer", [*inits, *weights]),
                         ("input", inputs)):
        g.ClearField(field)
        getattr(g, field).extend(items)
    model.ir_version = max(model.ir_version, 4)
    dst.write_bytes(model.SerializeToString())
    return dst


SIZES = {p.stem: weight_bytes(p) for p in sorted(LIGHT_DIR.glob("light_*.onnx"))}
SMALL = sorted(name for name, size in SIZES.items() if size <= MAX_WEIGHTS)


def test_the_light_models_under_50_mb():
    """The selection is the models' weights, not a list: five fit, the
    others (alexnet, resnet50, vgg19, zfnet512: 100-550 MB) do not."""
    assert set(SMALL) == EXPECTED, SIZES
    assert min(size for name, size in SIZES.items() if name not in SMALL) > 1.5 * MAX_WEIGHTS


@pytest.fixture(scope="module")
def weighted(tmp_path_factory):
    """Model name -> the model with weights (written once per module)."""
    d = tmp_path_factory.mktemp("light")
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = with_weights(LIGHT_DIR / f"{name}.onnx", d / f"{name}.onnx")
        return made[name]
    return get


def check_blob(pkg: Path, out: dict, weights: int) -> None:
    """The weights are in the package as raw bytes assembled into an object
    of the library; the C params file only declares them."""
    name = Path(next((pkg / "include").glob("*.h"))).stem
    src = pkg / "src"
    params_c = src / f"{name}_params.c"
    assert params_c.stat().st_size < MAX_PARAMS_C, params_c.stat().st_size
    blob = (src / f"{name}_params.bin").stat().st_size
    assert blob >= 0.9 * out["package"]["params_bytes"] >= 0.9 * 0.9 * weights
    assert f"{name}_params.bin" in (src / f"{name}_params_blob.S").read_text()
    members = subprocess.run(["ar", "t", str(pkg / "lib" / f"lib{name}.a")], check=True,
                             capture_output=True, text=True).stdout.split()
    assert f"{name}_params_blob.o" in members, members


# inception_v2 is inception_v1's kernels on larger tensors, densenet121
# squeezenet's concatenations and convolutions many times over: their size
# checks above are enough.
VERIFIED = EXPECTED - {"light_inception_v2", "light_densenet121"}


@pytest.mark.parametrize("name,codegen", [*((n, "c") for n in sorted(VERIFIED)),
                                           *((n, "llvm") for n in sorted(LLVM_TOO))])
def test_light_model_verifies(name: str, codegen: str, weighted, tmp_path, record_property):
    out = verify(weighted(name), board="host", codegen=codegen, out_dir=tmp_path / "pkg")
    pkg = out["package"]
    record_property("summary", f"{name} ({codegen}): max |error| "
                    f"{max(r['max_abs_err'] or 0 for r in out['outputs']):.3g}, params "
                    f"{pkg['params_bytes']} B, arena {pkg['arena_bytes']} B, compiled in "
                    f"{pkg['compile_seconds']:.1f} s")
    assert out["reference"] == "onnxruntime" and out["inputs"] == "random", out
    assert out["ok"] is True, out
    check_blob(tmp_path / "pkg", out, SIZES[name])


@pytest.mark.parametrize("name", ["light_squeezenet"])
def test_shipped_light_model_verifies(name: str, tmp_path):
    """The unmodified file, as a user would run `aot verify` on it."""
    out = verify(LIGHT_DIR / f"{name}.onnx", board="host", codegen="c", out_dir=tmp_path / "pkg")
    assert out["reference"] == "onnxruntime" and out["ok"] is True, out
    # Identical fills are stored once, so params fall below the weights' sum.
    check_blob(tmp_path / "pkg", out, weights=0)


def test_a_board_with_less_flash_refuses_at_once(weighted, tmp_path, monkeypatch, capsys):
    """A board whose flash cannot hold the weights: one line, exit 2, no
    package, and nothing optimized or compiled first."""
    import aot.api
    boards = tmp_path / "boards"
    boards.mkdir()
    (boards / "small.toml").write_text(
        'name = "small"\ntarget = "x86_64-linux"\ntransport = "local"\n'
        'description = "the host with 4 MB of flash"\n'
        f"flash_bytes = {4 * 2**20}\nram_bytes = {2**30}\n")
    monkeypatch.setenv("AOT_BOARDS_DIR", str(boards))

    def no_work(*args, **kwargs):
        raise AssertionError("optimized a model that cannot fit")
    monkeypatch.setattr(aot.api, "as_graph", no_work)
    model = weighted("light_squeezenet")          # 4.9 MB of weights
    for argv in (["package", str(model), "--board", "small", "-o", str(tmp_path / "pkg")],
                 ["verify", str(model), "--board", "small"]):
        assert cli_main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert "do not fit the flash of board 'small'" in err, err
        assert f"({4 * 2**20} bytes)" in err, err
    assert not (tmp_path / "pkg").exists()
