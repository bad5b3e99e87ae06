"""Streams through stateful models: verification of the state, step by step.

A stateful graph (resource variables of a TFLite streaming model, LSTM state)
computes its outputs and its next state from its inputs and its current state.
To check both on a board, `step_graph` turns the state into inputs and the
next state into outputs: the same kernels, the same arithmetic, a step at a
time, with the state carried by the caller. The reference side is
tflite-micro running a copy of the model whose subgraph also outputs the
values its ASSIGN_VARIABLEs store (`tflm_with_state_outputs`), so after each
step both give the outputs and the whole state, compared bit for bit.

The package's own state buffers (kept from run to run, restored by
`<name>_reset()`) run the same kernels; tests/check/test_streaming.py drives a real
package through a stream from C and compares it with this.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from aot.errors import AotError
from aot.ir.graph import Graph, Node

NEXT = "/next"  # suffix of the output that carries a variable's next value


def state_names(graph: Graph) -> list[str]:
    """The graph's variables in a fixed order (the order of the state outputs)."""
    return sorted(graph.variables)


def step_graph(graph: Graph) -> Graph:
    """The graph with its state as inputs (named as the variables) and its next
    state as outputs (`<variable>/next`), after the model's own outputs."""
    names = state_names(graph)
    if not names:
        raise AotError(f"model '{graph.name}' has no state to stream")
    missing = [v for v in names if v not in graph.updates]
    if missing:
        raise AotError(f"variable '{missing[0]}' is never assigned: its state cannot stream")
    taken = set(graph.types)
    copies = []
    types = dict(graph.types)
    for v in names:
        out = v + NEXT
        if out in taken:
            raise AotError(f"tensor name '{out}' is taken: cannot name variable '{v}''s next state")
        copies.append(Node("Identity", f"{v}{NEXT}", (graph.updates[v],), (out,), {}))
        types[out] = graph.types[v]
    return graph.replace(inputs=tuple(graph.inputs) + tuple(names),
                         outputs=tuple(graph.outputs) + tuple(v + NEXT for v in names),
                         nodes=tuple(graph.nodes) + tuple(copies), types=types,
                         variables={}, updates={})


def initial_state(graph: Graph) -> list[np.ndarray]:
    return [np.asarray(graph.variables[v]) for v in state_names(graph)]


def tflm_with_state_outputs(path: Path, graph: Graph) -> bytes:
    """The .tflite model with the value of each state update appended to
    subgraph 0's outputs, in state_names order."""
    from aot.check.reference import runtime_module
    from aot.frontend.tflite.schema import decode, unique_names

    data = Path(path).read_bytes()
    names = unique_names(decode(data).tensors)
    index = {n: i for i, n in enumerate(names)}
    extra = []
    for v in state_names(graph):
        upd = graph.updates[v]
        if upd not in index:
            raise AotError(f"the update of variable '{v}' ('{upd}') is no tensor of the "
                           "model's first subgraph: its state cannot be compared")
        extra.append(index[upd])
    schema = runtime_module("tflite_micro.tensorflow.lite.micro.python.schema_py_generated",
                            "tflite-micro")
    import flatbuffers
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(data, 0))
    sg = model.subgraphs[0]
    sg.outputs = list(np.asarray(sg.outputs).tolist()) + extra
    builder = flatbuffers.Builder(len(data) + 4096)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def tflm_stream(path: Path, graph: Graph, steps: Sequence[Sequence[np.ndarray]]
                ) -> list[list[np.ndarray]]:
    """tflite-micro over the stream: per step the outputs, then the state after it."""
    from aot.check.reference import runtime_module
    runtime = runtime_module("tflite_micro.python.tflite_micro.runtime", "tflite-micro")
    interp = runtime.Interpreter.from_bytes(tflm_with_state_outputs(path, graph),
                                            arena_size=300000)
    count = len(graph.outputs) + len(graph.variables)
    out = []
    for inputs in steps:
        for k, x in enumerate(inputs):
            interp.set_input(np.ascontiguousarray(x), k)
        interp.invoke()
        out.append([np.array(interp.get_output(k)) for k in range(count)])
    return out


def board_stream(pkg: Path, board, graph: Graph, steps: Sequence[Sequence[np.ndarray]]
                 ) -> list[list[np.ndarray]]:
    """The step package (of step_graph(graph)) on the board over the stream,
    the state carried from each step's outputs to the next step's inputs."""
    import aot
    from aot.deploy import run_package

    state = initial_state(graph)
    n_out = len(graph.outputs)
    out = []

    def one(run, inputs):
        got = run(list(inputs) + state)
        if len(got) != n_out + len(state):
            raise AotError(f"the step package gives {len(got)} outputs, expected "
                           f"{n_out + len(state)}")
        return got

    if board.transport == "qemu-system":
        def run(xs):
            return run_package(pkg, board, xs, warmup=0, runs=1).outputs
        for inputs in steps:
            got = one(run, inputs)
            state = [np.asarray(s) for s in got[n_out:]]
            out.append(got)
        return out
    with aot.connect(board) as dev:
        for inputs in steps:
            got = one(lambda xs: dev.request(pkg, xs).outputs, inputs)
            state = [np.asarray(s) for s in got[n_out:]]
            out.append(got)
    return out


