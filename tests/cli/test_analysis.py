"""`aot analyze`: MACs from the op table against an independent count read
straight from the model files, arena places against the package's plan,
code sizes from the compiled library, the JSON, the plot and the errors;
MACs per kernel in `aot bench --profile`; the table at 80 columns and the
--report files."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest

import aot
from aot.analysis import analyze, print_report
from aot.api import package
from aot.cli import main
from support import MODELS

KWS = MODELS / "mlperf_kws_dscnn_int8.tflite"
# Conv, depthwise and fully connected MACs of the MLPerf Tiny models
# (batch 1), counted by hand from their architectures.
MLPERF_MACS = {"kws_dscnn": 2_656_768, "vww_mbv1": 7_489_664, "ic_resnet8": 12_501_632}


def tflite_macs(path) -> int:
    """CONV_2D out_h*out_w*out_c*k_h*k_w*in_c, DEPTHWISE_CONV_2D
    out_h*out_w*out_c*k_h*k_w, FULLY_CONNECTED out*in, from the flatbuffer's
    tensor shapes alone (no aot code)."""
    import tflite

    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    sg = model.Subgraphs(0)
    total = 0
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex())
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        out = [int(d) for d in sg.Tensors(op.Outputs(0)).ShapeAsNumpy()]
        w = [int(d) for d in sg.Tensors(op.Inputs(1)).ShapeAsNumpy()] if op.InputsLength() > 1 \
            else []
        if builtin == tflite.BuiltinOperator.CONV_2D:              # w [O, KH, KW, I]
            total += out[1] * out[2] * out[3] * w[1] * w[2] * w[3]
        elif builtin == tflite.BuiltinOperator.DEPTHWISE_CONV_2D:  # w [1, KH, KW, O]
            total += out[1] * out[2] * out[3] * w[1] * w[2]
        elif builtin == tflite.BuiltinOperator.FULLY_CONNECTED:    # w [O, I]
            total += int(np.prod(out)) * w[1]
    return total


@pytest.mark.parametrize("model", sorted(MLPERF_MACS))
@pytest.mark.parametrize("kind", ["int8", "f32"])
def test_total_macs_match_an_independent_count(model, kind):
    path = MODELS / f"mlperf_{model}_{kind}.tflite"
    independent = tflite_macs(path)
    assert independent == MLPERF_MACS[model]
    got = analyze(path, board="host", code_size=False)["total_macs"]
    assert abs(got - independent) <= 0.02 * independent, (got, independent)


def test_macs_of_an_lstm_and_onnx_dense_ops():
    # 28 steps x 4 gates x 20 units x (28 inputs + 20 recurrent), then 28*20 x 10 dense
    lstm = analyze(MODELS / "tflm_mnist_lstm_f32.tflite", board="host", code_size=False)
    assert [layer["macs"] for layer in lstm["layers"]] == [28 * 4 * 20 * 48, 560 * 10, 0]
    # onnx_mnist8: Conv 5x5 1->8 on 28x28, Conv 5x5 8->16 on 14x14, MatMul 256x10
    mnist = aot.analyze(MODELS / "onnx_mnist8.onnx", board="host", code_size=False)
    assert mnist["total_macs"] == 28 * 28 * 8 * 25 + 14 * 14 * 16 * 25 * 8 + 256 * 10


def analysis_and_package(model, tmp):
    """The analysis of a model with code sizes, and the metadata of its package."""
    pkg = package(model, board="host", out_dir=tmp / "pkg").path
    return analyze(model, board="host"), json.loads((pkg / "metadata.json").read_text())


@pytest.fixture(scope="module")
def kws(tmp_path_factory):
    return analysis_and_package(KWS, tmp_path_factory.mktemp("kws"))


@pytest.fixture(scope="module")
def ic(tmp_path_factory):
    """resnet8 writes each residual add's output over its input (plan rows' "then")."""
    return analysis_and_package(MODELS / "mlperf_ic_resnet8_int8.tflite",
                                tmp_path_factory.mktemp("ic"))


@pytest.mark.parametrize("which", ["kws", "ic"])
def test_layers_are_the_packages_kernels_and_places(which, request):
    report, meta = request.getfixturevalue(which)
    assert [(la["step"], la["name"], la["symbol"], la["macs"]) for la in report["layers"]] == \
        [(k["step"], k["name"], k["symbol"], k["macs"]) for k in meta["kernels"]]
    for key in ("arena_bytes", "arena_lower_bound_bytes"):
        assert report[key] == meta[key]
    assert report["weights_bytes"] == meta["params_bytes"]
    assert report["total_macs"] == sum(k["macs"] for k in meta["kernels"])
    rows = {(r["kind"], r.get("step"), r["name"]): r for r in meta["plan"]["buffers"]}
    in_place = [(later, t) for t in meta["plan"]["buffers"] for later in t.get("then", ())]
    assert bool(in_place) == (which == "ic")
    for later, t in in_place:          # written over t: lives in t's buffer
        rows[("tensor", None, later)] = t
    arena = 0
    for layer in report["layers"]:
        for t in layer["tensors"]:
            if t["place"] != "arena":
                assert t["offset"] is None and t["place"] in ("input", "output", "state")
                continue
            key = ("scratch", layer["step"], t["name"]) if t["access"] == "scratch" \
                else ("tensor", None, t["name"])
            row = rows[key]
            assert (t["offset"], t["first"], t["last"]) == \
                (row["offset"], row["first"], row["last"])
            assert t["first"] <= layer["step"] <= t["last"]
            arena = max(arena, t["offset"] + t["size"])
        assert layer["activations_written_bytes"] == sum(
            t["size"] for t in layer["tensors"] if t["access"] == "write")
    assert arena <= report["arena_bytes"]
    conv = report["layers"][0]
    assert conv["weights_bytes"] > 0 and conv["activations_written_bytes"] > 0
    assert conv["activations_read_bytes"] == {"kws": 49 * 10, "ic": 32 * 32 * 3}[which]


def test_code_sizes_from_the_compiled_library(kws):
    report, meta = kws
    sizes = [layer["code_bytes"] for layer in report["layers"]]
    assert all(s > 0 for s in sizes)
    assert report["kernels_code_bytes"] == sum(sizes) <= report["memory"]["code_bytes"]
    assert report["memory"]["weight_bytes"] == meta["footprint"]["weights"]


def test_cli_json_and_plot(tmp_path, capsys):
    plot = tmp_path / "kws.png"
    assert main(["analyze", str(KWS), "--json", "--plot", str(plot)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"model", "board", "layers", "total_macs", "weights_bytes", "arena_bytes",
            "arena_lower_bound_bytes"} <= set(out)
    # without --board: the default board ($AOT_BOARD, host in the tests), nothing compiled
    assert out["board"] == "host" and "memory" not in out
    layer = out["layers"][0]
    assert {"name", "ops", "macs", "weights_bytes", "activations_read_bytes",
            "activations_written_bytes", "tensors"} <= set(layer)
    assert "code_bytes" not in layer
    assert set(layer["tensors"][0]) == {"name", "access", "place", "size", "offset", "first",
                                        "last"}
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["kws.png"]      # no temp file left


def test_cli_table(capsys):
    assert main(["analyze", str(KWS)]) == 0
    text = capsys.readouterr().out
    assert "softmax_12" in text and "2,656,768" in text and "lower bound" in text


def test_errors_are_one_line(tmp_path, capsys, kws):
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"not a flatbuffer")
    plot = tmp_path / "p.png"
    for argv, needle in (([str(bad), "--plot", str(plot)], "not a TFLite model"),
                         ([str(tmp_path)], "not a package directory"),
                         ([str(KWS), "--plot", str(tmp_path / "k.svg")], "PNG file"),
                         ([str(KWS), "--plot", str(tmp_path / "no" / "k.png")],
                          "does not exist"),
                         ([str(KWS), "--board", "nope"], "nope")):
        assert main(["analyze", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.tflite"]


def test_bench_profile_reports_macs_per_kernel(kws, capsys):
    report, _ = kws
    assert main(["bench", str(KWS), "--board", "host", "--repeat", "5", "--warmup", "1",
                 "--profile", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["profile"]
    assert [r["macs"] for r in rows] == [layer["macs"] for layer in report["layers"]]
    for r in rows:
        if r["macs"]:
            assert r["macs_per_us"] == pytest.approx(r["macs"] / (r["median_ms"] * 1000))
        else:
            assert r["macs_per_us"] in (0, None)


def test_table_never_cuts_a_long_kernel_name(kws, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    report, _ = kws
    name = "fused_conv2d_relu_" + "x" * 90 + "_end"
    layers = [{**report["layers"][0], "name": name}, *report["layers"][1:]]
    print_report({**report, "layers": layers})
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80
    # the kernel column's pieces of the first row, read down until the next row
    start = next(i for i, line in enumerate(lines) if " 0 " in line and "fused_" in line)
    col = lines[start].index("fused_")
    pieces = []
    for line in lines[start:]:
        piece = line[col:].split(" ", 1)[0]
        if not piece or (pieces and line[:col].strip()):
            break
        pieces.append(piece)
    assert "".join(pieces) == name
    assert f"{layers[0]['macs']:,}" in lines[start]          # the numbers whole


def test_plot_without_matplotlib_fails_before_any_work(tmp_path, capsys, monkeypatch):
    import aot.packaging.build

    monkeypatch.setitem(sys.modules, "matplotlib", None)      # as if not installed
    monkeypatch.setattr(aot.packaging.build, "generate", lambda *a, **k: pytest.fail("worked"))
    assert main(["analyze", str(KWS), "--plot", str(tmp_path / "k.png")]) == 2
    assert capsys.readouterr().err.strip() == \
        "aot: error: --plot needs matplotlib: pip install 'aot[plot]'"
    assert list(tmp_path.iterdir()) == []


def test_markdown_report_with_the_plot_beside_it(tmp_path, capsys):
    md, png = tmp_path / "kws.md", tmp_path / "plots" / "kws.png"
    png.parent.mkdir()
    assert main(["analyze", str(KWS), "--json", "--report", str(md), "--plot", str(png)]) == 0
    out = json.loads(capsys.readouterr().out)
    text = md.read_text()
    assert text.startswith(f"# {out['model']} for host\n")
    for section in ("## Model", "## Memory", "## Kernels"):
        assert section in text
    assert "## Pools" not in text         # no --pools
    assert f"| arena (RAM) | {out['arena_bytes']:,} |" in text
    assert f"| weights (flash) | {out['weights_bytes']:,} |" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and " | tfl." in line]
    assert [row.split(" | ")[1] for row in rows] == [la["name"] for la in out["layers"]]
    assert [row.split(" | ")[3] for row in rows] == [f"{la['macs']:,}" for la in out["layers"]]
    assert "![memory plan and MACs per kernel](<plots/kws.png>)" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kws.md", "plots"]
    # the same analysis, the same bytes
    again = tmp_path / "again.md"
    assert main(["analyze", str(KWS), "--report", str(again), "--plot", str(png)]) == 0
    assert again.read_bytes() == md.read_bytes()


def test_html_report_embeds_the_charts_and_lists_pools(tmp_path, capsys):
    import base64
    import re

    page = tmp_path / "kws.html"
    assert main(["analyze", str(KWS), "--board", "mps3-an547", "--pools", "--json",
                 "--report", str(page)]) == 0
    out = json.loads(capsys.readouterr().out)
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    for layer in out["layers"]:
        assert f"<td>{layer['name']}</td>" in text
        assert f'<td class="n">{layer["code_bytes"]:,}</td>' in text
    assert "<h2>Pools</h2>" in text
    for pool, size in out["memory_pools"].items():
        assert f'<tr><td>{pool}</td><td class="n">{size:,}</td></tr>' in text
    assert f'<td class="n">{out["memory"]["code_bytes"]:,}</td>' in text
    (data,) = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["kws.html"]       # no PNG, no temp


def test_html_report_without_matplotlib_has_no_chart(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    page = tmp_path / "kws.html"
    analyze(KWS, board="host", code_size=False, report=page)
    text = page.read_text()
    assert "<h2>Kernels</h2>" in text and "<img" not in text


def test_report_errors_leave_nothing(tmp_path, capsys, monkeypatch):
    for argv, needle in ((["--report", str(tmp_path / "no" / "r.md")], "does not exist"),
                         (["--report", str(tmp_path)], "is a directory")):
        assert main(["analyze", str(KWS), *argv]) == 2, argv
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []
    import os

    def fail(*args):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", fail)      # the last step of the write fails
    with pytest.raises(OSError):
        analyze(KWS, board="host", code_size=False, report=tmp_path / "r.md")
    assert list(tmp_path.iterdir()) == []
