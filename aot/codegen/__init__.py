"""Code generation: PrimFuncs -> C source (c.py) or an object file (llvm.py).

Both backends define the same symbols with the same C ABI:
`void <prefix>_<name>(T *restrict param, ...)`, one pointer per PrimFunc
parameter in order (const for inputs and params); `symbol_names` gives them.
Calls may name libm functions or the runtime helpers of intrinsics.py.
"""
from aot.codegen.c import CSource, c_declarations, c_type, emit_c
from aot.isa.calls import HELPERS
from aot.codegen.llvm import emit_llvm_ir, emit_object, normalized_triple
from aot.codegen.names import c_comment, c_identifier, c_string, symbol_names

__all__ = ["CSource", "HELPERS", "c_comment", "c_declarations", "c_identifier", "c_string",
           "c_type", "emit_c", "emit_llvm_ir", "emit_object", "normalized_triple", "symbol_names"]
