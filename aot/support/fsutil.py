"""Writing output directories whole or not at all.

A directory is filled under a hidden sibling name that carries the writer's
pid, `.<name>.aot-<pid>-<random>`, and renamed into place. A writer killed
outright (SIGKILL, power loss) leaves that temp behind; the next write into
the same parent directory removes the temps of writers that are no longer
running, and puts back an old directory a killed replace had moved aside.

A new output (no --force) is claimed before the work that fills it: an
exclusive lock on `.<name>.aot.lock` beside it, held until the directory is
in place, so a second writer is refused at its start rather than replacing
the first one's output at its end; and the final rename refuses a directory
that appeared meanwhile by other means. The kernel drops the lock of a
writer that dies; the file itself goes with the next write into the parent.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import glob
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

from aot.errors import AotError, InputError

# `.<target>.aot-<pid>-<mkdtemp suffix>`, plus `.old` (a complete old target
# moved aside during a replace) or `.del` (one being deleted).
# A writer's temp, the old directory it moved aside (.old), and either one
# being deleted (.del; the old one: .old.del, a kill inside _remove(old)).
_TEMP = re.compile(r"^\.(?P<target>.+)\.aot-(?P<pid>\d+)-[a-z0-9_]+(?P<kind>\.old|\.del|\.old\.del)?$")
# The claim on a new output `<target>`; not `.aot-`, so no temp's pattern
# (and no look for a writer's temp) mistakes it for one.
_LOCK = re.compile(r"^\.(?P<target>.+)\.aot\.lock$")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:       # someone else's process: running
        return True
    return True


def remove_stale_temps(parent: Path) -> None:
    """Clean up after writers into `parent` that died: their temps go, and an
    old directory moved aside by an unfinished replace goes back in place
    (if nothing took its place since). Temps of running writers stay."""
    try:
        entries = sorted(parent.iterdir())
    except OSError:
        return
    for path in entries:
        if _LOCK.match(path.name):
            _remove_unheld_lock(path)
            continue
        m = _TEMP.match(path.name)
        if not m or not path.is_dir() or path.is_symlink() or _alive(int(m["pid"])):
            continue
        target = parent / m["target"]
        try:
            if m["kind"] == ".old" and not os.path.lexists(target):
                path.rename(target)
            else:
                _remove(path)
        except OSError:      # another writer got there first, or not ours to touch
            pass


def _remove(path: Path) -> None:
    """Delete `path` (and a `<path>.del` left by an earlier try), renamed to
    `.del` first so a half-deleted directory never carries a name that
    says it is complete."""
    doomed = path if path.name.endswith(".del") else path.with_name(path.name + ".del")
    if path != doomed and os.path.lexists(path):
        path.rename(doomed)
    if doomed.is_dir() and not doomed.is_symlink():
        shutil.rmtree(doomed, ignore_errors=True)
    elif os.path.lexists(doomed):
        doomed.unlink()


def _umask() -> int:
    """The process umask, read without setting it (os.umask would, racing
    other threads); 022 where /proc does not say."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def refuse_existing(target: Path, force: bool) -> None:
    """An AotError if `target` exists and may not be replaced."""
    if os.path.lexists(target) and not force:
        raise InputError(f"{target} already exists (use --force to replace it)")


def refuse_working_directory(target: Path) -> None:
    """An output directory is replaced whole: never the working directory or
    one holding it (`--out . --force` would delete the user's files, and a
    process's own working directory cannot be renamed away)."""
    try:
        here, where = Path.cwd().resolve(), Path(target).resolve()
    except OSError:        # no working directory left to protect
        return
    if where == here or where in here.parents:
        which = "the current directory" if where == here else "a parent of the current directory"
        raise InputError(f"{target} is {which}: aot writes an output directory whole and "
                         "replaces it, so name a new directory (e.g. "
                         f"{Path(target) / 'out'})")


def _lock_path(target: Path) -> Path:
    return target.with_name(f".{target.name}.aot.lock")


