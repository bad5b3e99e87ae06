"""bench/insn_mix.py: the int16 conv and its int8 twin counted by class in
their kernels under qemu-aarch64 -cpu cortex-a76 (rpi5 packages, outputs
checked against the interpreter first): the byte planes take exactly two
SDOTs per int8 SDOT, and the classes add up to each kernel's total."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from support import REPO

MIX = REPO / "bench" / "insn_mix.py"


def test_int16_conv_mix_has_twice_the_twins_sdots():
    r = subprocess.run([sys.executable, str(MIX), "--pairs", "int16", "--codegen", "c"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = {}
    for line in r.stdout.splitlines():
        m = re.match(r"(int16(?: twin)?) c rpi5: total ([\d,]+) = (.*)$", line)
        if m:
            counts = {k: int(v.replace(",", "")) for k, v in
                      (part.split() for part in m.group(3).split(", "))}
            rows[m.group(1)] = (int(m.group(2).replace(",", "")), counts)
    assert set(rows) == {"int16", "int16 twin"}, r.stdout
    for total, counts in rows.values():
        assert set(counts) == {"sdot", "load", "store", "other"}
        assert abs(sum(counts.values()) - total) <= 1     # each class rounded per call
        assert counts["load"] > 0 and counts["other"] > 0
    # 32 x 32 pixels x 16 channels x 9 taps x 16 input channels / 16 products
    assert rows["int16 twin"][1]["sdot"] == 147_456
    assert rows["int16"][1]["sdot"] == 2 * 147_456
