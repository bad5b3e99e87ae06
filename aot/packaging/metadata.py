"""A package directory's metadata.json read back, checked field by field.

`aot run`, `verify`, `inspect`, `bench`, serve and every transport read a
package through `read_metadata`: the file is read through the bounded JSON
reader (aot/support/jsonfile.py: size, nesting, numbers), then held to the
schema below before any field is used. A field of the wrong type, a dtype
aot does not know, a shape beyond the element limit (aot/limits.py), a
byte count that contradicts the shape, a C name that is not a C identifier
or a name given twice is one AotError naming the field
(`pkg/metadata.json: inputs[0].shape must be a list of integers, got a
string`): an edited or damaged file never reaches numpy, a file name or a
harness. Keys the schema does not know are left alone (a package of the same
format written by a later aot may add some); a newer format is refused.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from aot.errors import AotError, ShapeError
from aot.ir.graph import DTYPES
from aot.limits import check_shape
from aot.support.json_schema import (ANY, BOOL, C_NAME, FINITE, INT, NAME, OBJECTS, SIZE,
                                     SIZES, STR, STRS, Invalid, check, list_of, obj, of,
                                     optional)
from aot.support.jsonfile import field_path, read_json

# The layout of a package (its files, metadata.json, the C API): metadata.json
# "package_format" and <NAME>_PACKAGE_FORMAT in the header. Raised when a
# change would break a firmware build or a reader of an older package.
PACKAGE_FORMAT = 1
CODEGENS = ("c", "llvm")
# The largest metadata.json aot reads: a model of 8,192 kernels writes a few MB.
MAX_METADATA_BYTES = 64 << 20


DTYPE = of((str,), f"one of {', '.join(DTYPES)}", lambda s: s in DTYPES)
CODEGEN = of((str,), f"one of {', '.join(CODEGENS)}", lambda s: s in CODEGENS)


def _shape(value: Any, path: tuple) -> None:
    list_of(INT, "a list of integers")(value, path)
    try:
        check_shape(value, field_path(*path))
    except ShapeError as e:
        raise Invalid("", str(e)) from None


def _quant_ties(q: dict, path: tuple) -> None:
    if len(q["scale"]) != len(q["zero_point"]) or not q["scale"]:
        raise Invalid(field_path(*path), "must have as many scales as zero points, at least one")
    if q.get("axis") is None and len(q["scale"]) != 1:
        raise Invalid(field_path(*path, "scale"), "must hold one scale without an axis")


QUANT = obj({"scale": list_of(FINITE, "a list of numbers"),
             "zero_point": list_of(INT, "a list of integers"), "axis": optional(SIZE)},
            ("scale", "zero_point"), _quant_ties)


def _tensor_ties(row: dict, path: tuple) -> None:
    """bytes is what the shape and dtype take: the harness's files are
    sized by it and read back in the shape."""
    want = math.prod(row["shape"]) * np.dtype(row["dtype"]).itemsize
    if row["bytes"] != want:
        raise Invalid(field_path(*path, "bytes"), f"must be {want} for "
                      f"{row['dtype']}{row['shape']}, got {row['bytes']}")
    axis = (row.get("quant") or {}).get("axis")
    if axis is not None and axis >= max(len(row["shape"]), 1):
        raise Invalid(field_path(*path, "quant", "axis"),
                      f"must be below the rank {len(row['shape'])}, got {axis}")


COUNT_OF = list_of(obj({"index": SIZE, "tensor": STR, "axis": INT, "padding": FINITE},
                       ("index",)), "a list of objects")
TENSOR_FIELDS = {"name": NAME, "c_name": C_NAME, "shape": _shape, "dtype": DTYPE,
                 "bytes": SIZE, "quant": optional(QUANT),
                 "float_io": optional(obj({"dtype": DTYPE, "quant": optional(QUANT)},
                                          ("dtype",))),
                 "arena_offset": SIZE, "count_of": COUNT_OF}
TENSOR = obj(TENSOR_FIELDS, ("name", "c_name", "shape", "dtype", "bytes"), _tensor_ties)
TENSORS = list_of(TENSOR, "a list of objects")

KERNEL = obj({"step": SIZE, "name": STR, "symbol": STR, "ops": STRS, "sources": STRS,
              "macs": optional(SIZE), "dtype": STR, "depth": SIZE, "depthwise": BOOL,
              "split": BOOL,
              "args": list_of(obj({"kind": STR, "param": STR, "tensor": STR}),
                              "a list of objects")}, ("name",))


def _bound(value: Any, path: tuple) -> None:
    """source.bind's values: an array (dtype, shape, values) or a number or list."""
    if isinstance(value, dict):
        obj({"dtype": DTYPE, "shape": _shape, "values": ANY}, ("dtype", "shape", "values"))(
            value, path)


