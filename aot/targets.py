"""Targets (an ISA and how to compile for it) and boards (a target plus how
to reach it), read from targets/*.toml and boards/*.toml."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache

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


def _read(kind: str) -> dict[str, dict]:
    return {p.stem: tomllib.loads(p.read_text()) for p in sorted(data_dir(kind).glob("*.toml"))}


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


@lru_cache(maxsize=None)
def boards() -> dict[str, Board]:
    known = targets()
    out = {}
    for name, b in _read("boards").items():
        out[name] = Board(name=b["name"], target=known[b["target"]], transport=b["transport"],
                          description=b.get("description", ""),
                          flash_bytes=int(b["flash_bytes"]), ram_bytes=int(b["ram_bytes"]))
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
