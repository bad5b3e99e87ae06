"""ONNX importer: a ModelProto's bytes in, a Graph of latest-opset ops out.

Every node is normalized to the latest-opset form of its op (docs/ops.md):
attributes that later became inputs become constant inputs, dropped
attributes go, Upsample becomes Resize. All of that lives in one table,
UPGRADES, keyed by op type. Intermediate tensors are left untyped: type
inference (aot.passes.infer) fills them in.

Opsets: the default domain ("" / "ai.onnx"), opset 7 up to the installed
onnx package's latest. Ops are normalized to their opset-21 form; for the ops
aot supports, later opsets only added element types (bfloat16, float8, int4,
float4, int2) that aot refuses per tensor anyway, so their nodes mean the
same, but for opset 23's DequantizeLinear output_dtype and QuantizeLinear
precision, which aot/ops/quant/onnx_quant.py reads. A node of the ONNX-ML
domain ("ai.onnx.ml") is read when the op table has its op in that domain
(OpDef.domain; a model of ONNX-ML nodes alone may import no default-domain
opset). Opset imports of other domains are fine as long as no node uses them
(exporters list them by habit); a node of another domain, or of a domain its
op is not in, is refused. Model-local functions (PyTorch's dynamo exporter
writes them) are inlined first (aot.frontend.onnx_functions).

Static shapes only: an input with a symbolic, unknown, zero or negative
dimension takes its shape from `input_shapes` (--input-shape), a bound
value or `dim_params` (symbolic dimensions by name), else is refused with a
ShapeError naming the input (aot.frontend.shapes). Bound inputs become
constants. If, Loop and Scan carry subgraphs (aot.frontend.onnx_control.Body)
and are lowered into plain nodes before the graph is returned.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from aot.errors import ModelError, ShapeError, UnsupportedError
from aot.frontend.onnx_control import CONTROL_OPS, Body, resolve_control_flow
from aot.frontend.onnx_functions import inline_functions
from aot.frontend.shapes import LoadOptions, bind_inputs, input_dims
from aot.ir.graph import DTYPES, Graph, Node, TensorType, claim_name, type_of
from aot.limits import check_shape

MIN_OPSET = 7
DEFAULT_DOMAINS = ("", "ai.onnx")
# scikit-learn's exporters write trees, linear models and preprocessors here;
# its op names collide with no default-domain op, so the op table holds both.
ML_DOMAIN = "ai.onnx.ml"
# The com.microsoft ops ONNX Runtime's quantizer writes in QOperator form
# that aot implements (aot/ops/quant/onnx_quant.py, ONNX Runtime's arithmetic).
MICROSOFT_OPS = ("QLinearAdd", "QLinearMul", "QLinearConcat", "QLinearAveragePool",
                 "QLinearGlobalAveragePool", "QLinearSigmoid", "QLinearLeakyRelu",
                 "QLinearSoftmax", "QGemm")
# Types numpy stands in for with a wider one (onnx maps them to uint16, int8,
# ...): refused by name so they are never misread.
NARROW_DTYPES = ("BFLOAT16", "INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2")


def _onnx():
    import onnx  # imported lazily: TFLite users need not pay for it
    return onnx


# ---- data types ------------------------------------------------------------------------

def _dtype(elem_type: int, what: str) -> str:
    onnx = _onnx()
    try:
        name = onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        name = str(elem_type)
    try:
        np_name = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:  # noqa: BLE001 - unknown codes, string, float8...
        np_name = None
    if np_name not in DTYPES or name in NARROW_DTYPES or name.startswith("FLOAT8"):
        raise UnsupportedError(f"{what}: data type {name} is not supported")
    return np_name


def _tensor(t, what: str) -> np.ndarray:
    onnx = _onnx()
    if t.data_location == onnx.TensorProto.EXTERNAL:
        raise UnsupportedError(f"{what}: tensor data stored in an external file is not "
                               "supported (save the model with its weights inside)")
    _dtype(t.data_type, what)
    check_shape(t.dims, what, allow_empty=True)  # before decoding what the dims claim
    try:
        arr = onnx.numpy_helper.to_array(t)
    except Exception as e:  # noqa: BLE001 - malformed raw data
        raise ModelError(f"{what}: unreadable tensor data ({e})") from None
    if arr.size != int(np.prod(tuple(t.dims), dtype=np.int64)):
        raise ModelError(f"{what}: tensor data does not match its dims {list(t.dims)}")
    return np.require(arr, requirements="C")


def _value_type(vi, what: str, dim_params: Mapping[str, int],
                opts: LoadOptions = LoadOptions()) -> TensorType:
    if vi.type.WhichOneof("value") != "tensor_type":
        raise UnsupportedError(f"{what}: only tensor inputs are supported "
                               f"(got {vi.type.WhichOneof('value') or 'no type'})")
    tt = vi.type.tensor_type
    dtype = _dtype(tt.elem_type, what)
    if not tt.HasField("shape"):
        raise ShapeError(f"{what}: the model gives no shape (aot needs static shapes)")
    declared = [int(d.dim_value) if d.HasField("dim_value") else
                d.dim_param if d.HasField("dim_param") else None for d in tt.shape.dim]
    return TensorType(input_dims(vi.name, declared, opts, dim_params), dtype)


# ---- attributes -------------------------------------------------------------------------

def _attr(a, what: str) -> Any:
    onnx = _onnx()
    A = onnx.AttributeProto
    if a.type == A.FLOAT:
        return float(a.f)
    if a.type == A.INT:
        return int(a.i)
    if a.type == A.STRING:
        return a.s.decode("utf-8", "replace")
    if a.type == A.TENSOR:
        return _tensor(a.t, f"{what} attribute '{a.name}'")
    if a.type == A.FLOATS:
        return tuple(float(v) for v in a.floats)
    if a.type == A.INTS:
        return tuple(int(v) for v in a.ints)
    if a.type == A.STRINGS:
        return tuple(s.decode("utf-8", "replace") for s in a.strings)
    kind = A.AttributeType.Name(a.type)
    raise UnsupportedError(f"{what}: attribute '{a.name}' of type {kind} is not supported")


# ---- normalization to the latest opset ---------------------------------------------------

class _Builder:
    """Collects the nodes and constants of the graph being imported."""

    def __init__(self, opset: int, taken: set[str]):
        self.opset = opset
        self.nodes: list[Node] = []
        self.constants: dict[str, np.ndarray] = {}
        self.taken = taken

    def fresh(self, base: str) -> str:
        return claim_name(base, self.taken)

    def const(self, node_name: str, what: str, value) -> str:
        name = self.fresh(f"{node_name}__{what}")
        self.constants[name] = np.require(value, requirements="C")
        return name


Upgrade = Callable[[_Builder, Node], Node]


def _move_attrs(*specs: tuple[str, int, str]) -> Upgrade:
    """Attributes that became inputs: (attr, input index, numpy dtype)."""
    def up(b: _Builder, n: Node) -> Node:
        attrs = dict(n.attrs)
        inputs = list(n.inputs)
        for attr, index, dtype in specs:
            if attr not in attrs:
                continue
            value = attrs.pop(attr)
            if index < len(inputs) and inputs[index]:
                raise ModelError(f"{n.op} node '{n.name}': '{attr}' given both as "
                                 "attribute and input")
            inputs += [""] * (index + 1 - len(inputs))
            inputs[index] = b.const(n.name, attr, np.asarray(value, dtype=dtype))
        return n.with_(inputs=_trim(inputs), attrs=attrs)
    return up


def _trim(inputs: list[str]) -> tuple[str, ...]:
    while inputs and not inputs[-1]:
        inputs.pop()
    return tuple(inputs)


def _drop(*names: str) -> Upgrade:
    def up(b: _Builder, n: Node) -> Node:
        return n.with_(attrs={k: v for k, v in n.attrs.items() if k not in names})
    return up


def _chain(*ups: Upgrade) -> Upgrade:
    def up(b: _Builder, n: Node) -> Node:
        for u in ups:
            n = u(b, n)
        return n
    return up


def _below(opset: int, up: Upgrade) -> Upgrade:
    """Apply an upgrade only to models older than `opset`."""
    def guarded(b: _Builder, n: Node) -> Node:
        return up(b, n) if b.opset < opset else n
    return guarded


def _clip_scalars(b: _Builder, n: Node) -> Node:
    # Clip < 11: min/max attributes (float) -> scalar inputs
    attrs = dict(n.attrs)
    inputs = [n.inputs[0], "", ""]
    for i, (attr, default) in enumerate((("min", None), ("max", None)), start=1):
        if attr in attrs:
            inputs[i] = b.const(n.name, attr, np.float32(attrs.pop(attr)))
    return n.with_(inputs=_trim(inputs), attrs=attrs)


def _pad_v2(b: _Builder, n: Node) -> Node:
    attrs = dict(n.attrs)
    pads = attrs.pop("pads", attrs.pop("paddings", None))
    if pads is None:
        raise ModelError(f"{n.op} node '{n.name}': missing the 'pads' attribute")
    value = attrs.pop("value", 0.0)
    inputs = [n.inputs[0], b.const(n.name, "pads", np.asarray(pads, np.int64))]
    if attrs.get("mode", "constant") == "constant" and value != 0.0:
        inputs.append(b.const(n.name, "value", np.float32(value)))
    return n.with_(inputs=tuple(inputs), attrs=attrs)


def _split_outputs(b: _Builder, n: Node) -> Node:
    # Without a split input, Split-18 needs num_outputs; older opsets split evenly.
    if len(n.inputs) < 2 or not n.inputs[1]:
        return n.with_(attrs={**n.attrs, "num_outputs": n.attrs.get("num_outputs",
                                                                      len(n.outputs))})
    return n


def _upsample(b: _Builder, n: Node) -> Node:
    """Upsample (7-9) -> Resize with Upsample's coordinate convention."""
    attrs = dict(n.attrs)
    mode = attrs.pop("mode", "nearest")
    if "scales" in attrs:  # opset 7-8: scales attribute
        scales = b.const(n.name, "scales", np.asarray(attrs.pop("scales"), np.float32))
    else:
        scales = n.inputs[1]
    resize = _resize_v10(b, n.with_(inputs=(n.inputs[0], scales), attrs={**attrs, "mode": mode}))
    return resize.with_(op="Resize")


