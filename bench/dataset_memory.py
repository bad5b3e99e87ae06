"""Peak memory and time of `aot verify --dataset` as the sample count grows.

    python bench/dataset_memory.py                  # kws int8, 100,000 samples, host
    python bench/dataset_memory.py --samples 5000 --case tiny

Cases:
- kws: the MLPerf Tiny keyword-spotting int8 model on the host board, a
  dataset of the saved input with noise (490 bytes a sample, stored
  uncompressed: 49 MB for 100,000); every output's metrics are printed.
- tiny: y = x + x on a float32[1, 1] input, a compressed .npz of zeros
  (100,000 samples in under 2 KB), run under a 2 GiB RLIMIT_AS: the exit
  code must be 0, 1 or 2 and stderr at most one line.

Each run is `aot verify ... --json` in a child process; peak RSS is that
child's (os.wait4's ru_maxrss: the largest of the aot process and the
processes it waited for, its compiler and harness). Linux carries a
process's RSS high-water mark across fork and exec, so the dataset is made
in another child and this process stays small (no numpy): the number is
aot's.
Prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = Path(os.environ.get("AOT_SHARED", ROOT.parent / "shared")) / "models"
KWS = MODELS / "mlperf_kws_dscnn_int8.tflite"
AS_LIMIT = 2 << 30


def kws_dataset(folder: Path, samples: int) -> tuple[Path, Path]:
    import numpy as np

    x = np.load(KWS.with_suffix(".input.npy"))
    rng = np.random.default_rng(0)
    data = np.empty((samples, *x.shape), np.int8)
    for start in range(0, samples, 10_000):      # made in blocks: this script stays small too
        n = min(10_000, samples - start)
        noise = rng.integers(-8, 9, (n, *x.shape))
        data[start:start + n] = np.clip(x.astype(np.int16) + noise, -128, 127)
    path = folder / "kws.npz"
    np.savez(path, input_1=data)
    return KWS, path


def tiny_dataset(folder: Path, samples: int) -> tuple[Path, Path]:
    import numpy as np
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "twice",
                          [vi("x", TensorProto.FLOAT, [1, 1])],
                          [vi("y", TensorProto.FLOAT, [1, 1])])
    model = folder / "twice.onnx"
    model.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
                      .SerializeToString())
    path = folder / "tiny.npz"
    np.savez_compressed(path, x=np.zeros((samples, 1, 1), np.float32))
    return model, path


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=("kws", "tiny"), default="kws")
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--board", default="host")
    ap.add_argument("--make", metavar="DIR", help=argparse.SUPPRESS)  # the child that makes it
    args = ap.parse_args()
    make = kws_dataset if args.case == "kws" else tiny_dataset
    if args.make:
        print(json.dumps([str(p) for p in make(Path(args.make), args.samples)]))
        return 0
    with tempfile.TemporaryDirectory(prefix="aot-bench-") as tmp:
        made = subprocess.run([sys.executable, __file__, "--case", args.case, "--samples",
                               str(args.samples), "--make", tmp], capture_output=True,
                              text=True, check=True)
        model, dataset = map(Path, json.loads(made.stdout))
        argv = [sys.executable, "-m", "aot.cli", "verify", str(model), "--board", args.board,
                "--dataset", str(dataset), "--json"]
        t0 = time.perf_counter()
        with open(Path(tmp) / "out", "w+") as out, open(Path(tmp) / "err", "w+") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=ROOT,
                                    preexec_fn=limit_memory if args.case == "tiny" else None)
            _, status, usage = os.wait4(proc.pid, 0)       # this child's own rusage
            seconds = time.perf_counter() - t0
            out.seek(0), err.seek(0)
            stdout, stderr = out.read(), err.read()
        code = proc.returncode = os.waitstatus_to_exitcode(status)
        peak_mb = usage.ru_maxrss / 1024
        try:
            report = json.loads(stdout)
        except ValueError:
            report = {}
        print(json.dumps({
            "case": args.case, "samples": args.samples, "dataset_bytes": dataset.stat().st_size,
            "exit": code, "stderr_lines": len(stderr.splitlines()),
            "seconds": round(seconds, 1), "peak_rss_mb": round(peak_mb, 1),
            "ms_per_sample": round(1000 * seconds / args.samples, 2),
            "ok": report.get("ok"), "verified": report.get("samples"),
            "error": report.get("error"), "outputs": report.get("outputs")}))
        return 0 if code in (0, 1, 2) else 1


if __name__ == "__main__":
    sys.exit(main())
