"""Writing output directories whole or not at all.

A directory is filled under a hidden sibling name that carries the writer's
pid, `.<name>.aot-<pid>-<random>`, and renamed into place. A writer killed
outright (SIGKILL, power loss) leaves that temp behind; the next write into
the same parent directory removes the temps of writers that are no longer
running, and puts back an old directory a killed replace had moved aside.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from aot.errors import AotError, InputError

# `.<target>.aot-<pid>-<mkdtemp suffix>`, plus `.old` (a complete old target
# moved aside during a replace) or `.del` (one being deleted).
# A writer's temp, the old directory it moved aside (.old), and either one
# being deleted (.del; the old one: .old.del, a kill inside _remove(old)).
_TEMP = re.compile(r"^\.(?P<target>.+)\.aot-(?P<pid>\d+)-[a-z0-9_]+(?P<kind>\.old|\.del|\.old\.del)?$")


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
    """An AotError if `target` exists and may not be replaced; callers check
    early, before slow work, and write_dir_atomically checks again."""
    if os.path.lexists(target) and not force:
        raise InputError(f"{target} already exists (use --force to replace it)")


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

    `private`: the directory stays 0700, as mkdtemp made it (it holds keys).
    """
    target = Path(target)
    refuse_existing(target, force)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(target.parent)
    refuse_existing(target, force)     # an old one just put back
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
        if os.path.lexists(target):
            target.rename(old)
        tmp.rename(target)
    except BaseException:
        if old is not None and os.path.lexists(old) and not os.path.lexists(target):
            old.rename(target)           # roll the replace back
        for temp in target.parent.glob(glob.escape(prefix) + "*"):
            if not temp.name.endswith(".old"):
                _remove(temp)
        raise
    try:
        _remove(old)
    except KeyboardInterrupt:    # the new one is in place: finish tidying, then stop
        _remove(old)
        raise


def write_file_atomically(target: Path, data: bytes) -> None:
    """`data` as the file `target`, whole or not at all: written to a hidden
    temp beside it (mkstemp: a name no other writer has) and renamed over it."""
    target = Path(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.aot-", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
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
