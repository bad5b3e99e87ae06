"""The planned arena of the MLPerf Tiny int8 models and person_detect is no
larger than tflite-micro's, and how far it is from the lower bound (the most
bytes live at one step, which no placement can beat) is printed at the end
of the run as a table.

tflite-micro's figures are its arena for the same models (MicroInterpreter
arena_used_bytes, reference kernels, x86-64): they hold the input and output
tensors too, so aot's plan is checked both ways: I/O in the caller's buffers
(the default) and I/O planned in the arena (--io-in-arena).

The plan is what `aot package` writes to metadata.json (package.generate is
its every step but the compiler); it is computed here without compiling.
"""
from __future__ import annotations

import aot
from aot.packaging.build import generate
from aot.targets import get_board
from support import MODELS

TFLM_ARENA = {
    "mlperf_kws_dscnn_int8": 24_272,
    "mlperf_vww_mbv1_int8": 103_680,
    "mlperf_ic_resnet8_int8": 55_984,
    "mlperf_ad_fcae_int8": 3_984,
    "tflm_person_detect_int8": 85_264,
}


def plan(model: str):
    graph = aot.optimize(aot.load(MODELS / f"{model}.tflite"))
    gen = generate(graph, get_board("host"), "c", "model", io_in_arena=False)
    return gen.mem, gen.other          # I/O outside the arena, then inside


def table(rows: list[tuple]) -> str:
    head = ("model", "arena", "lower bound", "gap", "arena (io in)", "tflite-micro")
    cells = [head, *[(m, str(a), str(lb), f"{a - lb} ({(a - lb) / max(lb, 1):.1%})",
                      str(io), str(t)) for m, a, lb, io, t in rows]]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = ["  ".join(c[i].rjust(w) if i else c[i].ljust(w) for i, w in enumerate(widths))
             for c in cells]
    return "\n".join(["arena bytes vs tflite-micro (int8 models, host board)", *lines])


def test_arena_is_at_most_tflite_micros(record_property):
    rows = []
    for model, tflm in TFLM_ARENA.items():
        outside, inside = plan(model)
        assert outside.lower_bound_bytes <= outside.arena_bytes
        assert inside.lower_bound_bytes <= inside.arena_bytes
        rows.append((model, outside.arena_bytes, outside.lower_bound_bytes,
                     inside.arena_bytes, tflm))
    record_property("summary", table(rows))
    over = [(m, a, io, t) for m, a, _, io, t in rows if a > t or io > t]
    assert not over, f"arena larger than tflite-micro's: {over}"


def test_the_package_has_the_planned_arena(tmp_path):
    """What the table reports is what a package declares and uses."""
    from aot.api import package

    model = "mlperf_ad_fcae_int8"
    outside, _ = plan(model)
    info = package(MODELS / f"{model}.tflite", board="host", out_dir=tmp_path / "pkg")
    assert (info.arena_bytes, info.arena_lower_bound_bytes) == \
        (outside.arena_bytes, outside.lower_bound_bytes)
    header = (info.path / "include" / f"{info.name}.h").read_text()
    assert f"#define {info.name.upper()}_ARENA_SIZE {outside.arena_bytes}\n" in header
