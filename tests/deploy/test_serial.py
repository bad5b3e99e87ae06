"""The serial transport end to end: QEMU plays the microcontroller (aot
flash's way: the package's harness with the board's UART on a pty) and
aot run / verify / bench reach it with --port, as a board on a USB serial
adapter. Bit-exactness against tflite-micro, the device's own cycle
counter, the package identity check, and a line cut mid-frame (QEMU
killed; a pty closed or gone silent in the middle of a reply) ending in one
line within a bounded time.
"""
from __future__ import annotations

import contextlib
import json
import os
import struct
import threading
import time
from pathlib import Path

import pytest

import aot
from aot.cli import main
from aot.deploy.qemu_serial import start_qemu_board
from aot.deploy.serial_link import GAP_S
from aot.packaging.identity import package_id
from aot.packaging.metadata import read_metadata
from aot.targets import get_board
from support import MODELS

KWS = MODELS / "mlperf_kws_dscnn_int8.tflite"
SMALL = MODELS / "tflm_hello_world_int8.tflite"
COUNTERS = {"mps2-an386": ("systick", 25_000_000), "mps2-an505": ("systick", 20_000_000),
            "qemu-rv32": ("mcycle", 160_000_000)}


@contextlib.contextmanager
def qemu_board(pkg: Path, board: str):
    qemu = start_qemu_board(pkg, get_board(board))
    try:
        yield qemu
    finally:
        qemu.process.kill()
        qemu.process.wait()


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """main's exit code, stdout and stderr (progress lines dropped)."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err.strip()


@pytest.fixture(scope="module")
def kws386(tmp_path_factory) -> Path:
    return aot.package(KWS, board="mps2-an386",
                       out_dir=tmp_path_factory.mktemp("serial") / "kws").path


def check_bit_exact(doc: dict, samples: int) -> None:
    assert doc["ok"] and doc["reference"] == "tflite-micro" and doc["samples"] == samples
    for out in doc["outputs"]:
        assert out["max_abs"] == 0 and out["max_lsb"] == 0, out


def check_counter(doc: dict, board: str, repeat: int) -> None:
    """Cycles from the device's counter: positive, named, and what the
    harness's own microsecond clock says at that counter's rate."""
    counter, hz = COUNTERS[board]
    assert doc["cycle_counter"] == counter and doc["counter_hz"] == hz
    assert len(doc["cycles"]) == repeat and min(doc["cycles"]) > 0
    assert doc["median_cycles"] == sorted(doc["cycles"])[repeat // 2]
    per_ms = hz / 1000
    assert abs(doc["median_cycles"] - doc["median_ms"] * per_ms) <= per_ms / 1000 + 1


def test_kws_int8_over_the_an386_uart(kws386, capsys):
    """The acceptance: verify kws int8 bit-exact over 20 samples, then bench,
    then another package refused by its identity, on one QEMU board."""
    with qemu_board(kws386, "mps2-an386") as qemu:
        code, out, err = cli(capsys, "verify", str(KWS), "--board", "mps2-an386", "--port",
                             qemu.port, "--count", "20", "--json")
        assert code == 0, err
        check_bit_exact(json.loads(out), 20)

        code, out, err = cli(capsys, "bench", str(kws386), "--port", qemu.port, "--repeat", "3",
                             "--warmup", "0", "--json")
        assert code == 0, err
        check_counter(json.loads(out), "mps2-an386", 3)

        code, out, err = cli(capsys, "bench", str(SMALL), "--board", "mps2-an386", "--port",
                             qemu.port, "--repeat", "1")
        assert code == 2 and out == ""
        want = package_id(kws386, read_metadata(kws386)["name"])
        assert err.startswith(f"aot: error: serial port {qemu.port}: the device runs package "
                              f"{want}, not this one (")
        assert len(err.splitlines()) == 1
        assert qemu.process.poll() is None      # the board serves on


@pytest.mark.parametrize("board", ["mps2-an505", "qemu-rv32"])
def test_a_small_model_over_the_uart(board, capsys, tmp_path):
    pkg = aot.package(SMALL, board=board, out_dir=tmp_path / "pkg").path
    with qemu_board(pkg, board) as qemu:
        code, out, err = cli(capsys, "verify", str(pkg), "--model", str(SMALL), "--port",
                             qemu.port, "--count", "20", "--json")
        assert code == 0, err
        check_bit_exact(json.loads(out), 20)
        code, out, err = cli(capsys, "bench", str(pkg), "--port", qemu.port, "--repeat", "3",
                             "--warmup", "0", "--json")
        assert code == 0, err
        check_counter(json.loads(out), board, 3)


def test_qemu_killed_during_a_request_is_one_line_in_bounded_time(kws386, capsys):
    with qemu_board(kws386, "mps2-an386") as qemu:
        killer = threading.Timer(1.0, qemu.process.kill)
        start = time.monotonic()
        killer.start()
        code, out, err = cli(capsys, "bench", str(kws386), "--port", qemu.port, "--repeat", "1000",
                             "--warmup", "0")
        took = time.monotonic() - start
        killer.cancel()
    assert code == 2 and out == "" and took < 5
    # QEMU dies while the host reads a reply or while it sends the next
    # request: either way the line broke, said once
    assert err.startswith(f"aot: error: serial port {qemu.port}: the line broke ")
    assert len(err.splitlines()) == 1


# A device made by hand on a pty: it answers the sync with the package's
# true hello, then cuts its reply after a few bytes.

@pytest.fixture(scope="module")
def small386(tmp_path_factory) -> Path:
    return aot.package(SMALL, board="mps2-an386",
                       out_dir=tmp_path_factory.mktemp("serial") / "small").path


def hello_of(pkg: Path) -> bytes:
    meta = read_metadata(pkg)
    ins, outs = meta["inputs"], meta["outputs"]
    frame = b"AOTH" + struct.pack("<5I", 2, len(ins), len(outs), len(meta["kernels"]), 4)
    frame += struct.pack("<2Q", meta["arena_bytes"], 1000)
    frame += b"".join(struct.pack("<Q", s["bytes"]) for s in ins + outs)
    ident = package_id(pkg, meta["name"]).encode()
    return frame + ident + b"systick".ljust(16, b"\0") + struct.pack("<Q", 25_000_000)


def read_exactly(fd: int, n: int) -> bytes:
    data = b""
    while len(data) < n:
        data += os.read(fd, n - len(data))
    return data


def fake_device(master: int, hello: bytes, request_bytes: int, close: bool) -> None:
    window = b""
    while window != b"AOTS":
        window = (window + os.read(master, 1))[-4:]
    os.write(master, hello)
    read_exactly(master, request_bytes)
    os.write(master, b"AOTR" + struct.pack("<I", 1))     # cut after 8 bytes of the reply
    if close:
        os.close(master)
    else:
        time.sleep(GAP_S + 3)


@pytest.mark.parametrize("close", [True, False], ids=["pty-closed", "line-silent"])
def test_a_reply_cut_mid_frame_is_one_line_in_bounded_time(small386, capsys, close):
    master, slave = os.openpty()
    port = os.ttyname(slave)
    meta = read_metadata(small386)
    request = 16 + sum(8 + s["bytes"] for s in meta["inputs"])
    device = threading.Thread(target=fake_device, args=(master, hello_of(small386), request,
                                                        close), daemon=True)
    device.start()
    start = time.monotonic()
    code, out, err = cli(capsys, "bench", str(small386), "--port", port, "--repeat", "1",
                         "--warmup", "0")
    took = time.monotonic() - start
    os.close(slave)
    if not close:
        os.close(master)
    assert code == 2 and out == ""
    assert took < GAP_S + 2
    why = "the line broke" if close else f"went silent for {GAP_S:g} s in the middle of a frame"
    assert err.startswith("aot: error: ") and f"serial port {port}" in err and why in err, err
    assert len(err.splitlines()) == 1
