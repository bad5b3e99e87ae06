"""The local transport: run the package's harness on this machine."""
from __future__ import annotations

import functools
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from aot.errors import AotError, InputError
from aot.ir.graph import Quant, TensorType
from aot.support.jsonfile import loads, type_name
from aot.targets import Board

TIMEOUT_S = 600


# The harness's exit code when its guard check (a --checks package) fails.
EXIT_GUARD = 3
# ... and when the inputs give an index out of range (AOT_ERR_INDEX): its
# message names the input and the node.
EXIT_INDEX = 4


@dataclass(frozen=True)
class RunResult:
    outputs: list[np.ndarray]
    # Each timed run (ns; a bare-metal board's clock may tick in us).
    times_ns: list[int]
    report: dict            # the harness's JSON line (or the serve reply, as JSON)
    # A --profile package's kernel times (ns): per timed run (the first 1000),
    # per kernel in metadata.json "kernels" order. None otherwise.
    profile_ns: list[list[int]] | None = None
    # Guest instructions of each timed run, and of each kernel of each
    # profiled run, where the transport counts them (qemu-user); else None.
    instructions: list[int] | None = None
    profile_instructions: list[list[int]] | None = None
    # What was done to the inputs on the way (quantize_floats), one line each.
    notes: tuple[str, ...] = ()
    # Each timed run in ticks of the device's own counter, where the harness
    # reports it (a microcontroller over its serial port), and its name
    # (dwt-cyccnt, systick, mcycle); else None.
    cycles: list[int] | None = None
    cycle_counter: str | None = None

    @property
    def times_us(self) -> list[float]:
        """Each timed run in microseconds."""
        return [t / 1000.0 for t in self.times_ns]


def expected_inputs(meta: dict) -> str:
    """The package's inputs as an error message lists them: `x int8[1, 49, 10, 1], ...`."""
    return ", ".join(f"{s['name']} {s['dtype']}{s['shape']}" for s in meta["inputs"])


def ordered_inputs(meta: dict, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]
                   ) -> list:
    """The inputs in the package's order: from {name: array} (ONNX Runtime's
    habit) or from a list already in that order."""
    if not isinstance(inputs, Mapping):
        return list(inputs)
    names = [s["name"] for s in meta["inputs"]]
    unknown = [n for n in inputs if n not in names]
    missing = [n for n in names if n not in inputs]
    if unknown or missing:
        what = (f"no input named {', '.join(map(repr, unknown))}" if unknown
                else f"no array for input {', '.join(map(repr, missing))}")
        raise InputError(f"{what}: the package takes {expected_inputs(meta)}")
    return [inputs[n] for n in names]


class QuantizedInput(UserWarning):
    """Float data was quantized for a quantized input (quantize_floats):
    aot.run and Device.run say so with this warning."""


def spec_type(spec: dict) -> TensorType:
    """The type of an input or output row of metadata.json."""
    q = spec.get("quant")
    quant = Quant(tuple(q["scale"]), tuple(q["zero_point"]), q["axis"]) if q else None
    return TensorType(tuple(spec["shape"]), spec["dtype"], quant)


def quantize_float(name: str, array, ty: TensorType) -> tuple[np.ndarray, str | None]:
    """(array, note): float data for a quantizable input quantized with its
    scale and zero point as TFLite's QUANTIZE does, and a note saying so;
    anything else as it is, with no note."""
    from aot.ops.quant.tflite_int8 import quantize_array
    from aot.passes.float_io import quantizable

    array = np.asarray(array)
    if array.dtype.kind != "f" or not quantizable(ty):
        return array, None
    scale, zero_point = float(ty.quant.scale[0]), int(ty.quant.zero_point[0])
    return (quantize_array(array, scale, zero_point, ty.dtype),
            f"{name}: {array.dtype.name} quantized to {ty.dtype} with scale={scale:.9g}, "
            f"zero_point={zero_point}")


def quantize_floats(meta: dict, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]
                    ) -> tuple[list, list[str]]:
    """(inputs in the package's order, notes): float data for a quantized
    input of a package (one without --float-io) quantized with the
    package's scale and zero point as TFLite's QUANTIZE does, and a note per
    input so fed (quantize_float)."""

    out, notes = ordered_inputs(meta, inputs), []
    for i, (spec, array) in enumerate(zip(meta["inputs"], list(out))):
        out[i], note = quantize_float(spec["name"], array, spec_type(spec))
        notes += [note] if note else []
    return out, notes


