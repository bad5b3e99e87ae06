"""The keys of aot's TOML files and their types: targets/*.toml (and
$AOT_TARGETS_DIR's, a --target-file), boards/*.toml (and $AOT_BOARDS_DIR's)
and the user's boards.toml.

A value of the wrong type is refused with the file and the key named
(`boards.toml: rpi4.trust_new_host_key must be a boolean, got a string`):
Python's `bool("false")` is True, so an unchecked string would silently turn
trust-on-first-use on. An unknown key is refused too: a typo would otherwise
be ignored. Ranges (a port within 1..65535, a timeout above 0) are checked
where the value is used (aot.targets.option_number), which names the board.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from aot.errors import AotError


@dataclass(frozen=True)
class Kind:
    name: str                   # as the error says it: "a boolean"
    types: tuple[type, ...]
    item: type | None = None    # lists: the type of every element
    minimum: int | None = None


STR = Kind("a string", (str,))
BOOL = Kind("a boolean", (bool,))
INT = Kind("an integer", (int,))
SIZE = Kind("a non-negative integer", (int,), minimum=0)
COUNT = Kind("a positive integer", (int,), minimum=1)
NUMBER = Kind("a number", (int, float))
STRS = Kind("a list of strings", (list,), item=str)
TABLE = Kind("a table", (dict,))
TABLES = Kind("a list of tables", (list,), item=dict)

TARGET = {
    "base": STR, "name": STR, "triple": STR, "cpu": STR, "features": STR,
    "vector_bits": SIZE, "float_abi": STR, "cc": STR, "cflags": STRS, "ldflags": STRS,
    "libc": STR, "llvm_opt_level": INT,
    # What the code model addresses: the program's code and static data (aot.targets.Target).
    "static_data_bytes": SIZE,
    # The C library and GCC installation clang builds with (aot/support/gcc_pin.py).
    "sysroot": STR, "gcc_install_dir": STR,
    # Facts the triple, cpu and features do not say (aot.targets.Target).
    "isa_features": STRS, "vector_registers": SIZE, "scalar_registers": COUNT,
    "int_registers": COUNT, "abi": STR,
    # Portable C for any compiler: the board gives triple and ABI (aot.targets.portable_on).
    "portable": BOOL,
}

BOARD = {
    "name": STR, "target": STR, "transport": STR, "description": STR, "emulated": BOOL,
    "flash_bytes": SIZE, "ram_bytes": SIZE, "options": TABLE, "firmware": TABLE,
    "regions": TABLES,
}

# A board's memory regions ([[regions]]: its banks of RAM and flash), for
# `aot package --pools` (aot/executor/pools.py). `cost` is the relative time
# of an access (1: the fastest); `arena` and `weights` say what may go
# there; `reserved` the bytes the harness's data, heap and stack take of it.
REGION = {
    "name": STR, "origin": SIZE, "size": SIZE, "kind": STR, "cost": NUMBER,
    "arena": BOOL, "weights": BOOL, "reserved": SIZE,
}
REGION_KINDS = ("ram", "flash")

FIRMWARE = {"cflags": STRS, "sources": STRS, "linker_script": STR, "boot2": STR, "ldflags": STRS,
            "reserved_ram_bytes": SIZE, "reserved_flash_bytes": SIZE}

# What the SSH transport reads (aot/deploy/ssh_config.py) ...
SSH_OPTIONS = {
    "host": STR, "port": INT, "user": STR, "key": STR, "known_hosts": STR,
    "exec_prefix": STR, "connect_timeout_s": NUMBER, "command_timeout_s": NUMBER,
    "trust_new_host_key": BOOL, "remote_tmp": STR, "ssh_config": STR,
}
# ... and what a VM board adds (aot/deploy/vm.py).
VM_OPTIONS = {
    "vm": STR, "qemu": STR, "machine": STR, "cpu": STR, "smp": INT, "memory_mb": INT,
    "boot_timeout_s": NUMBER,
}

# The [options] each transport reads (aot/deploy/*.py).
OPTIONS = {
    "local": {"cpu_flags": STRS},
    "qemu-user": {"qemu": STR, "cpu": STR},
    # `uart`: the UART the harness serves over when the board is reached
    # through a serial port instead (aot/deploy/serial_link.py).
    "qemu-system": {"qemu": STR, "machine": STR, "bios": STR, "timeout_s": NUMBER, "uart": STR,
                    "serial_port": STR, "uart": STR, "timeout_s": NUMBER},
    "ssh": {**SSH_OPTIONS, **VM_OPTIONS},
    # A real microcontroller: how `aot flash` writes its image (aot/deploy/flash.py)
    # and the serial port its UART shows up as.
    "serial": {"flasher": STR, "image": STR, "openocd_config": STR, "pyocd_target": STR,
               "esptool_chip": STR,
               "uf2_family": SIZE, "flash_origin": SIZE, "ram_origin": SIZE,
               "serial_port": STR, "uart": STR, "timeout_s": NUMBER},
}

# A table of the user's boards.toml: how to reach a board, and a VM's size
# (never `vm`: the config file does not turn a Pi into a VM).
CONFIG = {**SSH_OPTIONS, **{k: v for k, v in VM_OPTIONS.items() if k != "vm"}}


def type_name(value: Any) -> str:
    """The TOML type of a value, as an error names it."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, (datetime.date, datetime.time)):
        return "a date/time"
    return type(value).__name__


