"""`aot ops`: the listing is the op table and the importers' tables, not a
list of its own: an op added to either shows up, with the dtypes its type
inference accepts."""
from __future__ import annotations

import json

import pytest

import aot.lower  # noqa: F401 - attaches the compute rules to the table
from aot.cli import main
from aot.codegen.c import C_TYPES
from aot.errors import ShapeError
from aot.frontend.onnx import MICROSOFT_OPS
from aot.frontend.tflite.importer import _Builder, converted_builtins
from aot.ops import OPS
from aot.ops.registry import OpDef, Pattern


def ops_json(capsys, *argv) -> dict:
    assert main(["ops", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_lists_every_op_of_the_table(capsys):
    out = ops_json(capsys)
    rows = {r["op"]: r for r in out["ops"]}
    assert list(rows) == sorted(OPS)
    for name, r in rows.items():
        d = OPS[name]
        assert r["pattern"] == d.pattern.name and r["macs"] == (d.macs is not None)
        assert r["lowering"] == (d.rule.kind.value if d.rule else
                                 f"never lowered: {d.never_lowered}")
        assert set(r["dtypes"]) <= set(C_TYPES)
    assert rows["Relu"]["dtypes"] == [d for d in C_TYPES if d != "bool"]
    assert rows["Sqrt"]["dtypes"] == ["float32", "float64", "float16"]
    assert rows["And"]["dtypes"] == ["bool"]
    assert rows["tfl.add"]["dtypes"] == ["int8"] and rows["tfl.add_int16"]["dtypes"] == ["int16"]
    assert rows["Reshape"]["dtypes"] == []          # needs a constant shape: the probe can't tell
    assert rows["Conv"]["macs"] and not rows["Relu"]["macs"]


def test_dtypes_come_from_the_ops_type_inference(capsys, monkeypatch):
    def int8_only(sig):
        if sig.in_types[0].dtype != "int8":
            raise ShapeError("int8 only")
        return [sig.in_types[0]]
    monkeypatch.setitem(OPS, "TestOnlyOp", OpDef("TestOnlyOp", int8_only, lambda c, a: a,
                                                 Pattern.OPAQUE, never_lowered="a test op"))
    (row,) = [r for r in ops_json(capsys)["ops"] if r["op"] == "TestOnlyOp"]
    assert row == {"op": "TestOnlyOp", "pattern": "OPAQUE", "macs": False, "dtypes": ["int8"],
                   "lowering": "never lowered: a test op"}


def test_format_onnx_lists_what_the_onnx_importer_reads(capsys):
    out = ops_json(capsys, "--format", "onnx")
    assert out["format"] == "onnx" and set(out) == {"format", "ops"}
    rows = {(r["name"], r["domain"]): r for r in out["ops"]}
    table = {r["op"]: r for r in ops_json(capsys)["ops"]}
    assert not [n for n, _ in rows if n.startswith("tfl.") or n == "fused"]
    for name in ("Conv", "Relu", "QLinearConv", "LSTM", "Constant", "If", "Loop", "Scan",
                 "Upsample", "Scatter"):
        assert (name, "") in rows, name
    for name in MICROSOFT_OPS:
        assert rows[(name, "com.microsoft")]["op"] == name
    for r in out["ops"]:
        if r["op"] is not None:
            assert r["dtypes"] == table[r["op"]]["dtypes"]
    assert rows[("Constant", "")]["op"] is None
    assert rows[("Upsample", "")]["how"].startswith("an older form")


def test_format_tflite_lists_the_importers_converters(capsys, monkeypatch):
    out = ops_json(capsys, "--format", "tflite")
    names = [r["name"] for r in out["ops"]]
    assert names == converted_builtins()
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "SOFTMAX", "WHILE"} <= set(names)
    assert "Conv" not in names
    monkeypatch.setattr(_Builder, "_op_MADE_UP_OP", lambda self, op, ins, outs: None,
                        raising=False)
    assert "MADE_UP_OP" in [r["name"] for r in ops_json(capsys, "--format", "tflite")["ops"]]


def test_text_and_bad_format(capsys):
    assert main(["ops"]) == 0
    text = capsys.readouterr().out
    assert f"{len(OPS)} ops; the ONNX importer reads" in text
    assert main(["ops", "--format", "tflite"]) == 0
    assert "FULLY_CONNECTED" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["ops", "--format", "caffe"])
    assert e.value.code == 2 and "invalid choice: 'caffe'" in capsys.readouterr().err
