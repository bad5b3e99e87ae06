""".npy files read with their header checked first.

np.load trusts the header: a 100-byte file whose header claims 2^40
elements asks numpy for terabytes (a MemoryError), and a header numpy's
parser chokes on raises whatever it raises. Here the header is read alone
(numpy.lib.format), the shape and dtype it claims are checked against the
bytes the file holds and against a limit, and only then is the array read:
any fault is one AotError naming the file.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import BinaryIO

import numpy as np
from numpy.lib import format as npy_format

from aot.errors import AotError, InputError
from aot.limits import MAX_RANK, max_elements

# The header is a Python dict literal; numpy's own default bound.
MAX_HEADER_BYTES = 10_000


def read_header(f: BinaryIO, what: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran order, dtype) from the header at f's position; f is
    left at the first data byte."""
    try:
        version = npy_format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = npy_format.read_array_header_1_0(f, MAX_HEADER_BYTES)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = npy_format.read_array_header_2_0(f, MAX_HEADER_BYTES)
        else:
            raise ValueError(f"format version {version[0]}.{version[1]} is unknown")
    except Exception as e:  # noqa: BLE001 - numpy's parser on hostile bytes
        # read_magic/read_array_header raise ValueError for most faults, but a
        # hostile header reaches what they call: tokenize's TokenError,
        # literal_eval's SyntaxError and RecursionError, dtype's TypeError
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InputError(f"{what}: cannot read it as an .npy file ({reason[:200]})") from None
    if dtype.hasobject:
        raise InputError(f"{what}: holds Python objects (dtype {dtype}), not numbers")
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        raise InputError(f"{what}: the header's shape {shape!r} is not a shape")
    if len(shape) > MAX_RANK:
        raise InputError(f"{what}: rank {len(shape)} exceeds the limit of {MAX_RANK} dimensions")
    return tuple(shape), bool(fortran), dtype


def read_npy(path: str | Path, what: str | None = None,
             limit_elements: int | None = None) -> np.ndarray:
    """The array in an .npy file, refused with one line when the file is not
    one, holds fewer bytes than its header claims, or claims more than
    `limit_elements` (AOT_MAX_TENSOR_ELEMENTS by default)."""
    what = what or str(path)
    limit = max_elements() if limit_elements is None else limit_elements
    try:
        with open(path, "rb") as f:
            shape, fortran, dtype = read_header(f, what)
            count = math.prod(shape)
            if count > limit:
                raise InputError(f"{what}: the header claims {count} elements (shape "
                                 f"{list(shape)}), more than the limit of {limit} "
                                 "(AOT_MAX_TENSOR_ELEMENTS)")
            held = os.fstat(f.fileno()).st_size - f.tell()
            if count * dtype.itemsize != held:
                raise InputError(f"{what}: the header claims {dtype}{list(shape)} "
                                 f"({count * dtype.itemsize} bytes), the file holds {held}")
            data = np.fromfile(f, dtype=dtype, count=count)
    except OSError as e:
        raise InputError(f"{what}: cannot read {path} ({e.strerror or e})") from None
    return data.reshape(shape, order="F" if fortran else "C")
