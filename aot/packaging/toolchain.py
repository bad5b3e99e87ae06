"""Compiling a package for its Target: the static library and the harness.

Everything runs inside the package directory with relative paths, so no
absolute path can end up in an object; archives are written in deterministic
mode (`ar D`: no timestamps, uids or modes). Same package, same bytes.
A compiler failure is an AotError naming the file and the first error line.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

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


def compile_sources(tc: Toolchain, pkg: Path, sources: Sequence[str], objdir: str,
                    extra: Sequence[str] = (), base: Sequence[str] = PACKAGE_CFLAGS
                    ) -> list[str]:
    """Compile each source (relative to pkg) into objdir, one compiler per
    core at once, or take its object from the cache of compiled objects
    (aot/packaging/objcache.py); the object paths, in source order (the
    first failure in that order is the one reported). `base`: the flags
    after the target's, before `extra`."""
    (pkg / objdir).mkdir(parents=True, exist_ok=True)
    objects = [f"{objdir}/{Path(src).stem}.o" for src in sources]
    if len(set(objects)) != len(objects):
        raise AotError(f"two package sources share a file name: {', '.join(sources)}")

    def compile_one(src: str, obj: str) -> bool:
        cmd = [tc.cc, *tc.cflags, *base, *extra,
               f"-ffile-prefix-map={pkg.resolve()}=.", "-c", src, "-o", obj]
        return objcache.compile_cached(tc.cc, cmd, pkg, src, obj,
                                       lambda c: run_tool(c, pkg, f"compiling {src}"))

    with ThreadPoolExecutor(max_workers=max(1, min(len(sources), os.cpu_count() or 1))) as pool:
        # the largest first, so that no long compile starts last
        order = sorted(range(len(sources)), key=lambda i: -(pkg / sources[i]).stat().st_size)
        jobs = {i: pool.submit(compile_one, sources[i], objects[i]) for i in order}
        compiled = [jobs[i].result() for i in range(len(sources))]
    if any(compiled) and objcache.enabled():
        objcache.trim()
    return objects


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
                  prebuilt: Sequence[str] = (), extra_cflags: Sequence[str] = ()) -> str:
    """lib/lib<name>.a from the package's sources and prebuilt objects;
    extra_cflags come after the target's (e.g. sanitizers, -O1 -g)."""
    tc = toolchain_for(target)
    objdir = ".build"
    try:
        objects = compile_sources(tc, pkg, sources, objdir, extra_cflags)
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


def build_harness(target: Target, pkg: Path, name: str, library: str,
                  extra_cflags: Sequence[str] = (),
                  firmware: Mapping[str, Any] | None = None) -> str:
    """bench/bench: the harness linked statically against the library
    (dynamically when extra_cflags add a sanitizer); on a bare-metal board
    with the board's start-up code and linker script (`firmware`)."""
    tc = toolchain_for(target)
    exe = "bench/bench"
    static = [] if sanitized(extra_cflags) else ["-static"]
    # the hello over a serial port names the package (identity.py)
    ident = f'-DAOT_PACKAGE_ID="{package_id(pkg, name)}"'
    flags = [tc.cc, *tc.cflags, "-std=c99", "-Iinclude", "-Iruntime_c", *extra_cflags, ident,
             f"-ffile-prefix-map={pkg.resolve()}=."]
    main = ["bench/main.c"]
    if not firmware:
        # a hosted harness: main.c compiled apart, so that its object comes
        # from the cache; the link reads no name of it (the same bytes)
        main = compile_sources(tc, pkg, main, ".build-harness", [*extra_cflags, ident],
                               ("-std=c99", "-Iinclude", "-Iruntime_c"))
    link = [*flags, *main, *firmware_link(firmware or {}), library, *tc.ldflags, *static,
            "-lm", "-o", exe]
    try:
        if firmware:        # its start-up sources compile in the link: not cached
            run_tool(link, pkg, "linking the bench harness")
        else:               # a hosted harness: a link of two package files
            objcache.tool_cached(tc.cc, link, pkg, [*main, library], exe,
                                 lambda c: run_tool(c, pkg, "linking the bench harness"),
                                 link_deps=".build-harness/bench.d", executable=True)
    finally:
        shutil.rmtree(pkg / ".build-harness", ignore_errors=True)
    return exe
