"""aot/lower/tir_passes/bind.py: long store values split into named steps.

The split must not change what is computed (substituting the locals back
gives the original value), must leave guarded parts (a Select's branches,
the operands of and/or) where they are, and must make the generated C of
a fused int8 residual block readable (no statement line of hundreds of
characters).
"""
from __future__ import annotations

from aot.ir.tir import (Bin, Broadcast, Buffer, Call, Cast, Const, Decl, Load, Select, Store,
                        Var, dt, substitute, walk_expr)
from aot.lower.tir_passes.bind import DEPTH, _depth, bind_long_values, split_value

I32 = dt("int32", 8)
X = Buffer("x", dt("int8"), (64,))
i = Var("i")


def fresh():
    names: dict = {}

    def make(base, dtype):
        names[base] = names.get(base, 0) + 1
        return Var(f"{base}{names[base]}", dtype)
    return make


def chain(depth: int):
    """rdbpot(rdhm(rdbpot(rdhm(...x...)))) nested `depth` calls deep."""
    e = Cast(I32, Load(X, i, 8))
    for k in range(depth):
        fn = "aot_rdhm" if k % 2 else "aot_rdbpot"
        e = Call(fn, (e, Broadcast(Const(k + 1), 8)), I32)
    return e


def inline(lets, value):
    """The value with every local replaced by what it was bound to."""
    for d in reversed(lets):
        value = substitute(value, {d.var: d.init})
    return value


def test_a_deep_chain_is_split_into_shallow_steps_that_compute_the_same():
    value = Bin("min", Bin("max", chain(9), Broadcast(Const(-128), 8)), Broadcast(Const(127), 8))
    lets, top = split_value(value, fresh())
    assert len(lets) >= 3
    assert all(isinstance(d, Decl) for d in lets)
    assert all(_depth(d.init) <= DEPTH for d in lets) and _depth(top) <= DEPTH
    assert inline(lets, top) == value
    # innermost first: every local is defined before it is used
    defined = set()
    for d in lets:
        used = {v for v in walk_expr(d.init) if isinstance(v, Var) and v.name[-1].isdigit()}
        assert used <= defined, (d, defined)
        defined.add(d.var)


def test_guarded_parts_stay_under_their_condition():
    """A load in a Select branch or under `and` may be valid only where the
    condition holds: it is never computed ahead into a local."""
    guarded = chain(8)
    value = Select(Bin("<", i, Const(60)), guarded, Broadcast(Const(0), 8))
    lets, top = split_value(value, fresh())
    assert lets == [] and top == value
    cond = Bin("and", Bin("<", i, Const(60)), Bin(">", chain(8), Broadcast(Const(0), 8)))
    lets, top = split_value(Select(cond, chain(1), chain(1)), fresh())
    # the condition may be computed ahead as a whole (&& still short-circuits
    # inside it), never its guarded operand alone
    assert all(d.init == cond for d in lets), lets
    assert inline(lets, top) == Select(cond, chain(1), chain(1))


def test_short_values_and_other_statements_are_left_alone():
    out = Buffer("y", dt("int32"), (64,))
    short = Store(out, i, Bin("+", Load(X, i), Const(1)))
    assert bind_long_values(short, fresh()) == short


def test_a_fused_residual_block_reads_as_steps(tmp_path):
    """ResNet-8's int8 conv + add + requantize epilogue was one statement of
    750 characters; now no statement line is much past the 100 of the
    printer's wrap."""
    from aot.api import package
    from support import MODELS

    info = package(MODELS / "mlperf_ic_resnet8_int8.tflite", board="host",
                   out_dir=tmp_path / "ic")
    code = [line for f in sorted((info.path / "src").glob("*kernels*.c"))
            for line in f.read_text().splitlines()
            if not line.lstrip().startswith(("/*", "*"))]
    longest = max(code, key=len)
    assert len(longest) <= 160, longest