@contextlib.contextmanager
def _no_sigint() -> Iterator[None]:
    """SIGINT held back while a lock file is made or removed: a Ctrl-C there
    must leave neither an open lock nor a lock file; it lands just after."""
    if threading.current_thread() is not threading.main_thread():
        yield          # Python runs its handler in the main thread only
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _locked(path: Path) -> int | None:
    """An open fd of `path` (created if absent) holding its exclusive lock,
    or None when another process holds it. A lock taken on a file its holder
    removed meanwhile is let go and taken again on the new file: only the
    file at `path` counts."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            raise InputError(f"{path}: cannot claim the output beside it "
                             f"({e.strerror or e})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            current = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            current = None
        if current is not None and os.path.samestat(os.fstat(fd), current):
            return fd
        os.close(fd)


def _holder(path: Path) -> str:
    """`pid N` of the process a lock file names, as far as it says."""
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return "another process"
    return f"pid {text}" if text.isdigit() else "another process"


def _remove_unheld_lock(path: Path) -> None:
    """Remove a lock file no process holds (its writer died)."""
    if path.is_symlink() or not path.is_file():
        return
    with _no_sigint():
        try:
            fd = _locked(path)
        except AotError:
            return
        if fd is not None:
            path.unlink(missing_ok=True)
            os.close(fd)


# Outputs this thread has claimed: a claim's holder may write the output
# again (aot package claims its directory, then writes it) without a second lock.
_CLAIMS = threading.local()


def _claimed() -> set[str]:
    if not hasattr(_CLAIMS, "paths"):
        _CLAIMS.paths = set()
    return _CLAIMS.paths


@contextlib.contextmanager
def _lock(target: Path, blocking: bool) -> Iterator[None]:
    """Hold the lock on `target` for the block; an InputError at once when
    another process holds it, unless blocking (then wait, Ctrl-C still
    heard)."""
    lock, key, fd = _lock_path(target), os.path.abspath(target), None
    try:
        while True:
            with _no_sigint():     # fd is set before a Ctrl-C can land: the finally frees it
                fd = _locked(lock)
                if fd is not None:
                    os.ftruncate(fd, 0)
                    os.write(fd, f"{os.getpid()}\n".encode())
            if fd is not None or not blocking:
                break
            time.sleep(0.05)
        if fd is None:
            raise InputError(f"{target} is being written by another aot run "
                             f"({_holder(lock)}): wait for it to finish, or write to another "
                             "directory")
        _claimed().add(key)
        yield
    finally:
        _claimed().discard(key)
        if fd is not None:
            with _no_sigint():
                lock.unlink(missing_ok=True)     # before the lock goes: no one takes a dead file
                os.close(fd)


@contextlib.contextmanager
def claim_output(target: str | Path | None, force: bool) -> Iterator[None]:
    """Reserve the output directory `target` (None: nothing) for the block,
    before the slow work that fills it: refused at once if it exists and
    may not be replaced, or if another aot run is writing it. With force
    nothing is reserved: the write replaces whatever is there at its end."""
    if target is None:
        yield
        return
    target = Path(target)
    refuse_working_directory(target)
    if force or os.path.abspath(target) in _claimed():
        yield
        return
    refuse_existing(target, force)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(target.parent)
    refuse_existing(target, force)     # an old one just put back
    with _lock(target, blocking=False):
        refuse_existing(target, force)     # finished by another run before the lock was ours
        yield


_RENAME_NOREPLACE = 1
_LIBC = ctypes.CDLL(None, use_errno=True)
_AT_FDCWD = -100


def _rename_new(src: Path, dst: Path) -> None:
    """Rename `src` to `dst`, refused (FileExistsError) if `dst` exists: a
    plain rename would replace an empty directory silently."""
    renameat2 = getattr(_LIBC, "renameat2", None)
    if renameat2 is not None:
        if renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst),
                     _RENAME_NOREPLACE) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS):    # a file system without the flag
            raise OSError(code, os.strerror(code), str(dst))
    if os.path.lexists(dst):       # check, then rename: the best without renameat2
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(dst))
    src.rename(dst)


def write_dir_atomically(target: Path, fill: Callable[[Path], None], force: bool,
                         private: bool = False) -> None:
    """Create `target` whole or not at all: fill a sibling temp dir, then rename.

    Guarantee, whatever stops this (an exception, Ctrl-C, SIGKILL at any
    instant): `target` is absent, the old complete directory, or the new
    complete one, never a mix. Replacing (force) takes two renames,
    target -> `<temp>.old` then temp -> target; in between `target` is
    absent. An exception or Ctrl-C there renames the old one back; a
    SIGKILL there leaves it complete under the `.old` name, and the next
    write into the same parent puts it back (remove_stale_temps).

    Without force, `target` is claimed for the whole write (claim_output;
    a caller may have claimed it already) and the final rename refuses a
    directory that appeared meanwhile. With force, writers into the same
    target take turns at the renames (a lock held only for them).

    `private`: the directory stays 0700, as mkdtemp made it (it holds keys).
    """
    target = Path(target)
    with claim_output(target, force):
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(target.parent)
        refuse_existing(target, force)     # an old one just put back
        _write_dir(target, fill, force, private)


def _write_dir(target: Path, fill: Callable[[Path], None], force: bool, private: bool) -> None:
    # Made inside the try: a Ctrl-C just after mkdtemp must not leave it.
    # The cleanup finds it by this process's prefix, whether or not the
    # name was returned yet.
    prefix = f".{target.name}.aot-{os.getpid()}-"
    old = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
        old = tmp.with_name(tmp.name + ".old")
        fill(tmp)
        if not private:
            tmp.chmod(0o777 & ~_umask())     # mkdtemp makes it private: as mkdir would
        if force:
            with _lock(target, blocking=True):
                if os.path.lexists(target):
                    target.rename(old)
                tmp.rename(target)
        else:
            try:
                _rename_new(tmp, target)
            except FileExistsError:
                raise InputError(f"{target} appeared while aot was writing it (use --force "
                                 "to replace it)") from None
    except BaseException:
        if old is not None and os.path.lexists(old) and not os.path.lexists(target):
            old.rename(target)           # roll the replace back
        _remove_temps(target, prefix)
        raise
    try:
        _remove(old)
    except KeyboardInterrupt:    # the new one is in place: finish tidying, then stop
        _remove(old)
        raise


def _remove_temps(target: Path, prefix: str) -> None:
    """This writer's temps (not an old directory it moved aside)."""
    for temp in target.parent.glob(glob.escape(prefix) + "*"):
        if not temp.name.endswith(".old"):
            _remove(temp)


def write_file_atomically(target: Path, data: bytes | Sequence[bytes]) -> None:
    """`data` (bytes, or parts written one after the other) as the file
    `target`, whole or not at all: written to a hidden temp beside it
    (mkstemp: a name no other writer has) and renamed over it."""
    target = Path(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.aot-", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            for part in ((data,) if isinstance(data, (bytes, bytearray, memoryview)) else data):
                f.write(part)
        os.chmod(tmp, 0o666 & ~_umask())      # mkstemp makes it 0600: as open() would
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_output_file(path: str | Path, option: str, suffix: str | None = None,
                      kind: str = "") -> Path:
    """The file an option names, checked before the work it is written after:
    not a directory, in a directory that exists, named `suffix` if given
    (`kind` says so when it is not: "the chart is a PNG file")."""
    path = Path(path)
    if suffix is not None and path.suffix.lower() != suffix:
        raise InputError(f"{option} {path}: {kind} (name it {suffix})")
    if path.is_dir():
        raise InputError(f"{option} {path}: is a directory, not a file name")
    if not path.parent.is_dir():
        raise InputError(f"{option} {path}: directory {path.parent} does not exist")
    return path
