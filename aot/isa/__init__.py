"""The call vocabulary lowering and code generation share: each instruction
family's calls (calls.py: the runtime helpers and generic vector calls;
arm_dsp.py, arm_mve.py), with their C and LLVM spellings. Imports the IR and
the floors below it, never aot.lower or aot.codegen."""
