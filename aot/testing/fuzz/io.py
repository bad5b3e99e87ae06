"""Hostile bytes from outside the model: seeded fuzzers for what aot reads
from a harness, from an input file and from a board file.

Each `*_case(seed, ...)` builds one deterministic case (the same seed gives
the same bytes), feeds it to the code under test and judges the outcome: a
result (checked for consistency with what was asked) or an AotError with a
message; anything else (another exception, a case that outlives its
alarm, an accepted answer that contradicts the request) is a failure.

- serve: a fake harness speaking the serve protocol (aot/deploy/serve.py)
  with mutated hellos and replies: lengths and counts of every size, wrong
  magics, error frames, truncation, more runs than requested. Most cases
  read from a byte stream; every fourth goes through a real pipe and the
  device's session (aot/deploy/device.py), some with a harness that stops
  mid-message, which the hello or request deadline must end.
- report: the harness's JSON report line and output files (parse_report,
  read_outputs): `[1]`, `{}`, strings as times, invalid UTF-8, missing keys,
  deep nesting, outputs of the wrong size or missing.
- npy: .npy files with hostile headers (aot.support.npyfile.read_npy): shapes of
  2^40 elements, odd dtypes, wrong lengths, truncation.
- toml: board files and the user's config file with values of every type
  (aot.targets and the transports that read the options).

Used by tests/fuzz/test_io_fuzz.py and scripts/fuzz.py.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import random
import struct
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Callable

import numpy as np

from aot.errors import AotError
from aot.testing.fuzz.models import HOSTILE_U32, CaseTimeout, Outcome, alarm_after, env_set

HOSTILE_U64 = (0, 1, 2, (1 << 32) - 1, 1 << 32, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 1 << 40)
DTYPES = ("float32", "int8", "uint8", "int16", "int32")
MAX_RUNS = 100_000      # what the fake harness's hello allows
# A memory use no case needs: the inputs are a few KB, so more means a
# length was trusted.
PEAK_BYTES = 64 << 20


def judged(case: Callable[[], str | None], time_limit: float = 10.0) -> Outcome:
    """Run one case: it returns None for a consistent result, or what was
    wrong with the result it got; an AotError is a refusal."""
    tracemalloc.start()
    try:
        with alarm_after(time_limit):
            wrong = case()
    except CaseTimeout:
        return Outcome("failed", "hang", f"no result within {time_limit:g} s")
    except AotError as e:
        message = str(e).strip()
        if not message:
            return Outcome("failed", "empty", f"{type(e).__name__} with no message")
        return Outcome("refused", type(e).__name__, message.splitlines()[0][:300])
    except Exception as e:  # noqa: BLE001 - what the fuzzer is looking for
        return Outcome("failed", "internal", f"{type(e).__name__}: {str(e)[:300]}")
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    if peak > PEAK_BYTES:
        return Outcome("failed", "memory", f"peak {peak} bytes traced")
    if wrong:
        return Outcome("failed", "accepted", wrong)
    return Outcome("accepted", "", "")


# ------------------------------------------------------------------ a package's I/O

def fake_meta(rng: random.Random) -> dict:
    """metadata.json as the serve client and the report parser read it."""
    def spec(kind: str, i: int) -> dict:
        dtype = rng.choice(DTYPES)
        shape = [rng.randint(1, 4) for _ in range(rng.randint(0, 3))]
        return {"name": f"{kind}{i}", "dtype": dtype, "shape": shape,
                "bytes": math.prod(shape) * np.dtype(dtype).itemsize}
    return {"inputs": [spec("in", i) for i in range(rng.randint(1, 3))],
            "outputs": [spec("out", i) for i in range(rng.randint(1, 3))],
            "kernels": [{"name": f"k{i}"} for i in range(rng.randint(0, 4))],
            "arena_bytes": rng.choice((0, 64, 4096)),
            "profile": rng.random() < 0.3, "checks": rng.random() < 0.2}


def _arrays(rng: random.Random, specs: list[dict]) -> list[np.ndarray]:
    return [np.frombuffer(rng.randbytes(s["bytes"]), s["dtype"]).reshape(s["shape"])
            for s in specs]


def _check_result(result, meta: dict, runs: int) -> str | None:
    """What is wrong with an accepted RunResult, if anything."""
    if len(result.times_ns) != runs:
        return f"accepted {len(result.times_ns)} run times for {runs} runs"
    for spec, out in zip(meta["outputs"], result.outputs):
        if list(out.shape) != spec["shape"] or out.dtype.name != spec["dtype"]:
            return f"output {spec['name']} is {out.dtype}{list(out.shape)}, not {spec}"
    if len(result.outputs) != len(meta["outputs"]):
        return f"{len(result.outputs)} outputs for {len(meta['outputs'])}"
    if result.profile_ns is not None and any(len(r) != len(meta["kernels"])
                                             for r in result.profile_ns):
        return "a profile row without a time per kernel"
    return None


# ------------------------------------------------------------------ serve protocol

def _u32(v: int) -> bytes:
    return struct.pack("<I", v & 0xFFFFFFFF)


def _u64(v: int) -> bytes:
    return struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)


def transcript(meta: dict, runs: int, rng: random.Random) -> list[tuple[str, str, bytes]]:
    """What a correct harness sends for one request: (field, kind, bytes)
    segments, kind "u32", "u64", "magic" or "data"."""
    from aot.deploy.serve import FLAG_CHECKS, FLAG_PROFILE, PROFILE_MAX_RUNS, VERSION
    flags = (FLAG_PROFILE if meta["profile"] else 0) | (FLAG_CHECKS if meta["checks"] else 0)
    kernels = len(meta["kernels"])
    seg = [("hello.magic", "magic", b"AOTH"), ("hello.version", "u32", _u32(VERSION)),
           ("hello.inputs", "u32", _u32(len(meta["inputs"]))),
           ("hello.outputs", "u32", _u32(len(meta["outputs"]))),
           ("hello.kernels", "u32", _u32(kernels)), ("hello.flags", "u32", _u32(flags)),
           ("hello.arena", "u64", _u64(meta["arena_bytes"])),
           ("hello.max_runs", "u64", _u64(MAX_RUNS))]
    seg += [(f"hello.input_bytes[{i}]", "u64", _u64(s["bytes"]))
            for i, s in enumerate(meta["inputs"])]
    seg += [(f"hello.output_bytes[{i}]", "u64", _u64(s["bytes"]))
            for i, s in enumerate(meta["outputs"])]
    profiled = min(runs, PROFILE_MAX_RUNS) if meta["profile"] else 0
    seg += [("reply.magic", "magic", b"AOTR"), ("reply.runs", "u32", _u32(runs)),
            ("reply.profiled", "u32", _u32(profiled)), ("reply.kernels", "u32", _u32(kernels))]
    seg += [(f"reply.time[{i}]", "u64", _u64(rng.randrange(1 << 40))) for i in range(runs)]
    seg += [(f"reply.profile[{i}][{k}]", "u64", _u64(rng.randrange(1 << 32)))
            for i in range(profiled) for k in range(kernels)]
    for i, s in enumerate(meta["outputs"]):
        seg += [(f"reply.output_bytes[{i}]", "u64", _u64(s["bytes"])),
                (f"reply.output[{i}]", "data", rng.randbytes(s["bytes"]))]
    return seg


def _error_frame(rng: random.Random) -> bytes:
    message = rng.choice((b"bench: input 0 must be 4 bytes", b"", b"\xff\xfe\xfd bad utf-8",
                          b"line one\nline two", rng.randbytes(rng.randrange(64))))
    length = rng.choice((len(message), len(message), 0, (1 << 32) - 1, len(message) + 100,
                         1 << 20))
    code = rng.choice((0, 1, 2, 3, 4, 127, 255, (1 << 32) - 1))
    return b"AOTE" + _u32(code) + _u32(length) + message


def mutate_transcript(seg: list[tuple[str, str, bytes]], rng: random.Random, runs: int,
                      ) -> tuple[bytes, str, int | None]:
    """(the bytes, what was done, where the harness stalls or None)."""
    seg = list(seg)
    done: list[str] = []
    kinds: list[str] = []
    stall = None
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        kind = rng.choice(("field", "field", "field", "magic", "error_frame", "truncate",
                           "flip", "extra", "more_runs", "drop", "stall"))
        kinds.append(kind)
        if kind == "field":
            k = rng.choice([i for i, s in enumerate(seg) if s[1] in ("u32", "u64")])
            name, width, old = seg[k]
            value = struct.unpack("<I" if width == "u32" else "<Q", old)[0]
            new = rng.choice((HOSTILE_U32 if width == "u32" else HOSTILE_U64)
                             + (value + 1, max(value - 1, 0), value * 2))
            seg[k] = (name, width, _u32(new) if width == "u32" else _u64(new))
            done.append(f"{name} {value} -> {new}")
        elif kind == "magic":
            k = rng.choice([i for i, s in enumerate(seg) if s[1] == "magic"])
            new = rng.choice((b"AOTQ", b"AOTE", b"AOTX", b"\0\0\0\0", rng.randbytes(4)))
            seg[k] = (seg[k][0], "magic", new)
            done.append(f"{seg[k][0]} := {new!r}")
        elif kind == "error_frame":
            k = rng.randrange(len(seg) + 1)
            seg.insert(k, ("error", "data", _error_frame(rng)))
            done.append(f"an error frame before segment {k}")
        elif kind == "extra":
            seg.append(("extra", "data", rng.randbytes(rng.choice((1, 4, 100)))))
            done.append("trailing bytes")
        elif kind == "more_runs":
            k = next((i for i, s in enumerate(seg) if s[0] == "reply.runs"), None)
            if k is None:
                continue        # dropped by an earlier mutation
            extra = rng.choice((1, 2, 1000))
            seg[k] = ("reply.runs", "u32", _u32(runs + extra))
            last = max((i for i, s in enumerate(seg) if s[0].startswith("reply.time")),
                       default=k + 2)
            seg[last + 1:last + 1] = [("reply.time[extra]", "u64", _u64(7))] * extra
            done.append(f"{extra} more runs than the {runs} requested")
        elif kind == "drop":
            k = rng.randrange(len(seg))
            done.append(f"{seg[k][0]} left out")
            del seg[k]
    data = b"".join(s[2] for s in seg)      # truncate, flip and stall work on the bytes
    if "truncate" in kinds and data:
        cut = rng.randrange(len(data))
        data = data[:cut]
        done.append(f"cut at byte {cut}")
    if "flip" in kinds and data:
        out = bytearray(data)
        for _ in range(rng.choice((1, 2, 8))):
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        data = bytes(out)
        done.append("bits flipped")
    if "stall" in kinds:
        stall = rng.randrange(len(data) + 1)
        done.append(f"the harness stops answering after byte {stall}")
    return data, "; ".join(done) or "none", stall


class FakeHarness:
    """A harness process stand-in for aot.deploy.device's sessions: it
    writes `data` into a real pipe (then ends its output, as an exiting
    harness does) or, with `stall`, writes that much and then waits until it
    is killed, like a harness that hangs mid-message."""

    def __init__(self, data: bytes, stall: int | None):
        read_fd, self._write_fd = os.pipe()
        self.stdout = os.fdopen(read_fd, "rb")
        self.stdin = io.BytesIO()           # the requests: never read
        self.expired = ""
        self._killed = threading.Event()
        self._thread = threading.Thread(target=self._speak, args=(data, stall), daemon=True)
        self._thread.start()

    def _speak(self, data: bytes, stall: int | None) -> None:
        # Only this thread closes the write end: closing it under a write
        # blocked in another thread could hand the number to another file.
        view = memoryview(data if stall is None else data[:stall])
        try:
            while view and not self._killed.is_set():
                view = view[os.write(self._write_fd, view[:65536]):]
            if stall is not None:
                self._killed.wait()
        except OSError:
            pass                            # the reader closed its end
        finally:
            os.close(self._write_fd)        # the end of the output, as a harness exits

    def lost(self) -> str:
        return (f"the harness sent no {self.expired} and was killed" if self.expired
                else "the harness's output ended")

    def expire(self, what: str) -> None:
        self.expired = what
        self.kill()

    def kill(self) -> None:
        self._killed.set()

    def close(self) -> None:
        self.kill()
        self.stdout.close()                 # a write blocked on a full pipe: EPIPE
        self._thread.join(timeout=5)


@contextlib.contextmanager
def _deadlines(seconds: float):
    from aot.deploy import device
    old = device.HELLO_TIMEOUT_S, device.REQUEST_TIMEOUT_S
    device.HELLO_TIMEOUT_S = device.REQUEST_TIMEOUT_S = seconds
    try:
        yield
    finally:
        device.HELLO_TIMEOUT_S, device.REQUEST_TIMEOUT_S = old


STALL_DEADLINE_S = 0.1


def serve_case(seed: int, time_limit: float = 10.0) -> tuple[Outcome, str]:
    """(outcome, what the case did) of fuzz case `seed` of the serve client."""
    from aot.deploy.device import Session
    from aot.deploy.serve import ServeClient

    rng = random.Random(f"serve:{seed}")
    meta = fake_meta(rng)
    runs, warmup = rng.choice((1, 1, 2, 3, 10)), rng.choice((0, 0, 1))
    inputs = _arrays(rng, meta["inputs"])
    data, detail, stall = mutate_transcript(transcript(meta, runs, rng), rng, runs)
    piped = stall is not None or seed % 4 == 0

    def streamed() -> str | None:
        client = ServeClient(io.BytesIO(), io.BytesIO(data), meta)
        return _check_result(client.request(inputs, warmup, runs), meta, runs)

    def through_a_pipe() -> str | None:
        start = time.monotonic()
        harness = FakeHarness(data, stall)
        try:
            # without a stall, the case's alarm (a hang) must ring before any deadline
            with _deadlines(STALL_DEADLINE_S if stall is not None else 2 * time_limit):
                session = Session(harness, meta)
                try:
                    return _check_result(session.request(inputs, warmup, runs), meta, runs)
                finally:
                    session.close()
        except AotError as e:
            late = time.monotonic() - start - STALL_DEADLINE_S
            if stall is not None and late > 2.0:
                return f"refused {late:.1f} s after the deadline: {e}"
            raise
        finally:
            harness.close()

    outcome = judged(through_a_pipe if piped else streamed, time_limit)
    return outcome, f"{'pipe' if piped else 'stream'}: {detail}"


# ------------------------------------------------------------------ harness report

def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def report_case(seed: int, workdir: Path, time_limit: float = 10.0) -> tuple[Outcome, str]:
    """(outcome, what the case did) of fuzz case `seed` of parse_report and
    read_outputs."""
    from aot.deploy.host import parse_report, read_outputs

    rng = random.Random(f"report:{seed}")
    meta = fake_meta(rng)
    runs = rng.randint(1, 5)
    report: object = {"arena_bytes": meta["arena_bytes"], "runs": runs, "warmup": 0,
                      "times_ns": [rng.randrange(1 << 40) for _ in range(runs)]}
    if meta["profile"]:
        report["profile_ns"] = [[rng.randrange(1 << 32) for _ in meta["kernels"]]
                                for _ in range(runs)]
    outs = [rng.randbytes(s["bytes"]) for s in meta["outputs"]]
    kind = rng.choice(("value", "value", "shape", "text", "text", "outputs", "files"))
    detail = kind
    if kind == "value":
        key = rng.choice(("times_ns", "times_ns", "profile_ns", "times_us", "runs"))
        value = rng.choice((
            "12", ["12"], [1.5], [-1], [1 << 64], [True], [[1]], {}, None, [], 1e400,
            [float("nan")], [0] * rng.choice((0, 1, 1000)), [[1, 2], 3], [[]], "x" * 100))
        if rng.random() < 0.3:
            report.pop("times_ns")
        report[key] = value
        detail = f"{key} := {json.dumps(value)[:60]}"
    elif kind == "shape":
        report = rng.choice(([1], {}, "report", 1, None, True, [report], {"times_ns": None}))
        detail = f"report := {json.dumps(report)[:60]}"
    text = json.dumps(report)
    if kind == "text":
        text, detail = rng.choice((
            ("", "empty stdout"), ("\n\n  \n", "blank lines"), (text[:len(text) // 2], "cut"),
            (text + "\ngarbage", "a line after it"), (_nested(100_000), "100000-deep list"),
            ('{"times_ns": [' + "9" * 5000 + "]}", "a 5000-digit time"),
            ('{"times_ns": [NaN, Infinity]}', "NaN and Infinity"),
            (text.replace("[", "[\udcff", 1), "a lone surrogate"),
            ("x" * (1 << 20), "a 1 MB line"), (text * 3, "three reports on one line")))
    stdout: str | bytes = text
    if rng.random() < 0.4:
        stdout = text.encode("utf-8", "surrogateescape" if "\udcff" in text else "strict")
        if rng.random() < 0.5:
            k = rng.randrange(len(stdout) + 1)
            stdout = stdout[:k] + rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80")) + stdout[k:]
            detail += "; invalid UTF-8"
    if kind == "outputs":
        k = rng.randrange(len(outs))
        change = rng.choice(("short", "long", "missing", "extra"))
        if change == "short":
            outs[k] = outs[k][:-1]
        elif change == "long":
            outs[k] += b"\0"
        elif change == "missing":
            del outs[k]
        else:
            outs.append(b"")
        detail = f"output {k} {change}"

    def case() -> str | None:
        got = outs
        if kind == "files":
            paths = [workdir / f"out{i}.bin" for i in range(len(outs))]
            for p, data in zip(paths, outs):
                p.unlink(missing_ok=True)
                if rng.random() < 0.7:
                    p.write_bytes(data if rng.random() < 0.7 else data + b"\0" * rng.randint(1, 9))
            got = read_outputs(meta, paths)
        result = parse_report(stdout, meta, got)
        return _check_result(result, meta, len(result.times_ns))

    return judged(case, time_limit), detail


# ------------------------------------------------------------------ .npy headers

HOSTILE_SHAPES = ("(1099511627776,)", "(2147483648, 2147483648)", "(-1,)", "(1.5,)",
                  "('a',)", "()", "((1, 2),)", "(" + "1, " * 100 + ")", "True", "[3]",
                  "(3, -3)", "(0,)", "(1 << 40,)", "(" + "9" * 5000 + ",)", "None")
HOSTILE_DESCR = ("'<f4'", "'|b1'", "'<U10'", "'|O'", "'|V0'", "'>i8'", "[('a', '<i4')]",
                 "'(3,)<f4'", "'V1000000000'", "'S2147483647'", "'<M8[D]'", "'<c8'",
                 "'nonsense'", "3", "'<f2'", "[('a', '|O')]")


def _npy_header(descr: str, fortran: str, shape: str, version: tuple[int, int] = (1, 0),
                length: int | None = None) -> bytes:
    text = f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, }}"
    width = 2 if version == (1, 0) else 4
    pad = -(10 + (width - 2) + len(text) + 1) % 64
    body = (text + " " * pad + "\n").encode("latin1")
    n = len(body) if length is None else length
    return (b"\x93NUMPY" + bytes(version)
            + (struct.pack("<H", n & 0xFFFF) if width == 2 else struct.pack("<I", n & 0xFFFFFFFF))
            + body)


def npy_bytes(seed: int) -> tuple[bytes, str, str, np.ndarray]:
    """(the file's bytes, what was done, the mutation's kind, the array
    saved before it) of .npy case `seed`."""
    rng = random.Random(f"npy:{seed}")
    dtype = rng.choice(DTYPES + ("float64", "bool"))
    shape = tuple(rng.randint(1, 5) for _ in range(rng.randint(0, 3)))
    array = np.frombuffer(rng.randbytes(math.prod(shape) * np.dtype(dtype).itemsize),
                          dtype).reshape(shape)
    if rng.random() < 0.3:
        array = np.asfortranarray(array)
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    data = buf.getvalue()
    payload = array.tobytes(order="A")
    kind = rng.choice(("valid", "header", "header", "header", "version", "length", "truncate",
                       "flip", "append", "empty"))
    detail = "a valid file"
    if kind == "header":
        descr = rng.choice(HOSTILE_DESCR + (repr(np.dtype(dtype).str),))
        shape_text = rng.choice(HOSTILE_SHAPES + (repr(shape),))
        fortran = rng.choice(("False", "True", "1", "'yes'"))
        data = _npy_header(descr, fortran, shape_text, rng.choice(((1, 0), (2, 0), (3, 0)))) \
            + payload
        detail = f"descr {descr[:30]}, fortran {fortran}, shape {shape_text[:40]}"
    elif kind == "version":
        v = rng.choice(((0, 0), (9, 9), (255, 255), (2, 1)))
        data = data[:6] + bytes(v) + data[8:]
        detail = f"version {v}"
    elif kind == "length":
        n = rng.choice((0, 1, 0xFFFF, 63, len(data)))
        data = data[:8] + struct.pack("<H", n) + data[10:]
        detail = f"header length {n}"
    elif kind == "truncate":
        n = rng.randrange(len(data))
        data = data[:n]
        detail = f"cut to {n} bytes"
    elif kind == "flip":
        out = bytearray(data)
        for _ in range(rng.choice((1, 3))):
            out[rng.randrange(min(len(out), 128))] ^= 1 << rng.randrange(8)
        data = bytes(out)
        detail = "bits flipped in the header"
    elif kind == "append":
        data += rng.randbytes(rng.choice((1, 8, 1000)))
        detail = "bytes after the data"
    elif kind == "empty":
        data = rng.choice((b"", b"\x93NUMPY", b"PK\x03\x04" + bytes(30)))
        detail = f"the file is {data[:10]!r}"
    return data, detail, kind, array


def npy_case(seed: int, workdir: Path, time_limit: float = 10.0) -> tuple[Outcome, str]:
    """(outcome, what the case did) of fuzz case `seed` of read_npy."""
    from aot.support.npyfile import read_npy

    data, detail, kind, array = npy_bytes(seed)
    dtype = array.dtype
    path = workdir / f"case{seed % 8}.npy"
    path.write_bytes(data)

    def case() -> str | None:
        got = read_npy(path, "case.npy")
        if not isinstance(got, np.ndarray):
            return f"read_npy returned a {type(got).__name__}"
        if kind == "valid" and not np.array_equal(got, array, equal_nan=dtype != "bool"):
            return f"read {got.dtype}{list(got.shape)}, saved {array.dtype}{list(array.shape)}"
        if got.nbytes > len(data):
            return f"a {got.nbytes}-byte array from a {len(data)}-byte file"
        return None

    return judged(case, time_limit), detail


# ------------------------------------------------------------------ board and config TOML

def _toml_key(k: str) -> str:
    return k if k and all(c.isalnum() or c in "_-" for c in k) else json.dumps(k)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if v != v else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def to_toml(doc: dict) -> str:
    """TOML text for the values a board file holds (sub-tables inline)."""
    return "".join(f"{_toml_key(k)} = {_toml_value(v)}\n" for k, v in doc.items())


def _hostile_value(rng: random.Random):
    return rng.choice(("false", "true", "", "x" * 1000, "~/../../etc/passwd", "a\0b", "a\nb",
                       "host name", -1, 0, 1, 1 << 62, (1 << 63) - 1, -(1 << 63), 65536, 22,
                       0.0, -0.5, 1e300, float("nan"), float("inf"), True, False,
                       [], ["a"], [1, 2], [["x"]], {}, {"k": 1}, {"host": []}))


SSH_KEYS = ("host", "port", "user", "key", "known_hosts", "exec_prefix", "connect_timeout_s",
            "command_timeout_s", "trust_new_host_key", "remote_tmp")
VM_KEYS = ("vm", "qemu", "machine", "cpu", "smp", "memory_mb", "boot_timeout_s")


def _consume(board) -> None:
    """What the transports read from a board's options, without running anything."""
    from aot.deploy.host import check_cpu
    from aot.deploy.ssh_config import ssh_params
    from aot.targets import option_number

    if board.transport == "local":
        with contextlib.suppress(AotError):     # this machine may lack the flags: fine
            check_cpu(board)
    elif board.transport == "qemu-system":
        option_number(board, "timeout_s", 60.0, float, 0.001, 86400)
    elif board.transport == "ssh":
        if board.options.get("vm"):
            from aot.deploy.vm import vm_config
            vm_config(board)
        else:
            ssh_params(board)


