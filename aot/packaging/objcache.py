"""Compiled objects kept by content, so that packaging the same model again,
or a model sharing a kernel file, tuning trials alike, runs no compiler
for what was compiled before.

The cache is `objects/` under $AOT_CACHE_DIR (else ~/.cache/aot); setting
AOT_OBJECT_CACHE=off compiles everything every time. An entry is found by
a key, the sha256 of:

- the compiler: its resolved path, size and modification time (an upgraded
  compiler is another compiler; ccache's default check);
- the command line, the package directory's own path taken out (the
  object does not hold it: -ffile-prefix-map maps it to ".");
- the compiler's environment variables that change what it reads (CPATH, ...);
- the source's path and bytes, and the names of the package's headers (a
  header that could shadow another on the include path changes the key);
- the bytes of every file an assembler source pulls in with `.incbin` (the
  weights blob): the compiler's -MD list names only what the preprocessor
  read, so without them two models of one shape would share an object.

The entry records every file the compile read (the compiler's -MD list: the
package's headers and the system's) and the object's sha256: a file of the
package by its sha256, a file outside it (a system header, the C library)
by its size and modification time, as the compiler is (a package holds
~30 system headers an object and links ~13 MB of system libraries:
hashing them cost each warm package ~10 ms). A hit needs each of those
files to be as recorded and the object to hash to its record; anything
else (a changed header, an upgraded library, an entry cut short,
altered or unreadable) is a miss: the source is compiled and the entry
written again. Entries are written to a temporary file and renamed, so a
reader sees a whole entry or none, and two writers of one key write the
same bytes. The object is the compiler's output byte for byte, and a
compile is deterministic (same command and files, same bytes), so a
package built from the cache is the package built without it.

The same entries keep the package's archive and its hosted harness
(`tool_cached`): a warm package then spawns no tool at all. Their key is
the tool, the command and the bytes of each package file the command names
as an input; the harness's entry also records every file the linker read
(its `--dependency-file`: the C library, crt objects, libgcc), as a
compile's entry records the headers.

The entries not used for longest are removed when the cache passes
AOT_OBJECT_CACHE_MB (default 512) megabytes, down to three quarters of it.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Callable, Sequence

from aot.support.cachedir import cache_root
from aot.support.fsutil import write_file_atomically

ENABLE_ENV = "AOT_OBJECT_CACHE"
LIMIT_ENV = "AOT_OBJECT_CACHE_MB"
DEFAULT_LIMIT_MB = 512
# The entry format, also hashed into every key: an aot that records its
# files otherwise (sha256 against size and time) keeps entries of its own
# instead of rewriting those of another sharing the cache, and each other's.
MAGIC = b"aot-object-2\n"
HEADER_DIRS = ("include", "runtime_c", "src")
PKG_PLACEHOLDER = "<pkg>"
# The compiler's environment that can change what it reads or writes.
COMPILER_ENV = ("CPATH", "C_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH",
                "LIBRARY_PATH", "SOURCE_DATE_EPOCH")


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "").strip().lower() not in ("off", "0", "no", "false")


def cache_dir() -> Path:
    return cache_root() / "objects"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def compiler_identity(cc: str) -> list:
    """What tells one compiler from another without running it."""
    path = os.path.realpath(cc)
    st = os.stat(path)
    return [path, st.st_size, st.st_mtime_ns]


def headers(pkg: Path) -> list[str]:
    """The package's header file names, where the include path searches."""
    return sorted(f"{d}/{p.name}" for d in HEADER_DIRS if (pkg / d).is_dir()
                  for p in (pkg / d).iterdir() if p.suffix == ".h")


INCBIN = re.compile(rb'\.incbin\s+"([^"]+)"')


def incbin_files(pkg: Path, src: str, source: bytes) -> list[Path] | None:
    """The files `source` pulls in with .incbin, where the assembler finds
    them (beside the source, the package's src/, the package); None if one
    is not found, so that the source is compiled, never cached."""
    found = []
    for name in sorted(set(INCBIN.findall(source))):
        where = [d / name.decode() for d in (pkg / Path(src).parent, pkg / "src", pkg)]
        hit = next((f for f in where if f.is_file()), None)
        if hit is None:
            return None
        found.append(hit)
    return found


