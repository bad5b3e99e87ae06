"""The one graph-rewriting driver the passes share.

A pass is a list of local rules. A rule looks at one node (and, through the
`Rewriter`, at its neighbourhood: producers, consumers, constants, types) and
either declines (returns None) or returns a `Rewrite`: the nodes that replace
it and the tensors that become aliases of others. The driver applies rules
in topological order until none fires, removes what became dead, keeps every
model output under its original name and re-infers types.

Rules never mutate anything: they build new Nodes with `Rewriter.node`, which
types them at once so later rules in the same sweep can read their types.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from aot.ir.graph import Graph, Node, Quant, TensorType, claim_name, type_of
from aot.passes.infer import infer_types, node_types

# A guard against rules that undo each other; real graphs need a few hundred.
MAX_STEPS = 100_000


def _contiguous(value: np.ndarray) -> np.ndarray:
    # Not np.ascontiguousarray: it turns a 0-d array into shape (1,).
    return np.array(value, order="C", copy=None)


@dataclass(frozen=True)
class Rewrite:
    """What replaces one node.

    nodes: the replacement, in topological order (may be empty).
    alias: tensor -> tensor carrying the same value from now on; every use
        of the key is redirected (model outputs keep their names, see finish).
    """
    nodes: Sequence[Node] = ()
    alias: Mapping[str, str] = field(default_factory=dict)


Rule = Callable[[Node, "Rewriter"], "Rewrite | None"]


def remove(out: str, source: str) -> Rewrite:
    """Drop the node: its output `out` is the tensor `source`."""
    return Rewrite((), {out: source})


class Rewriter:
    """The mutable working copy of a Graph while rules run on it."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.nodes: list[Node] = list(graph.nodes)
        self.types: dict[str, TensorType] = dict(graph.types)
        self.constants: dict[str, np.ndarray] = dict(graph.constants)
        self.outputs: list[str] = list(graph.outputs)
        self.updates: dict[str, str] = dict(graph.updates)
        self._tensor_names = set(graph.tensor_names()) | set(graph.types) | set(graph.constants) \
            | set(graph.variables)
        self._node_names = {n.name for n in graph.nodes}
        self._consumers: dict[str, list[Node]] | None = None
        self._producers: dict[str, Node] | None = None
        # bytes of the constants rules made: the compile-memory budget's
        # running total (aot.limits.check_created)
        self.created_bytes = 0

    # ---- queries -------------------------------------------------------
    def const(self, name: str) -> np.ndarray | None:
        return self.constants.get(name) if name else None

    def type(self, name: str) -> TensorType:
        return self.types[name]

    def producer(self, name: str) -> Node | None:
        if self._producers is None:
            self._producers = {t: n for n in self.nodes for t in n.outputs}
        return self._producers.get(name)

    def consumers(self, name: str) -> list[Node]:
        if self._consumers is None:
            users: dict[str, list[Node]] = {}
            for n in self.nodes:
                for t in dict.fromkeys(n.inputs):
                    if t:
                        users.setdefault(t, []).append(n)
            self._consumers = users
        return self._consumers.get(name, [])

    def pinned(self, name: str) -> bool:
        """Whether the tensor must exist after the graph runs (output, state)."""
        return name in self.outputs or name in self.updates.values()

    def single_use(self, name: str) -> bool:
        """Used by exactly one node (once) and by nothing outside the graph."""
        users = self.consumers(name)
        return (not self.pinned(name) and len(users) == 1
                and sum(1 for t in users[0].inputs if t == name) == 1)

    # ---- building ------------------------------------------------------
    def fresh(self, base: str) -> str:
        """An unused tensor name derived from base (deterministic)."""
        return claim_name(base, self._tensor_names)

    def fresh_node(self, base: str) -> str:
        """An unused node name derived from base (deterministic)."""
        return claim_name(base, self._node_names)

    def take_over(self, node: Node) -> str:
        """Free the name of a node the rewrite makes dead, for its replacement."""
        self._node_names.discard(node.name)
        return node.name

    def constant(self, base: str, value: np.ndarray, quant: Quant | None = None) -> str:
        """A new constant tensor; returns its name."""
        name = self.fresh(base)
        value = _contiguous(value)
        self.constants[name] = value
        self.created_bytes += value.nbytes
        self.types[name] = type_of(value, quant)
        return name

    def set_constant(self, name: str, value: np.ndarray) -> None:
        """Turn an existing tensor (a folded node's output) into a constant."""
        ty = self.types[name]
        self.constants[name] = _contiguous(value)
        self.created_bytes += value.nbytes
        self.types[name] = TensorType(tuple(value.shape), value.dtype.name, ty.quant)

    def node(self, op: str, inputs: Sequence[str], *, name: str, attrs: Mapping | None = None,
             outputs: Sequence[str] | None = None, n_outputs: int = 1,
             types: Sequence[TensorType] | None = None) -> Node:
        """A new node, named uniquely after `name`, typed at once.

        outputs default to fresh names derived from the node name; `types`
        overrides inference (used when the declared quantization matters).
        """
        node_name = self.fresh_node(name)
        if outputs is None:
            outputs = [self.fresh(node_name if n_outputs == 1 else f"{node_name}_{i}")
                       for i in range(n_outputs)]
        else:
            self._tensor_names.update(outputs)
        node = Node(op, node_name, tuple(inputs), tuple(outputs), dict(attrs or {}))
        if types is None:
            types = node_types(node, self.types, self.constants)
        self.types.update((o, t) for o, t in zip(node.outputs, types) if o)
        return node

    # ---- driving -------------------------------------------------------
    def run(self, rules: Sequence[Rule]) -> None:
        steps = 0
        changed = True
        while changed:
            changed = False
            i = 0
            while i < len(self.nodes):
                node = self.nodes[i]
                # A replacement may take over the replaced node's name.
                self._node_names.discard(node.name)
                for rule in rules:
                    result = rule(node, self)
                    if result is not None:
                        break
                else:
                    self._node_names.add(node.name)
                    i += 1
                    continue
                steps += 1
                if steps > MAX_STEPS:
                    raise RuntimeError(f"rewrite rule {rule.__name__} keeps firing on {node.name}")
                i = self._apply(i, result)
                changed = True

    def _apply(self, i: int, result: Rewrite) -> int:
        """Splice the replacement in at i; returns where to look next."""
        self.nodes[i:i + 1] = list(result.nodes)
        if result.alias:
            self._redirect(result.alias)
        self._producers = self._consumers = None
        removed_before = self._drop_dead(i)
        return max(0, i - removed_before)

    def _redirect(self, alias: Mapping[str, str]) -> None:
        def resolve(t: str) -> str:
            seen = set()
            while t in alias and t not in seen:
                seen.add(t)
                t = alias[t]
            return t
        self.nodes = [n if not any(t in alias for t in n.inputs)
                      else n.with_(inputs=tuple(resolve(t) for t in n.inputs))
                      for n in self.nodes]
        self.outputs = [resolve(t) for t in self.outputs]
        self.updates = {v: resolve(t) for v, t in self.updates.items()}

    def _drop_dead(self, before: int) -> int:
        """Remove nodes none of whose outputs is used; count those before `before`."""
        used = set(self.outputs) | set(self.updates.values())
        keep = [True] * len(self.nodes)
        for k in range(len(self.nodes) - 1, -1, -1):
            n = self.nodes[k]
            if any(o in used for o in n.outputs):
                used.update(n.inputs)
            else:
                keep[k] = False
        if all(keep):
            return 0
        removed_before = sum(1 for k in range(min(before, len(keep))) if not keep[k])
        self.nodes = [n for n, k in zip(self.nodes, keep) if k]
        self._producers = self._consumers = None
        return removed_before

    def finish(self, retype: bool = True) -> Graph:
        self._drop_dead(0)
        self._restore_output_names()
        used = set(self.outputs) | set(self.graph.inputs) | set(self.graph.variables) \
            | set(self.updates.values())
        for n in self.nodes:
            used.update(n.inputs)
            used.update(n.outputs)
        graph = self.graph.replace(
            nodes=tuple(self.nodes),
            outputs=tuple(self.outputs),
            updates=dict(self.updates),
            constants={k: v for k, v in self.constants.items() if k in used},
            types={k: v for k, v in self.types.items() if k in used})
        return infer_types(graph) if retype else graph

    def _restore_output_names(self) -> None:
        """Model outputs keep their names even when their tensor was aliased.

        The tensor now carrying an output is renamed back when nothing else
        depends on its name; otherwise an Identity copies it.
        """
        for k, orig in enumerate(self.graph.outputs):
            cur = self.outputs[k]
            if cur == orig:
                continue
            prod = self.producer(cur)
            renamable = (prod is not None and self.outputs.count(cur) == 1
                         and cur not in self.graph.outputs
                         and cur not in self.updates.values() and self.producer(orig) is None
                         and orig not in self.graph.inputs and orig not in self.constants)
            if renamable:
                self._rename(cur, orig)
            else:
                node = self.node("Identity", [cur], name=f"{orig}_copy", outputs=[orig],
                                 types=[self.types[cur]])
                self.nodes.append(node)
                self.outputs[k] = orig
                self._producers = self._consumers = None

    def _rename(self, old: str, new: str) -> None:
        def r(t: str) -> str:
            return new if t == old else t
        self.nodes = [n.with_(inputs=tuple(map(r, n.inputs)), outputs=tuple(map(r, n.outputs)))
                      if old in n.inputs or old in n.outputs else n for n in self.nodes]
        self.outputs = [r(t) for t in self.outputs]
        self.types[new] = self.types.pop(old)
        self._producers = self._consumers = None


def rewrite(graph: Graph, rules: Sequence[Rule], retype: bool = True) -> Graph:
    """Apply rules until none fires; the result is typed and dead-code free."""
    rw = Rewriter(graph)
    rw.run(rules)
    return rw.finish(retype)


# ---- small helpers rules share ----------------------------------------------
def perm_of(node: Node, rank: int) -> tuple[int, ...]:
    """A Transpose's permutation (ONNX's default reverses the axes)."""
    perm = node.attrs.get("perm")
    return tuple(int(p) for p in perm) if perm is not None else tuple(range(rank - 1, -1, -1))


def invert(perm: Iterable[int]) -> tuple[int, ...]:
    perm = tuple(perm)
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def is_float(ty: TensorType) -> bool:
    return ty.dtype in ("float32", "float64", "float16") and ty.quant is None
