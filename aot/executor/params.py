"""Linked params: the constant arrays the kernels read, as const data.

Graph constants bound to kernels (Arg kind "const") and arrays the rules made
(Arg kind "param": repacked weights, tables) become aligned `const` arrays in
section `.rodata.aot`, so a linker script can place them in flash. Identical
arrays (same dtype, shape and bytes) are stored once. Each array is padded
with zeros to a multiple of the alignment, so the section holds exactly
`total_bytes` whatever order the compiler lays the arrays out in.

Small arrays are C initializers (floats as literals that read back exactly). When the
weights are large they go into one binary blob, `<name>_params.bin`, pulled
into an object by an assembler stub with `.incbin`: megabytes of C text
would compile slowly and read as noise. Targets are little-endian.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from aot.codegen.c import C_TYPES, c_float, c_int
from aot.codegen.names import c_comment, c_identifier
from aot.ir.graph import Graph
from aot.lower.driver import Kernel

SECTION = ".rodata.aot"
BLOB_TOTAL_BYTES = 64 * 1024    # above this total, large arrays go into the blob
BLOB_MIN_BYTES = 256            # arrays this small stay readable C even then



@dataclass(frozen=True)
class LinkedParam:
    symbol: str
    array: np.ndarray              # C-contiguous, little-endian
    sources: tuple[str, ...]       # the constants / rule params it stands for
    in_blob: bool
    blob_offset: int = 0

    @property
    def ctype(self) -> str:
        return C_TYPES[self.array.dtype.name]

    @property
    def nbytes(self) -> int:
        return self.array.nbytes


@dataclass(frozen=True)
class LinkedParams:
    arrays: tuple[LinkedParam, ...]
    binding: dict[tuple[int, int], str]     # (step, kernel param index) -> symbol
    align: int

    def padded(self, nbytes: int) -> int:
        return -(-nbytes // self.align) * self.align

    def padded_count(self, p: LinkedParam) -> int:
        """Elements declared for `p`: its data plus zero padding to the alignment."""
        return self.padded(max(p.nbytes, 1)) // p.array.dtype.itemsize

    @property
    def total_bytes(self) -> int:
        """Bytes of section .rodata.aot."""
        return sum(self.padded_count(p) * p.array.dtype.itemsize for p in self.arrays)

    @property
    def data_bytes(self) -> int:
        return sum(p.nbytes for p in self.arrays)

    @property
    def has_blob(self) -> bool:
        return any(p.in_blob for p in self.arrays)

    def blob(self) -> bytes:
        parts = []
        for p in self.arrays:
            if p.in_blob:
                data = p.array.tobytes()
                parts.append(data + bytes(self.padded_count(p) * p.array.dtype.itemsize
                                          - len(data)))
        return b"".join(parts)


def _key(array: np.ndarray) -> tuple:
    return (array.dtype.name, array.shape, hashlib.sha256(array.tobytes()).hexdigest())


def _little_endian(array: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(array)
    if a.dtype == np.bool_:
        a = a.astype(np.uint8)
    return a.astype(a.dtype.newbyteorder("<"), copy=False)


def link_params(graph: Graph, kernels: Sequence[Kernel], prefix: str, align: int = 16,
                taken: set[str] | None = None,
                extra: Mapping[str, np.ndarray] | None = None) -> LinkedParams:
    """One const array per distinct constant the kernels read, in first-use
    order, then the `extra` arrays (variables' initial values), bound by name."""
    taken = set() if taken is None else taken
    found: dict[tuple, list] = {}           # key -> [array, sources, symbol]
    binding: dict = {}

    def add(array: np.ndarray, hint: str, source: str) -> str:
        array = _little_endian(array)
        key = _key(array)
        if key not in found:
            found[key] = [array, [], c_identifier(f"{prefix}_w{len(found)}_{hint}", taken)]
        if source not in found[key][1]:
            found[key][1].append(source)
        return found[key][2]

    for step, k in enumerate(kernels):
        for i, arg in enumerate(k.args):
            if arg.kind == "const":
                binding[(step, i)] = add(graph.constants[arg.name], arg.name, arg.name)
            elif arg.kind == "param":
                binding[(step, i)] = add(arg.array, f"{k.func.name}_{arg.name}",
                                         f"{k.func.name}.{arg.name}")
    for name, array in (extra or {}).items():
        binding[name] = add(array, f"init_{name}", f"initial value of {name}")
    total = sum(a.nbytes for a, _, _ in found.values())
    arrays, offset = [], 0
    for array, sources, symbol in found.values():
        in_blob = total > BLOB_TOTAL_BYTES and array.nbytes >= BLOB_MIN_BYTES
        arrays.append(LinkedParam(symbol, array, tuple(sources), in_blob,
                                  offset if in_blob else 0))
        if in_blob:
            offset += -(-max(array.nbytes, 1) // align) * align  # == padded_count bytes
    return LinkedParams(tuple(arrays), binding, align)


# ------------------------------------------------------------------ C literals

def c_literals(array: np.ndarray) -> list[str]:
    """Exact C literals (floats read back bit for bit), one per element."""
    scalar = array.dtype.name
    if scalar == "float16":             # uint16_t bits in C (aot/codegen/c.py)
        return [f"0x{v:04x}u" for v in array.view(np.uint16).reshape(-1).tolist()]
    if array.dtype.kind == "f":
        return [c_float(v, scalar) for v in array.reshape(-1).tolist()]
    return [c_int(v, scalar) for v in array.reshape(-1).tolist()]


def c_initializer(array: np.ndarray, per_line: int = 8, indent: str = "    ") -> str:
    lits = c_literals(array)
    if not lits:
        return indent + "0"
    lines = [", ".join(lits[i:i + per_line]) for i in range(0, len(lits), per_line)]
    return ",\n".join(indent + line for line in lines)


def describe(p: LinkedParam) -> str:
    shape = "x".join(str(d) for d in p.array.shape) or "scalar"
    return c_comment(f"{p.array.dtype.name}[{shape}]: {', '.join(p.sources)}")
