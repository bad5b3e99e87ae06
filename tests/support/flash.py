"""What the aot flash tests share: the command line run in-process, a
package built for a board, an independent CRC for the RP2040's boot2."""
from __future__ import annotations

import zlib
from pathlib import Path

import aot
from aot.cli import main
from support import MODELS


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """aot ARGS: (exit code, stdout, stderr)."""
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def package_for(tmp_path_factory, model: str, board: str) -> Path:
    """A package of shared model `model` built for `board` (a module's fixture)."""
    out = tmp_path_factory.mktemp(board) / "pkg"
    aot.package(MODELS / model, board=board, out_dir=out)
    return out


def reflect(value: int, bits: int) -> int:
    return int(f"{value:0{bits}b}"[::-1], 2)


def crc32_mpeg2_via_zlib(data: bytes) -> int:
    """CRC-32/MPEG-2 from zlib's reflected CRC-32: the same register run on
    bit-reversed bytes, read back reversed, without the final XOR."""
    flipped = bytes(reflect(b, 8) for b in data)
    return reflect(zlib.crc32(flipped), 32) ^ 0xFFFFFFFF
