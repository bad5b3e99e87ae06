"""JSON that aot reads back (a package's metadata.json, tuning logs, a
harness's report), parsed with its size, nesting and numbers bounded.

json.loads trusts its text: 100,000 `[` raise RecursionError, a number of
5,000 digits raises ValueError (Python's limit on int digits), `NaN` and
`1e999` become floats no field of aot's means, and a file of gigabytes is
read whole. Here the text's size is checked before it is read, its nesting
is measured by a scan that does not recurse, and numbers are parsed by hooks
that refuse the absurd ones; every fault is one AotError naming the file (or
what the text is) and where in it. The types of the fields are the caller's
schema's (aot/packaging/metadata.py, aot/tune/records.py): `type_name` and
`field_path` name what it found and where, for its errors.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from aot.errors import AotError

# What aot's own files nest: metadata.json reaches 5 levels, a tuning record
# 4, a harness's report 3.
MAX_DEPTH = 32
# Digits of an integer: a 64-bit count has 20; no field holds more.
MAX_INT_DIGITS = 40
# Characters of a number's text: a float of 17 significant digits and an
# exponent needs 24.
MAX_NUMBER_CHARS = 64

# A string literal (unrolled: no backtracking on a long one) or a bracket.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_OPEN = frozenset("[{")


def where_in(text: str, pos: int) -> str:
    """`line L column C` of a character offset (`column C` in a one-line text)."""
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    if "\n" not in text.rstrip("\n"):
        return f"column {column}"
    return f"line {text.count(chr(10), 0, pos) + 1} column {column}"


def check_depth(text: str, what: str, max_depth: int = MAX_DEPTH) -> None:
    """Refuse text whose arrays and objects nest deeper than max_depth,
    found without parsing it (and without recursion)."""
    depth = 0
    for m in _TOKEN.finditer(text):
        c = m.group()
        if c in _OPEN:
            depth += 1
            if depth > max_depth:
                raise AotError(f"{what}: {where_in(text, m.start())}: nested deeper than "
                               f"{max_depth} levels")
        elif c in "]}":
            depth -= 1


def _number_error(what: str, text: str, token: str, why: str) -> AotError:
    pos = text.find(token)
    at = f"{where_in(text, pos)}: " if pos >= 0 else ""
    shown = token if len(token) <= 24 else f"{token[:12]}...{token[-4:]}"
    return AotError(f"{what}: {at}the number {shown} {why}")


def loads(text: str, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """The value of JSON `text`, bounded as the module says; `what` names
    the text in errors ("metadata.json", "tuning records F line 3")."""
    check_depth(text, what, max_depth)

    def integer(s: str) -> int:
        if len(s.lstrip("-")) > MAX_INT_DIGITS:
            raise _number_error(what, text, s, f"has {len(s.lstrip('-'))} digits "
                                f"(at most {MAX_INT_DIGITS})")
        return int(s)

    def fraction(s: str) -> float:
        if len(s) > MAX_NUMBER_CHARS:
            raise _number_error(what, text, s, f"has {len(s)} characters "
                                f"(at most {MAX_NUMBER_CHARS})")
        value = float(s)
        if not math.isfinite(value):
            raise _number_error(what, text, s, "is beyond a double's range")
        return value

    def constant(s: str) -> float:
        raise _number_error(what, text, s, "is not a finite number (JSON has no NaN or "
                                           "Infinity)")

    try:
        return json.loads(text, parse_int=integer, parse_float=fraction,
                          parse_constant=constant)
    except json.JSONDecodeError as e:
        raise AotError(f"{what}: not JSON at {where_in(text, e.pos)} ({e.msg})") from None
    except RecursionError:      # check_depth bounds nesting far below the interpreter's
        raise AotError(f"{what}: nested too deeply") from None


def read_text(path: str | Path, what: str, max_bytes: int) -> str:
    """A file's text, refused unread when it is larger than max_bytes or is
    not UTF-8."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise AotError(f"{what}: no such file") from None
    except OSError as e:
        raise AotError(f"{what}: cannot read it ({e.strerror or e})") from None
    if len(data) > max_bytes:
        raise AotError(f"{what}: larger than {max_bytes} bytes, more than aot ever writes there")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise AotError(f"{what}: byte {e.start} is not UTF-8") from None


def read_json(path: str | Path, what: str, max_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value in a file, bounded (read_text, loads)."""
    return loads(read_text(path, what, max_bytes), what, max_depth)


def type_name(value: Any) -> str:
    """A JSON value's type, as an error names it."""
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            float: "a fraction", int: "an integer", type(None): "null"}.get(
        type(value), type(value).__name__)


def field_path(*parts: str | int) -> str:
    """`inputs[0].shape` from ("inputs", 0, "shape")."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out

