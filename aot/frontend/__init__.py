"""Model importers: a file in, a typed Graph out."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from aot.errors import ModelError, UnsupportedError
from aot.ir.graph import Graph


def load(path: str | Path, input_shapes: Mapping[str, Any] | None = None,
         bind: Mapping[str, Any] | None = None, *, options=None) -> Graph:
    """Import an ONNX or TFLite model and infer its types.

    input_shapes: {input name: dims ("1x3x224x224" or a sequence)} for inputs
    with symbolic or unknown dimensions. bind: {input name: value (a number,
    a list, text "16000" or "1,2", a numpy array, "FILE.npy")}: the input
    becomes a constant (aot.frontend.shapes). options: both, parsed
    already (a LoadOptions), instead of the two keywords.
    """
    from aot.frontend.shapes import LoadOptions, bind_inputs, check_static
    from aot.passes.infer import infer_types

    opts = options if options is not None else LoadOptions.of(input_shapes, bind)

    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such model file")
    data = path.read_bytes()
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        from aot.frontend.onnx import import_onnx
        graph = import_onnx(data, name=path.stem, opts=opts)
    elif suffix == ".tflite":
        from aot.frontend.tflite import import_tflite
        graph = import_tflite(data, name=path.stem)
        opts.check_names(graph.inputs)
        check_static(graph, opts)
        graph = bind_inputs(graph, opts)
    else:
        raise UnsupportedError(f"{path}: unknown model format '{suffix}' "
                               "(aot reads .onnx and .tflite)")
    return infer_types(graph)
