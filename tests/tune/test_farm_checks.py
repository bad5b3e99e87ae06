"""What the board farm reads (aot/tune/farm.py), without a cluster: the
workers' replies, package archives, the farm TOML, --boards, and Ray
missing."""
from __future__ import annotations

import base64
import io
import json
import re
import sys
import tarfile

import numpy as np
import pytest

from aot.errors import AotError
from aot.tune import farm

META = {"outputs": [{"name": "y", "dtype": "float32", "shape": [1, 3]}],
        "kernels": [{"step": 0, "name": "k0"}, {"step": 1, "name": "k1"}]}


def reply(**change) -> str:
    value = {"outputs": [{"dtype": "float32", "shape": [1, 3],
                          "data": base64.b64encode(np.arange(3, dtype=np.float32)
                                                   .tobytes()).decode()}],
             "profile_ns": [[5, 6]], "profile_instructions": [[50, 60]]}
    value.update(change)
    return json.dumps(value)


def test_a_good_reply_reads_back():
    m = farm.measurement(reply(), META, "m")
    assert m.outputs[0].tolist() == [[0.0, 1.0, 2.0]] and m.profile_instructions == [[50, 60]]


@pytest.mark.parametrize("text, message", [
    (b"bytes", "a measurement is JSON text"),
    ("[" * 10, "nested deeper than 4 levels"),
    (reply(outputs=[]), "0 outputs, the package has 1"),
    (reply(outputs=[{"dtype": "int8", "shape": [1, 3], "data": ""}]),
     "outputs[0] is int8[1, 3], the package's float32[1, 3]"),
    (reply(outputs=[{"dtype": "float32", "shape": [1, 3], "data": "AAAA"}]),
     "outputs[0] has 3 bytes, its shape 12"),
    (reply(outputs=[{"dtype": "float32", "shape": [1, 3], "data": "!!"}]), "not base64"),
    (reply(profile_ns=[[5]]), "profile_ns rows must have 2 numbers"),
    (reply(profile_instructions=[[-1, 2]]), "profile_instructions[0][0] must be an integer"),
    (json.dumps({"error": "harness exit 3"}), "m: harness exit 3"),
    (reply(profile_ns="x"), "profile_ns must be a list of lists"),
])
def test_hostile_replies_are_one_line_errors(text, message):
    with pytest.raises(AotError) as e:
        farm.measurement(text, META, "m")
    assert message in str(e.value) and "\n" not in str(e.value)


def _tar(add) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        add(tar)
    return buf.getvalue()


def _member(tar, name: str, data: bytes = b"{}", kind=tarfile.REGTYPE, link: str = ""):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, len(data) if kind == tarfile.REGTYPE else 0
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


@pytest.mark.parametrize("archive, message", [
    ("not bytes", "not a package archive"),
    (b"junk" * 100, "not a package archive"),
    (_tar(lambda t: _member(t, "../escape")), "not a package archive"),
    # the data filter makes an absolute path relative: no package then
    (_tar(lambda t: _member(t, "/abs/metadata.json")), "no pkg/metadata.json"),
    (_tar(lambda t: _member(t, "pkg/metadata.json", kind=tarfile.SYMTYPE, link="/etc/passwd")),
     "not a package archive"),
    (_tar(lambda t: _member(t, "other/file")), "no pkg/metadata.json"),
])
def test_hostile_package_archives_are_refused(tmp_path, archive, message):
    with pytest.raises(AotError, match=message):
        farm.unpack(archive, tmp_path / "x", "package p")
    assert not (tmp_path / "escape").exists()


def test_a_package_archive_unpacks(tmp_path):
    pkg = farm.unpack(_tar(lambda t: _member(t, "pkg/metadata.json")), tmp_path, "p")
    assert (pkg / "metadata.json").read_text() == "{}"


@pytest.mark.parametrize("text, message", [
    ("[[node]]\naddress = 'a'\n", "node[0] lacks boards"),
    ("[[node]]\naddress = 'a'\nboards = 'rpi4'\n", "boards must be a list of board names"),
    ("x = 1\n[[node]]\naddress = 'a'\nboards = []\n", "unknown key 'x'"),
    ("[[node]\n", "not a valid farm description"),
])
def test_bad_farms_are_refused(tmp_path, text, message):
    path = tmp_path / "farm.toml"
    path.write_text(text)
    with pytest.raises(AotError, match=re.escape(message)):
        farm.read_farm(path)


def test_boards_are_placed_by_farm_or_resources(tmp_path):
    path = tmp_path / "farm.toml"
    path.write_text('[[node]]\naddress = "10.0.0.5"\nboards = ["rpi4", "rpi4"]\n'
                    '[[node]]\naddress = "10.0.0.6"\nboards = ["rpi5"]\n')
    nodes = farm.read_farm(path)
    assert farm.placements(["rpi4", "rpi5", "rpi4"], nodes, {}) == [
        ("rpi4", {"node": "10.0.0.5"}), ("rpi5", {"node": "10.0.0.6"}),
        ("rpi4", {"node": "10.0.0.5"})]
    with pytest.raises(AotError, match="the farm has no more board 'rpi5'"):
        farm.placements(["rpi5", "rpi5"], nodes, {})
    assert farm.placements(["rpi4", "rpi4"], None, {"board:rpi4": 2.0}) == [
        ("rpi4", {"resources": {"board:rpi4": 1.0}})] * 2
    with pytest.raises(AotError, match="names 2 x rpi4, the cluster offers 1"):
        farm.placements(["rpi4", "rpi4"], None, {"board:rpi4": 1.0})
    assert farm.parse_boards("a, b,a") == ["a", "b", "a"]
    with pytest.raises(AotError, match="board names separated by commas"):
        farm.parse_boards("a,,b")


def test_without_ray_cluster_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)      # import ray: ImportError
    with pytest.raises(AotError) as e:
        farm.ray_module()
    assert "pip install 'aot[farm]'" in str(e.value) and "\n" not in str(e.value)
