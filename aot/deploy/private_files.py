"""Files only their owner may read: private keys, and the VM image whose
initramfs holds the guest's private host key.

A file is created 0600 from the start (tempfile.mkstemp: os.open with
O_EXCL and mode 0600, under a temp name in the same directory, then renamed
into place): a file written 0644 and chmodded afterwards can be opened by
another user in between, and the open file stays theirs after the chmod.
Directories are made 0700 level by level (Path.mkdir(parents=True) makes
the parents 0777 & ~umask).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

DIR_MODE = 0o700


def private_dir(path: Path) -> Path:
    """`path` and any missing parents, created 0700; an existing directory
    is left as it is."""
    path = Path(path)
    missing = []
    for p in (path, *path.parents):
        if p.is_dir():
            break
        missing.append(p)
    for p in reversed(missing):
        try:
            p.mkdir(mode=DIR_MODE)
        except FileExistsError:     # another process made it meanwhile
            if not p.is_dir():
                raise
    return path


def write_private(path: Path, data: bytes) -> None:
    """`data` as the file `path`, mode 0600 from its creation on (mkstemp:
    O_EXCL and mode 0600 in one open), replacing the file whole."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
