"""What aot reads back from its own files, hostile: a package's
metadata.json (aot run, verify, inspect), tuning records (aot package
--tuning-records) and the harness's report. Each shape is refused in one
line naming the file and the field, exit 2, nothing written: never a
RecursionError, ValueError or MemoryError (exit 3)."""
from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

from aot.errors import AotError
from support import MODELS

TINY = MODELS / "tflm_hello_world_int8.tflite"


def tensor(name: str, shape: list[int], dtype: str = "int8", **more) -> dict:
    import numpy as np
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return {"name": name, "c_name": name, "shape": shape, "dtype": dtype, "bytes": size, **more}


# What aot package writes, cut to the fields read back.
META = {
    "name": "tiny", "model": "tiny", "board": "host", "codegen": "c",
    "target": {"name": "x86_64-linux", "triple": "x86_64-unknown-linux-gnu", "cpu": "x86-64-v3",
               "features": "+avx2", "cflags": ["-O2"]},
    "inputs": [tensor("x", [1, 4], quant={"scale": [0.5], "zero_point": [3], "axis": None})],
    "outputs": [tensor("y", [1, 2], "float32")],
    "arena_bytes": 64, "arena_lower_bound_bytes": 64, "params_bytes": 16, "state": [],
    "state_bytes": 0, "kernels": [{"step": 0, "name": "k0", "symbol": "tiny_k0", "ops": ["Add"],
                                   "sources": ["n0"], "macs": 0, "args": []}],
    "profile": False, "checks": False, "package_format": 1,
    "source": {"file": "tiny.tflite", "sha256": "0" * 64},
}


def edited(change) -> str:
    meta = copy.deepcopy(META)
    change(meta)
    return json.dumps(meta)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# (hostile metadata.json text, what the one-line error says after the path)