def warn_notes(notes: Sequence[str]) -> None:
    """Each note as a QuantizedInput warning, pointing at the caller's caller
    (the user's aot.run or dev.run)."""
    import warnings

    for note in notes:
        warnings.warn(note, QuantizedInput, stacklevel=3)


def check_inputs(meta: dict, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]
                 ) -> list[np.ndarray]:
    """The inputs as the package expects them (names, count, shape, dtype),
    contiguous and in the package's order."""
    specs = meta["inputs"]
    inputs = ordered_inputs(meta, inputs)
    if len(inputs) != len(specs):
        raise InputError(f"the package takes {len(specs)} inputs, got {len(inputs)}: "
                         f"{expected_inputs(meta)}")
    out = []
    for spec, array in zip(specs, inputs):
        array = np.asarray(array)
        if list(array.shape) != spec["shape"] or array.dtype.name != spec["dtype"]:
            raise InputError(f"input '{spec['name']}' must be {spec['dtype']}{spec['shape']}, "
                             f"got {array.dtype.name}{list(array.shape)}")
        out.append(np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")))
    return out


def harness_args(meta: dict, work: Path, inputs: Sequence[np.ndarray], warmup: int,
                 runs: int) -> tuple[list[str], list[Path]]:
    """Write the raw input files; the harness arguments and the output paths."""
    ins, outs = [], []
    for i, array in enumerate(inputs):
        path = work / f"in{i}.bin"
        path.write_bytes(array.tobytes())
        ins.append(path)
    outs = [work / f"out{i}.bin" for i in range(len(meta["outputs"]))]
    return [str(warmup), str(runs), *map(str, ins), *map(str, outs)], outs


def output_arrays(meta: dict, outs: Sequence[bytes]) -> list[np.ndarray]:
    """The outputs' raw little-endian bytes as arrays of their shapes."""
    if len(outs) != len(meta["outputs"]):
        raise AotError(f"the harness returned {len(outs)} outputs, the package has "
                       f"{len(meta['outputs'])}")
    arrays = []
    for spec, data in zip(meta["outputs"], outs):
        dtype = np.dtype(spec["dtype"]).newbyteorder("<")
        if len(data) != spec["bytes"]:
            raise AotError(f"output '{spec['name']}': {len(data)} bytes, expected {spec['bytes']}")
        arrays.append(np.frombuffer(data, dtype).astype(spec["dtype"]).reshape(spec["shape"]))
    return arrays


def profiled_kernels(meta: dict) -> int | None:
    """The kernels a --profile package's harness times, else None."""
    return len(meta.get("kernels", ())) if meta.get("profile") else None


def check_profile(meta: dict, profile_ns: list[list[int]] | None) -> None:
    """A profile row per run, a time per kernel of metadata.json."""
    kernels = len(meta.get("kernels", ()))
    if profile_ns is not None and any(len(row) != kernels for row in profile_ns):
        raise AotError(f"the harness's profile does not have the package's {kernels} kernels "
                       "(metadata.json and bench/bench disagree)")


# The report is one line of a few numbers per run; a longer last line is
# not one (parsing it would spend time and memory on it).
MAX_REPORT_CHARS = 1 << 24
# The harness's JSON report: a few fields, then a time per run (a uint64:
# at most 20 digits and a comma) and, with --profile, a row of uint32
# kernel times for each of the first PROFILE_MAX_RUNS runs.
REPORT_BASE_BYTES = 64 << 10
PROFILE_MAX_RUNS = 1000   # a --profile harness records the first this many timed runs
# {"times_ns": [...], "profile_ns": [[...], ...]}: three levels.
REPORT_DEPTH = 3


def report_limit(meta: dict, runs: int) -> int:
    """The most bytes the harness's report can take on stdout for `runs` runs."""
    kernels = len(meta.get("kernels", ()))
    return REPORT_BASE_BYTES + 21 * runs + min(runs, PROFILE_MAX_RUNS) * (11 * kernels + 3)


def parse_report(stdout: str | bytes, meta: dict, outs: Sequence[bytes],
                 runs: int | None = None) -> RunResult:
    """The harness's JSON report (the last line of its stdout) with the
    outputs' bytes, checked: the same parser reads local, qemu and SSH runs,
    and anything malformed is one AotError saying what. Its size is bounded
    by what the package's harness prints for `runs` runs (report_limit),
    its nesting and numbers by aot.support.jsonfile."""
    if isinstance(stdout, bytes):
        stdout = stdout.decode("utf-8", "replace")
    lines = stdout.strip().splitlines()
    line = lines[-1] if lines else ""
    limit = MAX_REPORT_CHARS if runs is None else min(MAX_REPORT_CHARS, report_limit(meta, runs))
    if len(line) > limit:
        raise AotError(f"the harness's report is {len(line)} characters, more than the "
                       f"{limit} its {runs or 'many'} runs print")
    report = loads(line, "the harness's report", REPORT_DEPTH) if line.startswith("{") else None
    if not isinstance(report, dict):
        raise AotError(f"the harness printed no JSON report: {stdout[-200:]!r}")
    times = report_times_ns(report)
    profile = report.get("profile_ns")
    if profile is not None:
        if not isinstance(profile, list):
            raise AotError(f"the harness's report: profile_ns is {type_name(profile)}, "
                           "not a list of rows")
        profile = [_whole_numbers(row, "a profile_ns row") for row in profile]
    check_profile(meta, profile)
    return RunResult(output_arrays(meta, outs), times, report, profile)


def _whole_numbers(value, what: str) -> list[int]:
    """A list of non-negative 64-bit integers, as the harness prints them."""
    if not isinstance(value, list):
        raise AotError(f"the harness's report: {what} is {type_name(value)}, not a list")
    for v in value:
        if type(v) is not int or not 0 <= v < 1 << 64:
            shown = f" ({v})" if type(v) is int else ""
            raise AotError(f"the harness's report: {what} holds {type_name(v)}{shown}, not "
                           "a count of nanoseconds")
    return value


def report_times_ns(report: dict) -> list[int]:
    """The JSON line's per-run times in ns (a harness from before aot timed
    in us: `times_us`)."""
    if "times_ns" in report:
        times = _whole_numbers(report["times_ns"], "times_ns")
    elif "times_us" in report:
        times = [t * 1000 for t in _whole_numbers(report["times_us"], "times_us")]
    else:
        raise AotError("the harness's report has no times_ns")
    if not times:
        raise AotError("the harness's report: times_ns is empty (no run was timed)")
    return times


def read_outputs(meta: dict, paths: Sequence[Path], where: str = "") -> list[bytes]:
    """The output files the harness wrote, each checked for its size in
    metadata.json before it is read."""
    outs = []
    for spec, path in zip(meta["outputs"], paths):
        try:
            size = path.stat().st_size
            if size != spec["bytes"]:
                raise AotError(f"output '{spec['name']}': the harness wrote {size} bytes{where}, "
                               f"expected {spec['bytes']}")
            outs.append(path.read_bytes())
        except FileNotFoundError:
            raise AotError(f"output '{spec['name']}': the harness wrote no "
                           f"{path.name}{where}") from None
        except OSError as e:
            raise AotError(f"output '{spec['name']}': cannot read {path.name}{where} "
                           f"({e.strerror or e})") from None
    return outs


def failure(returncode: int, stderr: str, where: str = "",
            stops: Mapping[int, str] | None = None) -> str:
    """The one-line reason a harness run failed: its last stderr line, named
    for what the exit code says: a guard check failure (EXIT_GUARD), one of
    the transport's own `stops`, or a crash (a fatal signal: negative, or
    128 + n as shells and qemu-user relay it). `where` (" under qemu-user")
    says where it ran."""
    lines = stderr.strip().splitlines()
    last = lines[-1] if lines else "no message"
    if returncode == EXIT_GUARD:
        return f"the harness's guard check failed{where}: {last.removeprefix('bench: ')}"
    if returncode == EXIT_INDEX and last.startswith("bench: "):
        return f"{last.removeprefix('bench: ')}{where}"
    what = (stops or {}).get(returncode)
    if what:
        return f"the harness stopped on {what}{where} (exit {returncode}): {last}"
    if returncode < 0 or returncode >= 128:
        return f"the harness crashed{where} (exit {returncode}): {last}"
    return f"the harness failed{where} (exit {returncode}): {last}"


@functools.lru_cache(maxsize=None)
def cpu_flags() -> frozenset[str]:
    """This machine's CPU feature flags (Linux /proc/cpuinfo; empty elsewhere),
    read once: every local run checks them."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def check_cpu(board: Board) -> None:
    """Refuse to run a local board's code on a CPU without the features it
    was compiled for (options.cpu_flags): that would die of SIGILL."""
    wanted = board.options.get("cpu_flags", ())
    if not isinstance(wanted, (list, tuple)) or not all(isinstance(f, str) for f in wanted):
        raise AotError(f"board '{board.name}': options.cpu_flags must be a list of "
                       "/proc/cpuinfo flags")
    missing = [f for f in wanted if f not in cpu_flags()]
    if missing:
        raise AotError(f"board '{board.name}' needs CPU features this machine lacks: "
                       f"{', '.join(missing)} (build for board 'host' instead)")


def prepare_run(pkg: Path, inputs: Sequence[np.ndarray]) -> tuple[dict, list[np.ndarray], Path]:
    """What every transport starts from: the package's metadata, the inputs
    checked against it, and the harness binary."""
    from aot.packaging.metadata import read_metadata

    meta = read_metadata(pkg)
    inputs = check_inputs(meta, inputs)
    exe = pkg / "bench" / "bench"
    if not exe.is_file():
        raise AotError(f"{pkg}: the harness bench/bench is missing (package for this board)")
    return meta, inputs, exe


def run_local(pkg: Path, inputs: Sequence[np.ndarray], warmup: int, runs: int,
              emulator: Sequence[str] = (), where: str = "") -> RunResult:
    """Run the harness on this machine, directly or under `emulator` (a
    qemu-user command line); `where` (" under qemu-user") goes into the
    error messages."""
    meta, inputs, exe = prepare_run(pkg, inputs)
    with tempfile.TemporaryDirectory(prefix="aot-run-") as tmp:
        args, out_paths = harness_args(meta, Path(tmp), inputs, warmup, runs)
        limit = report_limit(meta, runs)
        try:
            code, out, err = run_bounded([*emulator, str(exe.resolve()), *args], limit,
                                         TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise AotError(f"the harness timed out{where} after {TIMEOUT_S} s") from None
        except OSError as e:
            raise AotError(f"cannot run {emulator[0] if emulator else exe}: {e.strerror}") from None
        # decoded with "replace": a report that is not UTF-8 is refused by
        # parse_report with the rest
        if code != 0:
            raise AotError(failure(code, err.decode("utf-8", "replace"), where))
        if out is None:
            raise AotError(f"the harness printed more than the {limit} bytes the report of "
                           f"{runs} runs takes{where}")
        return parse_report(out.decode("utf-8", "replace"), meta,
                            read_outputs(meta, out_paths, where), runs)


# What run_bounded keeps of stderr: its end, where the reason of a failure is.
STDERR_TAIL = 64 << 10


def run_bounded(cmd: Sequence[str], max_stdout: int, timeout: float
                ) -> tuple[int, bytes | None, bytes]:
    """(exit code, stdout or None when it exceeded max_stdout bytes, the
    last STDERR_TAIL bytes of stderr) of a command given no stdin: a
    harness printing without end costs this process no more than the
    bounds. subprocess.TimeoutExpired after `timeout` s, the command killed."""
    import threading

    proc = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    kept = {"out": bytearray(), "err": bytearray()}
    over = threading.Event()

    def drain(pipe, key: str) -> None:
        buf = kept[key]
        while chunk := pipe.read1(1 << 16):
            if key == "err":
                buf += chunk
                del buf[:-STDERR_TAIL]
            elif not over.is_set():
                buf += chunk
                if len(buf) > max_stdout:
                    over.set()
                    buf.clear()
        pipe.close()

    threads = [threading.Thread(target=drain, args=(proc.stdout, "out"), daemon=True),
               threading.Thread(target=drain, args=(proc.stderr, "err"), daemon=True)]
    for t in threads:
        t.start()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    finally:
        for t in threads:
            t.join(5)
    return proc.returncode, None if over.is_set() else bytes(kept["out"]), bytes(kept["err"])
