"""The templates' compiled code kept between runs (jinja compiles each
template to Python on first use: a tenth of a second per process).

Entries sit in `templates/` under $AOT_CACHE_DIR (else ~/.cache/aot), one
per template, named by jinja's key (the template's name and path), and
hold jinja's own record (its format, the template source's checksum, the
code) behind the sha256 of that record: an entry whose hash does not match,
cut short or altered, is not loaded (jinja then compiles the template and
the entry is written again); jinja itself refuses one made by another
version or from another source. Entries are written to a temporary file
and renamed: a reader sees a whole entry or none. AOT_TEMPLATE_CACHE=off
compiles the templates every time.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import jinja2

from aot.support.cachedir import cache_root
from aot.support.fsutil import write_file_atomically

ENABLE_ENV = "AOT_TEMPLATE_CACHE"
DIGEST = 32


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "").strip().lower() not in ("off", "0", "no", "false")


class CheckedBytecodeCache(jinja2.BytecodeCache):
    def __init__(self, directory: Path):
        self.directory = directory

    def _path(self, bucket: jinja2.bccache.Bucket) -> Path:
        return self.directory / f"{bucket.key}.bc"

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            data = self._path(bucket).read_bytes()
        except OSError:
            return
        digest, record = data[:DIGEST], data[DIGEST:]
        if len(data) > DIGEST and hashlib.sha256(record).digest() == digest:
            bucket.bytecode_from_string(record)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        record = bucket.bytecode_to_string()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_file_atomically(self._path(bucket), hashlib.sha256(record).digest() + record)
        except OSError:       # a cache that cannot be written: compiled next time again
            pass


def bytecode_cache() -> CheckedBytecodeCache | None:
    return CheckedBytecodeCache(cache_root() / "templates") if enabled() else None
