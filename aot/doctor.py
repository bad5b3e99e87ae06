"""`aot doctor`: every program and file aot needs on this machine, found or
missing, the boards that work now, and the one command that installs the
rest (`make setup`).

This module holds the one list of what aot loads at run time: each target's
compiler, `ar` and linker, the C library files its link pulls in (asked of
the compiler itself, -print-file-name, so the paths are the ones the link
uses), the emulators of the boards, the ROM qemu-rpi4's NIC loads (where
that qemu looks for it: `qemu -L help`), the qemu-rpi4 image, clang's
sanitizer runtimes, the reference runtimes of `aot verify` and what the
tests run. tests/cli/test_doctor.py proves every file found here comes from a
Debian package in the Depends closure of what scripts/setup.sh installs.

A file the build cannot find may still be installed, in a GCC installation
the build does not use: the target names another (aot/support/gcc_pin.py), or,
with none named, clang picks another toolchain's. `make setup` cannot fix
that, and the doctor says so: where the file is, and why it is not used.

Programs are looked up as aot runs them (aot/support/tools.py): $AOT_TOOL_PATH, when
set, replaces $PATH, so an empty directory there shows a machine without them.
"""
from __future__ import annotations

import importlib.util
import os
import platform
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Iterable, Mapping

from aot.support import gcc_pin, tools
from aot.targets import Board, Target

FIX = "make setup"
# What fixes a file installed where the target's build does not look.
FIX_PIN = ("name the GCC installation and C library to use in the target's "
           "gcc_install_dir and sysroot (targets/README.md)")

# By the architecture of a target's triple: the Debian package of its
# compiler driver's tools (linker, libgcc) and that of its C library.
_ARCH_PACKAGES = {
    "x86_64": ("clang", "clang"),
    "aarch64": ("gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"),
    "armv7": ("gcc-arm-linux-gnueabihf", "libc6-dev-armhf-cross"),
    "riscv64": ("gcc-riscv64-linux-gnu", "libc6-dev-riscv64-cross"),
    "thumb": ("gcc-arm-none-eabi", "libnewlib-arm-none-eabi"),
    "riscv32": ("gcc-riscv64-unknown-elf", "picolibc-riscv64-unknown-elf"),
}
# What a static harness links from the C library, by Target.libc; newlib's
# semihosting (rdimon) is what the Cortex-M boards' harness runs on.
LIBC_FILES = {"glibc": ("crt1.o", "libc.a", "libm.a"),
              "newlib": ("libc.a", "libm.a", "librdimon.a", "rdimon.specs", "rdimon-crt0.o"),
              # the RISC-V microcontroller boards' harness: picolibc's semihosting
              "picolibc": ("libc.a", "libm.a", "libsemihost.a")}
# What the link takes from the GCC installation: a static glibc link its
# start and end files too.
GCC_FILES = {"glibc": ("crtbeginT.o", "crtend.o", "libgcc.a", "libgcc_eh.a"),
             "newlib": ("libgcc.a",), "picolibc": ("libgcc.a",)}
# picolibc's libraries lie where only its specs file (--specs=picolibc.specs,
# in the target's flags) sends the link, with -L: -print-file-name does not
# look there. -B names the same directory for the question (multilib
# subdirectory included), by the bare-metal GCC's triple.
PICOLIBC_DIR = "/usr/lib/picolibc/{triple}/lib/"
# clang's runtimes for -fsanitize=address,undefined (aot.api.package's extra_cflags).
SANITIZER_RUNTIMES = ("asan", "asan_static", "ubsan_standalone")
# `aot verify`'s reference runtimes: (module, pip package, what needs it).
REFERENCE_RUNTIMES = (("onnxruntime", "onnxruntime", "aot verify (.onnx)"),
                      ("ai_edge_litert", "ai-edge-litert", "aot verify (.tflite)"),
                      ("tflite_micro", "tflite-micro", "aot verify (int8 .tflite)"))
# What the tests run beyond aot's own needs (a real sshd, gcc's warnings).
SSHD = "/usr/sbin/sshd"
TESTS = "tests"


@dataclass(frozen=True)
class Check:
    """One program, file, module or image aot needs."""
    name: str
    kind: str                     # tool | file | python | image | machine
    group: str                    # what sort of thing, for the table
    path: str | None              # where it was found (None: missing)
    needed_by: tuple[str, ...]    # boards, commands, "tests"
    package: str = ""             # the Debian (or pip) package that brings it
    # Not found, but installed here, where the build does not look, and why.
    installed_at: str = ""
    not_used_because: str = ""

    @property
    def found(self) -> bool:
        return self.path is not None

    @property
    def fix(self) -> str:
        return FIX_PIN if self.installed_at else FIX

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "group": self.group, "path": self.path,
                "found": self.found, "needed_by": list(self.needed_by),
                "package": self.package, "installed_at": self.installed_at or None,
                "not_used_because": self.not_used_because or None,
                **({} if self.found else {"fix": self.fix})}


