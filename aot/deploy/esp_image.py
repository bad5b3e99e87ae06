"""The ESP32-C3's direct-boot flash image: what `aot flash --board
esp32c3-devkit` writes with esptool at flash offset 0.

The C3's boot ROM (chip revision v0.3 and later, secure boot off) finds no
ESP image header at flash offset 0 (first byte 0xE9) but the magic word
0xaedb041d twice, maps the first 4 MiB of flash at 0x42000000 (IROM) and
0x3C000000 (DROM), and jumps to 0x42000008. The harness is linked so
(runtime_c/riscv/esp32c3.ld): each loadable segment's load address
(p_paddr) is its flash offset. The image is those bytes at those offsets,
the gaps between segments 0xFF, as erased flash reads.
"""
from __future__ import annotations

import struct

from aot.deploy.uf2 import load_image
from aot.errors import AotError

MAGIC = 0xAEDB041D
HEADER = struct.pack("<II", MAGIC, MAGIC)


def elf_to_direct_boot(elf: bytes, flash_bytes: int) -> bytes:
    """The flash image from offset 0 of the harness ELF's loadable bytes,
    all inside the flash's first `flash_bytes` (the 4 MiB the ROM maps)."""
    image = load_image(elf)
    if not image:
        raise AotError("the harness ELF has no loadable bytes")
    end = max(start + len(data) for start, data in image.items())
    if min(image) != 0 or end > flash_bytes:
        raise AotError(f"the image's bytes lie at flash offsets 0x{min(image):x}..0x{end:x}, "
                       f"not inside 0x0..0x{flash_bytes:x} from offset 0 (a direct-boot "
                       "image starts at flash offset 0)")
    out = bytearray(b"\xff" * end)
    for start, data in sorted(image.items()):
        out[start:start + len(data)] = data
    if bytes(out[:len(HEADER)]) != HEADER:
        raise AotError(f"the image does not start with the direct-boot magic 0x{MAGIC:08x} "
                       "twice: the harness was not linked with runtime_c/riscv/esp32c3.ld")
    return bytes(out)
