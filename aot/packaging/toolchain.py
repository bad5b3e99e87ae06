"""Compiling a package for its Target: the static library and the harness.

Everything runs inside the package directory with relative paths, so no
absolute path can end up in an object; archives are written in deterministic
mode (`ar D`: no timestamps, uids or modes). Same package, same bytes.
A compiler failure is an AotError naming the file and the first error line.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from aot.packaging import objcache
from aot.support import tools
from aot.errors import AotError, MissingToolError
from aot.packaging.identity import package_id
from aot.targets import Target

# Flags every package source is compiled with, after the target's own.
PACKAGE_CFLAGS = ("-std=c99", "-Iinclude", "-Iruntime_c", "-Isrc")
TIMEOUT_S = 600


@dataclass(frozen=True)
class Toolchain:
    """The programs that build for one target."""
    cc: str
    ar: str
    cflags: tuple[str, ...]
    ldflags: tuple[str, ...]


def toolchain_for(target: Target) -> Toolchain:
    """Host and cross targets alike: the target's cc and flags; `ar` from
    binutils (it handles any ELF, and deterministic mode)."""
    ar = getattr(target, "ar", "") or "ar"
    cc, ar = (tools.require(t, f"target {target.name}") for t in (target.cc, ar))
    return Toolchain(cc, ar, tuple(target.cflags), tuple(target.ldflags))


# The compiler driver's summary of a failed link says only that the linker
# failed; the reason is in the linker's own lines before it.
_DRIVER_SUMMARY = re.compile(r"collect2: error: ld returned|error: linker command failed")
# What a reason looks like, most telling first: a linker message has no
# "error" in it ("region `FLASH' overflowed by 96 bytes").
# Static data past the code model's reach: relocations "truncated to fit"
# (GNU ld) or "out of range" (lld), reported in whatever code refers to it.
_REASONS = ("overflowed by", "truncated to fit", "out of range", "error",
            "undefined reference", "cannot find", "will not fit")
# A linker's full path (/usr/lib/gcc/arm-none-eabi/12.2.1/../../../arm-none-eabi/bin/ld:).
_LINKER_PATH = re.compile(r"^\S*/(ld(\.\w+)?|collect2):")


def _first_error(stderr: str) -> str:
    """The one line of a tool's stderr that says what went wrong."""
    lines = [_LINKER_PATH.sub(r"\1:", l.strip()) for l in stderr.splitlines() if l.strip()]
    reasons = [l for l in lines if not _DRIVER_SUMMARY.search(l)]
    for word in _REASONS:
        for line in reasons:
            if word in line.lower():
                return line
    return (reasons or lines or ["no message"])[0]


def run_tool(cmd: Sequence[str], cwd: Path, what: str) -> str:
    try:
        r = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True,
                           timeout=TIMEOUT_S)
    except FileNotFoundError:
        raise MissingToolError(tools.not_installed(what, cmd[0])) from None
    except subprocess.TimeoutExpired:
        raise AotError(f"{what}: '{cmd[0]}' timed out after {TIMEOUT_S} s") from None
    if r.returncode == -signal.SIGINT:     # Ctrl-C reached the tool too: an interrupt,
        raise KeyboardInterrupt            # not a failure of the tool
    if r.returncode != 0:
        missing = tools.explain_failure(what, r.stderr)     # a file of the toolchain
        if missing:
            raise MissingToolError(missing)
        raise AotError(f"{what} failed: {_first_error(r.stderr)}")
    return r.stderr