HOSTILE_METADATA = {
    "nested 100k deep": (nested(100_000), "column 33: nested deeper than 32 levels"),
    "nested in a field": (json.dumps(META)[:-1] + ', "footprint": ' + nested(50_000) + "}",
                          "nested deeper than 32 levels"),
    "a list": ("[1, 2]", "must be an object, got a list"),
    "not JSON": ("{'name': 1}", "not JSON at column 2"),
    "no outputs": (edited(lambda m: m.pop("outputs")), "lacks outputs"),
    "no inputs and no name": (edited(lambda m: [m.pop("inputs"), m.pop("name")]),
                              "lacks name, inputs"),
    "an unknown dtype": (edited(lambda m: m["inputs"][0].update(dtype="float128")),
                         "inputs[0].dtype must be one of float32"),
    "an object dtype": (edited(lambda m: m["outputs"][0].update(dtype="object")),
                        "outputs[0].dtype must be one of float32"),
    "a dtype object": (edited(lambda m: m["outputs"][0].update(dtype={"kind": "f"})),
                       "outputs[0].dtype must be one of float32, float64, float16, int8"),
    "a shape of 2^40": (edited(lambda m: m["inputs"][0].update(shape=[1 << 40], bytes=1 << 40)),
                        "inputs[0].shape: shape [1099511627776] exceeds the limit of"),
    "a shape of strings": (edited(lambda m: m["inputs"][0].update(shape=["1", "4"])),
                           "inputs[0].shape[0] must be an integer, got a string"),
    "a negative dimension": (edited(lambda m: m["outputs"][0].update(shape=[-1, 2])),
                             "outputs[0].shape: dimension -1"),
    "rank 40": (edited(lambda m: m["outputs"][0].update(shape=[1] * 40)),
                "rank 40 exceeds the limit of 32"),
    "inputs as a string": (edited(lambda m: m.update(inputs="x")),
                           "inputs must be a list of objects, got a string"),
    "an input as a list": (edited(lambda m: m.update(inputs=[["x"]])),
                           "inputs[0] must be an object, got a list"),
    'format "1"': (edited(lambda m: m.update(package_format="1")),
                   "package_format must be an integer, got a string"),
    "format true": (edited(lambda m: m.update(package_format=True)),
                    "package_format must be an integer, got a boolean"),
    "format 2": (edited(lambda m: m.update(package_format=2)),
                 "package format 2 is newer than this aot reads (1)"),
    "a path for a C name": (edited(lambda m: m["outputs"][0].update(c_name="../../escaped")),
                            "outputs[0].c_name must be a C identifier of at most 63 characters, "
                            "got '../../escaped'"),
    "a path for the package name": (edited(lambda m: m.update(name="../lib")),
                                    "name must be a C identifier"),
    "a package name of 1000 characters": (edited(lambda m: m.update(name="x" * 1000)),
                                          "name must be a C identifier of at most 63"),
    "a C name of 1000 characters": (edited(lambda m: m["outputs"][0].update(c_name="y" * 1000)),
                                    "outputs[0].c_name must be a C identifier of at most 63"),
    "two outputs named alike": (edited(lambda m: m["outputs"].append(dict(m["outputs"][0]))),
                                "outputs[1].name repeats outputs[0]'s 'y'"),
    "two inputs of one C name": (edited(lambda m: m["inputs"].append(
        {**m["inputs"][0], "name": "x2"})), "inputs[1].c_name repeats inputs[0]'s 'x'"),
    "bytes beside the shape": (edited(lambda m: m["outputs"][0].update(bytes=1 << 30)),
                               "outputs[0].bytes must be 8 for float32[1, 2], got 1073741824"),
    "bytes negative": (edited(lambda m: m["outputs"][0].update(bytes=-8)),
                       "outputs[0].bytes must be an integer >= 0, got -8"),
    "a scale of NaN": (edited(lambda m: m["inputs"][0]["quant"].update(scale=[1.0]))
                       .replace("[1.0]", "[NaN]"), "the number NaN is not a finite number"),
    "a 5000-digit arena": (edited(lambda m: m.update(arena_bytes=7)).replace(
        '"arena_bytes": 7', '"arena_bytes": ' + "9" * 5000), "has 5000 digits (at most 40)"),
    "1e999 bytes": (edited(lambda m: m.update(params_bytes=7)).replace(
        '"params_bytes": 7', '"params_bytes": 1e999'), "the number 1e999 is beyond"),
    "scales without zero points": (edited(lambda m: m["inputs"][0]["quant"].update(
        zero_point=[])), "inputs[0].quant must have as many scales as zero points"),
    "a quant axis past the rank": (edited(lambda m: m["inputs"][0]["quant"].update(
        axis=5, scale=[1.0] * 4, zero_point=[0] * 4)), "inputs[0].quant.axis must be below"),
    "profile as a string": (edited(lambda m: m.update(profile="false")),
                            "profile must be a boolean, got a string"),
    "kernels as an object": (edited(lambda m: m.update(kernels={"0": {}})),
                             "kernels must be a list of objects, got an object"),
    "a bound input of dtype object": (edited(lambda m: m["source"].update(
        bind={"x": {"dtype": "O", "shape": [1], "values": [1]}})),
        "source.bind.x.dtype must be one of"),
    "a bound input of 2^40": (edited(lambda m: m["source"].update(
        bind={"x": {"dtype": "int8", "shape": [1 << 20, 1 << 20], "values": [1]}})),
        "source.bind.x.shape: shape [1048576, 1048576] exceeds"),
    "a model file name of 1000 characters": (edited(lambda m: m["source"].update(
        file="f" * 1000)), "source.file must be a file name of at most 255 bytes"),
    "a model file path": (edited(lambda m: m["source"].update(file="../../etc/passwd")),
                          "source.file must be a file name"),
    "codegen unknown": (edited(lambda m: m.update(codegen="asm")),
                        "codegen must be one of c, llvm, got 'asm'"),
}


def package_with(tmp_path: Path, text: str) -> Path:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "metadata.json").write_text(text)
    return pkg


