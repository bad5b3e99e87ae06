#!/usr/bin/env python3
"""The MLPerf Tiny models on RISC-V vector boards against the scalar rv64
package, in instructions per inference.

    .venv/bin/python bench/rvv.py [--models kws,vww,ic] [--dtypes int8,f32]
                                  [--codegen c,llvm] [--json FILE]

Each model is packaged for qemu-riscv64 (RV64GC, scalar), for
qemu-riscv64-rvv (RV64GCV, 128-bit vectors, run at VLEN 128) and for
qemu-riscv64-rvv256 (256-bit vectors, run at VLEN 256; the 128-bit package
runs there too, its count the same as at VLEN 128: its vectors are fixed at
128 bits). Instructions are counted exactly by QEMU's plugin (aot bench's
median_instructions, aot/deploy/insn_count.py). The ratio is scalar /
rvv-128: how many times fewer instructions the vector package runs.

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

MODELS = {"kws": "mlperf_kws_dscnn", "vww": "mlperf_vww_mbv1", "ic": "mlperf_ic_resnet8",
          "ad": "mlperf_ad_fcae"}
SCALAR, RVV, RVV256 = "qemu-riscv64", "qemu-riscv64-rvv", "qemu-riscv64-rvv256"


def instructions(pkg: Path, board: str) -> int:
    return aot.bench(pkg, board=board, warmup=0, repeat=1)["median_instructions"]


def row(model: Path, codegen: str, work: Path) -> dict:
    counts = {}
    for key, board in (("scalar", SCALAR), ("rvv128", RVV), ("rvv256", RVV256)):
        pkg = work / f"{model.stem}-{codegen}-{board}"
        aot.package(model, board=board, codegen=codegen, out_dir=pkg)
        counts[key] = instructions(pkg, board)
    return {"model": model.stem, "codegen": codegen, **counts,
            "ratio": counts["scalar"] / counts["rvv128"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="kws,vww,ic")
    parser.add_argument("--dtypes", default="int8,f32")
    parser.add_argument("--codegen", default="c,llvm")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    shared = Path(os.environ.get("AOT_SHARED", REPO.parent / "shared"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="aot-rvv-") as tmp:
        for key in args.models.split(","):
            for dtype in args.dtypes.split(","):
                for codegen in args.codegen.split(","):
                    model = shared / "models" / f"{MODELS[key]}_{dtype}.tflite"
                    rows.append(row(model, codegen, Path(tmp)))
                    print(f"{model.stem} {codegen}: done", file=sys.stderr, flush=True)
    print("instructions per inference, millions (exact, QEMU's count)")
    head = ["model", "codegen", "scalar rv64", "rvv-128", "rvv-256", "scalar / rvv-128"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for r in rows:
        print(f"| {r['model']} | {r['codegen']} | {r['scalar'] / 1e6:.2f} | "
              f"{r['rvv128'] / 1e6:.2f} | {r['rvv256'] / 1e6:.2f} | {r['ratio']:.2f}x |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
