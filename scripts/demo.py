"""`make demo`: aot end to end on a model it generates itself.

model -> aot graph (import, passes) -> aot package (TIR, C, arena plan,
static library for the host) -> aot run -> checked against ONNX Runtime,
then the package's footprint. (The emulated Raspberry Pi 4 becomes the
demo's board with the deploy issue.)
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

    console.print("[bold]3. aot package[/] for the host board (C kernels, static arena):")
    info = json.loads(aot("package", str(model), "--board", "host", "-o", str(OUT / "pkg"),
                          "--force", "--json", capture=True))
    console.print(f"   {info['package']}: arena {info['arena_bytes']} B "
                  f"(lower bound {info['arena_lower_bound_bytes']} B), "
                  f"weights {info['params_bytes']} B, compiled in {info['compile_seconds']:.2f} s")

    x = np.random.default_rng(1).standard_normal((1, 1, 49, 10)).astype(np.float32)
    np.save(OUT / "input.npy", x)
    console.print("[bold]4. aot run[/] on the host:")
    aot("run", str(OUT / "pkg"), "--board", "host", "--input", f"spectrogram={OUT / 'input.npy'}",
        "--out", str(OUT / "run"), "--force")
    ours = np.load(OUT / "run" / "0.npy")
    ref = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(
        None, {"spectrogram": x})[0]

    table = Table(title="aot package on the host vs ONNX Runtime")
    table.add_column("class")
    table.add_column("aot", justify="right")
    table.add_column("onnxruntime", justify="right")
    for i, (a, b) in enumerate(zip(ours.reshape(-1), ref.reshape(-1))):
        table.add_row(str(i), f"{a:.6f}", f"{b:.6f}")
    console.print(table)
    err = float(np.max(np.abs(ours - ref)))
    ok = np.allclose(ours, ref, rtol=1e-4, atol=1e-4)
    console.print(f"max abs error {err:.2e}: " + ("[green]match[/]" if ok else "[red]MISMATCH[/]"))

    console.print("[bold]5. aot inspect[/]: the model library's footprint")
    aot("inspect", str(OUT / "pkg"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