def _resize_v10(b: _Builder, n: Node) -> Node:
    """Resize-10 has (X, scales) and Upsample's asymmetric coordinates.

    Its nearest rounding is unspecified; ONNX Runtime (what such models were
    checked against) floors when upsampling and ceils when downsampling, so
    the one Resize-19 nearest_mode that matches depends on the scales.
    """
    if len(n.inputs) != 2:
        return n
    mode = n.attrs.get("mode", "nearest")
    if mode not in ("nearest", "linear"):
        raise UnsupportedError(f"{n.op} node '{n.name}': mode {mode!r} is not supported")
    attrs = {**n.attrs, "coordinate_transformation_mode": "asymmetric", "mode": mode}
    if mode == "nearest":
        attrs["nearest_mode"] = _v10_nearest_mode(b, n)
    return n.with_(inputs=(n.inputs[0], "", n.inputs[1]), attrs=attrs)


def _v10_nearest_mode(b: _Builder, n: Node) -> str:
    if n.op == "Upsample":
        return "floor"  # Upsample's scales are >= 1
    scales = b.constants.get(n.inputs[1])
    if scales is None:
        raise UnsupportedError(f"{n.op} node '{n.name}': opset-10 Resize needs constant scales")
    if np.all(scales >= 1):
        return "floor"
    if np.all(scales <= 1):
        return "ceil"
    raise UnsupportedError(f"{n.op} node '{n.name}': opset-10 nearest Resize that both "
                           f"up- and downsamples (scales {scales.tolist()}) is not supported")


