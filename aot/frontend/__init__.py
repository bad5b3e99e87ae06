"""Model importers: a file in, a typed Graph out."""
from __future__ import annotations

from typing import Any, Mapping

from aot.errors import ModelError, UnsupportedError
from aot.ir.graph import Graph


def load(model, input_shapes: Mapping[str, Any] | None = None,
         bind: Mapping[str, Any] | None = None, *, options=None) -> Graph:
    """Import an ONNX or TFLite model and infer its types.

    model: a .onnx or .tflite path, an onnx.ModelProto, or the bytes of
    either (bytes, bytearray, memoryview: TFLite when "TFL3" is at offset 4,
    else ONNX). input_shapes: {input name: dims ("1x3x224x224" or a
    sequence)} for inputs with symbolic or unknown dimensions. bind: {input
    name: value (a number, a list, text "16000" or "1,2", a numpy array,
    "FILE.npy")}: the input becomes a constant (aot.frontend.shapes).
    options: both, parsed already (a LoadOptions), instead of the two
    keywords.
    """
    from aot.frontend.shapes import LoadOptions, bind_inputs, check_static
    from aot.passes.infer import infer_types

    opts = options if options is not None else LoadOptions.of(input_shapes, bind)
    data, kind, name = _read(model)
    if kind == "onnx":
        from aot.frontend.onnx import import_onnx
        try:
            graph = import_onnx(data, name=name, opts=opts)
        except ModelError as e:
            if not isinstance(model, (bytes, bytearray, memoryview)):
                raise
            raise ModelError(f"model bytes without TFLite's identifier (TFL3 at offset 4) are "
                             f"read as ONNX: {e}") from None
    else:
        from aot.frontend.tflite.importer import import_tflite
        graph = import_tflite(data, name=name, input_shapes=opts.input_shapes)
        opts.check_names(graph.inputs)
        check_static(graph, opts)
        graph = bind_inputs(graph, opts)
    return infer_types(graph)


def _read(model) -> tuple[bytes, str, str]:
    """(serialized model, "onnx" or "tflite", its name) of load's `model`."""
    from aot.frontend.source import ModelBytes, as_model

    model = as_model(model)
    if isinstance(model, ModelBytes):
        return model.data, model.format, model.stem
    if not model.is_file():
        raise ModelError(f"{model}: no such model file")
    suffix = model.suffix.lower()
    if suffix not in (".onnx", ".tflite"):
        raise UnsupportedError(f"{model}: unknown model format '{suffix}' "
                               "(aot reads .onnx and .tflite)")
    return model.read_bytes(), suffix[1:], model.stem
