#!/usr/bin/env python3
"""The instruction mix of a pair's kernels under qemu-aarch64: SDOT, the
widening multiplies (SMULL / SMLAL), loads, stores and the rest, per
inference, in the kernels only.

    .venv/bin/python bench/insn_mix.py [--pairs int16] [--board rpi5] [--codegen c,llvm]

Each side of a pair (bench/twins.py's pairs) is packaged for the board (an
AArch64 board counted under qemu-aarch64 with its package's core), its
output checked against the interpreter, then run once under the QEMU plugin
bench/qemu/insn_mix.c over the address ranges of the harness's
`model_kernel_*` functions. The int16 conv needs two SDOTs (byte planes)
where its int8 twin needs one, so its SDOT count is twice the twin's: the
mix shows what the loads and the rest add on top of that bound. On the A72
(rpi4: no SDOT) the int16 conv's products are SMLALs (4 a instruction) and
the twin's SMULL / SMLAL2 pairs (16 in 3 instructions with a SADALP).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from aot.errors import AotError  # noqa: E402

CLASSES = ("sdot", "mull", "load", "store", "other")
KERNEL_PREFIX = "model_kernel_"


def build_plugin(out_dir: Path) -> Path:
    """bench/qemu/insn_mix.c built with gcc into out_dir."""
    src = REPO / "bench" / "qemu" / "insn_mix.c"
    out = out_dir / "insn_mix.so"
    r = subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-fvisibility=hidden", "-o", str(out),
                        str(src)], capture_output=True, text=True)
    if r.returncode != 0:
        raise AotError(f"cannot build {src}: {r.stderr.strip()}")
    return out


def kernel_ranges(exe: Path) -> list[tuple[int, int]]:
    """[start, end) of every model_kernel_* function of the harness, the
    first kernel's first."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    with open(exe, "rb") as f:
        elf = ELFFile(f)
        found = sorted(
            (str(sym.name), int(sym["st_value"]), int(sym["st_value"]) + int(sym["st_size"]))
            for section in elf.iter_sections() if isinstance(section, SymbolTableSection)
            for sym in section.iter_symbols()
            if sym.name.startswith(KERNEL_PREFIX) and sym["st_info"]["type"] == "STT_FUNC"
            and sym["st_size"])
    if not found:
        raise AotError(f"{exe}: no {KERNEL_PREFIX}* function (a stripped harness?)")
    return [(lo, hi) for _, lo, hi in found]


def mix(pkg: Path, board, inputs, plugin: Path) -> dict[str, float]:
    """Per inference (the count over the kernels' calls divided by the
    first kernel's calls), instructions by class."""
    from aot.deploy.host import run_local
    from aot.deploy.qemu_user import package_cpu, qemu_command
    from aot.packaging.metadata import read_metadata

    exe = pkg / "bench" / "bench"
    ranges = ",".join(f"range={lo:#x}:{hi:#x}" for lo, hi in kernel_ranges(exe))
    qemu = qemu_command(board, package_cpu(read_metadata(pkg), board))
    with tempfile.TemporaryDirectory(prefix="aot-insn-mix-") as tmp:
        log = Path(tmp) / "mix.log"
        plugin_arg = str(plugin).replace(",", ",,")
        run_local(pkg, inputs, 0, 1, where=" under qemu-user", emulator=[
            *qemu, "-plugin", f"{plugin_arg},{ranges}", "-d", "plugin", "-D", str(log)])
        counts = dict(line.split() for line in log.read_text().splitlines()
                      if len(line.split()) == 2)
    calls = int(counts["calls"])
    if calls == 0:
        raise AotError(f"{pkg}: the kernels never ran under the plugin")
    return {c: int(counts[c]) / calls for c in CLASSES}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", default="int16")
    p.add_argument("--board", default="rpi5")
    p.add_argument("--codegen", default="c,llvm")
    args = p.parse_args()

    import aot
    from aot.targets import get_board
    from twins import check, inputs_of, pairs

    all_pairs = pairs()
    board = get_board("qemu-aarch64")
    with tempfile.TemporaryDirectory(prefix="aot-mix-") as tmp:
        plugin = build_plugin(Path(tmp))
        for name in args.pairs.split(","):
            if name not in all_pairs:
                raise AotError(f"--pairs: no pair {name} (there are {', '.join(all_pairs)})")
            for cg in args.codegen.split(","):
                rows = []
                for side, model in zip(("first", "twin"), all_pairs[name]):
                    graph = aot.optimize(aot.load(model))
                    x = inputs_of(graph)
                    pkg = aot.package(model, args.board, cg,
                                      out_dir=Path(tmp) / f"{name}{side}{cg}").path
                    check(pkg, board, graph, x)
                    rows.append(mix(pkg, board, x, plugin))
                for side, m in zip((name, f"{name} twin"), rows):
                    total = sum(m.values())
                    print(f"{side} {cg} {args.board}: total {total:,.0f} = " + ", ".join(
                        f"{c} {m[c]:,.0f}" for c in CLASSES), flush=True)
                products = ", ".join(f"{c} {rows[0][c] / rows[1][c]:.2f}x"
                                     for c in ("sdot", "mull") if rows[1][c])
                rest = [r["store"] + r["other"] for r in rows]
                print(f"{name} {cg} {args.board}: {products}, loads "
                      f"{rows[0]['load'] / rows[1]['load']:.2f}x, rest (stores + other) "
                      f"{rest[0] / rest[1]:.2f}x the twin's", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AotError as e:
        print(f"aot: {e}", file=sys.stderr)
        sys.exit(2)
