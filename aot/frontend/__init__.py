"""Model importers: a file in, a typed Graph out."""
from __future__ import annotations

from pathlib import Path

from aot.errors import ModelError, UnsupportedError
from aot.ir.graph import Graph


def load(path: str | Path) -> Graph:
    """Import an ONNX or TFLite model and infer its types."""
    from aot.passes.infer import infer_types

    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such model file")
    data = path.read_bytes()
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        from aot.frontend.onnx import import_onnx
        graph = import_onnx(data, name=path.stem)
    elif suffix == ".tflite":
        from aot.frontend.tflite import import_tflite
        graph = import_tflite(data, name=path.stem)
    else:
        raise UnsupportedError(f"{path}: unknown model format '{suffix}' "
                               "(aot reads .onnx and .tflite)")
    return infer_types(graph)
