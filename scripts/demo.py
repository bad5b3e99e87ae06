"""`make demo`: what aot does today, end to end on a model it generates itself.

model -> aot.load -> aot.optimize -> aot.interpret, checked against ONNX
Runtime. (Packaging and running on the emulated Raspberry Pi 4 come with the
codegen and deploy issues.)
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
import demo_model  # noqa: E402

import aot  # noqa: E402

OUT = Path("out/demo")


def main() -> int:
    console = Console()
    model = OUT / "tiny_kws.onnx"
    demo_model.main(str(model))
    console.print(f"[bold]1. generated[/] {model}")

    console.print("[bold]2. aot graph[/] (imported, then optimized):")
    subprocess.run([sys.executable, "-m", "aot", "graph", str(model), "--dump-ir",
                    str(OUT / "ir"), "--force"], check=True)
    console.print(f"   IR after each pass: {OUT / 'ir'}/")

    graph = aot.optimize(aot.load(model))
    x = np.random.default_rng(1).standard_normal((1, 1, 49, 10)).astype(np.float32)
    ours = aot.interpret(graph, {"spectrogram": x})["probs"]
    ref = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(
        None, {"spectrogram": x})[0]

    table = Table(title="3. aot interpreter vs ONNX Runtime")
    table.add_column("class")
    table.add_column("aot", justify="right")
    table.add_column("onnxruntime", justify="right")
    for i, (a, b) in enumerate(zip(ours[0], ref[0])):
        table.add_row(str(i), f"{a:.6f}", f"{b:.6f}")
    console.print(table)
    err = float(np.max(np.abs(ours - ref)))
    ok = np.allclose(ours, ref, rtol=1e-4, atol=1e-4)
    console.print(f"max abs error {err:.2e}: " + ("[green]match[/]" if ok else "[red]MISMATCH[/]"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
