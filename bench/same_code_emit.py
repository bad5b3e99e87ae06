"""What one source tree's aot emits, for bench/same_code.py to compare.

    python bench/same_code_emit.py TREE OUT --boards host,rpi4 --threads 1,2 --models DIR
        [--zoo] [--llvm] [--package] [--tables]

Runs in a process of its own per source tree: TREE's aot (and its tests/,
where the conv and FC zoo lives today) comes first on sys.path, so the same
script replays a base revision and the working tree. Writes each result as a
file under OUT named by its key and prints `{key: status}` as the last line
of stdout: "ok" where the file holds the result, else the error the tree
raised (compared like any result: the same failure in both trees is no
change).

Keys: `c/<board>/t<threads>/<case>.c` (the kernels' C), `llvm/.../<case>.ll`
(the LLVM IR the llvm codegen builds the same kernels from),
`package-<codegen>/<board>/t<threads>/<model>/<file>` (every file aot.package
writes; metadata.json without its "versions"), `tables/<table>.txt`.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator

# Where each name the replay uses lives, "module:attribute", the layout of
# ../shared/LAYOUT.md first and today's after (the zoo: tests/support/zoo.py,
# before it the test modules test_lower_int8 and test_dot4): a pure move of
# modules then replays against the base and the moved tree alike. A name
# found nowhere is an error naming every place tried. Keep every import of
# aot below to `need(name)` and this table.
# Names only a tree from before a follow-up has (read when a base lacks
# what replaced them).
BASE_ONLY = ("SPATIAL", "WEIGHTED", "NOT_BROADCAST", "PER_AXIS", "AXIS_OPS", "REDUCES")
WHERE: dict[str, tuple[str, ...]] = {
    "load": ("aot:load",),
    "optimize": ("aot:optimize",),
    # api.package: aot.package without the lazy lookup of aot/__init__.py
    "package": ("aot.api:package",),
    "get_board": ("aot.targets:get_board",),
    "check_threads": ("aot.packaging.build:check_threads", "aot.packaging:check_threads"),
    "lower_graph": ("aot.lower:lower_graph",),
    "emit_c": ("aot.codegen:emit_c", "aot.codegen.c:emit_c"),
    "emit_llvm_ir": ("aot.codegen.llvm:emit_llvm_ir", "aot.codegen:emit_llvm_ir"),
    "single_op_graph": ("aot.testing.kernels:single_op_graph",
                        "aot.lower.testing:single_op_graph"),
    "CONVS": ("aot.testing.zoo:CONVS", "support.zoo:CONVS",
               "test_lower_int8:CONVS"),
    "DEPTHWISE": ("aot.testing.zoo:DEPTHWISE", "support.zoo:DEPTHWISE",
                   "test_lower_int8:DEPTHWISE"),
    "conv_model": ("aot.testing.zoo:conv_model", "support.zoo:conv_model",
                    "test_lower_int8:conv_model"),
    "fc_model": ("aot.testing.zoo:fc_model", "support.zoo:fc_model",
                  "test_lower_int8:fc_model"),
    "QUAD_CONVS": ("aot.testing.zoo:QUAD_CONVS", "support.zoo:QUAD_CONVS",
                    "test_dot4:QUAD_CONVS"),
    "RING_FIRST_LAYERS": ("aot.testing.zoo:RING_FIRST_LAYERS", "support.zoo:RING_FIRST_LAYERS",
                           "test_dot4:RING_FIRST_LAYERS"),
    # the tables (bench/same_code_tables.py)
    "OPS": ("aot.ops.registry:OPS",),
    # the layout facts before they were the op table's
    **{name: (f"aot.passes.layout:{name}",) for name in BASE_ONLY},
    "INSTRUCTIONS": ("aot.lower.tir_passes.legalize:INSTRUCTIONS",
                     "aot.lower.legalize:INSTRUCTIONS"),
    "GRAPH_PIPELINE": ("aot.passes.pipeline:PIPELINE",),
    "TIR_PIPELINE": ("aot.lower.tir_passes:PIPELINE",),
    "tunable": ("aot.lower.schedule.space:tunable", "aot.lower.space:tunable"),
    "SITES": ("aot.lower.schedule.space:SITES", "aot.lower.space:SITES"),
    "NAMED": ("aot.lower.schedule.space:NAMED", "aot.lower.space:NAMED"),
    "TILE_KNOBS": ("aot.lower.schedule.space:TILE_KNOBS", "aot.lower.space:TILE_KNOBS"),
}

# metadata.json keys that name the tree rather than the package
VERSION_KEYS = ("versions",)


def _absent(error: ModuleNotFoundError, module: str) -> bool:
    """Whether `module` itself (or a package above it) does not exist, as
    opposed to a module that exists failing on an import of its own."""
    return error.name is not None and (module + ".").startswith(error.name + ".")


@lru_cache(maxsize=None)
def need(name: str) -> Any:
    """`name` from the first place in WHERE this tree has it."""
    tried = []
    for place in WHERE[name]:
        module, attr = place.split(":")
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if not _absent(e, module):
                raise
            tried.append(f"{place} (no module {e.name})")
            continue
        if hasattr(found, attr):
            return getattr(found, attr)
        tried.append(f"{place} (no {attr})")
    raise SystemExit(f"same_code: this tree has no {name}; tried {', '.join(tried)} "
                     "(add its new place to WHERE in bench/same_code_emit.py)")


def use_tree(root: Path) -> None:
    """Put `root`'s aot and every tests/ folder first on sys.path, and make
    sure that is the aot imported (an installed one would prove nothing)."""
    tests = root / "tests"
    folders = [tests, *sorted(p.parent for p in tests.glob("*/**/*.py"))] if tests.is_dir() else []
    sys.path[:0] = [str(root), *dict.fromkeys(map(str, folders))]
    import aot
    if Path(aot.__file__).resolve().parent != (root / "aot").resolve():
        raise SystemExit(f"same_code: imported aot from {aot.__file__}, not {root}/aot")


def zoo() -> Iterator[tuple[str, Callable]]:
    """Convolutions, pools and fully connected layers: float and int8, every
    padding, stride, dilation, grouping and odd depth the kernels branch on."""
    import numpy as np
    single_op_graph = need("single_op_graph")
    rng = np.random.default_rng(0)

    def conv(x, w, **attrs):
        return lambda: single_op_graph("Conv", [(x, "float32"), rng.standard_normal(w).astype(
            np.float32), rng.standard_normal(w[0]).astype(np.float32)], attrs)

    def pool(op, x, **attrs):
        return lambda: single_op_graph(op, [(x, "float32")], attrs)
    float_zoo = {
        "conv3x3_same": conv([1, 8, 9, 11], [16, 8, 3, 3], pads=[1, 1, 1, 1]),
        "conv3x3_s2_asym": conv([1, 3, 17, 15], [8, 3, 3, 3], pads=[0, 1, 1, 0], strides=[2, 2]),
        "conv_dil2": conv([1, 6, 12, 12], [12, 6, 3, 3], pads=[2, 2, 2, 2], dilations=[2, 2]),
        "conv_grouped": conv([1, 8, 10, 10], [8, 4, 3, 3], pads=[1, 1, 1, 1], group=2),
        "depthwise5x5": conv([1, 24, 13, 13], [24, 1, 5, 5], pads=[2, 2, 2, 2], group=24),
        "depthwise_s2": conv([1, 20, 14, 9], [20, 1, 3, 3], pads=[1, 1, 1, 1], strides=[2, 2],
                             group=20),
        "pointwise": conv([1, 16, 7, 7], [40, 16, 1, 1]),
        "conv1d": conv([1, 8, 30], [12, 8, 5], pads=[2, 2]),
        "conv3d": conv([1, 4, 6, 7, 8], [8, 4, 3, 3, 3], pads=[1, 1, 1, 1, 1, 1]),
        "conv_big_kernel": conv([1, 2, 20, 20], [4, 2, 9, 9], pads=[4, 4, 4, 4]),
        "maxpool": pool("MaxPool", [1, 16, 11, 11], kernel_shape=[3, 3], strides=[2, 2],
                        pads=[1, 1, 1, 1]),
        "avgpool": pool("AveragePool", [1, 12, 9, 9], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    }
    for name, make in float_zoo.items():
        yield "f32_" + name, make
    conv_model, fc_model = need("conv_model"), need("fc_model")
    for k, (xs, ws, os_, opts, pc) in enumerate(need("CONVS")):
        yield f"i8_conv{k}", lambda a=(xs, ws, os_, opts, pc), k=k: conv_model(
            "CONV_2D", *a[:4], per_channel=a[4], seed=k)
    for k, (xs, ws, os_, opts, pc) in enumerate(need("DEPTHWISE")):
        yield f"i8_depthwise{k}", lambda a=(xs, ws, os_, opts, pc), k=k: conv_model(
            "DEPTHWISE_CONV_2D", *a[:4], per_channel=a[4], seed=k)
    for k, (xs, ws, os_, opts, zp) in enumerate(need("QUAD_CONVS") + need("RING_FIRST_LAYERS")):
        yield f"i8_quads{k}", lambda a=(xs, ws, os_, opts, zp), k=k: conv_model(
            "CONV_2D", *a[:4], zp_in=a[4], seed=k)
    yield "i8_fc0", lambda: fc_model(True, False, x_shape=(3, 36), units=24, zp_in=-128)
    yield "i8_fc1", lambda: fc_model(False, True, x_shape=(2, 2, 19), units=16, zp_in=100)
    yield "i8_fc2", lambda: fc_model(True, False, x_shape=(1, 64), units=6, zp_in=0)


def model_files(models: Path) -> list[Path]:
    return sorted([*models.glob("*.tflite"), *models.glob("*.onnx")])


def failure(e: Exception) -> str:
    return f"error: {type(e).__name__}: {str(e)[:100]}"


class Results:
    """The results written so far: files under `out`, statuses by key."""

    def __init__(self, out: Path):
        self.out, self.status = out, {}

    def put(self, key: str, data: bytes | str) -> None:
        path = self.out / key
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)
        self.status[key] = "ok"

    def fail(self, key: str, e: Exception) -> None:
        self.status[key] = failure(e)


def kernels(res: Results, cases, boards, threads, llvm: bool) -> None:
    """Each case's kernels as C (prefix "m") and, with llvm, as LLVM IR
    before optimization, per board and thread count a package may have
    (bare-metal boards have no thread pools)."""
    lower_graph, emit_c, get_board = need("lower_graph"), need("emit_c"), need("get_board")
    refused = {}
    for board in boards:
        for th in threads:
            try:
                need("check_threads")(get_board(board), th)
            except Exception as e:
                refused[board, th] = e
    for name, make in cases:
        try:
            graph = make()
        except Exception as e:
            res.fail(f"c/{name}", e)
            continue
        for board in boards:
            target = get_board(board).target
            for th in threads:
                key = f"{board}/t{th}/{name}"
                if (board, th) in refused:
                    res.fail(f"c/{key}.c", refused[board, th])
                    continue
                try:
                    funcs = [k.func for k in lower_graph(graph, target, threads=th)]
                    res.put(f"c/{key}.c", PART.join(emit_c(funcs, "m").parts))
                except Exception as e:
                    res.fail(f"c/{key}.c", e)
                    continue
                if llvm:
                    try:
                        res.put(f"llvm/{key}.ll", need("emit_llvm_ir")(funcs, "m", target))
                    except Exception as e:
                        res.fail(f"llvm/{key}.ll", e)


# Between a package's C files (each defines its own helpers): compiled apart.
PART = "\n/* @@ next source file @@ */\n"


def without_versions(meta: bytes) -> str:
    data = json.loads(meta)
    for key in VERSION_KEYS:
        data.pop(key, None)
    return json.dumps(data, sort_keys=True, indent=2) + "\n"


def packages(res: Results, models: list[Path], boards, threads, codegens) -> None:
    """Every file of aot.package(model, board, codegen, threads=...)."""
    package = need("package")
    for codegen in codegens:
        for board in boards:
            for th in threads:
                for model in models:
                    key = f"package-{codegen}/{board}/t{th}/{model.stem}"
                    with tempfile.TemporaryDirectory(prefix="aot-same-code-pkg-") as tmp:
                        pkg = Path(tmp) / model.stem
                        try:
                            package(str(model), board, codegen=codegen, out_dir=pkg, threads=th)
                        except Exception as e:
                            res.fail(key, e)
                            continue
                        for f in sorted(p for p in pkg.rglob("*") if p.is_file()):
                            rel = f.relative_to(pkg).as_posix()
                            data = f.read_bytes()
                            res.put(f"{key}/{rel}",
                                    without_versions(data) if rel == "metadata.json" else data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tree", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--boards", required=True)
    ap.add_argument("--threads", required=True)
    ap.add_argument("--models", type=Path, required=True)
    for flag in ("--zoo", "--llvm", "--package", "--tables"):
        ap.add_argument(flag, action="store_true")
    args = ap.parse_args()
    boards, threads = args.boards.split(","), [int(t) for t in args.threads.split(",")]
    use_tree(args.tree.resolve())
    res = Results(args.out)
    if args.tables:
        from same_code_tables import tables
        for name, lines in tables(need).items():
            res.put(f"tables/{name}.txt", "".join(line + "\n" for line in lines))
    models = model_files(args.models)
    load, optimize = need("load"), need("optimize")
    # a package holds its models' kernels: lowering them again here is redundant
    cases = [] if args.package else [
        (m.name, lambda m=m: optimize(load(str(m)))) for m in models]
    kernels(res, [*cases, *(zoo() if args.zoo else ())], boards, threads, args.llvm)
    if args.package:
        packages(res, models, boards, threads, ("c", "llvm") if args.llvm else ("c",))
    print(json.dumps(res.status))


if __name__ == "__main__":
    main()