@pytest.mark.parametrize("case", sorted(HOSTILE_METADATA))
def test_hostile_metadata_is_one_line_naming_the_field(tmp_path, case):
    from aot.packaging.metadata import read_metadata

    text, message = HOSTILE_METADATA[case]
    pkg = package_with(tmp_path, text)
    with pytest.raises(AotError) as e:
        read_metadata(pkg)
    assert str(e.value).startswith(f"{pkg / 'metadata.json'}: ") and message in str(e.value)
    assert "\n" not in str(e.value)


def test_the_written_fields_pass():
    from aot.packaging.metadata import check_metadata

    assert check_metadata(copy.deepcopy(META), "m") == META
    older = {k: v for k, v in META.items() if k not in ("package_format", "state", "kernels")}
    assert check_metadata(older, "m") == older      # format 0, optional fields left out
    assert check_metadata({**META, "added_later": [{"x": 1}]}, "m")["added_later"]


@pytest.mark.parametrize("command", [["run", "--input", "x.npy"], ["verify"], ["inspect"],
                                     ["bench"]])
@pytest.mark.parametrize("case", ["nested 100k deep", "no outputs", "an object dtype",
                                  "a shape of 2^40", "inputs as a string", 'format "1"',
                                  "a package name of 1000 characters"])
def test_commands_refuse_hostile_metadata_with_exit_2(tmp_path, capsys, monkeypatch, command,
                                                      case):
    from aot.cli import main

    text, message = HOSTILE_METADATA[case]
    pkg = package_with(tmp_path, text)
    monkeypatch.chdir(tmp_path)
    before = sorted(os.listdir(tmp_path))
    args = [command[0], str(pkg), *(["--board", "host"] if command[0] != "inspect" else []),
            *command[1:]]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"aot: error: {pkg / 'metadata.json'}: ") and message in err, err
    assert err.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == before


def test_a_metadata_file_too_large_is_not_read(tmp_path, monkeypatch):
    from aot.packaging import metadata

    monkeypatch.setattr(metadata, "MAX_METADATA_BYTES", 1000)
    pkg = package_with(tmp_path, json.dumps({**META, "pad": "x" * 2000}))
    with pytest.raises(AotError, match="larger than 1000 bytes"):
        metadata.read_metadata(pkg)


def test_metadata_not_utf8(tmp_path):
    from aot.packaging.metadata import read_metadata

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "metadata.json").write_bytes(b'{"name": "\xff"}')
    with pytest.raises(AotError, match="byte 10 is not UTF-8"):
        read_metadata(pkg)


# ------------------------------------------------------------------ the JSON reader

@pytest.mark.parametrize("text, message", [
    (nested(100_000), "column 33: nested deeper than 32 levels"),
    ("{" + '"a":{' * 40 + "}" * 41, "nested deeper than 32 levels"),
    ("[" + "9" * 5000 + "]", "has 5000 digits (at most 40)"),
    ("[-" + "9" * 41 + "]", "has 41 digits"),
    ("[1." + "5" * 100 + "]", "has 102 characters"),
    ("[NaN]", "NaN is not a finite number"),
    ("[-Infinity]", "-Infinity is not a finite number"),
    ("[1e400]", "1e400 is beyond a double's range"),
    ('{"a": 1,\n "b": }', "not JSON at line 2 column 7"),
    ("", "not JSON at column 1"),
])
def test_the_reader_bounds_what_json_loads_trusts(text, message):
    from aot.support.jsonfile import loads

    with pytest.raises(AotError) as e:
        loads(text, "f.json")
    assert str(e.value).startswith("f.json: ") and message in str(e.value), str(e.value)


def test_brackets_inside_strings_are_not_nesting():
    from aot.support.jsonfile import loads

    text = json.dumps({"a": "[" * 1000, "b": ['\\"{{{{', "]]]"]})
    assert loads(text, "f", max_depth=2) == json.loads(text)


# ------------------------------------------------------------------ tuning records

RECORD = {"workload": "w", "target": "x86_64-linux", "config": {}, "ms": 0.5, "board": "host",
          "aot_version": "0.1.0", "version": 1}


