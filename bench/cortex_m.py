#!/usr/bin/env python3
"""aot's int8 MLPerf Tiny models on the microcontroller boards (Cortex-M,
RISC-V rv32), in instructions, beside the Cortex-M4's and the published
cycle counts of other deployments.

    .venv/bin/python bench/cortex_m.py [--boards mps2-an386,mps3-an547,qemu-rv32]
                                       [--models kws,vww,ic,ad] [--codegen c] [--json FILE]

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
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import aot  # noqa: E402
from aot.packaging.footprint import library_footprint  # noqa: E402

MODELS = {"kws": "mlperf_kws_dscnn_int8", "vww": "mlperf_vww_mbv1_int8",
          "ic": "mlperf_ic_resnet8_int8", "ad": "mlperf_ad_fcae_int8"}
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
        return {"model": model.stem, "board": board, "codegen": codegen, "refused": str(e)}
    out = aot.bench(pkg, board=board, warmup=0, repeat=1)
    meta = json.loads((pkg / "metadata.json").read_text())
    fp = library_footprint(next((pkg / "lib").glob("lib*.a")))
    return {"model": model.stem, "board": board, "codegen": codegen,
            "instructions": out["median_instructions"],
            "arena_bytes": meta.get("arena_bytes"),
            "code_bytes": fp["text"] + fp["unwind"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--boards", default="mps2-an386,mps3-an547,qemu-rv32")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--codegen", default="c", choices=("c", "llvm"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    shared = Path(__import__("os").environ.get("AOT_SHARED", REPO.parent / "shared"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="aot-cortex-m-") as tmp:
        for key in args.models.split(","):
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
