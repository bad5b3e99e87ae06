"""Instructions counted on the emulated Linux boards (qemu-user): exact,
deterministic, per run and per kernel, from the QEMU plugin that make setup
builds (aot/deploy/insn_count.py)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, save

import aot
from aot.cli import main
from aot.deploy import insn_count
from aot.errors import AotError

from support import MODELS


def _relu_chain(path: Path, n: int) -> Path:
    """Two Relu kernels over n floats, with a Transpose between them so they
    stay two kernels."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Transpose", ["a"], ["b"], perm=[1, 0]),
             helper.make_node("Sigmoid", ["b"], ["y"])]
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, n])])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def _bench_json(capsys, *args: str) -> dict:
    assert main(["bench", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_counts_are_exact_and_deterministic(tmp_path, capsys):
    model = MODELS / "mlperf_ad_fcae_int8.tflite"
    pkg = tmp_path / "pkg"
    aot.package(model, board="qemu-aarch64", out_dir=pkg, profile=True)
    first = _bench_json(capsys, str(pkg), "--board", "qemu-aarch64", "--repeat", "4",
                        "--warmup", "1", "--profile")
    again = _bench_json(capsys, str(pkg), "--board", "qemu-aarch64", "--repeat", "3",
                        "--warmup", "0", "--profile")
    n = first["median_instructions"]
    # A whole inference counted: ad's ~264 k MACs at no more than about
    # 4-5 products per instruction (the A72 has no dot product).
    assert n > 50_000 and first["instructions"] == [n] * 4
    assert again["median_instructions"] == n and again["instructions"] == [n] * 3
    assert "instruction counts are exact" in first["note"]
    # Per kernel: each counted, and together all of a run but its clock calls
    # and the entry point's glue.
    kernels = [k["median_instructions"] for k in first["profile"]]
    assert len(kernels) == len(first["profile"]) and all(k > 0 for k in kernels)
    assert 0.95 * n < sum(kernels) < n
    # the two 256x1024 layers' kernels weigh most, as their MACs say
    macs = [k["macs"] for k in first["profile"]]
    assert np.argmax(kernels) in np.flatnonzero(np.asarray(macs) == max(macs))


@pytest.mark.parametrize("board", ["qemu-armv7", "qemu-riscv64"])
def test_counts_scale_with_the_work_on_every_qemu_user_board(tmp_path, capsys, board):
    counts = []
    for n in (64, 640):
        pkg = tmp_path / f"pkg{n}"
        aot.package(_relu_chain(tmp_path / f"chain{n}.onnx", n), board=board, out_dir=pkg)
        out = _bench_json(capsys, str(pkg), "--board", board, "--repeat", "2", "--warmup", "0")
        counts.append(out["median_instructions"])
    # ten times the elements: close to ten times the instructions
    assert 7 * counts[0] < counts[1] < 11 * counts[0], counts


def test_an_rpi5_package_runs_under_qemu_aarch64_with_its_own_cpu(tmp_path, capsys):
    pkg = tmp_path / "rpi5"
    aot.package(_relu_chain(tmp_path / "chain.onnx", 16), board="rpi5", out_dir=pkg)
    out = _bench_json(capsys, str(pkg), "--board", "qemu-aarch64", "--repeat", "2")
    assert out["median_instructions"] > 0
    from aot.deploy.qemu_user import package_cpu
    from aot.packaging.metadata import read_metadata
    from aot.targets import get_board
    assert package_cpu(read_metadata(pkg), get_board("qemu-aarch64")) == "cortex-a76"
    # an rpi4 package runs as qemu-aarch64's own target: its CPU, the board's
    rpi4 = tmp_path / "rpi4"
    aot.package(_relu_chain(tmp_path / "chain.onnx", 16), board="rpi4", out_dir=rpi4)
    assert package_cpu(read_metadata(rpi4), get_board("qemu-aarch64")) is None
    assert aot.bench(rpi4, board="qemu-aarch64", repeat=1)["median_instructions"] > 0
    # another ISA's emulator is still refused
    with pytest.raises(AotError, match="was built for board 'rpi5', not 'qemu-armv7'"):
        aot.bench(pkg, board="qemu-armv7", repeat=1)


def test_marks_split_into_runs_and_kernels():
    # 1 warm-up + 2 timed runs of 2 kernels: t0, (begin, end) x 2, t1 per run
    marks = []
    for base in (0, 1000, 2000):
        marks += [base, base + 10, base + 110, base + 120, base + 320, base + 330]
    counts = insn_count.split_marks(marks, warmup=1, runs=2, kernels=2)
    assert counts.runs == [330, 330] and counts.kernels == [[100, 200], [100, 200]]
    assert insn_count.split_marks(marks[:4], 0, 2, None).runs == [10, 10]
    with pytest.raises(AotError, match="saw 5 clock reads, expected 6"):
        insn_count.split_marks(marks[:5], 0, 1, 2)


def test_the_log_is_read_at_the_harness_clock(tmp_path):
    log = tmp_path / "log"
    log.write_text("mark 10\nmark 40\nnoise 3\nmark 55\nmark 95\ntotal 120\n")
    assert insn_count.clock_marks(log.read_text()) == [10, 40, 55, 95]
    assert insn_count.read_counts(log, 1, 1, None).runs == [40]
    with pytest.raises(AotError, match="has no aot_platform_timer_ns symbol"):
        insn_count.mark_address(Path(insn_count.build_plugin()))


def test_cortex_m_counts_are_exact_per_run_and_kernel(tmp_path, capsys):
    """mps2-an386 (Cortex-M4 under qemu-system-arm): the same counter, so
    instructions, not the 1 us SysTick clock's thousands."""
    pkg = tmp_path / "m4"
    aot.package(MODELS / "mlperf_ad_fcae_int8.tflite", board="mps2-an386", out_dir=pkg,
                profile=True)
    out = _bench_json(capsys, str(pkg), "--board", "mps2-an386", "--repeat", "3",
                      "--warmup", "1", "--profile")
    n = out["median_instructions"]
    assert out["instructions"] == [n] * 3 and n > 100_000
    kernels = [k["median_instructions"] for k in out["profile"]]
    assert all(k > 0 for k in kernels) and 0.95 * n < sum(kernels) < n
    # the SysTick time (1 ns per instruction under -icount shift=0, read in us) agrees
    assert abs(out["median_ms"] * 1e6 - n) < 0.01 * n
