#!/usr/bin/env python3
"""Does a change to the lowering change the generated code? Compares the
kernels' C that a base revision and the working tree emit, for the shared
models and a zoo of convolutions, pools and fully connected layers (float
and int8, every padding, stride, dilation, grouping and odd depth the
kernels branch on), on each board and thread count; where the C text
differs, compiles both with the board's compiler and flags and compares the
disassembly function by function.

    bench/same_code.py BASE_REV [--boards host,rpi4] [--threads 1,2] [--no-zoo]

Identical C, or identical object code, proves a refactor costs nothing on
that board; otherwise it prints each changed function's static instruction
count before -> after, and the change needs the dynamic counts of
bench/compare.py --count-instructions and timings. Exit status 1 when any
object code differs.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOARDS = ("host", "host-avx512", "rpi4", "mps2-an386")
# Between a package's C files (each defines its own helpers): compiled apart.
PART = "\n/* @@ next source file @@ */\n"

# Runs in a child process per source tree: that tree's aot emits the C.
EMIT = r'''
import json, sys, glob
from pathlib import Path
root, out, boards, threads, zoo = sys.argv[1], Path(sys.argv[2]), sys.argv[3].split(","), \
    [int(t) for t in sys.argv[4].split(",")], sys.argv[5] == "1"
sys.path[:0] = [root, root + "/tests"]
import numpy as np
import aot
from aot.codegen import emit_c
from aot.lower import lower_graph
from aot.targets import get_board
PART = "\n/* @@ next source file @@ */\n"

def graphs():
    for m in sorted(glob.glob(sys.argv[6] + "/*.tflite") + glob.glob(sys.argv[6] + "/*.onnx")):
        yield Path(m).name, lambda m=m: aot.optimize(aot.load(m))
    if not zoo:
        return
    from aot.lower.testing import single_op_graph
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
    from test_lower_int8 import CONVS, DEPTHWISE, conv_model, fc_model
    from test_dot4 import QUAD_CONVS, RING_FIRST_LAYERS
    for k, (xs, ws, os_, opts, pc) in enumerate(CONVS):
        yield f"i8_conv{k}", lambda a=(xs, ws, os_, opts, pc): conv_model(
            "CONV_2D", *a[:4], per_channel=a[4], seed=k)
    for k, (xs, ws, os_, opts, pc) in enumerate(DEPTHWISE):
        yield f"i8_depthwise{k}", lambda a=(xs, ws, os_, opts, pc): conv_model(
            "DEPTHWISE_CONV_2D", *a[:4], per_channel=a[4], seed=k)
    for k, (xs, ws, os_, opts, zp) in enumerate(QUAD_CONVS + RING_FIRST_LAYERS):
        yield f"i8_quads{k}", lambda a=(xs, ws, os_, opts, zp): conv_model(
            "CONV_2D", *a[:4], zp_in=a[4], seed=k)
    yield "i8_fc0", lambda: fc_model(True, False, x_shape=(3, 36), units=24, zp_in=-128)
    yield "i8_fc1", lambda: fc_model(False, True, x_shape=(2, 2, 19), units=16, zp_in=100)
    yield "i8_fc2", lambda: fc_model(True, False, x_shape=(1, 64), units=6, zp_in=0)

out.mkdir(parents=True, exist_ok=True)
made = {}
for name, make in graphs():
    try:
        g = make()
    except Exception as e:
        made[name] = "cannot build: " + str(e)[:100]
        continue
    for board in boards:
        target = get_board(board).target
        for th in threads:
            key = f"{board}.{name}.t{th}"
            try:
                src = PART.join(emit_c([k.func for k in lower_graph(g, target, threads=th)],
                                       "m").parts)
            except Exception as e:
                made[key] = f"error: {type(e).__name__}: {str(e)[:100]}"
                continue
            (out / f"{key}.c").write_text(src)
            made[key] = "ok"
print(json.dumps(made))
'''


def emit(tree: Path, out: Path, boards: list[str], threads: list[int], zoo: bool) -> dict:
    shared = Path(os.environ.get("AOT_SHARED", ROOT.parent / "shared"))
    r = subprocess.run([sys.executable, "-c", EMIT, str(tree), str(out), ",".join(boards),
                        ",".join(map(str, threads)), "1" if zoo else "0", str(shared / "models")],
                       capture_output=True, text=True, cwd=tree,
                       env={**os.environ, "AOT_SHARED": str(shared)})
    if r.returncode:
        sys.exit(f"emitting the C of {tree} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def base_tree(rev: str) -> Path:
    sha = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    tree = Path(tempfile.mkdtemp(prefix=f"aot-same-code-{sha[:12]}-"))
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), sha], cwd=ROOT,
                   check=True)
    return tree


def functions(c_file: Path, board: str) -> dict[str, list[str]]:
    """Each function's instructions (mnemonic and operands, no addresses)."""
    from aot.targets import get_board
    target = get_board(board).target
    text = ""
    for i, part in enumerate(c_file.read_text().split(PART)):
        src = c_file.with_suffix(f".{i}.c")
        src.write_text(part)
        obj = src.with_suffix(".o")
        subprocess.run([target.cc, *target.cflags, "-std=c99", "-w", "-c", str(src), "-o",
                        str(obj)], check=True)
        text += subprocess.run(["llvm-objdump", "-d", "--no-show-raw-insn", str(obj)],
                               capture_output=True, text=True, check=True).stdout
    funcs: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        head = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if head:
            current = funcs.setdefault(head.group(1), [])
        elif current is not None and re.match(r"^\s+[0-9a-f]+:\s", line):
            insn = line.split(":", 1)[1].strip()
            # branch targets name addresses, which move when code before them does
            current.append(re.sub(r"\b(0x)?[0-9a-f]{3,}\b <", "<", insn))
    return funcs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", help="the revision to compare with (e.g. HEAD, a5a75e8)")
    ap.add_argument("--boards", default=",".join(BOARDS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--no-zoo", action="store_true", help="the shared models only")
    args = ap.parse_args()
    boards, threads = args.boards.split(","), [int(t) for t in args.threads.split(",")]
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="aot-same-code-") as tmp:
        a_dir, b_dir = Path(tmp) / "base", Path(tmp) / "work"
        tree = base_tree(args.base)
        try:
            a = emit(tree, a_dir, boards, threads, not args.no_zoo)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT)
        b = emit(ROOT, b_dir, boards, threads, not args.no_zoo)
        same_c = same_obj = 0
        changed = []
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                print(f"{key}: base {a.get(key)!r}, now {b.get(key)!r}")
                changed.append(key)
                continue
            if a[key] != "ok":
                continue
            fa, fb = a_dir / f"{key}.c", b_dir / f"{key}.c"
            if fa.read_bytes() == fb.read_bytes():
                same_c += 1
                continue
            board = key.split(".")[0]
            da, db = functions(fa, board), functions(fb, board)
            if da == db:
                same_obj += 1
                continue
            changed.append(key)
            for fn in sorted(set(da) | set(db)):
                if da.get(fn) != db.get(fn):
                    print(f"{key} {fn}: {len(da.get(fn, []))} -> {len(db.get(fn, []))} "
                          "instructions (static)")
        digest = hashlib.sha1("".join(changed).encode()).hexdigest()[:8]
        print(f"{same_c} identical C, {same_obj} identical object code, {len(changed)} changed"
              + (f" ({digest})" if changed else ""))
        return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
