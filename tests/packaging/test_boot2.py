"""The RP2040's boot2 block as aot builds it: the boot ROM's CRC32
(checked against its catalogue value and against zlib's CRC-32 run
backwards), padding to 252 bytes, refusal of code too long or of a block
whose CRC does not match."""
from __future__ import annotations

import pytest

from aot.errors import AotError
from aot.packaging.boot2 import boot2_block, check_block, crc32_rp2040
from support.flash import crc32_mpeg2_via_zlib


def test_the_crc_is_the_boot_roms():
    # CRC-32/MPEG-2's catalogue check value, and zlib's on other data.
    assert crc32_rp2040(b"123456789") == 0x0376E6E7
    for data in (b"", b"\0" * 252, bytes(range(252))):
        assert crc32_rp2040(data) == crc32_mpeg2_via_zlib(data)


def test_a_block_too_big_or_corrupt_is_refused():
    with pytest.raises(AotError, match="boot2's code is 253 bytes: more than the 252"):
        boot2_block(b"\0" * 253)
    block = boot2_block(b"\x01\x02")
    check_block(block)
    corrupt = bytearray(block)
    corrupt[5] ^= 1
    with pytest.raises(AotError, match="the boot ROM would not run it"):
        check_block(bytes(corrupt))
