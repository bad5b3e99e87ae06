"""Features of a schedule candidate for the cost model: what its lowered
TIR does and what its config asks, as a fixed-length vector of floats.

Nothing here knows a schedule site or a kernel by name: the TIR says how
many multiplies, loads and stores each loop nest executes, how wide its
vectors are, how many accumulators it keeps live across its inner loops
(their register pressure against `Target.vector_registers`), how many
bytes it touches and which instruction families it calls (dot products,
widening multiplies, other intrinsics); the config adds its knobs, by
name. A new site or kernel is described by the same vector.

Counts are dynamic (each statement weighted by its loops' trips) and taken
in log2, so workloads of any size share one scale. One of them,
`log_instrs`, estimates the kernel's instructions (each load, store,
arithmetic node and call one, whatever its lanes, and each iteration of a
loop not unrolled LOOP_COST more): its difference to the default's is the
cost model's prior (guided.py), what the trees learn to correct.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

from aot.ir.tir import (Assign, Bin, Call, Cast, Decl, For, If, Load, PrimFunc, Select, Seq,
                        Store, Unary, dtype_of, expr_children, stmt_exprs, walk_expr, walk_stmt)
from aot.lower.schedule.space import Config

# Slots that names (intrinsic calls, named site choices) are hashed into:
# a fixed vector whatever names new kernels and sites bring.
CALL_SLOTS = 4
CHOICE_SLOTS = 8
# The knobs a config gives by name (tiles, the integer nests' tile) and
# "count": the value of a site answered by a number (unrolling).
KNOB_NAMES = ("vectors", "mr", "max_accs", "registers", "rows", "channels", "count")
# A loop iteration's own instructions (the counter's step, compare and branch).
LOOP_COST = 2

NAMES = (
    # the whole kernel, dynamic
    "log_macs", "log_loads", "log_stores", "loads_per_mac", "stores_per_mac", "log_bytes",
    "log_ops", "dot_share", "widening_share", "log_statements", "nests", "log_instrs",
    # the nest that does the most multiplies
    "depth", "log_inner", "log_inner2", "log_outer", "lanes", "vector_accs", "scalar_accs",
    "pressure", "spill", "nest_loads_per_mac", "nest_log_bytes", "unrolled_share",
    *(f"call{i}" for i in range(CALL_SLOTS)),
    # the config
    *(f"knob_{k}" for k in KNOB_NAMES), "sites",
    *(f"choice{i}" for i in range(CHOICE_SLOTS)),
)


@dataclass
class _Nest:
    """Dynamic counts of one top-level loop nest."""
    macs: float = 0.0
    loads: float = 0.0
    stores: float = 0.0
    ops: float = 0.0
    instrs: float = 0.0     # estimated instructions: a vector op is one
    dots: float = 0.0
    widening: float = 0.0
    statements: int = 0
    executed: float = 0.0
    unrolled: float = 0.0
    depth: int = 0
    extents: tuple = ()
    lanes: int = 1
    vector_accs: int = 0
    scalar_accs: int = 0
    buffers: dict = field(default_factory=dict)
    calls: list = field(default_factory=lambda: [0.0] * CALL_SLOTS)


def _slot(name: str, slots: int) -> int:
    # crc32, not hash(): the same slot in every process
    return zlib.crc32(name.encode()) % slots


def _log(x: float) -> float:
    return math.log2(1.0 + x)


def _lanes(e) -> int:
    try:
        return dtype_of(e).lanes
    except (TypeError, ValueError, KeyError):
        return 1


def _is_widening(e: Bin) -> bool:
    """a * b of narrower integers cast up (the widening multiplies)."""
    return e.op == "*" and all(isinstance(x, Cast) and not x.bits and not x.dtype.is_float
                               and _narrower(x) for x in (e.a, e.b))


def _narrower(c: Cast) -> bool:
    try:
        return dtype_of(c.a).bits < c.dtype.bits
    except (TypeError, ValueError, KeyError):
        return False


def _count_exprs(stmt, trips: float, nest: _Nest) -> None:
    for root in stmt_exprs(stmt):
        nest.instrs += trips * _instructions(root, root is getattr(stmt, "index", None))
        for e in walk_expr(root):
            if isinstance(e, Load):
                nest.loads += trips * e.lanes
                nest.lanes = max(nest.lanes, e.lanes)
                nest.buffers[e.buffer.name] = e.buffer.nbytes
            elif isinstance(e, Bin):
                lanes = _lanes(e)
                nest.ops += trips * lanes
                if e.op == "*":
                    nest.macs += trips * lanes
                    if _is_widening(e):
                        nest.widening += trips * lanes
            elif isinstance(e, Call):
                lanes = e.dtype.lanes
                nest.ops += trips * lanes
                nest.calls[_slot(e.fn, CALL_SLOTS)] += trips * lanes
                if "dot" in e.fn:
                    # a 4-way (or pair) dot product: that many MACs per lane
                    width = 4 if "4" in e.fn else 2
                    nest.macs += trips * lanes * width
                    nest.dots += trips * lanes * width


def _instructions(e, address: bool = False) -> int:
    """The value's operations, each one instruction whatever its lanes; an
    address's arithmetic counts nothing (the compiler strength-reduces it
    across the loop), a load one."""
    if isinstance(e, Load):
        return 1
    own = 0 if address else int(isinstance(e, (Bin, Call, Cast, Unary, Select)))
    return own + sum(_instructions(x, address) for x in expr_children(e))


def _accumulators(loop: For, declared: list, nest: _Nest) -> None:
    """The vars declared before `loop` and assigned in it live in registers
    through it (accumulators): the most at once, vector and scalar."""
    assigned = {x.var for x in walk_stmt(loop) if isinstance(x, Assign)}
    live = [v for v in declared if v in assigned]
    vector = sum(1 for v in live if v.dtype.lanes > 1)
    nest.vector_accs = max(nest.vector_accs, vector)
    nest.scalar_accs = max(nest.scalar_accs, len(live) - vector)


def _walk(s, trips: float, depth: int, extents: tuple, unrolled: bool, nest: _Nest) -> None:
    """Adds s's dynamic counts to nest."""
    if isinstance(s, Seq):
        local: list = []       # vars declared so far in this block
        for x in s.stmts:
            if isinstance(x, Decl):
                local.append(x.var)
            elif isinstance(x, For) and local:
                _accumulators(x, local, nest)
            _walk(x, trips, depth, extents, unrolled, nest)
        return
    if isinstance(s, For):
        n = max(0, -(-s.extent // max(1, s.step)))
        ext = extents + (n,)
        if len(ext) > len(nest.extents):
            nest.extents, nest.depth = ext, len(ext)
        is_unrolled = unrolled or s.kind.value == "unrolled"
        if not is_unrolled:
            nest.instrs += trips * n * LOOP_COST
        _walk(s.body, trips * n, depth + 1, ext, is_unrolled, nest)
        return
    nest.statements += 1
    nest.executed += trips
    if unrolled:
        nest.unrolled += trips
    if isinstance(s, If):
        _count_exprs(s, trips, nest)
        _walk(s.then, trips, depth, extents, unrolled, nest)
        if s.orelse is not None:
            _walk(s.orelse, trips, depth, extents, unrolled, nest)
        return
    _count_exprs(s, trips, nest)
    if isinstance(s, Store):
        nest.instrs += trips
        nest.stores += trips * _lanes(s.value)
        nest.buffers[s.buffer.name] = s.buffer.nbytes


def nests_of(func: PrimFunc) -> list[_Nest]:
    """The kernel's top-level statements, each as a loop nest's counts."""
    body = func.body.stmts if isinstance(func.body, Seq) else (func.body,)
    out = []
    for s in body:
        nest = _Nest()
        _walk(s, 1.0, 0, (), False, nest)
        out.append(nest)
    return out


def _config_features(config: Config) -> list[float]:
    knobs = {k: 0.0 for k in KNOB_NAMES}
    choices = [0.0] * CHOICE_SLOTS
    for site, value in config.sites:
        if isinstance(value, str):
            choices[_slot(f"{site}={value}", CHOICE_SLOTS)] = 1.0
            continue
        if isinstance(value, int):
            knobs["count"] = max(knobs["count"], float(value))
            continue
        for k, v in value:
            if k in knobs:
                knobs[k] = max(knobs[k], float(v))
    return [*knobs.values(), float(len(config.sites)), *choices]


def features(func: PrimFunc, config: Config, vector_registers: int) -> tuple[float, ...]:
    """The candidate's feature vector (NAMES), from its lowered kernel and
    its config. Pure: equal inputs give equal vectors."""
    nests = nests_of(func)
    total = _Nest()
    for n in nests:
        for f in ("macs", "loads", "stores", "ops", "instrs", "dots", "widening", "unrolled"):
            setattr(total, f, getattr(total, f) + getattr(n, f))
        total.statements += n.statements
        total.buffers.update(n.buffers)
    main = max(nests, key=lambda n: (n.macs, n.loads), default=_Nest())
    macs = max(total.macs, 1.0)
    regs = max(1, vector_registers)
    pressure = (main.vector_accs + (main.scalar_accs if main.lanes == 1 else 0)) / regs
    out = [
        _log(total.macs), _log(total.loads), _log(total.stores),
        total.loads / macs, total.stores / macs, _log(sum(total.buffers.values())),
        _log(total.ops), total.dots / macs, total.widening / macs,
        _log(total.statements), float(len(nests)), _log(total.instrs),
        float(main.depth), _log(main.extents[-1] if main.extents else 0),
        _log(main.extents[-2] if len(main.extents) > 1 else 0),
        _log(main.extents[0] if main.extents else 0), float(main.lanes),
        float(main.vector_accs), float(main.scalar_accs), pressure, max(0.0, pressure - 1.0),
        main.loads / max(main.macs, 1.0), _log(sum(main.buffers.values())),
        main.unrolled / max(main.executed, 1.0),
        *(_log(c) for c in main.calls),
        *_config_features(config),
    ]
    return tuple(round(float(x), 9) for x in out)
