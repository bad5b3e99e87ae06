"""bench/insn_mix.py: the int16 conv and its int8 twin counted by class in
their kernels under qemu-aarch64 (outputs checked against the interpreter
first): on the Cortex-A76 (rpi5 packages) the byte planes take exactly two
SDOTs per int8 SDOT; on the Cortex-A72 (rpi4) the int16 products are one
SMLAL per 4; the classes add up to each kernel's total."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from support import REPO

MIX = REPO / "bench" / "insn_mix.py"


def _mix(board: str) -> dict[str, tuple[int, dict[str, int]]]:
    """bench/insn_mix.py's rows for the int16 pair in C on `board`: side ->
    (total, counts by class), the classes checked to add up."""
    r = subprocess.run([sys.executable, str(MIX), "--pairs", "int16", "--codegen", "c",
                        "--board", board], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = {}
    for line in r.stdout.splitlines():
        m = re.match(rf"(int16(?: twin)?) c {board}: total ([\d,]+) = (.*)$", line)
        if m:
            counts = {k: int(v.replace(",", "")) for k, v in
                      (part.split() for part in m.group(3).split(", "))}
            rows[m.group(1)] = (int(m.group(2).replace(",", "")), counts)
    assert set(rows) == {"int16", "int16 twin"}, r.stdout
    for total, counts in rows.values():
        assert set(counts) == {"sdot", "mull", "load", "store", "other"}
        assert abs(sum(counts.values()) - total) <= 1     # each class rounded per call
        assert counts["load"] > 0 and counts["other"] > 0
    return rows


def test_int16_conv_mix_has_twice_the_twins_sdots():
    rows = _mix("rpi5")
    # 32 x 32 pixels x 16 channels x 9 taps x 16 input channels / 16 products
    assert rows["int16 twin"][1]["sdot"] == 147_456
    assert rows["int16"][1]["sdot"] == 2 * 147_456


def test_int16_conv_on_the_a72_is_one_smlal_per_4_products():
    """rpi4 (Cortex-A72, no SDOT): the int16 conv's 2,359,296 products in
    SMLALs by element, 4 each; the twin's in SMULL / SMLAL2 pairs (16
    products a pair, summed by a SADALP)."""
    rows = _mix("rpi4")
    assert rows["int16"][1]["mull"] == 2_359_296 // 4
    assert rows["int16 twin"][1]["mull"] == 2 * 2_359_296 // 16
    assert rows["int16"][1]["sdot"] == rows["int16 twin"][1]["sdot"] == 0