def _softmax_v1(b: _Builder, n: Node) -> Node:
    """Softmax/LogSoftmax < 13 normalize over the input flattened at `axis`:
    Flatten -> op(axis=-1) -> Reshape back to the input's shape."""
    axis = n.attrs.get("axis", 1)
    if axis == -1:
        return n.with_(attrs={"axis": -1})
    x, y = n.inputs[0], n.outputs[0]
    flat, soft, shape = (b.fresh(f"{n.name}__{s}") for s in ("flat", "2d", "shape"))
    b.nodes.append(Node("Flatten", b.fresh(f"{n.name}__flatten"), (x,), (flat,),
                        {"axis": axis}))
    b.nodes.append(Node(n.op, n.name, (flat,), (soft,), {"axis": -1}))
    b.nodes.append(Node("Shape", b.fresh(f"{n.name}__shape_of"), (x,), (shape,), {}))
    return Node("Reshape", b.fresh(f"{n.name}__unflatten"), (soft, shape), (y,), {})


def _groupnorm_v18(b: _Builder, n: Node) -> Node:
    """GroupNormalization 18-20 scale and bias hold one value per group (21:
    one per channel): the input reshaped to [N, groups, -1], normalized by
    InstanceNormalization with them, and reshaped back."""
    groups = int(n.attrs.get("num_groups", 0))
    if groups < 1 or len(n.inputs) < 3:
        raise ModelError(f"GroupNormalization node '{n.name}': needs num_groups >= 1 and the "
                         f"scale and bias inputs (got num_groups {groups}, "
                         f"{len(n.inputs)} inputs)")
    x, y = n.inputs[0], n.outputs[0]
    grouped, normed, shape = (b.fresh(f"{n.name}__{s}") for s in ("grouped", "normed", "shape"))
    b.nodes.append(Node("Reshape", b.fresh(f"{n.name}__group"),
                        (x, b.const(n.name, "groups", np.array([0, groups, -1], np.int64))),
                        (grouped,), {}))
    b.nodes.append(Node("InstanceNormalization", n.name, (grouped, *n.inputs[1:3]), (normed,),
                        {"epsilon": n.attrs.get("epsilon", 1e-5)}))
    b.nodes.append(Node("Shape", b.fresh(f"{n.name}__shape_of"), (x,), (shape,), {}))
    return Node("Reshape", b.fresh(f"{n.name}__ungroup"), (normed, shape), (y,), {})


