"""aot package --threads N: kernels split over a thread pool.

The split pass (aot/lower/tir_passes/parallel.py) only splits what it proves
independent; a split package's outputs are the one-thread package's bit for
bit (C and LLVM, any thread count, a stateful stream too); the pool is
clean under ThreadSanitizer over 1,000 runs and under concurrent runs on
separate arenas with init/deinit in between; a one-thread package holds no
thread code; bare-metal boards refuse --threads.
"""
from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import aot
import aot.lower.tir_passes.parallel as parallel
from aot.check import streaming as S
from aot.api import package
from aot.deploy import run_package
from aot.errors import AotError
from aot.ir.tir import (Bin, Buffer, BufferKind, Cast, Comment, For, ForKind, If, Load, PrimFunc,
                        Seq, Store, Var, const, dt, is_split, phases, walk_stmt)
from aot.packaging.metadata import read_metadata
from aot.targets import get_board
from support import MODELS

HOST = get_board("host")
VWW = MODELS / "mlperf_vww_mbv1_f32.tflite"
STREAMING = MODELS / "streaming" / "mww_hey_jarvis.tflite"


def _inputs(model: Path) -> list[np.ndarray]:
    return [np.load(model.with_suffix(".input.npy"))]


def _outputs(pkg: Path, inputs, board=HOST) -> list[bytes]:
    return [o.tobytes() for o in run_package(pkg, board, inputs).outputs]


# ------------------------------------------------------------------ the split pass

F32 = dt("float32")
X = Buffer("x", F32, (128, 256), BufferKind.INPUT)
Y = Buffer("y", F32, (128, 256), BufferKind.OUTPUT)
I, J = Var("i"), Var("j")


def _func(body) -> PrimFunc:
    return PrimFunc("k", (X, Y), body)


def _at(i, j):
    return Bin("+", Bin("*", i, const(256)), j)


def _parallel_loops(f: PrimFunc) -> list[str]:
    return [s.var.name for s in walk_stmt(f.body) if isinstance(s, For)
            and s.kind is ForKind.PARALLEL]


def test_rows_of_an_elementwise_kernel_split():
    square = Bin("*", Load(X, _at(I, J)), Load(X, _at(I, J)))
    body = For(I, 128, For(J, 256, Store(Y, _at(I, J), square)))
    assert _parallel_loops(parallel.split_kernel(_func(body), 2)) == ["i"]
    # small kernels stay whole: a dispatch costs more than they do
    small = For(I, 2, For(J, 256, Store(Y, _at(I, J), Load(X, _at(I, J)))))
    assert not is_split(parallel.split_kernel(_func(small), 2))
    assert parallel.split_kernel(_func(body), 1) == _func(body)


def test_a_loop_carried_dependence_is_not_split():
    # y[i, j] = y[i - 1, j] + x[i, j]: a trip reads what the previous one wrote
    step = Store(Y, _at(Bin("+", I, const(1)), J),
                 Bin("+", Load(Y, _at(I, J)), Load(X, _at(I, J))))
    # the columns are independent, the rows are not
    assert _parallel_loops(parallel.split_kernel(_func(For(I, 127, For(J, 256, step))), 2)) \
        == ["j"]
    assert _parallel_loops(parallel.split_kernel(_func(For(J, 256, For(I, 127, step))), 2)) \
        == ["j"]


def test_overlapping_statements_are_not_split():
    # a fill, then a second pass over the same elements: two phases, in order
    i2, j2 = Var("i2"), Var("j2")
    fill = For(I, 128, For(J, 256, Store(Y, _at(I, J), const(0.0, "float32"))))
    again = For(i2, 128, For(j2, 256, Store(Y, _at(i2, j2), Load(X, _at(i2, j2)))))
    assert phases(parallel.split_kernel(_func(Seq((fill, again))), 2)) == 2
    # an index the pass cannot box (a value read from memory) keeps the kernel whole
    gather = For(I, 128, For(J, 256, Store(Y, _at(I, Cast(dt("int32"), Load(X, _at(I, J)))),
                                           const(1.0, "float32"))))
    assert not is_split(parallel.split_kernel(_func(gather), 2))
    # disjoint halves split, each over its own rows
    top = For(I, 64, For(J, 256, Store(Y, _at(I, J), Load(X, _at(I, J)))))
    bottom = replace(top, start=64)
    assert _parallel_loops(parallel.split_kernel(_func(Seq((top, bottom))), 2)) == ["i", "i"]


