"""What the TFLite schema's enums mean to aot, shared by the importer and
the variable resolution (vars.py), which both read tensor types."""
from __future__ import annotations

# TFLite TensorType enum -> numpy dtype name (None: not representable here).
DTYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 5: None,
          6: "bool", 7: "int16", 8: None, 9: "int8", 10: "float64", 11: None,
          12: "uint64", 13: None, 14: None, 15: "uint32", 16: "uint16", 17: None}
DTYPE_NAMES = {5: "STRING", 8: "COMPLEX64", 11: "COMPLEX128", 13: "RESOURCE",
               14: "VARIANT", 17: "INT4"}
