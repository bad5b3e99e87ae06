"""A legalization row (aot/isa/instruction.py): which calls on which targets
it fits."""
from __future__ import annotations

import dataclasses

import pytest

from aot.isa.instruction import Instruction
from aot.ir.tir import Call, DType
from aot.targets import get_target

ROW = Instruction("aot_g", "x_g", ("x86_64",), ((4, ("sse4.1",)), (16, ("avx512f",))),
                  little_endian=True, only="int32")


def call(scalar: str, lanes: int) -> Call:
    return Call("aot_g", (), DType(scalar, lanes))


@pytest.mark.parametrize("row, c, target, fits", [
    (ROW, call("int32", 4), "x86_64-linux", True),
    (ROW, call("int32", 8), "x86_64-linux", False),              # no entry for 8 lanes
    (ROW, call("int32", 16), "x86_64-linux", False),             # AVX2 has no avx512f
    (ROW, call("int32", 16), "x86_64-linux-avx512", True),
    (ROW, call("int16", 4), "x86_64-linux", False),              # int32 results only
    (ROW, call("float32", 4), "x86_64-linux", False),
    (dataclasses.replace(ROW, only="float32"), call("float32", 4), "x86_64-linux", True),
    (ROW, call("int32", 4), "aarch64-linux", False),             # another architecture
    (dataclasses.replace(ROW, archs=()), call("int32", 4), "aarch64-linux", False),
    (Instruction("aot_g", "x_g", little_endian=True), call("int8", 3), "aarch64-linux", True),
])
def test_fits(row, c, target, fits):
    assert row.fits(c, get_target(target)) is fits


def test_big_endian_targets_take_no_little_endian_row():
    be = dataclasses.replace(get_target("aarch64-linux"), triple="aarch64_be-unknown-linux-gnu")
    row = Instruction("aot_g", "x_g", little_endian=True)
    assert not be.little_endian and not row.fits(call("int32", 4), be)
    assert dataclasses.replace(row, little_endian=False).fits(call("int32", 4), be)
