"""A failed link names the linker's reason, not the driver's summary
("collect2: error: ld returned 1 exit status"): real links that fail."""
from __future__ import annotations

import pytest

from aot.errors import AotError
from aot.packaging.toolchain import run_tool

TOO_BIG = "const char big[4096] = {1};\nint main(void) { return big[3]; }\n"
ONE_KIB_FLASH = """MEMORY { FLASH (rx) : ORIGIN = 0, LENGTH = 1K
         RAM (rwx) : ORIGIN = 0x20000000, LENGTH = 1K }
SECTIONS { .text : { *(.text*) *(.rodata*) } > FLASH
           .data : { *(.data*) } > RAM AT > FLASH  .bss : { *(.bss*) } > RAM }
"""


def test_a_flash_overflow_names_the_region(tmp_path):
    (tmp_path / "fw.c").write_text(TOO_BIG)
    (tmp_path / "fw.ld").write_text(ONE_KIB_FLASH)
    with pytest.raises(AotError) as e:
        run_tool(["arm-none-eabi-gcc", "-mcpu=cortex-m4", "-mthumb", "-nostartfiles",
                  "-T", "fw.ld", "fw.c", "-o", "fw.elf"], tmp_path, "linking fw.elf")
    assert str(e.value) == ("linking fw.elf failed: ld: fw.elf section `.text' will not fit "
                            "in region `FLASH'")


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_an_undefined_symbol_is_named(tmp_path, cc):
    (tmp_path / "main.c").write_text("float expf_missing(float);\n"
                                     "int main(void) { return (int)expf_missing(1.0f); }\n")
    with pytest.raises(AotError, match=r"^linking main failed: .*undefined reference to "
                       r"`expf_missing'$"):
        run_tool([cc, "main.c", "-o", "main"], tmp_path, "linking main")


def test_static_data_past_the_code_model_is_named(tmp_path):
    """What aot package refuses before compiling (memory_budget), the linker
    says for the rest: the relocation that does not reach, not the libc
    function it happens to be in."""
    (tmp_path / "big.c").write_text("static char big[2200000000];\n"
                                    "int main(int c, char** v) { big[c] = 1; return big[1]; }\n")
    with pytest.raises(AotError, match=r"^linking big failed: .*relocation truncated to fit: "):
        run_tool(["clang", "-O2", "big.c", "-static", "-o", "big"], tmp_path, "linking big")
