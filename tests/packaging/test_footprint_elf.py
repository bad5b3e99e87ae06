"""The footprint's ELF section reader against pyelftools, on objects of a
64-bit and a 32-bit target; a cut object is refused in one line."""
from __future__ import annotations

import io
import subprocess

import pytest
from elftools.elf.elffile import ELFFile

from aot.errors import AotError
from aot.packaging.footprint import SHT_NOBITS, elf_sections, object_footprint
from aot.packaging.toolchain import toolchain_for
from aot.targets import get_board
from aot.support import tools

SOURCE = "int zeros[64]; int ones[4] = {1, 1, 1, 1};\nconst int k[3] = {1, 2, 3};\n" \
         "int f(int x) { return x + zeros[x] + ones[x & 3] + k[x % 3]; }\n"


def compiled(board: str, tmp_path) -> bytes:
    tc = toolchain_for(get_board(board).target)
    (tmp_path / "f.c").write_text(SOURCE)
    subprocess.run([tc.cc, *tc.cflags, "-c", "f.c", "-o", "f.o"], cwd=tmp_path, check=True)
    return (tmp_path / "f.o").read_bytes()


@pytest.mark.parametrize("board", ["host", "mps2-an386"])
def test_sections_as_pyelftools_reads_them(board, tmp_path):
    if board != "host" and not tools.which("arm-none-eabi-gcc"):
        pytest.skip("arm-none-eabi-gcc is not installed")
    data = compiled(board, tmp_path)
    want = [(s.name, s["sh_type"] == "SHT_NOBITS", s["sh_flags"], s["sh_size"])
            for s in ELFFile(io.BytesIO(data)).iter_sections()]
    assert [(s.name, s.type == SHT_NOBITS, s.flags, s.size) for s in elf_sections(data)] == want
    sizes = object_footprint(data)
    assert sizes["bss"] >= 256 and sizes["data"] >= 16 and sizes["text"] > 0


def test_a_cut_object_is_refused(tmp_path):
    data = compiled("host", tmp_path)
    with pytest.raises(AotError, match="corrupt ELF object"):
        elf_sections(data[:200])
    with pytest.raises(AotError, match="not an ELF object"):
        elf_sections(b"!<arch>\n" + data)
