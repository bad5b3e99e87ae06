"""UF2 files (Microsoft's USB Flashing Format, github.com/microsoft/uf2):
what a board's USB boot mode (the RP2350's BOOTSEL drive, picotool) writes
into flash.

A UF2 file is a run of 512-byte blocks, each carrying 256 bytes of payload
for one flash address, with the board family's ID so that a bootloader
refuses a file for another chip. aot writes one from the harness ELF: the
bytes of its loadable segments at their load (physical) addresses, which
all must lie in the board's flash.
"""
from __future__ import annotations

import io
import struct

from elftools.elf.elffile import ELFFile

from aot.errors import AotError

MAGIC_START0 = 0x0A324655     # "UF2\n"
MAGIC_START1 = 0x9E5D5157
MAGIC_END = 0x0AB16F30
FLAG_FAMILY_ID = 0x00002000   # the file-size field holds the family ID
BLOCK = 512
PAYLOAD = 256                 # bytes of data per block, the usual size
HEADER = struct.Struct("<8I")


def load_image(elf: bytes) -> dict[int, bytes]:
    """The ELF's loadable bytes by load address (its PT_LOAD segments'
    p_paddr: .data's initial values sit in flash after the code)."""
    out = {}
    for seg in ELFFile(io.BytesIO(elf)).iter_segments():
        if seg["p_type"] == "PT_LOAD" and seg["p_filesz"] > 0:
            out[seg["p_paddr"]] = seg.data()[:seg["p_filesz"]]
    return out


def _pages(image: dict[int, bytes]) -> dict[int, bytearray]:
    """The image cut into PAYLOAD-aligned pages; gaps inside a page are 0."""
    pages: dict[int, bytearray] = {}
    for start, data in image.items():
        for i, byte in enumerate(data):
            addr = start + i
            page = pages.setdefault(addr - addr % PAYLOAD, bytearray(PAYLOAD))
            page[addr % PAYLOAD] = byte
    return pages


def elf_to_uf2(elf: bytes, family: int, flash_origin: int, flash_bytes: int) -> bytes:
    """The UF2 file writing the ELF's loadable bytes, every one inside the
    flash [flash_origin, flash_origin + flash_bytes)."""
    image = load_image(elf)
    end = flash_origin + flash_bytes
    for start, data in sorted(image.items()):
        if start < flash_origin or start + len(data) > end:
            raise AotError(f"the image's bytes at 0x{start:08x}..0x{start + len(data):08x} lie "
                           f"outside the flash (0x{flash_origin:08x}..0x{end:08x})")
    pages = _pages(image)
    blocks = []
    for n, addr in enumerate(sorted(pages)):
        header = HEADER.pack(MAGIC_START0, MAGIC_START1, FLAG_FAMILY_ID, addr, PAYLOAD, n,
                             len(pages), family)
        data = bytes(pages[addr]).ljust(BLOCK - HEADER.size - 4, b"\0")
        blocks.append(header + data + struct.pack("<I", MAGIC_END))
    return b"".join(blocks)


def read_uf2(data: bytes) -> list[tuple[int, int, bytes]]:
    """(family, target address, payload) of every block, checking the
    magic numbers and the block numbering."""
    if len(data) % BLOCK:
        raise AotError(f"not a UF2 file: {len(data)} bytes, not a multiple of {BLOCK}")
    out = []
    count = len(data) // BLOCK
    for n in range(count):
        block = data[n * BLOCK:(n + 1) * BLOCK]
        m0, m1, flags, addr, size, number, total, family = HEADER.unpack_from(block)
        (end,) = struct.unpack_from("<I", block, BLOCK - 4)
        if (m0, m1, end) != (MAGIC_START0, MAGIC_START1, MAGIC_END):
            raise AotError(f"not a UF2 file: block {n} has bad magic numbers")
        if (number, total) != (n, count) or not flags & FLAG_FAMILY_ID or size > 476:
            raise AotError(f"UF2 block {n}: number {number} of {total}, flags 0x{flags:x}, "
                           f"size {size}")
        out.append((family, addr, block[HEADER.size:HEADER.size + size]))
    return out
