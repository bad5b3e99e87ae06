"""The schedule sites of the cores without hand-picked tiles: the int8
kernel choice, scalar tiles, Arm's by-lane float tiles and weight-resident
depthwise tiles. Each space holds only register-legal configs, each
non-default config changes the kernels and keeps the outputs exact (int8)
or within tolerance (float), and the defaults given explicitly change no
byte."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from support import MODELS
from support.cli import cli

KWS_INT8 = MODELS / "mlperf_kws_dscnn_int8.tflite"


@pytest.fixture(scope="module")
def convs(tmp_path_factory) -> Path:
    """A float 3x3 conv (8 -> 16), a 3x3 depthwise conv and a 1x1 conv:
    by-lane and weight-resident tiles on Arm, scalar tiles on RV64GC."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)

    def w(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=16),
             helper.make_node("Conv", ["c2", "w3", "b3"], ["y"])]
    graph = helper.make_graph(
        nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 10, 10])],
        [w("w1", 16, 8, 3, 3), w("b1", 16), w("w2", 16, 1, 3, 3), w("b2", 16),
         w("w3", 16, 16, 1, 1), w("b3", 16)])
    path = tmp_path_factory.mktemp("convs") / "convs.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def workloads(model: Path, board: str):
    import aot
    from aot.targets import get_board
    from aot.tune.search import workloads_of

    return workloads_of(aot.optimize(aot.load(model)), get_board(board).target)


def write_log(path: Path, board: str, picks: dict) -> Path:
    """A log giving each workload key its picked config (as if measured
    twice as fast as the default)."""
    import aot
    from aot.targets import get_board

    target = get_board(board).target.name
    path.write_text("".join(json.dumps(
        {"workload": key, "target": target, "config": c.as_json(), "ms": 0.5,
         "default_ms": 1.0, "board": board, "aot_version": aot.__version__}) + "\n"
        for key, c in picks.items()))
    return path


