"""The call vocabulary lowering and code generation share: the libm
functions, runtime helpers and byte packs (calls.py), the dot products
several families implement (dots.py), and each instruction family's calls
(arm_dsp.py, arm_mve.py, neon.py, x86.py) with their C and LLVM spellings
and legalization rows (instruction.py). Imports the IR and the floors below
it, never aot.lower or aot.codegen."""
