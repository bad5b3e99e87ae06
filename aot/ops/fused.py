"""The fused group: a node whose body is a Graph, made by the fusion pass.

Its inputs and outputs are those of the body, in order; running it runs the
body. Later, each fused group becomes one kernel.
"""
from __future__ import annotations

from aot.ops.evaluate import run_graph
from aot.ops.registry import Call, Pattern, Sig, node_macs, register


def _infer(sig: Sig):
    body = sig.attrs["body"]
    return [body.types[o] for o in body.outputs]


def _macs(call: Call) -> int:
    body = call.attrs["body"]
    return sum(node_macs(n, body.types) for n in body.nodes)


@register("fused", infer=_infer, pattern=Pattern.OPAQUE, macs=_macs,
          never_lowered="the fusion group itself: the driver lowers its body's ops")
def _fused(call: Call, args):
    body = call.attrs["body"]
    out = run_graph(body, dict(zip(body.inputs, args)))
    return [out[o] for o in body.outputs]