def verified(model: Path, board: str, log: Path) -> dict:
    code, out, err = cli("verify", str(model), "--board", board, "--tuning-records", str(log),
                         "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["ok"], result
    return result


def kernels_c(model: Path, board: str, out: Path, log: Path | None = None) -> str:
    from aot.api import package
    pkg = package(str(model), board=board, out_dir=out, tuning_records=log).path
    return "".join(f.read_text() for f in sorted((pkg / "src").glob("*_kernels*.c")))


@pytest.mark.fast
def test_the_int8_kernel_names_are_the_tables():
    from aot.lower.rules.quant import tflite_conv, tflite_fc
    from aot.lower.schedule.space import INT8_KERNELS

    assert set(INT8_KERNELS) == {*tflite_conv.CONV, *tflite_fc.FC, "scalar"}


def test_scalar_cores_choose_among_the_int8_kernels_bit_exact(tmp_path):
    """RV64GC (no vectors, no kernel of its own): each conv and the FC may
    take the register-tiled nests of the rv32 and Cortex-M scalar cores
    (the matrix products' with a tile of their own): an alternative of
    each stays bit-exact with tflite-micro."""
    from aot.lower.schedule.space import Config, legal_nest
    from aot.targets import get_board

    target = get_board("qemu-riscv64").target

    works = [w for w in workloads(KWS_INT8, "qemu-riscv64") if len(w.space) > 1]
    assert len(works) == 4
    picks = {}
    for w in works:
        names = [c.get("int8_kernel") for c in w.space[1:]]
        assert names and all(names) and "scalar" not in names
        # the matrix products' nests also with another (rows, channels) tile
        nests = [c for c in w.space if c.get("nest_tile")]
        for c in nests:
            assert legal_nest(*(dict(c.get("nest_tile"))[k] for k in ("rows", "channels")),
                              target)
        picks[w.key] = nests[len(nests) // 2] if nests else w.space[1]
    assert {c.get("int8_kernel") for c in picks.values()} >= {"rv32_depthwise"}
    assert sum(bool(c.get("nest_tile")) for c in picks.values()) == 2   # 1x1 convs, the FC
    log = write_log(tmp_path / "k.jsonl", "qemu-riscv64", picks)
    result = verified(KWS_INT8, "qemu-riscv64", log)
    assert all(o["max_abs"] == 0 for o in result["outputs"])
    # a kernel that does not fit the layer is refused, not silently dropped
    bad = write_log(tmp_path / "bad.jsonl", "qemu-riscv64",
                    {works[0].key: Config.of({"int8_kernel": "mve_outer"})})
    code, _, err = cli("package", str(KWS_INT8), "--board", "qemu-riscv64",
                       "--tuning-records", str(bad), "-o", str(tmp_path / "p"))
    assert code == 2 and "does not fit this layer" in err


@pytest.mark.parametrize("board, site", [("qemu-riscv64", "tile/scalar_pixels"),
                                         ("qemu-armv7", "tile/pixels"),
                                         ("qemu-armv7", "depthwise_tile"),
                                         ("qemu-armv7", "unroll")])
def test_float_tiles_of_new_cores_change_code_within_tolerance(convs, tmp_path, board, site):
    """Scalar tiles (RV64GC), ARMv7's by-lane tiles (`registers` sizes the
    pixels), its weight-resident depthwise tiles and the channel tiles'
    unrolling (0-8 tiles): a config other than the default changes the
    kernels, and the outputs stay within the reference's tolerance."""
    from aot.lower.schedule.space import legal_tile
    from aot.targets import get_board

    target = get_board(board).target
    regs = target.scalar_registers if site.startswith("tile/scalar") else \
        target.vector_registers
    picks = {}
    for w in workloads(convs, board):
        sized = [c for c in w.space[1:] if site in dict(c.sites)
                 and (site != "tile/pixels" or "registers" in dict(c.get(site)))]
        for c in sized if site != "unroll" else ():
            knobs = dict(c.get(site))
            if site == "depthwise_tile":
                assert knobs["vectors"] == 1 and 9 + 3 * knobs["max_accs"] <= regs
            else:
                assert legal_tile(site, knobs, regs)
        if sized:
            picks[w.key] = sized[0] if site == "unroll" else sized[len(sized) // 2]
    assert picks
    log = write_log(tmp_path / "f.jsonl", board, picks)
    assert kernels_c(convs, board, tmp_path / "plain") != \
        kernels_c(convs, board, tmp_path / "tuned", log)
    verified(convs, board, log)


def test_new_sites_given_their_defaults_change_no_kernel(convs):
    """The int8 kernel choice and the scalar, by-lane and weight-resident
    tiles given explicitly as what they answer by default: the same TIR
    and weights as no schedule at all."""
    import aot
    from aot.lower import lower_graph
    from aot.lower.schedule.space import Config, Schedules, applied, tile_knobs
    from aot.targets import get_board

    for model, board, site in ((KWS_INT8, "qemu-riscv64", "int8_kernel"),
                               (convs, "qemu-riscv64", "tile/scalar_pixels"),
                               (convs, "rpi3", "tile/pixels"),
                               (convs, "qemu-armv7", "depthwise_tile"),
                               (convs, "rpi3", "unroll")):
        graph = aot.optimize(aot.load(model))
        target = get_board(board).target
        seen = Schedules(record=True)
        with applied(seen):
            plain = lower_graph(graph, target)
        explicit = {}
        for key, (_, defaults, _) in seen.seen.items():
            if site in defaults:
                a = defaults[site]
                explicit[key] = Config.of({site: a.name if site == "int8_kernel" else a
                                           if site == "unroll" else tile_knobs(a)})
        assert explicit, (board, site)
        with applied(Schedules(explicit)):
            same = lower_graph(graph, target)
        assert [k.func for k in plain] == [k.func for k in same]
        assert all(np.array_equal(a.array, b.array) for k, j in zip(plain, same)
                   for a, b in zip(k.args, j.args) if a.array is not None)


@pytest.mark.fast
def test_algorithm_alternatives_are_tried_before_tiles():
    from aot.lower.schedule.space import DEFAULT, Config, first_tries

    tile = Config.of({"tile/pixels": {"vectors": 1, "mr": 2, "max_accs": 8}})
    unroll = Config.of({"unroll": 4})
    winograd = Config.of({"conv_algorithm": "winograd_4x4"})
    kernel = Config.of({"int8_kernel": "scalar_pointwise"})
    with_nest = Config.of({"int8_kernel": "scalar_pointwise",
                           "nest_tile": {"rows": 2, "channels": 2}})
    space = [DEFAULT, tile, unroll, with_nest, kernel, winograd]
    assert first_tries(space) == [winograd, kernel, unroll]


def test_a_workloads_first_candidates_are_its_algorithm_sites(convs):
    from aot.lower.schedule.space import ALGORITHM_SITES, first_tries

    works = workloads(convs, "rpi3")
    assert any(first_tries(w.space) for w in works)
    for w in works:
        alone = {c for c in w.space if len(c.sites) == 1 and c.sites[0][0] in ALGORITHM_SITES}
        assert set(first_tries(w.space)) == alone
        ranks = [ALGORITHM_SITES.index(c.sites[0][0]) for c in first_tries(w.space)]
        assert ranks == sorted(ranks)


def test_quad_sites_of_the_pis_change_code_bit_exact(tmp_path):
    """ResNet-8's 16-deep 3x3 convs on the A72: `quad_kernel` "lanes" puts
    back the quads by lane (arm_smull_dot4) in place of the sixteens
    (arm_dot16p), `unroll_taps` the other answer unrolls or rolls the
    window's columns; both stay bit-exact with tflite-micro."""
    from aot.api import package
    from aot.lower.schedule.space import Config

    model = MODELS / "mlperf_ic_resnet8_int8.tflite"
    works = workloads(model, "rpi4")
    quads = [w for w in works if any(c.get("quad_kernel") for c in w.space)]
    assert len(quads) >= 6      # the 3x3 convs but the first, and the 1x1 convs
    picks = {}
    for w in quads:
        assert Config.of({"quad_kernel": "lanes"}) in w.space
        taps = [c for c in w.space if c.get("unroll_taps") is not None]
        assert len(taps) == 1
        picks[w.key] = Config.of({"quad_kernel": "lanes"}) if len(picks) % 2 else taps[0]
    log = write_log(tmp_path / "q.jsonl", "rpi4", picks)
    plain, tuned = ("".join(f.read_text() for f in sorted((package(
        str(model), board="rpi4", out_dir=tmp_path / name,
        tuning_records=log if name == "tuned" else None).path / "src").glob("*kernels*.c")))
        for name in ("plain", "tuned"))
    assert "arm_dot16p_i32x4(" in plain
    by_lane = re.compile(r"arm_smull_dot4_i32x4\(\w+, \w+\[3\], \w+\)")
    assert not by_lane.search(plain) and by_lane.search(tuned)
    result = verified(model, "qemu-aarch64", log)
    assert all(o["max_abs"] == 0 for o in result["outputs"])
