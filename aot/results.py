"""What aot.analyze, aot.verify and aot.bench return: frozen dataclasses
with documented fields (docs/package.md "Results").

`to_json()` is the object the command's `--json` prints, key for key and
value for value; `from_json()` reads it back (a saved report). For code
written against the dicts these functions returned before, `result["key"]`,
`"key" in result`, `result.get("key")` and `dict(result)` still work: they
read the JSON form (rows are dicts there too).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from aot.errors import MismatchError
from aot.check.timing import KernelStat


@dataclass(frozen=True)
class TensorUse:
    """One buffer a kernel touches. place: "arena" (at offset, live from step
    first to last, both inclusive), "input" / "output" (the caller's buffer),
    "state" (a variable's static buffer); access: "read", "write" or
    "scratch" (the kernel's own workspace in the arena)."""
    name: str
    access: str
    place: str
    size: int
    offset: int | None = None
    first: int | None = None
    last: int | None = None


@dataclass(frozen=True)
class Layer:
    step: int
    name: str
    symbol: str
    ops: tuple[str, ...]
    macs: int
    weights_bytes: int              # constants it reads, each once
    activations_read_bytes: int
    activations_written_bytes: int
    tensors: tuple[TensorUse, ...]
    code_bytes: int | None = None   # its function in the compiled library

    def as_json(self) -> dict[str, Any]:
        out = {"step": self.step, "name": self.name, "symbol": self.symbol,
               "ops": list(self.ops), "macs": self.macs, "weights_bytes": self.weights_bytes,
               "activations_read_bytes": self.activations_read_bytes,
               "activations_written_bytes": self.activations_written_bytes,
               "tensors": [asdict(t) for t in self.tensors]}
        if self.code_bytes is not None:
            out["code_bytes"] = self.code_bytes
        return out


def _row(cls, row: Mapping[str, Any], derived: tuple[str, ...] = (), **parsed):
    """cls from a JSON row: its fields by name (`parsed`: those converted
    already); `derived` keys are recomputed, not read. A key the class does
    not know is a bug in aot (a field added to the report, not here)."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(row) - names - set(derived))
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown report keys {unknown}")
    return cls(**{k: v for k, v in row.items() if k in names}, **parsed)


def _json(obj, optional: tuple[str, ...]) -> dict[str, Any]:
    """obj's fields as a JSON object, the `optional` ones left out when they
    hold their default (the reports have no such key then)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)
            if not (f.name in optional and getattr(obj, f.name) == f.default)}


class _Report:
    """Dict-style reading of the JSON form, for callers of the old dicts."""

    def as_dict(self) -> dict[str, Any]:
        return self.to_json()

    def __getitem__(self, key: str) -> Any:
        return self.as_dict()[key]

    def __contains__(self, key: str) -> bool:
        return key in self.as_dict()

    def get(self, key: str, default: Any = None) -> Any:
        return self.as_dict().get(key, default)

    def keys(self):
        """With __getitem__: dict(result) and {**result} give the dict."""
        return self.as_dict().keys()


# ------------------------------------------------------------------ verify

@dataclass(frozen=True)
class OutputCheck:
    """One output (or, for a streaming model, state tensor) over all samples,
    aot.check.validate.output_metrics. Errors are in real values (a quantized
    output dequantized); max_lsb in its quantization steps (None for a float
    output); max_abs_err in the stored values (int8 codes for int8). The
    metrics are None when the comparison failed, and `error` says why; `step`
    is the quantization step of an output the model dequantizes; `tolerance`
    the rule it was held to ({atol, rtol, bit_exact, scaled}); `nan_matched`
    the elements NaN on the board where the reference has NaN too (they
    agree, and are counted apart: docs/deploy.md "Infinities and NaN")."""
    name: str
    ok: bool
    max_abs: float | None
    rmse: float | None
    l2r: float | None
    cosine: float | None
    top1_agreement: float | None
    max_lsb: int | None
    max_abs_err: float | None
    error: str | None = None
    step: float | None = None
    tolerance: Mapping[str, Any] | None = None
    nan_matched: int = 0

    _OMITTED = ("error", "step", "tolerance", "nan_matched")

    def to_json(self) -> dict[str, Any]:
        return _json(self, self._OMITTED)

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> "OutputCheck":
        return _row(cls, row)


@dataclass(frozen=True)
class StreamCheck:
    """A streaming model's stream: `steps` compared, the state tensors
    (`state`, named as the model's variables), the steps where an output is
    off its zero point, and the first step and tensor that differ
    ({step, tensor, max_abs}; None: none did)."""
    steps: int
    state: tuple[str, ...]
    nonzero_output_steps: int
    first_mismatch: Mapping[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        return {**_json(self, ()), "state": list(self.state)}

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> "StreamCheck":
        return _row(cls, {k: v for k, v in row.items() if k != "state"},
                    state=tuple(row["state"]))


@dataclass(frozen=True)
class VerifyResult(_Report):
    """aot.verify's report. ok: every output within tolerance. reference:
    the runtime compared with (onnxruntime, tflite-micro, litert). inputs:
    where the samples came from (dataset, saved, random, stream). samples
    and count: how many (the same number). model: the model file (or
    "<memory>"); board: where the package ran. outputs: an OutputCheck per
    output. package: its summary ({package, arena_bytes,
    arena_lower_bound_bytes, params_bytes[, compile_seconds]}; not in the
    --json output). stream: a streaming model's StreamCheck, else None.
    float_io: the package has float inputs and outputs (package(float_io=
    True)), compared with the float-wrapped reference. notes: what was done
    to the data on the way, e.g. float samples quantized for an int8 input."""
    ok: bool
    reference: str
    inputs: str
    samples: int
    count: int
    model: str
    board: str
    outputs: tuple[OutputCheck, ...]
    package: Mapping[str, Any]
    stream: StreamCheck | None = None
    float_io: bool = False
    notes: tuple[str, ...] = ()

    _OMITTED = ("stream", "float_io", "notes")

    def check(self) -> "VerifyResult":
        """self when ok, else a MismatchError naming the outputs that differ."""
        if not self.ok:
            bad = [o for o in self.outputs if not o.ok]
            shown = ", ".join(f"{o.name} ({o.error or f'max |err| {o.max_abs:.3g}'})"
                              for o in bad[:3])
            more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
            first = self.stream.first_mismatch if self.stream else None
            where = (f"; first at step {first['step']} in {first['tensor']}"
                     if first else "")
            raise MismatchError(f"{self.model} on {self.board} differs from {self.reference}: "
                                f"{shown or 'the stream'}{more}{where}")
        return self

    def as_dict(self) -> dict[str, Any]:
        """The report as aot.verify returned it: the JSON form and package."""
        return {**self.to_json(), "package": dict(self.package)}

    def to_json(self) -> dict[str, Any]:
        out = {**_json(self, self._OMITTED), "outputs": [o.to_json() for o in self.outputs]}
        del out["package"]
        if self.stream is not None:
            out["stream"] = self.stream.to_json()
        if self.notes:
            out["notes"] = list(self.notes)
        return out

    @classmethod
    def from_json(cls, report: Mapping[str, Any]) -> "VerifyResult":
        """From the --json report (package: {} when it has none) or aot.verify's
        dict."""
        stream = report.get("stream")
        return _row(cls, {k: v for k, v in report.items()
                          if k not in ("outputs", "stream", "package", "notes")},
                    outputs=tuple(OutputCheck.from_json(r) for r in report["outputs"]),
                    package=dict(report.get("package", {})),
                    stream=None if stream is None else StreamCheck.from_json(stream),
                    notes=tuple(report.get("notes", ())))


# ------------------------------------------------------------------- bench

@dataclass(frozen=True)
class BenchResult(_Report):
    """aot.bench's report. The statistics of the `repeat` timed runs in
    milliseconds (after `warmup` untimed ones), on the board's clock: an
    emulated board's (emulated=True) times are the emulator's, and `note`
    says so. board, codegen, model (the graph's name), threads: what ran.
    Where the board counts instructions (qemu-user): instructions per timed
    run and their median, else None. Where the device reports its own
    counter (a microcontroller over its serial port): cycles per timed run,
    their median, the counter's name (dwt-cyccnt, systick, mcycle) and its
    ticks per second (0: unknown), else None. profile (bench(profile=True)):
    a KernelStat per kernel, else None."""
    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    std_ms: float
    repeat: int
    warmup: int
    board: str
    codegen: str
    model: str
    emulated: bool
    threads: int
    median_instructions: int | None = None
    instructions: tuple[int, ...] | None = None
    note: str | None = None
    profile: tuple[KernelStat, ...] | None = None
    median_cycles: int | None = None
    cycles: tuple[int, ...] | None = None
    cycle_counter: str | None = None
    counter_hz: int | None = None

    _OMITTED = ("median_instructions", "instructions", "note", "profile", "median_cycles",
                "cycles", "cycle_counter", "counter_hz")

    def to_json(self) -> dict[str, Any]:
        out = _json(self, self._OMITTED)
        if self.instructions is not None:
            out["instructions"] = list(self.instructions)
        if self.cycles is not None:
            out["cycles"] = list(self.cycles)
        if self.profile is not None:
            out["profile"] = [k.as_json() for k in self.profile]
        return out

    @classmethod
    def from_json(cls, report: Mapping[str, Any]) -> "BenchResult":
        instructions, profile = report.get("instructions"), report.get("profile")
        cycles = report.get("cycles")
        return _row(cls, {k: v for k, v in report.items()
                          if k not in ("instructions", "profile", "cycles")},
                    instructions=None if instructions is None else tuple(instructions),
                    cycles=None if cycles is None else tuple(cycles),
                    profile=None if profile is None else tuple(
                        _row(KernelStat, k, derived=("macs_per_us", "family")) for k in profile))


# ----------------------------------------------------------------- analyze

@dataclass(frozen=True)
class AnalyzeResult(_Report):
    """aot.analyze's report. model, board, target, codegen: what was lowered
    for what. total_macs: the layers' multiply-accumulates. weights_bytes:
    the packed constants (flash), weights_data_bytes without alignment
    padding. arena_bytes and arena_lower_bound_bytes: the memory plan (RAM)
    and the most any plan could save down to; state_bytes: a stateful
    model's variables; io_bytes: {inputs, outputs}, the caller's buffers.
    memory_pools: {pool: bytes} with pools=True, else None.
    kernels_code_bytes and memory (aot.packaging.footprint.memory_summary of the
    library) when compiled for code sizes, else None. layers: a Layer per
    kernel, in execution order (aot/analysis.py)."""
    model: str
    board: str
    target: str
    codegen: str
    total_macs: int
    weights_bytes: int
    weights_data_bytes: int
    arena_bytes: int
    arena_lower_bound_bytes: int
    state_bytes: int
    io_bytes: Mapping[str, int]
    layers: tuple[Layer, ...]
    memory_pools: Mapping[str, int] | None = None
    kernels_code_bytes: int | None = None
    memory: Mapping[str, int] | None = None

    _OMITTED = ("memory_pools", "kernels_code_bytes", "memory")

    def to_json(self) -> dict[str, Any]:
        return {**_json(self, self._OMITTED), "layers": [la.as_json() for la in self.layers]}

    @classmethod
    def from_json(cls, report: Mapping[str, Any]) -> "AnalyzeResult":
        return _row(cls, {k: v for k, v in report.items() if k != "layers"},
                    layers=tuple(_layer(row) for row in report["layers"]))


def _layer(row: Mapping[str, Any]) -> Layer:
    return _row(Layer, {k: v for k, v in row.items() if k not in ("ops", "tensors")},
                ops=tuple(row["ops"]), tensors=tuple(_row(TensorUse, t) for t in row["tensors"]))