@contextlib.contextmanager
def _sigint(how: int) -> Iterator[None]:
    """SIGINT blocked (SIG_BLOCK) or not (SIG_UNBLOCK) in this thread
    meanwhile; a thread it starts, and a process, keep the mask."""
    before = signal.pthread_sigmask(how, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


class CompilePool:
    """The compiles of one package in one pool, one compiler per core, each
    started as soon as it is submitted: the caller submits a source once it
    is written, so the compiler runs while Python prints the next files,
    and waits only where it needs objects (the archive, the link). Objects
    come from the cache of compiled objects (aot/packaging/objcache.py)
    where they can. `tc`: a Toolchain, or the Target to find one for when
    the first source is submitted."""

    def __init__(self, tc: Toolchain | Target, pkg: Path):
        self._tc, self.pkg = tc, pkg
        self._pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1)
        self._jobs: dict[str, tuple[str, Future]] = {}     # object -> (source, its compile)

    def __enter__(self) -> "CompilePool":
        return self

    def __exit__(self, *exc) -> None:
        self._pool.shutdown(cancel_futures=True)          # waits for the running ones
        compiled = [f.result() for _, f in self._jobs.values()
                    if f.done() and not f.cancelled() and f.exception() is None]
        if any(compiled) and objcache.enabled():
            objcache.trim()

    @property
    def toolchain(self) -> Toolchain:
        if isinstance(self._tc, Target):
            self._tc = toolchain_for(self._tc)
        return self._tc

    def submit(self, sources: Sequence[str], objdir: str, extra: Sequence[str] = (),
               base: Sequence[str] = PACKAGE_CFLAGS) -> list[str]:
        """Start compiling each source (relative to pkg) into objdir, the
        largest first (so that no long compile starts last), with the
        target's flags, then `base`, then `extra`; a source submitted
        before is not compiled again. The object paths, in source order."""
        tc = self.toolchain
        (self.pkg / objdir).mkdir(parents=True, exist_ok=True)
        objects = [f"{objdir}/{Path(src).stem}.o" for src in sources]
        named = {o: s for o, (s, _) in self._jobs.items()}
        for src, obj in zip(sources, objects):
            if named.setdefault(obj, src) != src:
                raise AotError(f"two package sources share a file name: {named[obj]}, {src}")
        fresh = [i for i, obj in enumerate(objects) if obj not in self._jobs]
        for i in sorted(fresh, key=lambda i: -(self.pkg / sources[i]).stat().st_size):
            cmd = [tc.cc, *tc.cflags, *base, *extra,
                   f"-ffile-prefix-map={self.pkg.resolve()}=.", "-c", sources[i], "-o", objects[i]]
            with _sigint(signal.SIG_BLOCK):      # in the worker this may start
                job = self._pool.submit(self._compile, tc.cc, cmd, sources[i], objects[i])
            self._jobs[objects[i]] = (sources[i], job)
        return objects

    def _compile(self, cc: str, cmd: list[str], src: str, obj: str) -> bool:
        """In a worker, which runs with SIGINT blocked, so that a Ctrl-C is
        the main thread's to take (CPython runs signal handlers there only).
        The compiler runs with it unblocked: a Ctrl-C stops it, and
        run_tool raises the interrupt."""
        def run(c: Sequence[str]) -> str:
            with _sigint(signal.SIG_UNBLOCK):
                return run_tool(c, self.pkg, f"compiling {src}")
        return objcache.compile_cached(cc, cmd, self.pkg, src, obj, run)

    def wait(self, objects: Sequence[str]) -> list[str]:
        """The objects once compiled (the first failure in their order is
        the one raised)."""
        for obj in objects:
            self._jobs[obj][1].result()
        return list(objects)


def compile_sources(tc: Toolchain, pkg: Path, sources: Sequence[str], objdir: str,
                    extra: Sequence[str] = (), base: Sequence[str] = PACKAGE_CFLAGS
                    ) -> list[str]:
    """Compile each source (relative to pkg) into objdir, one compiler per
    core at once (CompilePool); the object paths, in source order."""
    with CompilePool(tc, pkg) as pool:
        return pool.wait(pool.submit(sources, objdir, extra, base))


def archive(tc: Toolchain, pkg: Path, library: str, objects: Sequence[str]) -> None:
    lib = pkg / library
    lib.parent.mkdir(parents=True, exist_ok=True)
    lib.unlink(missing_ok=True)
    objcache.tool_cached(tc.ar, [tc.ar, "rcsD", library, *objects], pkg, objects, library,
                         lambda c: run_tool(c, pkg, f"archiving {library}"))


def sanitized(extra_cflags: Sequence[str]) -> bool:
    """Whether extra flags instrument the code: sanitizer runtimes need the
    dynamic loader, so such a harness cannot be linked statically."""
    return any(f.startswith("-fsanitize=") for f in extra_cflags)


