"""`make demo`, the README's first command, end to end: scripts/demo.py
generates its model, packages it for qemu-rpi4, boots the VM, runs over
SSH against ONNX Runtime and benches. It broke once unnoticed (it read an
output file by an old name), so the suite runs it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from aot.deploy import vm_image

REPO = Path(__file__).resolve().parents[2]


def test_make_demo_runs_end_to_end(tmp_path):
    image = vm_image.find_image()          # make setup built it
    cache = tmp_path / "cache"
    (cache / "vm").mkdir(parents=True)
    (cache / "vm" / image.dir.name).symlink_to(image.dir)
    env = {**os.environ, vm_image.CACHE_ENV: str(cache), "TMPDIR": str(tmp_path)}
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "demo.py")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    out = r.stdout
    assert "max abs error" in out and ": match" in out
    assert (tmp_path / "out" / "demo" / "run" / "probs.npy").is_file()
    # the latency table from the emulated Pi 4 comes last
    assert "latency of tiny_kws on qemu-rpi4" in out and "median ms" in out
