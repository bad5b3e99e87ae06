"""Versions read from .dist-info directories are importlib.metadata's."""
from __future__ import annotations

import sys
from importlib import metadata

import pytest

from aot.support import distributions


@pytest.mark.fast
@pytest.mark.parametrize("name", ["onnx", "llvmlite", "numpy", "Jinja2", "jinja2",
                                  "typing-extensions", "typing_extensions"])
def test_the_version_is_importlib_metadatas(name):
    try:
        want = metadata.version(name)
    except metadata.PackageNotFoundError:
        want = None
    assert distributions.version(name) == want


@pytest.mark.fast
def test_a_missing_distribution_has_no_version():
    assert distributions.version("no-such-distribution-anywhere") is None


@pytest.mark.fast
def test_the_first_on_the_path_wins_and_egg_info_is_asked_of_importlib(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    for where, v in ((first, "1.0"), (second, "2.0")):
        (where / f"my_dist-{v}.dist-info").mkdir(parents=True)
        (where / f"my_dist-{v}.dist-info" / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: my-dist\nVersion: {v}\n\nVersion: 9\n")
    monkeypatch.setattr(sys, "path", [str(first), str(second)])
    assert distributions.version("My.Dist") == "1.0" == metadata.version("My.Dist")
    egg = tmp_path / "c" / "my_dist-3.0.egg-info"
    egg.mkdir(parents=True)
    (egg / "PKG-INFO").write_text("Metadata-Version: 1.0\nName: my-dist\nVersion: 3.0\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "c"), str(first)])
    assert distributions.version("my-dist") == "3.0" == metadata.version("my-dist")
