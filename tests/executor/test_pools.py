"""Memory pools (`aot package --pools`, aot/executor/pools.py): the arena
split over a board's RAM banks, the hottest tensors in the fastest.

The wide model's arena (two 400 KB activations live together) does not
fit the 384 KiB of mps3-an547's DTCM that the harness leaves free: with pools
the big tensors spill to the code SRAM and the small hot ones stay in the
DTCM, the package runs under QEMU and matches onnxruntime, and the ELF puts
every pool in its bank. A host board with two small banks checks the C API
(<name>_run_with_pools on the caller's pools, _run_with_arena) natively.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from elftools.elf.elffile import ELFFile
from onnx import TensorProto, helper, numpy_helper

from aot.api import package, verify
from aot.cli import main as cli_main
from aot.errors import AotError
from aot.targets import boards, get_board

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def wide_model(path: Path, repeats: int = 1600) -> Path:
    """x [1, 64] -> hot = x @ w1 (read 16 times, kept to the end); wide =
    tile(x) and soft = softmax(wide), 4 * 64 * repeats bytes each and live
    together; y = hot @ w2 + max(wide) + max(soft)."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.standard_normal((64, 64)) / 8).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((64, 16)) / 8).astype(np.float32), "w2")
    reps = numpy_helper.from_array(np.array([1, repeats], np.int64), "reps")
    node = helper.make_node
    nodes = [node("MatMul", ["x", "w1"], ["hot"]),
             node("Tile", ["x", "reps"], ["wide"]),
             node("Softmax", ["wide"], ["soft"], axis=-1),
             node("ReduceMax", ["wide"], ["wmax"], keepdims=1, axes=[1]),
             node("ReduceMax", ["soft"], ["smax"], keepdims=1, axes=[1]),
             node("Add", ["wmax", "smax"], ["both"]),
             node("MatMul", ["hot", "w2"], ["proj"]),
             node("Add", ["proj", "both"], ["y"])]
    graph = helper.make_graph(nodes, "pools",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
                              [w1, w2, reps])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def check_pools(meta: dict) -> dict[str, dict]:
    """Every buffer inside its pool, the pools at most the one arena plus an
    alignment per extra pool, and the pools' offsets end to end. Returns
    the pools by name."""
    mp = meta["memory_pools"]
    pools = {p["name"]: p for p in mp["pools"]}
    align = meta["plan"]["align"]
    for row in meta["plan"]["buffers"]:
        pool = pools[row["pool"]]
        assert 0 <= row["pool_offset"] and row["pool_offset"] + row["size"] <= pool["bytes"], row
        assert row["offset"] == pool["offset"] + row["pool_offset"], row
        assert pool["bytes"] <= pool["region"]["free_bytes"]
    assert mp["total_bytes"] == sum(p["bytes"] for p in pools.values())
    assert mp["total_bytes"] <= mp["single_arena_bytes"] + align * (len(pools) - 1)
    assert meta["arena_bytes"] >= mp["total_bytes"]
    return pools


# ------------------------------------------------------------------ boards

def test_the_boards_list_their_real_banks():
    an547 = {r.name: r for r in get_board("mps3-an547").regions}
    assert (an547["dtcm"].origin, an547["dtcm"].size) == (0x20000000, 512 << 10)
    assert (an547["itcm"].kind, an547["itcm"].weights, an547["itcm"].arena) == ("flash", True,
                                                                                 False)
    assert an547["sram"].origin == 0x01000000 and an547["isram1"].origin == 0x21200000
    assert an547["dtcm"].cost < an547["sram"].cost < an547["ddr"].cost
    an386 = {r.name: r for r in get_board("mps2-an386").regions}
    assert (an386["blockram"].origin, an386["blockram"].size) == (0x01000000, 16 << 10)
    assert an386["ssram23"].free_bytes == (4 << 20) - an386["ssram23"].reserved


