"""A package's footprint, read from the ELF objects in its static library.

Every allocated section of every member counts once, by kind: code (text),
read-only data (rodata), the weights (section .rodata.aot, apart from the
code they feed), initialized data (data), zeroed data (bss, which holds the
static arena and the model state) and unwind tables. Flash is what the
image stores (text + rodata + weights + data + unwind); RAM what runs in it
(data + bss).
"""
from __future__ import annotations

import io
from pathlib import Path

from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile

from aot.errors import AotError

KINDS = ("text", "rodata", "weights", "data", "bss", "unwind")


def ar_members(data: bytes) -> list[tuple[str, bytes]]:
    """(name, bytes) of each object in a System V / GNU archive."""
    if not data.startswith(b"!<arch>\n"):
        raise AotError("not an ar archive")
    pos, names, out = 8, b"", []
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name = header[:16].decode().rstrip()
        size = int(header[48:58].decode().strip())
        body = data[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)
        if name == "//":                   # GNU long-name table
            names = body
        elif name in ("/", "/SYM64/"):     # symbol table
            continue
        else:
            if name.startswith("/") and name[1:].isdigit():
                start = int(name[1:])
                name = names[start:names.index(b"/\n", start)].decode()
            out.append((name.rstrip("/"), body))
    return out


def section_kind(section) -> str | None:
    flags = section["sh_flags"]
    if not flags & SH_FLAGS.SHF_ALLOC:
        return None
    if section.name == ".rodata.aot":
        return "weights"
    if section.name.startswith((".eh_frame", ".ARM.ex", ".gcc_except")):
        return "unwind"
    # --pools' arenas: zeros the compiler stores (a named section), NOLOAD when linked
    if section["sh_type"] == "SHT_NOBITS" or section.name.startswith(".aot_arena_"):
        return "bss"
    if flags & SH_FLAGS.SHF_EXECINSTR:
        return "text"
    if flags & SH_FLAGS.SHF_WRITE:
        return "data"
    return "rodata"


def object_footprint(data: bytes) -> dict[str, int]:
    sizes = dict.fromkeys(KINDS, 0)
    for section in ELFFile(io.BytesIO(data)).iter_sections():
        kind = section_kind(section)
        if kind is not None:
            sizes[kind] += section["sh_size"]
    return sizes


def library_footprint(library: Path) -> dict:
    members = {name: object_footprint(body) for name, body in ar_members(library.read_bytes())}
    total = {k: sum(m[k] for m in members.values()) for k in KINDS}
    return {**total,
            "flash": total["text"] + total["rodata"] + total["weights"] + total["data"]
            + total["unwind"],
            "ram": total["data"] + total["bss"],
            "members": members}


def memory_summary(fp: dict, arena_bytes: int, state_bytes: int) -> dict:
    """What a microcontroller budget asks of the model library alone (the
    harness and libc excluded), before the firmware link's --gc-sections:
    flash = code (text, unwind) + read-only data + weights + data's initial
    values; RAM = the static arena + the model state + the rest of data and
    bss. The arena and the state are bss of the library (static buffers);
    a firmware calling `<name>_run_with_arena` places the arena itself."""
    code = fp["text"] + fp["unwind"]
    other_ram = max(0, fp["data"] + fp["bss"] - arena_bytes - state_bytes)
    return {"flash_bytes": fp["flash"], "code_bytes": code, "rodata_bytes": fp["rodata"],
            "weight_bytes": fp["weights"], "data_init_bytes": fp["data"],
            "ram_bytes": fp["ram"], "arena_bytes": arena_bytes, "state_bytes": state_bytes,
            "other_ram_bytes": other_ram}