def toml_case(seed: int, workdir: Path, time_limit: float = 10.0) -> tuple[Outcome, str]:
    """(outcome, what the case did) of fuzz case `seed` of the board and
    config loaders (aot.targets) and the options' readers."""
    import tomllib

    from aot import targets
    from aot.support.resources import data_dir

    rng = random.Random(f"toml:{seed}")
    files = sorted(data_dir("boards").glob("*.toml"))
    source = rng.choice(files)
    doc = tomllib.loads(source.read_text())
    name = doc["name"]
    which = rng.choice(("board", "board", "config"))
    detail = f"{source.name}: "
    config: dict = {}
    if which == "board":
        table = doc.setdefault("options", {}) if rng.random() < 0.5 else doc
        key = rng.choice(sorted(table) + ["unknown_key", *SSH_KEYS, *VM_KEYS, "cpu_flags"])
        if rng.random() < 0.15 and key in table:
            del table[key]
            detail += f"{key} removed"
        else:
            table[key] = _hostile_value(rng)
            detail += f"{key} := {_toml_value(table[key])[:40]}"
    else:
        config[name] = {k: _hostile_value(rng) if rng.random() < 0.3 else v for k, v in
                        {"host": "127.0.0.1", "port": 22, "user": "pi"}.items()}
        key = rng.choice((*SSH_KEYS, *VM_KEYS, "unknown_key"))
        config[name][key] = _hostile_value(rng)
        if rng.random() < 0.2:
            config["other"] = _hostile_value(rng)
        detail += f"config [{name}] {key} := {_toml_value(config[name][key])[:40]}"
    text = to_toml(doc)
    if rng.random() < 0.15:
        raw = bytearray(text.encode())
        k = rng.randrange(len(raw))
        raw[k:k] = rng.choice((b"\xff", b"[", b"\n[options]\n", b"=", b'"', b"\0"))
        text_bytes = bytes(raw)
        detail += "; bytes inserted"
    else:
        text_bytes = text.encode()
    case_dir = workdir / f"toml{seed}"
    boards_dir = case_dir / "boards"
    boards_dir.mkdir(parents=True, exist_ok=True)
    (boards_dir / source.name).write_bytes(text_bytes)
    config_file = case_dir / "boards.toml"
    config_file.write_text(_config_text(config))

    def case() -> str | None:
        try:
            with env_set(targets.BOARDS_ENV, str(boards_dir)), \
                    env_set(targets.CONFIG_ENV, str(config_file)):
                _consume(targets.get_board(name))
        finally:
            targets._boards.cache_clear()
        return None

    return judged(case, time_limit), detail


def _config_text(config: dict) -> str:
    out = []
    for table, values in config.items():
        if isinstance(values, dict):
            out.append(f"[{_toml_key(table)}]\n{to_toml(values)}")
        else:
            out.insert(0, f"{_toml_key(table)} = {_toml_value(values)}\n")
    return "".join(out)


KINDS = ("serve", "report", "npy", "toml")


def run_io_case(kind: str, seed: int, workdir: Path, time_limit: float = 10.0
                ) -> tuple[Outcome, str]:
    """One case of the named fuzzer."""
    if kind == "serve":
        return serve_case(seed, time_limit)
    if kind == "report":
        return report_case(seed, workdir, time_limit)
    if kind == "npy":
        return npy_case(seed, workdir, time_limit)
    if kind == "toml":
        return toml_case(seed, workdir, time_limit)
    raise ValueError(f"no fuzzer {kind!r} (known: {', '.join(KINDS)})")
