"""Single kernels checked below the package: the calls a lowered kernel makes
(which instructions a lowering chose), a kernel of one call (an instruction
family's, legalized and spelled), one kernel run as a static AArch64
program under qemu-aarch64, and the NEON fixed-point kernel (aot_rdhm,
aot_rdbpot on 4 lanes) with the inputs that reach its edges."""
from __future__ import annotations

import subprocess

import numpy as np

from aot.codegen.c import emit_c
from aot.codegen.llvm import emit_llvm_ir, emit_object
from aot.ir.tir import (Bin, Buffer, BufferKind, Call, Const, DType, For, Load, PrimFunc, Store,
                        Var, seq, stmt_exprs, walk_expr, walk_stmt)
from aot.lower.tir_passes.legalize import legalize
from aot.targets import get_target



def calls(func: PrimFunc) -> list[tuple[str, int]]:
    return [(e.fn, e.dtype.lanes) for s in walk_stmt(func.body) for x in stmt_exprs(s)
            for e in walk_expr(x) if isinstance(e, Call)]


def call_kernel(fn: str, operands: tuple[DType, ...], result: DType) -> PrimFunc:
    """A kernel storing one call of fn, each operand loaded from a buffer of
    its own (an instruction family's call as lowering would write it)."""
    ins = tuple(Buffer(f"in{k}", d.with_lanes(1), (d.lanes,)) for k, d in enumerate(operands))
    out = Buffer("out", result.with_lanes(1), (result.lanes,), BufferKind.OUTPUT)
    args = tuple(Load(b, Const(0), d.lanes) for b, d in zip(ins, operands))
    return PrimFunc(fn, (*ins, out), Store(out, Const(0), Call(fn, args, result)))


def spelled(func: PrimFunc, target_name: str, legalized: bool = True
            ) -> tuple[set[str], str, str]:
    """The calls func makes, legalized for the target (as they are if not
    `legalized`), and the C and LLVM IR the code generators make of it."""
    target = get_target(target_name)
    got = legalize(func, target) if legalized else func
    return call_names(got), emit_c([got], "t").source, emit_llvm_ir([got], "t", target)


def call_names(func: PrimFunc) -> set[str]:
    """The functions func's expressions call (the kernel tests' check of
    which instructions a lowering chose)."""
    return {name for name, _ in calls(func)}


TARGET = get_target("aarch64-linux")


_C_TYPES = {"int8": "int8_t", "int16": "int16_t", "int32": "int32_t"}


def run_qemu(func: PrimFunc, codegen: str, tmp_path, stdin: bytes, target=TARGET,
             qemu: tuple[str, ...] = ("qemu-aarch64",)) -> bytes:
    """func's kernel (C or LLVM) in a static program for `target` (AArch64)
    reading its input buffers from stdin and writing its output, under
    `qemu` (qemu-aarch64)."""
    src = emit_c([func], "t")
    decls, reads = [], []
    for b in func.params:
        n, ct = b.shape[0], _C_TYPES[b.dtype.scalar]
        decls.append(f"static {ct} {b.name}[{n}];")
        if b.kind != BufferKind.OUTPUT:
            reads.append(f"fread({b.name}, sizeof({ct}), {n}, stdin) != {n}")
    out = func.params[-1]
    main = "\n".join([
        "#include <stdint.h>", "#include <stdio.h>", src.prototypes[0], *decls,
        "int main(void) {", f"    if ({' || '.join(reads)}) return 2;",
        f"    {src.symbols[func.name]}({', '.join(b.name for b in func.params)});",
        f"    return fwrite({out.name}, sizeof({out.name}[0]), {out.shape[0]}, stdout)"
        f" == {out.shape[0]} ? 0 : 3;", "}", ""])
    (tmp_path / "main.c").write_text(main)
    if codegen == "c":
        kernel = tmp_path / "k.c"
        kernel.write_text(src.source)
    else:
        kernel = tmp_path / "k.o"
        kernel.write_bytes(emit_object([func], "t", target))
    exe = tmp_path / "t"
    subprocess.run([target.cc, *target.cflags, *target.ldflags, "-static", "-o", str(exe),
                    str(tmp_path / "main.c"), str(kernel)], check=True)
    return subprocess.run([*qemu, str(exe)], input=stdin, capture_output=True,
                          check=True, timeout=60).stdout


N = 4096
I32, I4 = DType("int32"), DType("int32", 4)


def _func(lanes: int = 4) -> PrimFunc:
    """out[i] = aot_rdhm(a[i], m[i]), out[N + i] = aot_rdbpot(a[i], e[i]), `lanes` at a time."""
    a, m, e = (Buffer(n, I32, (N,)) for n in "ame")
    out = Buffer("out", I32, (2 * N,), BufferKind.OUTPUT)
    i = Var("i")
    v = I32.with_lanes(lanes)
    return PrimFunc("fixed_point", (a, m, e, out), For(i, N, seq(
        Store(out, i, Call("aot_rdhm", (Load(a, i, lanes), Load(m, i, lanes)), v)),
        Store(out, Bin("+", i, Const(N)), Call("aot_rdbpot", (Load(a, i, lanes),
                                                               Load(e, i, lanes)), v))),
        step=lanes))


def _inputs(rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    edges = np.array([0, 1, -1, 2**31 - 1, -2**31, -2**31 + 1, 2**30, -2**30, 3, -3],
                     np.int64)
    e = np.tile(np.arange(32), N // 32)
    a = rng.integers(-2**31, 2**31, N)
    a[:32 * len(edges)] = np.repeat(edges, 32)
    # ties: x = k 2^e + 2^(e-1), both signs (RDBPOT rounds them away from zero)
    k = rng.integers(-2**20, 2**20, N)
    ties = k * (1 << e) + np.where(e > 0, 1 << np.maximum(e - 1, 0), 0)
    part = slice(N // 2, N // 2 + N // 4)
    a[part] = np.clip(ties[part], -2**31, 2**31 - 1)
    # multipliers as quantize_multiplier makes them (never INT32_MIN), and edges
    m = rng.integers(2**30, 2**31, N) * rng.choice([-1, 1], N)
    m[:8] = [2**31 - 1, -2**31 + 1, 1, -1, 0, 2**30, -2**30, 12345]
    return a.astype(np.int32), m.astype(np.int32), e.astype(np.int32)
