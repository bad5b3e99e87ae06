"""Code generation: hand-built PrimFuncs printed as C (gcc and clang) and
compiled by LLVM, called through ctypes on numpy buffers, checked against
numpy. All kernels of a backend go into one shared library (one compile)."""
from __future__ import annotations

import ctypes
import math
import re
import subprocess
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

from aot.codegen import c_comment, c_identifier, c_string, emit_c
from aot.codegen.llvm import emit_llvm_ir, emit_object
from aot.ir.tir import (FLOAT32, INT32, INT64, Assign, Bin, Broadcast, Buffer, BufferKind, Call,
                        Cast, Comment, Const, Decl, DType, For, ForKind, If, Load, PrimFunc,
                        Select, Store, Unary, Var, flat_index, seq)
from aot.ir.tir import BOOL
from aot.targets import get_target

CFLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-march=x86-64-v3", "-fPIC"]
I8, U8, U32, F64 = DType("int8"), DType("uint8"), DType("uint32"), DType("float64")
OUT, PARAM = BufferKind.OUTPUT, BufferKind.PARAM
rng = np.random.default_rng(7)


@dataclass
class Case:
    func: PrimFunc
    inputs: dict[str, np.ndarray]
    expect: Callable[[dict], dict]     # inputs -> expected outputs, by buffer name
    exact: bool = True                 # bit-exact (ints, constants) or float tolerance


def c32(v):
    return Const(v, INT32)


def f32(v):
    return Const(v, FLOAT32)


def vec(d: DType, lanes: int) -> DType:
    return d.with_lanes(lanes)


# ------------------------------------------------------------ reference math

def srdhm(a: int, b: int) -> int:
    if a == b == -2**31:
        return 2**31 - 1
    return (a * b + 2**30) >> 31


def rdbpot(x: int, e: int) -> int:
    if e == 0:
        return x
    q = (abs(x) + (1 << (e - 1))) >> e
    return q if x >= 0 else -q


def satshl(x: int, k: int) -> int:
    t = 2**(31 - k) - 1
    return 2**31 - 1 if x > t else -2**31 if x < -t else x << k