@dataclass(frozen=True)
class BoardStatus:
    name: str
    usable: bool
    missing: tuple[str, ...]
    note: str

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "usable": self.usable, "missing": list(self.missing),
                "note": self.note}


@dataclass(frozen=True)
class Report:
    checks: tuple[Check, ...]
    boards: tuple[BoardStatus, ...]

    @property
    def ok(self) -> bool:
        return all(c.found for c in self.checks)

    @property
    def fixes(self) -> tuple[str, ...]:
        """What makes the missing things found, FIX first when it helps at all."""
        return tuple(sorted({c.fix for c in self.checks if not c.found}, key=lambda f: f != FIX))

    def as_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [c.as_json() for c in self.checks],
                "boards": [b.as_json() for b in self.boards], "fix": FIX,
                "fixes": list(self.fixes), "tool_path": os.environ.get(tools.TOOL_PATH_ENV)}


# --- files a compiler finds itself ----------------------------------------------

@dataclass(frozen=True)
class _Ask:
    """`cc flags -print-file-name=NAME` (or -print-prog-name): where the
    compiler driver finds a file it passes to the link."""
    cc: str | None               # the compiler's path; None: not installed
    flags: tuple[str, ...]
    option: str
    name: str


def _answer(ask: _Ask) -> str | None:
    if ask.cc is None:
        return None
    try:
        r = subprocess.run([ask.cc, *ask.flags, f"{ask.option}={ask.name}"], capture_output=True,
                           text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    # Not found: the driver echoes the bare name back.
    path = r.stdout.strip()
    if r.returncode != 0 or not os.path.isabs(path) or not os.path.isfile(path):
        return None
    return os.path.normpath(path)


def _answers(asks: Iterable[_Ask]) -> dict[_Ask, str | None]:
    asks = list(dict.fromkeys(asks))
    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip(asks, pool.map(_answer, asks)))


def _arch_packages(target: Target) -> tuple[str, str]:
    arch = target.triple.split("-")[0]
    return _ARCH_PACKAGES.get("thumb" if arch.startswith("thumb") else arch, ("", ""))


def _target_needs(target: Target, users: tuple[str, ...]) -> tuple[list[Check], list[tuple]]:
    """The target's programs (checked now) and its files (asks, answered
    together later): what builds a package and its harness for it."""
    cc = tools.which(target.cc)
    ar = getattr(target, "ar", "") or "ar"
    tools_pkg, libc_pkg = _arch_packages(target)
    checks = [Check(target.cc, "tool", "compilers", cc, users,
                    tools.debian_package(target.cc) or ""),
              Check(ar, "tool", "compilers", tools.which(ar), users,
                    tools.debian_package(ar) or "")]
    flags = (*target.cflags, *target.ldflags)
    if target.libc == "picolibc":
        flags += (f"-B{PICOLIBC_DIR.format(triple=os.path.basename(target.cc)[:-len('-gcc')])}",)
    if "-fuse-ld=lld" in target.ldflags:
        checks.append(Check("ld.lld", "tool", "compilers", tools.which("ld.lld"), users, "lld"))
        files = []
    else:
        files = [(_Ask(cc, flags, "-print-prog-name", "ld"), "compilers", tools_pkg)]
    files += [(_Ask(cc, flags, "-print-file-name", f), "C libraries", libc_pkg)
              for f in LIBC_FILES.get(target.libc, ())]
    files += [(_Ask(cc, flags, "-print-file-name", f), "C libraries", tools_pkg)
              for f in GCC_FILES.get(target.libc, ())]
    return checks, [(ask, group, pkg, users, target) for ask, group, pkg in files]


def _sanitizer_needs(host: Board) -> list[tuple]:
    cc = tools.which(host.target.cc)
    flags = (*host.target.cflags, *host.target.ldflags)
    return [(_Ask(cc, flags, "-print-file-name", f"libclang_rt.{rt}-{platform.machine()}.a"),
             "sanitizers", "libclang-rt-14-dev", ("sanitizers",), None)
            for rt in SANITIZER_RUNTIMES]


# --- files installed where the build does not look ----------------------------------

