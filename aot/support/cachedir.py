"""Where aot keeps what it can build again: $AOT_CACHE_DIR, else ~/.cache/aot
(compiled objects and templates here; aot/deploy/vm_image.py's cache_root
names the same directory for VM images and plugins, and stays as it is:
that file's own hash names the VM image, so editing it would rebuild it)."""
from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "AOT_CACHE_DIR"


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "aot")
