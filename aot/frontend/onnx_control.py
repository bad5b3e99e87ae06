"""ONNX control flow (If, Loop, Scan) lowered at import into plain nodes
(docs/ops.md "Control flow").

- If whose condition is known at compile time (a constant, a bound input,
  anything folding reaches: Equal(sr, 16000), Shape arithmetic) becomes the
  taken branch. With a run-time condition both branches are computed and
  each output selected by a Where on the condition; the branches must then
  give the same static types.
- Loop with a compile-time trip count and an exit condition known at
  compile time after every iteration is unrolled; so is Scan (its trip
  count is the scan axis' static length). At most MAX_UNROLL iterations per
  loop, and MAX_INLINED_NODES nodes copied from branches and bodies in the
  whole model, nested ones included (aot/limits.py; TFLite's IF and WHILE
  share the limits).

A branch or body is inlined with every tensor it defines renamed to a fresh
name; names it does not define are the enclosing scopes' (outer-scope
references) and are kept, mapped through the enclosing renames. The walk
types and evaluates nodes as it goes (as type inference does), so that a
condition or trip count computed in the graph is known when its node is
reached.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np

from aot.errors import ShapeError, UnsupportedError, node_label
from aot.ir.graph import Graph, Node, claim_name, type_of
from aot.limits import MAX_INLINED_NODES, MAX_UNROLL, NodeBudget

CONTROL_OPS = ("If", "Loop", "Scan")

# Steps of the walk that are not nodes of the result (they continue an If or a Loop).
_SELECT, _NEXT = "__if_select", "__loop_next"


@dataclass(frozen=True)
class Body:
    """A subgraph attribute (If's branches, Loop's and Scan's body)."""
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    nodes: tuple[Node, ...]
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)

    def local_names(self) -> set[str]:
        return {*self.inputs, *self.constants, *(o for n in self.nodes for o in n.outputs)}


def has_control_flow(nodes: Iterable[Node]) -> bool:
    return any(n.op in CONTROL_OPS for n in nodes)


def _names_of(nodes: Iterable[Node], into: set[str]) -> None:
    todo = [nodes]          # a worklist: nesting depth costs no Python stack
    while todo:
        for n in todo.pop():
            into.update(n.inputs)
            into.update(n.outputs)
            for v in n.attrs.values():
                if isinstance(v, Body):
                    into.update(v.inputs)
                    into.update(v.outputs)
                    into.update(v.constants)
                    todo.append(v.nodes)


class _Namer:
    def __init__(self, graph: Graph):
        self.taken = set(graph.inputs) | set(graph.constants) | set(graph.outputs)
        _names_of(graph.nodes, self.taken)

    def fresh(self, base: str) -> str:
        return claim_name(base, self.taken, sep="__")


def _rename_free(body: Body, ren: Mapping[str, str]) -> Body:
    """`body` with its references to enclosing names mapped through `ren`."""
    local = body.local_names()
    ren = {k: v for k, v in ren.items() if k not in local}
    if not ren:
        return body
    return Body(body.name, body.inputs, tuple(ren.get(o, o) for o in body.outputs),
                tuple(_rename_node(n, ren) for n in body.nodes), body.constants)


def _rename_node(n: Node, ren: Mapping[str, str]) -> Node:
    attrs = {k: _rename_free(v, ren) if isinstance(v, Body) else v for k, v in n.attrs.items()}
    return n.with_(inputs=tuple(ren.get(i, i) if i else i for i in n.inputs),
                   outputs=tuple(ren.get(o, o) for o in n.outputs), attrs=attrs)


@dataclass(frozen=True)
class _Copy:
    nodes: list[Node]
    outputs: tuple[str, ...]


