"""The flags a package's own build files (CMakeLists.txt, Makefile) compile
it with, so that a firmware project gets the speed `aot bench` measures.

aot builds a package with its target's cflags (targets/*.toml) and
toolchain.PACKAGE_CFLAGS. A firmware project built the package with its own
flags instead: without a build type CMake passes no -O at all, and kws int8
ran 138x slower than aot's library. The build files now carry the target's
flags themselves, split by what a firmware may do with them:

- `arch`: the instruction set and ABI (-mcpu, -march, -mfpu, -mfloat-abi,
  -mthumb, -mabi). The package needs them for its speed; the firmware must
  be built for a compatible ABI (the same -mfloat-abi and FPU on Arm), or
  the link fails or, worse, passes floats in the wrong registers.
- `optimize`: code generation that stays inside the package (-O2,
  -ffp-contract=fast, -ffunction-sections, ...): always the package's own.
- `driver`: clang's choice of target and of its GCC installation and C
  library (--target, --sysroot, --gcc-toolchain, -B, -L; GCC's --specs
  naming its C library, picolibc). A firmware
  toolchain chooses its target itself (a CMake toolchain file, a cross gcc):
  only the Makefile's default compiler (the target's own, clang) gets them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aot.targets import Target

_DRIVER_PREFIXES = ("--target", "-target", "--gcc-toolchain", "--sysroot", "-B", "-L", "--specs",
                    "-Wno-unused-command-line-argument")


@dataclass(frozen=True)
class BuildFlags:
    arch: tuple[str, ...]
    optimize: tuple[str, ...]
    driver: tuple[str, ...]


def build_flags(target: Target) -> BuildFlags:
    """The target's cflags, split into arch / optimize / driver (each in the
    target's order)."""
    return split_flags(tuple(target.cflags))


def split_flags(cflags: tuple[str, ...]) -> BuildFlags:
    """cflags (a target's, or metadata.json's record of them) split into
    arch / optimize / driver, each in their order."""
    arch, optimize, driver = [], [], []
    for i, flag in enumerate(cflags):
        if flag.startswith(_DRIVER_PREFIXES):
            driver.append(flag)
        elif flag.startswith("-m") or cflags[i - 1:i] == ("-mllvm",):
            arch.append(flag)       # -mllvm's argument stays with it (rv64gcv's VLEN minimum)
        else:
            optimize.append(flag)
    return BuildFlags(tuple(arch), tuple(optimize), tuple(driver))


def template_context(target: Target) -> dict[str, Any]:
    """What CMakeLists.txt.j2 and Makefile.j2 print about flags."""
    flags = build_flags(target)
    return {"arch_flags": list(flags.arch), "optimize_flags": list(flags.optimize),
            "driver_flags": list(flags.driver)}
