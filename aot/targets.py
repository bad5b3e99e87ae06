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

from aot.support import config_schema
from aot.errors import AotError
from aot.support.gcc_pin import GccPin, check as check_pin
from aot.support.resources import data_dir


# Architectures named with a big-endian suffix (aarch64_be, armeb, thumbeb, mips...).
_BIG_ENDIAN = ("_be", "eb", "mips", "mips64", "powerpc", "powerpc64", "s390x", "sparc", "sparcv9")

# The ISA family of a triple's first part, by prefix (longest first).
_ARCH_PREFIXES = (("x86_64", "x86_64"), ("i386", "x86"), ("i686", "x86"), ("aarch64", "aarch64"),
                  ("arm64", "aarch64"), ("thumb", "thumb"), ("arm", "arm"),
                  ("riscv64", "riscv64"), ("riscv32", "riscv32"))

# What an x86-64 micro-architecture level promises (the psABI's levels), so a
# target naming only `cpu = "x86-64-v3"` still has its AVX2.
_X86_LEVELS = {
    "x86-64-v2": ("sse3", "ssse3", "sse4.1", "sse4.2", "popcnt"),
    "x86-64-v3": ("sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "avx", "avx2", "fma", "bmi2"),
    "x86-64-v4": ("sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "avx", "avx2", "fma", "bmi2",
                  "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"),
}
# What every core of an architecture has (x86-64's baseline; AArch64's Advanced SIMD).
_ARCH_BASELINE = {"x86_64": ("sse", "sse2"), "aarch64": ("neon",)}
# Vector registers by ISA family (architectural, not counting masks).
_VECTOR_REGISTERS = {"x86_64": 16, "x86": 8, "aarch64": 32, "arm": 16, "riscv64": 32}


def arch_of(triple: str) -> str:
    """The ISA family of a target triple: x86_64, aarch64, arm, thumb, riscv64..."""
    head = triple.split("-")[0]
    return next((arch for prefix, arch in _ARCH_PREFIXES if head.startswith(prefix)), head)


def isa_features_of(arch: str, cpu: str, features: str,
                    declared: frozenset[str] = frozenset()) -> frozenset[str]:
    """The LLVM feature string's `+x` (less its `-x`), what the cpu's x86-64
    level and the architecture promise, and what the TOML declares."""
    items = [f.strip() for f in features.split(",") if f.strip()]
    on = {f[1:] for f in items if f.startswith("+")}
    off = {f[1:] for f in items if f.startswith("-")}
    implied = {*_X86_LEVELS.get(cpu, ()), *_ARCH_BASELINE.get(arch, ())}
    return frozenset((on | implied | declared) - off)


def _abi(arch: str, isa: frozenset[str]) -> str:
    """RISC-V spells its float ABI as an ABI name: the C compiler's default is
    lp64d / ilp32f when the D / F extension is there. Empty elsewhere."""
    if arch not in ("riscv64", "riscv32"):
        return ""
    base = "lp64" if arch == "riscv64" else "ilp32"
    return base + ("d" if "d" in isa else "f" if "f" in isa else "")


@dataclass(frozen=True)
class Target:
    name: str
    triple: str
    cpu: str
    features: str             # LLVM's feature string, handed to it as is
    vector_bits: int          # 0: no vector unit worth using
    float_abi: str
    cc: str
    cflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    libc: str
    # The LLVM codegen's speed level (0-3); None: the C build's, from cflags.
    llvm_opt_level: int | None = None
    # The code and static data a program may have: what the code model's
    # instructions address (0: no limit but the board's memories, bare metal).
    static_data_bytes: int = 0
    # What the TOML states that the triple, cpu and features do not say
    # (`isa_features`, `vector_registers`, `abi`): merged into the facts below.
    declared_features: frozenset[str] = frozenset()
    declared_registers: int | None = None
    declared_abi: str = ""
    # The GCC installation and C library clang builds with (in cflags and
    # ldflags already; kept for `aot doctor`): aot/support/gcc_pin.py.
    gcc_pin: GccPin = GccPin("", "")
    # The facts every decision reads, derived once (and again by
    # dataclasses.replace, which re-runs __post_init__).
    arch: str = field(init=False)                       # x86_64, aarch64, arm, thumb, riscv64
    isa_features: frozenset[str] = field(init=False)    # avx2, avx512bw, neon, dotprod, dsp...
    vector_registers: int = field(init=False)           # 0 without a vector unit
    little_endian: bool = field(init=False)
    abi: str = field(init=False)                        # LLVM's ABI name (RISC-V), or ""

    def __post_init__(self):
        arch = arch_of(self.triple)
        isa = isa_features_of(arch, self.cpu, self.features, frozenset(self.declared_features))
        regs = self.declared_registers
        if regs is None:
            regs = 0 if self.vector_bits == 0 else \
                32 if arch == "x86_64" and "avx512f" in isa else _VECTOR_REGISTERS.get(arch, 16)
        facts = {"arch": arch, "isa_features": isa, "vector_registers": regs,
                 "little_endian": not self.triple.split("-")[0].endswith(_BIG_ENDIAN),
                 "abi": self.declared_abi or _abi(arch, isa)}
        for key, value in facts.items():
            object.__setattr__(self, key, value)

    def has(self, *features: str) -> bool:
        """Whether the target has every one of the ISA features."""
        return all(f in self.isa_features for f in features)

    def lanes(self, bits: int) -> int:
        """Vector lanes for elements of `bits` bits (1 without a vector unit)."""
        return max(1, self.vector_bits // bits)

    def pinned(self, pin: GccPin) -> Target:
        """The target building with `pin`'s GCC installation and C library
        (in place of its current pin's)."""
        return replace(self, cflags=(*self.gcc_pin.unpinned(self.cflags), *pin.cflags),
                       ldflags=(*self.gcc_pin.unpinned(self.ldflags), *pin.ldflags), gcc_pin=pin)


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
    # Its banks of RAM and flash ([[regions]]), for `aot package --pools`.
    regions: tuple[config_schema.Region, ...] = ()


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
    return {name: _target(name, _resolved(name, raw)) for name in raw}


def _target(name: str, t: dict) -> Target:
    pin = GccPin(t.get("sysroot", ""), t.get("gcc_install_dir", ""))
    try:
        cflags, ldflags = _flags(t, "cflags"), _flags(t, "ldflags")
        check_pin(name, t["cc"], pin, (*cflags, *ldflags))
        target = Target(name=t["name"], triple=t["triple"], cpu=t["cpu"],
                        features=t.get("features", ""), vector_bits=int(t["vector_bits"]),
                        float_abi=t.get("float_abi", "hard"), cc=t["cc"],
                        cflags=cflags, ldflags=ldflags, libc=t.get("libc", "glibc"),
                        llvm_opt_level=t.get("llvm_opt_level"),
                        static_data_bytes=int(t.get("static_data_bytes", 0)),
                        declared_features=frozenset(t.get("isa_features", ())),
                        declared_registers=t.get("vector_registers"),
                        declared_abi=t.get("abi", ""))
    except KeyError as e:
        raise AotError(f"target '{name}': missing {e}") from None
    return target.pinned(pin)


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
                              firmware=dict(b.get("firmware", {})),
                              regions=config_schema.regions(b.get("regions", [])))
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
