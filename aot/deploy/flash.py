"""`aot flash`: write a package's harness onto a real microcontroller with
the board's flasher.

A board reached over a serial port (transport `serial`) names in its
[options] the tool that writes its flash (`flasher`: openocd, pyocd,
picotool, esptool) and the file that tool takes (`image`: the harness ELF
as linked, a UF2 file aot writes from it, uf2.py, or an ESP32-C3
direct-boot image, esp_image.py). The plan (image and command line)
is computed without running anything, so `--dry-run` prints exactly what a
real flash would run.
"""
from __future__ import annotations

import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from aot.deploy.esp_image import elf_to_direct_boot
from aot.deploy.uf2 import elf_to_uf2, load_image
from aot.errors import AotError
from aot.packaging.boot2 import SIZE as BOOT2_SIZE, check_block
from aot.targets import Board

# How a user gets each flasher (the one-line error when it is missing).
INSTALL = {
    "openocd": "install it with `apt-get install openocd` (or your system's package manager)",
    "pyocd": "install it with `pip install pyocd`",
    "picotool": "install it with `apt-get install picotool` or build it from "
                "https://github.com/raspberrypi/picotool",
    "esptool": "install it with `pip install esptool` (or `pip install aot[flash]`)",
}
IMAGES = ("elf", "uf2", "uf2-boot2", "esp-direct-boot")
# Flashers that write through the board's serial port (--port).
SERIAL_FLASHERS = ("esptool",)
HARNESS = "bench/bench"


@dataclass(frozen=True)
class FlashPlan:
    """What `aot flash` writes and the command that writes it."""
    board: str
    flasher: str
    image: Path
    command: tuple[str, ...]

    @property
    def command_line(self) -> str:
        return shlex.join(self.command)


def _option(board: Board, key: str) -> object:
    value = board.options.get(key)
    if value is None:
        raise AotError(f"board '{board.name}': options.{key} is missing (aot flash needs it)")
    return value


def _command(board: Board, flasher: str, image: Path, port: str | None) -> tuple[str, ...]:
    if flasher == "openocd":
        # `program` writes the ELF's loadable segments at their load addresses;
        # braces keep a path with spaces one Tcl word.
        path = f"{{{image}}}" if any(c.isspace() for c in str(image)) else str(image)
        return ("openocd", "-f", str(_option(board, "openocd_config")),
                "-c", f"program {path} verify reset exit")
    if flasher == "pyocd":
        return ("pyocd", "flash", "--target", str(_option(board, "pyocd_target")),
                "--format", "elf", str(image))
    if flasher == "picotool":
        # -v: read the flash back and compare; -x: start the program after.
        return ("picotool", "load", "-v", "-x", str(image))
    if flasher == "esptool":
        # The image at flash offset 0, where the boot ROM looks; esptool
        # verifies what it wrote (its MD5 of the flash) and resets the chip.
        return ("esptool", "--chip", str(_option(board, "esptool_chip")), "-p",
                port or str(_option(board, "serial_port")), "write-flash", "0x0", str(image))
    raise AotError(f"board '{board.name}': unknown flasher '{flasher}' "
                   f"(known: {', '.join(sorted(INSTALL))})")


def check_boot2(elf: bytes, origin: int, board: Board) -> None:
    """The RP2040's boot ROM runs flash only through the 256-byte boot2
    block at its start, checked by its CRC32: refuse an ELF without one."""
    block = load_image(elf).get(origin, b"")[:BOOT2_SIZE]
    if len(block) < BOOT2_SIZE:
        raise AotError(f"board '{board.name}': the harness has no {BOOT2_SIZE}-byte boot2 block "
                       f"at 0x{origin:08x}, which its boot ROM needs: package the model again")
    check_block(block)


def _image(pkg: Path, board: Board, kind: str) -> Path:
    """The file the flasher takes: the harness ELF, or the file written from
    it (bench/bench.uf2 or bench/bench.bin, rewritten on every call: same
    ELF, same bytes)."""
    elf = pkg / HARNESS
    if not elf.is_file():
        raise AotError(f"{pkg}: the harness {HARNESS} is missing (package the model with "
                       f"--board {board.name})")
    if kind == "elf":
        return elf.resolve()
    if kind in ("uf2", "uf2-boot2"):
        family = int(_option(board, "uf2_family"))
        origin = int(_option(board, "flash_origin"))
        if kind == "uf2-boot2":
            check_boot2(elf.read_bytes(), origin, board)
        data = elf_to_uf2(elf.read_bytes(), family, origin, board.flash_bytes)
        out = pkg / f"{HARNESS}.uf2"
        out.write_bytes(data)
        return out.resolve()
    if kind == "esp-direct-boot":
        out = pkg / f"{HARNESS}.bin"
        out.write_bytes(elf_to_direct_boot(elf.read_bytes(), board.flash_bytes))
        return out.resolve()
    raise AotError(f"board '{board.name}': options.image must be one of {', '.join(IMAGES)}, "
                   f"got '{kind}'")


def flash_plan(pkg: Path, board: Board, meta: dict, port: str | None = None) -> FlashPlan:
    """The image and command line that write package `pkg` onto `board`."""
    if board.transport != "serial":
        raise AotError(f"board '{board.name}' is reached by {board.transport}, not flashed: "
                       "aot flash is for real microcontroller boards (aot boards: REACHED BY "
                       "serial)")
    if meta.get("board") != board.name:
        raise AotError(f"{pkg} was built for board '{meta.get('board')}', not '{board.name}'")
    flasher = str(_option(board, "flasher"))
    if port is not None and flasher not in SERIAL_FLASHERS:
        raise AotError(f"--port: {flasher} writes board '{board.name}' through its debug probe "
                       "or USB boot mode, not a serial port")
    image = _image(pkg, board, str(_option(board, "image")))
    return FlashPlan(board.name, flasher, image, _command(board, flasher, image, port))


def run_flash(plan: FlashPlan, timeout_s: float = 300) -> None:
    """Run the plan's command: a missing flasher, a failure (no board
    attached, a probe error) or a time-out is one line naming the tool."""
    if shutil.which(plan.flasher) is None:
        raise AotError(f"{plan.flasher} is not installed (aot flash {plan.board} runs it): "
                       f"{INSTALL[plan.flasher]}")
    try:
        done = subprocess.run(plan.command, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except subprocess.TimeoutExpired:
        raise AotError(f"{plan.flasher} did not finish within {timeout_s:g} s") from None
    if done.returncode != 0:
        lines = [ln.strip() for ln in (done.stderr + "\n" + done.stdout).splitlines()
                 if ln.strip()]
        said = next((ln for ln in lines if "error" in ln.lower()), lines[-1] if lines else "")
        raise AotError(f"{plan.flasher} failed (exit {done.returncode}): {said or 'no message'}")