def _not_used(target: Target, cc: str, name: str) -> tuple[str, str]:
    """Where a file a clang target's link did not find is installed after
    all (in a GCC installation clang sees without the target's pin), and
    why the build does not use it; ("", "") when it is nowhere."""
    pin = target.gcc_pin
    seen = gcc_pin.installations(cc, pin.unpinned((*target.cflags, *target.ldflags)))
    used = pin.gcc_install_dir or seen.selected
    for other in seen.candidates:
        path = gcc_pin.file_in(other, name)
        if other == used or path is None:
            continue
        if not pin:
            return path, f"clang picks the GCC installation {used}, which has no {name}"
        named = [(what, where) for what, where in (("GCC installation", pin.gcc_install_dir),
                                                   ("C library", pin.sysroot)) if where]
        absent = [(what, where) for what, where in named if not os.path.isdir(where)]
        return path, (f"target {target.name} names the "
                      f"{' and '.join(f'{what} {where}' for what, where in absent or named)}"
                      f"{', not installed' if absent else ''}")
    return "", ""


def _file_check(ask: _Ask, group: str, pkg: str, users: tuple[str, ...],
                target: Target | None, path: str | None) -> Check:
    name = ask.name if ask.option == "-print-file-name" else os.path.basename(path or ask.name)
    elsewhere = ("", "")
    if path is None and target is not None and ask.cc and ask.option == "-print-file-name":
        elsewhere = _not_used(target, ask.cc, ask.name)
    return Check(name, "file", group, path, users, pkg, *elsewhere)


# --- boards' emulators and the VM -------------------------------------------------

def _transport_needs(board: Board) -> list[Check]:
    from aot.deploy import vm

    qemu = str(board.options.get("qemu", ""))
    if board.transport not in ("qemu-user", "qemu-system") and not board.options.get("vm"):
        return []
    users = (board.name,)
    found = tools.which(qemu) if qemu else None
    checks = [Check(qemu, "tool", "emulators", found, users, tools.debian_package(qemu) or "")]
    if board.options.get("vm"):
        rom = tools.qemu_data_file(found, vm.NIC_ROM) if found else None
        checks += [Check(vm.NIC_ROM, "file", "emulators", str(rom) if rom else None, users,
                         tools.debian_package(vm.NIC_ROM) or ""),
                   _image_check(users)]
    machine = str(board.options.get("machine", ""))
    if board.transport == "qemu-system" and machine:
        # the machine model (-M) in this QEMU: an older one may lack a board's
        checks.append(Check(f"{qemu} -M {machine}", "machine", "emulators",
                            found if found and machine in _qemu_machines(found) else None,
                            users, tools.debian_package(qemu) or ""))
    if board.transport in ("qemu-user", "qemu-system"):
        checks += _insn_count_checks(users)
    return checks


