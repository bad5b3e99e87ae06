"""Target x86_64-linux-avx512 and the local boards' cpu_flags check.

The target: 16 float lanes, 32 vector registers (the host target keeps 8 and
16). A local board names the /proc/cpuinfo flags its code needs; on a CPU
without one, running is refused with a one-line error before the harness
starts (not a SIGILL). The generated C for AVX-512 uses the 512-bit builtins
and has no lane-by-lane min/max loop (clang -O2 left those scalar: int8
kernels ran 15x slower).
"""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aot
from aot.api import as_graph, package
from aot.codegen.c import emit_c
from aot.deploy.host import check_cpu, cpu_flags
from aot.errors import AotError
from aot.ir.tir import FLOAT32, INT32, Bin, Buffer, BufferKind, For, ForKind, Load, PrimFunc, \
    Store, Var, seq
from aot.lower import lower_graph
from aot.packaging.metadata import read_metadata
from aot.targets import get_board, get_target
from support import MODELS

MISSING = "aot_no_such_flag"        # no CPU reports it
SMALL = MODELS / "tflm_hello_world_int8.tflite"
KWS = MODELS / "mlperf_kws_dscnn_int8.tflite"


def test_avx512_target_has_16_lanes_and_32_registers():
    t = get_target("x86_64-linux-avx512")
    assert (t.vector_bits, t.lanes(32), t.lanes(8)) == (512, 16, 64)
    assert t.vector_registers == 32
    host = get_board("host").target
    assert (host.lanes(32), host.vector_registers) == (8, 16)
    assert get_board("host-avx512").target == t


# ------------------------------------------------------- the cpu_flags check

def present_flag() -> str:
    flags = cpu_flags()
    assert flags, "no flags in /proc/cpuinfo: the local boards' check would pass anything"
    return "sse2" if "sse2" in flags else min(flags)


def write_board(boards: Path, cpu_flags_toml: str) -> None:
    """Board 'picky': the host target, run locally, needing `cpu_flags_toml`."""
    boards.mkdir(exist_ok=True)
    (boards / "picky.toml").write_text(
        'name = "picky"\ntarget = "x86_64-linux"\ntransport = "local"\n'
        f"flash_bytes = {2**30}\nram_bytes = {2**30}\n\n"
        f"[options]\ncpu_flags = {cpu_flags_toml}\n")


@pytest.fixture
def picky(tmp_path, monkeypatch):
    """(boards dir, package built for 'picky' whose harness only leaves a
    mark, an input file): whether anything ran shows as pkg/ran."""
    boards = tmp_path / "boards"
    write_board(boards, f'["{present_flag()}", "{MISSING}"]')
    monkeypatch.setenv("AOT_BOARDS_DIR", str(boards))
    pkg = package(SMALL, board="picky", out_dir=tmp_path / "pkg").path
    harness = pkg / "bench" / "bench"
    harness.write_text('#!/bin/sh\ntouch "$(dirname "$0")/../ran"\nexit 1\n')
    harness.chmod(0o755)
    spec = read_metadata(pkg)["inputs"][0]
    np.save(tmp_path / "x.npy", np.zeros(spec["shape"], spec["dtype"]))
    return boards, pkg, tmp_path / "x.npy"


def aot_run(pkg: Path, x: Path, out: Path, boards: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aot", "run", str(pkg), "--board", "picky", "--input", str(x),
         "--out", str(out)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "AOT_BOARDS_DIR": str(boards)})


def one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aot: error: "), r.stderr
    return lines[0]


def test_run_refuses_a_cpu_without_the_boards_flags(picky, tmp_path):
    boards, pkg, x = picky
    line = one_line_error(aot_run(pkg, x, tmp_path / "out", boards))
    # Only the missing flag is named, not the one this CPU has.
    assert line.endswith(f"lacks: {MISSING} (build for board 'host' instead)"), line
    assert "board 'picky'" in line, line
    assert not (pkg / "ran").exists() and not (tmp_path / "out").exists()
    # The mark works: with flags this CPU has, the (fake) harness does run.
    write_board(boards, f'["{present_flag()}"]')
    r = aot_run(pkg, x, tmp_path / "out", boards)
    assert "the harness failed" in one_line_error(r) and (pkg / "ran").exists()


def test_serve_refuses_a_cpu_without_the_boards_flags(picky):
    _, pkg, x = picky
    with aot.connect("picky") as dev:
        with pytest.raises(AotError, match=f"needs CPU features this machine lacks: {MISSING} "):
            dev.run(pkg, [np.load(x)])
    assert not (pkg / "ran").exists()


def with_cpu_flags(value):
    board = get_board("host")
    return dataclasses.replace(board, options={**board.options, "cpu_flags": value})


