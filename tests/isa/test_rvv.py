"""RVV's instruction family (aot/isa/rvv.py): its legalization rows are well
formed, rvv_dot2 / rvv_dot2p are chosen on rv64gcv and not on the scalar
riscv64 target, and the C spells the weight pairs' halves by shifts of
their int32 view (no lane loop, no shuffle) while LLVM keeps the lane
formula, which LLVM 22 makes vnsrl and vwmacc of."""
from __future__ import annotations

import pytest

from aot.isa import rvv
from aot.ir.tir import DType
from support.kernels import call_kernel, spelled

I16, I32 = DType("int16"), DType("int32")

CASES = [("aot_dot2", (I16, I16, I16.with_lanes(8)), I32.with_lanes(4), "rvv_dot2"),
         ("aot_dot2p", (I32, I16.with_lanes(16)), I32.with_lanes(8), "rvv_dot2p")]


def test_rows_are_well_formed():
    assert {row.name for row in rvv.ROWS} == {rvv.RVV_DOT2.name, rvv.RVV_DOT2_PACKED.name}
    for row in rvv.ROWS:
        assert row.archs == rvv.ARCHS and row.little_endian, row
        assert dict(row.features) == {4: ("v",), 8: ("v",), 16: ("v",)}, row


@pytest.mark.parametrize("generic, operands, result, instruction", CASES,
                         ids=[case[3] for case in CASES])
def test_the_instruction_is_chosen_and_spelled(generic, operands, result, instruction):
    func = call_kernel(generic, operands, result)
    names, source, ir = spelled(func, "rv64gcv")
    assert names == {instruction}
    assert "<< 16) >> 16" in source and "for (int k" not in source
    assert "shufflevector" in ir and "mul <" in ir
    assert spelled(func, "riscv64-linux")[0] == {generic}
