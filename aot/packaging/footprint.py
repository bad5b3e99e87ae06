"""A package's footprint, read from the ELF objects in its static library.

Every allocated section of every member counts once, by kind: code (text),
read-only data (rodata), the weights (section .rodata.aot, apart from the
code they feed), initialized data (data), zeroed data (bss, which holds the
static arena and the model state) and unwind tables. Flash is what the
image stores (text + rodata + weights + data + unwind); RAM what runs in it
(data + bss).
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import NamedTuple

from aot.errors import AotError

KINDS = ("text", "rodata", "weights", "data", "bss", "unwind")


def ar_members(data: bytes) -> list[tuple[str, memoryview]]:
    """(name, contents) of each object in a System V / GNU archive, the
    contents a view into data."""
    if not data.startswith(b"!<arch>\n"):
        raise AotError("not an ar archive")
    view = memoryview(data)       # members as views: a weights blob is not copied
    pos, names, out = 8, b"", []
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name = header[:16].decode().rstrip()
        size = int(header[48:58].decode().strip())
        body = view[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)
        if name == "//":                   # GNU long-name table
            names = bytes(body)
        elif name in ("/", "/SYM64/"):     # symbol table
            continue
        else:
            if name.startswith("/") and name[1:].isdigit():
                start = int(name[1:])
                name = names[start:names.index(b"/\n", start)].decode()
            out.append((name.rstrip("/"), body))
    return out


class Section(NamedTuple):
    name: str
    type: int
    flags: int
    size: int


SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
SHT_NOBITS = 8
SHN_XINDEX = 0xFFFF


def elf_sections(data: bytes | memoryview) -> list[Section]:
    """The section headers of an ELF object, 32 or 64 bits, either byte
    order (read with struct: pyelftools' import cost every package a tenth
    of a second, for four fields)."""
    if data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
        raise AotError("not an ELF object")
    wide, order = data[4] == 2, "<" if data[5] == 1 else ">"
    try:
        shoff, shentsize, shnum, shstrndx = (
            struct.unpack_from(order + "Q10xHHH", data, 0x28) if wide
            else struct.unpack_from(order + "I10xHHH", data, 0x20))
        header = order + ("IIQQQQIIQQ" if wide else "IIIIIIIIII")
        rows = []
        first = struct.unpack_from(header, data, shoff) if shoff else None
        if first is not None and shnum == 0:            # more than 0xff00 sections
            shnum = first[5]
        if first is not None and shstrndx == SHN_XINDEX:
            shstrndx = first[6]
        for i in range(shnum):
            name, kind, flags, _, offset, size, *_ = struct.unpack_from(
                header, data, shoff + i * shentsize)
            rows.append((name, kind, flags, offset, size))
        table = b""
        if rows:
            _, _, _, offset, size = rows[shstrndx]
            table = bytes(data[offset:offset + size])
    except (struct.error, IndexError):
        raise AotError("corrupt ELF object: its section headers lie outside it") from None
    out = []
    for name, kind, flags, _, size in rows:
        end = table.find(b"\0", name)
        text = table[name:end] if end >= 0 else b""
        out.append(Section(text.decode("utf-8", "replace"), kind, flags, size))
    return out


def section_kind(section: Section) -> str | None:
    flags = section.flags
    if not flags & SHF_ALLOC:
        return None
    if section.name == ".rodata.aot":
        return "weights"
    if section.name.startswith((".eh_frame", ".ARM.ex", ".gcc_except")):
        return "unwind"
    # --pools' arenas: zeros the compiler stores (a named section), NOLOAD when linked
    if section.type == SHT_NOBITS or section.name.startswith(".aot_arena_"):
        return "bss"
    if flags & SHF_EXECINSTR:
        return "text"
    if flags & SHF_WRITE:
        return "data"
    return "rodata"


def object_footprint(data: bytes | memoryview) -> dict[str, int]:
    sizes = dict.fromkeys(KINDS, 0)
    for section in elf_sections(data):
        kind = section_kind(section)
        if kind is not None:
            sizes[kind] += section.size
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