@pytest.mark.parametrize("line, message", [
    (nested(30_000), "line 2: column 4: nested deeper than 3 levels"),
    (nested(100_000), "line 2: longer than 65536 bytes"),
    (json.dumps(RECORD).replace("0.5", "9" * 5000), "line 2: column 65: the number 9999"),
    (json.dumps(RECORD).replace("0.5", "NaN"), "line 2: column 65: the number NaN"),
    (json.dumps({**RECORD, "version": "1"}), "line 2: version must be an integer, got a string"),
    (json.dumps({**RECORD, "board": ["host"]}), "line 2: board must be a non-empty string"),
    (json.dumps({**RECORD, "instructions": -3}), "line 2: instructions must be an integer >= 0"),
    (json.dumps({**RECORD, "default_ms": "1"}), "line 2: default_ms must be a finite time"),
    (json.dumps({**RECORD, "config": []}), "line 2: config must be an object, got a list"),
    (json.dumps({**RECORD, "config": {"tile": {"mr": "x" * 10000}}}),
     "line 2: config: tile takes positive integers"),
    ("[1]", "line 2: a tuning record is a JSON object, got a list"),
])
def test_hostile_tuning_records_name_their_line(tmp_path, line, message):
    from aot.tune.records import read

    log = tmp_path / "t.jsonl"
    log.write_text(json.dumps(RECORD) + "\n" + line + "\n")
    with pytest.raises(AotError) as e:
        read(log)
    assert str(e.value).startswith(f"tuning records {log} ") and message in str(e.value), e.value
    assert len(str(e.value)) < 400


def test_a_tuning_log_too_large_is_not_read_whole(tmp_path, monkeypatch):
    from aot.tune import records

    monkeypatch.setattr(records, "MAX_LOG_BYTES", 1000)
    log = tmp_path / "t.jsonl"
    log.write_text((json.dumps(RECORD) + "\n") * 20)
    with pytest.raises(AotError, match=r"t.jsonl: larger than 1000 bytes"):
        records.read(log)
    log.write_bytes(json.dumps(RECORD).encode() + b"\n\xff\n")
    monkeypatch.setattr(records, "MAX_LOG_BYTES", 1 << 20)
    with pytest.raises(AotError, match="line 2: byte 0 is not UTF-8"):
        records.read(log)


@pytest.mark.parametrize("line", [nested(100_000), "[" + "9" * 5000 + "]"])
def test_package_refuses_hostile_tuning_records_with_exit_2(tmp_path, capsys, line):
    from aot.cli import main

    log = tmp_path / "t.jsonl"
    log.write_text(line + "\n")
    assert main(["package", str(TINY), "--board", "host", "--tuning-records", str(log),
                 "-o", str(tmp_path / "pkg")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"aot: error: tuning records {log} line 1: ") and err.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == ["t.jsonl"]


# ------------------------------------------------------------------ the harness's report

def test_the_report_is_bounded_by_the_package():
    from aot.deploy.host import parse_report, report_limit

    meta = {**META, "outputs": [tensor("y", [1, 2], "float32")]}
    outs = [bytes(8)]
    ok = parse_report('{"times_ns": [5, 6]}', meta, outs, runs=2)
    assert ok.times_ns == [5, 6]
    long = '{"times_ns": [' + ",".join(["1"] * 50_000) + "]}"
    with pytest.raises(AotError, match=r"more than the \d+ its 2 runs print"):
        parse_report(long, meta, outs, runs=2)
    assert len(long) < report_limit(meta, 50_000)
    assert len(parse_report(long, meta, outs, runs=50_000).times_ns) == 50_000
    for text, message in [("{" + '"a":[' * 5 + "]" * 5 + "}", "nested deeper than 3 levels"),
                          ('{"times_ns": [' + "9" * 5000 + "]}", "has 5000 digits"),
                          ('{"times_ns": [NaN]}', "NaN is not a finite number")]:
        with pytest.raises(AotError, match=message):
            parse_report(text, meta, outs, runs=2)
