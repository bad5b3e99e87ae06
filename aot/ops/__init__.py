"""Operator definitions. Importing this package fills the OPS table.

Float ops use ONNX's names and semantics (latest opset; the ONNX importer
upgrades older forms), plus a `layout` attribute on spatial ops for
channels-last. Ops with TFLite's integer semantics are named `tfl.*`.
See docs/ops.md for the conventions.
"""
from aot.ops.registry import (OPS, Call, Layout, OpDef, Pattern, Sig, Sink, node_macs, op_def,
                              register)

# Each family module registers its ops on import.
from aot.ops import (
    attention,
    detect,
    einsum,
    elementwise,
    fused,
    index,
    lstm,
    mediapipe,
    ml,
    movement,
    nn,
    reduce,
    rnn,
    rows,
    sampling,
    signal,
    tensor,
    trees,
)  # noqa: F401,E402
from aot.ops.quant import onnx_quant, tflite_int8, tflite_int16, tflite_lut

__all__ = ["OPS", "Call", "Layout", "OpDef", "Pattern", "Sig", "Sink", "node_macs", "op_def",
           "register"]