def _batchnorm(b: _Builder, n: Node) -> Node:
    if n.attrs.get("spatial", 1) != 1:
        raise UnsupportedError(f"BatchNormalization node '{n.name}': spatial=0 "
                               "is not supported")
    return _drop("spatial", "is_test", "consumed_inputs")(b, n)


def _dropout_v7(b: _Builder, n: Node) -> Node:
    """Dropout < 10 gives a mask of the input's type, not bool: cast the mask."""
    if len(n.outputs) < 2 or not n.outputs[1]:
        return n
    mask = b.fresh(f"{n.name}__mask")
    b.nodes.append(n.with_(outputs=(n.outputs[0], mask)))
    return Node("CastLike", b.fresh(f"{n.name}__mask_cast"), (mask, n.inputs[0]),
                (n.outputs[1],), {})


def _reduce_axes(before: int) -> Upgrade:
    return _below(before, _move_attrs(("axes", 1, "int64")))


# op type -> how a node of an older opset becomes its latest-opset form.
UPGRADES: dict[str, Upgrade] = {
    "Slice": _below(10, _move_attrs(("starts", 1, "int64"), ("ends", 2, "int64"),
                                    ("axes", 3, "int64"))),
    "Squeeze": _below(13, _move_attrs(("axes", 1, "int64"))),
    "Unsqueeze": _below(13, _move_attrs(("axes", 1, "int64"))),
    "Split": _chain(_below(13, _move_attrs(("split", 1, "int64"))), _split_outputs),
    "Pad": _below(11, _pad_v2),
    "Clip": _below(11, _clip_scalars),
    "ReduceSum": _reduce_axes(13),
    **{op: _reduce_axes(18) for op in (
        "ReduceMax", "ReduceMin", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2",
        "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")},
    "Upsample": _upsample,
    "Scatter": lambda b, n: n.with_(op="ScatterElements"),   # its name before opset 11
    "Resize": _below(11, _resize_v10),
    "Softmax": _below(13, _softmax_v1),
    "LogSoftmax": _below(13, _softmax_v1),
    "Hardmax": _below(13, _softmax_v1),
    "BatchNormalization": _batchnorm,
    "GroupNormalization": _below(21, _groupnorm_v18),
    "Dropout": _chain(_drop("is_test", "ratio", "seed"), _below(10, _dropout_v7)),
    "Gemm": _drop("broadcast"),
    "Cast": _drop("saturate"),
    "Relu": _drop("consumed_inputs"),
    **{op: _drop("consumed_inputs") for op in (
        "Abs", "Add", "Sub", "Mul", "Div", "Neg", "Reciprocal", "Sqrt", "Exp", "Log",
        "Ceil", "Floor", "Sigmoid", "Tanh", "LeakyRelu", "Elu", "Selu", "HardSigmoid",
        "PRelu", "Max", "Min", "Mean", "Sum")},
}


