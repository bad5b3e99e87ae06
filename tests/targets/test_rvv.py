"""Target rv64gcv (RISC-V with RVV 1.0) and its qemu-user boards.

One package per model runs unchanged at VLEN 128 (qemu-riscv64-rvv) and 256
(qemu-riscv64-rvv256): int8 outputs bit-exact with tflite-micro, float ones
within the default tolerance of the reference runtime. The kernels' library
holds RVV instructions, and none of the truncating vector conversions
(vfcvt.rtz.*) that QEMU 7.2 aborts on.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from aot.api import package, verify
from aot.targets import get_board
from support import MODELS

BOARDS = ("qemu-riscv64-rvv", "qemu-riscv64-rvv256")

pytestmark = pytest.mark.skipif(shutil.which("qemu-riscv64") is None,
                                reason="qemu-riscv64 is not installed")


def test_the_boards_share_the_target_and_differ_in_vlen():
    t = get_board(BOARDS[0]).target
    assert t.name == "rv64gcv" and t.has("v") and t.abi == "lp64d"
    assert (t.vector_bits, t.lanes(32), t.vector_registers) == (128, 4, 32)
    assert get_board(BOARDS[1]).target == t
    cpus = [get_board(b).options["cpu"] for b in BOARDS]
    assert ["vlen=128" in cpus[0], "vlen=256" in cpus[1]] == [True, True]
    assert get_board("bpi-f3").target == t


def vector_instructions(pkg: Path) -> list[str]:
    """The RVV mnemonics of the package's kernel library."""
    lib = next((pkg / "lib").glob("lib*.a"))
    text = subprocess.run(["llvm-objdump", "-d", "--mattr=+v", str(lib)], capture_output=True,
                          text=True, check=True).stdout
    words = (line.split("\t") for line in text.splitlines())      # address+bytes, op, args
    return [w[1] for w in words if len(w) > 1 and w[1][:1] == "v"]


@pytest.mark.parametrize("name,codegen", [("mlperf_kws_dscnn_int8", "c"),
                                          ("mlperf_ic_resnet8_int8", "llvm"),
                                          ("mlperf_kws_dscnn_f32", "llvm")])
def test_one_package_verifies_at_vlen_128_and_256(name, codegen, tmp_path):
    model = MODELS / f"{name}.tflite"
    pkg = tmp_path / "pkg"
    package(model, board=BOARDS[0], codegen=codegen, out_dir=pkg)
    ops = vector_instructions(pkg)
    assert "vsetivli" in ops and "vle8.v" in ops, sorted(set(ops))
    assert not [op for op in ops if ".rtz." in op]
    for board in BOARDS:
        out = verify(pkg, board=board, source=model)
        assert out["ok"], (board, out)
        if name.endswith("int8"):
            assert out["reference"] == "tflite-micro", out
            assert all(r["max_abs_err"] == 0.0 for r in out["outputs"]), (board, out)
