"""Lowering rules of aot/ops/quant/, one module per family: TFLite int8 (conv,
fc, pool, rowwise, elementwise), int16, lookup tables, ONNX QLinear."""