def check_value(where: str, key: str, value: Any, kind: Kind) -> None:
    """`value` is of `kind`, or an AotError `WHERE: KEY must be ..., got ...`."""
    ok = isinstance(value, kind.types) and not (isinstance(value, bool) and bool not in kind.types)
    if ok and kind.item is not None:
        bad = [v for v in value if not isinstance(v, kind.item)]
        if bad:
            raise AotError(f"{where}: {key} must be {kind.name}, got a list holding "
                           f"{type_name(bad[0])}")
    if ok and kind.minimum is not None and value < kind.minimum:
        raise AotError(f"{where}: {key} must be {kind.name}, got {value}")
    if not ok:
        raise AotError(f"{where}: {key} must be {kind.name}, got {type_name(value)}")


def check_table(where: str, prefix: str, table: Mapping[str, Any],
                schema: Mapping[str, Kind]) -> None:
    """Every key of `table` known to `schema` and of its type; `prefix`
    ("options.", "rpi4.") goes before the key in messages."""
    unknown = sorted(set(table) - set(schema))
    if unknown:
        raise AotError(f"{where}: unknown key(s) {', '.join(prefix + k for k in unknown)} "
                       f"(known: {', '.join(sorted(schema))})")
    for key, value in table.items():
        check_value(where, prefix + key, value, schema[key])


def check_target(path: Path, data: Mapping[str, Any]) -> None:
    check_table(str(path), "", data, TARGET)


def check_board(path: Path, data: Mapping[str, Any]) -> None:
    where = str(path)
    check_table(where, "", data, BOARD)
    transport = data.get("transport")
    options = OPTIONS.get(transport) if isinstance(transport, str) else None
    if options is None:         # an unknown transport is refused where boards are used
        options = {k: v for table in OPTIONS.values() for k, v in table.items()}
    check_table(where, "options.", data.get("options", {}), options)
    check_table(where, "firmware.", data.get("firmware", {}), FIRMWARE)
    for i, region in enumerate(data.get("regions", [])):
        check_region(where, f"regions[{i}].", region)
    names = [r.get("name") for r in data.get("regions", [])]
    if len(set(names)) != len(names):
        raise AotError(f"{where}: two regions share a name ({', '.join(map(str, names))})")


@dataclass(frozen=True)
class Region:
    """One bank of a board's memory (see REGION)."""
    name: str
    origin: int
    size: int
    kind: str
    cost: float
    arena: bool
    weights: bool
    reserved: int = 0

    @property
    def free_bytes(self) -> int:
        """What the model may take of it."""
        return max(0, self.size - self.reserved)


def check_region(where: str, prefix: str, table: Mapping[str, Any]) -> None:
    """A [[regions]] entry: REGION's keys, every one but `reserved` given,
    a known kind, a C identifier for a name (it names a section and macros),
    arena only in RAM, a positive cost."""
    check_table(where, prefix, table, REGION)
    missing = sorted(set(REGION) - {"reserved"} - set(table))
    if missing:
        raise AotError(f"{where}: {prefix[:-1]} lacks {', '.join(missing)}")
    name = table["name"]
    if not name.isidentifier() or not name.isascii() or name != name.lower():
        raise AotError(f"{where}: {prefix}name must be a lower-case C identifier, got {name!r}")
    if table["kind"] not in REGION_KINDS:
        raise AotError(f"{where}: {prefix}kind must be one of {', '.join(REGION_KINDS)}, "
                       f"got {table['kind']!r}")
    if table["arena"] and table["kind"] != "ram":
        raise AotError(f"{where}: {prefix}arena: region '{name}' is {table['kind']}, not ram")
    if table["cost"] <= 0:
        raise AotError(f"{where}: {prefix}cost must be above 0, got {table['cost']}")


def regions(tables: list[Mapping[str, Any]]) -> tuple[Region, ...]:
    """Checked [[regions]] tables as Regions, in the file's order."""
    return tuple(Region(**{k: v for k, v in t.items()}) for t in tables)


def check_config(path: Path, data: Mapping[str, Any]) -> None:
    """The user's boards.toml: a table per board name, with CONFIG's keys."""
    where = str(path)
    for board, table in data.items():
        if not isinstance(table, dict):
            raise AotError(f"{where}: {board} must be a table ([{board}]), "
                           f"got {type_name(table)}")
        check_table(where, f"{board}.", table, CONFIG)
