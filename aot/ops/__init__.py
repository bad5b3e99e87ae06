"""Operator definitions. Importing this package fills the OPS table.

Float ops use ONNX's names and semantics (latest opset; the ONNX importer
upgrades older forms), plus a `layout` attribute on spatial ops for
channels-last. Ops with TFLite's integer semantics are named `tfl.*`.
See docs/ops.md for the conventions.
"""
from aot.ops.registry import OPS, Call, OpDef, Pattern, Sig, node_macs, op_def, register

# Each family module registers its ops on import.
from aot.ops import (  # noqa: F401,E402
    attention, elementwise, fused, index, lstm, nn, onnx_quant, reduce, rnn, tensor, tflite_int8,
    tflite_int16, tflite_lut,
)
from aot.ops import movement  # noqa: F401,E402
from aot.ops import rows  # noqa: F401,E402
from aot.ops import sampling  # noqa: F401,E402
from aot.ops import detect, signal  # noqa: F401,E402
from aot.ops import einsum  # noqa: F401,E402

__all__ = ["OPS", "Call", "OpDef", "Pattern", "Sig", "node_macs", "op_def", "register"]
