"""What the aot flash tests share: the command line run in-process, a
package built for a board."""
from __future__ import annotations

from pathlib import Path

import aot
from aot.cli import main
from support import MODELS


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """aot ARGS: (exit code, stdout, stderr)."""
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def package_for(tmp_path_factory, model: str, board: str) -> Path:
    """A package of shared model `model` built for `board` (a module's fixture)."""
    out = tmp_path_factory.mktemp(board) / "pkg"
    aot.package(MODELS / model, board=board, out_dir=out)
    return out
