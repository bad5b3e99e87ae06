"""GCC installations made in a temporary directory, where clang looks first.

clang searches for a GCC installation beside its own binary
(<bin>/../lib/gcc*/<triple>/<version>) before /usr and takes the highest
version there, so a link to clang in <root>/bin sees what is made under
<root> and nothing of /usr. Nothing is installed on the machine.

    clang = clang_in(root)
    junk_installation(root, "riscv64-linux-gnu")    # version 99, files that cannot link
    debian_installation(root, "riscv64-linux-gnu")  # the machine's own, by symlinks
"""
from __future__ import annotations

import shutil
from pathlib import Path

DECOY_VERSION = "99"
JUNK = "a decoy GCC installation's file, not an object\n"
# What a GCC installation gives a static link, and its C library.
GCC_FILES = ("crtbegin.o", "crtbeginT.o", "crtend.o", "crti.o", "crtn.o", "libgcc.a",
             "libgcc_eh.a")
LIBC_FILES = ("crt1.o", "libc.a", "libm.a")
HEADERS = ("stdio.h", "stdlib.h", "string.h", "math.h", "stdint.h")


def clang_in(root: Path) -> Path:
    """<root>/bin/clang, a link to this machine's clang."""
    clang = root / "bin" / "clang"
    clang.parent.mkdir(parents=True, exist_ok=True)
    clang.symlink_to(shutil.which("clang"))
    return clang


def junk_installation(root: Path, triple: str, version: str = DECOY_VERSION,
                      libc: tuple[str, ...] = LIBC_FILES) -> Path:
    """A GCC installation for `triple` whose every file fails a build that
    uses it: its objects and archives are text, its headers #error; `libc`
    the C library files it has (a bare-metal GCC has no crt1.o)."""
    gcc = root / "lib" / "gcc" / triple / version
    gcc.mkdir(parents=True)
    for name in GCC_FILES:
        (gcc / name).write_text(JUNK)
    lib, include = root / triple / "lib", root / triple / "include"
    lib.mkdir(parents=True, exist_ok=True)
    include.mkdir(parents=True, exist_ok=True)
    for name in libc:
        (lib / name).write_text(JUNK)
    for name in HEADERS:
        (include / name).write_text(f'#error "{name} of the decoy GCC installation"\n')
    return gcc


def debian_installation(root: Path, triple: str, version: str = "12") -> Path:
    """Debian's cross GCC installation and glibc for `triple`, as
    <root>/lib/gcc-cross/<triple>/<version> and <root>/<triple> (symlinks)."""
    gcc = root / "lib" / "gcc-cross" / triple / version
    gcc.parent.mkdir(parents=True)
    gcc.symlink_to(Path("/usr/lib/gcc-cross") / triple / version)
    (root / triple).symlink_to(Path("/usr") / triple)
    return gcc