def test_rows_are_split_rather_than_column_halves():
    # j (2 halves of each row) balances perfectly, i (127 rows) nearly: the
    # rows win, so each task writes one band of rows (the next kernel's task
    # reads what its own core wrote)
    K = Var("k")
    col = Bin("+", Bin("*", J, const(128)), K)
    body = For(J, 2, For(I, 127, For(K, 128, Store(Y, _at(I, col), Load(X, _at(I, col))))))
    assert _parallel_loops(parallel.split_kernel(_func(body), 2)) == ["i"]


def test_a_note_stays_out_of_the_last_tasks_code():
    # a comment (an empty border strip's) is no work for any task: no If around it
    note = Comment("outputs [0, 128) x [0, 256): no border")
    body = For(I, 128, For(J, 256, Store(Y, _at(I, J), Load(X, _at(I, J)))))
    f = parallel.split_kernel(_func(Seq((note, body))), 2)
    assert f.body.stmts[0] == note and not any(isinstance(s, If) for s in walk_stmt(f.body))


def test_a_scratch_filled_then_read_splits_in_two_phases():
    # pad = x, then y[i, j] = pad[i, j] + pad[127 - i, j]: the second nest reads
    # rows the first wrote in other trips, so it waits for the whole first
    pad = Buffer("pad", F32, (128, 256), BufferKind.SCRATCH)
    i2, j2 = Var("i2"), Var("j2")
    fill = For(I, 128, For(J, 256, Store(pad, _at(I, J), Load(X, _at(I, J)))))
    mirror = _at(Bin("-", const(127), i2), j2)
    use = For(i2, 128, For(j2, 256, Store(Y, _at(i2, j2), Bin(
        "+", Load(pad, _at(i2, j2)), Load(pad, mirror)))))
    f = parallel.split_kernel(PrimFunc("k", (X, Y, pad), Seq((fill, use))), 2)
    assert phases(f) == 2 and _parallel_loops(f) == ["i", "i2"]


def _staged(read_row) -> PrimFunc:
    """y[i, j] = row[j] + row[read_row(j)] with row staged from x[i] each
    trip i (a convolution's staged input rows)."""
    row = Buffer("row", F32, (257,), BufferKind.SCRATCH)
    stage = For(J, 256, Store(row, J, Load(X, _at(I, J))))
    use = For(Var("j2"), 256, Store(Y, _at(I, Var("j2")), Bin(
        "+", Load(row, Var("j2")), Load(row, read_row(Var("j2"))))))
    return PrimFunc("k", (X, Y, row), For(I, 128, Seq((stage, use))))


def test_a_row_staged_each_trip_splits_with_a_scratch_per_task():
    f = parallel.split_kernel(_staged(lambda j: Bin("-", const(255), j)), 3)
    assert _parallel_loops(f) == ["i"] and dict(f.attrs)["tasks"] == 3
    row = next(b for b in f.params if b.name == "row")
    assert row.shape == (3, 257) and row.nbytes == 3 * 257 * 4     # the planner's size
    stores = [s for s in walk_stmt(f.body) if isinstance(s, Store) and s.buffer.name == "row"]
    assert "task" in repr(stores[0].index)
    # one thread: no copies
    assert parallel.split_kernel(_staged(lambda j: j), 1).params[2].shape == (257,)


def test_a_scratch_read_beyond_what_the_trip_wrote_keeps_the_kernel_whole():
    # row[j + 1] at j = 255 is row[256], which no trip stages: stale in a copy
    f = parallel.split_kernel(_staged(lambda j: Bin("+", j, const(1))), 2)
    assert not is_split(f) and "tasks" not in dict(f.attrs)
    # staged in one branch of a test only: the other branch leaves it stale
    row = Buffer("row", F32, (256,), BufferKind.SCRATCH)
    half = If(Bin("<", I, const(64)), For(J, 256, Store(row, J, Load(X, _at(I, J)))))
    use = For(J, 256, Store(Y, _at(I, J), Load(row, J)))
    f = parallel.split_kernel(PrimFunc("k", (X, Y, row), For(I, 128, Seq((half, use)))), 2)
    assert not is_split(f)


