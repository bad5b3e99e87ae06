"""The aot command line run in-process with its output captured as text
(for tests that run many commands: no subprocess start each)."""
from __future__ import annotations

import contextlib
import io


def cli(*args: str) -> tuple[int, str, str]:
    """aot ARGS: (exit code, stdout, stderr)."""
    from aot.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()
