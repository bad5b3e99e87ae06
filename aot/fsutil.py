"""Writing output directories whole or not at all."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Callable

from aot.errors import AotError


def write_dir_atomically(target: Path, fill: Callable[[Path], None], force: bool) -> None:
    """Create `target` whole or not at all: fill a sibling temp dir, then rename."""
    target = Path(target)
    if target.exists() and not force:
        raise AotError(f"{target} already exists (use --force to replace it)")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        fill(tmp)
        tmp.chmod(0o755)     # mkdtemp makes it private; a package is an ordinary directory
        if target.exists():
            old = tmp.with_name(tmp.name + ".old")
            target.rename(old)
            tmp.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
