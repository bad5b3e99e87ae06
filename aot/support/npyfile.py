""".npy files read with their header checked first.

np.load trusts the header: a 100-byte file whose header claims 2^40
elements asks numpy for terabytes (a MemoryError), and a header numpy's
parser chokes on raises whatever it raises. Here the header is read alone
(numpy.lib.format), the shape and dtype it claims are checked against the
bytes the file holds and against a limit, and only then is the array read:
any fault is one AotError naming the file.

An .npz (`NpzArchive`) is read the same way member by member, from the zip
stream: header first, its data size against the one the archive records,
the data only then and a block of rows at a time (a dataset of 100,000
samples streams through `aot verify` in bounded memory).
"""
from __future__ import annotations

import math
import os
import zipfile
import zlib
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
    `limit_elements` (AOT_MAX_TENSOR_ELEMENTS by default; a caller that
    knows the shape to expect gives its size)."""
    what = what or str(path)
    limit = max_elements() if limit_elements is None else limit_elements
    try:
        with open(path, "rb") as f:
            shape, fortran, dtype = read_header(f, what)
            count = math.prod(shape)
            if count > limit:
                bound = (f"the limit of {limit} (AOT_MAX_TENSOR_ELEMENTS)"
                         if limit_elements is None else f"the {limit} expected")
                raise InputError(f"{what}: the header claims {count} elements (shape "
                                 f"{list(shape)}), more than {bound}")
            held = os.fstat(f.fileno()).st_size - f.tell()
            if count * dtype.itemsize != held:
                raise InputError(f"{what}: the header claims {dtype}{list(shape)} "
                                 f"({count * dtype.itemsize} bytes), the file holds {held}")
            data = np.fromfile(f, dtype=dtype, count=count)
    except OSError as e:
        raise InputError(f"{what}: cannot read {path} ({e.strerror or e})") from None
    return data.reshape(shape, order="F" if fortran else "C")


# ------------------------------------------------------------------------ .npz

class NpzArchive:
    """An .npz opened for checked, lazy reading: each member's .npy header is
    read from the zip stream (a few hundred bytes decompressed) and its data
    size checked against the size the archive records before any of the data
    is decompressed; the data is then read a block of rows at a time.

        with NpzArchive(path, "dataset calib.npz") as npz:
            member = npz.open("input_1")    # header checked, nothing else read
            rows = member.read_rows(64)     # [64, *member.shape[1:]]
    """

    def __init__(self, path: str | Path, what: str | None = None) -> None:
        self.path, self.what = Path(path), what or str(path)
        try:
            self._zip = zipfile.ZipFile(self.path)
        except (OSError, zipfile.BadZipFile, ValueError, EOFError) as e:
            raise InputError(f"{self.what}: cannot read it as an .npz file "
                             f"({_reason(e)})") from None
        # numpy's savez stores NAME.npy; other files in the zip are no arrays
        self.names = tuple(i.filename[:-4] for i in self._zip.infolist()
                           if i.filename.endswith(".npy") and not i.is_dir())

    def __enter__(self) -> "NpzArchive":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._zip.close()

    def open(self, name: str) -> "NpzMember":
        """Member `name` (without .npy), its header read and checked."""
        what = f"{self.what}: member '{name}'"
        try:
            info = self._zip.getinfo(name + ".npy")
            stream = self._zip.open(info)
        except (KeyError, OSError, zipfile.BadZipFile, NotImplementedError, ValueError,
                RuntimeError) as e:
            raise InputError(f"{what}: cannot open it ({_reason(e)})") from None
        try:
            shape, fortran, dtype = _guarded(lambda: read_header(stream, what), what)
            if math.prod(shape[1:]) > max_elements():
                # a member is read a row (a sample) at a time: no row may be
                # bigger than any tensor may be
                raise InputError(f"{what}: a row of its shape {list(shape)} holds "
                                 f"{math.prod(shape[1:])} elements, more than the limit of "
                                 f"{max_elements()} (AOT_MAX_TENSOR_ELEMENTS)")
            nbytes = math.prod(shape) * dtype.itemsize
            held = info.file_size - stream.tell()
            if nbytes != held:
                raise InputError(f"{what}: the header claims {dtype}{list(shape)} ({nbytes} "
                                 f"bytes), the archive records {held} bytes of data")
        except BaseException:
            stream.close()
            raise
        return NpzMember(what, stream, shape, fortran, dtype)

    def read(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Member `name` whole, refused unless it holds exactly `shape`'s
        element count (checked before its data is decompressed)."""
        member = self.open(name)
        with member:
            want = math.prod(shape)
            if math.prod(member.shape) != want:
                raise InputError(f"{member.what}: holds {member.dtype}{list(member.shape)}, "
                                 f"expected {want} elements {list(shape)}")
            order = "F" if member.fortran else "C"
            data = member.read_bytes(want * member.dtype.itemsize)
            return np.frombuffer(data, member.dtype).reshape(member.shape, order=order)


class NpzMember:
    """One checked .npz member, read from its zip stream."""

    def __init__(self, what: str, stream: BinaryIO, shape: tuple[int, ...], fortran: bool,
                 dtype: np.dtype) -> None:
        self.what, self._stream = what, stream
        self.shape, self.fortran, self.dtype = shape, fortran, dtype

    def __enter__(self) -> "NpzMember":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._stream.close()

    def read_bytes(self, n: int) -> bytearray:
        """The next n data bytes; an archive that holds fewer (or whose data
        fails its CRC) is one InputError."""
        buf = bytearray(n)
        got = _guarded(lambda: self._stream.readinto(memoryview(buf)), self.what)
        while got < n:
            more = _guarded(lambda: self._stream.readinto(memoryview(buf)[got:]), self.what)
            if not more:
                raise InputError(f"{self.what}: the data ends after {got} of the {n} bytes "
                                 "its header promises")
            got += more
        return buf

    def check_rows(self) -> None:
        """Refuse a member whose rows cannot be read one block at a time."""
        if not self.shape:
            raise InputError(f"{self.what}: a scalar has no rows")
        if self.fortran and math.prod(self.shape[1:]) > 1:
            raise InputError(f"{self.what}: stored in Fortran order, which cannot be read a "
                             "sample at a time: save it C-ordered (np.ascontiguousarray)")

    def read_rows(self, count: int) -> np.ndarray:
        """The next `count` entries of the leading axis, as [count, *shape[1:]].
        Rows of a Fortran-ordered array are not contiguous: such a member is
        read this way only when a row is one element."""
        self.check_rows()
        row = self.shape[1:]
        nbytes = count * math.prod(row) * self.dtype.itemsize
        return np.frombuffer(self.read_bytes(nbytes), self.dtype).reshape(count, *row)


def _reason(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text[:200]


def _guarded(read, what: str):
    """read(), its zip and decompression faults as one InputError naming `what`."""
    try:
        return read()
    except AotError:
        raise
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error, ValueError, RuntimeError,
            NotImplementedError) as e:
        raise InputError(f"{what}: cannot read it ({_reason(e)})") from None
