"""RISC-V int8 kernels: scalar.py (rv32imc / rv32imac: register tiles of
int32 accumulators, no vectors, no DSP), and the tables that name them,
as cortex_m/'s do: the schedule (aot/lower/schedule/conv.py) answers with a
name, the rule calls what it names here."""
from __future__ import annotations

from aot.lower.kernels.riscv import scalar

# Called as aot/lower/kernels/cortex_m/'s CONV kernels are.
CONV = {
    "rv32_pointwise": scalar.pointwise,
    "rv32_depthwise": scalar.depthwise,
    "rv32_dense": scalar.dense,
    "rv32_rows": scalar.window_rows,
}
# Called as its FC kernels are.
FC = {
    "rv32_fc": scalar.fully_connected,
}
