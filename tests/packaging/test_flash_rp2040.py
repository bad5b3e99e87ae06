"""aot flash on the Raspberry Pi Pico (RP2040): aot's own second-stage
boot (boot2) and the UF2 file picotool writes. Checked here: the 256-byte
block at 0x10000000 in the ELF and the UF2 (its CRC32 computed
independently through zlib; family RP2040, blocks in flash), the vector
table at 0x10000100 that boot2 starts (stack pointer in RAM, reset handler
in flash with the Thumb bit), boot2's instructions run on an emulated
Cortex-M, refusal of a harness without a valid boot2, and the exact
picotool command. No board is attached: nothing runs on an RP2040 here."""
from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from aot.deploy.flash import check_boot2
from aot.deploy.uf2 import load_image, read_uf2
from aot.errors import AotError
from aot.targets import get_board
from support.flash import cli, crc32_mpeg2_via_zlib, package_for

BOARD = "rpi-pico"
FLASH, FLASH_BYTES = 0x10000000, 2 * 1024 * 1024
RAM, RAM_BYTES = 0x20000000, 264 * 1024
RP2040_FAMILY = 0xE48BFF56


@pytest.fixture(scope="module")
def pkg(tmp_path_factory) -> Path:
    return package_for(tmp_path_factory, "tflm_hello_world_int8.tflite", BOARD)


