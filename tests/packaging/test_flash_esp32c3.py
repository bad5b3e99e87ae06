"""aot flash on the ESP32-C3 DevKit: the exact esptool command (--dry-run,
the board's port or --port), and the direct-boot image it writes at flash
offset 0, checked against the ELF it comes from: the magic word twice, the
entry where the boot ROM jumps (0x42000008), every flash-resident segment
linked at IROM or DROM + its flash offset, .data's initial values read
through DROM, the watchdog start-up code linked in. No board is attached
here: esptool itself is never run against hardware."""
from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from aot.deploy.esp_image import elf_to_direct_boot
from aot.deploy.uf2 import load_image
from aot.errors import AotError
from support import MODELS
from support.flash import cli, package_for

BOARD = "esp32c3-devkit"
IROM, DROM = 0x42000000, 0x3C000000
RAM, RAM_BYTES = 0x3FC80000, 320 * 1024
FLASH_BYTES = 4 * 1024 * 1024
MAGIC = 0xAEDB041D


@pytest.fixture(scope="module")
def pkg(tmp_path_factory) -> Path:
    return package_for(tmp_path_factory, "mlperf_kws_dscnn_int8.tflite", BOARD)


def test_dry_run_prints_the_exact_esptool_command(pkg, capsys):
    image = (pkg / "bench" / "bench.bin").resolve()
    code, out, err = cli(capsys, "flash", str(pkg), "--dry-run")
    assert code == 0, err
    assert out.splitlines() == [
        f"image:   {image}",
        f"command: esptool --chip esp32c3 -p /dev/ttyUSB0 write-flash 0x0 {image}"]
    code, out, err = cli(capsys, "flash", str(pkg), "--board", BOARD, "--dry-run", "--port",
                         "/dev/ttyACM3")
    assert code == 0, err
    assert out.splitlines()[1] == (f"command: esptool --chip esp32c3 -p /dev/ttyACM3 "
                                   f"write-flash 0x0 {image}")


def symbol(elf: ELFFile, name: str):
    return elf.get_section_by_name(".symtab").get_symbol_by_name(name)[0]


def test_the_direct_boot_image_is_the_elfs_flash_bytes_at_their_offsets(pkg, capsys):
    assert cli(capsys, "flash", str(pkg), "--dry-run")[0] == 0
    image = (pkg / "bench" / "bench.bin").read_bytes()
    data = (pkg / "bench" / "bench").read_bytes()
    elf = ELFFile(io.BytesIO(data))
    # The ROM's test: no ESP image header (0xE9), the magic word twice.
    assert image[0] != 0xE9 and struct.unpack_from("<II", image) == (MAGIC, MAGIC)
    assert elf.header["e_entry"] == IROM + 8 == symbol(elf, "_start")["st_value"]
    assert len(image) <= FLASH_BYTES
    regions = set()
    for seg in elf.iter_segments():
        if seg["p_type"] != "PT_LOAD" or seg["p_filesz"] == 0:
            continue
        vaddr, paddr, size = seg["p_vaddr"], seg["p_paddr"], seg["p_filesz"]
        assert image[paddr:paddr + size] == seg.data()[:size]
        if vaddr >= IROM:             # code, run through the instruction cache
            assert vaddr == IROM + paddr and seg["p_flags"] & 1
            regions.add("irom")
        elif vaddr >= RAM:            # .data: in SRAM, its values in flash
            assert RAM <= vaddr and vaddr + seg["p_memsz"] <= RAM + RAM_BYTES
            regions.add("ram")
        else:                         # weights and read-only data through DROM
            assert vaddr == DROM + paddr and not seg["p_flags"] & 1
            regions.add("drom")
    assert regions == {"irom", "drom", "ram"}
    assert set(load_image(data)) <= {s["p_paddr"] for s in elf.iter_segments()}
    # The start-up code copies .data from its flash copy as DROM maps it.
    sections = {s.name: s for s in elf.iter_sections()}
    dot_data = sections[".data"]
    load = symbol(elf, "__data_load__")["st_value"]
    assert load - DROM == next(s["p_paddr"] for s in elf.iter_segments()
                               if s["p_type"] == "PT_LOAD" and s["p_vaddr"] == dot_data["sh_addr"])
    assert image[load - DROM:load - DROM + dot_data["sh_size"]] == dot_data.data()
    assert sections[".rodata.aot"]["sh_addr"] >= DROM and sections[".rodata.aot"]["sh_size"] > 0
    # The watchdogs' code is linked (not startup.c's empty weak default),
    # and the trap handler sits where a vectored-only mtvec can point.
    board_init = symbol(elf, "aot_board_init")
    assert board_init["st_info"]["bind"] == "STB_GLOBAL" and board_init["st_size"] > 16
    assert symbol(elf, "trap_handler")["st_value"] % 256 == 0
    assert symbol(elf, "__stack_top__")["st_value"] == RAM + RAM_BYTES


def test_an_image_past_the_mapped_flash_is_refused(pkg):
    data = (pkg / "bench" / "bench").read_bytes()
    end = len(elf_to_direct_boot(data, FLASH_BYTES))
    with pytest.raises(AotError, match=f"flash offsets 0x0..0x{end:x}, not inside 0x0..0x1000"):
        elf_to_direct_boot(data, 0x1000)