def test_a_scratch_written_within_a_loop_is_proven_trip_by_trip():
    from aot.lower.tir_passes.private_scratch import trip_private
    row = Buffer("row", F32, (256,), BufferKind.SCRATCH)
    first = Store(row, const(0), Load(X, _at(I, const(0))))
    back = Bin("-", J, const(1))
    # a running sum: row[j] needs row[j - 1], written one trip of j earlier
    scan = For(J, 255, Store(row, J, Bin("+", Load(row, back), Load(X, _at(I, J)))), start=1)
    assert trip_private(For(I, 128, Seq((first, scan))), row)
    # reading ahead: row[j + 1] is only written in a later trip (or trip i - 1)
    ahead = For(J, 254, Store(row, J, Load(row, Bin("+", J, const(1)))), start=1)
    assert not trip_private(For(I, 128, Seq((first, ahead))), row)


def test_work_counts_vector_operations_not_lanes():
    # 128 x 16 stores of 16 lanes: 2,048 operations (32,768 lanes) stay whole
    vec = Store(Y, Bin("*", J, const(16)), Load(X, Bin("*", J, const(16)), 16))
    wide = For(I, 1, For(J, 128 * 16, vec))
    assert parallel._work(wide) == 128 * 16
    assert not is_split(parallel.split_kernel(_func(wide), 2))


# ------------------------------------------------------------------ packages

@pytest.fixture(scope="module")
def vww_one(tmp_path_factory):
    return package(VWW, board="host", out_dir=tmp_path_factory.mktemp("one") / "pkg")


@pytest.mark.parametrize("codegen,threads", [("c", 3), ("llvm", 2)])
def test_split_package_outputs_are_bit_identical(vww_one, codegen, threads, tmp_path):
    info = package(VWW, board="host", codegen=codegen, threads=threads,
                   out_dir=tmp_path / "pkg")
    meta = read_metadata(info.path)
    assert meta["threads"] == threads
    split = [k["split"] for k in meta["kernels"]]
    # the first and the pointwise convolutions; not the small depthwise ones
    # (below MIN_WORK vector operations), nor the softmax
    assert sum(split) >= 14 and not split[-1]
    assert (info.path / "runtime_c" / "aot_threads.c").is_file()
    x = _inputs(VWW)
    assert _outputs(info.path, x) == _outputs(vww_one.path, x)


def test_int8_convolutions_split_with_a_scratch_per_task(tmp_path):
    # ResNet-8 int8: every convolution stages its input rows in a scratch
    # buffer (3x3 stride 1 ones as a ring in a one-thread package)
    model = MODELS / "mlperf_ic_resnet8_int8.tflite"
    one, two = (package(model, board="host", threads=t, out_dir=tmp_path / f"t{t}")
                for t in (1, 2))
    metas = [read_metadata(i.path) for i in (one, two)]
    split = {k["name"] for k in metas[1]["kernels"] if k["split"]}
    convs = {k["name"] for k in metas[1]["kernels"] if "tfl.conv2d" in k["ops"]}
    assert len(convs) == 9 and convs <= split
    # the arena holds two copies of each split kernel's scratch, exactly
    sizes = [{(b["step"], b["name"]): b["size"] for b in m["plan"]["buffers"]
              if b["kind"] == "scratch"} for m in metas]
    copied = [k for k in sizes[1] if sizes[1][k] != sizes[0][k]]
    assert copied and all(sizes[1][k] == 2 * sizes[0][k] for k in copied)
    x = _inputs(model)
    want = _outputs(one.path, x)
    assert _outputs(two.path, x) == want
    # a pool of more threads than the package was built for (another
    # package's, or _init(4)) runs these kernels on two tasks, one per copy
    assert _outputs_on_pools(two.path, x[0], (4, 3, 1), tmp_path) == [want[0]] * 3


