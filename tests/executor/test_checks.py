"""--checks packages: the harness guards the arena and every input and
output with guard bytes and checks them (and that the inputs are unchanged)
after each run. A clean package runs clean (tests/packaging/test_sanitizers.py runs
every shared model so); here, negative controls: the entry point corrupted
so that one kernel writes past the arena's end, before its start, past an
output's end, or into an input, rebuilt with the package's own Makefile;
the harness names the buffer and side and exits 3, in both modes."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import aot
from aot.packaging import toolchain
from aot.api import package
from aot.deploy import run_package
from aot.errors import AotError
from aot.packaging.metadata import read_metadata
from aot.targets import get_board
from support import MODELS

HOST = get_board("host")
MODEL = MODELS / "mlperf_kws_dscnn_int8.tflite"
X = np.load(MODELS / "mlperf_kws_dscnn_int8.input.npy")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A --checks package whose library the Makefile has built once (later
    builds recompile only the edited entry point)."""
    info = package(MODEL, board="host", out_dir=tmp_path_factory.mktemp("checks") / "pkg", checks=True)
    assert info.metadata["checks"] is True
    make(info.path)
    return info.path


def make(pkg: Path) -> str:
    """The package's Makefile with the target's flags plus -DAOT_CHECKS, then
    the harness linked against the result: build/lib<name>.a."""
    meta = read_metadata(pkg)
    flags = " ".join([*HOST.target.cflags, "-DAOT_CHECKS"])
    subprocess.run(["make", "-s", f"CFLAGS={flags}"], cwd=pkg, check=True, capture_output=True)
    library = f"build/lib{meta['name']}.a"
    toolchain.build_harness(HOST.target, pkg, meta["name"], library, ("-DAOT_CHECKS",))
    return library


def corrupted(built: Path, tmp_path: Path, old: str, new) -> Path:
    """A copy of the package whose entry point has the last match of the
    regex `old` replaced by `new` (a string, or a function of metadata.json),
    rebuilt."""
    pkg = tmp_path / "pkg"
    shutil.copytree(built, pkg, symlinks=True)
    meta = read_metadata(pkg)
    entry = pkg / "src" / f"{meta['name']}.c"
    text = entry.read_text()
    found = list(re.finditer(old, text))
    assert found, f"{old} not in the entry point"
    last = found[-1]
    replacement = new(meta) if callable(new) else last.expand(new)
    entry.write_text(text[:last.start()] + replacement + text[last.end():])
    make(pkg)
    return pkg


@pytest.fixture
def corrupt(built, tmp_path):
    return lambda old, new: corrupted(built, tmp_path, old, new)


ARENA_OUT = r"\(int8_t\*\)\(a \+ \d+\)"   # a kernel's int8 output inside the arena


def test_a_clean_checks_package_runs_clean_in_both_modes(built):
    once = run_package(built, HOST, [X], warmup=1, runs=3)
    with aot.connect(HOST) as dev:
        served = [dev.request(built, [X]) for _ in range(3)]
    want = np.load(MODELS / "mlperf_kws_dscnn_int8.output.npy")
    np.testing.assert_array_equal(once.outputs[0], want.reshape(once.outputs[0].shape))
    for r in served:
        np.testing.assert_array_equal(r.outputs[0], once.outputs[0])


def test_a_write_past_the_arena_end_is_caught(corrupt):
    pkg = corrupt(ARENA_OUT, lambda m: f"(int8_t*)(a + {m['name'].upper()}_ARENA_SIZE - 4)")
    with pytest.raises(AotError, match=r"the harness's guard check failed: guard check: the "
                                       r"64-byte guard zone after the arena was overwritten "
                                       r"\(first at 0 bytes past its end\)"):
        run_package(pkg, HOST, [X])
    with aot.connect(HOST) as dev:           # serve mode: an error frame, then exit 3
        with pytest.raises(AotError, match=r"guard check failed: .* after the arena"):
            dev.request(pkg, [X])
        assert not dev._sessions             # the session ended with the harness


def test_a_write_before_the_arena_start_is_caught(corrupt):
    pkg = corrupt(ARENA_OUT, "(int8_t*)(a - 16)")
    with pytest.raises(AotError, match=r"guard zone before the arena was overwritten "
                                       r"\(first at \d+ bytes before its start\)"):
        run_package(pkg, HOST, [X])


def test_a_write_past_an_output_end_is_caught(corrupt):
    pkg = corrupt(r"outputs->\w+\)", lambda m: f"outputs->{m['outputs'][0]['c_name']} + 8)")
    with pytest.raises(AotError, match=r"guard zone after output 0 \(Identity\) was "
                                       r"overwritten"):
        run_package(pkg, HOST, [X])


def test_a_write_into_an_input_is_caught(corrupt):
    pkg = corrupt(ARENA_OUT, lambda m: f"(int8_t*)inputs->{m['inputs'][0]['c_name']}")
    with pytest.raises(AotError, match=r"guard check: input 0 \(.*\) was modified by the run"):
        run_package(pkg, HOST, [X])
    with aot.connect(HOST) as dev:
        with pytest.raises(AotError, match=r"input 0 \(.*\) was modified by the run"):
            dev.request(pkg, [X])


def test_state_buffers_are_guarded_too(tmp_path_factory, tmp_path):
    """A recurrent model's state lives in the library: under AOT_CHECKS its
    buffers get guard zones too, which a state update one element too long
    overwrites."""
    lstm = MODELS / "tflm_mnist_lstm_int8.tflite"
    x = np.load(lstm.with_suffix(".input.npy"))
    info = package(lstm, board="host", out_dir=tmp_path_factory.mktemp("lstm") / "pkg", checks=True)
    assert info.metadata["state"]
    make(info.path)
    run_package(info.path, HOST, [x], warmup=1, runs=2)       # clean
    pkg = corrupted(info.path, tmp_path, r"sizeof\((\w+_state_\w+)\)\);", r"sizeof(\1) + 8);")
    with pytest.raises(AotError, match=r"guard check: the 64-byte guard zone after state "
                                       r"\w+_state_\w+ was overwritten"):
        run_package(pkg, HOST, [x])


@pytest.mark.parametrize("code, where, stops, want", [
    (3, " under qemu-user", None,
     "the harness's guard check failed under qemu-user: guard check: x"),
    (-11, "", None, "the harness crashed (exit -11): bench: x"),
    (139, " under qemu-user", None, "the harness crashed under qemu-user (exit 139): bench: x"),
    (135, " under qemu-system", {135: "a fault"},
     "the harness stopped on a fault under qemu-system (exit 135): bench: x"),
    (1, "", None, "the harness failed (exit 1): bench: x"),
])
def test_every_transport_names_a_failure_alike(code, where, stops, want):
    """One reading of a harness's exit for every transport: a guard check
    failure is named as such under qemu too, a signal is a crash."""
    from aot.deploy.host import failure
    stderr = "noise\nguard check: x\n" if code == 3 else "noise\nbench: x\n"
    assert failure(code, stderr, where, stops) == want
