"""PrimFuncs -> LLVM IR -> a relocatable object (llvmlite).

Same symbols and C ABI as the C backend (aot/codegen/c.py): one function
`void <prefix>_<name>(ptr noalias, ...)` per PrimFunc. The semantics follow
the C the other backend prints, so both agree bit for bit on integer
kernels: `/` and `%` truncate (sdiv/srem), `>>` on signed is ashr, min/max
are compare + select (C's `a < b ? a : b`, not llvm.minnum), float -> int
casts truncate (fptosi), a bool is i1 in registers and a byte in memory.
(One thing LLVM itself bends: its AArch64 and RISC-V backends select
`x < 0 ? x : 0` as fminnm, which gives -0 rather than +0 for x = -0; clang
compiling the C does the same.)

Locals and loop variables live in allocas of the entry block; the O3
pipeline (mem2reg/SROA first) turns them into registers and phis.
"""
from __future__ import annotations

import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from typing import Sequence

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir

from aot.isa import arm_dsp, arm_mve, half, neon, x86
from aot.isa.arm_dsp import DspOp
from aot.isa.arm_mve import MveOp
from aot.codegen.check import check_func
from aot.isa.calls import (Helper, Lane, LibmFn, PairPack, PairSums, check_call,
                           vector_helper)
from aot.isa.dots import PairDot, QuadDot
from aot.isa.neon import NeonFixedPoint
from aot.isa.x86 import Fmadd, Pmuldq
from aot.codegen.names import kernel_symbols
from aot.codegen.split import balanced_groups
from aot.errors import AotError, UnsupportedError
from aot.ir.tir import (Assign, Bin, Broadcast, Buffer, Call, Cast, Const, Decl, DType, Expr,
                        Fail, For, ForKind, If, Load, NTASKS, PrimFunc, Select, Seq, Stmt, Store,
                        TASK, PHASE, Unary, Var, can_fail, dtype_of, is_split, phases, walk_stmt)
from aot.lower.tir_passes.inplace import aliased_params
from aot.targets import Target

_FLOAT_OPS = {"+": "fadd", "-": "fsub", "*": "fmul", "/": "fdiv", "%": "frem"}
_INT_OPS = {"+": "add", "-": "sub", "*": "mul", "&": "and_", "|": "or_", "^": "xor", "<<": "shl",
            "and": "and_", "or": "or_"}
_SIGNED_OPS = {"/": ("sdiv", "udiv"), "%": ("srem", "urem"), ">>": ("ashr", "lshr")}
_COMPARE = {"<", "<=", ">", ">=", "==", "!="}


def _scalar_type(scalar: str) -> ir.Type:
    if scalar == "float32":
        return ir.FloatType()
    if scalar == "float64":
        return ir.DoubleType()
    if scalar == "bool":
        return ir.IntType(1)
    return ir.IntType(DType(scalar).bits)


def ir_type(d: DType) -> ir.Type:
    t = _scalar_type(d.scalar)
    return t if d.lanes == 1 else ir.VectorType(t, d.lanes)


def _mem_type(d: DType) -> ir.Type:
    """How a value of d sits in memory: bools are bytes."""
    t = ir.IntType(8) if d.scalar == "bool" else _scalar_type(d.scalar)
    return t if d.lanes == 1 else ir.VectorType(t, d.lanes)


def _elem_align(scalar: str) -> int:
    return 1 if scalar == "bool" else DType(scalar).bits // 8


def _suffix(d: DType) -> str:
    """LLVM intrinsic overload suffix: f32, f64, v8f32."""
    base = "f32" if d.scalar == "float32" else "f64"
    return base if d.lanes == 1 else f"v{d.lanes}{base}"


def _const(value, d: DType) -> ir.Constant:
    t = _scalar_type(d.scalar)
    if d.scalar == "float16":           # a half's bits, in an i16 as C holds them
        return ir.Constant(t, int(np.float16(value).view(np.uint16)))
    if d.is_float:
        v = float(value)
        if d.scalar == "float32":
            v = float(np.float32(v))
        return ir.Constant(t, v)
    if d.scalar == "bool":
        return ir.Constant(t, int(bool(value)))
    return ir.Constant(t, int(value) % (1 << d.bits))


