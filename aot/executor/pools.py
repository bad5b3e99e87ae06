"""Memory pools: the arena split over a board's RAM banks (`aot package --pools`).

A board lists its banks ([[regions]] in boards/*.toml, aot.support.config_schema.Region):
size, relative access cost, and whether an arena may go there. The buffers the
single arena would hold (aot.executor.liveness.arena_buffers) are ranked by
heat, the bytes the kernels move through a buffer per byte of it, and given to
the banks cheapest first: each bank takes the hottest buffers that its planned
pool (plan_memory, the single arena's planner, run per pool) still fits, the
rest spill to the next bank. Each pool is then at the planner's best for its
own buffers, often its lower bound.

Heat is an estimate from the op table, not a trace: a kernel writes each of its
outputs once and reads each input max(1, MACs / input elements) times (a
matrix product's operand is read once per output column, an elementwise
input once); a scratch buffer is written once and read like an input. Graph
inputs and outputs stay the caller's buffers, the state its own.

The weights are not split: they go whole to the cheapest flash region with
`weights = true` that holds them (where the board's linker script puts
section .rodata.aot); the plan reports which.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from aot.support.config_schema import Region
from aot.errors import AotError
from aot.executor.liveness import (MemoryPlan, Place, arena_buffers, places_of, scratch_key,
                                   tensor_key)
from aot.executor.plan import Buffer, Plan, lower_bound, plan_memory, round_up
from aot.ir.graph import Graph
from aot.ir.tir import BufferKind
from aot.lower.driver import Kernel
from aot.ops import node_macs


@dataclass(frozen=True)
class Pool:
    """One bank's share of the arena: its buffers at `plan`'s offsets."""
    region: Region
    buffers: tuple[Buffer, ...]
    plan: Plan

    @property
    def name(self) -> str:
        return self.region.name

    @property
    def bytes(self) -> int:
        return self.plan.arena_bytes


@dataclass(frozen=True)
class PoolPlan:
    pools: tuple[Pool, ...]         # the banks that hold buffers, cheapest first
    heat: dict[str, float]          # planner buffer name -> bytes accessed per byte
    single_arena_bytes: int         # the one-arena plan of the same buffers
    weights_region: str             # where .rodata.aot goes

    def pool_of(self, buffer: str) -> Pool:
        for pool in self.pools:
            if buffer in pool.plan.offsets:
                return pool
        raise KeyError(buffer)

    @property
    def total_bytes(self) -> int:
        return sum(p.bytes for p in self.pools)


def _reads(macs: int, elements: int) -> float:
    return max(1.0, macs / elements) if elements else 1.0


def buffer_heat(graph: Graph, kernels: Sequence[Kernel], over: dict[str, str]
                ) -> dict[str, float]:
    """Planner buffer name -> estimated bytes accessed per byte of buffer."""
    moved: dict[str, float] = {}
    size: dict[str, int] = {}

    def add(key: str, nbytes: int, times: float) -> None:
        moved[key] = moved.get(key, 0.0) + nbytes * times
        size[key] = max(size.get(key, 0), nbytes)

    for step, k in enumerate(kernels):
        macs = node_macs(k.node, graph.types)
        for param, arg in zip(k.func.params, k.args):
            if arg.kind == "tensor":
                ty = graph.types[arg.name]
                times = 1.0 if param.kind == BufferKind.OUTPUT else _reads(macs, ty.size)
                add(tensor_key(over.get(arg.name, arg.name)), ty.nbytes, times)
            elif arg.kind == "scratch":
                add(scratch_key(step, param.name), param.nbytes, 1.0 + _reads(macs, param.size))
    return {key: moved[key] / size[key] if size[key] else 0.0 for key in moved}


def arena_regions(regions: Sequence[Region], board: str) -> list[Region]:
    """The banks an arena may use, cheapest first (the file's order on ties)."""
    out = [r for r in regions if r.arena and r.free_bytes > 0]
    if not out:
        raise AotError(f"--pools: board '{board}' lists no RAM region for the arena "
                       "([[regions]] with arena = true in its board file)")
    return sorted(out, key=lambda r: r.cost)


def weights_region(regions: Sequence[Region], weights_bytes: int, board: str) -> str:
    """The cheapest flash region that may hold the weights and does."""
    fits = sorted((r for r in regions if r.weights and r.kind == "flash"
                   and r.free_bytes >= weights_bytes), key=lambda r: r.cost)
    if not fits:
        raise AotError(f"--pools: no flash region of board '{board}' holds the weights "
                       f"({weights_bytes} bytes)")
    return fits[0].name


def _fill(region: Region, ranked: Sequence[Buffer], align: int) -> tuple[list[Buffer], Plan]:
    """The hottest buffers (in `ranked` order) whose pool fits the region:
    each is taken if the pool planned with it still fits, else left."""
    cap = region.free_bytes
    whole = plan_memory(ranked, align)
    if whole.arena_bytes <= cap:       # the common case: all of it fits
        return list(ranked), whole
    taken: list[Buffer] = []
    plan = plan_memory([], align)
    for buf in ranked:
        trial = [*taken, buf]
        if buf.size > cap or lower_bound(trial) > cap:
            continue
        p = plan_memory(trial, align)
        if p.arena_bytes <= cap:
            taken, plan = trial, p
    return taken, plan


def plan_pools(graph: Graph, kernels: Sequence[Kernel], buffers: Sequence[Buffer],
               over: dict[str, str], regions: Sequence[Region], board: str, align: int,
               weights_bytes: int) -> PoolPlan:
    """`buffers` (arena_buffers': `over` says which tensors share a buffer)
    over the board's banks."""
    heat = buffer_heat(graph, kernels, over)
    ranked = sorted(buffers, key=lambda b: (-heat.get(b.name, 0.0), b.size, b.name))
    banks = arena_regions(regions, board)
    pools: list[Pool] = []
    for region in banks:
        if not ranked:
            break
        taken, plan = _fill(region, ranked, align)
        if taken:
            pools.append(Pool(region, tuple(taken), plan))
            chosen = {b.name for b in taken}
            ranked = [b for b in ranked if b.name not in chosen]
    if ranked:
        raise AotError(f"--pools: the arena does not fit the RAM regions of board '{board}' "
                       f"({', '.join(f'{r.name} {r.free_bytes} B' for r in banks)}); "
                       f"{sum(b.size for b in ranked)} bytes of tensors are left over")
    if not pools:          # no buffer at all: one empty pool in the fastest bank
        pools.append(Pool(banks[0], (), plan_memory([], align)))
    return PoolPlan(tuple(pools), heat, plan_memory(buffers, align).arena_bytes,
                    weights_region(regions, weights_bytes, board))


def pool_bases(pools: Sequence[Pool], align: int) -> dict[str, int]:
    """Each pool's offset when all of them share one caller's arena
    (<name>_run_with_arena): one after the other, aligned."""
    bases, end = {}, 0
    for pool in pools:
        bases[pool.name] = end
        end = round_up(end + pool.bytes, align)
    return bases


def pooled_memory_plan(graph: Graph, kernels: Sequence[Kernel], regions: Sequence[Region],
                       board: str, align: int, weights_bytes: int) -> MemoryPlan:
    """The memory plan with --pools: each arena tensor at an offset in its
    pool; `plan` is the pools laid end to end (the one arena that
    <name>_run_with_arena takes)."""
    buffers, over = arena_buffers(graph, kernels, False, align)
    pools = plan_pools(graph, kernels, buffers, over, regions, board, align, weights_bytes)
    bases = pool_bases(pools.pools, align)

    def where(key: str) -> Place:
        pool = pools.pool_of(key)
        return Place("arena", pool.plan.offsets[key], pool.name)

    places, scratch = places_of(graph, buffers, over, False, where)
    carved = {b.name: bases[pools.pool_of(b.name).name] + where(b.name).offset for b in buffers}
    last = pools.pools[-1]
    plan = Plan(carved, round_up(bases[last.name] + last.bytes, align), lower_bound(buffers),
                "pools: " + ", ".join(f"{p.name} {p.plan.strategy}" for p in pools.pools))
    return MemoryPlan(places, {k: p.offset for k, p in scratch.items()}, tuple(buffers), plan,
                      align, False, over, pools, {k: p.pool for k, p in scratch.items()})
