"""The templates' compiled code kept between runs
(aot/executor/template_cache.py): used when whole, ignored and rewritten
when damaged, missed when the template changed."""
from __future__ import annotations

import jinja2
import pytest

from aot.executor.template_cache import CheckedBytecodeCache


def render(tmp_path, text: str) -> str:
    (tmp_path / "t" / "a.j2").write_text(text)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(tmp_path / "t")),
                             bytecode_cache=CheckedBytecodeCache(tmp_path / "cache"))
    return env.get_template("a.j2").render(x=2)


@pytest.fixture
def tdir(tmp_path):
    (tmp_path / "t").mkdir()
    return tmp_path


def entry(tdir):
    [path] = (tdir / "cache").iterdir()
    return path


def test_a_whole_entry_is_used(tdir, monkeypatch):
    assert render(tdir, "{{ x * 3 }}") == "6"
    compiled = []
    real = jinja2.Environment.compile
    monkeypatch.setattr(jinja2.Environment, "compile",
                        lambda self, *a, **k: compiled.append(1) or real(self, *a, **k))
    assert render(tdir, "{{ x * 3 }}") == "6"
    assert not compiled
    assert render(tdir, "{{ x * 4 }}") == "8"      # another source: jinja's checksum misses
    assert compiled


@pytest.mark.parametrize("damage", ["flip", "cut", "empty"])
def test_a_damaged_entry_is_ignored_and_replaced(tdir, damage):
    render(tdir, "{{ x * 3 }}")
    data = entry(tdir).read_bytes()
    entry(tdir).write_bytes({"flip": data[:-5] + bytes([data[-5] ^ 0x40]) + data[-4:],
                             "cut": data[:len(data) // 2], "empty": b""}[damage])
    assert render(tdir, "{{ x * 3 }}") == "6"
    assert entry(tdir).read_bytes() == data
