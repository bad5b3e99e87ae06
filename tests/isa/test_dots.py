"""The generic dot products (aot/isa/dots.py): their constructors make calls
the code generators accept, and a call with the wrong operands is refused
naming the call and what it takes."""
from __future__ import annotations

import re

import pytest

from aot.errors import UnsupportedError
from aot.isa.calls import check_call, lane_crossing
from aot.isa.dots import (PACKED_PAIR_DOT, PAIR_DOT, QUAD_DOT, QUAD_DOT_S, QUAD_DOT_U,
                          packed_pair_dot, pair_dot, quad_dot)
from aot.ir.tir import DType, Var

I16, I32 = DType("int16"), DType("int32")


def test_constructors_make_calls_the_backends_accept():
    w16, w8 = Var("w", DType("int16", 16)), Var("q", DType("int8", 32))
    acc = Var("acc", DType("int32", 8))
    got = {pair_dot(Var("x0", I16), Var("x1", I16), w16): PAIR_DOT,
           packed_pair_dot(Var("p", I32), w16): PACKED_PAIR_DOT,
           quad_dot(acc, Var("q4", I32), w8): QUAD_DOT,
           quad_dot(acc, Var("q4", I32), w8, unsigned=True): QUAD_DOT_U,
           quad_dot(acc, Var("q4", I32), w8, symmetric=True): QUAD_DOT_S}
    for call, op in got.items():
        assert call.dtype == DType("int32", 8)
        assert check_call(call.fn, call.args, call.dtype) == op
        assert lane_crossing(call.fn)


@pytest.mark.parametrize("fn, args, dtype, says", [
    ("aot_dot2", (Var("x0", I16), Var("w", DType("int16", 8))), DType("int32", 4),
     "aot_dot2 takes (int16, int16, int16 x 2n) -> int32 x n, got (int16, int16x8)"),
    ("x86_pmaddwd_packed", (Var("p", I16), Var("w", DType("int16", 8))), DType("int32", 4),
     "x86_pmaddwd_packed takes (int32, int16 x 2n) -> int32 x n"),
    ("aot_dot4", (Var("a", DType("int32", 4)), Var("q", I32), Var("w", DType("int8", 8))),
     DType("int32", 4), "aot_dot4 takes (int32 x n, int32, int8 x 4n) -> int32 x n"),
    ("arm_sdot", (Var("a", DType("int32", 4)), Var("q", I32), Var("w", DType("int8", 16))),
     DType("int32", 8), "arm_sdot takes (int32 x n, int32, int8 x 4n)"),
])
def test_wrong_operands_are_refused_by_name(fn, args, dtype, says):
    with pytest.raises(UnsupportedError, match=re.escape(says)):
        check_call(fn, args, dtype)
    with pytest.raises(UnsupportedError):
        check_call(fn, args[:1], dtype)
