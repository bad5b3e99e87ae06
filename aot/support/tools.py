"""Where aot finds the programs it runs, and what it says when one is missing.

Every program aot starts itself (compilers, `ar`, the QEMU emulators) is
looked up here: on $AOT_TOOL_PATH when it is set (a PATH-like list of
directories, used instead of $PATH), else on $PATH. The programs then run
with the environment as it is, so clang still finds its own linker and
runtimes. An empty AOT_TOOL_PATH directory shows what aot does on a machine
without its tools (`aot doctor`, the tests).

A missing program or file is a MissingToolError naming it, its Debian package when
aot knows it, and the fix: `make setup` installs everything (scripts/setup.sh),
`aot doctor` lists what is missing.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from aot.errors import MissingToolError

TOOL_PATH_ENV = "AOT_TOOL_PATH"
FIX = "run `make setup` (`aot doctor` lists what is missing)"

# Debian packages scripts/setup.sh installs, by the program or file they bring
# (or bring through their dependencies): named in missing-tool messages.
_PACKAGES = {
    "clang": "clang", "ld.lld": "lld", "ar": "binutils-multiarch",
    "arm-none-eabi-gcc": "gcc-arm-none-eabi", "riscv64-unknown-elf-gcc": "gcc-riscv64-unknown-elf",
    "qemu-aarch64": "qemu-user", "qemu-arm": "qemu-user", "qemu-riscv64": "qemu-user",
    "qemu-system-arm": "qemu-system-arm", "qemu-system-aarch64": "qemu-system-arm",
    "qemu-system-riscv32": "qemu-system-misc",
    "efi-virtio.rom": "ipxe-qemu", "gcc": "gcc", "sshd": "openssh-server",
    "ssh-keygen": "openssh-client",
}
_PACKAGE_PREFIXES = (("libclang_rt.", "libclang-rt-14-dev"),
                     ("librdimon", "libnewlib-arm-none-eabi"),
                     ("rdimon", "libnewlib-arm-none-eabi"),
                     ("libsemihost", "picolibc-riscv64-unknown-elf"),
                     ("picolibc", "picolibc-riscv64-unknown-elf"))


def debian_package(name: str) -> str | None:
    """The package of scripts/setup.sh that brings a program or file, when known."""
    if name in _PACKAGES:
        return _PACKAGES[name]
    return next((pkg for prefix, pkg in _PACKAGE_PREFIXES if name.startswith(prefix)), None)


def search_path() -> str:
    return os.environ.get(TOOL_PATH_ENV) or os.environ.get("PATH", os.defpath)


def which(name: str) -> str | None:
    """The program's path, or None when it is not on the search path."""
    return shutil.which(name, path=search_path())


def not_installed(what: str, name: str) -> str:
    """The one-line message for a program or file that is not there."""
    package = debian_package(name)
    return (f"{what}: '{name}' is not installed"
            f"{f' (Debian package {package})' if package else ''}: {FIX}")


def require(name: str, what: str) -> str:
    """The program's path; a MissingToolError saying how to install it when
    it is missing."""
    found = which(name)
    if found is None:
        raise MissingToolError(not_installed(what, name))
    return found


# --- files QEMU loads -------------------------------------------------------------

def qemu_data_dirs(qemu: str) -> list[Path]:
    """Where `qemu` looks for its ROMs and firmware, in its own order (after
    the current directory): `qemu -L help` prints them, relative to where
    the binary really is (/usr/bin/../lib/ipxe/qemu for efi-virtio.rom)."""
    try:
        r = subprocess.run([qemu, "-L", "help"], capture_output=True, text=True, timeout=30,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [Path(line.strip()) for line in r.stdout.splitlines() if line.strip()]


def qemu_data_file(qemu: str, name: str) -> Path | None:
    """The file `name` as `qemu` (a path) would load it, or None."""
    for d in qemu_data_dirs(qemu):
        if (d / name).is_file():
            return Path(os.path.normpath(d / name))
    return None


# --- compiles and links that failed for a missing file ------------------------------

# What gcc, clang, GNU ld and lld say when a file the compiler driver looks
# for is not there. aot writes every compile and link line itself, so such a
# file belongs to the installation (a sanitizer runtime, newlib, a cross
# libc and its headers), not to the input.
_MISSING = (
    re.compile(r"cannot (?:find|open) -l(?P<lib>[^\s:]+)"),
    re.compile(r"unable to find library -l(?P<lib>[^\s:]+)"),
    re.compile(r"cannot (?:find|open) (?P<file>[^\s:]+): No such file"),
    re.compile(r"cannot read spec file '(?P<file>[^']+)'"),
    re.compile(r"fatal error: '?(?P<file>[\w/.-]+\.h)'?:? (?:file not found|No such file)"),
)
# Headers of the C library and the compiler: a package's own headers have
# other names, and their absence would be aot's failure, not the machine's.
_SYSTEM_HEADERS = frozenset(f"{h}.h" for h in (
    "assert", "ctype", "errno", "float", "inttypes", "limits", "math", "stdarg", "stdbool",
    "stddef", "stdint", "stdio", "stdlib", "string", "time", "unistd", "features"))


def missing_file(stderr: str) -> str | None:
    """The file a failed compile or link did not find (lib<x>.a for -l<x>),
    when that was its failure, else None."""
    for line in stderr.splitlines():
        for pattern in _MISSING:
            m = pattern.search(line)
            if m is None:
                continue
            if "lib" in m.groupdict():
                return f"lib{m['lib']}.a"
            name = m["file"]
            if name.endswith(".h") and name not in _SYSTEM_HEADERS and "/" not in name:
                return None
            return name
    return None


def explain_failure(what: str, stderr: str) -> str | None:
    """One line for a compile or link that failed because a file of the
    toolchain is missing (naming it and its package), else None."""
    name = missing_file(stderr)
    if name is None:
        return None

    base = os.path.basename(name)
    package = debian_package(base)
    return (f"{what} failed: {base} is missing"
            f"{f' ({name})' if name != base else ''}"
            f"{f', from Debian package {package}' if package else ''}: {FIX}")
