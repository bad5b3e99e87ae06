"""Static memory planning: buffers with lifetimes in, arena offsets out.

A buffer is live over an inclusive range of steps (kernel calls). Two buffers
may share bytes only if their ranges do not overlap. We place buffers with
greedy first-fit in several orders (largest first, longest-lived first, ...)
and keep the smallest arena, stopping early when the lower bound is reached:
the largest sum of bytes live at any one step, which no placement can beat.
Everything is deterministic: ties break on the buffer name.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Sequence


@dataclass(frozen=True)
class Buffer:
    name: str
    size: int        # bytes
    first: int       # first step at which it is live
    last: int        # last step at which it is live (inclusive)
    align: int = 16

    def overlaps(self, other: "Buffer") -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass(frozen=True)
class Plan:
    offsets: dict[str, int]
    arena_bytes: int
    lower_bound_bytes: int
    strategy: str


def round_up(n: int, align: int) -> int:
    return (n + align - 1) // align * align


def lower_bound(buffers: Sequence[Buffer]) -> int:
    """The largest sum of simultaneously live bytes."""
    if not buffers:
        return 0
    events: dict[int, int] = {}
    for b in buffers:
        events[b.first] = events.get(b.first, 0) + b.size
        events[b.last + 1] = events.get(b.last + 1, 0) - b.size
    live = best = 0
    for step in sorted(events):
        live += events[step]
        best = max(best, live)
    return best


def first_fit(order: Sequence[Buffer], high: bool = False) -> dict[str, int]:
    """Place each buffer in the lowest gap clear of the live ones placed:
    at the gap's bottom, or with `high` at its top when the gap is closed
    above. A small buffer at the top of a gap leaves its bottom whole for a
    big neighbour in time (a chain of equal tensors with one small one in
    the middle packs into two slots only that way)."""
    placed: list[tuple[int, Buffer]] = []
    offsets: dict[str, int] = {}
    for buf in order:
        busy = sorted((off, off + other.size) for off, other in placed if other.overlaps(buf))
        offset = 0
        for start, end in busy:
            if offset + buf.size <= start:
                if high:
                    offset = (start - buf.size) // buf.align * buf.align
                break
            offset = max(offset, round_up(end, buf.align))
        placed.append((offset, buf))
        offsets[buf.name] = offset
    return offsets


ORDERINGS: dict[str, Callable[[Buffer], tuple]] = {
    "size": lambda b: (-b.size, b.first, b.name),
    "lifetime": lambda b: (-(b.last - b.first), -b.size, b.name),
    "area": lambda b: (-b.size * (b.last - b.first + 1), b.name),
    "start": lambda b: (b.first, -b.size, b.name),
}


def arena_size(buffers: Sequence[Buffer], offsets: dict[str, int]) -> int:
    return max((offsets[b.name] + b.size for b in buffers), default=0)


def plan_memory(buffers: Sequence[Buffer], align: int = 16) -> Plan:
    """The best placement over the orderings; ties go to the earlier ordering."""
    names = [b.name for b in buffers]
    if len(set(names)) != len(names):
        raise ValueError("plan_memory: buffer names must be unique")
    bound = lower_bound(buffers)
    best: Plan | None = None
    for high, (strategy, key) in itertools.product((False, True), ORDERINGS.items()):
        offsets = first_fit(sorted(buffers, key=key), high)
        size = round_up(arena_size(buffers, offsets), align)
        if best is None or size < best.arena_bytes:
            best = Plan(offsets, size, bound, strategy + ("-high" if high else ""))
        if size <= round_up(bound, align):
            break
    assert best is not None or not buffers
    return best or Plan({}, 0, 0, "empty")


def check_plan(buffers: Sequence[Buffer], plan: Plan) -> None:
    """Raise if two live-overlapping buffers share bytes or one is misaligned."""
    for b in buffers:
        off = plan.offsets[b.name]
        if off % b.align or off + b.size > plan.arena_bytes:
            raise AssertionError(f"{b.name} misplaced at {off}")
    for i, a in enumerate(buffers):
        for b in buffers[i + 1:]:
            if a.overlaps(b):
                oa, ob = plan.offsets[a.name], plan.offsets[b.name]
                if oa < ob + b.size and ob < oa + a.size:
                    raise AssertionError(f"{a.name} and {b.name} overlap in time and space")