@pytest.mark.parametrize("value", ["avx2", ["avx2", 1]], ids=["string", "non-string item"])
def test_cpu_flags_not_a_list_of_strings_is_a_clear_error(value):
    with pytest.raises(AotError, match=r"board 'host': options.cpu_flags must be a list"):
        check_cpu(with_cpu_flags(value))


def test_cpu_flags_string_in_a_board_file_is_a_one_line_error(picky, tmp_path):
    boards, pkg, x = picky
    write_board(boards, '"avx2"')
    line = one_line_error(aot_run(pkg, x, tmp_path / "out", boards))
    assert "options.cpu_flags must be a list" in line, line
    assert not (pkg / "ran").exists()


@pytest.mark.parametrize("value", [5, True, {"avx2": 1}], ids=["int", "bool", "table"])
def test_cpu_flags_scalar_is_a_clear_error(value):
    with pytest.raises(AotError, match="options.cpu_flags must be a list"):
        check_cpu(with_cpu_flags(value))


def test_the_shipped_boards_name_real_flags():
    """host and host-avx512 name real /proc/cpuinfo flags (a typo would
    refuse every run): host's all hold on this machine (the suite runs
    on it); host-avx512's are x86-64-v4's AVX-512 set and VNNI (its int8
    kernels use vpdpbusd): a CPU with them all passes the check, one
    without is refused, naming what it lacks."""
    host = set(get_board("host").options["cpu_flags"])
    assert host and host <= cpu_flags(), sorted(host - cpu_flags())
    check_cpu(get_board("host"))
    wide = set(get_board("host-avx512").options["cpu_flags"])
    assert wide == {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd", "avx512_vnni"}
    lacking = [f for f in get_board("host-avx512").options["cpu_flags"] if f not in cpu_flags()]
    if lacking:
        with pytest.raises(AotError, match="needs CPU features this machine lacks: "
                           + ", ".join(lacking)):
            check_cpu(get_board("host-avx512"))
    else:
        check_cpu(get_board("host-avx512"))


# ------------------------------------------------------------ generated code

def minmax_helpers(source: str) -> dict[str, str]:
    """{name: body} of the C's min/max helper functions."""
    found = re.findall(r"^static inline \S+ (aot_(?:min|max)_\w+)\((.*?)^\}", source,
                       re.M | re.S)
    return dict(found)


def test_avx512_int8_c_uses_512_bit_vpdpbusd_and_no_minmax_lane_loop():
    """kws int8 on host-avx512: every conv, the first layer's window rows
    included, multiplies by 512-bit VNNI dot products (quads_u8), none by
    the 16-bit pairs (pmaddwd) the AVX2 board uses."""
    target = get_board("host-avx512").target
    graph = as_graph(KWS)
    source = "\n".join(emit_c([k.func for k in lower_graph(graph, target)], "m").parts)
    assert "_mm512_dpbusd_epi32" in source
    assert "pmaddwd" not in source
    helpers = minmax_helpers(source)
    assert any(name.endswith("x16") for name in helpers), sorted(helpers)
    for name, body in helpers.items():
        # GCC on x86 has its own lane loop (it vectorizes that, not the
        # blend: docs/package.md, "gcc and clang"); clang takes the rest.
        clang = body.split("#else", 1)[1] if "!defined(__clang__)" in body else body
        assert "for (" not in clang, f"{name} loops over lanes:\n{body}"


def test_16_lane_minmax_compiles_to_one_zmm_instruction(tmp_path):
    """What the C helper is for: clang at the target's -O2 turns 16-lane
    float32 and int32 min/max into vminps/vmaxps/vpminsd/vpmaxsd on zmm
    registers (compiled only: no AVX-512 CPU needed)."""
    target = get_target("x86_64-linux-avx512")
    i, stmts, bufs = Var("i"), [], []
    for d in (FLOAT32, INT32):
        a, b = Buffer(f"a_{d.scalar}", d, (64,)), Buffer(f"b_{d.scalar}", d, (64,))
        bufs += [a, b]
        for op in ("min", "max"):
            out = Buffer(f"{op}_{d.scalar}", d, (64,), BufferKind.OUTPUT)
            bufs.append(out)
            stmts.append(For(i, 64, Store(out, i, Bin(op, Load(a, i, 16), Load(b, i, 16))),
                             ForKind.VECTORIZED, step=16))
    (tmp_path / "k.c").write_text(emit_c([PrimFunc("minmax16", tuple(bufs), seq(*stmts))],
                                         "m").source)
    asm = subprocess.run([target.cc, *target.cflags, "-S", "-o", "-", str(tmp_path / "k.c")],
                         capture_output=True, text=True, check=True).stdout
    for insn in ("vminps", "vmaxps", "vpminsd", "vpmaxsd"):
        assert re.search(rf"\b{insn}\s.*%zmm", asm), f"no {insn} on zmm in:\n{asm[:3000]}"