def compare_streams(graph: Graph, got: list[list[np.ndarray]], want: list[list[np.ndarray]]
                    ) -> dict:
    """{ok, steps, first_mismatch: {step, tensor} | None, nonzero_output_steps}:
    every output and state tensor bit for bit (integers) or within 1e-5 (floats)."""
    names = list(graph.outputs) + state_names(graph)
    first = None
    for k, (g, w) in enumerate(zip(got, want)):
        if len(g) != len(names) or len(w) != len(names):
            raise AotError(f"step {k}: {len(g)} and {len(w)} tensors to compare, "
                           f"expected {len(names)} (outputs and state)")
        for name, a, b in zip(names, g, w):
            a, b = np.asarray(a), np.asarray(b).reshape(np.shape(a))
            same = (np.allclose(a, b, rtol=1e-5, atol=1e-5) if a.dtype.kind == "f"
                    else np.array_equal(a, b))
            if not same and first is None:
                first = {"step": k, "tensor": name,
                         "max_abs": float(np.max(np.abs(a.astype(np.float64) - b)))}
    zero = [_zero_output(graph, o) for o in graph.outputs]
    nonzero = sum(any(np.any(np.asarray(s[i]) != zero[i]) for i in range(len(zero))) for s in want)
    return {"ok": first is None and len(got) == len(want), "steps": len(want),
            "first_mismatch": first, "nonzero_output_steps": int(nonzero)}


def _zero_output(graph: Graph, name: str):
    q = graph.types[name].quant
    return q.zero_point[0] if q is not None else 0


def feature_stream(graph: Graph, steps: int, seed: int = 0) -> list[list[np.ndarray]]:
    """`steps` inputs shaped like spectrogram frames: smooth band energies (a
    product of slow waves over time and frequency, plus noise) in the input's
    range. Uniform random int8 frames almost never wake a wake-word model;
    these do now and then, so the outputs are compared away from zero too."""
    rng = np.random.default_rng(seed)
    out = []
    params = []
    for name in graph.inputs:
        ty = graph.types[name]
        base, amp = rng.uniform(-0.5, 0.45), rng.uniform(0.02, 0.47)
        w = rng.uniform((0.02, 0.05), (0.5, 0.6))
        ph, noise = rng.uniform(0, 2 * np.pi, size=2), rng.uniform(0, 0.12)
        params.append((ty, base, amp, w, ph, noise))
    for k in range(steps):
        step = []
        for ty, base, amp, w, ph, noise in params:
            shape = ty.shape or (1,)
            frames = int(np.prod(shape[:-1], dtype=np.int64))
            t = (k * frames + np.arange(frames))[:, None]
            f = np.arange(shape[-1])[None, :]
            u = base + amp * np.sin(w[0] * t + ph[0]) * np.cos(w[1] * f + ph[1]) \
                + rng.normal(0, noise, size=(frames, shape[-1]))
            step.append(_from_unit(np.clip(u, -0.5, 0.5), ty.dtype).reshape(ty.shape))
        out.append(step)
    return out


