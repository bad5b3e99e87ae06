"""TFLite control flow (IF, WHILE) inlined at import, as ONNX's is
(aot/frontend/onnx_control.py), under the same limits (aot/limits.py).

- IF: a constant condition inlines the taken branch; a run-time one inlines
  both and selects each output with a Where (the branches must agree on the
  outputs' types).
- WHILE: unrolled while its condition is known at compile time, at most
  MAX_UNROLL iterations: the condition subgraph is evaluated on the loop
  values known at compile time (a counter), the body inlined once per
  iteration.

Each call inlines its subgraph afresh (one copy per branch taken, one per
iteration), and every copy, nested ones and condition evaluations included,
draws on one node budget per model (MAX_INLINED_NODES): branches that call
the same subgraph at every level stop at the budget, not after 2**depth
copies. A subgraph called while it is being inlined (an IF whose branch is
itself, mutual recursion) is refused with the cycle named; so is nesting
deeper than MAX_NESTING.

Nothing here recurses in Python on the model's structure: the IF and WHILE
converters are generators that yield the inlining they need, `walk` runs
them on an explicit stack, and `Evaluator` computes a condition by walking
its producers on an explicit stack, each node once.
"""
from __future__ import annotations

import dataclasses
from collections import ChainMap
from typing import Any, Iterator

import numpy as np

from aot.errors import ModelError, UnsupportedError
from aot.ir.graph import Node, TensorType
from aot.limits import MAX_NESTING, MAX_UNROLL, NodeBudget

Work = Iterator[Any]


def walk(root: Work) -> None:
    """Runs a converter generator and every generator it yields, depth first:
    a yielded generator runs to its end, its return value is sent back."""
    stack, result = [root], None
    while stack:
        try:
            work = stack[-1].send(result)
        except StopIteration as done:
            stack.pop()
            result = done.value
            continue
        stack.append(work)
        result = None


@dataclasses.dataclass(frozen=True)
class Call:
    index: int      # the subgraph's index in the model
    name: str       # its own name ('' when the file gives none)
    site: str       # the operator that calls it ("IF node 'y'")

    def __str__(self) -> str:
        return f"subgraph {self.index}" + (f" '{self.name}'" if self.name else "")


class Inlining:
    """What one import's inlining shares: the subgraphs being inlined, the
    model's first call outermost, and the node budget."""

    def __init__(self) -> None:
        self.chain: list[Call] = []
        self.budget = NodeBudget()

    def enter(self, call: Call) -> None:
        site = self.chain[0].site if self.chain else call.site
        for pos, outer in enumerate(self.chain):
            if outer.index == call.index:
                cycle = " -> ".join(str(c) for c in (*self.chain[pos:], call))
                raise UnsupportedError(f"{site}: {call} calls itself ({cycle}); aot inlines "
                                       "control flow at import and cannot inline recursion")
        if len(self.chain) >= MAX_NESTING:
            raise UnsupportedError(f"{site}: control flow nested more than {MAX_NESTING} "
                                   f"subgraphs deep ({call} at depth {len(self.chain) + 1})")
        self.chain.append(call)

    def leave(self) -> None:
        self.chain.pop()

    def spend(self) -> None:
        """One node added to the model, counted when it comes from a subgraph."""
        if self.chain:
            self.budget.spend(1, lambda: f"{self.chain[0].site} (inside "
                                         f"{self.chain[-1]}, nested {len(self.chain)} deep)")


