#!/usr/bin/env python3
"""aot's int8 MLPerf Tiny models on the microcontroller boards (Cortex-M,
RISC-V rv32), in instructions, beside the Cortex-M4's and the published
cycle counts of other deployments.

    .venv/bin/python bench/cortex_m.py [--boards mps2-an386,mps3-an547,qemu-rv32]
                                       [--models kws,vww,ic,ad] [--codegen c] [--json FILE]
    .venv/bin/python bench/cortex_m.py --cores [--models ...]

--cores: per core, the four MLPerf Tiny int8 models and the four
microWakeWord streaming models (instructions per streaming step), each
core's count beside the Cortex-M4's: M4 (mps2-an386), M33 (mps2-an505),
M3 (mps2-an385), M0 (microbit). A model that does not fit the micro:bit's
16 KiB of RAM or 256 KiB of flash is counted on bench-m0-an385
(bench/boards/: the same M0 code on QEMU's AN385 for its 4 MiB of RAM,
a bench-only board) and marked so.

Each model is packaged for each board, run under qemu-system-arm (or
qemu-system-riscv32) and its
instructions per inference counted exactly (aot bench's median_instructions:
aot/deploy/insn_count.py); beside it the code of the model library (text and
unwind tables of lib<name>.a, the harness and libc excluded). A real
Cortex-M4/M7 needs at least one cycle per instruction (more for loads,
multiplies that stall, taken branches, flash wait states), so a count is a
lower bound on the cycles aot's code would take (an ESP32-C3 too: one
instruction per cycle at best):
when it is above a published cycle count, aot is behind that deployment for
sure; when below, it may or may not be ahead.

The published figures are MLPerf Tiny v1.0 results on a 120 MHz Cortex-M4
(STM32L4R5), latency x 120 MHz:

    microTVM + CMSIS-NN  kws 99.8 ms (11.98 M cycles)  vww 301 ms (36.1 M)
    X-CUBE-AI            kws 62.9 ms  (7.5 M)           vww 118.7 ms (14.2 M)
    Plumerai             kws 47.8 ms  (5.7 M)           vww 98.8 ms (11.9 M)

The column "x M4" is the board's count over mps2-an386's (Cortex-M4 with
the DSP extension) for the same model, when that board is in the run. A
model that does not fit a board's memories is listed with the reason.

Exit 0 always: this prints numbers, it judges nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import aot  # noqa: E402
from aot.packaging.footprint import library_footprint  # noqa: E402
from aot.targets import BOARDS_ENV  # noqa: E402

MODELS = {"kws": "mlperf_kws_dscnn_int8", "vww": "mlperf_vww_mbv1_int8",
          "ic": "mlperf_ic_resnet8_int8", "ad": "mlperf_ad_fcae_int8",
          "alexa": "streaming/mww_alexa", "hey_jarvis": "streaming/mww_hey_jarvis",
          "hey_mycroft": "streaming/mww_hey_mycroft", "okay_nabu": "streaming/mww_okay_nabu"}
MLPERF = ("kws", "vww", "ic", "ad")
# --cores: each core's board, the M4 first (the others' reference); where a
# model does not fit the micro:bit, the bench-only board with the M0's code.
CORES = {"M4": "mps2-an386", "M33": "mps2-an505", "M3": "mps2-an385", "M0": "microbit"}
M0_ROOMY = "bench-m0-an385"
# Millions of cycles on a 120 MHz Cortex-M4, MLPerf Tiny v1.0.
PUBLISHED = {"microTVM + CMSIS-NN": {"kws": 11.98, "vww": 36.1},
             "X-CUBE-AI": {"kws": 7.5, "vww": 14.2},
             "Plumerai": {"kws": 5.7, "vww": 11.9}}


M4 = "mps2-an386"


def count(model: Path, board: str, codegen: str, work: Path) -> dict:
    pkg = work / f"{model.stem}-{board}-{codegen}"
    try:
        aot.package(model, board=board, codegen=codegen, out_dir=pkg)
    except aot.BudgetError as e:
        if board == CORES["M0"]:
            return count(model, M0_ROOMY, codegen, work)
        return {"model": model.stem, "board": board, "codegen": codegen, "refused": str(e)}
    out = aot.bench(pkg, board=board, warmup=0, repeat=1)
    meta = json.loads((pkg / "metadata.json").read_text())
    fp = library_footprint(next((pkg / "lib").glob("lib*.a")))
    return {"model": model.stem, "board": board, "codegen": codegen,
            "instructions": out["median_instructions"],
            "arena_bytes": meta.get("arena_bytes"),
            "code_bytes": fp["text"] + fp["unwind"]}


def cores_table(rows: list[dict], keys: list[str]) -> None:
    """Per model, each core's M instructions and its ratio to the M4's."""
    print("instructions per inference (streaming models: per step), exact QEMU counts; "
          "each core beside the Cortex-M4's")
    head = ["model", *(f"{core} ({board})" for core, board in CORES.items())]
    print(" | ".join(head))
    print("|".join("---" for _ in head))
    for key in keys:
        got = {r["core"]: r for r in rows if r["key"] == key}
        m4 = got["M4"]["instructions"]
        cells = [key]
        for core in CORES:
            r = got[core]
            n = r["instructions"] / 1e6
            cell = f"{n:.2f} M" if n >= 1 else f"{n:.3f} M"
            if core != "M4":
                cell += f" ({r['instructions'] / m4:.2f}x)"
            if r["board"] == M0_ROOMY:
                cell += f" on {M0_ROOMY}: does not fit the micro:bit"
            cells.append(cell)
        print(" | ".join(cells))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--boards", default="mps2-an386,mps3-an547,qemu-rv32")
    parser.add_argument("--models", default=None)
    parser.add_argument("--codegen", default="c", choices=("c", "llvm"))
    parser.add_argument("--cores", action="store_true",
                        help="M4, M33, M3 and M0 side by side, MLPerf Tiny and microWakeWord")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    shared = Path(__import__("os").environ.get("AOT_SHARED", REPO.parent / "shared"))
    keys = (args.models or ",".join(MODELS if args.cores else MLPERF)).split(",")
    if args.cores:
        os.environ[BOARDS_ENV] = os.pathsep.join(
            d for d in (os.environ.get(BOARDS_ENV, ""), str(REPO / "bench" / "boards")) if d)
        rows = []
        with tempfile.TemporaryDirectory(prefix="aot-cortex-m-") as tmp:
            for key in keys:
                for core, board in CORES.items():
                    rows.append(count(shared / "models" / f"{MODELS[key]}.tflite", board,
                                      args.codegen, Path(tmp)) | {"key": key, "core": core})
        cores_table(rows, keys)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="aot-cortex-m-") as tmp:
        for key in keys:
            for board in args.boards.split(","):
                rows.append(count(shared / "models" / f"{MODELS[key]}.tflite", board,
                                  args.codegen, Path(tmp)) | {"key": key})
    print("instructions per inference (exact, QEMU's count); cycles on a real core are at "
          "least this many")
    head = ["model", "board", "M instructions", "x M4", "kernel code B",
            *(f"{name} M cycles" for name in PUBLISHED)]
    print(" | ".join(head))
    print("|".join("---" for _ in head))
    m4 = {r["model"]: r["instructions"] for r in rows if r["board"] == M4 and "instructions" in r}
    for r in rows:
        if "refused" in r:
            print(" | ".join([r["model"], r["board"], "does not fit: " + r["refused"]]))
            continue
        anchor = m4.get(r["model"])
        cells = [r["model"], r["board"], f"{r['instructions'] / 1e6:.2f}",
                 f"{r['instructions'] / anchor:.2f}" if anchor else "",
                 f"{r['code_bytes']:,}"]
        for figures in PUBLISHED.values():
            pub = figures.get(r["key"])
            cells.append(f"{pub:.2f} (aot {r['instructions'] / 1e6 / pub:.2f}x)" if pub else "")
        print(" | ".join(cells))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