# ---- the importer -------------------------------------------------------------------------

def _parse(data: bytes, name: str):
    onnx = _onnx()
    try:
        model = onnx.ModelProto.FromString(bytes(data))
    except Exception as e:  # noqa: BLE001 - protobuf raises DecodeError and others
        raise ModelError(f"{name}: not a readable ONNX model ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else 'parse failed'})") from None
    if not model.HasField("graph") or not model.graph.output:
        raise ModelError(f"{name}: not an ONNX model (no graph with outputs; "
                         "truncated or corrupt file?)")
    return model


def _opset(model, name: str) -> int:
    versions = [o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS]
    latest = _onnx().defs.onnx_opset_version()
    if not versions and any(o.domain == ML_DOMAIN for o in model.opset_import):
        return latest     # ONNX-ML nodes only: a default-domain node is read as the latest's
    if not versions:
        raise ModelError(f"{name}: the model imports no default-domain ONNX opset")
    opset = int(versions[0])
    if not MIN_OPSET <= opset <= latest:
        raise UnsupportedError(f"{name}: ONNX opset {opset} is not supported "
                               f"(aot reads opsets {MIN_OPSET} to {latest})")
    return opset


def _check_domain(node: Node, domain: str) -> None:
    if domain == "com.microsoft" and node.op in MICROSOFT_OPS:
        return
    if domain == "com.microsoft":
        raise UnsupportedError(f"unsupported op '{node.op}' of domain 'com.microsoft' at node "
                               f"'{node.name}' (aot reads {', '.join(MICROSOFT_OPS)} of it)")
    from aot.ops import OPS
    opdef = OPS.get(node.op)
    if domain == ML_DOMAIN and (opdef is None or opdef.domain != ML_DOMAIN):
        ml = sorted(k for k, d in OPS.items() if d.domain == ML_DOMAIN)
        raise UnsupportedError(f"unsupported op '{node.op}' of domain '{domain}' at node "
                               f"'{node.name}' (aot reads {', '.join(ml)} of it)")
    if domain not in DEFAULT_DOMAINS + (ML_DOMAIN,):
        raise UnsupportedError(f"unsupported op '{node.op}' of domain '{domain}' at node "
                               f"'{node.name}' (aot reads the default ONNX domain, "
                               f"{ML_DOMAIN} and com.microsoft's quantized ops)")
    if domain in DEFAULT_DOMAINS and opdef is not None and opdef.domain == ML_DOMAIN:
        raise UnsupportedError(f"unsupported op '{node.op}' of the default domain at node "
                               f"'{node.name}' ({node.op} is an op of {ML_DOMAIN})")