@pytest.mark.parametrize("region, message", [
    ('kind = "rom"', "kind must be one of ram, flash, got 'rom'"),
    ('kind = "flash"', "arena: region 'fast' is flash, not ram"),
    ('name = "Fast"', "name must be a lower-case C identifier, got 'Fast'"),
    ("cost = 0", "cost must be above 0, got 0"),
    ("cost = true", r"regions\[0\].cost must be a number, got a boolean"),
    ("speed = 3", r"unknown key\(s\) regions\[0\].speed"),
])
def test_a_bad_region_is_named(tmp_path, monkeypatch, region, message):
    monkeypatch.setenv("AOT_BOARDS_DIR", str(tmp_path))
    key = region.split(" = ")[0]
    fields = {"name": '"fast"', "origin": "0", "size": "1024", "kind": '"ram"', "cost": "1",
              "arena": "true", "weights": "false"}
    fields[key] = region.split(" = ")[1]
    (tmp_path / "b.toml").write_text(
        'name = "b"\ntarget = "x86_64-linux"\ntransport = "local"\nflash_bytes = 1\n'
        "ram_bytes = 1\n\n[[regions]]\n" + "".join(f"{k} = {v}\n" for k, v in fields.items()))
    with pytest.raises(AotError, match=message):
        boards()
    (tmp_path / "b.toml").write_text(
        'name = "b"\ntarget = "x86_64-linux"\ntransport = "local"\nflash_bytes = 1\n'
        'ram_bytes = 1\n\n[[regions]]\nname = "fast"\n')
    with pytest.raises(AotError, match="regions\\[0\\] lacks arena, cost, kind, origin, size"):
        boards()


def test_pools_need_a_board_with_banks(tmp_path):
    with pytest.raises(AotError, match="--pools: board 'host' lists no memory regions"):
        package(wide_model(tmp_path / "m.onnx", 4), board="host", out_dir=tmp_path / "p",
                pools=True)
    with pytest.raises(AotError, match="--pools with --io-in-arena is not supported yet"):
        package(tmp_path / "m.onnx", board="mps3-an547", out_dir=tmp_path / "p", pools=True,
                io_in_arena=True)


# ------------------------------------------------------------ host: the C API

HOST_BANKS = """name = "host-banks"
target = "x86_64-linux"
transport = "local"
flash_bytes = 1073741824
ram_bytes = 1073741824

[[regions]]
name = "flash"
origin = 0
size = 1073741824
kind = "flash"
cost = 1
arena = false
weights = true

[[regions]]
name = "slow"
origin = 0
size = 1048576
kind = "ram"
cost = 4
arena = true
weights = false

[[regions]]
name = "fast"
origin = 0
size = 512
kind = "ram"
cost = 1
arena = true
weights = false
"""

CALLER = r"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pools.h"

