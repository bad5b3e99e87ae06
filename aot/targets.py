"""Targets (an ISA and how to compile for it) and boards (a target plus how
to reach it), read from targets/*.toml and boards/*.toml."""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from aot.errors import AotError
from aot.resources import data_dir


@dataclass(frozen=True)
class Target:
    name: str
    triple: str
    cpu: str
    features: str
    vector_bits: int          # 0: no vector unit worth using
    float_abi: str
    cc: str
    cflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    libc: str

    def lanes(self, bits: int) -> int:
        """Vector lanes for elements of `bits` bits (1 without a vector unit)."""
        return max(1, self.vector_bits // bits)


@dataclass(frozen=True)
class Board:
    name: str
    target: Target
    transport: str
    description: str
    flash_bytes: int
    ram_bytes: int


# Extra directories of board descriptions (os.pathsep-separated), read after
# aot's own boards/: a user's boards, or a test's board with a small flash.
BOARDS_ENV = "AOT_BOARDS_DIR"


def _read(kind: str, extra_dirs: tuple[str, ...] = ()) -> dict[str, dict]:
    out = {}
    for d in (data_dir(kind), *map(Path, extra_dirs)):
        for p in sorted(d.glob("*.toml")):
            try:
                out[p.stem] = tomllib.loads(p.read_text())
            except (OSError, tomllib.TOMLDecodeError) as e:
                raise AotError(f"{p}: not a valid description ({e})") from None
    return out


@lru_cache(maxsize=None)
def targets() -> dict[str, Target]:
    out = {}
    for name, t in _read("targets").items():
        out[name] = Target(name=t["name"], triple=t["triple"], cpu=t["cpu"],
                           features=t.get("features", ""), vector_bits=int(t["vector_bits"]),
                           float_abi=t.get("float_abi", "hard"), cc=t["cc"],
                           cflags=tuple(t.get("cflags", ())), ldflags=tuple(t.get("ldflags", ())),
                           libc=t.get("libc", "glibc"))
    return out


def boards() -> dict[str, Board]:
    """aot's boards, then those in $AOT_BOARDS_DIR (which may replace them)."""
    extra = os.environ.get(BOARDS_ENV, "")
    return _boards(tuple(d for d in extra.split(os.pathsep) if d))


@lru_cache(maxsize=None)
def _boards(extra_dirs: tuple[str, ...]) -> dict[str, Board]:
    known = targets()
    out = {}
    for name, b in _read("boards", extra_dirs).items():
        try:
            out[name] = Board(name=b["name"], target=known[b["target"]],
                              transport=b["transport"], description=b.get("description", ""),
                              flash_bytes=int(b["flash_bytes"]), ram_bytes=int(b["ram_bytes"]))
        except KeyError as e:
            raise AotError(f"board '{name}': missing or unknown {e}") from None
    return out


def get_target(name: str) -> Target:
    try:
        return targets()[name]
    except KeyError:
        raise AotError(f"unknown target '{name}' (known: {', '.join(sorted(targets()))})") from None


def get_board(name: str) -> Board:
    try:
        return boards()[name]
    except KeyError:
        raise AotError(f"unknown board '{name}' (known: {', '.join(sorted(boards()))})") from None
