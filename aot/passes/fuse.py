"""Operator fusion, TVM style: partition the nodes into groups, one kernel each.

Walking the nodes in order, a node joins the group that produced one of its
inputs when that input is the group's only output, has no other consumer and
is not a model output, and the patterns allow it:

  anchor (OUT_ELEMWISE_FUSABLE: Conv, Gemm, MatMul, tfl.conv2d, ...)
      takes ELEMWISE / BROADCAST ops after it (bias, activation, requantize,
      residual add);
  ELEMWISE / BROADCAST / INJECTIVE chains fuse together;
  REDUCE takes ELEMWISE / BROADCAST ops after it;
  (an anchor's epilogue keeps the anchor's output shape: no broadcasting up);
  OPAQUE stays alone.

Every group, single nodes included, becomes one `fused` node whose `body` is
a Graph of the members (constants stay outside and enter as inputs), named
after its ops (`conv_add_relu_3`), with the member names in `sources`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from aot.ir.graph import Graph, Node
from aot.ops import Pattern, op_def
from aot.passes.infer import infer_types

ELEMENTWISE = (Pattern.ELEMWISE, Pattern.BROADCAST)
CHAIN = (Pattern.ELEMWISE, Pattern.BROADCAST, Pattern.INJECTIVE)
MAX_NAME_OPS = 4  # a kernel name lists at most this many distinct ops
# A fused chain becomes one C expression in which each op inlines its input's
# expression once per use (Sign, Shrink, Elu read it 2-4 times), so the
# expression grows exponentially with the chain and compilers cap its
# nesting (gcc: 256 brackets). A chain is cut into groups of this many ops:
# 24 chained Sign/Elu/Mish ops took minutes (or hung) as one group.
MAX_GROUP_NODES = 5


@dataclass
class Group:
    kind: Pattern
    nodes: list[Node] = field(default_factory=list)

    @property
    def tail(self) -> Node:
        return self.nodes[-1]


def _can_absorb(kind: Pattern, pattern: Pattern) -> bool:
    if kind == Pattern.OUT_ELEMWISE_FUSABLE or kind == Pattern.REDUCE:
        return pattern in ELEMENTWISE
    if kind in CHAIN:
        return pattern in CHAIN
    return False


def _keeps_shape(graph: Graph, group: Group, t: str, node: Node) -> bool:
    """An anchor's epilogue is computed per output element of the anchor, so
    it may not broadcast that output to a larger shape (x - ReduceMean(x))."""
    if group.kind not in (Pattern.OUT_ELEMWISE_FUSABLE, Pattern.REDUCE):
        return True
    src, out = graph.types.get(t), graph.types.get(node.outputs[0])
    return src is not None and out is not None and src.shape == out.shape


def partition(graph: Graph) -> list[Group]:
    """The groups, in topological order of their last member."""
    users: dict[str, int] = {}   # tensor -> how many nodes read it
    for n in graph.nodes:
        for t in set(n.inputs) - {""}:
            users[t] = users.get(t, 0) + 1
    pinned = set(graph.outputs) | set(graph.updates.values())
    group_of: dict[str, Group] = {}   # tensor -> the group producing it
    groups: list[Group] = []
    for node in graph.nodes:
        pattern = op_def(node).pattern if node.op != "fused" else Pattern.OPAQUE
        target = None
        if len(node.outputs) == 1:
            for t in node.inputs:
                g = group_of.get(t)
                if (g is not None and len(g.nodes) < MAX_GROUP_NODES
                        and len(g.tail.outputs) == 1 and g.tail.outputs[0] == t
                        and users.get(t) == 1 and t not in pinned and _can_absorb(g.kind, pattern)
                        and _keeps_shape(graph, g, t, node)):
                    target = g
                    break
        if target is None:
            target = Group(pattern)
            groups.append(target)
        elif pattern > target.kind and target.kind in CHAIN:
            target.kind = pattern  # an elementwise chain that met a reshape is injective
        target.nodes.append(node)
        for o in node.outputs:
            group_of[o] = target
    # A group is emitted where its last member was; order groups by that.
    position = {id(n): i for i, n in enumerate(graph.nodes)}
    return sorted(groups, key=lambda g: position[id(g.tail)])


def _snake(op: str) -> str:
    op = {"MatMul": "matmul", "tfl.fully_connected": "fc"}.get(op, op).removeprefix("tfl.")
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", op).lower().replace(".", "_")


def group_name(group: Group, index: int) -> str:
    names: list[str] = []
    for n in group.nodes:
        s = _snake(n.op)
        if not names or names[-1] != s:
            names.append(s)
    return "_".join(names[:MAX_NAME_OPS]) + f"_{index}"


def _fused_node(graph: Graph, group: Group, index: int, users_outside: set[str]) -> Node:
    produced = [o for n in group.nodes for o in n.outputs if o]
    inside = set(produced)
    inputs = list(dict.fromkeys(t for n in group.nodes for t in n.inputs
                                if t and t not in inside))
    outputs = [o for o in produced if o in users_outside]
    name = group_name(group, index)
    tensors = set(inputs) | inside
    body = Graph(name=name, inputs=tuple(inputs), outputs=tuple(outputs),
                 nodes=tuple(group.nodes),
                 types={t: graph.types[t] for t in tensors if t in graph.types})
    return Node("fused", name, tuple(inputs), tuple(outputs),
                {"body": body, "sources": tuple(n.name for n in group.nodes)})


def fuse(graph: Graph) -> Graph:
    groups = partition(graph)
    member = {id(n): g for g in groups for n in g.nodes}
    # Tensors read outside their group (or by the outside world) leave it.
    outside = set(graph.outputs) | set(graph.updates.values())
    producer = {o: member[id(n)] for n in graph.nodes for o in n.outputs if o}
    for n in graph.nodes:
        for t in n.inputs:
            if t in producer and producer[t] is not member[id(n)]:
                outside.add(t)
    nodes = tuple(_fused_node(graph, g, i, outside) for i, g in enumerate(groups))
    return infer_types(graph.replace(nodes=nodes))
