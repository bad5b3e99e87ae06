"""Hostile TFLite control-flow models, built as the converter lays them out:
every IF branch, WHILE condition and body is a subgraph of the model,
referenced by index from its operator's options."""
from __future__ import annotations

from aot.testing.tflite_builder import TFLiteBuilder

SHAPE = (4,)


def _leaf() -> tuple[TFLiteBuilder, list[int], list[int]]:
    """A branch taking (cond, x) and giving x + 1."""
    sub = TFLiteBuilder()
    sub.tensor("cond", (1,), "bool")
    x = sub.tensor("x", SHAPE, "float32")
    y = sub.tensor("y", SHAPE, "float32")
    sub.op("ADD", [x, sub.const("one", [1.0] * SHAPE[0], "float32")], [y], "AddOptions")
    return sub, [0, x], [y]


def _if_branch(then: int, other: int) -> tuple[TFLiteBuilder, list[int], list[int]]:
    """A branch taking (cond, x) whose one operator is IF(cond, cond, x)."""
    sub = TFLiteBuilder()
    cond = sub.tensor("cond", (1,), "bool")
    x = sub.tensor("x", SHAPE, "float32")
    y = sub.tensor("y", SHAPE, "float32")
    sub.op("IF", [cond, cond, x], [y], "IfOptions", ThenSubgraphIndex=then,
           ElseSubgraphIndex=other)
    return sub, [cond, x], [y]


def if_model(calls: list[tuple[int, int]], leaves: int = 1, then: int = 1,
             other: int | None = None) -> bytes:
    """A model IF(cond, cond, x) -> then / other; subgraph k (from 1) is an IF
    branch calling calls[k - 1] = (then, else), followed by `leaves` leaf
    branches. Cycles and shared callees are whatever `calls` says."""
    m = TFLiteBuilder()
    for t, e in calls:
        m.subgraph(*_if_branch(t, e))
    for _ in range(leaves):
        m.subgraph(*_leaf())
    cond = m.tensor("cond", (1,), "bool")
    x = m.tensor("x", SHAPE, "float32")
    y = m.tensor("y", SHAPE, "float32")
    m.op("IF", [cond, cond, x], [y], "IfOptions", ThenSubgraphIndex=then,
         ElseSubgraphIndex=then if other is None else other)
    return m.build([cond, x], [y])


def doubling_if(depth: int) -> bytes:
    """`depth` IF levels whose two branches call the same next level: 2**depth
    paths through a file linear in `depth`."""
    return if_model([(k + 1, k + 1) for k in range(1, depth)])


def chained_if(depth: int) -> bytes:
    """`depth` nested IF levels, each with the next level as its then branch
    and one shared leaf as its else branch: linear in `depth`."""
    leaf = depth + 1
    return if_model([(k + 1 if k < depth else leaf, leaf) for k in range(1, depth + 1)],
                    other=leaf)


def _counter_cond(limit: int) -> tuple[TFLiteBuilder, list[int], list[int]]:
    sub = TFLiteBuilder()
    i = sub.tensor("i", (), "int32")
    x = sub.tensor("x", SHAPE, "float32")
    flag = sub.tensor("flag", (), "bool")
    sub.op("LESS", [i, sub.const("limit", limit, "int32")], [flag])
    return sub, [i, x], [flag]


def _counter_body(inner: tuple[int, int] | None) -> tuple[TFLiteBuilder, list[int], list[int]]:
    """i + 1, and x * 0.5, or x through a WHILE of subgraphs `inner` (cond, body)."""
    sub = TFLiteBuilder()
    i = sub.tensor("i", (), "int32")
    x = sub.tensor("x", SHAPE, "float32")
    i2 = sub.tensor("i_next", (), "int32")
    x2 = sub.tensor("x_next", SHAPE, "float32")
    sub.op("ADD", [i, sub.const("one", 1, "int32")], [i2], "AddOptions")
    if inner is None:
        sub.op("MUL", [x, sub.const("half", [0.5] * SHAPE[0], "float32")], [x2], "MulOptions")
    else:
        j = sub.tensor("j_out", (), "int32")
        sub.op("WHILE", [sub.const("j0", 0, "int32"), x], [j, x2], "WhileOptions",
               CondSubgraphIndex=inner[0], BodySubgraphIndex=inner[1])
    return sub, [i, x], [i2, x2]


def nested_while(trips: list[int]) -> bytes:
    """WHILE loops nested len(trips) deep, the outermost first; each counts
    its own i from 0 to its trip count, the innermost body halves x."""
    m = TFLiteBuilder()
    for level, trip in enumerate(trips):
        inner = None if level == len(trips) - 1 else (2 * level + 3, 2 * level + 4)
        m.subgraph(*_counter_cond(trip))
        m.subgraph(*_counter_body(inner))
    x = m.tensor("x", SHAPE, "float32")
    i = m.tensor("i_out", (), "int32")
    y = m.tensor("y", SHAPE, "float32")
    m.op("WHILE", [m.const("i0", 0, "int32"), x], [i, y], "WhileOptions",
         CondSubgraphIndex=1, BodySubgraphIndex=2)
    return m.build([x], [y])