def _check_op(op: str, node_name: str, domain: str, opset: int) -> None:
    from aot.ops import OPS
    _check_domain(Node(op, node_name, (), ()), domain)
    if op not in OPS:
        where = f"domain '{domain}'" if domain not in DEFAULT_DOMAINS else f"ONNX opset {opset}"
        raise UnsupportedError(f"unsupported op '{op}' at node '{node_name}' ({where})")


def _constant_value(node: Node) -> np.ndarray:
    """The value of a Constant node, from whichever value_* attribute it has."""
    a = node.attrs
    forms = {"value": lambda v: v, "value_float": lambda v: np.float32(v),
             "value_floats": lambda v: np.asarray(v, np.float32),
             "value_int": lambda v: np.int64(v),
             "value_ints": lambda v: np.asarray(v, np.int64)}
    for key, make in forms.items():
        if key in a:
            return np.require(make(a[key]), requirements="C")
    raise UnsupportedError(f"Constant node '{node.name}': attribute "
                           f"{sorted(a) or 'none'} is not supported")


def import_onnx(data: bytes, name: str, dim_params: Mapping[str, int] | None = None,
                opts: LoadOptions = LoadOptions()) -> Graph:
    """Import a serialized ONNX model.

    dim_params: values for symbolic input dimensions by name (e.g.
    {"batch_size": 1}); opts: input shapes and bound inputs by input name.
    Without them, a symbolic dimension is a ShapeError.
    """
    model = inline_functions(_parse(data, name), name)
    opset = _opset(model, name)
    g = model.graph
    graph_names = [g.name, *(v.name for v in (*g.input, *g.output, *g.initializer))]
    if not all(isinstance(s, str) for s in graph_names):
        raise ModelError(f"{name}: a graph, input, output or initializer name is not valid "
                         "UTF-8 (corrupt file?)")
    types: dict[str, TensorType] = {}
    taken = _all_names(g)
    b = _Builder(opset, taken)

    for t in g.initializer:
        b.constants[t.name] = _tensor(t, f"initializer '{t.name}'")
    if g.sparse_initializer:
        raise UnsupportedError(f"{name}: sparse initializers are not supported")
    opts.check_names([vi.name for vi in g.input if vi.name not in b.constants])
    inputs = []
    for vi in g.input:
        if vi.name in b.constants:
            continue  # an initializer listed as input (old exporters): a weight
        if vi.name in types:
            raise ModelError(f"{name}: input '{vi.name}' is listed twice")
        types[vi.name] = _value_type(vi, f"input '{vi.name}'", dim_params or {}, opts)
        inputs.append(vi.name)

    _import_nodes(b, g.node, set(types))
    _check_single_writer(inputs, b)
    _check_map_readers(b.nodes)
    types.update({k: type_of(v) for k, v in b.constants.items()})
    for k, v in b.constants.items():
        _dtype_ok(v, k)
    outputs = tuple(o.name for o in g.output)
    if len(set(outputs)) != len(outputs):
        raise ModelError(f"{name}: an output is listed twice ({', '.join(outputs)})")
    graph = Graph(name=g.name or name, inputs=tuple(inputs), outputs=outputs,
                  nodes=tuple(b.nodes), types=types, constants=b.constants)
    from aot.ops.detect import with_counts     # value-sized model outputs get a count
    return with_counts(resolve_control_flow(bind_inputs(graph, opts)))