def test_the_elf_starts_with_a_valid_boot2_and_the_vectors_after_it(pkg):
    data = (pkg / "bench" / "bench").read_bytes()
    image = load_image(data)
    block = image[FLASH]
    assert len(block) == 256 and block == (pkg / "bench" / "boot2.bin").read_bytes()
    (crc,) = struct.unpack_from("<I", block, 252)
    assert crc == crc32_mpeg2_via_zlib(block[:252])
    code = block[:252].rstrip(b"\0")
    assert 0 < len(code) <= 252
    # The vector table boot2 points VTOR at.
    sp, reset = struct.unpack_from("<II", image[FLASH + 0x100])
    elf = ELFFile(io.BytesIO(data))
    assert RAM < sp <= RAM + RAM_BYTES and sp % 8 == 0
    assert reset & 1 and FLASH + 0x100 <= reset - 1 < FLASH + FLASH_BYTES
    handler = elf.get_section_by_name(".symtab").get_symbol_by_name("Reset_Handler")[0]
    assert reset == handler["st_value"] == elf.header["e_entry"]
    # boot2's literal pool names the vector table, VTOR and the SSI.
    words = set(struct.unpack_from(f"<{len(code) // 4}I", code[:len(code) // 4 * 4]))
    assert {0x10000100, 0xE000ED08, 0x18000000} <= words


def test_the_uf2_file_carries_boot2_first(pkg, capsys):
    code, out, err = cli(capsys, "flash", str(pkg), "--dry-run")
    assert code == 0, err
    uf2 = (pkg / "bench" / "bench.uf2").resolve()
    assert out.splitlines() == [f"image:   {uf2}", f"command: picotool load -v -x {uf2}"]
    blocks = read_uf2(uf2.read_bytes())
    assert {family for family, _, _ in blocks} == {RP2040_FAMILY}
    addrs = [addr for _, addr, _ in blocks]
    assert addrs[0] == FLASH and addrs == sorted(set(addrs))
    assert all(a % 256 == 0 and FLASH <= a and a + 256 <= FLASH + FLASH_BYTES for a in addrs)
    written = {addr: payload for _, addr, payload in blocks}
    assert written[FLASH] == (pkg / "bench" / "boot2.bin").read_bytes()
    for start, chunk in load_image((pkg / "bench" / "bench").read_bytes()).items():
        for off in range(0, len(chunk), 256):
            addr = start + off
            page = written[addr - addr % 256]
            n = min(256 - addr % 256, len(chunk) - off)
            assert page[addr % 256:addr % 256 + n] == chunk[off:off + n]
    # Same package, same file.
    first = uf2.read_bytes()
    assert cli(capsys, "flash", str(pkg), "--dry-run")[0] == 0
    assert uf2.read_bytes() == first


def test_a_harness_without_a_valid_boot2_is_refused(pkg):
    data = bytearray((pkg / "bench" / "bench").read_bytes())
    board = get_board(BOARD)
    off = next(s["p_offset"] for s in ELFFile(io.BytesIO(bytes(data))).iter_segments()
               if s["p_type"] == "PT_LOAD" and s["p_paddr"] == FLASH)
    data[off] ^= 0xFF
    with pytest.raises(AotError, match="CRC32 .* is not that of its first 252 bytes"):
        check_boot2(bytes(data), FLASH, board)


def test_the_picos_memory_matches_the_datasheet():
    board = get_board(BOARD)
    assert (board.flash_bytes, board.ram_bytes) == (FLASH_BYTES, RAM_BYTES)
    assert board.options["uf2_family"] == RP2040_FAMILY
    assert (board.options["flash_origin"], board.options["ram_origin"]) == (FLASH, RAM)


def test_boot2_run_on_an_emulated_cortex_m_sets_up_the_flash_then_starts_the_program(pkg):
    """boot2's instructions run by Unicorn's Cortex-M CPU (the RP2040's
    peripherals are not modelled: the SSI and the system control block are
    plain memory whose writes are recorded), copied where the boot ROM puts
    them. It must write the SSI's XIP set-up with the SSI disabled, enable
    it, and only then read flash: VTOR, then SP and PC from the vector table."""
    from unicorn import UC_ARCH_ARM, UC_HOOK_MEM_READ, UC_HOOK_MEM_WRITE, UC_MODE_MCLASS, \
        UC_MODE_THUMB, Uc
    from unicorn.arm_const import UC_ARM_REG_MSP, UC_ARM_REG_PC

    image = load_image((pkg / "bench" / "bench").read_bytes())
    cpu = Uc(UC_ARCH_ARM, UC_MODE_THUMB | UC_MODE_MCLASS)
    for base, size in ((RAM, RAM_BYTES), (FLASH, FLASH_BYTES), (0x18000000, 0x1000),
                       (0xE000E000, 0x1000)):
        cpu.mem_map(base, size)
    for start, chunk in image.items():
        cpu.mem_write(start, chunk)
    boot2_in_sram = 0x20041F00
    cpu.mem_write(boot2_in_sram, image[FLASH])
    writes, flash_reads = [], []
    cpu.hook_add(UC_HOOK_MEM_WRITE, lambda uc, access, addr, size, value, data:
                 writes.append((addr, value)))
    cpu.hook_add(UC_HOOK_MEM_READ, lambda uc, access, addr, size, value, data:
                 flash_reads.append((addr, len(writes))), begin=FLASH, end=FLASH + FLASH_BYTES)
    sp, reset = struct.unpack_from("<II", image[FLASH + 0x100])
    cpu.emu_start(boot2_in_sram | 1, reset & ~1, count=100)
    ssi = 0x18000000
    assert writes == [
        (ssi + 0x08, 0),            # SSIENR: disabled while it is set up
        (ssi + 0x14, 4),            # BAUDR: clk_sys / 4
        (ssi + 0x00, 0x001F0300),   # CTRLR0: standard SPI, 32-bit frames, EEPROM read
        (ssi + 0x04, 0),            # CTRLR1: one frame per access
        (ssi + 0xF4, 0x03000218),   # SPI_CTRLR0: command 03h, 8-bit instruction, 24-bit address
        (ssi + 0x08, 1),            # SSIENR: enabled
        (0xE000ED08, FLASH + 0x100),  # VTOR
    ]
    assert flash_reads == [(FLASH + 0x100, 7), (FLASH + 0x104, 7)]
    assert cpu.reg_read(UC_ARM_REG_PC) == reset & ~1
    assert cpu.reg_read(UC_ARM_REG_MSP) == sp
