"""Model-local ONNX functions (ModelProto.functions), inlined before import.

PyTorch's dynamo exporter writes each nn.Module and each torch_lib op as a
function of a domain of its own ("pkg.torch...", "pkg.onnxscript.torch_lib"),
calling one another and taking attributes by reference (ref_attr_name,
defaults in attribute_proto). onnx.inliner replaces every call by the
function's body, recursively, in subgraphs too; a function written for
another default-domain opset than the model's is version-converted first, so
its nodes mean what they meant to the exporter. The inliner (onnx 1.23)
drops an attribute the call leaves out even where the function declares a
default for it, and the body's node then takes its op's own default: so
each call gets the function's defaults written in first. What is left
calling a function is refused by name.
"""
from __future__ import annotations

from aot.errors import ModelError, UnsupportedError


def inline_functions(model, name: str):
    """`model` with its local functions inlined; itself when it has none."""
    if not model.functions:
        return model
    from onnx import ModelProto, inliner
    filled = ModelProto()
    filled.CopyFrom(model)
    _fill_defaults(filled)
    try:
        inlined = inliner.inline_local_functions(filled, convert_version=True)
    except Exception as e:  # noqa: BLE001 - the inliner raises C++ errors of any kind
        detail = (str(e).splitlines() or [type(e).__name__])[0]
        raise ModelError(f"{name}: its model-local functions cannot be inlined "
                         f"({detail})") from None
    _refuse_calls_left(inlined, model)
    return inlined


def _fill_defaults(model) -> None:
    """Each call of a local function gets the function's default for every
    attribute it does not set (in place)."""
    defaults = {(f.domain, f.name): f.attribute_proto for f in model.functions}
    bodies = (n for f in model.functions for n in f.node)
    for node in (*_all_nodes(model.graph), *bodies):
        given = {a.name for a in node.attribute}
        for a in defaults.get((node.domain, node.op_type), ()):
            if a.name not in given:
                node.attribute.append(a)


def _refuse_calls_left(inlined, model) -> None:
    """A call the inliner left (its function's opset could not be converted
    to the model's) is refused naming the node, function and both opsets."""
    local = {(f.domain, f.name): f for f in model.functions}
    for index, node in enumerate(_all_nodes(inlined.graph)):
        f = local.get((node.domain, node.op_type))
        if f is None:
            continue
        theirs = next((o.version for o in f.opset_import if o.domain in ("", "ai.onnx")), None)
        ours = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
        raise UnsupportedError(
            f"node '{node.name or f'{node.op_type}_{index}'}' calls the model-local function "
            f"'{node.op_type}' of domain '{node.domain}', written for ONNX opset {theirs}, which "
            f"could not be converted to the model's opset {ours}")


def _all_nodes(graph):
    """The nodes of `graph` and of its subgraphs, depth first."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            for sub in (*([a.g] if a.HasField("g") else []), *a.graphs):
                yield from _all_nodes(sub)