def tdiv(a: int, b: int) -> int:
    """C's integer division: truncation toward zero."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def wrap32(v: int) -> int:
    return (v + 2**31) % 2**32 - 2**31


def mbqm(x: int, m: int, e: int) -> int:
    return rdbpot(srdhm(wrap32(x * (1 << max(e, 0))), m), max(-e, 0))


# ------------------------------------------------------------------- kernels

def gemm_epilogue() -> Case:
    M, K, N = 5, 7, 6
    A = Buffer("A", FLOAT32, (M, K))
    B = Buffer("B", FLOAT32, (K, N), PARAM)
    bias = Buffer("bias", FLOAT32, (N,), PARAM)
    C = Buffer("C", FLOAT32, (M, N), OUT)
    i, j, k, acc = Var("i"), Var("j"), Var("k"), Var("acc", FLOAT32)
    body = For(i, M, For(j, N, seq(
        Decl(acc, f32(0.0)),
        For(k, K, Assign(acc, Bin("+", acc, Bin("*", Load(A, flat_index((i, k), (M, K))),
                                                 Load(B, flat_index((k, j), (K, N))))))),
        Store(C, flat_index((i, j), (M, N)),
              Call("tanhf", (Bin("max", Bin("+", acc, Load(bias, j)), f32(0.0)),), FLOAT32)))))
    func = PrimFunc("gemm_bias_relu_tanh", (A, B, bias, C), body, ("MatMul", "Add", "Relu"))
    ins = {"A": rng.standard_normal((M, K)).astype("f4"),
           "B": rng.standard_normal((K, N)).astype("f4"),
           "bias": rng.standard_normal(N).astype("f4")}
    return Case(func, ins, lambda d: {"C": np.tanh(np.maximum(d["A"] @ d["B"] + d["bias"], 0))},
                exact=False)


def vector_body() -> Case:
    """A vectorized main loop (float and int lanes) plus a scalar tail."""
    n, L = 19, 8
    x = Buffer("x", FLOAT32, (n,))
    y = Buffer("y", FLOAT32, (n,), OUT)
    q = Buffer("q", INT32, (n,), OUT)
    v, t = Var("v"), Var("t")
    fv, iv = vec(FLOAT32, L), vec(INT32, L)

    def value(idx, lanes):
        xv = Load(x, idx, lanes)
        zero = f32(0.0) if lanes == 1 else Broadcast(f32(0.0), lanes)
        two = f32(2.0) if lanes == 1 else Broadcast(f32(2.0), lanes)
        ty = FLOAT32 if lanes == 1 else fv
        return Select(Bin("<", xv, zero), Call("expf", (xv,), ty),
                      Bin("max", Bin("+", Bin("*", xv, two), Unary("neg", zero)), zero))

    def ivalue(idx, lanes):
        ti = INT32 if lanes == 1 else iv
        xi = Cast(ti, Bin("*", Load(x, idx, lanes),
                          f32(10.0) if lanes == 1 else Broadcast(f32(10.0), lanes)))
        b = (lambda c: c32(c)) if lanes == 1 else (lambda c: Broadcast(c32(c), lanes))
        return Bin("min", Bin("max", Bin("-", Bin("*", xi, b(3)), Bin(">>", xi, b(1))), b(-20)),
                   Bin("+", Unary("abs", xi), b(5)))

    body = seq(
        Comment("main loop: 8 lanes"),
        For(v, 16, seq(Store(y, v, value(v, L)), Store(q, v, ivalue(v, L))),
            ForKind.VECTORIZED, 0, L),
        Comment("tail"),
        For(t, 3, seq(Store(y, t, value(t, 1)), Store(q, t, ivalue(t, 1))), start=16))
    func = PrimFunc("vector_tail", (x, y, q), body)

    def expect(d):
        xv = d["x"]
        xi = (xv * np.float32(10)).astype(np.int32)
        return {"y": np.where(xv < 0, np.exp(xv), np.maximum(xv * 2, 0)).astype("f4"),
                "q": np.minimum(np.maximum(xi * 3 - (xi >> 1), -20), np.abs(xi) + 5)}
    return Case(func, {"x": (rng.standard_normal(n) * 3).astype("f4")}, expect, exact=False)


EDGE32 = [-2**31, -2**31 + 1, -2**30, -65537, -3, -1, 0, 1, 2, 3, 65535, 2**30, 2**31 - 1]


def fixed_point() -> Case:
    """int8 dense with int64 accumulation check, requantized with the helpers."""
    n = len(EDGE32)
    a, b = np.array(EDGE32, "i4"), np.array(EDGE32[::-1], "i4")
    e = np.arange(n, dtype="i4") * 31 // (n - 1)
    k = np.clip(np.arange(n, dtype="i4") % 30 + 1, 1, 30).astype("i4")
    A, Bb, E, Kk = (Buffer(nm, INT32, (n,)) for nm in ("a", "b", "e", "k"))
    s1, s2, s3, s4 = (Buffer(nm, INT32, (n,), OUT) for nm in ("s_srdhm", "s_rdbpot", "s_satshl",
                                                                "s_mbqm"))
    wide = Buffer("wide", INT64, (n,), OUT)
    i = Var("i")
    acc = Var("acc", INT64)
    la, lb = Load(A, i), Load(Bb, i)
    elementwise = For(i, n, seq(
        Store(s1, i, Call("aot_srdhm", (la, lb), INT32)),
        Store(s2, i, Call("aot_rdbpot", (la, Load(E, i)), INT32)),
        Store(s3, i, Call("aot_satshl", (la, Load(Kk, i)), INT32)),
        Store(s4, i, Call("aot_mbqm", (Bin(">>", la, c32(8)), lb, Bin("-", Load(E, i), c32(20))),
                          INT32)),
        Decl(acc, Bin("*", Cast(INT64, la), Cast(INT64, lb))),
        Assign(acc, Bin("+", acc, Bin("<<", Cast(INT64, Load(E, i)), Const(40, INT64)))),
        Store(wide, i, Bin("/", acc, Const(-7, INT64)))))

    # int8 dense + requantize + clamp
    R, C = 4, 9
    x = Buffer("x", I8, (C,))
    w = Buffer("w", I8, (R, C), PARAM)
    mult = Buffer("mult", INT32, (R,), PARAM)
    shift = Buffer("shift", INT32, (R,), PARAM)
    y = Buffer("y", I8, (R,), OUT)
    r, c, s = Var("r"), Var("c"), Var("sum")
    dense = For(r, R, seq(
        Decl(s, c32(0)),
        For(c, C, Assign(s, Bin("+", s, Bin("*", Bin("-", Cast(INT32, Load(x, c)), c32(-5)),
                                             Cast(INT32, Load(w, flat_index((r, c), (R, C)))))))),
        Store(y, r, Cast(I8, Bin("min", Bin("max", Bin("+", Call(
            "aot_mbqm", (s, Load(mult, r), Load(shift, r)), INT32), c32(3)), c32(-128)),
            c32(127))))), ForKind.UNROLLED)
    func = PrimFunc("fixed_point", (A, Bb, E, Kk, x, w, mult, shift, s1, s2, s3, s4, wide, y),
                    seq(elementwise, dense))
    ins = {"a": a, "b": b, "e": e, "k": k,
           "x": rng.integers(-128, 128, C).astype("i1"),
           "w": rng.integers(-128, 128, (R, C)).astype("i1"),
           "mult": rng.integers(2**30, 2**31 - 1, R).astype("i4"),
           "shift": np.array([-9, -1, 0, 2], "i4")}

    def expect(d):
        ai, bi, ei, ki = (d[n_].tolist() for n_ in "abek")
        acc_ = (d["x"].astype(np.int64) + 5) @ d["w"].astype(np.int64).T
        return {
            "s_srdhm": np.array([srdhm(p, q_) for p, q_ in zip(ai, bi)], "i4"),
            "s_rdbpot": np.array([rdbpot(p, q_) for p, q_ in zip(ai, ei)], "i4"),
            "s_satshl": np.array([satshl(p, q_) for p, q_ in zip(ai, ki)], "i4"),
            "s_mbqm": np.array([mbqm(p >> 8, q_, ee - 20) for p, q_, ee in zip(ai, bi, ei)], "i4"),
            "wide": np.array([tdiv(p * q_ + (ee << 40), -7) for p, q_, ee in zip(ai, bi, ei)],
                             "i8"),
            "y": np.array([np.clip(mbqm(int(v), int(m), int(sh)) + 3, -128, 127)
                           for v, m, sh in zip(acc_, d["mult"], d["shift"])], "i1"),
        }
    return Case(func, ins, expect)


def casts_and_ints() -> Case:
    vals = np.array([-2.7, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.7, 100.0, -100.0, 0.0, 3.49999],
                    "f4")
    n = len(vals)
    x = Buffer("x", FLOAT32, (n,))
    ints = Buffer("ints", INT32, (n,))
    outs = {nm: Buffer(nm, d, (n,), OUT) for nm, d in [
        ("trunc", INT32), ("round", I8), ("rint", INT32), ("tofloat", FLOAT32),
        ("wrap8", I8), ("wrapu8", U8), ("mulu16", DType("uint16")), ("udiv", U32),
        ("sdiv", INT32), ("smod", INT32), ("shr", INT32), ("pm", INT32), ("fpm", FLOAT32),
        ("sel", FLOAT32), ("asbool", DType("bool")), ("dbl", F64)]}
    i = Var("i")
    xi, ii = Load(x, i), Load(ints, i)
    i8 = Cast(I8, ii)
    body = For(i, n, seq(
        Store(outs["trunc"], i, Cast(INT32, xi)),
        Store(outs["round"], i, Cast(I8, Call("roundf", (xi,), FLOAT32))),
        Store(outs["rint"], i, Cast(INT32, Call("rintf", (xi,), FLOAT32))),
        Store(outs["tofloat"], i, Bin("/", Cast(FLOAT32, ii), f32(3.0))),
        Store(outs["wrap8"], i, Bin("+", Bin("*", i8, Const(3, I8)), Const(100, I8))),
        Store(outs["wrapu8"], i, Bin("-", Cast(U8, ii), Const(200, U8))),
        Store(outs["mulu16"], i, Bin("*", Cast(DType("uint16"), ii), Cast(DType("uint16"), ii))),
        Store(outs["udiv"], i, Bin("/", Cast(U32, ii), Const(7, U32))),
        Store(outs["sdiv"], i, Bin("/", ii, c32(-3))),
        Store(outs["smod"], i, Bin("%", ii, c32(5))),
        Store(outs["shr"], i, Bin(">>", ii, c32(2))),
        Store(outs["pm"], i, Bin("-", Bin("+", Bin(">>", ii, c32(4)), c32(-5)), c32(-7))),
        Store(outs["fpm"], i, Bin("-", Bin("+", xi, f32(-0.0)), f32(-1.5))),
        Store(outs["sel"], i, Select(Bin("or", Bin("<", xi, f32(-1.0)),
                                         Bin("and", Bin(">=", ii, c32(0)),
                                             Bin("!=", ii, c32(3)))),
                                     Unary("neg", xi), Bin("%", xi, f32(1.5)))),
        Store(outs["asbool"], i, Cast(DType("bool"), Bin("&", ii, c32(2)))),
        Store(outs["dbl"], i, Bin("*", Cast(F64, xi), Const(1e300, F64)))))
    func = PrimFunc("casts", (x, ints, *outs.values()), body)
    ints_v = np.array([-7, -100, 13, 3, 0, 1, 2, 99, 1000, -1000, 2**31 - 1, -2**31], "i4")

    def expect(d):
        xv, iv = d["x"], d["ints"]
        i8v = iv.astype(np.int8)
        return {
            "trunc": np.trunc(xv).astype("i4"),
            "round": np.array([math.copysign(math.floor(abs(v) + 0.5), v)
                               for v in xv]).astype("i1"),
            "rint": np.rint(xv).astype("i4"),
            "tofloat": iv.astype("f4") / np.float32(3),
            "wrap8": (i8v * np.int8(3) + np.int8(100)).astype("i1"),
            "wrapu8": (iv.astype(np.uint8) - np.uint8(200)).astype("u1"),
            "mulu16": iv.astype(np.uint16) * iv.astype(np.uint16),
            "udiv": iv.astype(np.uint32) // np.uint32(7),
            "sdiv": np.array([int(v / -3) for v in iv.tolist()], "i4"),
            "smod": np.array([int(math.fmod(v, 5)) for v in iv.tolist()], "i4"),
            "shr": iv >> 2,
            "pm": (iv >> 4) + 2,
            "fpm": xv + np.float32(1.5),
            "sel": np.where((xv < -1) | ((iv >= 0) & (iv != 3)), -xv, np.fmod(xv, np.float32(1.5))),
            "asbool": ((iv & 2) != 0).astype("u1"),
            "dbl": xv.astype("f8") * 1e300,
        }
    with np.errstate(over="ignore"):
        return Case(func, {"x": vals, "ints": ints_v}, expect)


def int_vectors() -> Case:
    """Narrow integer and bool lanes: wrapping arithmetic, masks, conversions."""
    n, L = 32, 16
    B = DType("bool")
    a = Buffer("a", I8, (n,))
    b = Buffer("b", I8, (n,))
    names = {"add": I8, "mul16": DType("int16"), "subu": U8, "mask": B, "logic": B,
             "widen": INT32, "neg": I8, "abs8": I8, "sel": I8, "mn": I8, "rd": INT32,
             "pw": FLOAT32}
    outs = {k: Buffer(k, d, (n,), OUT) for k, d in names.items()}
    i = Var("i")
    stmts = []
    for lanes, loop in ((L, dict(kind=ForKind.VECTORIZED, step=L)), (1, dict(start=n))):
        def k(v, d=I8):
            return Const(v, d) if lanes == 1 else Broadcast(Const(v, d), lanes)
        x, y = Load(a, i, lanes), Load(b, i, lanes)
        i16 = DType("int16", lanes)
        lt = Bin("<", x, y)
        stmts.append(For(i, n if lanes > 1 else 0, seq(
            Store(outs["add"], i, Bin("+", x, y)),
            Store(outs["mul16"], i, Bin("*", Cast(i16, x), Cast(i16, y))),
            Store(outs["subu"], i, Bin("-", Cast(U8.with_lanes(lanes), x), k(200, U8))),
            Store(outs["mask"], i, lt),
            Store(outs["logic"], i, Bin("or", Bin("and", lt, Bin("!=", x, k(0))),
                                        Unary("not", Bin(">=", y, k(-3))))),
            Store(outs["widen"], i, Bin("+", Cast(INT32.with_lanes(lanes), lt),
                                        Cast(INT32.with_lanes(lanes), x))),
            Store(outs["neg"], i, Unary("neg", x)),
            Store(outs["abs8"], i, Unary("abs", y)),
            Store(outs["sel"], i, Select(lt, Bin(">>", x, k(1)), Bin("<<", y, k(2)))),
            Store(outs["mn"], i, Bin("min", x, y)),
            # vector calls with a scalar operand
            Store(outs["rd"], i, Call("aot_rdbpot", (Cast(INT32.with_lanes(lanes), x), c32(2)),
                                      INT32.with_lanes(lanes))),
            Store(outs["pw"], i, Call("powf", (Cast(FLOAT32.with_lanes(lanes), y), f32(2.0)),
                                      FLOAT32.with_lanes(lanes)))), **loop))
    func = PrimFunc("int_vectors", (a, b, *outs.values()), seq(*stmts))
    ins = {"a": rng.integers(-128, 128, n).astype("i1"),
           "b": rng.integers(-128, 128, n).astype("i1")}
    ins["a"][:3] = [-128, 127, 0]
    ins["b"][:3] = [-128, -128, 0]

    def expect(d):
        x, y = d["a"], d["b"]
        with np.errstate(over="ignore"):
            return {"add": x + y, "mul16": x.astype("i2") * y.astype("i2"),
                    "subu": x.astype("u1") - np.uint8(200), "mask": x < y,
                    "logic": ((x < y) & (x != 0)) | ~(y >= -3),
                    "widen": (x < y).astype("i4") + x, "neg": -x, "abs8": np.abs(y),
                    "sel": np.where(x < y, x >> 1, (y.astype("i4") << 2).astype("i1")),
                    "mn": np.minimum(x, y),
                    "rd": np.array([rdbpot(int(v), 2) for v in x], "i4"),
                    "pw": y.astype("f4") ** 2}
    return Case(func, ins, expect)


def tautologies() -> Case:
    """Comparisons a type's range decides (`u >= 0`, `i8 <= 127`): gcc -Wextra
    rejects them as written, so the printer must fold them."""
    n = 4
    u8, s8, u32 = Buffer("u8", U8, (n,)), Buffer("s8", I8, (n,)), Buffer("u32", U32, (n,))
    out = Buffer("out", INT32, (n,), OUT)
    i, t = Var("i"), Var("t", U8)
    body = For(i, n, seq(
        Decl(t, Load(u8, i)),
        Store(out, i, Bin("+", Select(Bin("and", Bin(">=", t, Const(0, U8)),
                                          Bin(">=", Const(127, I8), Load(s8, i))), c32(1), c32(2)),
                          Select(Bin("<", Load(u32, i), Const(0, U32)), c32(10), c32(20))))))
    func = PrimFunc("tautologies", (u8, s8, u32, out), body)
    ins = {"u8": np.array([0, 1, 255, 7], "u1"), "s8": np.array([-128, 127, 0, 5], "i1"),
           "u32": np.array([0, 1, 2**32 - 1, 9], "u4")}
    return Case(func, ins, lambda d: {"out": np.full(n, 21, "i4")})


def bool_logic() -> Case:
    """max/min/compare on bools: unsigned (true is 1), so max is OR and min AND.
    An LLVM i1 read as signed has true = -1, which flips all three."""
    n = 4
    a, b = Buffer("a", BOOL, (n,)), Buffer("b", BOOL, (n,))
    mx, mn, gt = (Buffer(k, BOOL, (n,), OUT) for k in ("mx", "mn", "gt"))
    i = Var("i")
    body = For(i, n, seq(Store(mx, i, Bin("max", Load(a, i), Load(b, i))),
                         Store(mn, i, Bin("min", Load(a, i), Load(b, i))),
                         Store(gt, i, Bin(">", Load(a, i), Load(b, i)))))
    func = PrimFunc("bool_logic", (a, b, mx, mn, gt), body)
    ins = {"a": np.array([0, 0, 1, 1], "u1"), "b": np.array([0, 1, 0, 1], "u1")}
    return Case(func, ins, lambda d: {"mx": d["a"] | d["b"], "mn": d["a"] & d["b"],
                                      "gt": (d["a"] > d["b"]).astype("u1")})


def nan_semantics() -> Case:
    """Comparisons, min/max and to-bool with NaN and infinities, as C has them,
    scalar and on 8 lanes."""
    vals = np.array([math.nan, -1.0, 1.0, math.inf, -math.inf, 0.0, -0.0, math.nan], "f4")
    x = Buffer("x", FLOAT32, (8,))
    B = DType("bool")
    outs = {f"{nm}{lanes}": Buffer(f"{nm}{lanes}", d, (8,), OUT) for lanes in (1, 8)
            for nm, d in [("ne", B), ("lt", B), ("mn", FLOAT32), ("mx", FLOAT32), ("nz", B)]}
    i = Var("i")
    stmts = []
    for lanes in (1, 8):
        xv = Load(x, i, lanes)
        zero = f32(0.0) if lanes == 1 else Broadcast(f32(0.0), lanes)
        one = f32(1.0) if lanes == 1 else Broadcast(f32(1.0), lanes)
        o = {nm: outs[f"{nm}{lanes}"] for nm in ("ne", "lt", "mn", "mx", "nz")}
        stmts.append(For(i, 8, seq(
            Store(o["ne"], i, Bin("!=", xv, xv)), Store(o["lt"], i, Bin("<", xv, one)),
            Store(o["mn"], i, Bin("min", xv, zero)), Store(o["mx"], i, Bin("max", zero, xv)),
            Store(o["nz"], i, Cast(B.with_lanes(lanes), xv))),
            ForKind.SERIAL if lanes == 1 else ForKind.VECTORIZED, 0, lanes))
    func = PrimFunc("nan_semantics", (x, *outs.values()), seq(*stmts))

    def expect(d):
        v = d["x"]
        one = {"ne": v != v, "lt": v < 1, "mn": np.where(v < 0, v, np.float32(0)),
               "mx": np.where(0 > v, np.float32(0), v), "nz": v != 0}
        return {f"{k}{lanes}": a for lanes in (1, 8) for k, a in one.items()}
    # exact=False: value equality (NaN matches NaN, -0 matches +0). LLVM's
    # AArch64 and RISC-V backends select `x < 0 ? x : 0` as fminnm, which
    # returns -0 for x = -0; on x86 the backends must agree bit for bit (below).
    return Case(func, {"x": vals}, expect, exact=False)


MINMAX_TYPES = (FLOAT32, I8, U8, INT32, INT64)
MINMAX_LANES = (4, 8, 16)


def minmax_operands(d: DType, n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """a, b of n values: random, then the pairs that tell a blend from a
    wrong one (NaNs with distinct payloads, signed zeros, the ends of the
    range, uint8 above 127, int64 whose low halves compare the other way)."""
    if d.is_float:
        a = rng.standard_normal(n).astype("f4")
        b = rng.standard_normal(n).astype("f4")
        nan_a, nan_b, nan_neg = (np.array([u], "u4").view("f4")[0]
                                 for u in (0x7FC00001, 0x7FC00002, 0xFFC00003))
        pairs = [(nan_a, 1.0), (1.0, nan_b), (nan_a, nan_b), (nan_neg, -np.inf),
                 (-0.0, 0.0), (0.0, -0.0), (-0.0, -0.0), (np.inf, -np.inf), (-np.inf, np.inf),
                 (2.5, 2.5), (-1.0, nan_neg)]
    else:
        info = np.iinfo(d.scalar)
        a = rng.integers(info.min, info.max, n, endpoint=True, dtype=d.scalar)
        b = rng.integers(info.min, info.max, n, endpoint=True, dtype=d.scalar)
        pairs = [(info.min, info.max), (info.max, info.min), (info.min, info.min),
                 (0, info.max), (-1 if info.min else 128, 1), (7, 7)]
        if d.scalar == "int64":
            pairs += [(2**40, 2**32 + 5), (-2**40 + 1, 3), (2**32, 2**32 - 1)]
    for k, (x, y) in enumerate(pairs):
        a[k], b[k] = x, y
    return a, b


def vector_minmax() -> Case:
    """Vector min/max are exactly the lanes of `a < b ? a : b` and
    `a > b ? a : b` (a NaN in a picks b; -0 and +0 compare equal, so b) at
    4, 8 and 16 lanes: the C printer's compare-and-blend helper and LLVM's
    select."""
    n = 32
    ins, params, outs, stmts = {}, [], {}, []
    i = Var("i")
    own_rng = np.random.default_rng(11)     # the other cases' inputs stay as they were
    for d in MINMAX_TYPES:
        s = d.scalar
        a, b = Buffer(f"a_{s}", d, (n,)), Buffer(f"b_{s}", d, (n,))
        params += [a, b]
        ins[a.name], ins[b.name] = minmax_operands(d, n, own_rng)
        for lanes in MINMAX_LANES:
            for op in ("min", "max"):
                out = outs[f"{op}_{s}_{lanes}"] = Buffer(f"{op}_{s}_{lanes}", d, (n,), OUT)
                stmts.append(For(i, n, Store(out, i, Bin(op, Load(a, i, lanes),
                                                         Load(b, i, lanes))),
                                 ForKind.VECTORIZED, step=lanes))
    func = PrimFunc("vector_minmax", (*params, *outs.values()), seq(*stmts))

    def expect(d):
        want = {}
        for k in outs:
            op, s, _ = k.split("_")
            x, y = d[f"a_{s}"], d[f"b_{s}"]
            want[k] = np.where(x < y, x, y) if op == "min" else np.where(x > y, x, y)
        return want
    return Case(func, ins, expect)


UNARY_MATH = {  # name -> (numpy/math reference on float64, input domain)
    "expf": (np.exp, (-5, 5)), "exp2f": (np.exp2, (-5, 5)), "expm1f": (np.expm1, (-2, 2)),
    "logf": (np.log, (0.1, 9)), "log2f": (np.log2, (0.1, 9)), "log10f": (np.log10, (0.1, 9)),
    "log1pf": (np.log1p, (-0.5, 9)), "sqrtf": (np.sqrt, (0, 9)), "cbrtf": (np.cbrt, (-9, 9)),
    "sinf": (np.sin, (-4, 4)), "cosf": (np.cos, (-4, 4)), "tanf": (np.tan, (-1, 1)),
    "asinf": (np.arcsin, (-0.9, 0.9)), "acosf": (np.arccos, (-0.9, 0.9)),
    "atanf": (np.arctan, (-5, 5)), "sinhf": (np.sinh, (-3, 3)), "coshf": (np.cosh, (-3, 3)),
    "tanhf": (np.tanh, (-4, 4)), "asinhf": (np.arcsinh, (-4, 4)),
    "acoshf": (np.arccosh, (1, 5)), "atanhf": (np.arctanh, (-0.9, 0.9)),
    "erff": (np.vectorize(math.erf), (-3, 3)), "erfcf": (np.vectorize(math.erfc), (-3, 3)),
    "tgammaf": (np.vectorize(math.gamma), (0.5, 5)),
    "lgammaf": (np.vectorize(math.lgamma), (0.5, 5)),
    "fabsf": (np.abs, (-5, 5)), "floorf": (np.floor, (-5, 5)), "ceilf": (np.ceil, (-5, 5)),
    "roundf": (lambda v: np.sign(v) * np.floor(np.abs(v) + 0.5), (-5, 5)),
    "truncf": (np.trunc, (-5, 5)), "rintf": (np.rint, (-5, 5)), "nearbyintf": (np.rint, (-5, 5)),
}
BINARY_MATH = {
    "powf": np.power, "atan2f": np.arctan2, "fmodf": np.fmod, "hypotf": np.hypot,
    "fminf": np.fmin, "fmaxf": np.fmax, "copysignf": np.copysign,
}


def math_functions() -> Case:
    """Every libm function, scalar and on 8-lane vectors (per-lane in C)."""
    n = 16
    names = list(UNARY_MATH) + list(BINARY_MATH) + ["fmaf"]
    x = Buffer("x", FLOAT32, (len(UNARY_MATH), n))
    p = Buffer("p", FLOAT32, (n,))
    outs = [Buffer(f"o_{nm}", FLOAT32, (n,), OUT) for nm in names]
    i = Var("i")
    stmts = []
    for lanes, loop in ((1, For(i, 8, None)), (8, For(i, 8, None, ForKind.VECTORIZED, 8, 8))):
        ty = FLOAT32.with_lanes(lanes)
        body = []
        for k, (nm, out) in enumerate(zip(names, outs)):
            if nm in UNARY_MATH:
                args = (Load(x, Bin("+", i, c32(k * n)), lanes),)
            elif nm in BINARY_MATH:
                args = (Load(x, Bin("+", i, c32(n)), lanes), Load(p, i, lanes))
            else:
                args = (Load(p, i, lanes), Load(x, i, lanes), Load(x, Bin("+", i, c32(n)), lanes))
            body.append(Store(out, i, Call(nm, args, ty)))
        stmts.append(For(i, loop.extent, seq(*body), loop.kind, loop.start, loop.step))
    func = PrimFunc("math_functions", (x, p, *outs), seq(*stmts))
    xs = np.stack([np.linspace(*dom, n) for _, dom in UNARY_MATH.values()]).astype("f4")
    xs[:, 3] = 0.5     # a rounding tie for round/rint
    xs[:, 4] = -2.5
    ins = {"x": xs, "p": np.linspace(-3, 3, n).astype("f4")}

    def expect(d):
        xv, pv = d["x"].astype("f8"), d["p"].astype("f8")
        out = {}
        for k, (nm, (ref, _)) in enumerate(UNARY_MATH.items()):
            out[f"o_{nm}"] = ref(xv[k])
        for nm, ref in BINARY_MATH.items():
            out[f"o_{nm}"] = ref(xv[1], pv)
        out["o_fmaf"] = pv * xv[0] + xv[1]
        return {k: v.astype("f4") for k, v in out.items()}
    ins["x"][1] = np.abs(ins["x"][1]) + 0.25      # powf needs a positive base
    with np.errstate(all="ignore"):
        return Case(func, ins, expect, exact=False)


FLOAT_EDGES = [0.0, -0.0, math.inf, -math.inf, 0.1, 1 / 3, 16777217.0, 3.4028234663852886e38,
               1.401298464324817e-45, 1.1754943508222875e-38, -2.5, 123456.789,
               float(np.nextafter(np.float32(1), np.float32(2))), 7e-10]
INT_EDGES = {"int32": [-2**31, 2**31 - 1, -1, 0], "int64": [-2**63, 2**63 - 1, -2**31, 2**40],
             "int8": [-128, 127], "uint32": [2**32 - 1, 2**31], "uint64": [2**64 - 1],
             "uint8": [255], "int16": [-32768], "uint16": [65535]}


def constants() -> Case:
    """Edge constants stored verbatim: compared bit for bit."""
    fo = Buffer("floats", FLOAT32, (len(FLOAT_EDGES) + 2,), OUT)
    do = Buffer("doubles", F64, (len(FLOAT_EDGES),), OUT)
    stmts = [Store(fo, c32(k), f32(v)) for k, v in enumerate(FLOAT_EDGES)]
    stmts += [Store(fo, c32(len(FLOAT_EDGES)), f32(math.nan)),
              Store(fo, c32(len(FLOAT_EDGES) + 1), Unary("neg", f32(-0.0)))]
    stmts += [Store(do, c32(k), Const(v, F64)) for k, v in enumerate(FLOAT_EDGES)]
    int_outs = []
    for scalar, vals in INT_EDGES.items():
        b = Buffer(f"c_{scalar}", DType(scalar), (len(vals) + 1,), OUT)
        int_outs.append(b)
        stmts += [Store(b, c32(k), Const(v, DType(scalar))) for k, v in enumerate(vals)]
        # arithmetic on an extreme constant: (min + 1) or (max - 1) in the type
        stmts.append(Store(b, c32(len(vals)), Bin("-", Const(vals[0], DType(scalar)),
                                                  Unary("neg", Const(1, DType(scalar))))))
    func = PrimFunc("constants", (fo, do, *int_outs), seq(*stmts))

    def expect(_):
        out = {"floats": np.array(FLOAT_EDGES + [math.nan, 0.0], "f4"),
               "doubles": np.array(FLOAT_EDGES, "f8")}
        for scalar, vals in INT_EDGES.items():
            info = np.iinfo(scalar)
            last = (vals[0] + 1 - info.min) % 2**info.bits + info.min
            out[f"c_{scalar}"] = np.array(vals + [last], scalar)
        return out
    return Case(func, {}, expect)


HOSTILE = ['in"put', "back\\slash", "new\nline", "end*/comment", "/*open", "ünïcødé", "9lives",
           "int", "float", "return", "", "__reserved", "_Upper", "INT32_MAX", "expf", "aot_x",
           "a??/b", "x" * 200, "in'put", "名前", "e/x:0", "EDOM"]


def hostile_names() -> Case:
    bufs = [Buffer(nm, FLOAT32, (3,), OUT if k % 3 == 2 else BufferKind.INPUT)
            for k, nm in enumerate(HOSTILE)]
    ins = [b for b in bufs if b.kind is BufferKind.INPUT]
    outs = [b for b in bufs if b.kind is OUT]
    i = Var("for")
    body = For(i, 3, seq(*(Store(o, i, Bin("+", Load(ins[k], i), Load(ins[k + 1], i)))
                           for k, o in enumerate(outs))))
    func = PrimFunc('kernel "*/ \\n\n9', tuple(bufs), seq(Comment("*/ evil \n ??/"), body),
                    tuple(HOSTILE))
    inputs = {b.name: rng.standard_normal(3).astype("f4") for b in ins}
    return Case(func, inputs, lambda d: {o.name: d[ins[k].name] + d[ins[k + 1].name]
                                         for k, o in enumerate(outs)})


CASES = {f.__name__: f() for f in (gemm_epilogue, vector_body, fixed_point, casts_and_ints,
                                   nan_semantics, int_vectors, vector_minmax, tautologies,
                                   math_functions, constants, hostile_names, bool_logic)}
FUNCS = [c.func for c in CASES.values()]
BACKENDS = ["gcc", "clang", "llvm"]


# ------------------------------------------------------------------- building

def build(backend: str, tmp) -> tuple[ctypes.CDLL, dict[str, str]]:
    so = tmp / f"lib_{backend}.so"
    if backend == "llvm":
        obj = tmp / "kernels_llvm.o"
        obj.write_bytes(emit_object(FUNCS, "t", get_target("x86_64-linux")))
        cmd = ["cc", "-shared", "-o", str(so), str(obj), "-lm"]
        symbols = emit_c(FUNCS, "t").symbols
    else:
        src = emit_c(FUNCS, "t")
        (tmp / "kernels.c").write_text(src.source)
        cmd = [backend, *CFLAGS, "-shared", "-o", str(so), str(tmp / "kernels.c"), "-lm"]
        symbols = src.symbols
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stderr[-3000:]}"
    return ctypes.CDLL(str(so)), symbols


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("codegen")
    return {b: build(b, tmp) for b in BACKENDS}


def run(lib, symbols, case: Case) -> dict[str, np.ndarray]:
    arrays = []
    for b in case.func.params:
        if b.name in case.inputs:
            arrays.append(np.ascontiguousarray(case.inputs[b.name]).copy())
        else:
            arrays.append(np.full(b.shape, 0x55, dtype="u1" if b.dtype.scalar == "bool"
                                  else b.dtype.scalar))
    fn = getattr(lib, symbols[case.func.name])
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p] * len(arrays)
    fn(*(a.ctypes.data for a in arrays))
    return {b.name: a for b, a in zip(case.func.params, arrays) if b.kind is BufferKind.OUTPUT}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_kernel_matches_numpy(libs, backend, name):
    case = CASES[name]
    got = run(*libs[backend], case)
    with np.errstate(all="ignore"):
        want = case.expect(case.inputs)
    assert set(got) == set(want)
    for k, w in want.items():
        g = got[k]
        w = np.asarray(w).astype(g.dtype).reshape(g.shape)
        if case.exact:
            assert g.tobytes() == w.tobytes(), f"{name}/{k}: {g} != {w}"
        else:
            np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6, err_msg=f"{name}/{k}")


def test_backends_agree_exactly_on_integer_kernels(libs):
    for name in ("fixed_point", "constants", "casts_and_ints", "nan_semantics", "int_vectors"):
        results = [run(*libs[b], CASES[name]) for b in BACKENDS]
        for other in results[1:]:
            for k in results[0]:
                assert results[0][k].tobytes() == other[k].tobytes(), (name, k)


def test_vector_minmax_built_for_avx512(tmp_path):
    """vector_minmax as the host-avx512 board builds it (clang and gcc with
    the target's -O2 -march=x86-64-v4, LLVM for the target): 16 lanes are
    one native vector there, and clang -O2 is where a lane loop stayed scalar."""
    from aot.targets import get_board
    from support import cpu_lacks

    if cpu_lacks("host-avx512"):
        pytest.skip(cpu_lacks("host-avx512"))
    board = get_board("host-avx512")
    case, target = CASES["vector_minmax"], board.target
    src = emit_c([case.func], "t")
    (tmp_path / "k.c").write_text(src.source)
    (tmp_path / "k.o").write_bytes(emit_object([case.func], "t", target))
    # gcc has its own installation built in: clang's pin of it is not gcc's flag
    flags = {"gcc": target.gcc_pin.unpinned(target.cflags), "clang": target.cflags}
    cmds = {cc: [cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-fPIC", *flags[cc],
                 str(tmp_path / "k.c")] for cc in ("gcc", "clang")}
    cmds["llvm"] = ["cc", str(tmp_path / "k.o")]
    want = case.expect(case.inputs)
    for name, cmd in cmds.items():
        so = tmp_path / f"{name}.so"
        proc = subprocess.run([*cmd, "-shared", "-o", str(so)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stderr[-3000:]}"
        got = run(ctypes.CDLL(str(so)), src.symbols, case)
        for k, w in want.items():
            assert got[k].tobytes() == w.tobytes(), f"{name}/{k}: {got[k]} != {w}"


# ----------------------------------------------------------------- C spelling

def test_c_identifier_hostile_names():
    taken: set[str] = set()
    out = [c_identifier(n, taken) for n in HOSTILE]
    assert len(set(out)) == len(out) == len(taken)
    for o in out:
        assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,62}", o), o
        assert o not in ("int", "float", "return", "INT32_MAX", "expf", "EDOM")
        assert not o.startswith("aot_") or o.endswith("_")   # helpers never end in _
    assert out[0] == "in_put" and out[HOSTILE.index("in'put")] == "in_put_1"
    assert c_identifier("conv1/BiasAdd:0", set()) == "conv1_BiasAdd_0"
    assert c_identifier("9lives", set()) == "t9lives"
    # deterministic
    assert [c_identifier(n, s) for s in [set()] for n in HOSTILE] == out


def test_c_comment_and_string_are_inert():
    for text in HOSTILE + ["a*/b/*c", "??=", "tab\there"]:
        com = c_comment(text)
        assert "*/" not in com and "/*" not in com and "??" not in com and "\n" not in com
        assert com.isascii() and com.isprintable()
        lit = c_string(text)
        assert lit.isascii() and "\n" not in lit and "??" not in lit


def test_hostile_source_compiles_clean_and_names_are_readable():
    src = emit_c([CASES["hostile_names"].func], "t")
    assert "evil" in src.source and "*/ evil" not in src.source
    assert "in_put" in src.source and "for_" in src.source
    assert src.prototypes[0].startswith(f"void {src.symbols[CASES['hostile_names'].func.name]}(")


def test_c_output_is_deterministic_and_readable():
    a, b = emit_c(FUNCS, "t"), emit_c(FUNCS, "t")
    assert a == b
    target = get_target("x86_64-linux")
    assert emit_object(FUNCS, "t", target) == emit_object(FUNCS, "t", target)
    gemm = a.source[a.source.index("/* gemm_bias_relu_tanh"):]
    assert "from MatMul, Add, Relu" in gemm
    assert "acc = acc + A[i * 7 + k] * B[k * 6 + j];" in gemm
    assert "#pragma GCC unroll 4" in a.source
    assert "INT32_MIN" in a.source and "INT64_C(" in a.source


def test_llvm_ir_uses_noalias_and_vectors():
    ir = emit_llvm_ir(FUNCS, "t", get_target("x86_64-linux"))
    assert "noalias" in ir and "<8 x float>" in ir


# ------------------------------------------------------------- real models

# Light models (a few kernels each); the int8 ones must agree bit for bit.
LIGHT_MODELS = ["tflm_hello_world_f32", "tflm_hello_world_int8", "tflm_micro_speech_int8",
                "mlperf_ad_fcae_int8", "tflm_mnist_lstm_int8"]


@pytest.mark.parametrize("model", LIGHT_MODELS)
def test_model_llvm_object_matches_c_and_interpreter(model, models_dir, tmp_path):
    import aot
    from aot.lower import lower_graph
    from aot.testing.kernels import compile_kernels, run_kernels

    path = next(models_dir.glob(f"{model}.*[et]"))
    graph = aot.optimize(aot.load(path))
    target = get_target("x86_64-linux")
    kernels = lower_graph(graph, target)
    inputs = {graph.inputs[0]: np.load(models_dir / f"{model}.input.npy")}
    want = aot.interpret(graph, inputs)

    c_lib, symbols = compile_kernels(kernels, "c")
    obj, so = tmp_path / "k.o", tmp_path / "k.so"
    obj.write_bytes(emit_object([k.func for k in kernels], "t", target))
    subprocess.run(["cc", "-shared", "-o", str(so), str(obj), "-lm"], check=True)
    llvm_syms = emit_c([k.func for k in kernels], "t").symbols
    by_c = run_kernels(c_lib, symbols, graph, kernels, inputs)
    by_llvm = run_kernels(ctypes.CDLL(str(so)), llvm_syms, graph, kernels, inputs)
    for name in graph.outputs:
        if by_c[name].dtype.kind == "f":
            np.testing.assert_allclose(by_llvm[name], want[name], rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(by_llvm[name], by_c[name], rtol=1e-5, atol=1e-6)
        else:
            assert np.array_equal(by_llvm[name], want[name]), name
            assert np.array_equal(by_llvm[name], by_c[name]), name


# ------------------------------------------------------------- cross targets

CROSS = {  # name: (triple, cpu, features, cross gcc, qemu-user)
    "aarch64": ("aarch64-linux-gnu", "cortex-a72", "+neon", "aarch64-linux-gnu-gcc",
                "qemu-aarch64"),
    "armv7hf": ("arm-linux-gnueabihf", "cortex-a7", "+neon,+vfp4", "arm-linux-gnueabihf-gcc",
                "qemu-arm"),
    "riscv64": ("riscv64-linux-gnu", "generic-rv64", "+m,+a,+f,+d,+c", "riscv64-linux-gnu-gcc",
                "qemu-riscv64"),
}


def driver_source(prototypes) -> str:
    """A main() that runs every case on its inputs (embedded as bytes) and
    prints each output buffer as hex, one `name hex` line per buffer."""
    lines = ["#include <stdint.h>", "#include <stdio.h>", "#include <string.h>", "",
             *prototypes, ""]
    body = []
    for cn, case in CASES.items():
        args = []
        for k, b in enumerate(case.func.params):
            arr = np.asarray(case.inputs[b.name]) if b.name in case.inputs else \
                np.full(b.shape, 0x55, "u1" if b.dtype.scalar == "bool" else b.dtype.scalar)
            raw = np.ascontiguousarray(arr).view(np.uint8).ravel()
            var = f"{cn}_{k}"
            lines.append(f"static uint8_t {var}[{max(raw.size, 1)}] __attribute__((aligned(64))) "
                         f"= {{{', '.join(str(int(x)) for x in raw) or '0'}}};")
            args.append(f"(void *){var}")
            if b.kind is BufferKind.OUTPUT:
                body.append(f"    dump({c_string(f'{cn}/{k}')}, {var}, sizeof {var});")
        body.insert(len(body) - sum(b.kind is BufferKind.OUTPUT for b in case.func.params),
                    f"    {emit_c([case.func], 't').symbols[case.func.name]}({', '.join(args)});")
    lines += ["", "static void dump(const char *name, const uint8_t *p, size_t n)", "{",
              '    printf("%s ", name);', "    for (size_t i = 0; i < n; ++i)",
              '        printf("%02x", p[i]);', '    printf("\\n");', "}", "",
              "int main(void)", "{", *body, "    return 0;", "}"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("arch", list(CROSS))
def test_cross_targets_under_qemu(arch, backend, tmp_path):
    import dataclasses
    import shutil
    triple, cpu, features, gcc, qemu = CROSS[arch]
    assert shutil.which(gcc) and shutil.which(qemu), f"{gcc} / {qemu} missing"
    src = emit_c(FUNCS, "t")
    (tmp_path / "main.c").write_text(driver_source(src.prototypes))
    if backend == "c":
        (tmp_path / "k.c").write_text(src.source)
        kernels = [str(tmp_path / "k.c")]
    else:
        target = dataclasses.replace(get_target("x86_64-linux"), triple=triple, cpu=cpu,
                                     features=features, vector_bits=128)
        (tmp_path / "k.o").write_bytes(emit_object(FUNCS, "t", target))
        kernels = [str(tmp_path / "k.o")]
    exe = tmp_path / "run"
    cmd = [gcc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-static", "-o", str(exe),
           str(tmp_path / "main.c"), *kernels, "-lm"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = subprocess.run([qemu, str(exe)], capture_output=True, text=True, timeout=120, check=True)
    got = dict(line.split(" ") for line in out.stdout.splitlines())
    for cn, case in CASES.items():
        with np.errstate(all="ignore"):
            want = case.expect(case.inputs)
        for k, b in enumerate(case.func.params):
            if b.kind is not BufferKind.OUTPUT:
                continue
            dtype = "u1" if b.dtype.scalar == "bool" else b.dtype.scalar
            g = np.frombuffer(bytes.fromhex(got[f"{cn}/{k}"]), dtype).reshape(b.shape)
            w = np.asarray(want[b.name]).astype(dtype).reshape(b.shape)
            if case.exact:
                assert g.tobytes() == w.tobytes(), f"{arch}/{backend} {cn}/{b.name}: {g} != {w}"
            else:
                np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6,
                                           err_msg=f"{arch}/{backend} {cn}/{b.name}")


# ----------------------------------------------------------- ill-typed TIR

def _ill_typed():
    x = Buffer("x", INT32, (4,))
    y = Buffer("y", INT32, (4,), OUT)
    i, j, t = Var("i"), Var("j"), Var("t")
    load = Load(x, i)
    return {
        "mixed int widths": For(i, 4, Store(y, i, Bin("+", load, Cast(INT64, load)))),
        "float into int buffer": For(i, 4, Store(y, i, Cast(FLOAT32, load))),
        "int condition": For(i, 4, Store(y, i, Select(load, load, load))),
        "unknown function": For(i, 4, Store(y, i, Call("frobnicate", (load,), INT32))),
        "out of scope": seq(For(i, 4, Decl(t, load)), For(j, 4, Store(y, j, t))),
        "loop var after loop": seq(For(i, 4, Store(y, i, load)), Store(y, c32(0), i)),
        "not a param": For(i, 4, Store(Buffer("z", INT32, (4,), OUT), i, load)),
        "vector into If": For(i, 4, If(Bin("<", Load(x, i, 4), Load(x, i, 4)),
                                       Store(y, i, load))),
        "shift of a float": For(i, 4, Store(y, i, Cast(INT32, Bin("<<", f32(1.0), f32(2.0))))),
    }


@pytest.mark.parametrize("what", list(_ill_typed()))
def test_ill_typed_tir_is_a_clear_error_in_both_backends(what):
    from aot.errors import UnsupportedError
    body = _ill_typed()[what]
    func = PrimFunc("bad_kernel", (Buffer("x", INT32, (4,)), Buffer("y", INT32, (4,), OUT)), body)
    with pytest.raises(UnsupportedError, match="bad_kernel"):
        emit_c([func], "t")
    with pytest.raises(UnsupportedError, match="bad_kernel"):
        emit_llvm_ir([func], "t", get_target("x86_64-linux"))


# ------------------------------------------- random expressions, differential

INT_TYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]


class ExprGen:
    """Random well-typed integer TIR free of C undefined behaviour: signed
    + - * only on 8/16-bit types (computed in int, then wrapped), shifts by
    in-range constants, division by constants other than 0 and -1. With
    lanes > 1 every value is a vector of that many lanes."""

    def __init__(self, seed: int, a: Buffer, b: Buffer, i: Var, lanes: int = 1):
        self.r = np.random.default_rng(seed)
        self.a, self.b, self.i, self.lanes = a, b, i, lanes

    def splat(self, e: Expr) -> Expr:
        return e if self.lanes == 1 else Broadcast(e, self.lanes)

    def cast(self, d: DType, e: Expr) -> Expr:
        return Cast(d.with_lanes(self.lanes), e)

    def const(self, d: DType) -> Expr:
        info = np.iinfo(d.scalar)
        pick = self.r.integers(4)
        v = [info.min, info.max, 0, int(self.r.integers(-100, 100))][pick]
        return self.splat(Const(int(np.clip(v, info.min, info.max)), d))

    def leaf(self, d: DType) -> Expr:
        pick = self.r.integers(4)
        if pick == 0:
            return self.const(d)
        if pick == 1:
            return self.splat(Cast(d, self.i) if d != INT32 else self.i)
        src = Load(self.a if pick == 2 else self.b, self.i, self.lanes)
        return src if d == src.buffer.dtype else self.cast(d, src)

    def expr(self, d: DType, depth: int) -> Expr:
        if depth == 0 or self.r.random() < 0.2:
            return self.leaf(d)
        info = np.iinfo(d.scalar)
        unsigned, narrow = info.min == 0, info.bits < 32
        ops = ["&", "|", "^", ">>", "min", "max", "select", "cast", "div", "mod"]
        if unsigned or narrow:
            ops += ["+", "-", "*"]
        if unsigned:
            ops.append("<<")
        if narrow and not unsigned:
            ops.append("neg")
        op = ops[self.r.integers(len(ops))]
        sub = lambda: self.expr(d, depth - 1)  # noqa: E731
        if op in (">>", "<<"):
            return Bin(op, sub(), self.splat(Const(int(self.r.integers(info.bits)), d)))
        if op in ("div", "mod"):
            c = int(self.r.integers(2, 50)) * (1 if unsigned or self.r.random() < 0.5 else -1)
            return Bin("/" if op == "div" else "%", sub(), self.splat(Const(c, d)))
        if op == "select":
            return Select(self.cond(depth - 1), sub(), sub())
        if op == "cast":
            other = DType(INT_TYPES[self.r.integers(len(INT_TYPES))])
            return self.cast(d, self.expr(other, depth - 1))
        if op == "neg":
            return Unary("neg", sub())
        return Bin(op, sub(), sub())

    def cond(self, depth: int) -> Expr:
        pick = self.r.integers(5)
        if pick == 0 and depth > 0:
            return Bin("and" if self.r.random() < 0.5 else "or", self.cond(depth - 1),
                       self.cond(depth - 1))
        if pick == 1 and depth > 0:
            return Unary("not", self.cond(depth - 1))
        d = DType(INT_TYPES[self.r.integers(len(INT_TYPES))])
        op = ["<", "<=", ">", ">=", "==", "!="][self.r.integers(6)]
        return Bin(op, self.expr(d, depth), self.expr(d, depth))


def random_int_funcs(count: int = 60, n: int = 64, lanes: int = 1) -> list[PrimFunc]:
    a, b = Buffer("a", INT32, (n,)), Buffer("b", INT32, (n,))
    funcs = []
    for k in range(count):
        d = DType(INT_TYPES[k % len(INT_TYPES)])
        out = Buffer("out", d, (n,), OUT)
        i = Var("i")
        value = ExprGen(k, a, b, i, lanes).expr(d, 5)
        kind = ForKind.VECTORIZED if lanes > 1 else ForKind.SERIAL
        funcs.append(PrimFunc(f"random{lanes}_{k}", (a, b, out),
                              For(i, n, Store(out, i, value), kind, step=lanes)))
    return funcs


def _outputs_per_lib(f, libs: dict, symbol: str, ins, n: int) -> dict:
    """f(a, b, out) run from each compiled library: {library name: out}."""
    results = {}
    for name, lib in libs.items():
        out = np.zeros(n, f.params[2].dtype.scalar)
        fn = getattr(lib, symbol)
        fn.restype, fn.argtypes = None, [ctypes.c_void_p] * 3
        fn(ins[0].ctypes.data, ins[1].ctypes.data, out.ctypes.data)
        results[name] = out
    return results


def test_random_integer_expressions_agree_across_backends(tmp_path):
    """Differential: C printed by us (precedence, casts, constants) under gcc
    and clang at -O1 and -O3 vs LLVM IR built from the same TIR."""
    funcs = random_int_funcs(40) + random_int_funcs(40, lanes=8)
    n = funcs[0].params[0].shape[0]
    ins = rng.integers(-2**31, 2**31, (2, n)).astype("i4")
    ins[:, :8] = [[-2**31, 2**31 - 1, 0, -1, 1, 255, -129, 65535]] * 2
    src = emit_c(funcs, "r")
    (tmp_path / "r.c").write_text(src.source)
    libs = {}
    for cc, opt in (("gcc", "-O1"), ("clang", "-O3"), ("gcc", "-O3")):
        so = tmp_path / f"{cc}{opt}.so"
        flags = [f for f in CFLAGS if f != "-O1"] + [opt]
        proc = subprocess.run([cc, *flags, "-shared", "-o", str(so), str(tmp_path / "r.c")],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        libs[f"{cc}{opt}"] = ctypes.CDLL(str(so))
    (tmp_path / "r.o").write_bytes(emit_object(funcs, "r", get_target("x86_64-linux")))
    subprocess.run(["cc", "-shared", "-o", str(tmp_path / "llvm.so"), str(tmp_path / "r.o")],
                   check=True)
    libs["llvm"] = ctypes.CDLL(str(tmp_path / "llvm.so"))
    for f in funcs:
        results = _outputs_per_lib(f, libs, src.symbols[f.name], ins, n)
        first = results["llvm"]
        for name, got in results.items():
            assert np.array_equal(got, first), (f.name, name, np.nonzero(got != first)[0][:5],
                                                emit_c([f], "r").source.split("{")[-1][:600])


class FloatGen(ExprGen):
    """Random float TIR: arithmetic, min/max, selects, negation, libm calls,
    float32 <-> float64 and exact int -> float conversions."""
    UNARY_FNS = ("sqrtf", "fabsf", "floorf", "ceilf", "roundf", "rintf", "truncf", "expf")

    def const(self, d: DType) -> Expr:
        pick = self.r.integers(5)
        v = [0.0, -0.0, 1.5, float(self.r.standard_normal() * 100), 3.4028234663852886e38][pick]
        return self.splat(Const(v, d))

    def leaf(self, d: DType) -> Expr:
        pick = self.r.integers(3)
        if pick == 0:
            return self.const(d)
        return self.cast(d, Load(self.a if pick == 1 else self.b, self.i, self.lanes))

    def expr(self, d: DType, depth: int) -> Expr:
        if depth == 0 or self.r.random() < 0.2:
            return self.leaf(d)
        ops = ["+", "-", "*", "/", "min", "max", "select", "neg", "abs", "call", "cast"]
        op = ops[self.r.integers(len(ops))]
        sub = lambda: self.expr(d, depth - 1)  # noqa: E731
        if op == "select":
            other = DType(("float32", "float64", "int32")[self.r.integers(3)])
            cmp = ["<", "<=", ">", ">=", "==", "!="][self.r.integers(6)]
            gen = self if other.is_float else ExprGen(int(self.r.integers(1000)), self.a, self.b,
                                                      self.i, self.lanes)
            return Select(Bin(cmp, gen.expr(other, depth - 1), gen.expr(other, depth - 1)),
                          sub(), sub())
        if op in ("neg", "abs"):
            return Unary(op, sub())
        if op == "call":
            fn = self.UNARY_FNS[self.r.integers(len(self.UNARY_FNS))]
            return Call(fn, (sub(),), d.with_lanes(self.lanes))
        if op == "cast":
            other = DType("float64" if d.scalar == "float32" else "float32")
            return self.cast(d, self.expr(other, depth - 1))
        return Bin(op, sub(), sub())


def test_random_float_expressions_agree_across_backends(tmp_path, seeds=range(40)):
    """Differential for floats (no FMA contraction on either side): the same
    bits from gcc, clang and LLVM, any NaN matching any NaN."""
    n = 64
    a, b = Buffer("a", INT32, (n,)), Buffer("b", INT32, (n,))
    funcs = []
    for k in seeds:
        lanes = 1 if k % 40 < 20 else 8
        d = DType(("float32", "float64")[k % 2])
        out, i = Buffer("out", d, (n,), OUT), Var("i")
        value = FloatGen(k, a, b, i, lanes).expr(d, 5)
        funcs.append(PrimFunc(f"randf{lanes}_{k}", (a, b, out),
                              For(i, n, Store(out, i, value),
                                  ForKind.VECTORIZED if lanes > 1 else ForKind.SERIAL,
                                  step=lanes)))
    ins = rng.integers(-2**20, 2**20, (2, n)).astype("i4")
    ins[:, :4] = [[0, -1, 2**31 - 1, -2**31]] * 2
    src = emit_c(funcs, "f")
    (tmp_path / "f.c").write_text(src.source)
    libs = {}
    for cc in ("gcc", "clang"):
        so = tmp_path / f"{cc}.so"
        proc = subprocess.run([cc, *CFLAGS, "-ffp-contract=off", "-shared", "-o", str(so),
                               str(tmp_path / "f.c"), "-lm"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        libs[cc] = ctypes.CDLL(str(so))
    import dataclasses
    target = dataclasses.replace(get_target("x86_64-linux"), cflags=())    # no contraction
    (tmp_path / "f.o").write_bytes(emit_object(funcs, "f", target))
    subprocess.run(["cc", "-shared", "-o", str(tmp_path / "llvm.so"), str(tmp_path / "f.o"),
                    "-lm"], check=True)
    libs["llvm"] = ctypes.CDLL(str(tmp_path / "llvm.so"))
    for f in funcs:
        results = _outputs_per_lib(f, libs, src.symbols[f.name], ins, n)
        ref = results["llvm"]
        for name, got in results.items():
            same = (got.view(f"u{got.itemsize}") == ref.view(f"u{ref.itemsize}")) | \
                (np.isnan(got) & np.isnan(ref))
            if name == "gcc":
                # GCC 12 folds `0.0 - (double)i` (and `-(double)i + 0.0`) to
                # `-(double)i` even at -O0, so it returns -0 where IEEE gives +0.
                same |= got == ref
            assert same.all(), (f.name, name, got[~same][:4], ref[~same][:4],
                                emit_c([f], "f").source.split("{")[-1][:600])


def test_unrolled_loops_are_fully_unrolled_by_llvm():
    x, y, i = Buffer("x", FLOAT32, (100,)), Buffer("y", FLOAT32, (100,), OUT), Var("i")
    target = get_target("x86_64-linux")
    calls = {}
    for kind in (ForKind.SERIAL, ForKind.UNROLLED):
        f = PrimFunc("u", (x, y), For(i, 100, Store(y, i, Call("tanhf", (Load(x, i),), FLOAT32)),
                                      kind))
        ir = emit_llvm_ir([f], "m", target, optimize=True)
        calls[kind] = (ir.count("call float @tanhf"), ir.count("br "))
    assert calls[ForKind.UNROLLED] == (100, 0)      # straight-line code
    assert calls[ForKind.SERIAL][1] > 0             # the serial loop stays a loop
    assert "#pragma GCC unroll 100" in emit_c([f], "m").source


def test_llvm_opt_level_is_the_targets_else_its_c_builds():
    """A target may build C at -O2 and still have LLVM unroll (level 3)."""
    import dataclasses

    from aot.codegen.llvm import _opt_level
    from aot.errors import AotError

    t = get_target("x86_64-linux")
    assert _opt_level(dataclasses.replace(t, cflags=("-O3", "-O2"), llvm_opt_level=None)) == 2
    assert _opt_level(dataclasses.replace(t, cflags=("-Os",), llvm_opt_level=None)) == 2
    assert _opt_level(dataclasses.replace(t, cflags=("-O2",), llvm_opt_level=3)) == 3
    with pytest.raises(AotError, match="llvm_opt_level must be 0-3"):
        _opt_level(dataclasses.replace(t, llvm_opt_level=7))
