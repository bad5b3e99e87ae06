"""aot flash on the real microcontroller boards: the exact flasher command
(--dry-run), the image it writes (ELF or UF2: load addresses in the flash,
the vector table's stack pointer in RAM and its reset vector in flash with
the Thumb bit), the one-line errors of a missing flasher or a failing one,
and aot run / bench refusing boards aot cannot talk to yet. No board is
attached here: the flashers themselves are never run against hardware."""
from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

import aot
from aot.deploy.uf2 import load_image, read_uf2
from aot.targets import get_board
from support import MODELS
from support.flash import cli

MODEL = MODELS / "mlperf_kws_dscnn_int8.tflite"
BOARDS = ("nucleo-f446re", "nrf52840dk", "rpi-pico2")
# (flash origin, flash bytes, RAM origin, RAM bytes) from the vendors' memory maps.
MEMORY = {
    "nucleo-f446re": (0x08000000, 512 * 1024, 0x20000000, 128 * 1024),
    "nrf52840dk": (0x00000000, 1024 * 1024, 0x20000000, 256 * 1024),
    "rpi-pico2": (0x10000000, 4 * 1024 * 1024, 0x20000000, 520 * 1024),
}
RP2350_ARM_S_FAMILY = 0xE48BFF59


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("flash")
    for board in BOARDS:
        aot.package(MODEL, board=board, out_dir=root / board)
    return {b: root / b for b in BOARDS}


def expected(board: str, pkg: Path) -> tuple[str, str]:
    """The image and the command line `aot flash --dry-run` prints."""
    elf = (pkg / "bench" / "bench").resolve()
    image = f"{elf}.uf2" if board == "rpi-pico2" else str(elf)
    return image, {
        "nucleo-f446re": f"openocd -f board/st_nucleo_f4.cfg -c 'program {elf} verify reset exit'",
        "nrf52840dk": f"pyocd flash --target nrf52840 --format elf {elf}",
        "rpi-pico2": f"picotool load -v -x {elf}.uf2",
    }[board]


@pytest.mark.parametrize("board", BOARDS)
def test_dry_run_prints_the_exact_flasher_command(packages, capsys, board):
    pkg = packages[board]
    code, out, err = cli(capsys, "flash", str(pkg), "--board", board, "--dry-run")
    assert code == 0, err
    image, command = expected(board, pkg)
    assert out.splitlines() == [f"image:   {image}", f"command: {command}"]
    code, out, _ = cli(capsys, "flash", str(pkg), "--dry-run", "--json")
    doc = json.loads(out)
    assert (doc["board"], doc["image"], doc["ran"]) == (board, image, False)


def vector_table(read, flash: int) -> tuple[int, int]:
    """The initial stack pointer and the reset vector at the start of flash."""
    return struct.unpack("<II", read(flash, 8))


def check_vectors(sp: int, reset: int, entry: int, board: str) -> None:
    flash, flash_size, ram, ram_size = MEMORY[board]
    assert ram < sp <= ram + ram_size and sp % 8 == 0, hex(sp)
    assert reset & 1, "the reset vector lacks the Thumb bit"
    assert flash <= reset - 1 < flash + flash_size
    assert reset == entry


@pytest.mark.parametrize("board", ["nucleo-f446re", "nrf52840dk"])
def test_elf_image_loads_into_flash_and_boots_from_its_vector_table(packages, board):
    flash, flash_size, _, _ = MEMORY[board]
    data = (packages[board] / "bench" / "bench").read_bytes()
    elf = ELFFile(io.BytesIO(data))
    image = load_image(data)
    for start, chunk in image.items():        # what the flasher writes: all in flash
        assert flash <= start and start + len(chunk) <= flash + flash_size, hex(start)
    assert min(image) == flash
    sp, reset = vector_table(lambda addr, n: image[addr][:n], flash)
    check_vectors(sp, reset, elf.header["e_entry"], board)
    reset_handler = elf.get_section_by_name(".symtab").get_symbol_by_name("Reset_Handler")[0]
    assert reset == reset_handler["st_value"]


def test_uf2_image_for_the_pico2(packages, capsys):
    board = "rpi-pico2"
    flash, flash_size, _, _ = MEMORY[board]
    pkg = packages[board]
    # `aot flash` writes the UF2; each test writes its own, as tests may run in any order or process.
    assert cli(capsys, "flash", str(pkg), "--dry-run")[0] == 0
    data = (pkg / "bench" / "bench.uf2").read_bytes()
    blocks = read_uf2(data)
    assert {family for family, _, _ in blocks} == {RP2350_ARM_S_FAMILY}
    addrs = [addr for _, addr, _ in blocks]
    assert addrs == sorted(set(addrs)) and addrs[0] == flash
    assert all(a % 256 == 0 and flash <= a and a + 256 <= flash + flash_size for a in addrs)
    # The payloads are the ELF's loadable bytes at their load addresses.
    written = {addr: payload for _, addr, payload in blocks}
    elf_bytes = (pkg / "bench" / "bench").read_bytes()

    def read(addr: int, n: int) -> bytes:
        return b"".join(written[a - a % 256][a % 256:a % 256 + 1] for a in range(addr, addr + n))

    for start, chunk in load_image(elf_bytes).items():
        assert read(start, len(chunk)) == chunk
    sp, reset = vector_table(read, flash)
    check_vectors(sp, reset, ELFFile(io.BytesIO(elf_bytes)).header["e_entry"], board)
    # The boot ROM's IMAGE_DEF block (Arm, Secure, RP2350) within the first 4 KiB.
    head = read(flash, 4096)
    at = head.index(struct.pack("<I", 0xFFFFDED3))
    assert struct.unpack_from("<5I", head, at) == (0xFFFFDED3, 0x10210142, 0x000001FF, 0,
                                                    0xAB123579)