int main(void) {
    float x[64], y0[16], y1[16], y2[16];
    struct pools_inputs in;
    struct pools_outputs out;
    void* fast = aligned_alloc(POOLS_ARENA_ALIGN, POOLS_POOL_FAST_BYTES);
    void* slow = aligned_alloc(POOLS_ARENA_ALIGN, POOLS_POOL_SLOW_BYTES);
    void* one = aligned_alloc(POOLS_ARENA_ALIGN, POOLS_ARENA_SIZE);
    int i;
    for (i = 0; i < 64; i++) x[i] = (float)(i % 7) - 3.0f;
    in.x = x;
    out.y = y0;
    if (pools_run(&in, &out) != AOT_OK) return 1;
    out.y = y1;
    if (pools_run_with_pools(&in, &out, fast, slow) != AOT_OK) return 2;
    out.y = y2;
    if (pools_run_with_arena(&in, &out, one) != AOT_OK) return 3;
    if (pools_run_with_pools(&in, &out, fast, (char*)slow + 4) != AOT_ERR_MISALIGNED) return 4;
    if (pools_run_with_pools(&in, &out, NULL, slow) != AOT_ERR_NULL_ARGUMENT) return 5;
    if (memcmp(y0, y1, sizeof y0) != 0 || memcmp(y0, y2, sizeof y0) != 0) return 6;
    for (i = 0; i < 16; i++) printf("%.9g\n", y0[i]);
    return 0;
}
"""


def test_run_with_pools_on_the_callers_banks(tmp_path, monkeypatch):
    """The cheapest bank first: `fast` (512 B) takes the hot small tensors,
    the rest go to `slow`; the three entry points compute the same."""
    monkeypatch.setenv("AOT_BOARDS_DIR", str(tmp_path))
    (tmp_path / "host-banks.toml").write_text(HOST_BANKS)
    model = wide_model(tmp_path / "pools.onnx", repeats=64)
    info = package(model, board="host-banks", out_dir=tmp_path / "pkg", pools=True)
    pools = check_pools(info.metadata)
    assert list(pools) == ["fast", "slow"]
    rows = {r["name"]: r for r in info.metadata["plan"]["buffers"]}
    assert rows["hot"]["pool"] == rows["both"]["pool"] == "fast"
    assert rows["wide"]["pool"] == rows["soft"]["pool"] == "slow"
    header = (tmp_path / "pkg" / "include" / "pools.h").read_text()
    assert f"#define POOLS_POOL_FAST_BYTES {pools['fast']['bytes']}\n" in header
    assert "int pools_run_with_pools(" in header
    snippet = (tmp_path / "pkg" / "pools_sections.ld").read_text()
    assert "} > AOT_POOL_FAST_REGION" in snippet and ".aot_arena_slow (NOLOAD)" in snippet
    target = get_board("host").target
    (tmp_path / "main.c").write_text(CALLER)
    exe = tmp_path / "caller"
    subprocess.run([target.cc, "-O1", "-I", str(tmp_path / "pkg" / "include"),
                    "-I", str(tmp_path / "pkg" / "runtime_c"), str(tmp_path / "main.c"),
                    str(tmp_path / "pkg" / "lib" / "libpools.a"), "-lm", "-o", str(exe)],
                   check=True)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (r.returncode, r.stderr)
    x = (np.arange(64) % 7 - 3).astype(np.float32)[None]
    import onnxruntime as ort
    (want,) = ort.InferenceSession(str(model)).run(None, {"x": x})
    got = np.array([float(v) for v in r.stdout.split()], np.float32)
    np.testing.assert_allclose(got, want[0], rtol=1e-5, atol=1e-5)


# ------------------------------------------------- a too-big arena on mps3-an547 under QEMU

def test_an_arena_too_big_for_the_dtcm_runs_split_over_two_banks(tmp_path):
    model = wide_model(tmp_path / "pools.onnx")
    with pytest.raises(AotError, match="do not fit the RAM of board 'mps3-an547'"):
        package(model, board="mps3-an547", out_dir=tmp_path / "single")
    assert cli_main(["package", str(model), "--board", "mps3-an547", "--pools",
                     "-o", str(tmp_path / "pkg")]) == 0
    meta = json.loads((tmp_path / "pkg" / "metadata.json").read_text())
    pools = check_pools(meta)
    assert list(pools) == ["dtcm", "sram"]
    assert meta["memory_pools"]["weights_region"] == "itcm"
    rows = {r["name"]: r for r in meta["plan"]["buffers"]}
    # the hot tensors in the fast bank, the big cold ones spilled
    assert {n for n, r in rows.items() if r["pool"] == "dtcm"} == {"hot", "smax", "both"}
    assert min(rows[n]["heat"] for n in ("hot", "both")) > max(rows[n]["heat"]
                                                               for n in ("wide", "soft"))
    assert meta["memory_pools"]["single_arena_bytes"] > get_board("mps3-an547").ram_bytes
    # the pools are RAM, not flash (aot inspect's footprint), however the object stores them
    assert meta["footprint"]["data"] == 0 and meta["footprint"]["bss"] == meta["arena_bytes"]
    banks = {r.name: r for r in get_board("mps3-an547").regions}
    with open(tmp_path / "pkg" / "bench" / "bench", "rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        for name, pool in pools.items():
            (sym,) = symtab.get_symbol_by_name(f"pools_pool_{name}")
            bank = banks[name]
            assert sym["st_size"] == pool["bytes"]
            assert bank.origin <= sym["st_value"]
            assert sym["st_value"] + sym["st_size"] <= bank.origin + bank.size
    out = verify(tmp_path / "pkg", board="mps3-an547", source=model)
    assert out["ok"] and out["reference"] == "onnxruntime", out
    assert out["outputs"][0]["max_abs"] <= 1e-5, out


def test_analyze_reports_and_plots_each_pool(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    model = wide_model(tmp_path / "pools.onnx")
    plot = tmp_path / "pools.png"
    assert cli_main(["analyze", str(model), "--board", "mps3-an547", "--pools", "--json",
                     "--plot", str(plot)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["memory_pools"] == {"dtcm": 288, "sram": 819200}
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
