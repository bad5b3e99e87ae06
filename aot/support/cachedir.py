"""Where aot keeps what it can build again: $AOT_CACHE_DIR, else ~/.cache/aot
(VM images, instruction-counter plugins, compiled objects)."""
from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "AOT_CACHE_DIR"


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "aot")