POOLS_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "NAME.h"
int main(int argc, char** argv) {
    static int8_t x[NAME_UP_INPUT_INPUT_1_INT8_BYTES], y[NAME_UP_OUTPUT_IDENTITY_INT8_BYTES];
    struct NAME_inputs in = {x};
    struct NAME_outputs out = {y};
    FILE* f = fopen(argv[1], "rb");
    int k;
    if (!f || fread(x, 1, sizeof x, f) != sizeof x) return 2;
    for (k = 2; k < argc; k++) {
        if (NAME_init(atoi(argv[k])) != 0 || NAME_run(&in, &out) != 0) return 3;
        fwrite(y, 1, sizeof y, stdout);
    }
    NAME_deinit();
    return 0;
}
"""


def _outputs_on_pools(pkg: Path, x: np.ndarray, pools, tmp_path) -> list[bytes]:
    """The package's output run by its library on pools of each size."""
    name = read_metadata(pkg)["name"]
    main, exe, raw = tmp_path / "pools.c", tmp_path / "pools", tmp_path / "x.bin"
    main.write_text(POOLS_MAIN.replace("NAME_UP", name.upper()).replace("NAME", name))
    raw.write_bytes(x.tobytes())
    subprocess.run(["clang", "-O1", "-pthread", f"-I{pkg / 'include'}", f"-I{pkg / 'runtime_c'}",
                    str(main), str(pkg / "lib" / f"lib{name}.a"), "-lm", "-o", str(exe)],
                   check=True)
    out = subprocess.run([str(exe), str(raw), *map(str, pools)], check=True,
                         capture_output=True).stdout
    n = len(out) // len(pools)
    return [out[k * n:(k + 1) * n] for k in range(len(pools))]


def test_emulated_arm_boards_compute_the_same(tmp_path):
    """qemu-user (two host threads) at 2 threads, and the qemu-rpi4 VM given
    4 cores (-smp 4) at 4: the one-thread aarch64 package's outputs."""
    user = get_board("qemu-aarch64")
    vm = get_board("qemu-rpi4")
    vm4 = replace(vm, name="qemu-rpi4-smp4", options={**vm.options, "smp": 4})
    assert user.target == vm.target
    x = _inputs(VWW)
    want = _outputs(package(VWW, board=user, out_dir=tmp_path / "one").path, x, user)
    two = package(VWW, board=user, threads=2, out_dir=tmp_path / "two")
    assert _outputs(two.path, x, user) == want
    four = package(VWW, board=vm4, threads=4, out_dir=tmp_path / "four")
    assert _outputs(four.path, x, vm4) == want


def test_one_thread_package_has_no_thread_code(vww_one):
    meta = read_metadata(vww_one.path)
    assert "threads" not in meta and all("split" not in k for k in meta["kernels"])
    assert not (vww_one.path / "runtime_c" / "aot_threads.c").exists()
    for path in vww_one.path.rglob("*"):
        if path.suffix in (".c", ".h", ".txt", ".json") or path.name == "Makefile":
            text = path.read_bytes()
            assert b"pthread" not in text and b"aot_pool" not in text, path


def test_bare_metal_boards_refuse_threads(tmp_path):
    with pytest.raises(AotError, match="bare metal.*Linux target"):
        package(VWW, board="mps2-an386", threads=2, out_dir=tmp_path / "pkg")
    with pytest.raises(AotError, match="give 1 or more"):
        package(VWW, board="host", threads=0, out_dir=tmp_path / "pkg")


def test_stateful_stream_is_the_same_with_threads(monkeypatch, tmp_path):
    # the wake-word model's kernels are small: split every one the pass can
    monkeypatch.setattr(parallel, "MIN_WORK", 0)
    graph = aot.load(STREAMING)
    steps = S.feature_stream(graph, 30, seed=51)
    streams = []
    for threads in (1, 2):
        info = package(S.step_graph(graph), board="host", threads=threads,
                       out_dir=tmp_path / f"t{threads}")
        if threads > 1:
            assert sum(k["split"] for k in read_metadata(info.path)["kernels"]) >= 3
        streams.append(S.board_stream(info.path, HOST, graph, steps))
    assert [[o.tobytes() for o in step] for step in streams[0]] == \
        [[o.tobytes() for o in step] for step in streams[1]]


