"""`aot bench --profile` flags a kernel whose MACs/us fall below a quarter
of the best kernel of its family (element type, dense or shallow) in the
same profile: a slow path a user should see. Crafted profiles, so the
flag's rule is checked without timing anything."""
from __future__ import annotations

from aot.check.timing import CLIFF, DEEP, flag_cliffs, profile_stats
from aot.cli import _print_profile
from aot.results import BenchResult


def kernel(step: int, name: str, macs: int, dtype: str, depth: int, **kind) -> dict:
    return {"step": step, "name": name, "macs": macs, "dtype": dtype, "depth": depth, **kind}


META = {"kernels": [
    kernel(0, "conv_fast", 10_000_000, "float32", 2304),
    kernel(1, "conv_kx1", 10_000_000, "float32", 1280),     # 5x slower per MAC: a cliff
    kernel(2, "conv_int8", 10_000_000, "int8", 576),        # another family: its own best
    kernel(3, "dw_fast", 1_000_000, "float32", 9, depthwise=True),
    kernel(4, "dw_slow", 1_000_000, "float32", 9, depthwise=True),  # 3x dw_fast's time: no cliff
    kernel(5, "fc_tiny", 5_000, "float32", 500),            # too small to judge
    {"step": 6, "name": "softmax", "macs": 0, "dtype": "float32"},
    {"step": 7, "name": "old", "macs": 2_000_000},         # a package without the family
    kernel(8, "first", 1_000_000, "float32", 27),           # shallow: dw_* are not measured by it
]}
# ns per kernel: conv_fast 10 M MACs in 100 us, conv_kx1 in 500 us; first
# 10x dw_fast's rate
RUN = [100_000, 500_000, 500_000, 10_000, 30_000, 20_000, 1_000, 9_000_000, 1_000]


def test_a_kernel_below_a_quarter_of_its_familys_best_is_flagged():
    stats = profile_stats(META, [RUN, RUN, RUN])
    assert [s.name for s in stats if s.cliff] == ["conv_kx1"]
    kx1 = stats[1]
    assert kx1.macs_per_us < CLIFF * stats[0].macs_per_us
    assert stats[2].macs_per_us < CLIFF * stats[0].macs_per_us     # int8 is compared with int8
    assert stats[8].depth < DEEP <= stats[0].depth
    # at the boundary: a quarter of the best is not below it
    at_quarter = profile_stats(META, [[100_000, 400_000, *RUN[2:]]])
    assert at_quarter[1].macs_per_us == CLIFF * at_quarter[0].macs_per_us
    assert not any(s.cliff for s in at_quarter)


def test_flag_is_in_json_and_the_table(capsys):
    stats = profile_stats(META, [RUN])
    rows = [s.as_json() for s in stats]
    assert [r["cliff"] for r in rows] == [False, True] + [False] * 7
    assert rows[1]["family"] == "float32" and rows[3]["family"] == "float32 depthwise"
    assert rows[8]["family"] == f"float32, depth < {DEEP}"
    assert rows[5]["family"] is None and rows[7]["family"] is None
    back = BenchResult.from_json({"median_ms": 1.0, "mean_ms": 1.0, "min_ms": 1.0,
                                  "max_ms": 1.0, "std_ms": 0.0, "repeat": 1, "warmup": 0,
                                  "board": "host", "codegen": "c", "model": "m",
                                  "emulated": False, "threads": 1, "profile": rows})
    assert back.profile == tuple(stats)
    _print_profile(rows)
    text = capsys.readouterr().out
    assert text.count("<< cliff") == 1
    assert "cliff: step 1 conv_kx1 runs at 20,000 MACs/us, below 25% of the best kernel of " \
           "its family (float32)" in " ".join(text.split())


def test_no_cliff_without_a_family():
    assert flag_cliffs([]) == []
    stats = profile_stats({"kernels": META["kernels"][6:8]}, [RUN[6:8]])
    assert not any(s.cliff for s in stats)
