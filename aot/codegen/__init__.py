"""Code generation: PrimFuncs -> C source (c.py) or an object file (llvm.py).

Both backends define the same symbols with the same C ABI:
`void <prefix>_<name>(T *restrict param, ...)`, one pointer per PrimFunc
parameter in order (const for inputs and params); `symbol_names` gives them.
Calls may name libm functions or the runtime helpers of intrinsics.py.
"""
from aot.codegen.c import CSource, c_declarations, c_type, emit_c
from aot.isa.calls import HELPERS
from aot.codegen.names import c_comment, c_identifier, c_string, symbol_names

# The LLVM backend loads llvmlite (a tenth of a second): imported on first use,
# so that a C package never pays for it.
_LLVM = ("emit_llvm_ir", "emit_object", "normalized_triple")


def __getattr__(name: str):
    if name in _LLVM:
        from aot.codegen import llvm
        return getattr(llvm, name)
    raise AttributeError(f"module 'aot.codegen' has no attribute '{name}'")

__all__ = ["CSource", "HELPERS", "c_comment", "c_declarations", "c_identifier", "c_string",
           "c_type", "emit_c", "emit_llvm_ir", "emit_object", "normalized_triple", "symbol_names"]
