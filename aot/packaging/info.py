"""What aot.package returns: the package directory and what a caller needs
to feed it, read from its metadata.json.

    info = aot.package("kws.tflite", board="host", out_dir="build/kws")
    info.inputs[0]      # TensorInfo(name='input_1', shape=(1, 49, 10, 1), dtype='int8',
                        #            quantization=(0.5847029089927673, 83))
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

# repr lists this many inputs (and outputs), then how many there are in all
SHOWN_TENSORS = 4


@dataclass(frozen=True)
class TensorInfo:
    """An input or output of a package, as onnxruntime's get_inputs() and
    TFLite's get_input_details() describe theirs: its name, static shape,
    numpy dtype name and, for a quantized tensor, (scale, zero_point) (real
    value = scale * (q - zero_point); a tensor quantized per channel gives a
    tuple of each, along metadata.json's quant.axis), else None."""
    name: str
    shape: tuple[int, ...]
    dtype: str
    quantization: tuple[Any, Any] | None = None

    @classmethod
    def from_metadata(cls, row: Mapping[str, Any]) -> "TensorInfo":
        """From a metadata.json "inputs" or "outputs" row."""
        quant = row.get("quant")
        if quant is None:
            q = None
        elif len(quant["scale"]) == 1:
            q = (float(quant["scale"][0]), int(quant["zero_point"][0]))
        else:
            q = (tuple(map(float, quant["scale"])), tuple(map(int, quant["zero_point"])))
        return cls(row["name"], tuple(int(d) for d in row["shape"]), row["dtype"], q)

    def __str__(self) -> str:
        """name:[d0,d1,...]:dtype"""
        return f"{self.name}:[{','.join(map(str, self.shape))}]:{self.dtype}"


@dataclass(frozen=True, repr=False)
class PackageInfo:
    """A package directory (the object stands for it: os.fspath(info), and
    dev.run(info, x)) and its figures: the C name, the board and codegen it
    was built for, the arena (RAM) and its lower bound, the packed weights
    (params_bytes, flash), the compile time and the whole metadata.json."""
    path: Path
    name: str
    board: str
    codegen: str
    arena_bytes: int
    arena_lower_bound_bytes: int
    params_bytes: int
    compile_seconds: float
    metadata: dict

    def __fspath__(self) -> str:
        """A PackageInfo stands for its directory: dev.run(aot.package(...), x)."""
        return str(self.path)

    @property
    def inputs(self) -> tuple[TensorInfo, ...]:
        """The inputs the entry point takes, in its order."""
        return tuple(TensorInfo.from_metadata(r) for r in self.metadata["inputs"])

    @property
    def outputs(self) -> tuple[TensorInfo, ...]:
        """The outputs the entry point writes, in its order."""
        return tuple(TensorInfo.from_metadata(r) for r in self.metadata["outputs"])

    @property
    def entry_points(self) -> tuple[str, ...]:
        """The C functions that run the model (the header declares them, with
        <name>_reset and <name>_failed_check; threads add _init, _deinit)."""
        run = f"{self.name}_run"
        return (run, f"{run}_with_arena",
                *((f"{run}_with_pools",) if "memory_pools" in self.metadata else ()))

    def summary(self) -> dict[str, Any]:
        return {"package": str(self.path), "arena_bytes": self.arena_bytes,
                "arena_lower_bound_bytes": self.arena_lower_bound_bytes,
                "params_bytes": self.params_bytes,
                "compile_seconds": round(self.compile_seconds, 3)}

    def __repr__(self) -> str:
        return (f"<PackageInfo {self.name} at {self.path}: board {self.board}, codegen "
                f"{self.codegen}, entry {', '.join(self.entry_points)}; arena "
                f"{self.arena_bytes} bytes, weights {self.params_bytes} bytes\n"
                f"  inputs  {_listing(self.inputs)}\n"
                f"  outputs {_listing(self.outputs)}>")


def _listing(tensors: tuple[TensorInfo, ...]) -> str:
    shown = " ".join(map(str, tensors[:SHOWN_TENSORS]))
    more = len(tensors) - SHOWN_TENSORS
    return f"{shown} ... ({len(tensors)} in all)" if more > 0 else shown or "(none)"