def key(cc: str, cmd: Sequence[str], pkg: Path, src: str) -> str | None:
    """The entry's name for compiling `src` (relative to pkg) with `cmd`;
    None where the inputs cannot all be named (an .incbin not found)."""
    identity, words, env = _command(cc, cmd, pkg)
    text = json.dumps([identity, words, src, headers(pkg), env], sort_keys=True)
    digest = hashlib.sha256(MAGIC + text.encode())
    source = (pkg / src).read_bytes()
    digest.update(source)
    blobs = incbin_files(pkg, src, source)
    if blobs is None:
        return None
    for blob in blobs:
        _add_file(digest, pkg, str(blob.relative_to(pkg)))
    return digest.hexdigest()


def _command(tool: str, cmd: Sequence[str], pkg: Path) -> tuple[str, list[str], dict]:
    """What of running `cmd` in pkg names its output: the tool's identity,
    the command with the package's own path taken out, and the tool's
    environment (COMPILER_ENV)."""
    root = str(pkg.resolve())
    return (compiler_identity(tool), [w.replace(root, PKG_PLACEHOLDER) for w in cmd],
            {v: os.environ[v] for v in COMPILER_ENV if v in os.environ})


def _add_file(digest, pkg: Path, name: str) -> None:
    """A package file's name and bytes into a key's digest."""
    with open(pkg / name, "rb") as f:         # in blocks: a weights blob is megabytes
        digest.update(name.encode() + b"\0")
        digest.update(hashlib.file_digest(f, "sha256").digest())


def entry_path(k: str) -> Path:
    return cache_dir() / k[:2] / k


def _file_hash(pkg: Path, dep: str) -> str | None:
    try:
        with open(pkg / dep, "rb") as f:     # in blocks: a weights blob is megabytes
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None


def _fingerprint(pkg: Path, dep: str) -> str | None:
    """What an entry records of a file its making read (None: unreadable):
    a file outside the package by its size and modification time, one of
    the package by its sha256."""
    path = Path(dep)
    if path.is_absolute() and not path.is_relative_to(pkg.resolve()):
        try:
            st = os.stat(path)
        except OSError:
            return None
        return f"stat:{st.st_size}:{st.st_mtime_ns}"
    return _file_hash(pkg, dep)


def lookup(k: str, pkg: Path) -> memoryview | None:
    """The cached object of key k if its entry is whole and every file the
    compile read is as it was; else None."""
    path = entry_path(k)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    end = data.find(b"\n", len(MAGIC))
    if not data.startswith(MAGIC) or end < 0:
        return None
    head, obj = data[len(MAGIC):end], memoryview(data)[end + 1:]    # no copy of the object
    try:
        manifest = json.loads(head)
        deps, want = manifest["deps"], manifest["object"]
        if _sha256(obj) != want or any(_fingerprint(pkg, d) != h for d, h in deps):
            return None
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    try:
        os.utime(path)        # recently used: kept longest when the cache is trimmed
    except OSError:
        pass
    return obj


def read_deps(depfile: Path) -> list[str] | None:
    """The files a `-MD -MF depfile` compile read; None if the list is not
    one this parser is sure of (an escaped space, an empty list)."""
    try:
        text = depfile.read_text()
    except (OSError, UnicodeDecodeError):
        return None
    text = text.replace("\\\n", " ")
    if "\\" in text or "$$" in text:
        return None
    _, sep, rest = text.partition(": ")
    deps = [d for d in rest.split() if not d.endswith(":")]
    return deps if sep and deps else None


def store(k: str, pkg: Path, obj: Path, deps: Sequence[str]) -> None:
    """Keep obj under key k with the files (relative to pkg, or absolute)
    its making read; a cache that cannot be written (read-only, full) is
    left as it is."""
    hashed = [[d, _fingerprint(pkg, d)] for d in sorted(set(deps))]
    if any(h is None for _, h in hashed):
        return
    data = obj.read_bytes()
    head = json.dumps({"deps": hashed, "object": _sha256(data)}, sort_keys=True,
                      separators=(",", ":"))
    path = entry_path(k)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomically(path, (MAGIC, head.encode(), b"\n", data))
    except OSError:
        pass