class Evaluator:
    """Values known at compile time of tensors the nodes of one graph compute,
    for WHILE conditions: computed on demand, each node once."""

    def __init__(self, nodes: list[Node], types: dict[str, TensorType],
                 constants: dict[str, np.ndarray]):
        self.nodes, self.types, self.constants = nodes, types, constants
        self.values: dict[str, np.ndarray | None] = {}   # None: known only at run time
        self.inferred: dict[str, TensorType] = {}        # types of the outputs evaluated
        self.producer: dict[str, Node] = {}
        self.indexed = 0

    def value(self, name: str) -> np.ndarray | None:
        self._index()
        stack, visiting = [name], set()
        while stack:
            top = stack[-1]
            if top in self.values or top in self.constants:
                stack.pop()
                continue
            node = self.producer.get(top)
            if node is None:            # an input or a variable
                self.values[top] = None
                stack.pop()
                continue
            missing = [i for i in node.inputs
                       if i and i not in self.values and i not in self.constants]
            if missing and id(node) in visiting:     # a cycle of names: not evaluable
                self.values.update(dict.fromkeys(node.outputs))
            elif missing:
                visiting.add(id(node))
                stack.extend(missing)
                continue
            else:
                self._evaluate(node)
            stack.pop()
        return self.values.get(name, self.constants.get(name))

    def _index(self) -> None:
        for node in self.nodes[self.indexed:]:
            for o in node.outputs:
                self.producer.setdefault(o, node)
        self.indexed = len(self.nodes)

    def _evaluate(self, node: Node) -> None:
        from aot.ops.evaluate import run_node
        from aot.passes.infer import EVAL_LIMIT, can_evaluate, node_types

        args = [self.values.get(i, self.constants.get(i)) if i else None for i in node.inputs]
        if any(i and a is None for i, a in zip(node.inputs, args)):
            self.values.update(dict.fromkeys(node.outputs))
            return
        types = ChainMap(self.inferred, self.types)
        if node.op == "Identity":         # the wiring of inlined subgraphs: most nodes here
            self.inferred[node.outputs[0]] = types[node.inputs[0]]
            self.values[node.outputs[0]] = args[0]
            return
        known = {i: a for i, a in zip(node.inputs, args) if i}
        self.inferred.update(zip(node.outputs, node_types(node, types, known)))
        if can_evaluate(node, types, known, EVAL_LIMIT):
            self.values.update(zip(node.outputs, run_node(node, types, args)))
        else:
            self.values.update(dict.fromkeys(node.outputs))


def _truth(label: str, value: np.ndarray, what: str) -> bool:
    flat = np.asarray(value).reshape(-1)
    if flat.size == 0:
        raise ModelError(f"{label}: its {what} is empty, not one value")
    return bool(flat[0])


