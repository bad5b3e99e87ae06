"""The quantized ops of the op table: TFLite int8 and int16, the lookup-table
ops, ONNX's QLinear ops, and the fixed-point arithmetic they share
(qmath.py). Same floor as aot.ops."""