def _all_names(g) -> set[str]:
    """Every tensor name of a GraphProto and of its subgraphs (fresh names avoid them)."""
    onnx = _onnx()
    names: set = set()
    todo = [g]              # a worklist: nesting depth costs no Python stack
    while todo:
        g = todo.pop()
        names |= {i.name for i in g.input} | {t.name for t in g.initializer}
        for n in g.node:
            names.update(n.input)
            names.update(n.output)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    todo.append(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    todo.extend(a.graphs)
    return {s for s in names if isinstance(s, str)}


def _import_nodes(b: _Builder, proto_nodes, inputs: set[str]) -> None:
    """Normalize `proto_nodes` into b.nodes (Constant nodes into b.constants)."""
    names: set[str] = set()
    for index, pn in enumerate(proto_nodes):
        node_name = pn.name or f"{pn.op_type}_{index}"
        if node_name in names:  # duplicate names happen in exported models
            node_name = f"{node_name}_{index}"
        names.add(node_name)
        control = pn.op_type in CONTROL_OPS and pn.domain in DEFAULT_DOMAINS
        # Refuse unknown ops before decoding attributes (they may carry graphs).
        if pn.op_type not in UPGRADES and pn.op_type != "Constant" and not control:
            _check_op(pn.op_type, node_name, pn.domain, b.opset)
        _check_names(pn, node_name)
        _check_attr_types(pn, node_name, b.opset)
        attrs = {a.name: _graph_attr(b, pn, node_name, a) if _is_graph(a) else
                 _attr(a, f"{pn.op_type} node '{node_name}'") for a in pn.attribute}
        # trailing "" outputs are optional outputs not asked for; others get a name
        outs = tuple(o or b.fresh(f"{node_name}__unused_{k}")
                     for k, o in enumerate(_trim(list(pn.output))))
        if not outs:
            raise ModelError(f"{pn.op_type} node '{node_name}': has no outputs")
        node = Node(pn.op_type, node_name, tuple(pn.input), outs, attrs)
        _check_domain(node, pn.domain)
        if node.op == "Constant":
            if len(node.outputs) != 1 or node.outputs[0] in b.constants or node.outputs[0] in inputs:
                raise ModelError(f"Constant node '{node_name}': needs one output, not a model "
                                 f"input or another constant (got {list(node.outputs)})")
            b.constants[node.outputs[0]] = _constant_value(node)
            continue
        if node.op in UPGRADES:
            try:
                node = UPGRADES[node.op](b, node)
            except IndexError:  # the upgrade looked for an input the node lacks
                raise ModelError(f"{node.op} node '{node_name}': missing inputs "
                                 f"({len(node.inputs)} given)") from None
        if control:
            _check_control(node)
            if node.op == "Scan" and b.opset < 9:   # a batch axis and sequence_lens first
                node = node.with_(attrs={**node.attrs, "batch_axis": True})
        else:
            _check_op(node.op, node_name, pn.domain, b.opset)
        b.nodes.append(node)
    _drop_empty_optionals(b)


def _is_graph(a) -> bool:
    A = _onnx().AttributeProto
    return a.type in (A.GRAPH, A.GRAPHS)


def _graph_attr(b: _Builder, pn, node_name: str, a) -> Body:
    """A subgraph attribute, its nodes normalized like the main graph's."""
    A = _onnx().AttributeProto
    if pn.op_type not in CONTROL_OPS or a.type != A.GRAPH:
        raise UnsupportedError(f"{pn.op_type} node '{node_name}': attribute '{a.name}' of type "
                               f"{A.AttributeType.Name(a.type)} is not supported")
    sub = _Builder(b.opset, b.taken)
    for t in a.g.initializer:
        sub.constants[t.name] = _tensor(t, f"initializer '{t.name}' of {pn.op_type} node "
                                        f"'{node_name}'")
        _dtype_ok(sub.constants[t.name], t.name)
    if a.g.sparse_initializer:
        raise UnsupportedError(f"{pn.op_type} node '{node_name}': sparse initializers are "
                               "not supported")
    body_inputs = tuple(i.name for i in a.g.input)
    _import_nodes(sub, a.g.node, set(body_inputs))
    for k, v in sub.constants.items():
        _dtype_ok(v, k)
    return Body(a.g.name or f"{node_name}.{a.name}", body_inputs,
                tuple(o.name for o in a.g.output), tuple(sub.nodes), dict(sub.constants))


def _check_control(node: Node) -> None:
    needs = {"If": ("then_branch", "else_branch"), "Loop": ("body",), "Scan": ("body",)}
    missing = [k for k in needs[node.op] if not isinstance(node.attrs.get(k), Body)]
    if missing:
        raise ModelError(f"{node.op} node '{node.name}': missing the graph attribute "
                         f"'{missing[0]}'")
    if node.op == "If" and (len(node.inputs) != 1 or not node.inputs[0]):
        raise ModelError(f"If node '{node.name}': takes one input, the condition")
    if node.op == "Loop" and not all(node.inputs[2:]):
        raise ModelError(f"Loop node '{node.name}': a loop-carried input is absent ('')")


def _check_map_readers(nodes) -> None:
    """ZipMap's sequence of maps stands as the probability tensor it zips,
    which is what the model hands out when the maps are its output; a node
    that reads the maps needs them, and aot has no maps."""
    maps = {n.outputs[0]: n.name for n in nodes if n.op == "ZipMap"}
    for n in nodes:
        for t in n.inputs:
            if t in maps:
                raise UnsupportedError(f"{n.op} node '{n.name}': reads the sequence of maps of "
                                       f"ZipMap node '{maps[t]}' (aot has no maps: ZipMap's "
                                       "output is supported as a model output only)")


def _check_names(pn, node_name: str) -> None:
    # protobuf hands back bytes for a string field that is not valid UTF-8
    names = [pn.name, pn.op_type, *pn.input, *pn.output]
    if not all(isinstance(s, str) for s in names):
        raise ModelError(f"node '{node_name}': a name is not valid UTF-8 (corrupt file?)")


def _check_attr_types(pn, node_name: str, opset: int) -> None:
    """Attributes of the type the op's schema declares (a corrupt type code
    would otherwise reach the compiler as a wrong Python type)."""
    onnx = _onnx()
    try:
        schema = onnx.defs.get_schema(pn.op_type, opset, "")
    except Exception:  # noqa: BLE001 - unknown op or opset: checked elsewhere
        return
    for a in pn.attribute:
        want = schema.attributes.get(a.name)
        if want is not None and int(want.type.value) != int(a.type):
            raise ModelError(f"{pn.op_type} node '{node_name}': attribute '{a.name}' has type "
                             f"{a.type}, the op defines {want.type.name}")


def _check_single_writer(inputs: list[str], b: _Builder) -> None:
    """Each tensor has one source: a model input, a constant or one node output."""
    written = set(inputs) | set(b.constants)
    for n in b.nodes:
        for o in n.outputs:
            if o in written:
                raise ModelError(f"{n.op} node '{n.name}': writes tensor '{o}', which is a "
                                 "model input, a constant or another node's output")
            written.add(o)


# Optional inputs where an empty tensor means "absent" (exporters write empty
# initializers for Resize's unused roi/scales, Reduce's default axes, ...).
EMPTY_IS_ABSENT = {
    "Resize": (1, 2, 3), "Pad": (2, 3), "Clip": (1, 2),
    **{op: (1,) for op in ("ReduceMax", "ReduceMin", "ReduceMean", "ReduceSum",
                           "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
                           "ReduceLogSumExp", "ReduceSumSquare")},
}


def _drop_empty_optionals(b: _Builder) -> None:
    """Replace empty constant optional inputs by "" (absent); aot has no empty tensors."""
    def empty(name: str) -> bool:
        return bool(name) and name in b.constants and b.constants[name].size == 0

    for i, n in enumerate(b.nodes):
        positions = EMPTY_IS_ABSENT.get(n.op, ())
        if any(empty(t) for k, t in enumerate(n.inputs) if k in positions):
            inputs = ["" if k in positions and empty(t) else t for k, t in enumerate(n.inputs)]
            b.nodes[i] = n.with_(inputs=_trim(inputs))
    used = {t for n in b.nodes for t in n.inputs}
    for name in [k for k, v in b.constants.items() if v.size == 0 and k not in used]:
        del b.constants[name]


def _dtype_ok(v: np.ndarray, name: str) -> None:
    if v.dtype.name not in DTYPES:
        raise UnsupportedError(f"constant '{name}': data type {v.dtype.name} is not supported")