def build_library(target: Target, pkg: Path, name: str, sources: Sequence[str],
                  prebuilt: Sequence[str] = (), extra_cflags: Sequence[str] = (),
                  pool: CompilePool | None = None) -> str:
    """lib/lib<name>.a from the package's sources and prebuilt objects;
    extra_cflags come after the target's (e.g. sanitizers, -O1 -g). pool:
    where the sources compile (some may be compiling already: build_into
    submits each as it is written); else a pool of their own."""
    tc = toolchain_for(target)
    objdir = ".build"
    try:
        if pool is None:
            objects = compile_sources(tc, pkg, sources, objdir, extra_cflags)
        else:
            objects = pool.wait(pool.submit(sources, objdir, extra_cflags))
        library = f"lib/lib{name}.a"
        archive(tc, pkg, library, [*objects, *prebuilt])
    finally:
        shutil.rmtree(pkg / objdir, ignore_errors=True)
    return library


def firmware_link(firmware: Mapping[str, Any]) -> list[str]:
    """A bare-metal board's harness build: its flags for the harness and
    start-up sources, the sources, `-T` its linker script, its link flags
    (all from the board's [firmware] table)."""
    script = firmware.get("linker_script")
    return [*firmware.get("cflags", ()), *firmware.get("sources", ()),
            *(["-T", script] if script else []), *firmware.get("ldflags", ())]


HARNESS_MAIN = "bench/main.c"
HARNESS_OBJDIR = ".build-harness"
HARNESS_BASE = ("-std=c99", "-Iinclude", "-Iruntime_c")


def says_identity(flags: Sequence[str]) -> bool:
    """Whether a harness built with these flags may say its identity: only
    one serving a serial port (-DAOT_SERVE_UART) reaches send_hello's
    device branch; in any other the identity is dead code, main.o the same
    without it (tests/packaging/test_compile_pool.py compares them)."""
    return any("AOT_SERVE_UART" in f for f in flags)


def start_harness(pool: CompilePool, extra_cflags: Sequence[str] = ()) -> list[str] | None:
    """Start compiling a hosted harness's main.c (written) in the pool while
    the library compiles, where its object does not hold the identity
    (identity.py digests the library, so it exists only after the
    archive); [its object], else None."""
    if says_identity([*pool.toolchain.cflags, *extra_cflags]):
        return None
    return pool.submit([HARNESS_MAIN], HARNESS_OBJDIR, extra_cflags, HARNESS_BASE)


def _harness_main(tc: Toolchain, pkg: Path, ident: str, extra_cflags: Sequence[str],
                  pool: CompilePool | None) -> list[str]:
    """The hosted harness's main.o, compiled apart so that it comes from the
    cache (the link reads no name of it: the same bytes)."""
    started = pool and start_harness(pool, extra_cflags)      # started already, or now
    if started:
        return pool.wait(started)
    return compile_sources(tc, pkg, [HARNESS_MAIN], HARNESS_OBJDIR,
                           [*extra_cflags, _identity_flag(ident)], HARNESS_BASE)


def _identity_flag(ident: str) -> str:
    return f'-DAOT_PACKAGE_ID="{ident}"'


def build_harness(target: Target, pkg: Path, name: str, library: str,
                  extra_cflags: Sequence[str] = (),
                  firmware: Mapping[str, Any] | None = None,
                  pool: CompilePool | None = None) -> str:
    """bench/bench: the harness linked statically against the library
    (dynamically when extra_cflags add a sanitizer); on a bare-metal board
    with the board's start-up code and linker script (`firmware`); pool:
    where a hosted harness's main.c compiles (start_harness may have
    started it), else a pool of its own."""
    tc = toolchain_for(target)
    exe = "bench/bench"
    static = [] if sanitized(extra_cflags) else ["-static"]
    # the hello over a serial port names the package (identity.py)
    ident = package_id(pkg, name)
    flags = [tc.cc, *tc.cflags, *HARNESS_BASE, *extra_cflags, _identity_flag(ident),
             f"-ffile-prefix-map={pkg.resolve()}=."]
    main = [HARNESS_MAIN]
    try:
        if not firmware:
            main = _harness_main(tc, pkg, ident, extra_cflags, pool)
        link = [*flags, *main, *firmware_link(firmware or {}), library, *tc.ldflags, *static,
                "-lm", "-o", exe]
        if firmware:        # its start-up sources compile in the link: not cached
            run_tool(link, pkg, "linking the bench harness")
        else:               # a hosted harness: a link of two package files
            objcache.tool_cached(tc.cc, link, pkg, [*main, library], exe,
                                 lambda c: run_tool(c, pkg, "linking the bench harness"),
                                 link_deps=f"{HARNESS_OBJDIR}/bench.d", executable=True)
    finally:
        shutil.rmtree(pkg / HARNESS_OBJDIR, ignore_errors=True)
    return exe
