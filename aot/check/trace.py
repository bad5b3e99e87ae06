"""`aot bench --profile --trace FILE.json`: the profiled runs as a trace for
Perfetto (ui.perfetto.dev) or chrome://tracing, in the trace-event JSON
format: one complete event ("ph": "X") per timed run and, inside it, one
per kernel call, ordered by start; times in microseconds.

The harness measures each run and each kernel call's duration on the
device's clock (templates/bench_main.c.j2), not when a call starts: a run
starts where the one before it ended, and its kernels follow each other
from its start in call order. The durations are the measured ones; the
gaps between kernels (the entry point's copies and calls) fall at the end
of each run.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

PID, TID = 1, 1


def check_trace_path(path: str | Path) -> Path:
    """--trace's file, checked before any run: a .json in an existing directory."""
    from aot.support.fsutil import check_output_file

    return check_output_file(path, "--trace", ".json", "the trace is a JSON file")


def _event(name: str, cat: str, start_ns: int, dur_ns: int, args: dict[str, Any]) -> dict:
    return {"name": name, "cat": cat, "ph": "X", "ts": start_ns / 1000, "dur": dur_ns / 1000,
            "pid": PID, "tid": TID, "args": args}


def trace_events(meta: dict, times_ns: Sequence[int],
                 profile_ns: Sequence[Sequence[int]]) -> list[dict]:
    """A run event and its kernels' events for each profiled run (the
    harness profiles the first of the timed runs: profile_ns[i] is run i;
    timing.profile_stats has checked that a row holds every kernel)."""
    kernels = meta["kernels"]
    events, start = [], 0
    for run, (total, row) in enumerate(zip(times_ns, profile_ns)):
        events.append(_event(f"run {run}", "run", start, int(total), {"run": run}))
        at = start
        for k, dur in zip(kernels, row, strict=True):
            events.append(_event(k["name"], "kernel", at, int(dur), {
                "run": run, "step": k["step"], "symbol": k.get("symbol"),
                "ops": k.get("ops"), "macs": k.get("macs")}))
            at += int(dur)
        start += int(total)
    return events


def write_trace(path: Path, meta: dict, board: str, times_ns: Sequence[int],
                profile_ns: Sequence[Sequence[int]]) -> None:
    """The trace file, whole or not at all."""
    from aot.support.fsutil import write_file_atomically

    doc = {"traceEvents": trace_events(meta, times_ns, profile_ns),
           "displayTimeUnit": "ns",
           "otherData": {"model": meta.get("model"), "package": meta.get("name"),
                         "board": board, "codegen": meta.get("codegen"),
                         "clock": "the device's aot_platform_timer_ns"}}
    write_file_atomically(Path(path), (json.dumps(doc, sort_keys=True) + "\n").encode())