def _from_unit(u: np.ndarray, dtype: str) -> np.ndarray:
    """[-0.5, 0.5] -> the dtype's range (floats: [-1, 1])."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return (2 * u).astype(dt)
    info = np.iinfo(dt)
    return np.clip(np.round(info.min + (u + 0.5) * (info.max - info.min)),
                   info.min, info.max).astype(dt)


MIN_STEPS = 50


def streams(path: Path, graph: Graph) -> bool:
    """Whether `aot verify` checks this model over a stream: a TFLite model
    whose every state update is a tensor of its subgraph (resource
    variables; an LSTM's state updates are internal to the kernel)."""
    if Path(path).suffix.lower() != ".tflite" or not graph.variables:
        return False
    from aot.frontend.tflite.schema import decode, unique_names
    names = set(unique_names(decode(Path(path).read_bytes()).tensors))
    return all(graph.updates.get(v) in names for v in graph.variables)


def stream_inputs(graph: Graph, dataset, count: int, seed: int, limit: int | None = None
                  ) -> tuple[str, list]:
    """(origin, steps): a dataset's samples in order, its first `limit` (float
    data for a quantized input quantized as TFLite does), else max(count,
    MIN_STEPS) feature-like steps."""
    if dataset is not None:
        from aot.check.dataset import load_dataset
        from aot.check.validate import quantize_samples
        return "dataset", quantize_samples(load_dataset(dataset, graph, limit), graph)[0]
    return "stream", feature_stream(graph, max(count, MIN_STEPS), seed)


def verify_stream(path: Path, graph: Graph, board, name: str, where: Path, codegen: str,
                  steps: list, origin: str, tol, **package_kwargs) -> dict:
    """`aot verify` of a streaming model: its step package on the board and
    tflite-micro over the same stream, each output and each state tensor
    after every step (the result has one row per output, then per state)."""
    from aot.packaging.build import as_graph
    from aot.packaging.build import package_graph
    from aot.check.validate import output_metrics

    info = package_graph(as_graph(step_graph(graph)), board, where, codegen, name,
                         **package_kwargs)
    got = board_stream(info.path, board, graph, steps)
    want = tflm_stream(path, graph, steps)
    report = compare_streams(graph, got, want)
    names = list(graph.outputs) + state_names(graph)
    rows = [output_metrics(n, [g[k] for g in got], [w[k].reshape(np.shape(g[k]))
                                                   for g, w in zip(got, want)],
                           graph.types[n], tol)
            for k, n in enumerate(names)]
    return {"ok": all(r["ok"] for r in rows), "reference": "tflite-micro", "inputs": origin,
            "samples": len(steps), "count": len(steps), "model": str(path),
            "board": board.name, "outputs": rows, "package": info.summary(),
            "stream": {"steps": report["steps"], "state": state_names(graph),
                       "nonzero_output_steps": report["nonzero_output_steps"],
                       "first_mismatch": report["first_mismatch"]}}


def run_stream(model: str | Path, inputs, board=None, codegen: str = "c",
               **load_kwargs) -> dict[str, np.ndarray]:
    """What `aot run --stream` does: run a stateful model over a stream on
    `board`, the state kept from step to step from its initial value.
    `inputs`: {input name: array} or a list in input order, each with a
    leading step axis ([steps, *input shape]); the result is {output name:
    array [steps, *output shape]}."""
    return run_stream_with_rows(model, inputs, board, codegen, **load_kwargs)[0]


def run_stream_with_rows(model, inputs, board, codegen: str, **load_kwargs
                         ) -> tuple[dict[str, np.ndarray], list[dict]]:
    """run_stream's outputs, and the step package's metadata rows of the
    model's outputs (`aot run --stream` names its files by them)."""
    import tempfile

    import aot
    from aot.packaging.build import as_graph
    from aot.packaging.build import package_graph
    from aot.targets import get_board

    from aot.frontend.source import as_model, is_package_dir

    path = as_model(model)
    if is_package_dir(path):
        raise AotError(f"{path} is a package directory: a stream runs from the model file "
                       "(packaged step by step, the state carried between steps); a package "
                       "directory is not supported yet")
    brd = get_board(board)
    graph = aot.load(path, **load_kwargs)
    if not graph.variables:
        raise AotError(f"{path.name} has no state: a stream is for a stateful model (run its "
                       "inputs one by one)")
    steps = _steps(graph, inputs)
    with tempfile.TemporaryDirectory(prefix="aot-") as tmp:
        info = package_graph(as_graph(step_graph(graph)), brd, Path(tmp) / "pkg", codegen,
                             graph.name)
        got = board_stream(info.path, brd, graph, steps)
        rows = info.metadata["outputs"][:len(graph.outputs)]
    return ({name: np.stack([np.asarray(g[k]) for g in got])
             for k, name in enumerate(graph.outputs)}, rows)


def _steps(graph: Graph, inputs) -> list[list[np.ndarray]]:
    """Per step the model's inputs, from arrays with a leading step axis."""
    if isinstance(inputs, dict):
        unknown = sorted(set(inputs) - set(graph.inputs))
        if unknown:
            raise AotError(f"the model has no input '{unknown[0]}' "
                           f"(inputs: {', '.join(graph.inputs)})")
        missing = [n for n in graph.inputs if n not in inputs]
        if missing:
            raise AotError(f"input '{missing[0]}' is missing")
        arrays = [np.asarray(inputs[n]) for n in graph.inputs]
    else:
        arrays = [np.asarray(a) for a in inputs]
        if len(arrays) != len(graph.inputs):
            raise AotError(f"{len(arrays)} inputs for a model with {len(graph.inputs)}")
    counts = set()
    for name, a in zip(graph.inputs, arrays):
        ty = graph.types[name]
        if a.shape[1:] != tuple(ty.shape) or a.ndim != len(ty.shape) + 1:
            raise AotError(f"input '{name}': a stream of {ty.dtype}{list(ty.shape)} needs shape "
                           f"[steps, {', '.join(map(str, ty.shape))}], got {list(a.shape)}")
        if a.dtype != np.dtype(ty.dtype):
            raise AotError(f"input '{name}': {a.dtype} values for a {ty.dtype} input")
        counts.add(a.shape[0])
    if len(counts) != 1 or 0 in counts:
        raise AotError(f"the inputs' step counts differ or are zero: {sorted(counts)}")
    return [[a[k] for a in arrays] for k in range(counts.pop())]
