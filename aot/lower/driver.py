"""Lowering: one fused node of the optimized Graph -> one PrimFunc.

The group's elementwise and injective ops are inlined (value rules); at most
one op builds a loop nest (a kernel rule), and the inlined ops after it
become its epilogue, computed in registers before each store. A group with
no kernel op gets a plain loop nest over each of its outputs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from aot.errors import UnsupportedError, node_label
from aot.ir.graph import Graph, Node, TensorType
from aot.ir.tir import (Broadcast, Buffer, BufferKind, Const, Expr, For, Load, PrimFunc, Stmt,
                        Store, add, const, dt, dtype_of, flat_index, mul, seq, walk_stmt,
                        walk_expr_loads)
from aot.isa import x86
from aot.lower.arith.bounds import ATTR as CHECKS
from aot.lower.rules import LowerCtx, Rule, RuleKind, TensorRef, ValueRule, rule_of
from aot.lower.schedule.space import group_scope
from aot.lower.tir_passes import Dump, run_passes
from aot.ops import op_def
from aot.targets import Target


@dataclass(frozen=True)
class Arg:
    """What a kernel parameter is bound to when the entry point calls it.

    kind: "tensor" (a graph tensor: activation, model input/output or
    variable), "const" (a graph constant), "param" (an array a rule made,
    e.g. repacked weights), "scratch" (workspace planned in the arena).
    """
    kind: str
    name: str
    array: np.ndarray | None = None


@dataclass(frozen=True)
class Kernel:
    func: PrimFunc
    args: tuple[Arg, ...]      # one per func.params, in order
    node: Node


def buffer_ref(name: str, ty: TensorType, buf: Buffer, value: np.ndarray | None) -> TensorRef:
    def load(idx, lanes: int = 1) -> Expr:
        if value is not None and value.size == 1:
            scalar = Const(value.reshape(()).item(), buf.dtype)
            return scalar if lanes == 1 else Broadcast(scalar, lanes)
        return Load(buf, flat_index(tuple(idx), ty.shape), lanes)
    return TensorRef(name, ty, load, buf, value)


def _value_ref(ctx: LowerCtx, name: str, ty: TensorType, ins: list[TensorRef],
               rule: ValueRule) -> TensorRef:
    return TensorRef(name, ty, lambda idx, lanes=1: rule(ctx, ins, tuple(idx), lanes))


def _loop_nest(ctx: LowerCtx, shape: Sequence[int], body) -> Stmt:
    """for i0 < shape[0]: ... for in < shape[n]: body(idx)."""
    idx = tuple(ctx.fresh(f"i{d}") for d in range(len(shape)))
    stmt = body(idx)
    for var, extent in reversed(list(zip(idx, shape))):
        stmt = For(var, int(extent), stmt)
    return stmt


def lower_group(graph: Graph, node: Node, target: Target, dump: Dump | None = None,
                threads: int = 1) -> Kernel:
    """The PrimFunc for one `fused` node, through the TIR pipeline
    (aot/lower/tir_passes/__init__.py), with what each parameter binds to. `dump`
    sees it as lowered and after each pass; `threads` is the pool the
    package is built for (LowerCtx.threads)."""
    body: Graph = node.attrs["body"]
    shared: dict = {"params": {}, "scratch": {}, "_names": {}, "checks": [], "prechecks": {}}

    def ctx_for(n: Node, output: int = 0) -> LowerCtx:
        return LowerCtx(n, tuple(body.types.get(i) if i else None for i in n.inputs),
                        tuple(body.types[o] for o in n.outputs), target, output=output,
                        threads=threads, **shared)

    refs: dict[str, TensorRef] = {}
    bound: dict[str, Arg] = {}
    for k, (inner, outer) in enumerate(zip(body.inputs, node.inputs)):
        ty = body.types[inner]
        value = graph.constants.get(outer)
        kind = BufferKind.PARAM if value is not None else BufferKind.INPUT
        buf = Buffer(f"in{k}", dt(ty.dtype), ty.shape, kind)
        refs[inner] = buffer_ref(inner, ty, buf, value)
        bound[buf.name] = Arg("const" if value is not None else "tensor", outer)

    out_bufs = {}
    for k, (inner, outer) in enumerate(zip(body.outputs, node.outputs)):
        ty = body.types[inner]
        out_bufs[inner] = Buffer(f"out{k}", dt(ty.dtype), ty.shape, BufferKind.OUTPUT)
        bound[f"out{k}"] = Arg("tensor", outer)

    anchor: Node | None = None
    current: dict[str, Expr] = {}       # the anchor's output values during emit
    for n in body.nodes:
        ins = [refs[i] if i else None for i in n.inputs]
        rule = _rule(n)
        if rule.kind is RuleKind.VALUE:
            for k, o in enumerate(n.outputs):
                if o:
                    refs[o] = _value_ref(ctx_for(n, k), o, body.types[o], ins, rule.fn)
        else:
            if anchor is not None:
                raise UnsupportedError(f"{node_label(node)}: two loop-nest ops "
                                       f"({anchor.op}, {n.op}) in one group")
            anchor = n
            for o in n.outputs:
                refs[o] = TensorRef(o, body.types[o],
                                    lambda idx, lanes=1, o=o: current[o])

    if anchor is None:
        stmt = seq(*(_output_nest(ctx_for(node), body, o, refs, out_bufs[o])
                     for o in body.outputs))
    else:
        with group_scope(body, anchor, node.name, target):     # tuning records (space.py)
            stmt = _lower_anchor(ctx_for(anchor), anchor, body, refs, out_bufs, current)

    ctx = ctx_for(node)
    # index checks run before the loops that use the indices (bounds.precheck)
    stmt = seq(*ctx.prechecks.values(), stmt)
    params, args = collect_params(stmt, bound, ctx)
    attrs = ((CHECKS, tuple(ctx.checks)),) if ctx.checks else ()
    func = PrimFunc(node.name, params, stmt, tuple(node.attrs.get("sources", (node.name,))),
                    attrs)
    return Kernel(run_passes(func, target, dump), args, node)


# Tile side of a blocked transpose: 16 x 16 elements, each side's 16 rows
# of at most one 64-byte line (float32), both tiles within L1.
_BLOCK = 16


def _blocked_axis(ctx: LowerCtx, node: Node | None, shape: Sequence[int]) -> int | None:
    """The output axis holding the input's last one when `node` is a
    Transpose that moves the last axis and both it and the output's last
    axis are whole tiles of _BLOCK, on x86: the nest that walks the output
    row by row reads the input a whole row apart at every step (a true 1-D
    Conv's NCL <-> NLC transposes, 4 MB of float32: 2.8 ms)."""
    if node is None or node.op != "Transpose" or ctx.target.arch not in x86.ARCHS:
        return None
    rank = len(shape)
    perm = node.attrs.get("perm")
    perm = list(range(rank))[::-1] if perm is None else [int(p) for p in perm]
    if rank < 2 or perm[-1] == rank - 1:
        return None
    axis = perm.index(rank - 1)
    if shape[axis] % _BLOCK or shape[-1] % _BLOCK:
        return None
    return axis


def _blocked_nest(ctx: LowerCtx, shape: Sequence[int], axis: int, body) -> Stmt:
    """_loop_nest over `shape` with `axis` and the last axis walked in
    _BLOCK x _BLOCK tiles (the other axes outermost, in order), `axis`
    innermost in each tile: every element once, for a body whose elements
    are independent. A 512 x 2048 float32 transpose in C on Zen 5: 1.84 ms
    row by row, 0.45 ms in tiles writing along rows, 0.33 reading along
    rows."""
    rank = len(shape)
    idx = [ctx.fresh(f"i{d}") for d in range(rank)]
    outer = [ctx.fresh(f"b{d}") for d in (axis, rank - 1)]
    inner = [ctx.fresh(f"t{d}") for d in (axis, rank - 1)]
    at = list(idx)
    for d, o, t in zip((axis, rank - 1), outer, inner):
        at[d] = add(mul(o, const(_BLOCK)), t)
    stmt = body(tuple(at))
    for var in inner:        # `axis` innermost: each tile row read along the input's rows
        stmt = For(var, _BLOCK, stmt)
    for var, d in reversed(list(zip(outer, (axis, rank - 1)))):
        stmt = For(var, int(shape[d]) // _BLOCK, stmt)
    for d in reversed(range(rank - 1)):
        if d != axis:
            stmt = For(idx[d], int(shape[d]), stmt)
    return stmt


def _output_nest(ctx: LowerCtx, body: Graph, o: str, refs, out: Buffer) -> Stmt:
    """The loops storing group output `o` of a group with no loop-nest op.

    A Concat's output is stored part by part, one loop nest over each
    input's own shape into its place in the output: every element then
    comes from one known input, where a nest over the whole output chose
    the input per element (a chain of selects no compiler vectorizes; the
    channel concats of a YOLO net's C2f blocks ran at 1.5 ns per element).
    """
    shape = body.types[o].shape
    node = body.producers().get(o)
    if node is None or node.op != "Concat":
        def store(idx):
            return Store(out, flat_index(idx, shape), refs[o].load(idx))
        swapped = _blocked_axis(ctx, node, shape)
        if swapped is not None:
            return _blocked_nest(ctx, shape, swapped, store)
        return _loop_nest(ctx, shape, store)
    axis = int(node.attrs.get("axis", 0)) % len(shape)
    nests, offset = [], 0
    for part in node.inputs:
        ty = body.types[part]
        if ty.size:
            nests.append(_loop_nest(ctx, ty.shape, lambda idx, part=part, at=offset: Store(
                out, flat_index(tuple(add(i, const(at)) if d == axis and at else i
                                      for d, i in enumerate(idx)), shape),
                refs[part].load(idx))))
        offset += ty.shape[axis]
    return seq(*nests)


def _rule(n: Node) -> Rule:
    rule = rule_of(n.op)
    if rule is None:
        why = op_def(n).never_lowered
        raise UnsupportedError(f"{node_label(n)}: the code generator has no rule for op "
                               f"'{n.op}'" + (f" ({why})" if why else " yet"))
    return rule


def _depends_on(body: Graph, out: str, src: str) -> bool:
    producers = body.producers()
    stack, seen = [out], set()
    while stack:
        t = stack.pop()
        if t == src:
            return True
        if t in seen or t not in producers:
            continue
        seen.add(t)
        stack.extend(i for i in producers[t].inputs if i)
    return False


def _lower_anchor(ctx: LowerCtx, anchor: Node, body: Graph, refs, out_bufs, current) -> Stmt:
    """Run the kernel rule; each emit stores every group output fed by that value."""
    fed = {k: [o for o in body.outputs if _depends_on(body, o, src)]
           for k, src in enumerate(anchor.outputs)}
    for k, outs in fed.items():
        for o in outs:
            if body.types[o].shape != body.types[anchor.outputs[k]].shape:
                raise UnsupportedError(f"{node_label(anchor)}: its epilogue changes the shape "
                                       f"({body.types[anchor.outputs[k]]} -> {body.types[o]})")
    orphans = [o for o in body.outputs if not any(o in outs for outs in fed.values())]
    if orphans:
        raise UnsupportedError(f"{node_label(anchor)}: group outputs {orphans} do not depend "
                               "on its loop nest")

    def emit(k: int, idx: tuple, value: Expr) -> Stmt:
        lanes = dtype_of(value).lanes
        current[anchor.outputs[k]] = value
        try:
            return seq(*(Store(out_bufs[o], flat_index(tuple(idx), body.types[o].shape),
                               refs[o].load(tuple(idx), lanes)) for o in fed[k]))
        finally:
            del current[anchor.outputs[k]]

    ins = [refs[i] if i else None for i in anchor.inputs]
    return _rule(anchor).fn(ctx, ins, emit)


def collect_params(stmt: Stmt, bound: dict[str, Arg], ctx: LowerCtx):
    """The buffers the body uses, as parameters in declaration order:
    group inputs, group outputs, then rule-made params and scratch."""
    used = {}
    for s in walk_stmt(stmt):
        if isinstance(s, Store):
            used[s.buffer.name] = s.buffer
        for load in walk_expr_loads(s):
            used[load.buffer.name] = load.buffer
    rank = {name: i for i, name in enumerate([*bound, *ctx.params, *ctx.scratch])}
    params, args = [], []
    for b in sorted(used.values(), key=lambda b: rank[b.name]):
        params.append(b)
        if b.name in bound:
            args.append(bound[b.name])
        elif b.name in ctx.params:
            args.append(Arg("param", b.name, ctx.params[b.name][1]))
        else:
            args.append(Arg("scratch", b.name))
    return tuple(params), tuple(args)