class _Resolver:
    def __init__(self, graph: Graph):
        self.namer = _Namer(graph)
        self.types = dict(graph.types)
        self.values: dict[str, np.ndarray] = dict(graph.constants)
        self.constants = dict(graph.constants)
        # id(body) -> (body, its constants' names); the body is held so that its
        # id is never reused by another (renamed nested bodies come and go)
        self.hoisted: dict[int, tuple[Body, dict[str, str]]] = {}
        self.budget = NodeBudget()

    def const(self, base: str, value) -> str:
        name = self.namer.fresh(base)
        arr = np.require(value, requirements="C")
        self.constants[name] = self.values[name] = arr
        self.types[name] = type_of(arr)
        return name

    def copy(self, site: Node, body: Body, args: Mapping[str, str], prefix: str) -> _Copy:
        """The body's nodes with fresh names; its inputs are `args`' tensors.
        Every copy, nested ones included, counts against the model's budget."""
        self.budget.spend(len(body.nodes), lambda: node_label(site))
        ren = dict(args)
        if id(body) not in self.hoisted:      # a constant is shared by every copy
            self.hoisted[id(body)] = (body, {k: self.const(f"{prefix}{k}", v)
                                             for k, v in body.constants.items()})
        ren.update(self.hoisted[id(body)][1])
        for n in body.nodes:
            ren.update({o: self.namer.fresh(f"{prefix}{o}") for o in n.outputs})
        nodes = [_rename_node(n, ren).with_(name=f"{prefix}{n.name}") for n in body.nodes]
        return _Copy(nodes, tuple(ren.get(o, o) for o in body.outputs))

    # ---- the walk -------------------------------------------------------------------

    def run(self, graph: Graph) -> Graph:
        from aot.interp import run_node
        from aot.passes.infer import EVAL_LIMIT, can_evaluate, node_types

        queue = deque(graph.nodes)
        out: list[Node] = []
        while queue:
            node = queue.popleft()
            expand = {"If": self.if_, "Loop": self.loop, "Scan": self.scan,
                      _SELECT: self.select, _NEXT: self.next_iteration}.get(node.op)
            if expand is not None:
                self.check_typed(node, node.inputs)
                queue.extendleft(reversed(expand(node)))
                continue
            self.types.update(zip(node.outputs, node_types(node, self.types, self.values)))
            if can_evaluate(node, self.types, self.values, EVAL_LIMIT):
                args = [self.values.get(i) if i else None for i in node.inputs]
                self.values.update(zip(node.outputs, run_node(node, self.types, args)))
            out.append(node)
        keep = set(graph.inputs) | set(self.constants)
        return graph.replace(nodes=tuple(out), constants=self.constants,
                             types={k: v for k, v in self.types.items() if k in keep})

    def check_typed(self, node: Node, names) -> None:
        for i in names:
            if i and i not in self.types:
                op = {_SELECT: "If", _NEXT: "Loop"}.get(node.op, node.op)
                raise ShapeError(f"{op} node '{node.name}': tensor '{i}' is not produced by any "
                                 "node and is not a model input or initializer")

    def known(self, name: str) -> np.ndarray | None:
        return self.values.get(name) if name else None

    # ---- If ------------------------------------------------------------------------

    def if_(self, node: Node) -> list[Node]:
        then, other = node.attrs["then_branch"], node.attrs["else_branch"]
        for b in (then, other):
            if len(b.outputs) != len(node.outputs):
                raise UnsupportedError(f"If node '{node.name}': branch '{b.name}' gives "
                                       f"{len(b.outputs)} outputs, the node has "
                                       f"{len(node.outputs)}")
        cond = self.known(node.inputs[0])
        if cond is not None:
            taken = then if _truth(node, cond) else other
            c = self.copy(node, taken, {}, f"{node.name}/")
            return c.nodes + _identities(node, c.outputs, node.outputs)
        a = self.copy(node, then, {}, f"{node.name}/then/")
        b = self.copy(node, other, {}, f"{node.name}/else/")
        select = Node(_SELECT, node.name, node.inputs, node.outputs,
                      {"then": a.outputs, "else": b.outputs})
        return a.nodes + b.nodes + [select]

    def select(self, step: Node) -> list[Node]:
        self.check_typed(step, (*step.attrs["then"], *step.attrs["else"]))
        cond = step.inputs[0]
        nodes = []
        if self.types[cond].shape != ():
            if self.types[cond].size != 1:
                raise UnsupportedError(f"If node '{step.name}': the condition has shape "
                                       f"{list(self.types[cond].shape)}, not one value")
            scalar = self.namer.fresh(f"{step.name}/cond")
            shape = self.const(f"{step.name}/scalar_shape", np.zeros(0, np.int64))
            nodes.append(Node("Reshape", f"{step.name}/cond_scalar", (cond, shape), (scalar,)))
            cond = scalar
        for k, (t, e, out) in enumerate(zip(step.attrs["then"], step.attrs["else"],
                                            step.outputs)):
            tt, te = self.types[t], self.types[e]
            if (tt.shape, tt.dtype, tt.quant) != (te.shape, te.dtype, te.quant):
                raise UnsupportedError(
                    f"If node '{step.name}': its condition is known only at run time and "
                    f"output {k} differs between the branches ({tt} vs {te}): both branches "
                    "must give the same static types (or bind the inputs the condition "
                    "depends on with --bind)")
            nodes.append(Node("Where", f"{step.name}/select_{k}", (cond, t, e), (out,)))
        return nodes

    # ---- Loop ----------------------------------------------------------------------

    def loop(self, node: Node) -> list[Node]:
        body: Body = node.attrs["body"]
        trip = self.known(node.inputs[0]) if node.inputs else None
        if trip is None and (not node.inputs or not node.inputs[0]):
            raise UnsupportedError(f"Loop node '{node.name}': has no trip count; aot unrolls "
                                   "loops with a compile-time trip count only")
        if trip is None:
            raise UnsupportedError(f"Loop node '{node.name}': input 0 must be a compile-time "
                                   f"constant (the trip count '{node.inputs[0]}' is known only "
                                   "at run time; aot unrolls loops with a compile-time trip "
                                   "count only)")
        trip = int(np.asarray(trip).reshape(-1)[0])
        # The limits are checked per iteration: a TorchScript `while` has a huge
        # trip count and exits on a condition that may be known at compile time.
        carried = tuple(node.inputs[2:])
        n_scan = len(body.outputs) - 1 - len(carried)
        if len(body.inputs) != 2 + len(carried) or n_scan < 0 or \
                len(node.outputs) != len(carried) + n_scan:
            raise UnsupportedError(f"Loop node '{node.name}': its body takes "
                                   f"{len(body.inputs)} inputs and gives {len(body.outputs)} "
                                   f"outputs for {len(carried)} loop-carried values")
        cond = node.inputs[1] if len(node.inputs) > 1 and node.inputs[1] else ""
        state = {"i": 0, "trip": trip, "cond": cond, "carried": carried, "scans": ()}
        return [Node(_NEXT, node.name, node.inputs, node.outputs, {**state, "loop": node})]

    def next_iteration(self, step: Node) -> list[Node]:
        a = step.attrs
        node, body = a["loop"], a["loop"].attrs["body"]
        go = a["i"] < a["trip"]
        if go and a["cond"]:
            value = self.known(a["cond"])
            if value is None and a["i"] == 0:
                raise UnsupportedError(f"Loop node '{node.name}': input 1 must be a "
                                       f"compile-time constant (the condition '{a['cond']}' is "
                                       "known only at run time)")
            if value is None:
                raise UnsupportedError(f"Loop node '{node.name}': its exit condition is known "
                                       f"only at run time (after iteration {a['i'] - 1}); aot "
                                       "unrolls loops without a data-dependent exit only")
            go = _truth(node, value)
        if not go:
            return self.loop_outputs(node, a["carried"], a["scans"])
        i = a["i"]
        if i >= MAX_UNROLL:
            raise UnsupportedError(f"Loop node '{node.name}': trip count {a['trip']} is above "
                                   f"the unroll limit of {MAX_UNROLL} iterations (no exit "
                                   "within them)")
        _check_unrolled(node, body, a["trip"], i + 1)
        cond_in = a["cond"] or self.const(f"{node.name}/true", np.array(True))
        args = dict(zip(body.inputs, (self.const(f"{node.name}/iter{i}", np.array(i, np.int64)),
                                      cond_in, *a["carried"])))
        c = self.copy(node, body, args, f"{node.name}/{i}/")
        n_carried = len(a["carried"])
        after = step.with_(attrs={**a, "i": i + 1, "cond": c.outputs[0],
                                  "carried": c.outputs[1:1 + n_carried],
                                  "scans": (*a["scans"], c.outputs[1 + n_carried:])})
        return c.nodes + [after]

    def loop_outputs(self, node: Node, carried: tuple[str, ...],
                     scans: tuple[tuple[str, ...], ...]) -> list[Node]:
        n_scan = len(node.outputs) - len(carried)
        nodes = _identities(node, carried, node.outputs[:len(carried)])
        for k, out in enumerate(node.outputs[len(carried):]):
            nodes += self.stack(node, [s[k] for s in scans], out, 0)
        if n_scan and not scans:
            raise UnsupportedError(f"Loop node '{node.name}': runs no iteration, and its scan "
                                   "outputs would be empty (aot has no empty tensors)")
        return nodes

    def stack(self, node: Node, parts: list[str], out: str, axis: int) -> list[Node]:
        """Concat of the parts, each with a new axis at `axis`."""
        nodes, expanded = [], []
        axes = self.const(f"{node.name}/axes{axis}", np.array([axis], np.int64))
        for j, p in enumerate(parts):
            e = self.namer.fresh(f"{p}__stacked")
            nodes.append(Node("Unsqueeze", f"{node.name}/unsqueeze_{out}_{j}", (p, axes), (e,)))
            expanded.append(e)
        nodes.append(Node("Concat", f"{node.name}/stack_{out}", tuple(expanded), (out,),
                          {"axis": axis}))
        return nodes

    # ---- Scan ----------------------------------------------------------------------

    def scan(self, node: Node) -> list[Node]:
        if node.attrs.get("batch_axis"):
            return self.scan8(node)
        body: Body = node.attrs["body"]
        m = int(node.attrs.get("num_scan_inputs", 0))
        n_state = len(node.inputs) - m
        if m <= 0 or n_state < 0 or len(body.inputs) != len(node.inputs) or \
                len(body.outputs) != len(node.outputs) or len(body.outputs) < n_state:
            raise UnsupportedError(f"Scan node '{node.name}': {m} scan inputs for "
                                   f"{len(node.inputs)} inputs and {len(node.outputs)} outputs, "
                                   f"and a body of {len(body.inputs)} inputs and "
                                   f"{len(body.outputs)} outputs")
        xs = node.inputs[n_state:]
        if not all(xs) or not all(node.inputs):
            raise UnsupportedError(f"Scan node '{node.name}': an input is absent ('')")
        in_axes = _axes(node, "scan_input_axes", m, [len(self.types[x].shape) for x in xs])
        in_dirs = _directions(node, "scan_input_directions", m)
        lengths = {self.types[x].shape[a] for x, a in zip(xs, in_axes)}
        if len(lengths) != 1:
            raise UnsupportedError(f"Scan node '{node.name}': its scan inputs have different "
                                   f"lengths {sorted(lengths)}")
        trip = lengths.pop()
        if trip > MAX_UNROLL:
            raise UnsupportedError(f"Scan node '{node.name}': {trip} iterations is above the "
                                   f"unroll limit of {MAX_UNROLL}")
        _check_unrolled(node, body, trip, trip)
        n_out = len(body.outputs) - n_state
        state, scans, nodes = tuple(node.inputs[:n_state]), [], []
        for i in range(trip):
            slices = []
            for j, (x, a, d) in enumerate(zip(xs, in_axes, in_dirs)):
                idx = self.const(f"{node.name}/index{trip - 1 - i if d else i}",
                                 np.array(trip - 1 - i if d else i, np.int64))
                s = self.namer.fresh(f"{node.name}/{i}/x{j}")
                nodes.append(Node("Gather", f"{node.name}/{i}/slice{j}", (x, idx), (s,),
                                  {"axis": a}))
                slices.append(s)
            c = self.copy(node, body, dict(zip(body.inputs, (*state, *slices))),
                          f"{node.name}/{i}/")
            nodes += c.nodes
            state, outs = c.outputs[:n_state], c.outputs[n_state:]
            scans.append(outs)
        nodes += _identities(node, state, node.outputs[:n_state])
        out_dirs = _directions(node, "scan_output_directions", n_out)
        out_axes = _axes(node, "scan_output_axes", n_out, [None] * n_out)
        for k, out in enumerate(node.outputs[n_state:]):
            parts = [s[k] for s in scans]
            if out_dirs[k]:
                parts.reverse()
            axis = out_axes[k]
            if axis < 0:      # counts from the end of the output: the part's rank plus one
                axis += self.rank_after(nodes, parts[0]) + 1
            if axis < 0:
                raise UnsupportedError(f"Scan node '{node.name}': scan_output_axes "
                                       f"{out_axes[k]} is out of range")
            nodes += self.stack(node, parts, out, axis)
        return nodes

    def scan8(self, node: Node) -> list[Node]:
        """Scan-8: inputs and outputs have a leading batch axis, the scan axis is
        1: one opset-9 Scan per batch row, their outputs stacked again."""
        if len(node.inputs) < 2 or not all(node.inputs[1:]):
            raise UnsupportedError(f"Scan node '{node.name}': needs its states and scan inputs "
                                   "after sequence_lens")
        lens, *ins = node.inputs
        if any(not self.types[x].shape for x in ins):
            raise UnsupportedError(f"Scan node '{node.name}': an input has no batch axis")
        n_rows = self.types[ins[0]].shape[0]
        m = int(node.attrs.get("num_scan_inputs", 0))
        if lens:
            value = self.known(lens)
            if value is None:
                raise UnsupportedError(f"Scan node '{node.name}': input 0 must be a compile-time "
                                       "constant (sequence_lens is known only at run time)")
            full = {self.types[x].shape[1] for x in ins[len(ins) - m:]}
            if set(np.asarray(value).reshape(-1).tolist()) != full:
                raise UnsupportedError(f"Scan node '{node.name}': sequence_lens "
                                       f"{np.asarray(value).tolist()} shorter than the scan "
                                       "inputs is not supported")
        if n_rows > MAX_UNROLL:
            raise UnsupportedError(f"Scan node '{node.name}': {n_rows} batch rows is above the "
                                   f"unroll limit of {MAX_UNROLL}")
        attrs = {"body": node.attrs["body"], "num_scan_inputs": m,
                 "scan_input_directions": tuple(node.attrs.get("directions", (0,) * m))}
        nodes, rows = [], []
        for b in range(n_rows):
            idx = self.const(f"{node.name}/row{b}", np.array(b, np.int64))
            sliced = []
            for j, x in enumerate(ins):
                s = self.namer.fresh(f"{node.name}/row{b}/in{j}")
                nodes.append(Node("Gather", f"{node.name}/row{b}/take{j}", (x, idx), (s,),
                                  {"axis": 0}))
                sliced.append(s)
            outs = tuple(self.namer.fresh(f"{node.name}/row{b}/{o}") for o in node.outputs)
            nodes.append(Node("Scan", f"{node.name}/row{b}", tuple(sliced), outs, attrs))
            rows.append(outs)
        for k, out in enumerate(node.outputs):
            nodes += self.stack(node, [r[k] for r in rows], out, 0)
        return nodes

    def rank_after(self, nodes: list[Node], name: str) -> int:
        """The rank of a body output not typed yet: typed on a scratch copy of the walk."""
        from aot.passes.infer import node_types

        types = dict(self.types)
        for n in nodes:
            types.update(zip(n.outputs, node_types(n, types, self.values)))
        return len(types[name].shape)


