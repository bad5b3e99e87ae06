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
    """The mutable working copy of a Graph while rules run on it.

    Nodes live in slots: slot s starts as the graph's s-th node, and what
    replaces a node takes its place inside that node's slot, so no other
    node ever moves. With producers and users kept per tensor, a rewrite
    costs what it touches rather than the graph's size (re-scanning the
    whole graph after each rewrite made an 8,000-node unrolled loop take
    half a minute).
    """

    def __init__(self, graph: Graph):
        self.graph = graph
        self._slots: list[list[Node]] = [[n] for n in graph.nodes]
        # keyed by the node object's id, not its name: a replacement may take
        # over the name of a node that is still there until the dead sweep
        self._slot_of: dict[int, int] = {}
        self._producers: dict[str, Node] = {}
        self._users: dict[str, dict[int, Node]] = {}   # tensor -> {id(node): node}
        for s, n in enumerate(graph.nodes):
            self._track(n, s)
        self.types: dict[str, TensorType] = dict(graph.types)
        self.constants: dict[str, np.ndarray] = dict(graph.constants)
        self.outputs: list[str] = list(graph.outputs)
        self.updates: dict[str, str] = dict(graph.updates)
        self._tensor_names = set(graph.tensor_names()) | set(graph.types) | set(graph.constants) \
            | set(graph.variables)
        self._node_names = {n.name for n in graph.nodes}
        # The first rewrite drops every dead node; after it none is left, and
        # each later rewrite only looks where uses were lost.
        self._swept = False
        # bytes of the constants rules made: the compile-memory budget's
        # running total (aot.limits.check_created)
        self.created_bytes = 0

    @property
    def nodes(self) -> list[Node]:
        """The nodes in topological order."""
        return [n for slot in self._slots for n in slot]

    # ---- queries -------------------------------------------------------
    def const(self, name: str) -> np.ndarray | None:
        return self.constants.get(name) if name else None

    def type(self, name: str) -> TensorType:
        return self.types[name]

    def producer(self, name: str) -> Node | None:
        return self._producers.get(name)

    def consumers(self, name: str) -> list[Node]:
        """The nodes reading the tensor, each once, in topological order."""
        users = self._users.get(name)
        if not users:
            return []
        return sorted(users.values(), key=self._position)

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

    # ---- the node store ------------------------------------------------
    def _track(self, node: Node, slot: int) -> None:
        self._slot_of[id(node)] = slot
        for t in node.outputs:
            if t:
                self._producers[t] = node
        for t in dict.fromkeys(node.inputs):
            if t:
                self._users.setdefault(t, {})[id(node)] = node

    def _untrack(self, node: Node) -> None:
        del self._slot_of[id(node)]
        for t in node.outputs:
            if t and self._producers.get(t) is node:
                del self._producers[t]
        for t in dict.fromkeys(node.inputs):
            users = self._users.get(t) if t else None
            if users is not None:
                users.pop(id(node), None)
                if not users:
                    del self._users[t]

    def _position(self, node: Node) -> tuple[int, int]:
        s = self._slot_of[id(node)]
        return s, next(j for j, m in enumerate(self._slots[s]) if m is node)

    def _replace(self, old: Node, new: Node) -> None:
        s, j = self._position(old)
        self._untrack(old)
        self._slots[s][j] = new
        self._track(new, s)

    def _used(self, name: str) -> bool:
        return name in self._users or self.pinned(name)

    # ---- driving -------------------------------------------------------
    def run(self, rules: Sequence[Rule]) -> None:
        steps = 0
        changed = True
        while changed:
            changed = False
            s = j = 0
            while s < len(self._slots):
                if j >= len(self._slots[s]):
                    s, j = s + 1, 0
                    continue
                node = self._slots[s][j]
                # A replacement may take over the replaced node's name.
                self._node_names.discard(node.name)
                for rule in rules:
                    result = rule(node, self)
                    if result is not None:
                        break
                else:
                    self._node_names.add(node.name)
                    j += 1
                    continue
                steps += 1
                if steps > MAX_STEPS:
                    raise RuntimeError(f"rewrite rule {rule.__name__} keeps firing on {node.name}")
                j = self._apply(s, j, result)
                changed = True

    def _apply(self, s: int, j: int, result: Rewrite) -> int:
        """Splice the replacement in at slot s, place j; returns where to
        look next in that slot (the first replacement node)."""
        old = self._slots[s][j]
        self._untrack(old)
        self._slots[s][j:j + 1] = list(result.nodes)
        for n in result.nodes:
            self._track(n, s)
        # where uses may have been lost: the old node's inputs, the aliased
        # tensors, and the new nodes' own outputs
        touched = [t for t in old.inputs if t]
        touched += [t for n in result.nodes for t in n.outputs if t]
        if result.alias:
            self._redirect(result.alias)
            touched += list(result.alias)
        if not self._swept:
            self._swept = True
            return self._drop_all_dead(s, j)
        return self._drop_dead(touched, s, j)

    def _redirect(self, alias: Mapping[str, str]) -> None:
        def resolve(t: str) -> str:
            seen = set()
            while t in alias and t not in seen:
                seen.add(t)
                t = alias[t]
            return t
        readers = {id(n): n for t in alias for n in self._users.get(t, {}).values()}
        for n in readers.values():
            self._replace(n, n.with_(inputs=tuple(resolve(t) for t in n.inputs)))
        self.outputs = [resolve(t) for t in self.outputs]
        self.updates = {v: resolve(t) for v, t in self.updates.items()}

    def _remove(self, node: Node, s: int, j: int) -> int:
        """Remove a dead node; returns j, moved back if the node stood
        before place j of slot s."""
        ns, nj = self._position(node)
        del self._slots[ns][nj]
        self._untrack(node)
        return j - 1 if ns == s and nj < j else j

    def _drop_dead(self, touched: Iterable[str], s: int, j: int) -> int:
        """Remove the producers of touched tensors that lost their last use,
        and so on up the graph."""
        stack = list(touched)
        while stack:
            t = stack.pop()
            node = self._producers.get(t)
            if node is None or any(self._used(o) for o in node.outputs if o):
                continue
            j = self._remove(node, s, j)
            stack.extend(i for i in node.inputs if i)
        return j

    def _drop_all_dead(self, s: int, j: int) -> int:
        """Remove every node none of whose outputs is used (transitively)."""
        used = set(self.outputs) | set(self.updates.values())
        dead = []
        for node in reversed(self.nodes):
            if any(o in used for o in node.outputs):
                used.update(node.inputs)
            else:
                dead.append(node)
        for node in dead:
            j = self._remove(node, s, j)
        return j

    def finish(self, retype: bool = True) -> Graph:
        self._drop_all_dead(0, 0)
        self._restore_output_names()
        nodes = self.nodes
        used = set(self.outputs) | set(self.graph.inputs) | set(self.graph.variables) \
            | set(self.updates.values())
        for n in nodes:
            used.update(n.inputs)
            used.update(n.outputs)
        graph = self.graph.replace(
            nodes=tuple(nodes),
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
                self._slots.append([node])
                self._track(node, len(self._slots) - 1)
                self.outputs[k] = orig

    def _rename(self, old: str, new: str) -> None:
        def r(t: str) -> str:
            return new if t == old else t
        touched = dict(self._users.get(old, {}))
        if old in self._producers:
            touched[id(self._producers[old])] = self._producers[old]
        for n in touched.values():
            self._replace(n, n.with_(inputs=tuple(map(r, n.inputs)),
                                     outputs=tuple(map(r, n.outputs))))
        self.outputs = [r(t) for t in self.outputs]
        self.types[new] = self.types.pop(old)


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
