"""A package's identity: what its harness says it is over a serial port.

A microcontroller keeps the harness `aot flash` wrote until it is flashed
again, so before a run over its serial port the host checks that the device
runs this very package: the harness's hello carries this identity (compiled
in as AOT_PACKAGE_ID) and the host computes it again from the package.
It digests the compiled library and the harness's source, which together
decide every byte the device computes and the protocol it speaks.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from aot.errors import AotError

ID_CHARS = 32
HARNESS_SOURCE = "bench/main.c"


def package_id(pkg: Path, name: str) -> str:
    """32 hex digits of the SHA-256 of lib/lib<name>.a and bench/main.c."""
    digest = hashlib.sha256()
    for rel in (f"lib/lib{name}.a", HARNESS_SOURCE):
        try:
            data = (pkg / rel).read_bytes()
        except OSError as e:
            raise AotError(f"{pkg}: cannot read {rel} ({e.strerror}): package the model "
                           "again") from None
        digest.update(rel.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()[:ID_CHARS]
