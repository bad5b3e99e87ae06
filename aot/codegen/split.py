"""Splitting a package's kernels into parts that compile in parallel (the C
codegen's translation units, the LLVM codegen's objects)."""
from __future__ import annotations

from typing import Sequence


def balanced_groups(sizes: Sequence[int], part_size: int, max_parts: int) -> list[list[int]]:
    """Indices into `sizes` in about sum / part_size groups (at most
    max_parts) of about equal total size: the largest first into the
    smallest group, each group in index order. A deterministic function of
    the sizes, so packages stay byte-identical on any machine."""
    count = max(1, min(max_parts, len(sizes), -(-sum(sizes) // part_size)))
    loads, members = [0] * count, [[] for _ in range(count)]
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        k = min(range(count), key=lambda j: (loads[j], j))
        loads[k] += sizes[i]
        members[k].append(i)
    return [sorted(m) for m in members if m]