def test_the_image_is_the_same_every_time(pkg, capsys):
    assert cli(capsys, "flash", str(pkg), "--dry-run")[0] == 0
    first = (pkg / "bench" / "bench.bin").read_bytes()
    assert cli(capsys, "flash", str(pkg), "--dry-run")[0] == 0
    assert (pkg / "bench" / "bench.bin").read_bytes() == first


def test_a_missing_esptool_is_one_line_naming_it(pkg, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    code, out, err = cli(capsys, "flash", str(pkg))
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        "aot: error: esptool is not installed (aot flash esp32c3-devkit runs it): install it "
        "with `pip install esptool` (or `pip install aot[flash]`)"]


def test_a_model_too_big_for_the_c3_is_refused_with_the_numbers(capsys, tmp_path):
    code, _, err = cli(capsys, "package", str(MODELS / "onnx_ultraface_rfb320.onnx"), "--board",
                       BOARD, "-o", str(tmp_path / "pkg"))
    assert code == 2
    assert ("(harness inputs 900.0 KiB, harness outputs 103.6 KiB: 1027680 bytes) do not fit "
            "the RAM of board 'esp32c3-devkit' (327680 bytes, 32768 of them kept") in err
    assert not (tmp_path / "pkg").exists()


def csr_write_at(code: bytes, csr: int) -> int:
    """The offset of the first `csrw csr, rs` (csrrw x0) in RV32IMC code."""
    at = 0
    while at < len(code):
        if code[at] & 3 != 3:       # a compressed instruction
            at += 2
            continue
        (word,) = struct.unpack_from("<I", code, at)
        if word & 0xFFF0707F == (csr << 20) | 0x1073:
            return at
        at += 4
    raise AssertionError(f"no csrw 0x{csr:x}")


def test_the_start_up_code_turns_the_watchdogs_off_on_an_emulated_rv32(pkg):
    """aot_board_init as linked, run by Unicorn's RV32 CPU (the C3's
    peripherals are plain memory whose writes are recorded, its watchdogs
    preset as the boot ROM leaves them): interrupts off, each watchdog
    unlocked with its key, disabled, locked again; then the cycle counter's
    custom CSRs set
    (Unicorn knows no such CSR: checked in the code, not run)."""
    from unicorn import UC_ARCH_RISCV, UC_HOOK_MEM_WRITE, UC_MODE_RISCV32, Uc
    from unicorn.riscv_const import UC_RISCV_REG_MSTATUS, UC_RISCV_REG_SP

    elf = ELFFile(io.BytesIO((pkg / "bench" / "bench").read_bytes()))
    cpu = Uc(UC_ARCH_RISCV, UC_MODE_RISCV32)
    cpu.mem_map(IROM, 0x100000)
    for seg in elf.iter_segments():
        if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] >= IROM:
            cpu.mem_write(seg["p_vaddr"], seg.data()[:seg["p_filesz"]])
    rtc, timg0, timg1 = 0x60008000, 0x6001F000, 0x60020000
    for base in (rtc, timg0, timg1):
        cpu.mem_map(base, 0x1000)
    # Enabled, in flash-boot mode, a stage set: as the boot ROM leaves them.
    cpu.mem_write(rtc + 0x90, struct.pack("<I", 1 << 31 | 1 << 28 | 1 << 12))
    for timg in (timg0, timg1):
        cpu.mem_write(timg + 0x48, struct.pack("<I", 1 << 31 | 3 << 29 | 1 << 14))
    writes = []
    cpu.hook_add(UC_HOOK_MEM_WRITE, lambda uc, access, addr, size, value, data:
                 writes.append((addr, value & 0xFFFFFFFF)))
    init = symbol(elf, "aot_board_init")
    code = bytes(cpu.mem_read(init["st_value"], init["st_size"]))
    cpu.reg_write(UC_RISCV_REG_SP, RAM + RAM_BYTES)
    cpu.reg_write(UC_RISCV_REG_MSTATUS, 1 << 3)   # interrupts on, as the ROM may leave them
    cpu.emu_start(init["st_value"], init["st_value"] + csr_write_at(code, 0x7E0))
    wdt_key, swd_key = 0x50D83AA1, 0x8F1D312A
    timg_off = 3 << 29 | 1 << 22    # enable and flash-boot mode cleared, the update bit set
    assert writes == [
        (rtc + 0xA8, wdt_key), (rtc + 0x90, 0), (rtc + 0xA8, 0),
        (timg0 + 0x64, wdt_key), (timg0 + 0x48, timg_off), (timg0 + 0x64, 0),
        (timg1 + 0x64, wdt_key), (timg1 + 0x48, timg_off), (timg1 + 0x64, 0),
        (rtc + 0xB0, swd_key), (rtc + 0xAC, 1 << 31), (rtc + 0xB0, 0),
    ]
    assert not cpu.reg_read(UC_RISCV_REG_MSTATUS) & 1 << 3
    assert csr_write_at(code, 0x7E0) < csr_write_at(code, 0x7E1)
    # The harness's timer reads the C3's counter, not rdcycle (no such CSR there).
    cycles = symbol(elf, "aot_board_cycles")
    body = bytes(cpu.mem_read(cycles["st_value"], cycles["st_size"]))
    words = [struct.unpack_from("<I", body, i)[0] for i in range(0, len(body) - 3, 2)]
    assert any(w & 0xFFFFF07F == 0x7E202073 for w in words)     # csrr rd, 0x7e2
