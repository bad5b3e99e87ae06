"""Targets (an ISA and how to compile for it) and boards (a target plus how
to reach it), read from targets/*.toml and boards/*.toml."""
from __future__ import annotations

import difflib
import os
import tomllib
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from aot import config_schema
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
    # The LLVM codegen's speed level (0-3); None: the C build's, from cflags.
    llvm_opt_level: int | None = None

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
    # The board's [options] table, read by its transport (which emulator, which
    # CPU, which machine): each transport documents the keys it takes.
    options: Mapping[str, Any] = field(default_factory=dict)
    # Emulated boards run the code, but their timings measure nothing real.
    emulated: bool = False
    # Bare-metal boards' [firmware] table: what turns the harness into a
    # program for the board (start-up `sources`, `linker_script`, `ldflags`;
    # paths in the package, copied from aot's runtime_c/). Empty: hosted.
    firmware: Mapping[str, Any] = field(default_factory=dict)


# Extra directories of board descriptions (os.pathsep-separated), read after
# aot's own boards/: a user's boards, or a test's board with a small flash.
BOARDS_ENV = "AOT_BOARDS_DIR"


def _read(kind: str, extra_dirs: tuple[str, ...] = ()) -> dict[str, dict]:
    check = config_schema.check_board if kind == "boards" else config_schema.check_target
    out = {}
    for d in (data_dir(kind), *map(Path, extra_dirs)):
        for p in sorted(d.glob("*.toml")):
            try:
                out[p.stem] = tomllib.loads(p.read_text())
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
                raise AotError(f"{p}: not a valid description ({e})") from None
            check(p, out[p.stem])
    return out


def _resolved(name: str, raw: dict[str, dict], seen: tuple[str, ...] = ()) -> dict:
    """A target description with its `base` filled in: a variant file names
    its base target and restates only what differs (usually `cpu`)."""
    t = raw[name]
    if "base" not in t:
        return t
    base = t["base"]
    if base in seen or base not in raw:
        raise AotError(f"target '{name}': base '{base}' is "
                       f"{'circular' if base in seen else 'unknown'}")
    return {**_resolved(base, raw, (*seen, name)), **{k: v for k, v in t.items() if k != "base"}}


def _flags(t: dict, key: str) -> tuple[str, ...]:
    """cflags/ldflags with {cpu} replaced, so a variant's cpu reaches -mcpu."""
    return tuple(f.replace("{cpu}", t["cpu"]) for f in t.get(key, ()))


@lru_cache(maxsize=None)
def targets() -> dict[str, Target]:
    raw = _read("targets")
    out = {}
    for name in raw:
        t = _resolved(name, raw)
        try:
            out[name] = Target(name=t["name"], triple=t["triple"], cpu=t["cpu"],
                               features=t.get("features", ""), vector_bits=int(t["vector_bits"]),
                               float_abi=t.get("float_abi", "hard"), cc=t["cc"],
                               cflags=_flags(t, "cflags"), ldflags=_flags(t, "ldflags"),
                               libc=t.get("libc", "glibc"),
                               llvm_opt_level=t.get("llvm_opt_level"))
        except KeyError as e:
            raise AotError(f"target '{name}': missing {e}") from None
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
        if b.get("target") not in known:
            raise AotError(f"board '{name}': unknown target '{b.get('target')}' "
                           f"(known: {', '.join(sorted(known))})")
        try:
            out[name] = Board(name=b["name"], target=known[b["target"]],
                              transport=b["transport"], description=b.get("description", ""),
                              flash_bytes=int(b["flash_bytes"]), ram_bytes=int(b["ram_bytes"]),
                              options=dict(b.get("options", {})),
                              emulated=bool(b.get("emulated", False)),
                              firmware=dict(b.get("firmware", {})))
        except KeyError as e:
            raise AotError(f"board '{name}': missing or unknown {e}") from None
    return out


