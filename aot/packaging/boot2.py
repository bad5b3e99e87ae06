"""The RP2040's second-stage boot block (boot2): what its boot ROM loads
from the first 256 bytes of flash, checks and runs before the program.

The ROM copies those 256 bytes into SRAM and runs them only if their last 4
bytes are the CRC32 of the first 252 (RP2040 datasheet, "Flash Second
Stage: Checksum": polynomial 0x04c11db7, no input or output reflection,
initial value 0xffffffff, no final XOR, stored little-endian). aot's boot2
is runtime_c/cortex_m/rp2040_boot2.S: assembled here alone with the
target's compiler, padded and checksummed into bench/boot2.bin, which the
harness links at 0x10000000 (rp2040_boot2_block.S, rp2040.ld).
"""
from __future__ import annotations

import io
import struct
from pathlib import Path

from aot.errors import AotError

SIZE = 256
CODE_BYTES = SIZE - 4
SECTION = ".boot2_code"
OUTPUT = "bench/boot2.bin"
POLY = 0x04C11DB7


def crc32_rp2040(data: bytes) -> int:
    """CRC-32 as the RP2040 boot ROM checks it (CRC-32/MPEG-2): MSB first,
    init 0xffffffff, no final XOR."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ POLY if crc & 0x80000000 else crc << 1) & 0xFFFFFFFF
    return crc


def boot2_block(code: bytes) -> bytes:
    """The 256-byte block: the code, zeros up to 252 bytes, its CRC."""
    if len(code) > CODE_BYTES:
        raise AotError(f"boot2's code is {len(code)} bytes: more than the {CODE_BYTES} the "
                       "RP2040's boot ROM loads before the checksum")
    body = code.ljust(CODE_BYTES, b"\0")
    return body + struct.pack("<I", crc32_rp2040(body))


def check_block(block: bytes) -> None:
    """Refuse a boot2 block the boot ROM would not run."""
    if len(block) != SIZE:
        raise AotError(f"the boot2 block is {len(block)} bytes, not {SIZE}")
    (stored,) = struct.unpack_from("<I", block, CODE_BYTES)
    if stored != crc32_rp2040(block[:CODE_BYTES]):
        raise AotError(f"the boot2 block's CRC32 0x{stored:08x} is not that of its first "
                       f"{CODE_BYTES} bytes (0x{crc32_rp2040(block[:CODE_BYTES]):08x}): the "
                       "boot ROM would not run it")


def code_of(obj: bytes) -> bytes:
    """The boot2 section of the assembled object, which must need no
    relocation: it runs from SRAM, wherever it is linked."""
    # imported here: every package build imports this module, few build an RP2040's
    from elftools.elf.elffile import ELFFile
    elf = ELFFile(io.BytesIO(obj))
    section = elf.get_section_by_name(SECTION)
    if section is None:
        raise AotError(f"the boot2 source defines no {SECTION} section")
    if elf.get_section_by_name(f".rel{SECTION}") or elf.get_section_by_name(f".rela{SECTION}"):
        raise AotError(f"boot2's {SECTION} needs relocations: it must be position-independent")
    return section.data()


def build_boot2(cc: str, cflags: tuple[str, ...], pkg: Path, source: str) -> str:
    """bench/boot2.bin in the package from the boot2 source it ships."""
    from aot.packaging.toolchain import run_tool

    obj = Path(OUTPUT).with_suffix(".o")
    (pkg / obj).parent.mkdir(parents=True, exist_ok=True)
    try:
        run_tool([cc, *cflags, "-c", source, "-o", str(obj)], pkg, "assembling boot2")
        block = boot2_block(code_of((pkg / obj).read_bytes()))
    finally:
        (pkg / obj).unlink(missing_ok=True)
    (pkg / OUTPUT).parent.mkdir(parents=True, exist_ok=True)
    (pkg / OUTPUT).write_bytes(block)
    return OUTPUT