# source.file: the model's file name, looked for beside the package (never a path).
FILE_NAME = of((str,), "a file name of at most 255 bytes",
               lambda s: "/" not in s and "\0" not in s and s not in (".", "..")
               and len(s.encode("utf-8", "surrogatepass")) <= 255)
SOURCE = obj({"file": FILE_NAME, "sha256": STR, "input_shapes": obj({}),
              "bind": obj({}, then=lambda d, p: [_bound(v, (*p, k)) for k, v in d.items()])})

def _unique(meta: dict, path: tuple) -> None:
    """Names an input or output is looked up by, and C names (struct members,
    output files of `aot run --out`), are given once."""
    for kind in ("inputs", "outputs"):
        for key in ("name", "c_name"):
            seen: dict[str, int] = {}
            for i, row in enumerate(meta[kind]):
                if row[key] in seen:
                    raise Invalid(field_path(kind, i, key), f"repeats {kind}"
                                  f"[{seen[row[key]]}]'s {row[key]!r:.60}")
                seen[row[key]] = i


SCHEMA = obj({
    "name": C_NAME, "model": STR, "board": NAME, "codegen": CODEGEN,
    "target": obj({"name": STR, "triple": STR, "cpu": STR, "features": STR, "cflags": STRS}),
    "inputs": TENSORS, "outputs": TENSORS, "float_io": BOOL,
    "arena_bytes": SIZE, "arena_lower_bound_bytes": SIZE, "arena_align": SIZE,
    "io_in_arena": BOOL, "arena_bytes_io_outside": SIZE, "arena_bytes_io_inside": SIZE,
    "params_bytes": SIZE, "params_data_bytes": SIZE, "params_section": STR,
    "params": list_of(obj({"symbol": STR, "dtype": DTYPE, "shape": SIZES, "bytes": SIZE,
                           "sources": STRS, "storage": STR}), "a list of objects"),
    "state": list_of(obj({"name": NAME, "c_name": C_NAME, "update": optional(STR),
                          "bytes": SIZE},
                         ("name", "c_name", "bytes")), "a list of objects"),
    "state_bytes": SIZE, "plan": obj({"strategy": STR, "align": SIZE,
                                      "buffers": OBJECTS}),
    "memory_pools": obj({}), "kernels": list_of(KERNEL, "a list of objects"),
    "index_checks": OBJECTS, "footprint": obj({}),
    "versions": obj({}), "package_format": INT, "extra_cflags": STRS, "profile": BOOL,
    "checks": BOOL, "threads": SIZE, "source": SOURCE,
}, ("name", "model", "board", "codegen", "inputs", "outputs", "arena_bytes",
    "arena_lower_bound_bytes", "params_bytes"), _unique)


FORMAT = obj({"package_format": INT})


def check_metadata(meta: Any, where: str) -> dict:
    """`meta` if it is a metadata.json of a format this aot reads, else an
    AotError `WHERE: FIELD ...`."""
    if isinstance(meta, dict):      # the format first: a newer one may differ anywhere
        found = meta.get("package_format", 0)
        check({"package_format": found}, FORMAT, where)
        if found > PACKAGE_FORMAT:
            raise AotError(f"{where}: package format {found} is newer than this aot reads "
                           f"({PACKAGE_FORMAT}): package the model again, or use a newer aot")
    return check(meta, SCHEMA, where)


def read_metadata(pkg: str | Path) -> dict:
    """The package's metadata.json, checked (check_metadata); packages from
    before package_format are format 0, the layout 1 extended."""
    path = Path(pkg) / "metadata.json"
    if not path.is_file():
        raise AotError(f"{pkg} is not an aot package (no metadata.json)")
    where = str(path)
    return check_metadata(read_json(path, where, MAX_METADATA_BYTES), where)
