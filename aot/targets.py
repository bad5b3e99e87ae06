"""Targets (an ISA and how to compile for it) and boards (a target plus how
to reach it), read from targets/*.toml and boards/*.toml, and from the
user's own folders ($AOT_TARGETS_DIR, $AOT_BOARDS_DIR) or a --target-file."""
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
    "x86-64-v3": ("sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "avx", "avx2", "fma", "bmi2",
                  "f16c"),
    "x86-64-v4": ("sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "avx", "avx2", "fma", "bmi2",
                  "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"),
}
# What every core of an architecture has (x86-64's baseline; AArch64's Advanced SIMD).
_ARCH_BASELINE = {"x86_64": ("sse", "sse2"), "aarch64": ("neon",)}
# Vector registers by ISA family (architectural, not counting masks).
_VECTOR_REGISTERS = {"x86_64": 16, "x86": 8, "aarch64": 32, "arm": 16, "riscv64": 32}
# Scalar registers a scalar tile's accumulators, weights and input may take
# (the float file where it is separate), by ISA family; 16 elsewhere.
_SCALAR_REGISTERS = {"aarch64": 32, "riscv64": 32, "riscv32": 32}
# General registers an integer nest's tile may take (its accumulators, a
# row's and a channel's values; the pointers and counters beside them),
# by ISA family; 13 elsewhere (Arm's r0-r12).
_INT_REGISTERS = {"riscv32": 31, "riscv64": 31}


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
    # (`isa_features`, `vector_registers`, `scalar_registers`, `int_registers`,
    # `abi`): merged into the facts below.
    declared_features: frozenset[str] = frozenset()
    declared_registers: int | None = None
    declared_abi: str = ""
    declared_scalar_registers: int | None = None
    declared_int_registers: int | None = None
    # The GCC installation and C library clang builds with (in cflags and
    # ldflags already; kept for `aot doctor`): aot/support/gcc_pin.py.
    gcc_pin: GccPin = GccPin("", "")
    # Portable C for any compiler (generic-c99): no ISA features, no vector
    # unit; on a board it takes the board's triple and ABI (portable_on).
    portable: bool = False
    # The facts every decision reads, derived once (and again by
    # dataclasses.replace, which re-runs __post_init__).
    arch: str = field(init=False)                       # x86_64, aarch64, arm, thumb, riscv64
    isa_features: frozenset[str] = field(init=False)    # avx2, avx512bw, neon, dotprod, dsp...
    vector_registers: int = field(init=False)           # 0 without a vector unit
    scalar_registers: int = field(init=False)           # a scalar tile's register budget
    int_registers: int = field(init=False)              # an integer nest tile's budget
    little_endian: bool = field(init=False)
    abi: str = field(init=False)                        # LLVM's ABI name (RISC-V), or ""

    def __post_init__(self):
        arch = arch_of(self.triple)
        isa = frozenset() if self.portable else \
            isa_features_of(arch, self.cpu, self.features, frozenset(self.declared_features))
        regs = 0 if self.portable else self.declared_registers
        if regs is None:
            regs = 0 if self.vector_bits == 0 else \
                32 if arch == "x86_64" and "avx512f" in isa else _VECTOR_REGISTERS.get(arch, 16)
        scalar, ints = self.declared_scalar_registers, self.declared_int_registers
        facts = {"arch": arch, "isa_features": isa, "vector_registers": regs,
                 "scalar_registers": _SCALAR_REGISTERS.get(arch, 16) if scalar is None else scalar,
                 "int_registers": _INT_REGISTERS.get(arch, 13) if ints is None else ints,
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
    out = {}
    for d in (data_dir(kind), *map(Path, extra_dirs)):
        for p in sorted(d.glob("*.toml")):
            out[p.stem] = _load(p, config_schema.check_board)
    return out


def _load(p: Path, check) -> dict:
    """A description file, parsed and its keys checked against the schema."""
    try:
        data = tomllib.loads(p.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise AotError(f"{p}: not a valid description ({e})") from None
    check(p, data)
    return data


# Extra directories of target descriptions (os.pathsep-separated), read after
# aot's own targets/: a user's cores, variants of aot's (`base = "cortex-m4"`).
# A user target may not take the name of one of aot's: a board naming
# `cortex-m4` always gets aot's Cortex-M4.
TARGETS_ENV = "AOT_TARGETS_DIR"
# Where a target of aot's own comes from, as `aot targets` says it.
BUILT_IN = "aot"
# Keys a target has, itself or through its base (a portable target takes
# triple and cpu from the board it is built for).
_REQUIRED = ("triple", "cpu", "vector_bits", "cc")
# What a portable target never says: the board's target does (portable_on).
_NOT_PORTABLE = ("triple", "cpu", "features", "isa_features", "vector_registers",
                 "scalar_registers", "int_registers", "abi", "sysroot", "gcc_install_dir",
                 "static_data_bytes", "llvm_opt_level")


@dataclass(frozen=True)
class Described:
    """A target file as written: where it is, whether aot ships it, its keys."""
    path: Path
    built_in: bool
    raw: Mapping[str, Any]

    @property
    def origin(self) -> str:
        return BUILT_IN if self.built_in else str(self.path)


def _env_dirs(env: str) -> tuple[str, ...]:
    return tuple(d for d in os.environ.get(env, "").split(os.pathsep) if d)


def _described(extra_dirs: tuple[str, ...]) -> dict[str, Described]:
    """Every target file by its name: aot's, then each extra directory's."""
    out: dict[str, Described] = {}
    for d in extra_dirs:
        if not Path(d).is_dir():
            raise AotError(f"${TARGETS_ENV} names {d}, which is not a directory")
    for d, built_in in ((data_dir("targets"), True), *((Path(d), False) for d in extra_dirs)):
        for p in sorted(d.glob("*.toml")):
            _add(out, Described(p, built_in, _load(p, config_schema.check_target)))
    return out


def _add(out: dict[str, Described], desc: Described) -> None:
    """`desc` under its name; a second file of the same name is refused
    (a user's file never replaces one of aot's: see TARGETS_ENV)."""
    name = desc.raw.get("name")
    if name is None:
        raise AotError(f"{desc.path}: missing name")
    prev = out.get(name)
    if prev is not None and prev.path.resolve() != desc.path.resolve():
        if prev.built_in:
            raise AotError(f"{desc.path}: target '{name}' is one of aot's own; give yours "
                           f"another name (base = \"{name}\" starts from aot's)")
        raise AotError(f"{desc.path}: target '{name}' is also described in {prev.path}")
    out[name] = desc


def _resolved(name: str, described: Mapping[str, Described],
              chain: tuple[str, ...] = ()) -> dict:
    """A target description with its `base` filled in: a variant file names
    its base target and restates only what differs (usually `cpu`); each key
    it gives replaces the base's, `base` itself excepted."""
    desc = described[name]
    t = desc.raw
    if "base" not in t:
        return dict(t)
    base = t["base"]
    if base in (*chain, name):
        cycle = " -> ".join((*chain, name, base)[(*chain, name).index(base):])
        raise AotError(f"{desc.path}: target '{name}': base cycle {cycle}")
    if base not in described:
        close = difflib.get_close_matches(base, described, n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise AotError(f"{desc.path}: target '{name}': unknown base '{base}' "
                       f"({hint}known: {', '.join(sorted(described))})")
    return {**_resolved(base, described, (*chain, name)),
            **{k: v for k, v in t.items() if k != "base"}}


def _flags(t: dict, key: str) -> tuple[str, ...]:
    """cflags/ldflags with {cpu} replaced, so a variant's cpu reaches -mcpu."""
    return tuple(f.replace("{cpu}", t["cpu"]) for f in t.get(key, ()))


def _built(name: str, described: Mapping[str, Described]) -> Target:
    """The Target a description (and its bases) make, its keys checked:
    each one missing is named with the file."""
    path = described[name].path
    t = _resolved(name, described)
    portable = bool(t.get("portable", False))
    if portable:        # the board gives triple and cpu (portable_on)
        given = sorted(k for k in _NOT_PORTABLE if k in t)
        if t.get("vector_bits", 0) or given:
            raise AotError(f"{path}: target '{name}' is portable: vector_bits must be 0 and "
                           f"{', '.join(given) or 'ISA keys'} not given (its board's triple "
                           "and ABI are taken)")
        t = {"triple": "", "cpu": "generic", **t}
    missing = [k for k in _REQUIRED if k not in t]
    if missing:
        raise AotError(f"{path}: target '{name}' lacks {', '.join(missing)} "
                       "(give it, or a base that has it)")
    return _target(name, t, portable)


def _target(name: str, t: dict, portable: bool = False) -> Target:
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
                        declared_scalar_registers=t.get("scalar_registers"),
                        declared_int_registers=t.get("int_registers"),
                        declared_abi=t.get("abi", ""), portable=portable)
    except KeyError as e:
        raise AotError(f"target '{name}': missing {e}") from None
    return target.pinned(pin)


@lru_cache(maxsize=None)
def _catalog(extra_dirs: tuple[str, ...]) -> tuple[dict[str, Target], dict[str, Described]]:
    described = _described(extra_dirs)
    return {name: _built(name, described) for name in described}, described


def targets() -> dict[str, Target]:
    """aot's targets, then those in $AOT_TARGETS_DIR."""
    return _catalog(_env_dirs(TARGETS_ENV))[0]


def target_origins() -> dict[str, Described]:
    """Each target's file, for `aot targets`: aot's own or the user's."""
    return _catalog(_env_dirs(TARGETS_ENV))[1]


def target_file(path: str | os.PathLike) -> Target:
    """A target described in one file (`--target-file`), checked as aot's
    own are; its `base` may be any known target (aot's or
    $AOT_TARGETS_DIR's), its name none of them."""
    p = Path(path)
    if not p.is_file():
        raise AotError(f"--target-file {p}: no such file")
    described = dict(target_origins())
    desc = Described(p, False, _load(p, config_schema.check_target))
    _add(described, desc)
    return _built(desc.raw["name"], described)


# What of a Linux board's clang flags a portable target keeps: the choice of
# target and of its ABI (float ABI, RISC-V's ABI name), never of an ISA
# (-mcpu, -march, -mfpu pick instructions; their defaults for the triple
# are the distribution's baseline).
_ABI_FLAGS = ("--target=", "-mfloat-abi=", "-mabi=")


def portable_on(target: Target, host: Target) -> Target:
    """A portable target built for a board whose own target is `host`: the
    host's triple, ABI, C library, code-model limit and scalar register
    counts; `cc = "gcc"` is the host's GCC (the cross GCC of its triple),
    `cc = "clang"` the host's clang with only its ABI flags and its pinned
    installation; any other compiler is taken as it is, with the target's
    own flags."""
    if host.libc != "glibc":
        raise AotError(f"target '{target.name}' is portable C for the Linux boards; "
                       f"target '{host.name}' is bare metal ({host.libc}): build the package "
                       f"for a Linux board and rebuild its library with your compiler "
                       f"(docs/targets.md, \"generic-c99\")")
    cc, cflags, ldflags, pin = target.cc, target.cflags, target.ldflags, GccPin("", "")
    if cc == "gcc":
        cc = _gcc_of(host)
    elif cc == "clang":
        cc, pin = host.cc, host.gcc_pin
        cflags = (*(f for f in pin.unpinned(host.cflags) if f.startswith(_ABI_FLAGS)), *cflags)
        ldflags = (*pin.unpinned(host.ldflags), *ldflags)
    built = replace(target, triple=host.triple, cpu=host.cpu, features="",
                    float_abi=host.float_abi, libc=host.libc, declared_abi=host.abi,
                    declared_scalar_registers=host.scalar_registers,
                    declared_int_registers=host.int_registers,
                    static_data_bytes=host.static_data_bytes, cc=cc, cflags=cflags,
                    ldflags=ldflags, gcc_pin=GccPin("", ""))
    return built.pinned(pin) if pin else built


def _gcc_of(host: Target) -> str:
    """The GCC that builds for the host target's triple: its own cc when that
    is a GCC, else the GCC of the installation its clang is pinned to
    (/usr/lib/gcc-cross/aarch64-linux-gnu/12: aarch64-linux-gnu-gcc)."""
    if host.cc.endswith("gcc"):
        return host.cc
    if not host.gcc_pin:
        raise AotError(f"target '{host.name}' names no GCC installation (gcc_install_dir): "
                       "give a portable target's cc as the compiler's command")
    return f"{Path(host.gcc_pin.gcc_install_dir).parent.name}-gcc"


def on_board(board: Board, target: Target) -> Board:
    """The board building with `target` in place of its own (`--target`,
    `--target-file`): a target of the board's architecture, or a portable
    one (portable_on)."""
    if target.portable:
        return replace(board, target=portable_on(target, board.target))
    if target.arch != board.target.arch:
        raise AotError(f"target '{target.name}' is for {target.arch or target.triple} "
                       f"({target.triple}); board '{board.name}' runs {board.target.arch} "
                       f"(target '{board.target.name}')")
    return replace(board, target=target)


def boards() -> dict[str, Board]:
    """aot's boards, then those in $AOT_BOARDS_DIR (which may replace them),
    their targets aot's or $AOT_TARGETS_DIR's."""
    return _boards(_env_dirs(BOARDS_ENV), _env_dirs(TARGETS_ENV))


@lru_cache(maxsize=None)
def _boards(extra_dirs: tuple[str, ...], target_dirs: tuple[str, ...] = ()) -> dict[str, Board]:
    known = _catalog(target_dirs)[0]
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