class _FuncBuilder:
    def __init__(self, module: ir.Module, func: PrimFunc, symbol: str, contract: bool = False):
        self.module = module
        check_func(func)
        self.func = func
        self.float_flags = ["contract"] if contract else []
        # a kernel with run-time checks returns its status, as in C (tir.Fail)
        self.status = ir.IntType(32) if can_fail(func) else None
        # a split kernel also takes (task, ntasks): tir.ForKind.PARALLEL
        split = ((PHASE, TASK, NTASKS) if phases(func) > 1 else (TASK, NTASKS)) \
            if is_split(func) else ()
        fnty = ir.FunctionType(self.status or ir.VoidType(),
                               [ir.PointerType() for _ in func.params]
                               + [ir.IntType(32)] * len(split))
        self.fn = ir.Function(module, fnty, name=symbol)
        self.fn.attributes.add("nounwind")
        self.buffers: dict[Buffer, ir.Value] = {}
        shared = aliased_params(func)    # an output written over an input, and the input
        for arg, buf in zip(self.fn.args, func.params):
            arg.name = buf.name
            if buf.name not in shared:
                arg.add_attribute("noalias")
            self.buffers[buf] = arg
        entry = self.fn.append_basic_block("entry")
        self.alloca_builder = ir.IRBuilder(entry)
        body = self.fn.append_basic_block("body")
        self.b = ir.IRBuilder(body)
        self.slots: dict[Var, ir.Value] = {}     # Decl'd locals and loop variables
        self.values: dict[Var, ir.Value] = {}    # helper parameters and lets
        for var, arg in zip(split, self.fn.args[len(func.params):]):
            arg.name = var.name
            self.values[var] = arg

    def error(self, what: str) -> UnsupportedError:
        return UnsupportedError(f"LLVM codegen, function {self.func.name}: {what}")

    def build(self):
        self.stmt(self.func.body)
        if self.status is None:
            self.b.ret_void()
        else:
            self.b.ret(ir.Constant(self.status, 0))
        self.alloca_builder.branch(self.fn.basic_blocks[1])

    # ------------------------------------------------------------ statements
    def slot(self, var: Var) -> ir.Value:
        if var not in self.slots:
            self.slots[var] = self.alloca_builder.alloca(ir_type(var.dtype), name=var.name)
        return self.slots[var]

    def stmt(self, s: Stmt):
        if isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, Store):
            self.store(s)
        elif isinstance(s, (Decl, Assign)):
            value = s.init if isinstance(s, Decl) else s.value
            self.b.store(self.value(value), self.slot(s.var))
        elif isinstance(s, For):
            self.loop(s)
        elif isinstance(s, If):
            self.branch(s)
        elif isinstance(s, Fail):
            self.b.ret(ir.Constant(self.status, s.code))
            # what follows in the TIR (a loop latch, an If's merge) needs a
            # block to go in: one no branch reaches
            self.b.position_at_end(self.fn.append_basic_block("failed"))

    def address(self, buf: Buffer, index: Expr) -> ir.Value:
        idx = self.value(index)
        return self.b.gep(self.buffers[buf], [idx], inbounds=True,
                          source_etype=_mem_type(buf.dtype))

    def store(self, s: Store):
        d = dtype_of(s.value)
        value = self.value(s.value)
        if d.scalar == "bool":
            value = self.b.zext(value, _mem_type(d))
        self.b.store(value, self.address(s.buffer, s.index), align=_elem_align(d.scalar))

    def _share(self, s: For, end: int) -> ir.Value:
        """The first (end 0) or past-the-end (end 1) value of the loop
        variable in this task's balanced share of the trips, as in C."""
        d = s.var.dtype
        trips = -(-s.extent // s.step)
        t = self.b.sext(self.values[TASK], ir.IntType(64))
        if end:
            t = self.b.add(t, ir.Constant(ir.IntType(64), 1))
        k = self.b.sdiv(self.b.mul(t, ir.Constant(ir.IntType(64), trips)),
                        self.b.sext(self.values[NTASKS], ir.IntType(64)))
        k = self.b.trunc(k, ir_type(d)) if d.bits < 64 else k
        return self.b.add(self.b.mul(k, _const(s.step, d)), _const(s.start, d))

    def loop(self, s: For):
        d = s.var.dtype
        slot = self.slot(s.var)
        parallel = s.kind is ForKind.PARALLEL
        self.b.store(self._share(s, 0) if parallel else _const(s.start, d), slot)
        end = self._share(s, 1) if parallel else _const(s.start + s.extent, d)
        head = self.fn.append_basic_block(f"{s.var.name}.head")
        body = self.fn.append_basic_block(f"{s.var.name}.body")
        done = self.fn.append_basic_block(f"{s.var.name}.done")
        self.b.branch(head)
        self.b.position_at_end(head)
        i = self.b.load(slot, typ=ir_type(d))
        cmp = self.b.icmp_unsigned if d.scalar.startswith("u") else self.b.icmp_signed
        self.b.cbranch(cmp("<", i, end), body, done)
        self.b.position_at_end(body)
        self.stmt(s.body)
        i = self.b.load(slot, typ=ir_type(d))
        step = self.b.add(i, _const(s.step, d))
        if _no_signed_wrap(d):
            step.flags.append("nsw")
        self.b.store(step, slot)
        latch = self.b.branch(head)
        if s.kind is ForKind.UNROLLED:
            latch.set_metadata("llvm.loop", self.unroll_metadata())
        self.b.position_at_end(done)

    def unroll_metadata(self):
        """`!{!self, !{!"llvm.loop.unroll.full"}}`. Loop metadata must refer to
        itself, which llvmlite cannot spell: a marker string stands in for the
        self reference until `_self_references` rewrites the text."""
        full = self.module.add_metadata([ir.MetaDataString(self.module,
                                                           "llvm.loop.unroll.full")])
        marker = ir.MetaDataString(self.module, f"{_LOOP_MARKER}{len(self.module.metadata)}")
        return self.module.add_metadata([marker, full])

    def branch(self, s: If):
        cond = self.value(s.cond)
        then = self.fn.append_basic_block("then")
        merge = self.fn.append_basic_block("endif")
        other = self.fn.append_basic_block("else") if s.orelse is not None else merge
        self.b.cbranch(cond, then, other)
        self.b.position_at_end(then)
        self.stmt(s.then)
        self.b.branch(merge)
        if s.orelse is not None:
            self.b.position_at_end(other)
            self.stmt(s.orelse)
            self.b.branch(merge)
        self.b.position_at_end(merge)

    # ----------------------------------------------------------- expressions
    def value(self, e: Expr) -> ir.Value:
        method = getattr(self, "_" + type(e).__name__.lower(), None)
        if method is None:
            raise self.error(f"not a TIR expression: {e!r}")
        return method(e)

    def _var(self, e: Var):
        if e in self.values:
            return self.values[e]
        return self.b.load(self.slots[e], typ=ir_type(e.dtype), name=e.name)

    def _const(self, e: Const):
        return _const(e.value, e.dtype)

    def _load(self, e: Load):
        d = e.buffer.dtype.with_lanes(e.lanes)
        v = self.b.load(self.address(e.buffer, e.index), typ=_mem_type(d),
                        align=_elem_align(d.scalar))
        if d.scalar == "bool":
            v = self.b.icmp_unsigned("!=", v, ir.Constant(v.type, None))
        return v

    def _broadcast(self, e: Broadcast):
        return self.splat(self.value(e.value), e.lanes)

    def splat(self, scalar: ir.Value, lanes: int) -> ir.Value:
        vt = ir.VectorType(scalar.type, lanes)
        undef = ir.Constant(vt, ir.Undefined)
        one = self.b.insert_element(undef, scalar, ir.Constant(ir.IntType(32), 0))
        return self.b.shuffle_vector(one, undef, ir.Constant(ir.VectorType(ir.IntType(32), lanes),
                                                             [0] * lanes))

    def _bin(self, e: Bin):
        da, db = dtype_of(e.a), dtype_of(e.b)
        a, b = self.value(e.a), self.value(e.b)
        if da != db:
            b = self.convert(b, db, da)
        if e.op in ("min", "max"):
            less = self.compare("<" if e.op == "min" else ">", a, b, da)
            return self.b.select(less, a, b)
        if e.op in _COMPARE:
            return self.compare(e.op, a, b, da)
        if da.is_float:
            if e.op not in _FLOAT_OPS:
                raise self.error(f"'{e.op}' on {da}")
            out = getattr(self.b, _FLOAT_OPS[e.op])(a, b)
            out.flags.extend(self.float_flags)
            return out
        if e.op in _SIGNED_OPS:
            signed, unsigned = _SIGNED_OPS[e.op]
            return getattr(self.b, unsigned if _unsigned(da) else signed)(a, b)
        if e.op in _INT_OPS:
            out = getattr(self.b, _INT_OPS[e.op])(a, b)
            if e.op in ("+", "-", "*") and _no_signed_wrap(da):
                out.flags.append("nsw")
            return out
        raise self.error(f"unknown binary op '{e.op}'")

    def compare(self, op: str, a, b, d: DType):
        if d.is_float:
            # C: every comparison with a NaN is false, except != which is true.
            if op == "!=":
                return self.b.fcmp_unordered(op, a, b)
            return self.b.fcmp_ordered(op, a, b)
        if _unsigned(d):
            return self.b.icmp_unsigned(op, a, b)
        return self.b.icmp_signed(op, a, b)

    def _unary(self, e: Unary):
        d = dtype_of(e.a)
        a = self.value(e.a)
        if e.op == "neg":
            return self.b.fneg(a) if d.is_float else self.b.neg(a)
        if e.op == "not":
            if d.scalar == "bool":
                return self.b.not_(a)
            return self.compare("==", a, ir.Constant(a.type, None), d)
        if e.op == "bitnot":
            return self.b.not_(a)
        if e.op == "abs":
            if d.is_float:
                return self.intrinsic("llvm.fabs", d, [a])
            negative = self.compare("<", a, ir.Constant(a.type, None), d)
            return self.b.select(negative, self.b.neg(a), a)
        raise self.error(f"unknown unary op '{e.op}'")

    def _cast(self, e: Cast):
        if e.bits:
            return self.b.bitcast(self.value(e.a), ir_type(e.dtype))
        return self.convert(self.value(e.a), dtype_of(e.a), e.dtype)

    def convert(self, v, src: DType, dst: DType):
        """C's conversion from src to dst (same lanes)."""
        if src.scalar == dst.scalar:
            return v
        if "float16" in (src.scalar, dst.scalar):
            return self.half_convert(v, src, dst)
        to = ir_type(dst)
        if dst.scalar == "bool":
            zero = ir.Constant(v.type, None)
            return (self.b.fcmp_unordered("!=", v, zero) if src.is_float
                    else self.b.icmp_unsigned("!=", v, zero))
        if src.is_float and dst.is_float:
            return (self.b.fpext if dst.bits > src.bits else self.b.fptrunc)(v, to)
        if src.is_float:
            return (self.b.fptoui if _unsigned(dst) else self.b.fptosi)(v, to)
        unsigned_src = _unsigned(src)
        if dst.is_float:
            return (self.b.uitofp if unsigned_src else self.b.sitofp)(v, to)
        if dst.bits < src.bits:
            return self.b.trunc(v, to)
        if dst.bits > src.bits or src.scalar == "bool":
            return (self.b.zext if unsigned_src else self.b.sext)(v, to)
        return v    # same width, other signedness: the same bits

    def half_convert(self, v, src: DType, dst: DType):
        """float16 bits (i16) <-> float32: fpext / fptrunc of `half` where the
        target has the instructions (HALF_CONVERSIONS, aot/isa/half.py), else
        the C backend's aot_half_to_float / aot_float_to_half in branch-free
        integer arithmetic (lane-wise on vectors), as x86 without F16C and
        Cortex-M without an FPU would turn fpext/fptrunc into runtime-library
        calls."""
        if dict(self.func.attrs).get(half.HALF_CONVERSIONS) and "float32" in (
                src.scalar, dst.scalar):
            n = src.lanes
            hv = ir.HalfType() if n == 1 else ir.VectorType(ir.HalfType(), n)
            if src.scalar == "float16":
                return self.b.fpext(self.b.bitcast(v, hv), ir_type(dst))
            return self.b.bitcast(self.b.fptrunc(v, hv), ir_type(dst))
        if (src.scalar, dst.scalar) == ("float16", "float32"):
            return _half_to_float(self.b, v, src.lanes)
        if (src.scalar, dst.scalar) == ("float32", "float16"):
            return _float_to_half(self.b, v, src.lanes)
        raise self.error(f"conversion from {src} to {dst} (the float16 pass converts halves "
                         "to and from float32 only)")

    def _select(self, e: Select):
        return self.b.select(self.value(e.cond), self.value(e.a), self.value(e.b))

    def _call(self, e: Call):
        fn = check_call(e.fn, e.args, e.dtype)
        args = [self.value(a) for a in e.args]
        if isinstance(fn, DspOp):
            return arm_dsp.llvm_emit(self.b, self.module, fn, args)
        if isinstance(fn, MveOp):
            return arm_mve.llvm_emit(self.b, self.module, fn, args)
        if isinstance(fn, PairDot):
            if fn.pmaddwd:
                return x86.llvm_pmaddwd(self, fn, e.dtype.lanes, args)
            if fn.packed:
                return self.packed_pair_dot(e.dtype.lanes, *args)
            return self.pair_dot(e.dtype.lanes, *args)
        if isinstance(fn, PairPack):
            if fn.group == 4:
                return self.quad_pack(e.dtype.lanes, fn.bytes, args[0])
            return self.pair_pack(e.dtype.lanes, fn.bytes, args[0])
        if isinstance(fn, QuadDot):
            return self.quad_dot(e.dtype.lanes, fn, *args)
        if e.fn in neon.NEON_OPS:
            if isinstance(fn, NeonFixedPoint):
                args = [self.splat(v, e.dtype.lanes) if dtype_of(a).lanes == 1 else v
                        for v, a in zip(args, e.args)]
            return neon.llvm_emit(self, fn, args)
        if isinstance(fn, Lane):
            return self.b.extract_element(args[0], args[1])
        if isinstance(fn, PairSums):
            return self.pair_sums(e.dtype, *args)
        if isinstance(fn, half.HalfOp):
            return half.llvm_half_op(self.b, self.module, fn, args)
        if isinstance(fn, Pmuldq):
            return x86.llvm_pmuldq_rdhm(self.b, *(self.splat(v, e.dtype.lanes)
                                                  if dtype_of(a).lanes == 1 else v
                                                  for v, a in zip(args, e.args)))
        if isinstance(fn, (LibmFn, Fmadd)) and fn.llvm:
            if e.dtype.lanes > 1:     # intrinsics take all-vector operands
                args = [self.splat(v, e.dtype.lanes) if dtype_of(a).lanes == 1 else v
                        for v, a in zip(args, e.args)]
            return self.intrinsic(fn.llvm, e.dtype, args)
        if e.dtype.lanes == 1:
            return self.scalar_call(fn, e, args)
        whole = vector_helper(fn.name, e.dtype.lanes) if isinstance(fn, Helper) else None
        if whole is not None:
            return self.expand(whole, [self.splat(v, e.dtype.lanes) if dtype_of(a).lanes == 1
                                       else v for v, a in zip(args, e.args)])
        # No vector form: lane by lane (the SLP vectorizer may regroup them).
        out = ir.Constant(ir_type(e.dtype), ir.Undefined)
        for k in range(e.dtype.lanes):
            lane = ir.Constant(ir.IntType(32), k)
            scalars = [self.b.extract_element(a, lane) if dtype_of(x).lanes > 1 else a
                       for a, x in zip(args, e.args)]
            out = self.b.insert_element(out, self.scalar_call(fn, e, scalars), lane)
        return out

    def pair_sums(self, d: DType, a, b):
        """aot_pair_sums: the even lanes of a and b plus their odd lanes."""
        n = d.lanes
        halves = [self.b.shuffle_vector(a, b, ir.Constant(ir.VectorType(ir.IntType(32), n),
                                                          list(range(first, 2 * n, 2))))
                  for first in (0, 1)]
        return (self.b.fadd if d.is_float else self.b.add)(*halves)

    def packed_pair_dot(self, n: int, p, w):
        """aot_dot2p: aot_dot2 of its halves."""
        i16, i32 = ir.IntType(16), ir.IntType(32)
        x0 = self.b.trunc(p, i16)
        x1 = self.b.trunc(self.b.ashr(p, ir.Constant(i32, 16)), i16)
        return self.pair_dot(n, x0, x1, w)

    def pair_pack(self, n: int, as_bytes: bool, v):
        """aot_pack2_bytes: the vector's bytes (little-endian); aot_pack2:
        sext / mask / shift of its even and odd lanes."""
        i32 = ir.IntType(32)
        vt = ir.VectorType(i32, n)
        if as_bytes:
            return self.b.bitcast(v, vt)
        undef = ir.Constant(v.type, ir.Undefined)
        even, odd = (self.b.sext(self.b.shuffle_vector(v, undef, ir.Constant(
            vt, [2 * k + j for k in range(n)])), vt) for j in (0, 1))
        low = self.b.and_(even, ir.Constant(vt, [0xFFFF] * n))
        return self.b.add(low, self.b.shl(odd, ir.Constant(vt, [16] * n)))

    def quad_pack(self, n: int, as_bytes: bool, v):
        """aot_pack4_bytes: the vector's bytes (little-endian); aot_pack4:
        lanes 4k + j zero-extended (the last sign-extended) and shifted by 8j."""
        vt = ir.VectorType(ir.IntType(32), n)
        if as_bytes:    # n = 1: one quad read from a byte row, a scalar
            return self.b.bitcast(v, ir.IntType(32) if n == 1 else vt)
        undef = ir.Constant(v.type, ir.Undefined)
        total = None
        for j in range(4):
            part = self.b.shuffle_vector(v, undef, ir.Constant(vt, [4 * k + j for k in range(n)]))
            part = (self.b.sext if j == 3 else self.b.zext)(part, vt)
            part = self.b.shl(part, ir.Constant(vt, [8 * j] * n)) if j else part
            total = part if total is None else self.b.add(total, part)
        return self.b.extract_element(total, ir.Constant(ir.IntType(32), 0)) if n == 1 else total

    def quad_dot(self, n: int, fn: QuadDot, acc, q, w):
        """arm_sdot / arm_smull_dot4 / x86_vpdpbusd: the instruction
        (_QUAD_DOT) on the quad broadcast and seen as bytes; aot_dot4(u/s):
        extend, multiply and add the four products of each lane (the quad's
        bytes taken by shifts)."""
        i8, i32 = ir.IntType(8), ir.IntType(32)
        if fn.instruction:
            x = self.b.bitcast(self.splat(q, n), w.type)
            return _QUAD_DOT[fn.instruction](self.b, self.module, acc, x, w)
        vt = ir.VectorType(i32, 4 * n)
        quad = ir.Constant(ir.VectorType(i32, 4), ir.Undefined)
        for j in range(4):
            byte = self.b.trunc(self.b.lshr(q, ir.Constant(i32, 8 * j)), i8)
            quad = self.b.insert_element(quad, (self.b.zext if fn.unsigned else self.b.sext)(
                byte, i32), ir.Constant(i32, j))
        xs = self.b.shuffle_vector(quad, ir.Constant(quad.type, ir.Undefined),
                                   ir.Constant(vt, [k % 4 for k in range(4 * n)]))
        prod = self.b.mul(xs, self.b.sext(w, vt))
        undef = ir.Constant(vt, ir.Undefined)
        out = acc
        for j in range(4):
            out = self.b.add(out, self.b.shuffle_vector(prod, undef, ir.Constant(
                ir.VectorType(i32, n), [4 * k + j for k in range(n)])))
        return out

    def pair_dot(self, n: int, x0, x1, w):
        """aot_dot2 (dots.PairDot): sext / mul / add of the even and odd
        lanes (x86_pmaddwd is x86.llvm_pmaddwd)."""
        i32 = ir.IntType(32)
        vt = ir.VectorType(i32, n)
        undef = ir.Constant(w.type, ir.Undefined)
        even, odd = (self.b.sext(self.b.shuffle_vector(w, undef, ir.Constant(
            ir.VectorType(i32, n), [2 * k + j for k in range(n)])), vt) for j in (0, 1))
        return self.b.add(self.b.mul(self.splat(self.b.sext(x0, i32), n), even),
                          self.b.mul(self.splat(self.b.sext(x1, i32), n), odd))

    def scalar_call(self, fn, e: Call, args):
        if isinstance(fn, Helper):
            return self.expand(fn, args)
        scalar = e.dtype.with_lanes(1)
        t = ir_type(scalar)
        callee = self.module.globals.get(fn.c_name)
        if callee is None:
            callee = ir.Function(self.module, ir.FunctionType(t, [t] * fn.arity), fn.c_name)
        return self.b.call(callee, args)

    def expand(self, h: Helper, args):
        """A runtime helper inline: its parameters and lets bound to values."""
        saved = self.values
        self.values = dict(zip(h.params, args))
        try:
            for var, value in h.lets:
                self.values[var] = self.value(value)
            return self.value(h.result)
        finally:
            self.values = saved

    def intrinsic(self, name: str, d: DType, args):
        full = f"{name}.{_suffix(d)}"
        callee = self.module.globals.get(full)
        if callee is None:
            t = ir_type(d)
            callee = ir.Function(self.module, ir.FunctionType(t, [t] * len(args)), full)
        return self.b.call(callee, args)


def _k(value: int, lanes: int, bits: int = 32) -> ir.Constant:
    """An integer constant, splatted to `lanes`."""
    t = ir.IntType(bits)
    return ir.Constant(t, value) if lanes == 1 else \
        ir.Constant(ir.VectorType(t, lanes), [value] * lanes)


def _half_to_float(b: ir.IRBuilder, h, lanes: int):
    i32 = ir.IntType(32) if lanes == 1 else ir.VectorType(ir.IntType(32), lanes)
    f32 = ir_type(DType("float32", lanes))
    x = b.zext(h, i32)
    sign = b.shl(b.and_(x, _k(0x8000, lanes)), _k(16, lanes))
    em = b.and_(x, _k(0x7fff, lanes))
    shifted = b.shl(em, _k(13, lanes))
    special = b.or_(shifted, _k(0x7f800000, lanes))
    normal = b.add(shifted, _k(0x38000000, lanes))
    tiny = b.bitcast(b.fmul(b.uitofp(em, f32), b.bitcast(_k(0x33800000, lanes), f32)), i32)
    bits = b.select(b.icmp_unsigned(">=", em, _k(0x7c00, lanes)), special,
                    b.select(b.icmp_unsigned(">=", em, _k(0x0400, lanes)), normal, tiny))
    return b.bitcast(b.or_(bits, sign), f32)


def _float_to_half(b: ir.IRBuilder, f, lanes: int):
    i32 = ir.IntType(32) if lanes == 1 else ir.VectorType(ir.IntType(32), lanes)
    i16 = ir.IntType(16) if lanes == 1 else ir.VectorType(ir.IntType(16), lanes)
    x = b.bitcast(f, i32)
    ax = b.and_(x, _k(0x7fffffff, lanes))
    nan = b.or_(_k(0x7e00, lanes), b.and_(b.lshr(ax, _k(13, lanes)), _k(0x3ff, lanes)))
    odd = b.and_(b.lshr(ax, _k(13, lanes)), _k(1, lanes))
    normal = b.lshr(b.sub(b.add(b.add(ax, _k(0xfff, lanes)), odd), _k(0x38000000, lanes)),
                    _k(13, lanes))
    # subnormal or zero: m * 2^-24, m = the 24-bit significand shifted right, rounded
    # (every lane computes this form: exponents of normal halves clamped to
    # keep the shifts below 32, which LLVM would make poison)
    exp = b.lshr(ax, _k(23, lanes))
    exp = b.select(b.icmp_unsigned("<", exp, _k(112, lanes)), exp, _k(112, lanes))
    shift = b.sub(_k(126, lanes), exp)
    shift = b.select(b.icmp_unsigned("<", shift, _k(25, lanes)), shift, _k(25, lanes))
    m = b.or_(b.and_(ax, _k(0x7fffff, lanes)), _k(0x800000, lanes))
    q = b.lshr(m, shift)
    rest = b.and_(m, b.sub(b.shl(_k(1, lanes), shift), _k(1, lanes)))
    half = b.shl(_k(1, lanes), b.sub(shift, _k(1, lanes)))
    up = b.or_(b.icmp_unsigned(">", rest, half),
               b.and_(b.icmp_unsigned("==", rest, half),
                      b.icmp_unsigned("!=", b.and_(q, _k(1, lanes)), _k(0, lanes))))
    tiny = b.add(q, b.zext(up, i32))
    h = b.select(b.icmp_unsigned(">", ax, _k(0x7f800000, lanes)), nan,
                 b.select(b.icmp_unsigned(">=", ax, _k(0x477ff000, lanes)), _k(0x7c00, lanes),
                          b.select(b.icmp_unsigned(">=", ax, _k(0x38800000, lanes)), normal,
                                   tiny)))
    sign = b.and_(b.lshr(x, _k(16, lanes)), _k(0x8000, lanes))
    return b.trunc(b.or_(h, sign), i16)


def _unsigned(d: DType) -> bool:
    # A bool is an i1: read signed, true would be -1, and max would be AND.
    return d.scalar.startswith("u") or d.scalar == "bool"


def _no_signed_wrap(d: DType) -> bool:
    """int32/int64 + - * overflow is undefined in C, so LLVM may assume it away
    too (nsw): that lets index arithmetic widen to 64-bit addresses. 8/16-bit
    arithmetic wraps (C computes it in int and converts back)."""
    return d.scalar in ("int32", "int64")


# --------------------------------------------------------------------- driving LLVM

@lru_cache(maxsize=None)
def _llvm_ready() -> bool:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return True


def normalized_triple(triple: str) -> str:
    """The four-part spelling LLVM needs to see the float ABI: with
    `arm-linux-gnueabihf` it silently uses the soft-float convention."""
    parts = llvm.get_triple_parts(triple)
    given = triple.split("-")
    os_name = "none" if "none" in given[1:] else parts.OS
    head = f"{parts.Arch}{parts.SubArch}-{parts.Vendor}-{os_name}"
    return f"{head}-{parts.Env}" if parts.Env and parts.Env != "unknown" else head


def target_machine(target: Target) -> llvm.TargetMachine:
    _llvm_ready()
    triple = normalized_triple(target.triple)
    tgt = llvm.Target.from_triple(triple)
    return tgt.create_target_machine(cpu=target.cpu, features=target.features, opt=3,
                                     reloc="pic", codemodel="default",
                                     abiname=target.abi)


def build_module(funcs: Sequence[PrimFunc], prefix: str, target: Target,
                 symbols: dict[str, str] | None = None) -> ir.Module:
    """The functions as one module; `symbols` (from kernel_symbols over every
    function of the package) when these are only some of them."""
    module = ir.Module(name=prefix)
    module.triple = normalized_triple(target.triple)
    symbols = symbols or kernel_symbols(funcs, prefix)
    # Fuse a*b+c into FMAs exactly when the C build of this target may.
    contract = "-ffp-contract=fast" in target.cflags
    for f in funcs:
        _FuncBuilder(module, f, symbols[f.name], contract).build()
    return module


# The 4-way int8 dot products' instructions (QuadDot.instruction), each
# given (builder, module, acc, the broadcast quad as bytes, weights).
_QUAD_DOT = {"sdot": neon.llvm_sdot, "smull": neon.llvm_smull_dot4,
             "vpdpbusd": x86.llvm_vpdpbusd}


_LOOP_MARKER = "aot.loop.self."


def _self_references(text: str) -> str:
    """`!7 = !{!"aot.loop.self.N", !6}` -> `!7 = distinct !{!7, !6}`."""
    return re.sub(r'^(!\d+) = !\{\s*!"' + re.escape(_LOOP_MARKER) + r'\d+",\s*',
                  lambda m: f"{m.group(1)} = distinct !{{{m.group(1)}, ", text, flags=re.M)


def _opt_level(target: Target) -> int:
    """The target's `llvm_opt_level`, else the speed level its C build asks
    for (its last -O flag; -Os and -Oz count as 2), so both codegens trade
    speed for size alike unless the target says otherwise."""
    if target.llvm_opt_level is not None:
        if target.llvm_opt_level not in (0, 1, 2, 3):
            raise AotError(f"target '{target.name}': llvm_opt_level must be 0-3, "
                           f"got {target.llvm_opt_level!r}")
        return target.llvm_opt_level
    levels = [f[2:] for f in target.cflags if f.startswith("-O")]
    last = levels[-1] if levels else "3"
    return int(last) if last.isdigit() else 2


def _optimized(funcs, prefix: str, target: Target, symbols: dict[str, str] | None = None):
    tm = target_machine(target)
    module = build_module(funcs, prefix, target, symbols)
    module.data_layout = str(tm.target_data)
    mod = llvm.parse_assembly(_self_references(str(module)))
    mod.verify()
    level = _opt_level(target)
    pto = llvm.create_pipeline_tuning_options(speed_level=level)
    # as clang -O3 (llvmlite leaves them off), unless the target's C build
    # turns them off (rv64gcv: what QEMU 7.2 cannot run, targets/rv64gcv.toml)
    pto.slp_vectorization = "-fno-slp-vectorize" not in target.cflags
    pto.loop_vectorization = "-fno-vectorize" not in target.cflags
    # gcc at -O2 (the bare-metal targets' C build) does not unroll loops; LLVM
    # would, up to 15x the code on Cortex-M, where flash is what runs out
    pto.loop_unrolling = level >= 3
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return tm, mod


def emit_llvm_ir(funcs: Sequence[PrimFunc], prefix: str, target: Target,
                 optimize: bool = False) -> str:
    """The module as LLVM assembly (before optimization unless asked)."""
    if optimize:
        return str(_optimized(funcs, prefix, target)[1])
    return _self_references(str(build_module(funcs, prefix, target)))


def emit_object(funcs: Sequence[PrimFunc], prefix: str, target: Target) -> bytes:
    """An ELF relocatable object defining `<prefix>_<name>` per PrimFunc."""
    tm, mod = _optimized(funcs, prefix, target)
    return tm.emit_object(mod)


# Statements per object when a package splits its kernels (emit_objects):
# building, optimizing and emitting each part runs in its own process.
PART_STMTS = 700
MAX_PARTS = 8
_JOB: tuple = ()          # (funcs, prefix, target, symbols) for forked workers


def _part_object(indices: Sequence[int]) -> bytes:
    funcs, prefix, target, symbols = _JOB
    tm, mod = _optimized([funcs[i] for i in indices], prefix, target, symbols)
    return tm.emit_object(mod)


def _stmt_count(func: PrimFunc) -> int:
    return sum(1 for _ in walk_stmt(func.body))


def split_parts(funcs: Sequence[PrimFunc]) -> list[list[int]]:
    """Function indices in groups of about equal size in statements, each in
    call order (split.balanced_groups)."""
    return balanced_groups([_stmt_count(f) for f in funcs], PART_STMTS, MAX_PARTS)


def emit_objects(funcs: Sequence[PrimFunc], prefix: str, target: Target) -> list[bytes]:
    """The functions as one or more relocatable objects (split_parts), built
    in parallel by forked worker processes (LLVM in llvmlite holds one lock,
    so threads would take turns); serially where fork is not available or
    this process may not have children (a multiprocessing pool's worker)."""
    global _JOB
    symbols = kernel_symbols(funcs, prefix)
    parts = split_parts(funcs)
    _JOB = (list(funcs), prefix, target, symbols)
    try:
        workers = min(len(parts), os.cpu_count() or 1)
        if (workers < 2 or "fork" not in multiprocessing.get_all_start_methods()
                or multiprocessing.current_process().daemon):
            return [_part_object(p) for p in parts]
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            return list(pool.map(_part_object, parts))
    finally:
        _JOB = ()
