"""Code generation: PrimFuncs -> C source (c.py) or an object file (llvm.py).

Both backends define the same symbols with the same C ABI:
`void <prefix>_<name>(T *restrict param, ...)`, one pointer per PrimFunc
parameter in order (const for inputs and params).
"""
from aot.codegen.c import CSource, c_type, emit_c
from aot.codegen.names import c_comment, c_identifier, c_string, symbol_names

__all__ = ["CSource", "c_comment", "c_identifier", "c_string", "c_type", "emit_c",
           "symbol_names"]