class ControlFlowOps:
    """IF and WHILE converters of the importer's `_Builder` (`self`)."""

    inlining: Inlining
    evaluator: Evaluator

    def _subgraph(self, op, tag: str, key: str) -> int:
        k = int(op.options.get(key, 0))
        if not 0 < k <= len(self.m.others):
            raise ModelError(f"{self.op_label}: {tag} subgraph {k} of "
                             f"{len(self.m.others) + 1}")
        return k

    def _op_IF(self, op, ins, outs) -> Work:
        """A constant condition: the taken branch's subgraph inlined; a run-time
        one: both inlined and each output selected (the branches must agree on
        the outputs' types)."""
        self._need(ins, 1)
        cond, args = ins[0], ins[1:]
        branches = {"then": self._subgraph(op, "then", "ThenSubgraphIndex"),
                    "else": self._subgraph(op, "else", "ElseSubgraphIndex")}
        if cond in self.constants:
            taken = "then" if _truth(self.op_label, self.constants[cond], "condition") \
                else "else"
            yield self._inline(branches[taken], args, outs, taken)
            return
        results = {tag: [self.tmp(f"{tag}_{k}") for k in range(len(outs))] for tag in branches}
        for tag, index in branches.items():
            yield self._inline(index, args, results[tag], tag)
        for k, out in enumerate(outs):
            a, b = self.ty(results["then"][k]), self.ty(results["else"][k])
            if (a.shape, a.dtype, a.quant) != (b.shape, b.dtype, b.quant):
                raise UnsupportedError(f"{self.op_label}: a run-time condition whose branches "
                                       f"give output {k} as {a} and {b} is not supported yet")
            self.emit("Where", [cond, results["then"][k], results["else"][k]], [out],
                      f"select_{k}")

    def _op_WHILE(self, op, ins, outs) -> Work:
        """Unrolled when the condition is known at compile time on every
        iteration: it may read only loop values known at compile time (a
        counter that starts constant and that the body computes from constants)."""
        cond_k = self._subgraph(op, "cond", "CondSubgraphIndex")
        body_k = self._subgraph(op, "body", "BodySubgraphIndex")
        carried = list(ins)
        for it in range(MAX_UNROLL + 1):
            go = yield self._condition(cond_k, carried)
            if go is None:
                raise UnsupportedError(f"{self.op_label}: WHILE whose condition depends on "
                                       "run-time values is not supported yet")
            if not go:
                break
            if it == MAX_UNROLL:
                raise UnsupportedError(f"{self.op_label}: WHILE of more than "
                                       f"{MAX_UNROLL} iterations is not supported yet")
            nxt = [self.tmp(f"iteration_{it}_{k}") for k in range(len(carried))]
            yield self._inline(body_k, carried, nxt, f"iteration_{it}")
            carried = nxt
        for k, (value, out) in enumerate(zip(carried, outs)):
            self.emit("Identity", [value], [out], f"result_{k}")

    def _condition(self, index: int, carried: list[str]) -> Work:
        """Returns the WHILE condition subgraph's value on the loop values
        known at compile time, None when it needs a run-time one. Its nodes
        are evaluated apart, never added to the graph."""
        sub = self.m.others[index - 1]
        if len(sub.inputs) != len(carried) or len(sub.outputs) != 1:
            raise ModelError(f"{self.op_label}: the cond subgraph takes {len(sub.inputs)} "
                             f"inputs and gives {len(sub.outputs)} outputs, the node carries "
                             f"{len(carried)} values and needs one condition")
        known = [self.evaluator.value(c) for c in carried]
        self.inlining.enter(Call(index, sub.name, self.op_label))
        scratch = self._child(sub, f"{self.cur}/cond/", share=False)
        scratch.evaluator.values.update({scratch.names[i]: v for i, v in zip(sub.inputs, known)
                                         if v is not None})
        yield scratch._convert_ops(sub.ops)
        flag = self._subgraph_output(scratch, sub, 0, "cond")
        value = scratch.evaluator.value(flag)
        self.inlining.leave()
        return None if value is None else _truth(self.op_label, value, "condition")

    def _inline(self, index: int, args, results, tag: str) -> Work:
        """Converts subgraph `index` in place: its inputs read `args`, its
        outputs are copied to `results` (names of ours, declared or new)."""
        sub = self.m.others[index - 1]
        if len(sub.inputs) != len(args) or len(sub.outputs) != len(results):
            raise ModelError(f"{self.op_label}: the {tag} subgraph takes {len(sub.inputs)} "
                             f"inputs and gives {len(sub.outputs)} outputs, the node has "
                             f"{len(args)} and {len(results)}")
        self.inlining.enter(Call(index, sub.name, self.op_label))
        child = self._child(sub, f"{self.cur}/{tag}/", share=True)
        if child.variables:
            raise UnsupportedError(f"{self.op_label}: variables inside an IF branch are not "
                                   "supported yet")
        for k, (arg, i) in enumerate(zip(args, sub.inputs)):
            self.emit("Identity", [arg], [child.names[i]], f"{tag}_in_{k}")
        yield child._convert_ops(sub.ops)
        for k, res in enumerate(results):
            name = self._subgraph_output(child, sub, k, tag)
            if res not in self.types:
                self.types[res] = self.types[name]
            self.emit("Identity", [name], [res], f"{tag}_out_{k}")
        self.inlining.leave()

    def _child(self, sub, prefix: str, share: bool):
        """A builder for subgraph `sub`, its tensors named under `prefix` and
        declared. share: it adds to our graph; else to a graph of its own."""
        child = type(self)(dataclasses.replace(sub, others=self.m.others), self.name,
                           self.hybrid)
        child.names = [prefix + n for n in child.names]
        child.inlining = self.inlining
        if share:
            for attr in ("types", "constants", "nodes", "node_names", "updates", "evaluator"):
                setattr(child, attr, getattr(self, attr))
        used = set(sub.inputs) | set(sub.outputs)
        for sop in sub.ops:
            used.update(sop.inputs)
            used.update(sop.outputs)
        own = set()
        for i in sorted(used - {-1}):
            child.tensor(i)
            child._declare(i)
            if child.names[i] in child.constants:
                own.add(child.names[i])
        child.available = {child.names[i] for i in sub.inputs} | own
        return child

    def _subgraph_output(self, child, sub, k: int, tag: str) -> str:
        """The name of output k of `child`, the builder of subgraph `sub`."""
        name = child.tensor(sub.outputs[k])
        if name not in child.available or name not in child.types:
            raise ModelError(f"{self.op_label}: output {k} of the {tag} subgraph, '{name}', "
                             "is written by no operator")
        return name
