"""The passes' and the printer's walks over large kernels: a sub-expression
shared by several statements is mapped and printed once, already simplified
TIR comes back as the same object, legalization rebuilds only what has an
instruction, and the line wrapper's break points are the ones its rules
name."""
from __future__ import annotations

import random

from aot.codegen.c import _BREAK_BEFORE, _break_points, emit_c
from aot.ir.tir import (INT32, Bin, Buffer, BufferKind, Cast, Const, DType, Load, PrimFunc,
                        Store, map_stmt_exprs, seq)
from aot.lower.tir_passes.legalize import legalize
from aot.lower.tir_passes.simplify import simplify_body
from aot.targets import get_target

U8 = DType("uint8")


def _shared_body():
    a = Buffer("a", INT32, (8,))
    out = Buffer("out", INT32, (8,), BufferKind.OUTPUT)
    shared = Bin("*", Load(a, Const(1)), Bin("+", Load(a, Const(2)), Const(3)))
    return out, a, shared, seq(Store(out, Const(0), Bin("+", shared, Const(1))),
                               Store(out, Const(1), Bin("-", shared, Const(2))))


def test_a_shared_node_is_mapped_once_and_the_same_everywhere():
    out, a, shared, body = _shared_body()
    seen = []

    def count(e):
        seen.append(e)
        return Load(a, Const(5)) if e == Const(3) else None
    new = map_stmt_exprs(body, count)
    # the shared product's 7 nodes once, then each statement's own 3 (its
    # index, its + or - and that one's constant)
    assert sum(isinstance(x, Bin) and x.op == "*" for x in seen) == 1
    assert len(seen) == 7 + 3 + 3
    first, second = new.stmts[0].value.a, new.stmts[1].value.a
    assert first is second and first == Bin("*", Load(a, Const(1)),
                                            Bin("+", Load(a, Const(2)), Load(a, Const(5))))


def test_simplified_tir_comes_back_as_itself_and_the_rest_is_folded():
    out, a, shared, body = _shared_body()
    assert simplify_body(body) is body
    cast = Store(out, Const(0), Bin("+", Load(a, Const(0)), Cast(INT32, Const(7, U8))))
    assert simplify_body(cast) == Store(out, Const(0), Bin("+", Load(a, Const(0)), Const(7)))


def test_a_settled_body_is_not_walked_again(monkeypatch):
    """The printer asks simplify_body of every kernel the pipeline already
    simplified: a body once asked is not walked again, while a body equal
    to it but another object is (by identity: TIR is immutable)."""
    import sys
    simplify_module = sys.modules["aot.lower.tir_passes.simplify"]
    out, a, shared, body = _shared_body()
    assert simplify_body(body) is body
    walks = []
    real = simplify_module.walk_stmt
    monkeypatch.setattr(simplify_module, "walk_stmt", lambda b: walks.append(b) or real(b))
    assert simplify_body(body) is body and walks == []
    twin = _shared_body()[3]
    assert simplify_body(twin) is twin and walks == [twin]
    assert simplify_body(twin) is twin and walks == [twin]


def test_per_object_answers_once_per_live_object():
    import gc
    from aot.ir.tir import per_object
    asked = []

    @per_object
    def stores(body) -> bool:
        asked.append(body)
        return isinstance(body, Store)
    out, a, shared, body = _shared_body()
    assert stores(body) is False and stores(body) is False and asked == [body]
    twin = _shared_body()[3]
    assert stores(twin) is False and len(asked) == 2
    import weakref
    gone = weakref.ref(twin)
    del twin, asked[1]
    gc.collect()
    assert gone() is None            # the memo does not keep a tree alive
    store = body.stmts[0]
    assert stores(store) and stores(store) and asked == [body, store]


def test_the_printer_voids_what_the_body_never_reads():
    """An unused parameter and a local never read are cast to void; a local
    read only by a comparison simplify decides (`u >= 0` on an unsigned
    byte) is never read in the printed C either."""
    from aot.ir.tir import Decl, Var
    a = Buffer("a", INT32, (8,))
    out = Buffer("out", INT32, (8,), BufferKind.OUTPUT)
    spare = Buffer("spare", INT32, (4,))
    x, y, z = Var("x"), Var("y"), Var("z", U8)
    body = seq(Decl(x, Load(a, Const(0))), Decl(y, Const(1)),
               Decl(z, Cast(U8, Load(a, Const(1)))),
               Store(out, Const(0), Bin("+", x, Const(1))),
               Store(out, Const(1), Cast(INT32, Bin(">=", z, Const(0, U8)))))
    code = emit_c([PrimFunc("k", (a, out, spare), body)], "t").source
    assert "(void)spare;" in code and "(void)y;" in code and "(void)z;" in code
    assert "(void)x;" not in code and "(void)a;" not in code
    settled = seq(*body.stmts[:4])       # nothing to fold: the checker's walk says
    code = emit_c([PrimFunc("k", (a, out, spare), settled)], "t").source
    assert "(void)spare;" in code and "(void)z;" in code and "(void)x;" not in code


def test_legalize_keeps_a_function_without_instructions():
    out, a, shared, body = _shared_body()
    func = PrimFunc("k", (a, out), body)
    assert legalize(func, get_target("cortex-m4")) is func
    # the shared expression prints the same in both statements
    code = emit_c([func], "t").source
    assert code.count("a[1] * (a[2] + 3)") == 2


def _reference_points(line: str, first: int) -> list[tuple[int, int, int]]:
    """The break points by their rules, character by character."""
    points, depth = [], 0
    for pos, ch in enumerate(line):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == " " and pos > first:
            at = pos if line.startswith(_BREAK_BEFORE, pos) else \
                pos + 1 if line[pos - 1] == "," or line[pos - 2:pos] == " =" else None
            if at is not None:
                points.append((pos, depth, at))
    return points


def test_break_points_follow_their_rules():
    rng = random.Random(7)
    atoms = ["x", "a[i]", "(", ")", "[", "]", ",", "=", "?", ":", "|", "||", "&", "&&",
             "+", "-", "*", "/", "<<", "f(", "-1", " "]
    for _ in range(300):
        line = "    " + "".join(rng.choice(atoms) + rng.choice(["", " ", " "])
                                for _ in range(rng.randrange(5, 60)))
        for first in (0, 8, 20):
            assert _break_points(line, first) == _reference_points(line, first), line