# ------------------------------------------------------------- ThreadSanitizer

TSAN = ("-fsanitize=thread", "-g", "-O1")

# Two threads run the model on their own arenas at once, and the pool is
# restarted with other sizes in between: every run's output must be the
# one-thread package's.
DRIVER = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "NAME.h"

static float input[IN_SIZE];
static float expected[OUT_SIZE];
static uint8_t arenas[2][UPPER_ARENA_SIZE] __attribute__((aligned(UPPER_ARENA_ALIGN)));

static void* runs(void* arg) {
    const int which = (int)(intptr_t)arg;
    float out[OUT_SIZE];
    struct NAME_inputs in = {input};
    struct NAME_outputs o = {out};
    int i;
    for (i = 0; i < 50; i++) {
        if (NAME_run_with_arena(&in, &o, arenas[which]) != AOT_OK ||
            memcmp(out, expected, sizeof out) != 0) {
            fprintf(stderr, "run %d of thread %d differs\n", i, which);
            exit(3);
        }
    }
    return NULL;
}

int main(int argc, char** argv) {
    FILE* f = fopen(argv[1], "rb");
    int n, k;
    (void)argc;
    if (!f || fread(input, 1, sizeof input, f) != sizeof input) return 2;
    fclose(f);
    f = fopen(argv[2], "rb");
    if (!f || fread(expected, 1, sizeof expected, f) != sizeof expected) return 2;
    fclose(f);
    for (n = 1; n <= 3; n++) {
        pthread_t t[2];
        if (NAME_init(n) != AOT_OK) return 4;
        for (k = 0; k < 2; k++) pthread_create(&t[k], NULL, runs, (void*)(intptr_t)k);
        for (k = 0; k < 2; k++) pthread_join(t[k], NULL);
        NAME_deinit();
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def vww_tsan(tmp_path_factory):
    return package(VWW, board="host", threads=2, extra_cflags=TSAN,
                   out_dir=tmp_path_factory.mktemp("tsan") / "pkg")


def test_thousand_runs_under_thread_sanitizer(vww_tsan, vww_one, monkeypatch):
    monkeypatch.setenv("TSAN_OPTIONS", "halt_on_error=1:exitcode=66")
    x = _inputs(VWW)
    result = run_package(vww_tsan.path, HOST, x, warmup=0, runs=1000)
    assert len(result.times_ns) == 1000
    assert [o.tobytes() for o in result.outputs] == _outputs(vww_one.path, x)


def test_concurrent_runs_and_restarts_under_thread_sanitizer(vww_tsan, vww_one, tmp_path):
    pkg, name = vww_tsan.path, vww_tsan.name
    x, want = _inputs(VWW)[0], _outputs(vww_one.path, _inputs(VWW))[0]
    (tmp_path / "driver.c").write_text(
        DRIVER.replace("UPPER", name.upper()).replace("NAME", name)
        .replace("IN_SIZE", str(x.size)).replace("OUT_SIZE", str(len(want) // 4)))
    exe = tmp_path / "driver"
    subprocess.run(["clang", *HOST.target.cflags, *TSAN, "-pthread", f"-I{pkg}/include",
                    f"-I{pkg}/runtime_c", str(tmp_path / "driver.c"),
                    str(pkg / "lib" / f"lib{name}.a"), "-lm", "-o", str(exe)], check=True)
    (tmp_path / "in.bin").write_bytes(x.tobytes())
    (tmp_path / "want.bin").write_bytes(want)
    r = subprocess.run([str(exe), str(tmp_path / "in.bin"), str(tmp_path / "want.bin")],
                       capture_output=True, text=True, timeout=300,
                       env={"TSAN_OPTIONS": "halt_on_error=1:exitcode=66"})
    assert r.returncode == 0 and "ThreadSanitizer" not in r.stderr, r.stderr[-3000:]
