"""Other toolchains on the machine change nothing: each Linux target names
its GCC installation and C library (aot/support/gcc_pin.py), so a GCC installation
clang would otherwise prefer is not used.

The decoys are junk installations of version 99 beside a link to clang
(tests/support/decoy_gcc.py), for each target's GCC triple and for the bare-metal
GCCs (riscv64-unknown-elf: what made riscv64 links fail). Left to itself,
clang picks them and the build fails; pinned, the package is verified on
its board and is byte for byte the one the machine's clang builds.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

from aot.support import gcc_pin
from aot.api import package, verify
from aot.errors import AotError
from aot.targets import get_board, targets
from support.decoy_gcc import clang_in, junk_installation

# One board per Linux target family (the variants share their base's pin).
BOARDS = ("host", "qemu-aarch64", "qemu-armv7", "qemu-riscv64")
BARE_METAL_TRIPLES = ("riscv64-unknown-elf", "arm-none-eabi")


def gcc_triple(target) -> str:
    return Path(target.gcc_pin.gcc_install_dir).parent.name


@pytest.fixture(scope="module")
def decoy_clang(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("decoy")
    clang = clang_in(root)
    for triple in {*(gcc_triple(get_board(b).target) for b in BOARDS), *BARE_METAL_TRIPLES}:
        junk_installation(root, triple)
    return clang


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """Sigmoid then Add: expf and so libm in the link."""
    from onnx import TensorProto, helper, numpy_helper, save

    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Add", ["s", "b"], ["y"])]
    bias = numpy_helper.from_array(np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16), "b")
    graph = helper.make_graph(nodes, "pin", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 16])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 16])], initializer=[bias])
    path = tmp_path_factory.mktemp("model") / "pin.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def with_cc(board, cc: str, pin: gcc_pin.GccPin | None = None):
    target = board.target if pin is None else board.target.pinned(pin)
    return dataclasses.replace(board, target=dataclasses.replace(target, cc=cc))


def test_every_clang_target_names_its_installation():
    # a portable target's installation is its board's (aot.targets.portable_on)
    clang = [t for t in targets().values() if t.cc == "clang" and not t.portable]
    assert {t.name for t in clang} >= {"x86_64-linux", "aarch64-linux", "armv7-linux",
                                       "riscv64-linux", "aarch64-linux-a53", "armv7-linux-a53"}
    for t in clang:
        pin = t.gcc_pin
        assert pin and Path(pin.gcc_install_dir, "libgcc.a").is_file(), t.name
        assert not pin.sysroot or Path(pin.sysroot, "lib", "libc.a").is_file(), t.name
        assert set(pin.cflags) <= set(t.cflags) and set(pin.ldflags) <= set(t.ldflags)
        # the triple's own installation: no bare-metal or foreign one
        assert gcc_triple(t).endswith(("-linux-gnu", "-linux-gnueabihf")), t.name


@pytest.mark.parametrize("board_name", BOARDS)
def test_a_decoy_gcc_installation_changes_nothing(board_name, decoy_clang, model, tmp_path):
    board = get_board(board_name)
    target = board.target
    # Where clang looks first: the decoy is its pick without the pin ...
    seen = gcc_pin.installations(str(decoy_clang), target.gcc_pin.unpinned(target.cflags))
    assert seen.selected and seen.selected.startswith(str(decoy_clang.parent.parent))
    # ... and an unpinned build with it fails.
    with pytest.raises(AotError, match="decoy GCC installation|cannot find|syntax error"):
        package(model, board=with_cc(board, str(decoy_clang), gcc_pin.GccPin("", "")),
                out_dir=tmp_path / "unpinned")

    pinned = with_cc(board, str(decoy_clang))
    result = verify(model, board=pinned, out_dir=tmp_path / "decoy", count=2)
    assert result["ok"] and result["board"] == board_name, result
    real = package(model, board=board, out_dir=tmp_path / "real")
    for built in ("lib/libpin.a", "bench/bench"):
        assert (tmp_path / "decoy" / built).read_bytes() == (real.path / built).read_bytes(), \
            built


def test_a_pin_is_for_clang_and_alone():
    from aot.targets import _target

    raw = {"name": "t", "triple": "riscv64-unknown-linux-gnu", "cpu": "generic-rv64",
           "vector_bits": 0, "cc": "clang", "cflags": ["--target=riscv64-linux-gnu"],
           "sysroot": "/usr/riscv64-linux-gnu",
           "gcc_install_dir": "/usr/lib/gcc-cross/riscv64-linux-gnu/12"}
    t = _target("t", raw)
    gcc = "/usr/lib/gcc-cross/riscv64-linux-gnu/12"
    assert t.cflags == ("--target=riscv64-linux-gnu", "--sysroot=/usr/riscv64-linux-gnu",
                        f"--gcc-toolchain={gcc}", f"-B{gcc}", f"-L{gcc}",
                        "-Wno-unused-command-line-argument")
    assert t.ldflags == ()
    assert t.pinned(gcc_pin.GccPin("", "")).cflags == ("--target=riscv64-linux-gnu",)
    with pytest.raises(AotError, match="'t': gcc_install_dir and sysroot are for clang"):
        _target("t", {**raw, "cc": "riscv64-linux-gnu-gcc"})
    with pytest.raises(AotError, match="--gcc-toolchain=/usr in its flags contradicts"):
        _target("t", {**raw, "cflags": ["--gcc-toolchain=/usr"]})
    with pytest.raises(AotError, match="sysroot needs gcc_install_dir"):
        _target("t", {**raw, "gcc_install_dir": ""})
