"""The installed version of a Python distribution, read from its
`.dist-info` directory on sys.path: importlib.metadata costs every package
a 15 ms import (its email parser) to read two version lines."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

_SEPARATORS = re.compile(r"[-_.]+")


def _normalized(name: str) -> str:
    """A distribution name as its .dist-info directory spells it (PEP 503
    normalization, `-` written `_`)."""
    return _SEPARATORS.sub("_", name).lower()


def _metadata_version(path: Path) -> str | None:
    """The `Version:` field of a METADATA file's header, None if it has none."""
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    return None           # the header ends: the body is free text
                if line.startswith("Version:"):
                    return line[len("Version:"):].strip()
    except (OSError, UnicodeDecodeError):
        return None
    return None


def version(name: str) -> str | None:
    """The version of distribution `name` as importlib.metadata.version
    gives it (the first found along sys.path), None if not installed. A
    layout this does not read (an .egg-info, a zip, a finder of its own)
    is asked of importlib.metadata."""
    wanted = _normalized(name)
    for entry in sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for n in names:
            stem, dot, kind = n.rpartition(".")
            if kind not in ("dist-info", "egg-info") or _normalized(stem.partition("-")[0]) != wanted:
                continue
            found = (_metadata_version(Path(entry or ".") / n / "METADATA")
                     if kind == "dist-info" else None)
            if found is None:
                return _from_importlib(name)
            return found
    return _from_importlib(name)


def _from_importlib(name: str) -> str | None:
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
