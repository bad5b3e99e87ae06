"""The client of the harness's serve mode (`bench/bench --serve`).

The harness answers request after request on one process, over any pair of
binary streams: a local process's pipes, a qemu-user process's, an SSH
channel's. The protocol (version 2, every integer little-endian; the device
side is templates/bench_main.c.j2):

    hello   harness -> host, once: b"AOTH", u32 version, u32 inputs,
            u32 outputs, u32 kernels, u32 flags (1: profile, 2: checks),
            u64 arena bytes, u64 max runs, u64 bytes per input, per output
    request host -> harness: b"AOTQ", u32 kind (1: run, 0: quit),
            u32 warmup, u32 runs, then per input u64 bytes + the raw bytes
    reply   b"AOTR", u32 runs, u32 profiled runs, u32 kernels,
            u64 ns per run, u64 ns per kernel per profiled run,
            then per output u64 bytes + the raw bytes
    error   instead of a reply: b"AOTE", u32 exit code, u32 length, the
            message; then the harness exits with that code

A harness serving over a microcontroller's UART (serial_link.py) waits
for b"AOTS" before its hello and sets flag 4 (device): the hello then goes
on with the package's identity (32 ASCII bytes), the name of the device's
counter (16 bytes, NUL-padded) and its ticks per second (u64), and each
reply's run times are followed by each run's count of that counter (u64).

The client checks the hello against metadata.json, so a harness from
another package (or another aot) is refused before any request, and it
trusts no length it reads: every count is checked against the package's
metadata or the request before anything of that size is read, so a
corrupt or hostile harness is an AotError naming the field, never a
MemoryError or a reply accepted with more runs than were asked for.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO, Callable, Sequence

import numpy as np

from aot.deploy.host import (EXIT_GUARD, EXIT_INDEX, PROFILE_MAX_RUNS, RunResult, check_inputs,
                             check_profile, output_arrays)
from aot.errors import AotError

VERSION = 2
FLAG_PROFILE, FLAG_CHECKS, FLAG_DEVICE = 1, 2, 4
KIND_QUIT, KIND_RUN = 0, 1
HELLO, REQUEST, REPLY, ERROR, SYNC = b"AOTH", b"AOTQ", b"AOTR", b"AOTE", b"AOTS"
MAX_MESSAGE = 1 << 16     # an error frame's message, at most


@dataclass(frozen=True)
class Hello:
    """What the harness says about itself when it starts."""
    version: int
    input_bytes: tuple[int, ...]
    output_bytes: tuple[int, ...]
    kernels: int
    profile: bool
    checks: bool
    arena_bytes: int
    max_runs: int
    device: DeviceInfo | None = None


@dataclass(frozen=True)
class DeviceInfo:
    """What a harness on a microcontroller adds to its hello (flag 4)."""
    package_id: str
    counter: str            # dwt-cyccnt, systick, mcycle
    counter_hz: int         # its ticks per second as the firmware was built (0: unknown)


class SessionLost(AotError):
    """The harness stopped answering (exited, crashed, was killed)."""


class WrongPackage(AotError):
    """The harness on a device was built from another package."""

    def __init__(self, got: str | None):
        super().__init__(f"the device runs package {got}" if got else
                         "the device's harness names no package")
        self.got = got


class ServeClient:
    """One serve session: `run` sends a request and decodes the reply.

    `lost()` is called when the harness's stdout ends or its stdin breaks
    mid-session; it returns why (exit status, stderr) for the error message.
    `package_id`: the identity a device's hello must carry (identity.py),
    checked before anything else in the hello (WrongPackage).
    """

    def __init__(self, stdin: BinaryIO, stdout: BinaryIO, meta: dict,
                 lost: Callable[[], str] = lambda: "the harness's output ended",
                 package_id: str | None = None):
        self._in, self._out, self._meta, self._lost = stdin, stdout, meta, lost
        self._package_id = package_id
        self.alive = True
        self.hello = self._read_hello()

    # ------------------------------------------------------------- reading

    def _read(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            try:
                chunk = self._out.read(n - got)
            except (OSError, EOFError) as e:     # a channel's timeout, a reset connection
                self.alive = False
                raise SessionLost(f"the serve session broke ({e or type(e).__name__}): "
                                  f"{self._lost()}") from None
            if not chunk:
                self.alive = False
                raise SessionLost(f"the serve session ended: {self._lost()}")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def _u32s(self, count: int) -> tuple[int, ...]:
        return struct.unpack(f"<{count}I", self._read(4 * count))

    def _u64s(self, count: int) -> tuple[int, ...]:
        return struct.unpack(f"<{count}Q", self._read(8 * count)) if count else ()

    def _expect(self, magic: bytes) -> None:
        got = self._read(4)
        if got == ERROR:
            self._raise_error()
        if got != magic:
            self.alive = False
            raise AotError(f"the harness broke the serve protocol: expected {magic!r}, got "
                           f"{got!r} (is bench/bench from this aot?)")

    def _raise_error(self) -> None:
        code, length = self._u32s(2)
        message = self._read(min(length, MAX_MESSAGE)).decode("utf-8", "replace")
        self.alive = False
        if code == EXIT_GUARD:
            raise AotError(f"the harness's guard check failed: {message}")
        if code == EXIT_INDEX and message.strip():     # names the input and the node already
            raise AotError(message)
        if code == EXIT_INDEX:
            raise AotError("the harness stopped at an index check (an input out of range); "
                           "it sent no message naming the input")
        raise AotError(f"the harness stopped (exit {code}): {message}")

    def _broken(self, message: str) -> AotError:
        self.alive = False
        return AotError(f"the harness broke the serve protocol: {message}")

    def _count(self, field: str, got: int, want: int, source: str) -> None:
        """A count read from the harness, checked before anything it counts is read."""
        if got != want:
            raise self._broken(f"{field} is {got}, {source} says {want}")

    def _read_hello(self) -> Hello:
        self._expect(HELLO)
        (version,) = self._u32s(1)
        if version != VERSION:
            self.alive = False
            raise AotError(f"the harness speaks serve protocol version {version}, this aot "
                           f"speaks {VERSION}: repackage the model")
        n_in, n_out, kernels, flags = self._u32s(4)
        self._count("the hello's input count", n_in, len(self._meta["inputs"]), "metadata.json")
        self._count("the hello's output count", n_out, len(self._meta["outputs"]),
                    "metadata.json")
        arena, max_runs = self._u64s(2)
        hello = Hello(version, self._u64s(n_in), self._u64s(n_out), kernels,
                      bool(flags & FLAG_PROFILE), bool(flags & FLAG_CHECKS), arena, max_runs,
                      self._read_device() if flags & FLAG_DEVICE else None)
        if self._package_id is not None:
            got = hello.device.package_id if hello.device else None
            if got != self._package_id:
                self.alive = False
                raise WrongPackage(got)
        self._check_hello(hello)
        return hello

    def _text(self, size: int, field: str) -> str:
        raw = self._read(size).rstrip(b"\0")
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            raise self._broken(f"the hello's {field} is not ASCII: {raw!r}") from None
        if not text.isprintable():
            raise self._broken(f"the hello's {field} is not printable: {raw!r}")
        return text

    def _read_device(self) -> DeviceInfo:
        package_id = self._text(32, "package identity")
        counter = self._text(16, "counter name")
        (hz,) = self._u64s(1)
        return DeviceInfo(package_id, counter, hz)

    def _check_hello(self, hello: Hello) -> None:
        meta = self._meta
        want = Hello(VERSION, tuple(s["bytes"] for s in meta["inputs"]),
                     tuple(s["bytes"] for s in meta["outputs"]), len(meta.get("kernels", ())),
                     bool(meta.get("profile")), bool(meta.get("checks")),
                     meta["arena_bytes"], hello.max_runs, hello.device)
        if hello != want:
            self.alive = False
            diff = ", ".join(f"{f} {getattr(hello, f)} vs {getattr(want, f)}"
                             for f in Hello.__dataclass_fields__
                             if getattr(hello, f) != getattr(want, f))
            raise AotError(f"the harness does not match the package's metadata.json ({diff})")

    # ------------------------------------------------------------- writing

    def _send(self, data: bytes) -> None:
        try:
            self._in.write(data)
            self._in.flush()
        except (BrokenPipeError, ConnectionError, OSError, ValueError):
            # The harness may have answered with an error frame before it
            # stopped reading: that says more than the broken pipe.
            self._expect(REPLY)
            raise SessionLost(f"the serve session ended: {self._lost()}") from None

    def request(self, inputs: Sequence[np.ndarray], warmup: int = 0, runs: int = 1) -> RunResult:
        if not self.alive:
            raise AotError("the serve session has ended")
        if warmup < 0 or not 1 <= runs <= min(self.hello.max_runs, 0xFFFFFFFF):
            raise AotError(f"need warmup >= 0 and 1 <= runs <= {self.hello.max_runs}, "
                           f"got warmup {warmup}, runs {runs}")
        inputs = check_inputs(self._meta, inputs)
        parts = [REQUEST, struct.pack("<3I", KIND_RUN, warmup, runs)]
        for array in inputs:
            data = array.tobytes()
            parts += [struct.pack("<Q", len(data)), data]
        self._send(b"".join(parts))
        return self._read_reply(warmup, runs)

    def send_raw(self, data: bytes) -> RunResult:
        """A hand-made request (tests of the harness's checks)."""
        self._send(data)
        return self._read_reply(0)

    def _read_reply(self, warmup: int, runs: int | None = None) -> RunResult:
        """The reply to a request for `runs` timed runs (None: a raw request,
        whatever the harness ran, up to its hello's max runs)."""
        self._expect(REPLY)
        got_runs, profiled, kernels = self._u32s(3)
        if runs is None:
            if not 1 <= got_runs <= self.hello.max_runs:
                raise self._broken(f"the reply's run count is {got_runs}, the harness's "
                                   f"hello allows 1 to {self.hello.max_runs}")
            runs = got_runs
        self._count("the reply's run count", got_runs, runs, "the request")
        self._count("the reply's profiled run count", profiled,
                    min(runs, self.hello.max_runs, PROFILE_MAX_RUNS) if self.hello.profile
                    else 0, "the request" if self.hello.profile else "the hello (no profile)")
        self._count("the reply's kernel count", kernels, self.hello.kernels, "the hello")
        times = list(self._u64s(runs))
        cycles = list(self._u64s(runs)) if self.hello.device else None
        flat = self._u64s(profiled * kernels)
        profile = [list(flat[i * kernels:(i + 1) * kernels]) for i in range(profiled)]
        outs = []
        for expected in self.hello.output_bytes:
            (n,) = self._u64s(1)
            self._count(f"output {len(outs)}'s byte count", n, expected, "the hello")
            outs.append(self._read(n))
        profile_ns = profile if self.hello.profile else None
        check_profile(self._meta, profile_ns)
        report = {"arena_bytes": self.hello.arena_bytes, "runs": runs, "warmup": warmup,
                  "times_ns": times, **({"profile_ns": profile} if profile_ns else {})}
        counted = {}
        if cycles is not None:
            device = self.hello.device
            report.update(cycles=cycles, cycle_counter=device.counter,
                          counter_hz=device.counter_hz)
            counted = {"cycles": cycles, "cycle_counter": device.counter}
        return RunResult(output_arrays(self._meta, outs), times, report, profile_ns, **counted)

    def quit(self) -> None:
        """Ask the harness to exit (it also does at the end of its input)."""
        if self.alive:
            self.alive = False
            try:
                self._in.write(REQUEST + struct.pack("<3I", KIND_QUIT, 0, 0))
                self._in.flush()
            except (BrokenPipeError, ConnectionError, OSError, ValueError):
                pass