@lru_cache(maxsize=None)
def _qemu_machines(qemu: str) -> frozenset[str]:
    """The machine names `qemu -M help` lists (empty if it cannot say)."""
    try:
        r = subprocess.run([qemu, "-M", "help"], capture_output=True, text=True, timeout=30,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    return frozenset(line.split()[0] for line in r.stdout.splitlines()[1:] if line.strip())


def _insn_count_checks(users: tuple[str, ...]) -> list[Check]:
    """The instruction counter emulated boards run under: its compiler and
    the plugin make setup builds into the cache."""
    from aot.deploy import insn_count

    cc = insn_count.COMPILER
    plugin = insn_count.plugin_path()
    return [Check(cc, "tool", "emulators", tools.which(cc), users, tools.debian_package(cc) or ""),
            Check("insn_count plugin", "image", "emulators",
                  str(plugin) if plugin.is_file() else None, users, "")]


def _image_check(users: tuple[str, ...]) -> Check:
    from aot.deploy.vm_image import IMAGE_NAME, image_dir

    d = image_dir()
    return Check(f"{IMAGE_NAME} image", "image", "emulators",
                 str(d) if (d / "image.json").is_file() else None, users, "")


def _python_needs() -> list[Check]:
    out = []
    for module, pip, user in (*REFERENCE_RUNTIMES, ("pytest", "pytest", TESTS)):
        spec = importlib.util.find_spec(module)
        path = (spec.origin or (list(spec.submodule_search_locations or ()) or [module])[0]
                if spec else None)
        out.append(Check(module, "python", "reference runtimes" if user != TESTS else TESTS,
                         path, (user,), f"pip {pip}"))
    return out


def _test_needs() -> list[Check]:
    return [Check("gcc", "tool", TESTS, tools.which("gcc"), (TESTS,), "gcc"),
            Check("cmake", "tool", TESTS, tools.which("cmake"), (TESTS,), "cmake"),
            Check("make", "tool", TESTS, tools.which("make"), (TESTS,), "make"),
            Check("ssh-keygen", "tool", TESTS, tools.which("ssh-keygen"), (TESTS,),
                  "openssh-client"),
            Check("sshd", "file", TESTS, SSHD if os.path.isfile(SSHD) else None, (TESTS,),
                  "openssh-server")]


def _merged(checks: Iterable[Check]) -> tuple[Check, ...]:
    """One row per thing (same kind, name, path and package), needed by the
    union of its users, in first-seen order."""
    rows: dict[tuple, Check] = {}
    for c in checks:
        key = (c.kind, c.name, c.path, c.package)
        if key in rows:
            old = rows[key]
            c = replace(c, needed_by=(*old.needed_by,
                                      *(u for u in c.needed_by if u not in old.needed_by)))
        rows[key] = c
    return tuple(rows.values())


# --- boards -------------------------------------------------------------------------

def _board_status(board: Board, checks: tuple[Check, ...]) -> BoardStatus:
    from aot.deploy.host import cpu_flags

    missing = [c.name for c in checks if board.name in c.needed_by and not c.found]
    wanted = board.options.get("cpu_flags", ()) if board.transport == "local" else ()
    lacking = [f for f in wanted if f not in cpu_flags()]
    if lacking:
        missing.append(f"CPU features {', '.join(lacking)}")
    if board.transport == "ssh" and not board.options.get("vm"):
        note = "over SSH: the board, its address and key are yours (docs/deploy.md)"
    elif board.options.get("vm"):
        note = f"aot boots it under {board.options.get('qemu', 'qemu')}"
    else:
        note = "emulated on this machine" if board.emulated else "runs on this machine"
    return BoardStatus(board.name, not missing, tuple(dict.fromkeys(missing)), note)


def report(boards: Mapping[str, Board] | None = None) -> Report:
    """What aot needs, as found now, for `boards` (default: all it knows)."""
    from aot.targets import boards as all_boards

    boards = dict(all_boards() if boards is None else boards)
    by_target: dict[str, tuple[Target, tuple[str, ...]]] = {}
    for b in boards.values():
        target, users = by_target.get(b.target.name, (b.target, ()))
        by_target[b.target.name] = (target, (*users, b.name))
    checks: list[Check] = []
    files: list[tuple] = []
    for target, users in by_target.values():
        found, asked = _target_needs(target, users)
        checks += found
        files += asked
    host = boards.get("host")
    if host is not None:
        files += _sanitizer_needs(host)
    answers = _answers(ask for ask, *_ in files)
    checks += [_file_check(*row, answers[row[0]]) for row in files]
    for b in boards.values():
        checks += _transport_needs(b)
    checks += [*_python_needs(), *_test_needs()]
    merged = _merged(checks)
    return Report(merged, tuple(_board_status(b, merged) for b in boards.values()))


# --- the terminal -------------------------------------------------------------------

def _by_user(checks: Iterable[Check]) -> dict[tuple[str, ...], list[Check]]:
    groups: dict[tuple[str, ...], list[Check]] = {}
    for c in checks:
        groups.setdefault(c.needed_by, []).append(c)
    return groups


def print_report(rep: Report) -> None:
    """Two tables: what aot needs, grouped by what needs it, then the boards."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="what aot needs on this machine")
    table.add_column("needed by / name", overflow="fold")
    table.add_column("found")
    table.add_column("path (or the package that brings it)", overflow="fold")
    for users, rows in _by_user(rep.checks).items():
        table.add_row(f"[bold]{', '.join(users)}[/bold]", "", "")
        for c in rows:
            table.add_row(f"  {c.name}", "yes" if c.found else "[red]no[/red]", _where(c))
        table.add_section()
    console.print(table)
    boards = Table(title="boards")
    for col in ("board", "usable", "missing", "note"):
        boards.add_column(col, overflow="fold")
    for b in rep.boards:
        boards.add_row(b.name, "yes" if b.usable else "[red]no[/red]",
                       ", ".join(b.missing) or "-", b.note)
    console.print(boards)
    if os.environ.get(tools.TOOL_PATH_ENV):
        console.print(f"programs were looked up on ${tools.TOOL_PATH_ENV}="
                      f"{os.environ[tools.TOOL_PATH_ENV]}, not $PATH")
    if rep.ok:
        console.print("everything aot needs is here")
    for fix in rep.fixes:
        rows = [c for c in rep.checks if not c.found and c.fix == fix]
        if fix == FIX:
            console.print(f"[bold]{len(rows)} of {len(rep.checks)} missing[/bold]: "
                          f"[bold]{FIX}[/bold] installs them")
        else:
            console.print(f"[bold]{len(rows)} installed but not used[/bold] "
                          f"({', '.join(dict.fromkeys(c.name for c in rows))}): {FIX} cannot "
                          f"change that; {fix}")


def _where(c: Check) -> str:
    if c.found:
        return c.path
    if c.installed_at:
        return (f"[red]not used[/red]: installed at {c.installed_at}, "
                f"but {c.not_used_because}")
    return f"[red]missing[/red] ({c.package or FIX})"
