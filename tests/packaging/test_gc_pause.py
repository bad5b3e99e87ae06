"""aot.package pauses Python's cyclic garbage collector while it builds
(aot/support/gcpause.py) and gives it back as it found it."""
import gc

import pytest

from aot.support.gcpause import paused_gc

pytestmark = pytest.mark.fast


@pytest.fixture
def restore_gc():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_inside_and_enabled_after(restore_gc):
    gc.enable()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_enabled_again_after_an_error(restore_gc):
    gc.enable()
    with pytest.raises(ValueError):
        with paused_gc():
            raise ValueError("boom")
    assert gc.isenabled()


def test_left_disabled_if_it_was(restore_gc):
    gc.disable()
    with paused_gc():
        with paused_gc():           # nested: only the outermost would enable it
            pass
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_package_builds_with_it_paused(restore_gc, monkeypatch, models_dir, tmp_path):
    """The build itself runs paused; the caller's collector is back after."""
    import aot.api

    seen = []

    def build(*args, **kwargs):
        seen.append(gc.isenabled())
        raise KeyboardInterrupt      # stop here: the rest is not what is tested

    monkeypatch.setattr(aot.api, "package_graph", build)
    gc.enable()
    with pytest.raises(KeyboardInterrupt):
        aot.api.package(models_dir / "mlperf_kws_dscnn_int8.tflite", board="host",
                        out_dir=tmp_path / "pkg")
    assert seen == [False]
    assert gc.isenabled()