def limit_bytes() -> int:
    try:
        return int(float(os.environ.get(LIMIT_ENV, DEFAULT_LIMIT_MB)) * (1 << 20))
    except ValueError:
        return DEFAULT_LIMIT_MB << 20


def trim(limit: int | None = None) -> None:
    """Remove the least recently used entries while the cache is larger
    than `limit` bytes, down to three quarters of it."""
    limit = limit_bytes() if limit is None else limit
    entries = []
    for sub in (cache_dir().iterdir() if cache_dir().is_dir() else ()):
        for p in (sub.iterdir() if sub.is_dir() else ()):
            try:
                st = p.stat()
            except OSError:
                continue
            entries.append((st.st_mtime_ns, st.st_size, p))
    total = sum(size for _, size, _ in entries)
    if total <= limit:
        return
    for _, size, p in sorted(entries, key=lambda e: (e[0], e[2].name)):
        if total <= limit * 3 // 4:
            break
        p.unlink(missing_ok=True)
        total -= size


def compile_cached(cc: str, cmd: Sequence[str], pkg: Path, src: str, obj: str,
                   run: Callable[[Sequence[str]], object]) -> bool:
    """Put the object of `cmd` (which compiles src into obj, both relative
    to pkg) at pkg/obj, from the cache or by running `run(cmd)` with a
    dependency list added and keeping the result; True if it was compiled."""
    if not enabled():
        run(cmd)
        return True
    k = key(cc, cmd, pkg, src)
    if k is None:
        run(cmd)
        return True
    cached = lookup(k, pkg)
    if cached is not None:
        (pkg / obj).write_bytes(cached)
        return False
    depfile = f"{obj}.d"
    run([*cmd, "-MD", "-MF", depfile])
    deps = read_deps(pkg / depfile)
    if deps is not None:
        store(k, pkg, pkg / obj, deps)
    return True


def tool_key(tool: str, cmd: Sequence[str], pkg: Path, inputs: Sequence[str]) -> str:
    """The entry's name for running `cmd` in pkg: the tool, the command
    (the package's own path taken out) and each input's name and bytes."""
    digest = hashlib.sha256(MAGIC + json.dumps(list(_command(tool, cmd, pkg)),
                                               sort_keys=True).encode())
    for name in inputs:
        _add_file(digest, pkg, name)
    return digest.hexdigest()


def tool_cached(tool: str, cmd: Sequence[str], pkg: Path, inputs: Sequence[str], out: str,
                run: Callable[[Sequence[str]], object], link_deps: str | None = None,
                executable: bool = False) -> bool:
    """Put the file `cmd` makes at pkg/out (archiving or linking the package
    files `inputs`, all relative to pkg) from the cache, or by running
    `run(cmd)` and keeping the result; True if it was run. link_deps: `cmd`
    links through the compiler driver, and the linker lists the files it
    read besides `inputs` in this file (--dependency-file; removed after),
    stored with the entry; executable: a hit gets the mode a linker gives."""
    if not enabled():
        run(cmd)
        return True
    k = tool_key(tool, cmd, pkg, inputs)
    cached = lookup(k, pkg)
    target = pkg / out
    if cached is not None:
        target.unlink(missing_ok=True)
        target.write_bytes(cached)
        os.chmod(target, _tool_mode(executable))
        return False
    if link_deps is None:
        run(cmd)
        deps: list[str] | None = []
    else:
        run([*cmd, f"-Wl,--dependency-file={link_deps}"])
        deps = read_deps(pkg / link_deps)
        (pkg / link_deps).unlink(missing_ok=True)
    if deps is not None:
        store(k, pkg, target, [d for d in deps if d not in inputs])
    return True


def _tool_mode(executable: bool) -> int:
    """The mode a tool gives the file it creates under this process's umask."""
    mask = os.umask(0)
    os.umask(mask)
    return (0o777 if executable else 0o666) & ~mask
