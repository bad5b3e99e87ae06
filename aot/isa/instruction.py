"""One row of the legalization table: which generic call a target
instruction implements, and on which targets. Each instruction family
(arm_dsp.py, arm_mve.py, neon.py, rvv.py, x86.py; calls.py for the byte
reinterpretations every little-endian target has) holds its rows beside its
calls; aot/lower/tir_passes/legalize.py concatenates them into the table,
where the first row that fits a call wins."""
from __future__ import annotations

from dataclasses import dataclass

from aot.ir.tir import Call
from aot.targets import Target


@dataclass(frozen=True)
class Instruction:
    """`generic` calls become `name` on targets of `archs` (empty: any) with
    the ISA features `features[result lanes]` (no entry: not on that many
    lanes), only on little-endian targets if `little_endian`, and only on
    results of the scalar type `only` if given (pmuldq's lanes are int32,
    vfmadd's float32)."""
    generic: str
    name: str
    archs: tuple[str, ...] = ()
    features: tuple[tuple[int, tuple[str, ...]], ...] | None = None
    little_endian: bool = False
    only: str = ""

    def fits(self, call: Call, target: Target) -> bool:
        if self.archs and target.arch not in self.archs:
            return False
        if self.little_endian and not target.little_endian:
            return False
        if self.only and call.dtype.scalar != self.only:
            return False
        if self.features is None:
            return True
        needed = dict(self.features).get(call.dtype.lanes)
        return needed is not None and target.has(*needed)


__all__ = ["Instruction"]
