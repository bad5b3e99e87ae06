"""A package's compiles start as soon as their sources are written: generate
hands the headers, the runtime and the kernels over before it prints the
rest, and one pool compiles the library and the harness."""
from __future__ import annotations

import pytest

import aot
from aot.errors import AotError
from aot.packaging import toolchain
from aot.packaging.build import generate
from aot.targets import get_board
from support import MODELS


@pytest.mark.fast
def test_generate_hands_over_the_headers_and_kernels_before_the_rest():
    graph = aot.optimize(aot.load(MODELS / "mlperf_ad_fcae_int8.tflite"))
    batches = []
    gen = generate(graph, get_board("host"), "c", "ad", io_in_arena=False,
                   ready=lambda files, sources: batches.append((dict(files), list(sources))))
    (first, early), (rest, late) = batches
    # every file once, and the library's sources are the two batches' sources
    assert not set(first) & set(rest) and {**first, **rest} == gen.files
    assert sorted(early + late) == sorted(gen.sources)
    assert set(early) <= set(first) and set(late) <= set(rest)
    # a compile may read any header: they all come before the first source
    assert {p for p in gen.files if p.endswith(".h")} <= set(first)
    assert "src/ad_kernels.c" in early and "src/ad.c" in late and "bench/main.c" in rest


def test_the_first_failure_in_source_order_is_the_one_raised(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.c").write_text("int a(void) { return 1 }\n")          # fails
    (tmp_path / "src" / "b.c").write_text("int b(void) { return 2; }\n")
    (tmp_path / "src" / "c.c").write_text("/* larger */\n" * 40 + "int c(void) { return }\n")
    tc = toolchain.toolchain_for(get_board("host").target)
    with toolchain.CompilePool(tc, tmp_path) as pool:
        first = pool.submit(["src/a.c"], ".build")
        objects = pool.submit(["src/b.c", "src/c.c", "src/a.c"], ".build")
        assert objects == [".build/b.o", ".build/c.o", ".build/a.o"]
        assert pool.wait([objects[0]]) == [".build/b.o"]
        with pytest.raises(AotError, match="compiling src/c.c"):
            pool.wait(objects)
        with pytest.raises(AotError, match="compiling src/a.c"):
            pool.wait(first + objects)
        (tmp_path / "runtime").mkdir()
        (tmp_path / "runtime" / "b.c").write_text("int b2;\n")
        with pytest.raises(AotError, match="share a file name: src/b.c, runtime/b.c"):
            pool.submit(["runtime/b.c"], ".build")


def test_a_hosted_harness_compiled_before_its_identity_is_the_same(tmp_path):
    """The pool compiles a hosted harness's main.c before the library exists,
    without the identity (dead code there): the harness is the one built
    with it, and a harness that serves a serial port waits for it."""
    from aot.api import package

    info = package(MODELS / "mlperf_ad_fcae_int8.tflite", board="host", out_dir=tmp_path / "p")
    pkg, board = info.path, get_board("host")
    built = (pkg / "bench" / "bench").read_bytes()
    library = f"lib/lib{info.name}.a"
    toolchain.build_harness(board.target, pkg, info.name, library)        # with the identity
    assert (pkg / "bench" / "bench").read_bytes() == built
    with toolchain.CompilePool(board.target, pkg) as pool:
        assert toolchain.start_harness(pool, ["-DAOT_SERVE_UART"]) is None
        assert toolchain.start_harness(pool, ["-O1"]) == [".build-harness/main.o"]
