"""Naming a clang target's C library and GCC installation, so that no other
installed toolchain is used in their place.

clang builds for a Linux triple with the files of a GCC installation
(crtbegin.o, libgcc) and a C library (crt1.o, libc.a, headers). Left to
itself it picks the installation among every one it can see: first beside
its own binary, then under /usr, the highest version winning, and a
bare-metal GCC counts for a Linux triple (riscv64-unknown-elf for
riscv64-linux-gnu). With gcc-riscv64-unknown-elf installed (12.2.0, newer
than Debian's cross GCC "12"), riscv64 compiles took the build machine's
/usr/include and failed, and links lacked crt1.o, libc.a and libm.a.

clang 14 has no --gcc-install-dir. A target description names instead
`gcc_install_dir` (the GCC installation) and `sysroot` (its C library;
empty on the build machine itself) and gets:

- `--sysroot=S`: headers from S/include, crt1.o and libc.a from S/lib, and
  nothing from the build machine's /usr/include or /usr/lib;
- `--gcc-toolchain=G`: clang searches for GCC installations only under G,
  which holds none, so its search finds nothing to prefer;
- `-B G` and `-L G`: crtbegin.o, crtend.o and libgcc from G for links, in
  the same flags as the compile (a compile-only command ignores them).

The link uses the same files as clang's own choice did before any other
toolchain was installed (`clang -###` lists them).
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Sequence

from aot.errors import AotError


@dataclass(frozen=True)
class GccPin:
    sysroot: str              # "": the build machine's own C library
    gcc_install_dir: str      # "": no pin (a GCC driver finds its own files)

    def __bool__(self) -> bool:
        return bool(self.gcc_install_dir)

    @property
    def cflags(self) -> tuple[str, ...]:
        """The whole pin, for compiles and links alike: many callers compile
        and link in one command with the target's cflags (shared objects in
        tests, the instruction counter's plugin), so the files a link takes
        (-B: crtbegin.o, crtend.o; -L: libgcc) are named here too, and the
        one warning a compile-only command gives about -L is not asked for."""
        if not self:
            return ()
        return (*((f"--sysroot={self.sysroot}",) if self.sysroot else ()),
                f"--gcc-toolchain={self.gcc_install_dir}", f"-B{self.gcc_install_dir}",
                f"-L{self.gcc_install_dir}", "-Wno-unused-command-line-argument")

    @property
    def ldflags(self) -> tuple[str, ...]:
        return ()

    def unpinned(self, flags: tuple[str, ...]) -> tuple[str, ...]:
        """`flags` without the pin's own: what clang chooses by itself."""
        pinned = {*self.cflags, *self.ldflags}
        return tuple(f for f in flags if f not in pinned)


# Flags that choose a GCC installation or C library: a target that pins
# them must not also set them in its cflags or ldflags.
CHOOSING = ("--sysroot", "--gcc-toolchain", "--gcc-install-dir", "-B")


def check(name: str, cc: str, pin: GccPin, flags: tuple[str, ...]) -> None:
    """A pin is clang's (a GCC driver has its installation built in) and the
    only choice of installation in the target."""
    if pin.sysroot and not pin.gcc_install_dir:
        raise AotError(f"target '{name}': sysroot needs gcc_install_dir (the GCC "
                       "installation its link takes crtbegin.o and libgcc from)")
    if not pin:
        return
    if "clang" not in cc.rsplit("/", 1)[-1]:
        raise AotError(f"target '{name}': gcc_install_dir and sysroot are for clang; "
                       f"cc = '{cc}' finds its own installation")
    clash = [f for f in flags if f.startswith(CHOOSING)]
    if clash:
        raise AotError(f"target '{name}': {' '.join(clash)} in its flags contradicts "
                       "gcc_install_dir and sysroot, which name the installation")


# --- what clang picks by itself (for `aot doctor`) ------------------------------

_CANDIDATE = "Found candidate GCC installation: "
_SELECTED = "Selected GCC installation: "


@dataclass(frozen=True)
class Installations:
    """The GCC installations clang sees for some flags, and its pick."""
    candidates: tuple[str, ...]
    selected: str | None


def installations(cc: str, flags: Sequence[str]) -> Installations:
    """What `cc flags -v` reports (paths normalized: clang prints them
    through its own bin/..)."""
    try:
        r = subprocess.run([cc, *flags, "-v"], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return Installations((), None)
    lines = r.stderr.splitlines()
    found = [os.path.normpath(l[len(_CANDIDATE):]) for l in lines if l.startswith(_CANDIDATE)]
    selected = [os.path.normpath(l[len(_SELECTED):]) for l in lines if l.startswith(_SELECTED)]
    return Installations(tuple(found), selected[0] if selected else None)


def file_in(install: str, name: str) -> str | None:
    """`name` as a GCC installation keeps it: GCC's own files (crtbegin.o,
    libgcc.a) in its directory, its C library's (crt1.o, libc.a) in
    <prefix>/<triple>/lib, where clang looks (<prefix>/lib/gcc*/<triple>/<version>)."""
    triple = os.path.basename(os.path.dirname(install))
    libc = os.path.normpath(os.path.join(install, "..", "..", "..", "..", triple, "lib"))
    for d in (install, libc):
        path = os.path.join(d, name)
        if os.path.isfile(path):
            return path
    return None