def test_the_uf2_file_is_the_same_every_time(packages, capsys):
    pkg = packages["rpi-pico2"]
    assert cli(capsys, "flash", str(pkg), "--dry-run")[0] == 0
    first = (pkg / "bench" / "bench.uf2").read_bytes()
    assert cli(capsys, "flash", str(pkg), "--dry-run")[0] == 0
    assert (pkg / "bench" / "bench.uf2").read_bytes() == first


def test_a_missing_flasher_is_one_line_naming_it(packages, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    code, out, err = cli(capsys, "flash", str(packages["nucleo-f446re"]))
    assert code == 2 and out == ""
    assert err.strip().splitlines() == ["aot: error: openocd is not installed (aot flash "
                                        "nucleo-f446re runs it): install it with `apt-get "
                                        "install openocd` (or your system's package manager)"]


def test_the_flashers_error_is_passed_on(packages, capsys, monkeypatch, tmp_path):
    # A stand-in pyocd failing as pyOCD does with no probe attached.
    fake = tmp_path / "pyocd"
    fake.write_text("#!/bin/sh\necho '0000412 C No connected debug probes [__main__]' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    code, _, err = cli(capsys, "flash", str(packages["nrf52840dk"]))
    assert code == 2
    assert err.strip() == ("aot: error: pyocd failed (exit 1): 0000412 C No connected debug "
                           "probes [__main__]")


def test_flash_refuses_what_it_cannot_write(packages, capsys):
    code, _, err = cli(capsys, "flash", str(packages["nrf52840dk"]), "--dry-run", "--port",
                       "/dev/ttyACM0")
    assert code == 2 and "--port: pyocd writes board 'nrf52840dk' through its debug probe" in err
    code, _, err = cli(capsys, "flash", str(packages["nrf52840dk"]), "--board", "mps2-an386",
                       "--dry-run")
    assert code == 2 and "was built for board 'nrf52840dk', not 'mps2-an386'" in err
    code, _, err = cli(capsys, "flash", str(packages["nrf52840dk"]), "--board", "rpi-pico2",
                       "--dry-run")
    assert code == 2 and "was built for board 'nrf52840dk', not 'rpi-pico2'" in err


@pytest.mark.parametrize("command", ["run", "verify", "bench"])
def test_running_on_a_real_board_goes_to_its_serial_port(packages, capsys, command, tmp_path):
    """No board is attached here: the port named by --port is not there,
    and the run is one line naming it."""
    port = str(tmp_path / "ttyACM9")
    extra = []
    if command == "run":
        spec = json.loads((packages["nucleo-f446re"] / "metadata.json").read_text())["inputs"][0]
        np.save(tmp_path / "x.npy", np.zeros(spec["shape"], spec["dtype"]))
        extra = ["--input", str(tmp_path / "x.npy")]
    if command == "verify":
        extra = ["--model", str(MODEL)]
    code, out, err = cli(capsys, command, str(packages["nucleo-f446re"]), "--port", port, *extra)
    assert code == 2 and out == ""
    assert err.strip().startswith(f"aot: error: serial port {port}: cannot open it (")
    assert len(err.strip().splitlines()) == 1


def test_a_board_without_a_uart_driver_is_refused_in_one_line(packages, capsys):
    code, out, err = cli(capsys, "run", str(packages["rpi-pico2"]))
    assert code == 2 and out == ""
    assert err.strip() == ("aot: error: board 'rpi-pico2': aot has no driver for its UART yet, "
                           "so it cannot run, verify or bench over a serial port (aot flash "
                           "writes its image)")


def test_a_model_too_big_for_the_board_is_refused_with_the_numbers(capsys, tmp_path):
    code, _, err = cli(capsys, "package", str(MODELS / "mlperf_ad_fcae_f32.tflite"), "--board",
                       "nucleo-f446re", "-o", str(tmp_path / "pkg"))
    assert code == 2
    assert ("the model's weights (1063456 bytes) do not fit the flash of board 'nucleo-f446re' "
            "(524288 bytes, 65536 of them kept") in err
    assert not (tmp_path / "pkg").exists()


def test_the_boards_memory_matches_the_vendors_map():
    for name, (flash, flash_size, ram, ram_size) in MEMORY.items():
        board = get_board(name)
        assert (board.flash_bytes, board.ram_bytes) == (flash_size, ram_size)
        assert (board.options["flash_origin"], board.options["ram_origin"]) == (flash, ram)
        assert board.transport == "serial" and not board.emulated
