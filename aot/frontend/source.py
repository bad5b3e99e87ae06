"""What a model can be given as: a file path, an `onnx.ModelProto`, or the
bytes of an ONNX or TFLite model (bytes, bytearray, memoryview).

A model in memory has no file name: metadata.json records it as the file
"<memory>" with the sha256 of its bytes, so packaging the same model twice
gives the same bytes, wherever it came from.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from aot.errors import InputError
from aot.ir.graph import Graph

MEMORY = "<memory>"
# A TFLite flatbuffer carries its file identifier at bytes 4..8.
TFLITE_IDENTIFIER = b"TFL3"
FORMATS = ("onnx", "tflite")


@dataclass(frozen=True)
class ModelBytes:
    """A serialized model held in memory; `format` is "onnx" or "tflite"."""
    data: bytes
    format: str

    # What a file would have: name, in messages and reports; stem, the
    # graph's name where the model has none (a TFLite model).
    name = MEMORY
    stem = "model"

    def source(self) -> dict[str, str]:
        """metadata.json "source", as packaging.model_source gives a file's."""
        return {"file": MEMORY, "sha256": hashlib.sha256(self.data).hexdigest()}

    def __str__(self) -> str:
        return MEMORY


def from_bytes(data: bytes) -> ModelBytes:
    """TFLite by its identifier, else ONNX (the importer says so when the
    bytes do not parse as ONNX either)."""
    return ModelBytes(data, "tflite" if data[4:8] == TFLITE_IDENTIFIER else "onnx")


def _is_model_proto(model) -> bool:
    # Duck-typed: importing onnx to test isinstance costs every TFLite user
    # its import.
    return type(model).__name__ == "ModelProto" and hasattr(model, "SerializeToString")


def as_model(model, graphs: bool = False) -> Path | ModelBytes | Graph:
    """A path (anything os.PathLike, e.g. a PackageInfo), the bytes of an
    in-memory model, or (graphs=True) a Graph as it is; anything else is an
    InputError naming the type received."""
    if isinstance(model, (Path, ModelBytes)) or (graphs and isinstance(model, Graph)):
        return model
    if isinstance(model, (str, os.PathLike)):
        return Path(model)
    if isinstance(model, (bytes, bytearray, memoryview)):
        return from_bytes(bytes(model))
    if _is_model_proto(model):
        return ModelBytes(model.SerializeToString(deterministic=True), "onnx")
    kind = type(model)
    got = kind.__qualname__ if kind.__module__ == "builtins" else \
        f"{kind.__module__}.{kind.__qualname__}"
    raise InputError(f"a model is a file path, an onnx.ModelProto or the bytes of an ONNX or "
                     f"TFLite model{', or a Graph' if graphs else ''}; got {got}")


def is_package_dir(model) -> bool:
    """Whether `model` (as_model's) names a package directory."""
    return isinstance(model, Path) and model.is_dir()


def file_path(model) -> Path | None:
    """The model's file (as_model's), None for one in memory or a Graph."""
    return model if isinstance(model, Path) else None


def as_file(model: Path | ModelBytes, stack: contextlib.ExitStack) -> Path:
    """A file holding the model, for what reads files (the reference
    runtimes): its path, or its bytes written into a temporary directory
    that `stack` removes."""
    if isinstance(model, Path):
        return model
    path = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="aot-"))) / \
        f"{model.stem}.{model.format}"
    path.write_bytes(model.data)
    return path
