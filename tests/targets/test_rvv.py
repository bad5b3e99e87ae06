"""Targets rv64gcv and rv64gcv-zvl256b (RISC-V with RVV 1.0; 128- and
256-bit vectors) and their qemu-user boards.

A qemu-riscv64-rvv package runs unchanged at VLEN 128 and 256 (on
qemu-riscv64-rvv256); a qemu-riscv64-rvv256 package at VLEN 256, refused at
128. int8 outputs are bit-exact with tflite-micro, float ones within the
default tolerance of the reference runtime. The kernels' library holds RVV
instructions, and none of the truncating vector conversions (vfcvt.rtz.*)
that QEMU 7.2 aborts on. rvv_dot2p (aot/isa/rvv.py) matches numpy at the
int16 edges at both VLENs.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from aot.api import package, verify
from aot.deploy.qemu_user import package_cpu, vlen
from aot.errors import AotError
from aot.isa.dots import packed_pair_dot
from aot.ir.tir import Buffer, BufferKind, Const, DType, For, Load, PrimFunc, Store, Var, add, mul
from aot.lower.tir_passes.legalize import legalize
from aot.targets import get_board, get_target
from support import MODELS
from support.kernels import call_names, run_qemu

BOARDS = ("qemu-riscv64-rvv", "qemu-riscv64-rvv256")

pytestmark = pytest.mark.skipif(shutil.which("qemu-riscv64") is None,
                                reason="qemu-riscv64 is not installed")


def test_the_boards_vector_lengths():
    t, wide = (get_board(b).target for b in BOARDS)
    assert t.name == "rv64gcv" and t.has("v") and t.abi == "lp64d"
    assert (t.vector_bits, t.lanes(32), t.vector_registers) == (128, 4, 32)
    assert wide.name == "rv64gcv-zvl256b" and wide.has("v", "zvl256b")
    assert (wide.vector_bits, wide.lanes(32), wide.vector_registers) == (256, 8, 32)
    cpus = [get_board(b).options["cpu"] for b in BOARDS]
    assert ["vlen=128" in cpus[0], "vlen=256" in cpus[1]] == [True, True]
    assert get_board("bpi-f3").target == wide
    assert [vlen(x.features) for x in (t, wide, get_target("riscv64-linux"))] == [128, 256, 0]


def test_a_package_needing_a_longer_vlen_is_refused():
    meta = {"target": {"name": "rv64gcv-zvl256b", "triple": "riscv64-unknown-linux-gnu",
                       "cpu": "generic-rv64", "features": "+m,+a,+f,+d,+c,+v,+zvl256b"}}
    assert package_cpu(meta, get_board(BOARDS[1])) is None       # its own target
    with pytest.raises(AotError, match="need VLEN >= 256.*promises 128"):
        package_cpu(meta, get_board(BOARDS[0]))
    meta["target"].update(name="rv64gcv", features="+m,+a,+f,+d,+c,+v")
    assert package_cpu(meta, get_board(BOARDS[1])) is None       # the board's -cpu stands


N = 512         # pair dot products of 4 lanes each


def _pairs_func() -> PrimFunc:
    """out[4i..] = acc[4i..] + aot_dot2p(p[i], w[8i..]), N times."""
    acc = Buffer("acc", DType("int32"), (4 * N,))
    p = Buffer("p", DType("int32"), (N,))
    w = Buffer("w", DType("int16"), (8 * N,))
    out = Buffer("out", DType("int32"), (4 * N,), BufferKind.OUTPUT)
    i = Var("i", DType("int32"))
    at = mul(i, Const(4))
    body = Store(out, at, add(Load(acc, at, 4), packed_pair_dot(Load(p, i), Load(w, mul(i, Const(8)), 8))))
    return PrimFunc("dot2p", (acc, p, w, out), For(i, N, body))


@pytest.mark.parametrize("codegen", ["c", "llvm"])
def test_pair_dot_matches_numpy_at_the_int16_edges(codegen, tmp_path):
    board = get_board(BOARDS[0])
    func = legalize(_pairs_func(), board.target)
    assert call_names(func) == {"rvv_dot2p"}
    rng = np.random.default_rng(0)
    acc = rng.integers(-2**28, 2**28, 4 * N).astype(np.int32)
    x = rng.integers(-32767, 32768, (N, 2)).astype(np.int16)
    w = rng.integers(-32767, 32768, (N, 4, 2)).astype(np.int16)
    x[:64], w[:32], w[32:64] = -32767, -32767, 32767       # the largest products, both signs
    x[64:96, 0], x[96:128, 1] = 0, -1                      # a zero low half; -1, the high half's sign
    pairs = (x[:, 0].astype(np.int64) & 0xFFFF) + 65536 * x[:, 1].astype(np.int64)
    pairs = pairs.astype(np.uint32).view(np.int32)
    stdin = acc.tobytes() + pairs.tobytes() + w.tobytes()
    want = acc.astype(np.int64) + np.einsum("nkj,nj->nk", w.astype(np.int64),
                                            x.astype(np.int64)).reshape(-1)
    for name in BOARDS:
        qemu = ["qemu-riscv64", "-cpu", get_board(name).options["cpu"]]
        got = np.frombuffer(run_qemu(func, codegen, tmp_path, stdin, board.target, qemu),
                            np.int32)
        np.testing.assert_array_equal(got, want.astype(np.int32), err_msg=name)


def vector_instructions(pkg: Path) -> list[str]:
    """The RVV mnemonics of the package's kernel library."""
    lib = next((pkg / "lib").glob("lib*.a"))
    text = subprocess.run(["llvm-objdump", "-d", "--mattr=+v", str(lib)], capture_output=True,
                          text=True, check=True).stdout
    words = (line.split("\t") for line in text.splitlines())      # address+bytes, op, args
    return [w[1] for w in words if len(w) > 1 and w[1][:1] == "v"]


@pytest.mark.parametrize("name,codegen,built_for", [
    ("mlperf_kws_dscnn_int8", "c", BOARDS[0]), ("mlperf_ad_fcae_int8", "llvm", BOARDS[0]),
    ("mlperf_kws_dscnn_f32", "llvm", BOARDS[0]), ("mlperf_kws_dscnn_int8", "llvm", BOARDS[1])])
def test_packages_verify_at_vlen_128_and_256(name, codegen, built_for, tmp_path):
    model = MODELS / f"{name}.tflite"
    pkg = tmp_path / "pkg"
    package(model, board=built_for, codegen=codegen, out_dir=pkg)
    ops = vector_instructions(pkg)
    assert "vsetivli" in ops and "vle8.v" in ops, sorted(set(ops))
    assert not [op for op in ops if ".rtz." in op]
    for board in BOARDS[BOARDS.index(built_for):]:
        out = verify(pkg, board=board, source=model)
        assert out["ok"], (board, out)
        if name.endswith("int8"):
            assert out["reference"] == "tflite-micro", out
            assert all(r["max_abs_err"] == 0.0 for r in out["outputs"]), (board, out)
