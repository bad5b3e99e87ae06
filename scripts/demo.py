"""`make demo`: aot end to end on a model it generates itself, run on the
default board, an emulated Raspberry Pi 4 (qemu-rpi4) reached over SSH.

model -> aot graph (import, passes) -> aot package (TIR, C, arena plan,
cross-compiled for the Pi 4's Cortex-A72) -> aot board up (boots the VM) ->
aot run over SSH, checked against ONNX Runtime -> aot inspect -> aot bench
--profile on the board: a per-kernel table, then the latency table.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
import demo_model  # noqa: E402

OUT = Path("out/demo")
BOARD = "qemu-rpi4"
REPEAT = 50


def aot(*args: str, capture: bool = False) -> str:
    r = subprocess.run([sys.executable, "-m", "aot", *args], check=True, text=True,
                       stdout=subprocess.PIPE if capture else None)
    return r.stdout if capture else ""


def main() -> int:
    console = Console()
    model = OUT / "tiny_kws.onnx"
    demo_model.main(str(model))
    console.print(f"[bold]1. generated[/] {model}")

    console.print("[bold]2. aot graph[/]: imported, optimized (batch norm folded, NHWC, fused):")
    aot("graph", str(model), "--dump-ir", str(OUT / "ir"), "--force")

    console.print(f"[bold]3. aot package[/] for {BOARD} (C kernels, static arena, "
                  "cross-compiled for aarch64):")
    info = json.loads(aot("package", str(model), "--board", BOARD, "-o", str(OUT / "pkg"),
                          "--force", "--json", capture=True))
    console.print(f"   {info['package']}: arena {info['arena_bytes']} B "
                  f"(lower bound {info['arena_lower_bound_bytes']} B), "
                  f"weights {info['params_bytes']} B, compiled in {info['compile_seconds']:.2f} s")

    console.print(f"[bold]4. aot board up[/] {BOARD}: boot the emulated Pi 4 "
                  "(qemu-system-aarch64, Cortex-A72), reached over SSH")
    aot("board", "up", BOARD)
    try:
        return on_the_board(console, model)
    finally:
        aot("board", "down", BOARD, capture=True)   # the latency table stays last


def on_the_board(console: Console, model: Path) -> int:
    x = np.random.default_rng(1).standard_normal((1, 1, 49, 10)).astype(np.float32)
    np.save(OUT / "input.npy", x)
    console.print(f"[bold]5. aot run[/] on {BOARD} (harness and input uploaded over SFTP):")
    ran = json.loads(aot("run", str(OUT / "pkg"), "--input", f"spectrogram={OUT / 'input.npy'}",
                         "--out", str(OUT / "run"), "--force", "--json", capture=True))
    ours = np.load(ran["outputs"][0]["file"])      # out/demo/run/probs.npy
    console.print(f"   wrote {ran['outputs'][0]['file']}")
    ref = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(
        None, {"spectrogram": x})[0]

    table = Table(title=f"aot on {BOARD} vs ONNX Runtime on this machine")
    table.add_column("class")
    table.add_column("aot", justify="right")
    table.add_column("onnxruntime", justify="right")
    for i, (a, b) in enumerate(zip(ours.reshape(-1), ref.reshape(-1))):
        table.add_row(str(i), f"{a:.6f}", f"{b:.6f}")
    console.print(table)
    err = float(np.max(np.abs(ours - ref)))
    ok = np.allclose(ours, ref, rtol=1e-4, atol=1e-4)
    console.print(f"max abs error {err:.2e}: " + ("[green]match[/]" if ok else "[red]MISMATCH[/]"))

    console.print("[bold]6. aot inspect[/]: the model library's footprint")
    aot("inspect", str(OUT / "pkg"))

    console.print(f"[bold]7. aot bench --profile[/] on {BOARD}: {REPEAT} timed runs "
                  "after 10 warm-up, every kernel timed")
    bench = json.loads(aot("bench", str(model), "--board", BOARD, "--profile", "--repeat",
                           str(REPEAT), "--json", capture=True))
    layers = Table(title="per kernel (median)")
    for col, justify in (("step", "right"), ("kernel", "left"), ("ms", "right"),
                         ("share", "right")):
        layers.add_column(col, justify=justify)
    for k in bench["profile"]:
        layers.add_row(str(k["step"]), k["name"], f"{k['median_ms']:.4f}",
                       f"{100 * k['share']:.1f}%")
    console.print(layers)
    latency = Table(title=f"latency of {bench['model']} on {BOARD} ({bench['codegen']} "
                    f"codegen, {bench['repeat']} runs)",
                    caption="emulated: the times are QEMU's on this machine, not a real Pi 4's")
    cols = ("median", "mean", "min", "max", "std")
    for col in cols:
        latency.add_column(f"{col} ms", justify="right")
    latency.add_row(*(f"{bench[f'{col}_ms']:.3f}" for col in cols))
    console.print(latency)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
