"""A package's C checked as a user's compiler sees it: the header alone and
every source under gcc and clang with -std=c99 -Wall -Wextra -Werror and the
target's ISA flags, and the list of a package's sources."""
from __future__ import annotations

import subprocess
from pathlib import Path

from aot.targets import get_board


HOST = get_board("host")


# ------------------------------------------------------------------ the C API

def compile_api_and_sources(pkg: Path, name: str) -> None:
    """The header alone, and every package source, under gcc and clang with
    -std=c99 -Wall -Wextra -Werror and the target's ISA flags (the kernels'
    vector types are the target's)."""
    isa = [f for f in HOST.target.cflags if f.startswith("-m")]
    (pkg.parent / "use.c").write_text(f'#include "{name}.h"\nint main(void) {{ return 0; }}\n')
    sources = [str(pkg.parent / "use.c"), *map(str, sorted((pkg / "src").glob("*.c"))),
               str(pkg / "bench" / "main.c"), str(pkg / "runtime_c" / "aot_platform.c")]
    for cc in ("gcc", "clang"):
        for src in sources:
            for extra in ([], ["-DAOT_PROFILE"]):
                r = subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1",
                                    *isa, *extra, f"-I{pkg}/include", f"-I{pkg}/runtime_c",
                                    f"-I{pkg}/src", "-c", src, "-o", str(pkg.parent / "x.o")],
                                   capture_output=True, text=True)
                assert r.returncode == 0, f"{cc} {src} {extra}:\n{r.stderr}"


# ------------------------------------------------------------------ sources

WARNINGS = ("-Wall", "-Wextra", "-Werror")


def sources(pkg: Path) -> list[Path]:
    return [*sorted((pkg / "src").glob("*.c")), pkg / "runtime_c" / "aot_platform.c",
            pkg / "bench" / "main.c"]