def get_target(name: str) -> Target:
    try:
        return targets()[name]
    except KeyError:
        raise AotError(f"unknown target '{name}' (known: {', '.join(sorted(targets()))})") from None


# The board when none is named (CLI and Python API alike): the emulated Pi 4
# (aot boots it), unless $AOT_BOARD names another.
DEFAULT_BOARD = "qemu-rpi4"
DEFAULT_BOARD_ENV = "AOT_BOARD"


def default_board_name() -> str:
    return os.environ.get(DEFAULT_BOARD_ENV) or DEFAULT_BOARD


def get_board(name: str | Board | None = None) -> Board:
    """A board by name (None: the default board), with the user's config
    file merged into its options (a Board, e.g. one with command-line
    overrides, is returned as is)."""
    if isinstance(name, Board):
        return name
    name = default_board_name() if name is None else name
    known = boards()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise AotError(f"unknown board '{name}' ({hint}known: {', '.join(sorted(known))})")
    return with_options(known[name], **user_options(name))


def with_options(board: Board, **overrides: Any) -> Board:
    """The board with `overrides` merged over its options; None means "not
    given" (an unset command-line option), so it never hides a default."""
    given = {k: v for k, v in overrides.items() if v is not None}
    if not given:
        return board
    return replace(board, options={**board.options, **given})


# --- the per-user config file -------------------------------------------------

# How to reach the user's own boards (host, key, ...) without typing them on
# every command: a TOML table per board name, merged over the board's
# defaults and under the command line's options.
#
#     [rpi4]
#     host = "192.168.1.42"
#     key = "~/.ssh/id_ed25519"
CONFIG_ENV = "AOT_CONFIG"
CONFIG_KEYS = tuple(config_schema.CONFIG)


def config_path() -> Path:
    """$AOT_CONFIG, else ~/.config/aot/boards.toml."""
    env = os.environ.get(CONFIG_ENV)
    return Path(env).expanduser() if env else Path.home() / ".config" / "aot" / "boards.toml"


def user_options(board_name: str) -> dict[str, Any]:
    """The config file's table for `board_name` (empty without a file or table)."""
    path = config_path()
    if not path.is_file():
        if os.environ.get(CONFIG_ENV):
            raise AotError(f"${CONFIG_ENV} names {path}, which is not a file")
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise AotError(f"{path}: not a valid config file ({e})") from None
    config_schema.check_config(path, data)      # every table: a typo anywhere shows
    return dict(data.get(board_name, {}))


def option_number(board: Board, key: str, default, kind, low, high):
    """A numeric entry of the board's [options] table (or its default), checked:
    of type `kind` (not a bool) and within low..high."""
    value = board.options.get(key, default)
    try:
        if isinstance(value, bool):
            raise ValueError
        number = kind(value)
    except (TypeError, ValueError):
        raise AotError(f"board '{board.name}': {key} must be a number, got {value!r}") from None
    if not low <= number <= high:
        raise AotError(f"board '{board.name}': {key} must be within {low}..{high}, got {value!r}")
    return number


def option_bool(board: Board, key: str, default: bool) -> bool:
    """A true/false entry of the board's options, checked: `bool("false")`
    is True, so a string must not pass (an override from Python may be one)."""
    value = board.options.get(key, default)
    if not isinstance(value, bool):
        raise AotError(f"board '{board.name}': {key} must be a boolean, "
                       f"got {config_schema.type_name(value)}")
    return value


def option_str(board: Board, key: str, default: str, path: bool = False) -> str:
    """A text entry of the board's options (None or "": the default), checked;
    a path may also be a Path (from Python)."""
    value = board.options.get(key)
    if value is None or value == "":
        return default
    if path and isinstance(value, os.PathLike):
        return os.fspath(value)
    if not isinstance(value, str):
        raise AotError(f"board '{board.name}': {key} must be a string, "
                       f"got {config_schema.type_name(value)}")
    return value