def _axes(node: Node, attr: str, count: int, ranks: list[int | None]) -> list[int]:
    """The axes attribute, negative ones counted from each rank (None: left as
    they are, resolved later); one per tensor and within its rank."""
    axes = list(node.attrs.get(attr, (0,) * count))
    if len(axes) != count:
        raise UnsupportedError(f"Scan node '{node.name}': {attr} has {len(axes)} entries for "
                               f"{count} tensors")
    out = [a + r if a < 0 and r is not None else a for a, r in zip(axes, ranks)]
    for a, r, given in zip(out, ranks, axes):
        if r is not None and not 0 <= a < r:
            raise UnsupportedError(f"Scan node '{node.name}': {attr} {given} is out of range "
                                   f"for a tensor of rank {r}")
    return out


def _directions(node: Node, attr: str, count: int) -> tuple[int, ...]:
    dirs = tuple(node.attrs.get(attr, (0,) * count))
    if len(dirs) != count or any(d not in (0, 1) for d in dirs):
        raise UnsupportedError(f"Scan node '{node.name}': {attr} {list(dirs)} must be {count} "
                               "values of 0 (forward) or 1 (reverse)")
    return dirs


def _check_unrolled(node: Node, body: Body, trip: int, done: int) -> None:
    """`done` iterations of `trip` unrolled (or about to be) stay within the node limit."""
    if done * len(body.nodes) > MAX_INLINED_NODES:
        raise UnsupportedError(f"{node.op} node '{node.name}': unrolling {trip} iterations of "
                               f"{len(body.nodes)} nodes is above the limit of "
                               f"{MAX_INLINED_NODES} nodes")


def _truth(node: Node, value: np.ndarray) -> bool:
    flat = np.asarray(value).reshape(-1)
    if flat.size != 1:
        raise UnsupportedError(f"{node.op} node '{node.name}': its condition has "
                               f"{flat.size} values, not one")
    return bool(flat[0])


def _identities(node: Node, sources: Iterable[str], outputs: Iterable[str]) -> list[Node]:
    return [Node("Identity", f"{node.name}/out_{k}", (s,), (o,))
            for k, (s, o) in enumerate(zip(sources, outputs))]


def resolve_control_flow(graph: Graph) -> Graph:
    """`graph` without If, Loop and Scan nodes (nested ones included)."""
    if not has_control_flow(graph.nodes):
        return graph
    return _Resolver(graph).run(graph)
