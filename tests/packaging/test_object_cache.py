"""The cache of compiled objects (aot/packaging/objcache.py): a hit gives the
compiler's bytes, any changed input misses, a damaged entry is never used."""
from __future__ import annotations

from pathlib import Path

import pytest

from aot.packaging import objcache, toolchain
from aot.support.cachedir import CACHE_ENV
from aot.targets import get_board

HEADER = "#define SCALE 3\n"
SOURCE = '#include <math.h>\n#include "scale.h"\nfloat f(float x) { return SCALE * sqrtf(x); }\n'


@pytest.fixture
def pkg(tmp_path, monkeypatch) -> Path:
    """A package directory with one source and one header; the cache in tmp."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(objcache.ENABLE_ENV, raising=False)
    root = tmp_path / "pkg"
    (root / "src").mkdir(parents=True)
    (root / "include").mkdir()
    (root / "include" / "scale.h").write_text(HEADER)
    (root / "src" / "f.c").write_text(SOURCE)
    return root


def build(pkg: Path) -> tuple[bool, bytes]:
    """(whether the compiler ran, the object's bytes)."""
    tc = toolchain.toolchain_for(get_board("host").target)
    (pkg / ".build").mkdir(exist_ok=True)
    cmd = [tc.cc, *tc.cflags, *toolchain.PACKAGE_CFLAGS, f"-ffile-prefix-map={pkg}=.",
           "-c", "src/f.c", "-o", ".build/f.o"]
    compiled = objcache.compile_cached(
        tc.cc, cmd, pkg, "src/f.c", ".build/f.o",
        lambda c: toolchain.run_tool(c, pkg, "compiling src/f.c"))
    return compiled, (pkg / ".build" / "f.o").read_bytes()


def entries() -> list[Path]:
    return sorted(p for p in objcache.cache_dir().rglob("*") if p.is_file())


def test_a_hit_gives_the_compilers_bytes(pkg, monkeypatch):
    assert build(pkg)[0]
    compiled, cached = build(pkg)
    assert not compiled and len(entries()) == 1
    monkeypatch.setenv(objcache.ENABLE_ENV, "off")
    assert build(pkg) == (True, cached)
    assert len(entries()) == 1


@pytest.mark.parametrize("change", ["source", "header", "flags"])
def test_a_changed_input_misses(pkg, change, monkeypatch):
    _, before = build(pkg)
    if change == "source":
        (pkg / "src" / "f.c").write_text(SOURCE.replace("sqrtf", "fabsf"))
    elif change == "header":        # read through the include path: only the dep list knows
        (pkg / "include" / "scale.h").write_text("#define SCALE 5\n")
    else:
        monkeypatch.setenv("CPATH", str(pkg))
    compiled, after = build(pkg)
    assert compiled
    if change != "flags":
        assert after != before
    assert not build(pkg)[0]     # the new inputs' entry is used next time


@pytest.mark.parametrize("damage", ["flip", "cut", "garbage", "empty"])
def test_a_damaged_entry_is_ignored_and_replaced(pkg, damage):
    _, good = build(pkg)
    [entry] = entries()
    data = entry.read_bytes()
    entry.write_bytes({"flip": data[:-10] + bytes([data[-10] ^ 1]) + data[-9:],
                       "cut": data[:len(data) // 2], "garbage": b"\x00" * 64,
                       "empty": b""}[damage])
    assert build(pkg) == (True, good)
    assert entry.read_bytes() == data
    assert not build(pkg)[0]


def test_a_package_from_the_cache_is_the_package(tmp_path, monkeypatch, models_dir):
    """The same package, byte for byte, compiled, from the cache, and without it."""
    from aot.api import package

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    model = models_dir / "tflm_hello_world_int8.tflite"
    trees = []
    for run, enabled in enumerate(("on", "on", "off")):
        monkeypatch.setenv(objcache.ENABLE_ENV, enabled)
        out = tmp_path / f"p{run}"
        package(model, board="host", out_dir=out)
        trees.append({p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*"))
                      if p.is_file()})
    assert trees[0] == trees[1] == trees[2]


def test_trim_keeps_the_most_recently_used(pkg):
    build(pkg)
    (pkg / "src" / "f.c").write_text(SOURCE.replace("sqrtf", "fabsf"))
    build(pkg)
    old, new = sorted(entries(), key=lambda p: p.stat().st_mtime_ns)
    objcache.trim(limit=new.stat().st_size * 4 // 3 + 8)     # one fits in 3/4 of it
    assert entries() == [new]


def test_a_changed_incbin_blob_misses(pkg):
    """The weights blob reaches the object through the assembler's .incbin,
    which the compiler's dependency list does not name: two models of one
    shape with other weights must not share an object."""
    tc = toolchain.toolchain_for(get_board("host").target)
    (pkg / "src" / "w.S").write_text('    .section .rodata\n    .incbin "w_params.bin"\n')
    (pkg / ".build").mkdir(exist_ok=True)

    def assemble() -> tuple[bool, bytes]:
        cmd = [tc.cc, *tc.cflags, "-Isrc", f"-ffile-prefix-map={pkg}=.", "-c", "src/w.S",
               "-o", ".build/w.o"]
        compiled = objcache.compile_cached(
            tc.cc, cmd, pkg, "src/w.S", ".build/w.o",
            lambda c: toolchain.run_tool(c, pkg, "assembling src/w.S"))
        return compiled, (pkg / ".build" / "w.o").read_bytes()

    (pkg / "src" / "w_params.bin").write_bytes(b"\x01" * 64)
    first = assemble()
    assert first[0] and not assemble()[0]
    (pkg / "src" / "w_params.bin").write_bytes(b"\x02" * 64)
    compiled, second = assemble()
    assert compiled and second != first[1] and b"\x02" * 64 in second
    (pkg / "src" / "w_params.bin").unlink()       # not found: compiled (and failing), never a hit
    with pytest.raises(Exception):
        assemble()


def link(pkg: Path, extra: tuple[str, ...] = ()) -> tuple[bool, bool, bytes]:
    """Archive f.o and link a program on it, through the cache: (whether ar
    ran, whether the linker ran, the program's bytes)."""
    tc = toolchain.toolchain_for(get_board("host").target)
    build(pkg)
    (pkg / "src" / "main.c").write_text('float f(float);\nint main(void) { return f(4.0f) != 6.0f; }\n')
    (pkg / "lib").mkdir(exist_ok=True)
    (pkg / "bench").mkdir(exist_ok=True)
    [main] = toolchain.compile_sources(tc, pkg, ["src/main.c"], ".build-main")
    archived = objcache.tool_cached(tc.ar, [tc.ar, "rcsD", "lib/libf.a", ".build/f.o"], pkg,
                                    [".build/f.o"], "lib/libf.a",
                                    lambda c: toolchain.run_tool(c, pkg, "archiving"))
    cmd = [tc.cc, *tc.cflags, main, "lib/libf.a", *extra, "-lm", "-o", "bench/prog"]
    linked = objcache.tool_cached(tc.cc, cmd, pkg, [main, "lib/libf.a"], "bench/prog",
                                  lambda c: toolchain.run_tool(c, pkg, "linking"),
                                  link_deps=".build-main/prog.d", executable=True)
    prog = pkg / "bench" / "prog"
    assert prog.stat().st_mode & 0o100 and not (pkg / ".build-main" / "prog.d").exists()
    return archived, linked, prog.read_bytes()


def test_archive_and_link_hits_give_the_tools_bytes(pkg, monkeypatch):
    first = link(pkg)
    assert first[:2] == (True, True)
    again = link(pkg)
    assert again == (False, False, first[2])
    import subprocess
    assert subprocess.run([str(pkg / "bench" / "prog")]).returncode == 0
    monkeypatch.setenv(objcache.ENABLE_ENV, "off")
    assert link(pkg) == (True, True, first[2])


def test_a_library_the_linker_found_is_a_dependency(pkg):
    """A file only the linker's search names (-L/-l) misses when it changes:
    the entry holds the linker's own list of what it read."""
    tc = toolchain.toolchain_for(get_board("host").target)
    (pkg / "extra").mkdir()

    def extra_lib(body: str) -> None:
        (pkg / "src" / "g.c").write_text(body)
        [obj] = toolchain.compile_sources(tc, pkg, ["src/g.c"], ".build-g")
        (pkg / "extra" / "libg.a").unlink(missing_ok=True)
        toolchain.run_tool([tc.ar, "rcsD", "extra/libg.a", obj], pkg, "archiving")

    extra_lib("int g(void) { return 1; }\n")
    flags = ("-Lextra", "-lg")
    assert link(pkg, flags)[2] and not link(pkg, flags)[1]
    extra_lib("int g(void) { return 2; }\n")
    assert link(pkg, flags)[1]


def test_a_changed_file_outside_the_package_misses(pkg, tmp_path):
    """A header outside the package (as the system's are) is recorded by its
    size and modification time: a new version of it misses."""
    import os
    system = tmp_path / "system"
    system.mkdir()
    header = system / "limit.h"
    header.write_text("#define LIMIT 1\n")
    (pkg / "src" / "g.c").write_text('#include "limit.h"\nint g(void) { return LIMIT; }\n')
    tc = toolchain.toolchain_for(get_board("host").target)
    (pkg / ".build").mkdir(exist_ok=True)

    def compile_g() -> tuple[bool, bytes]:
        cmd = [tc.cc, *tc.cflags, f"-I{system}", "-c", "src/g.c", "-o", ".build/g.o"]
        compiled = objcache.compile_cached(tc.cc, cmd, pkg, "src/g.c", ".build/g.o",
                                           lambda c: toolchain.run_tool(c, pkg, "compiling"))
        return compiled, (pkg / ".build" / "g.o").read_bytes()

    first = compile_g()
    assert first[0] and not compile_g()[0]
    before = header.stat().st_mtime_ns
    header.write_text("#define LIMIT 2\n")            # the same size, a later time
    os.utime(header, ns=(before + 10**9, before + 10**9))
    compiled, second = compile_g()
    assert compiled and second != first[1]
    assert not compile_g()[0]
