"""What the test modules share: where the repo and the real models are, and
the fixtures and model builders more than one test module uses (one module
each). Test modules import these, never each other.

The top conftest puts tests/ on sys.path, so `from support import MODELS`
and `from support.zoo import conv_model` work from any folder."""
from __future__ import annotations

import os
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
# The shared models sit beside the repo (../shared/models); never copy them in.
SHARED = Path(os.environ.get("AOT_SHARED", REPO.parent / "shared"))
MODELS = SHARED / "models"


def shared_models(pattern: str = "*") -> list[Path]:
    """Models in ../shared/models (not derived/), sorted by name."""
    found = sorted(p for p in MODELS.glob(pattern) if p.suffix in (".onnx", ".tflite"))
    if not found:
        raise RuntimeError(f"no models match {pattern} in {MODELS}: is ../shared there?")
    return found


def cpu_lacks(board: str) -> str:
    """Why this CPU cannot run `board`'s code, "" when it can: the flags of its
    options.cpu_flags that /proc/cpuinfo lacks, the check `aot doctor`
    reports. No emulator here runs AVX-512 (QEMU 7.2's TCG stops at AVX2),
    so a test running host-avx512 code skips with this reason elsewhere."""
    from aot.deploy.host import cpu_flags
    from aot.targets import get_board

    wanted = get_board(board).options.get("cpu_flags", ())
    missing = sorted(set(wanted) - cpu_flags())
    return f"this CPU lacks {', '.join(missing)} (board {board} needs them)" if missing else ""
