"""Every shared model's package (C codegen) is clean under AddressSanitizer
and UndefinedBehaviorSanitizer and under the harness's own guard bytes
(--checks: one package covers both), and its C compiles warning-free.

The library and the harness are built with the sanitizers and
`-fno-sanitize-recover=all` (any report aborts the harness, which fails
the run) plus `-Wall -Wextra -Werror` on top of the package's `-std=c99`:
clang (the host target's compiler) checks every package source there:
entry point, kernels, params, runtime, harness. The outputs of the
sanitized run must still match the reference runtime (`aot verify`'s bar).
gcc then compiles the same sources with the same warnings at -O2, where its
flow-based warnings (maybe-uninitialized, array-bounds) are on.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from aot.packaging import toolchain
from aot.api import package, verify
from aot.deploy import run_package
from aot.errors import AotError
from aot.packaging.metadata import read_metadata
from aot.targets import get_board
from support import MODELS, shared_models
from support.c_sources import WARNINGS, sources

HOST = get_board("host")
SANITIZE = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer", "-g", "-O1")
ISA = tuple(f for f in HOST.target.cflags if f.startswith("-m"))


@pytest.fixture(autouse=True)
def asan_env(monkeypatch):
    # The harness frees nothing it need not (one run, then exit): leaks are
    # not errors here. Reports go to stderr, which the run failure quotes.
    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=0")
    monkeypatch.setenv("UBSAN_OPTIONS", "print_stacktrace=1")


def gcc_warnings(pkg: Path, src: Path, extra=()) -> str:
    """gcc's complaints about one package source ('' when clean)."""
    r = subprocess.run(["gcc", "-std=c99", *WARNINGS, "-O2", *ISA, *extra,
                        f"-I{pkg}/include", f"-I{pkg}/runtime_c", f"-I{pkg}/src",
                        "-c", str(src), "-o", "/dev/null"], capture_output=True, text=True)
    return "" if r.returncode == 0 else r.stderr


# One shared model per family of kernels: the larger models of the set run
# the same kernels on bigger tensors (mobilenet and resnet-f32 convolutions
# are those of kws-f32 and ultraface), at several times the cost under ASan.
SANITIZED = ("mlperf_ad_fcae_f32.tflite", "mlperf_ad_fcae_int8.tflite",
             "mlperf_ic_resnet8_int8.tflite", "mlperf_kws_dscnn_f32.tflite",
             "mlperf_kws_dscnn_int8.tflite", "mlperf_sww_int8.tflite", "onnx_mlir_mnist.onnx",
             "onnx_mnist8.onnx", "onnx_ultraface_rfb320.onnx", "tflm_hello_world_f32.tflite",
             "tflm_hello_world_int8.tflite", "tflm_micro_speech_int8.tflite",
             "tflm_mnist_lstm_f32.tflite", "tflm_mnist_lstm_int8.tflite")


def test_the_sanitized_models_are_in_the_shared_set():
    assert set(SANITIZED) <= {p.name for p in shared_models()}


@pytest.mark.parametrize("path", [MODELS / n for n in SANITIZED], ids=lambda p: p.name)
def test_model_is_clean_under_sanitizers_and_warnings(path: Path, tmp_path):
    pkg = tmp_path / "pkg"
    out = verify(path, board="host", codegen="c", extra_cflags=(*SANITIZE, *WARNINGS),
                 out_dir=pkg, checks=True)
    assert out["inputs"] == "saved", out
    assert out["ok"] is True, out
    assert read_metadata(pkg)["extra_cflags"] == [*SANITIZE, *WARNINGS]
    assert read_metadata(pkg)["checks"] is True
    for src in sources(pkg):
        assert not gcc_warnings(pkg, src), f"gcc {src.name}:\n{gcc_warnings(pkg, src)}"
    entry = pkg / "src" / f"{read_metadata(pkg)['name']}.c"
    assert not gcc_warnings(pkg, entry, ["-DAOT_PROFILE"]), "entry point with AOT_PROFILE"
    harness = pkg / "bench" / "main.c"
    both = ["-DAOT_PROFILE", "-DAOT_CHECKS"]
    assert not gcc_warnings(pkg, harness, both), f"harness: {gcc_warnings(pkg, harness, both)}"


def test_sanitizers_catch_an_arena_overrun(tmp_path):
    """The check above can fail: the same package with its static arena one
    alignment unit short overruns it, and the harness run fails."""
    model = MODELS / "mlperf_ad_fcae_int8.tflite"
    info = package(model, board="host", codegen="c", out_dir=tmp_path / "pkg", extra_cflags=SANITIZE)
    header = info.path / "include" / f"{info.name}.h"
    macro = f"#define {info.name.upper()}_ARENA_SIZE "
    size, align = info.arena_bytes, info.metadata["arena_align"]
    assert size > align
    text = header.read_text()
    assert f"{macro}{size}\n" in text
    header.write_text(text.replace(f"{macro}{size}\n", f"{macro}{size - align}\n"))
    srcs = [f"src/{info.name}.c", f"src/{info.name}_kernels.c", f"src/{info.name}_params.c",
            "runtime_c/aot_platform.c"]
    srcs += [str(p.relative_to(info.path)) for p in (info.path / "src").glob("*.S")]
    lib = toolchain.build_library(HOST.target, info.path, info.name, srcs, (), SANITIZE)
    toolchain.build_harness(HOST.target, info.path, info.name, lib, SANITIZE)
    x = np.load(MODELS / "mlperf_ad_fcae_int8.input.npy")
    with pytest.raises(AotError, match=r"the harness failed \(exit [1-9].*ABORTING"):
        run_package(info.path, HOST, [x])
