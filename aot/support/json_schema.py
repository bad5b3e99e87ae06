"""Typed schemas for the JSON aot reads back (metadata.json, tuning
records): a schema is a check function per field, built from the ones
below, that raises Invalid naming the field's path
(`inputs[0].shape must be a list of integers, got a string`).

    ROW = obj({"name": NAME, "bytes": SIZE}, required=("name",))
    check(value, ROW, "pkg/metadata.json")    # or AotError "pkg/metadata.json: ..."

A bool is never taken for an integer (JSON keeps them apart; Python's
isinstance does not). Keys a schema does not name are left alone: a later
writer of the same format may add some. The text itself is parsed, bounded,
by aot.support.jsonfile.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from aot.errors import AotError
from aot.support.jsonfile import field_path, type_name


class Invalid(Exception):
    """A value that does not fit its schema: where it is and what is wrong."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path} {message}" if path else message)


# A field's check: (value, path of keys and indices) -> None, or raise Invalid.
Check = Callable[[Any, tuple], None]


def must(path: tuple, kind: str, value: Any) -> Invalid:
    """`PATH must be KIND, got TYPE`."""
    return Invalid(field_path(*path), f"must be {kind}, got {type_name(value)}")


def of(types: tuple[type, ...], kind: str, test: Callable[[Any], bool] | None = None) -> Check:
    """A value of one of `types` (`kind` says it in errors) passing `test`."""
    def check(value: Any, path: tuple) -> None:
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise must(path, kind, value)
        if test is not None and not test(value):
            raise Invalid(field_path(*path), f"must be {kind}, got {value!r:.60}")
    return check


STR = of((str,), "a string")
NAME = of((str,), "a non-empty string", lambda s: s != "")
# C99's significant characters of an identifier; aot's own are at most 48
# and a suffix (aot/codegen/names.py). A C name names files too (lib<name>.a).
MAX_C_NAME = 63
C_NAME = of((str,), f"a C identifier of at most {MAX_C_NAME} characters",
            lambda s: s.isascii() and s.isidentifier() and len(s) <= MAX_C_NAME)
BOOL = of((bool,), "a boolean")
INT = of((int,), "an integer")
SIZE = of((int,), "an integer >= 0", lambda n: n >= 0)
NUMBER = of((int, float), "a number")
FINITE = of((int, float), "a finite number", math.isfinite)
TIME = of((int, float), "a finite time >= 0", lambda t: math.isfinite(t) and t >= 0)
ANY = of((object,), "anything")


def optional(check: Check) -> Check:
    """null, or what `check` takes."""
    def inner(value: Any, path: tuple) -> None:
        if value is not None:
            check(value, path)
    return inner


def list_of(item: Check, kind: str) -> Check:
    """A list (`kind` says it in errors) whose every element `item` takes."""
    def check(value: Any, path: tuple) -> None:
        if not isinstance(value, list):
            raise must(path, kind, value)
        for i, v in enumerate(value):
            item(v, (*path, i))
    return check


def obj(fields: Mapping[str, Check], required: tuple[str, ...] = (),
        then: Callable[[dict, tuple], None] | None = None) -> Check:
    """An object whose named keys are of their types, the `required` ones
    present; `then` checks what ties its fields together, after them."""
    def check(value: Any, path: tuple) -> None:
        if not isinstance(value, dict):
            raise must(path, "an object", value)
        missing = [k for k in required if k not in value]
        if missing:
            raise Invalid(field_path(*path), f"lacks {', '.join(missing)}")
        for key, v in value.items():
            if key in fields:
                fields[key](v, (*path, key))
        if then is not None:
            then(value, path)
    return check


STRS = list_of(STR, "a list of strings")
SIZES = list_of(SIZE, "a list of integers >= 0")
OBJECTS = list_of(obj({}), "a list of objects")


def check(value: Any, schema: Check, where: str) -> Any:
    """`value` if `schema` takes it, else AotError `WHERE: PATH ...`."""
    try:
        schema(value, ())
    except Invalid as e:
        raise AotError(f"{where}: {e}") from None
    return value
