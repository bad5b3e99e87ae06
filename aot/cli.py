"""The `aot` command line.

Every subcommand takes --json (one JSON object on stdout). Errors caused by
the input are one line on stderr and exit code 2; nothing half-written is
left behind.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from aot.errors import EXIT_INTERRUPTED, AotError, InputError
from aot.support.fsutil import claim_output, write_dir_atomically
from aot.targets import DEFAULT_BOARD, DEFAULT_BOARD_ENV

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 3


# --- output helpers -----------------------------------------------------------

def emit_json(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")


# --- graph --------------------------------------------------------------------

def _type_json(graph, name: str) -> dict[str, Any]:
    ty = graph.types[name]
    out: dict[str, Any] = {"name": name, "shape": list(ty.shape), "dtype": ty.dtype}
    if ty.quant is not None:
        out["quant"] = {"scale": list(ty.quant.scale), "zero_point": list(ty.quant.zero_point),
                        "axis": ty.quant.axis}
    return out


def graph_json(graph) -> dict[str, Any]:
    return {
        "name": graph.name,
        "inputs": [_type_json(graph, n) for n in graph.inputs],
        "outputs": [_type_json(graph, n) for n in graph.outputs],
        "nodes": [{"op": n.op, "name": n.name, "inputs": list(n.inputs),
                   "outputs": list(n.outputs),
                   **({"ops": [m.op for m in n.attrs["body"].nodes]} if n.op == "fused" else {})}
                  for n in graph.nodes],
        "constants": len(graph.constants),
        "constant_bytes": int(sum(a.nbytes for a in graph.constants.values())),
    }


def cmd_graph(args: argparse.Namespace) -> int:
    import aot
    from aot.passes.pipeline import dump_to, optimize

    graph = aot.load(args.model, **_load_kwargs(args))
    if args.no_optimize:
        final = graph
    elif args.dump_ir:
        result = {}

        def fill(tmp: Path) -> None:
            (tmp / "00_import.txt").write_text(aot.print_graph(graph) + "\n")
            write = dump_to(tmp)
            result["graph"] = optimize(graph, lambda i, name, g: write(i + 1, name, g))
        write_dir_atomically(Path(args.dump_ir), fill, args.force)
        final = result["graph"]
    else:
        final = optimize(graph)
    if args.json:
        emit_json(graph_json(final))
    else:
        print(aot.print_graph(final))
    return 0


# --- package / run / verify / inspect / boards ----------------------------------

def _package_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--board", help="the board to build for (default: for a package directory, "
                   f"its board; else ${DEFAULT_BOARD_ENV}, else {DEFAULT_BOARD})")
    _target_args(p)
    p.add_argument("--codegen", choices=("c", "llvm"), default="c",
                   help="kernels as C source or an LLVM object (default: c)")
    p.add_argument("--tuning-records", metavar="LOG.jsonl|DB",
                   help="apply the fastest schedule per workload from an `aot tune` log or "
                   "tuning database (records of another target are skipped; docs/tuning.md)")


def _target_args(p: argparse.ArgumentParser) -> None:
    """A target in place of the board's own (aot.targets.on_board)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--target", metavar="NAME",
                   help="build with this target instead of the board's: a variant of its "
                   "core, or generic-c99 / generic-c99-clang (portable C); `aot targets` "
                   "lists them")
    g.add_argument("--target-file", metavar="FILE.toml",
                   help="build with the target this file describes (base = \"cortex-m4\" "
                   "starts from one of aot's; docs/targets.md)")


def _threads_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, default=1, metavar="N",
                   help="Linux boards: run the heavy kernels split over a pool of N threads, "
                   "outputs bit for bit the one-thread package's (default: 1, no thread code)")


def _model_args(p: argparse.ArgumentParser) -> None:
    """How a model file is loaded: input shapes and bound inputs
    (aot.frontend.shapes; a package records them in metadata.json)."""
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0xD1x...",
                   help="the static shape of an input with symbolic or unknown dimensions "
                   "(repeat per input)")
    p.add_argument("--bind", action="append", default=[], metavar="NAME=VALUE|FILE.npy",
                   help="make an input a compile-time constant: a number, a comma list or an "
                   ".npy file (repeat per input)")


def _load_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """input_shapes= and bind= for aot.load and the API's commands."""
    from aot.frontend.shapes import from_command_line

    opts = from_command_line(args.input_shape, args.bind)
    return {"input_shapes": dict(opts.input_shapes), "bind": dict(opts.bind)}


def _ssh_args(p: argparse.ArgumentParser, running: bool = True) -> None:
    """How to reach a board over SSH: overrides of the board's options and of
    the user's config file (aot.targets.config_path)."""
    g = p.add_argument_group("boards reached over SSH (override the board's options and "
                             "~/.config/aot/boards.toml)")
    g.add_argument("--host", help="the board's address")
    g.add_argument("--port", help="its SSH port (default: 22); for a microcontroller board, "
                   "the serial port its harness serves on (/dev/ttyACM0, the pty aot flash "
                   "prints for an emulated board; default: the board's serial_port)")
    g.add_argument("--known-hosts", metavar="FILE",
                   help="the known_hosts file its host key is checked against "
                   "(default: ~/.ssh/known_hosts)")
    g.add_argument("--ssh-config", metavar="FILE",
                   help="the OpenSSH client config its host name is looked up in (Host "
                   "aliases, ProxyJump, ...; default: $AOT_SSH_CONFIG, else ~/.ssh/config; "
                   "none: read none)")
    if not running:
        return
    g.add_argument("--user", help="the user to log in as (default: the board's, e.g. pi)")
    g.add_argument("--key", metavar="FILE",
                   help="a private key file (default: the ssh agent and ~/.ssh's keys)")
    g.add_argument("--exec-prefix", metavar="CMD",
                   help="prepended to the harness command on the board, e.g. 'taskset -c 3'")
    g.add_argument("--trust-new-host-key", action="store_true",
                   help="add an unknown host key to known_hosts (a changed key is still "
                   "refused)")



def _board_name(args: argparse.Namespace) -> str:
    """--board, or the board a package directory was built for, or the default."""
    if args.board:
        return args.board
    model = getattr(args, "model", None)
    if model and Path(model).is_dir():
        from aot.packaging.metadata import read_metadata

        board = read_metadata(Path(model)).get("board")
        if board:
            return str(board)
    from aot.targets import default_board_name

    return default_board_name()


def _board(args: argparse.Namespace):
    """The board of --board, with the user's config file and the command
    line's SSH options merged into its options: every command resolves its
    board here."""
    from aot.targets import get_board, get_target, on_board, target_file, with_options

    board = get_board(_board_name(args))
    chosen = getattr(args, "target", None) or getattr(args, "target_file", None)
    model = getattr(args, "model", None)
    if chosen and model and Path(model).is_dir():
        raise AotError(f"{model} is a package directory, built for its target: --target and "
                       "--target-file are for packaging a model")
    if getattr(args, "target", None):
        board = on_board(board, get_target(args.target))
    elif chosen:
        board = on_board(board, target_file(args.target_file))
    port = getattr(args, "port", None)
    if port is not None and board.transport in ("serial", "qemu-system"):
        from aot.deploy.serial_link import as_serial

        board, port = as_serial(board, port), None
    elif port is not None:
        port = _ssh_port(port)
    return with_options(board, host=getattr(args, "host", None),
                        port=port, user=getattr(args, "user", None),
                        key=getattr(args, "key", None),
                        known_hosts=getattr(args, "known_hosts", None),
                        ssh_config=getattr(args, "ssh_config", None),
                        exec_prefix=getattr(args, "exec_prefix", None),
                        trust_new_host_key=getattr(args, "trust_new_host_key", False) or None)


def _ssh_port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise InputError(f"--port {text}: an SSH port is a number from 1 to 65535 (a serial "
                         "port is for microcontroller boards)")
    return port


def _runnable_board(args: argparse.Namespace):
    """_board, refused before any work if aot cannot run code on it."""
    from aot.deploy import check_runnable

    board = _board(args)
    check_runnable(board)
    return board


def cmd_package(args: argparse.Namespace) -> int:
    from aot.api import package

    info = package(args.model, board=_board(args), codegen=args.codegen, name=args.name,
                   out_dir=args.output, io_in_arena=args.io_in_arena, force=args.force,
                   profile=args.profile, checks=args.checks, dump_tir=args.dump_tir,
                   threads=args.threads, pools=args.pools, float_io=args.float_io,
                   format=args.format, **_load_kwargs(args))
    if args.float_io and not info.metadata.get("float_io"):
        print("note: --float-io: the model has no quantized input or output; packaged as it "
              "is", file=sys.stderr)
    if args.json:
        emit_json(info.summary())
    else:
        print(f"{info.path}: arena {info.arena_bytes} bytes (lower bound "
              f"{info.arena_lower_bound_bytes}), params {info.params_bytes} bytes, "
              f"built in {info.compile_seconds:.2f} s")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from aot.packaging.formats import export_package

    out = export_package(Path(args.package), args.format, Path(args.output), args.force)
    if args.json:
        emit_json({"package": args.package, "format": args.format, "output": str(out)})
    else:
        print(f"{out}: {args.package} as {args.format}")
    return 0


def _format_arg(p: argparse.ArgumentParser, default: str | None) -> None:
    from aot.packaging.formats import FORMATS
    # checked by aot.packaging.formats (one line naming the known ones), not choices=
    p.add_argument("--format", default=default, required=default is None, metavar="FORMAT",
                   help=f"the layout: {', '.join(FORMATS)} (docs/firmware.md)"
                   + (f"; default: {default}, the package as built" if default else ""))


def _read_inputs(specs: list[str], names: list[str]) -> list[np.ndarray]:
    """--input [NAME=]FILE.npy, by name or in order."""
    from aot.support.npyfile import read_npy

    by_name: dict[str, np.ndarray] = {}
    positional = []
    for spec in specs:
        name, eq, file = spec.rpartition("=")
        if eq and name not in names:
            raise InputError(f"--input {spec}: the model has no input '{name}' "
                             f"(inputs: {', '.join(names)})")
        array = read_npy(file, f"--input {spec}")    # the header checked before any allocation
        if eq:
            by_name[name] = array
        else:
            positional.append(array)
    free = [n for n in names if n not in by_name]
    if len(positional) > len(free):
        raise InputError(f"{len(specs)} inputs given, the model takes {len(names)}")
    by_name.update(zip(free, positional))
    missing = [n for n in names if n not in by_name]
    if missing:
        raise InputError(f"no --input for {', '.join(missing)}")
    return [by_name[n] for n in names]


def _run_noting(pkg: Path, inputs: dict, board) -> tuple[dict, list[str]]:
    """(outputs, notes): aot.run's outputs and the QuantizedInput warnings it
    gave (float data quantized), which aot run prints as notes."""
    import warnings

    from aot.api import run
    from aot.deploy.host import QuantizedInput

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", QuantizedInput)
        outputs = run(pkg, inputs, board=board)
    for w in caught:        # any other warning, as it would have shown
        if not issubclass(w.category, QuantizedInput):
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return outputs, [str(w.message) for w in caught if issubclass(w.category, QuantizedInput)]


def cmd_run(args: argparse.Namespace) -> int:
    if args.out is None and args.force:
        raise InputError("--force replaces an existing --out DIR: without --out nothing is written")
    board = _runnable_board(args)
    if args.stream and args.threads != 1:
        raise AotError("run --stream --threads: not supported yet (package the model with "
                       "--threads and run its package)")
    with claim_output(args.out, args.force):       # before a long run, not after
        return (_run_stream if args.stream else _run_once)(args, board)


def _run_once(args: argparse.Namespace, board) -> int:
    import contextlib

    from aot.api import package_dir
    from aot.packaging.metadata import read_metadata

    with contextlib.ExitStack() as stack:
        pkg = package_dir(args.model, board, args.codegen, stack, threads=args.threads,
                          **_load_kwargs(args))
        meta = read_metadata(pkg)
        names = [i["name"] for i in meta["inputs"]]
        outputs, notes = _run_noting(pkg, dict(zip(names, _read_inputs(args.input, names))),
                                     board)
    extra = {"notes": notes} if notes else {}
    if not args.json:
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
    if args.out is None:
        return _show_outputs(args, [(o["name"], outputs[o["name"]]) for o in meta["outputs"]],
                             **extra)
    outs = _write_outputs(args, meta["outputs"], outputs)
    if args.json:
        emit_json({"ok": True, "outputs": outs, **extra})
    return 0


def _write_outputs(args: argparse.Namespace, specs: list[dict], outputs: dict) -> list[dict]:
    """--out DIR: DIR/<C name>.npy per output, written whole; the rows say
    the file each went to, as written (a C name is a file name; one from an
    edited metadata.json that is not keeps only its last part)."""
    out = Path(args.out)
    rows = [{"name": s["name"], "file": str(out / Path(f"{s['c_name']}.npy").name),
             "shape": s["shape"], "dtype": s["dtype"]} for s in specs]
    files = [Path(r["file"]).name for r in rows]
    twice = sorted({f for f in files if files.count(f) > 1})
    if twice:
        raise InputError(f"--out {out}: two outputs would both be written to {twice[0]} "
                         "(their C names in metadata.json collide)")

    def fill(tmp: Path) -> None:
        for r, file in zip(rows, files):
            np.save(tmp / file, outputs[r["name"]])
    write_dir_atomically(out, fill, args.force)
    if not args.json:
        for r in rows:
            print(f"{r['file']}: {r['name']} {r['dtype']}{r['shape']}")
    return rows


def _run_stream(args: argparse.Namespace, board) -> int:
    """aot run --stream: each input file holds the steps ([steps, *shape]),
    each output file gets them likewise."""
    from aot.check.streaming import run_stream_with_rows

    graph_inputs = _stream_input_names(args)
    outputs, rows = run_stream_with_rows(args.model, dict(zip(graph_inputs, _read_inputs(
        args.input, graph_inputs))), board, args.codegen, **_load_kwargs(args))
    if args.out is None:
        return _show_outputs(args, [(r["name"], outputs[r["name"]]) for r in rows],
                             steps=int(outputs[rows[0]["name"]].shape[0]) if rows else 0)
    outs = _write_outputs(args, [{**r, "shape": list(outputs[r["name"]].shape)} for r in rows],
                          outputs)
    if args.json:
        emit_json({"ok": True, "steps": int(outs[0]["shape"][0]) if outs else 0,
                   "outputs": outs})
    return 0


def _show_outputs(args: argparse.Namespace, outputs: list[tuple[str, np.ndarray]],
                  **extra: Any) -> int:
    """aot run without --out: each output's shape, dtype and a summary of
    its values on stdout (--json: the same as one object), no file written."""
    from aot.check.output_summary import summarize, summary_lines

    summaries = [summarize(name, array) for name, array in outputs]
    if args.json:
        emit_json({"ok": True, **extra, "outputs": summaries})
    else:
        for s in summaries:
            print(*summary_lines(s), sep="\n")
    return 0


def _stream_input_names(args: argparse.Namespace) -> list[str]:
    import aot
    if Path(args.model).is_dir():
        raise AotError(f"{args.model} is a package directory: --stream runs from the model "
                       "file (packaged step by step); a package directory is not supported yet")
    return list(aot.load(args.model, **_load_kwargs(args)).inputs)


def cmd_verify(args: argparse.Namespace) -> int:
    from aot.api import verify
    from aot.support.report import check_report_path, verify_document, write_report

    report = check_report_path(args.report) if args.report else None    # before the run
    out = verify(args.model, board=_runnable_board(args), codegen=args.codegen, count=args.count,
                 checks=args.checks, dataset=args.dataset, atol=args.atol, rtol=args.rtol,
                 source=args.source, threads=args.threads, float_io=args.float_io,
                 limit=args.limit, **_load_kwargs(args))
    if report is not None:
        write_report(report, verify_document(out))
    if args.json:
        emit_json(out.to_json())
    else:
        _print_verify(out)
    return 0 if out["ok"] else 1


def _print_verify(out: dict[str, Any]) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    def num(x, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    n = out["samples"]
    # Errors are in real values (a quantized output dequantized), max LSB in
    # its quantization steps: docs/deploy.md "Validation on your data".
    table = Table(title=f"{Path(out['model']).name} on {out['board']}", box=box.SIMPLE_HEAD,
                  collapse_padding=True, pad_edge=False)
    table.add_column("output", overflow="fold")     # a long name folds, numbers stay whole
    for col in ("max |err|", "rmse", "l2r", "cosine", "top-1", "max LSB", "ok"):
        table.add_column(col, justify="right", no_wrap=True, min_width=len(col))
    for r in out["outputs"]:
        top1 = r["top1_agreement"]
        table.add_row(r["name"], num(r["max_abs"], ".3g"), num(r["rmse"], ".3g"),
                      num(r["l2r"], ".3g"), num(r["cosine"], ".6f"),
                      "-" if top1 is None else f"{100 * top1:.1f}%", num(r["max_lsb"], "d"),
                      "yes" if r["ok"] else "[red]NO[/red]")
    console = Console()
    console.print(table)
    for r in out["outputs"]:
        if "error" in r:
            console.print(f"{r['name']}: {r['error']}", markup=False)
        elif r.get("step"):
            console.print(f"{r['name']}: dequantized by the model in steps of {r['step']:.4g}, "
                          "held to one step unless --atol is given", markup=False)
        if r.get("nan_matched"):
            console.print(f"{r['name']}: {r['nan_matched']} elements NaN on the board where the "
                          "reference has NaN too (they agree)", markup=False)
    for note in out.get("notes", ()):
        console.print(f"note: {note}", markup=False)
    runs = f"{n} samples, " if n > 1 else ""
    if out.get("float_io"):     # the reference's own int8 I/O, wrapped as the package is
        runs = "float I/O: inputs quantized and outputs dequantized as TFLite does; " + runs
    if "stream" in out:     # a stateful model: one stream, its state compared after each step
        s = out["stream"]
        runs = (f"a stream of {s['steps']} steps, outputs and {len(s['state'])} state tensors; "
                f"{s['nonzero_output_steps']} steps with an output off zero; ")
    print(f"{'OK' if out['ok'] else 'MISMATCH'} against {out['reference']} "
          f"({runs}{out['inputs']} inputs)")


def cmd_inspect(args: argparse.Namespace) -> int:
    from aot.packaging.footprint import library_footprint, memory_summary
    from aot.packaging.metadata import read_metadata

    pkg = Path(args.package)
    meta = read_metadata(pkg)
    lib = pkg / "lib" / f"lib{meta['name']}.a"
    if not lib.is_file():
        raise AotError(f"{pkg}: {lib.relative_to(pkg)} is missing")
    fp = library_footprint(lib)
    out = {"package": str(pkg), "name": meta["name"], "board": meta["board"],
           "codegen": meta["codegen"], "arena_bytes": meta["arena_bytes"],
           "arena_lower_bound_bytes": meta["arena_lower_bound_bytes"],
           "params_bytes": meta["params_bytes"], "state_bytes": meta.get("state_bytes", 0),
           "footprint": fp,
           "memory": memory_summary(fp, meta["arena_bytes"], meta.get("state_bytes", 0))}
    if args.json:
        emit_json(out)
        return 0
    print(f"{meta['name']} for {meta['board']} ({meta['codegen']} codegen)")
    print(f"  arena   {meta['arena_bytes']:>10} bytes (lower bound "
          f"{meta['arena_lower_bound_bytes']})")
    for kind in ("text", "rodata", "weights", "data", "bss", "unwind"):
        print(f"  {kind:<7} {fp[kind]:>10} bytes")
    mem = out["memory"]
    print(f"  flash   {fp['flash']:>10} bytes: code {mem['code_bytes']}, weights "
          f"{mem['weight_bytes']}, other {fp['flash'] - mem['code_bytes'] - mem['weight_bytes']}")
    print(f"  ram     {fp['ram']:>10} bytes: arena {mem['arena_bytes']}, state "
          f"{mem['state_bytes']}, other data+bss {mem['other_ram_bytes']}")
    return 0


def cmd_boards(args: argparse.Namespace) -> int:
    from aot.targets import boards

    # cpu: the core the board's transport models (an emulator's -cpu), else
    # the one its target tunes for.
    rows = [{"name": b.name, "target": b.target.name, "triple": b.target.triple,
             "cpu": str(b.options.get("cpu", b.target.cpu)), "transport": b.transport,
             "emulated": b.emulated, "options": dict(b.options),
             "description": b.description, "flash_bytes": b.flash_bytes,
             "ram_bytes": b.ram_bytes} for b in boards().values()]
    if args.json:
        emit_json({"boards": rows})
    else:
        print(f"{'BOARD':<16} {'TARGET':<20} {'CPU':<14} {'REACHED BY':<12} DESCRIPTION")
        for r in rows:
            print(f"{r['name']:<16} {r['target']:<20} {r['cpu']:<14} {r['transport']:<12} "
                  f"{r['description']}")
    return 0


def cmd_targets(args: argparse.Namespace) -> int:
    from aot.targets import target_origins, targets

    origins = target_origins()
    rows = [{"name": t.name, "triple": t.triple, "cpu": t.cpu, "vector_bits": t.vector_bits,
             "cc": t.cc, "portable": t.portable, "base": origins[name].raw.get("base"),
             "source": origins[name].origin} for name, t in sorted(targets().items())]
    if args.json:
        emit_json({"targets": rows})
    else:
        print(f"{'TARGET':<20} {'TRIPLE':<36} {'CPU':<13} {'VECTOR':>6}  {'CC':<18} FROM")
        for r in rows:
            print(f"{r['name']:<20} {r['triple'] or '(from the board)':<36} {r['cpu']:<13} "
                  f"{r['vector_bits']:>6}  {r['cc']:<18} {r['source']}")
    return 0


def cmd_ops(args: argparse.Namespace) -> int:
    from aot.check.op_support import print_supported, supported

    out = supported(args.format)
    if args.json:
        emit_json(out)
    else:
        print_supported(out)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from aot.doctor import print_report, report

    rep = report()
    if args.json:
        emit_json(rep.as_json())
    else:
        print_report(rep)
    return 0 if rep.ok else 1


# --- bench ----------------------------------------------------------------------

def cmd_bench(args: argparse.Namespace) -> int:
    from aot.api import bench

    if args.boards is not None:
        return _bench_matrix(args)
    if args.more_models or args.cluster or args.farm:
        raise AotError("several models, --cluster and --farm go with --boards B1,B2,...")
    out = bench(args.model, board=_runnable_board(args), codegen=args.codegen, warmup=args.warmup,
                repeat=args.repeat, profile=args.profile, plot=args.plot, threads=args.threads,
                trace=args.trace, **_load_kwargs(args))
    if args.json:
        emit_json(out.to_json())
    else:
        _print_bench(out)
        if "profile" in out:
            _print_profile(out["profile"])
    return 0


def _bench_matrix(args: argparse.Namespace) -> int:
    """aot bench MODELS... --boards B1,B2: every model on every board kind,
    over a Ray farm with --cluster, else here one after another."""
    from aot.api import bench
    from aot.deploy import check_runnable
    from aot.targets import get_board
    from aot.tune.farm import bench_farm, parse_boards
    from aot.tune.records import applied_records

    if args.profile or args.plot or args.trace or args.threads != 1:
        raise AotError("--profile, --plot, --trace and --threads are for one model on one "
                       "board, not --boards")
    models = [args.model, *args.more_models]
    if any(Path(m).is_dir() for m in models):
        raise AotError("--boards packages each model for every board: give models, "
                       "not package directories")
    boards = parse_boards(args.boards)
    kinds = list(dict.fromkeys(boards))
    for name in kinds:
        check_runnable(get_board(name))
    if args.farm and not args.cluster:
        raise AotError("--farm describes the boards of a Ray cluster: give --cluster too")
    if args.cluster:
        out = bench_farm(models, boards, args.cluster, args.farm, codegen=args.codegen,
                         warmup=args.warmup, repeat=args.repeat,
                         tuning_records=args.tuning_records, **_load_kwargs(args))
    else:
        cells = []
        for m in models:
            for k in kinds:
                with applied_records(args.tuning_records, get_board(k).target):
                    r = bench(m, board=k, codegen=args.codegen, warmup=args.warmup,
                              repeat=args.repeat, **_load_kwargs(args))
                cell = {"model": m, "board": k, "median_ms": r["median_ms"],
                        "min_ms": r["min_ms"], "max_ms": r["max_ms"], "repeat": args.repeat,
                        "warmup": args.warmup}
                if "median_instructions" in r:
                    cell["median_instructions"] = r["median_instructions"]
                cells.append(cell)
        out = {"cells": cells, "boards": boards}
    if args.json:
        emit_json(out)
        return 0
    from rich.console import Console
    from rich.table import Table
    table = Table(title=f"{len(models)} models x {len(kinds)} boards")
    for col in ("model", "board", "median ms", "min ms", "median instructions"):
        table.add_column(col, justify="left" if col in ("model", "board") else "right")
    for c in out["cells"]:
        table.add_row(Path(c["model"]).name, c["board"], f"{c['median_ms']:.3f}",
                      f"{c['min_ms']:.3f}", f"{c['median_instructions']:,}"
                      if "median_instructions" in c else "")
    Console().print(table)
    return 0


def _print_profile(kernels: list[dict[str, Any]]) -> None:
    """The per-kernel table of `aot bench --profile` (its JSON "profile" rows),
    each kernel on a slow path of its family (a cliff) marked and named
    below the table."""
    from aot.check.timing import CLIFF
    from rich.console import Console
    from rich.table import Table

    table = Table(title="per kernel (median of the profiled runs, ns clock)")
    table.add_column("step", justify="right")
    table.add_column("kernel")
    table.add_column("median us", justify="right")
    table.add_column("share %", justify="right")
    table.add_column("MACs", justify="right")
    table.add_column("MACs/us", justify="right")
    table.add_column("cliff")
    counted = any("median_instructions" in k for k in kernels)
    if counted:
        table.add_column("instructions", justify="right")
    for k in kernels:
        rate = k.get("macs_per_us")
        row = [str(k["step"]), k["name"], f"{k['median_ms'] * 1000:.2f}",
               f"{100 * k['share']:.1f}",
               f"{k['macs']:,}" if k.get("macs") is not None else "",
               f"{rate:,.0f}" if rate and k.get("macs") else "",
               "<< cliff" if k.get("cliff") else ""]
        if counted:
            row.append(f"{k.get('median_instructions', 0):,}")
        table.add_row(*row, style="bold red" if k.get("cliff") else None)
    console = Console()
    console.print(table)
    for k in kernels:
        if k.get("cliff"):
            console.print(f"cliff: step {k['step']} {k['name']} runs at {k['macs_per_us']:,.0f} "
                          f"MACs/us, below {CLIFF:.0%} of the best kernel of its family "
                          f"({k['family']}) here: a slow path",
                          style="bold red", highlight=False)


def _print_bench(out: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    cols = ("median", "mean", "min", "max", "std")
    table = Table(title=f"{out['model']} on {out['board']} ({out['codegen']})",
                  caption=f"{out['repeat']} runs after {out['warmup']} warm-up, on the "
                  f"{'emulator' if out.get('emulated') else 'board'} (1 us clock)")
    for col in cols:
        table.add_column(f"{col} ms", justify="right")
    row = [f"{out[f'{col}_ms']:.3f}" for col in cols]
    if "median_instructions" in out:
        table.add_column("median instructions", justify="right")
        row.append(f"{out['median_instructions']:,}")
    if "median_cycles" in out:       # the device's own counter, its clock named
        hz = out.get("counter_hz") or 0
        clock = f", {hz / 1e6:g} MHz" if hz else ""
        table.add_column(f"median cycles ({out['cycle_counter']}{clock})", justify="right")
        row.append(f"{out['median_cycles']:,}")
    table.add_row(*row)
    Console().print(table)
    if "note" in out:
        Console().print(f"[bold]note:[/bold] {out['note']}")


# --- analyze ---------------------------------------------------------------------

def cmd_analyze(args: argparse.Namespace) -> int:
    from aot.analysis import analyze, check_model, print_report

    check_model(args.model)     # before _board reads a directory's metadata
    # Without --board: lowered for the default board, not compiled (no code sizes).
    out = analyze(args.model, board=_board(args), plot=args.plot, codegen=args.codegen,
                  code_size=bool(args.board), pools=args.pools, report=args.report,
                  **_load_kwargs(args))
    if args.json:
        emit_json(out.to_json())
    else:
        print_report(out)
    return 0


# --- flash -----------------------------------------------------------------------

def cmd_flash(args: argparse.Namespace) -> int:
    from aot.deploy.flash import flash_plan, run_flash
    from aot.packaging.metadata import read_metadata

    pkg = Path(args.package)
    if not pkg.is_dir():
        raise InputError(f"{pkg}: not a package directory (build one with aot package MODEL "
                         "--board BOARD)")
    meta = read_metadata(pkg)
    from aot.targets import get_board

    board = get_board(args.board or meta.get("board"))
    if board.transport == "qemu-system":
        return _flash_emulated(pkg, board, meta, args)
    plan = flash_plan(pkg, board, meta, args.port)
    if not args.dry_run:
        run_flash(plan)
    if args.json:
        emit_json({"board": plan.board, "flasher": plan.flasher, "image": str(plan.image),
                   "command": list(plan.command), "ran": not args.dry_run})
    else:
        print(f"image:   {plan.image}")
        print(f"command: {plan.command_line}")
        if not args.dry_run:
            print(f"{plan.board}: flashed")
    return 0


def _flash_emulated(pkg: Path, board, meta: dict, args: argparse.Namespace) -> int:
    """aot flash on an emulated board: QEMU runs the harness with its UART on
    a pty, printed for --port, until it is stopped (Ctrl-C)."""
    import shlex

    from aot.deploy.qemu_serial import serial_command, start_qemu_board

    if meta.get("board") != board.name:
        raise AotError(f"{pkg} was built for board '{meta.get('board')}', not '{board.name}'")
    if args.port is not None:
        raise AotError(f"--port: QEMU gives board '{board.name}' a new pty, printed here")
    if args.dry_run:
        command = serial_command(board)
        if args.json:
            emit_json({"board": board.name, "command": command, "ran": False})
        else:
            print(f"command: {shlex.join(command)} (in {pkg / 'bench'})")
        return 0
    qemu = start_qemu_board(pkg, board)
    if args.json:
        emit_json({"board": board.name, "serial_port": qemu.port, "pid": qemu.process.pid,
                   "ran": True})
    else:
        print(f"serial port: {qemu.port}")
        print(f"{board.name}: QEMU runs {pkg}; reach it with --board {board.name} --port "
              f"{qemu.port}; Ctrl-C stops it")
    sys.stdout.flush()
    code = _wait_for_qemu(qemu.process)
    if code is None:
        return 0
    if code != 0:
        raise AotError(f"QEMU stopped with exit code {code} on board '{board.name}'")
    return 0


def _wait_for_qemu(process) -> int | None:
    """QEMU's exit code, or None when aot flash was stopped (Ctrl-C, or a
    SIGTERM, which then stops QEMU too rather than leave it running)."""
    import signal

    def stop(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        return process.wait()
    except KeyboardInterrupt:
        return None
    finally:
        signal.signal(signal.SIGTERM, previous)
        if process.poll() is None:
            process.terminate()
            process.wait()


# --- tune ------------------------------------------------------------------------

def cmd_tune(args: argparse.Namespace) -> int:
    from aot.tune import tune

    args.model = args.models[0]
    if args.boards is None and (len(args.models) > 1 or args.cluster or args.farm):
        raise AotError("several models, --cluster and --farm go with --boards B1,B2,...")
    if args.boards is not None:
        return _tune_many(args)
    out = tune(args.model, _runnable_board(args), trials=args.trials, budget=args.budget,
               log=args.output, resume=args.resume, codegen=args.codegen,
               warmup=args.warmup, repeat=args.repeat, database=args.database,
               search=args.search, seed=args.seed, **_load_kwargs(args))
    if args.json:
        emit_json(out)
        return 0
    _print_tune(out)
    return 0


def _print_tune(out: dict) -> None:
    print(f"{out['log']}: {out['trials_run']} trials on {out['board']} in {out['seconds']} s, "
          f"{out['records_written']} records; {out['improved']} of {out['tunable']} tunable "
          f"workloads faster than the default schedule"
          + (f" ({out['discarded']} batches discarded: outputs differed)"
             if out["discarded"] else ""))
    for key, best in out["best"].items():
        if best["config"]:
            print(f"  {key}  {best['desc']}: {best['ratio']:.3f} x default  "
                  f"{json.dumps(best['config'], sort_keys=True)}")


def _tune_many(args: argparse.Namespace) -> int:
    """aot tune MODELS... --boards B1,B2: one search per (model, board
    kind); over a Ray farm with --cluster, else here one after another."""
    import time
    from aot.deploy import check_runnable
    from aot.targets import get_board
    from aot.tune import tune
    from aot.tune.farm import parse_boards, tune_farm

    boards = parse_boards(args.boards)
    kinds = list(dict.fromkeys(boards))
    for name in kinds:
        check_runnable(get_board(name))
    jobs = len(args.models) * len(kinds)
    if jobs > 1 and (args.output or args.resume):
        raise AotError("-o and --resume name one log: with several models or boards, "
                       "--database DB (or each job's default log)")
    if args.farm and not args.cluster:
        raise AotError("--farm describes the boards of a Ray cluster: give --cluster too")
    options = dict(trials=args.trials, budget=args.budget, codegen=args.codegen,
                   warmup=args.warmup, repeat=args.repeat, log=args.output,
                   resume=args.resume, search=args.search, seed=args.seed,
                   **_load_kwargs(args))
    if args.cluster:
        out = tune_farm(args.models, boards, args.cluster, args.farm, database=args.database,
                        **options)
    else:
        started = time.monotonic()
        runs = [tune(m, k, database=args.database, **options)
                for m in args.models for k in kinds]
        out = {"jobs": runs, "boards": boards, "seconds": round(time.monotonic() - started, 2)}
    if args.json:
        emit_json(out)
        return 0
    for job in out["jobs"]:
        _print_tune(job)
    print(f"{len(out['jobs'])} searches in {out['seconds']} s"
          + (f" over {len(boards)} boards ({out['measurements']} measurements, "
             f"{out['retried']} batches measured again on another board)"
             if args.cluster else ""))
    return 0


def _farm_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--boards", metavar="B1,B2,...",
                   help="every model on each board kind named (a name twice: two boards of "
                   "that kind, used side by side with --cluster)")
    p.add_argument("--cluster", metavar="auto|ray://HOST:PORT",
                   help="run over a Ray cluster (pip install 'aot[farm]'): auto starts one "
                   "on this machine bound to 127.0.0.1; ray://HOST:PORT joins a running one, "
                   "which must be reachable by you alone (Ray clusters run anyone's code: "
                   "docs/tuning.md)")
    p.add_argument("--farm", metavar="FARM.toml",
                   help="which node of the cluster holds which boards (default: the nodes' "
                   "board:<name> resources)")


def _tuning_records(args: argparse.Namespace):
    """The context a command with --tuning-records runs in: its builds apply
    the log's best configs for the board's target."""
    import contextlib

    log = getattr(args, "tuning_records", None)
    if log is None or getattr(args, "boards", None):   # --boards: each board its own
        return contextlib.nullcontext()
    from aot.tune.records import applied_records

    model = getattr(args, "model", None)
    if model and Path(model).is_dir():
        raise AotError(f"{model} is a package directory, built with its schedules: "
                       "--tuning-records is for packaging a model")
    return applied_records(log, _board(args).target)


# --- board -----------------------------------------------------------------------

def cmd_board_trust(args: argparse.Namespace) -> int:
    from aot.deploy.known_hosts import describe
    from aot.deploy.ssh import ssh_params, trust_host_key, where

    board = _board(args)
    if board.transport != "ssh":
        raise AotError(f"board '{board.name}' is not reached over SSH "
                       f"(transport {board.transport}): it has no host key to trust")
    if board.options.get("vm"):
        raise AotError(f"board '{board.name}' is a VM aot boots: its image brings its own "
                       "known_hosts, there is nothing to trust")
    params = ssh_params(board)

    def show(key, known: bool) -> None:
        # Seen before anything is written (--json: one object, at the end).
        if not args.json:
            print(f"{where(params)} presents host key {describe(key)}", flush=True)

    key, added = trust_host_key(params, args.fingerprint, show)
    if args.json:
        emit_json({"ok": True, "board": board.name, "host": params.host, "port": params.port,
                   "key_type": key.get_name(), "fingerprint": key.fingerprint,
                   "pinned": args.fingerprint is not None,
                   "known_hosts": params.known_hosts, "added": added})
    else:
        print(f"{'added to' if added else 'already in'} {params.known_hosts}")
    return 0


def _vm_board(args: argparse.Namespace):
    board = _board(args)
    if not board.options.get("vm"):
        raise AotError(f"board '{board.name}' is not a VM aot starts (it has no vm option; "
                       "qemu-rpi4 is one)")
    return board


def cmd_board_up(args: argparse.Namespace) -> int:
    from aot.deploy import vm

    board = _vm_board(args)
    machine, started = vm.up(board)
    out = {"ok": True, "board": board.name, "started": started, "host": "127.0.0.1",
           "port": machine.port, "user": vm.USER, "key": str(machine.key),
           "known_hosts": str(machine.known_hosts), "pid": machine.pid}
    if args.json:
        emit_json(out)
    else:
        print(f"{board.name} {'is up' if started else 'was already up'}: ssh -p {machine.port} "
              f"-i {machine.key} -o UserKnownHostsFile={machine.known_hosts} root@127.0.0.1 "
              f"(qemu pid {machine.pid}; stop it with aot board down {board.name})")
    return 0


def cmd_board_down(args: argparse.Namespace) -> int:
    from aot.deploy import vm

    board = _vm_board(args)
    machine = vm.down(board)
    if args.json:
        emit_json({"ok": True, "board": board.name, "stopped": machine is not None})
    else:
        print(f"{board.name} stopped" if machine else f"{board.name} was not up")
    return 0


# --- parser ---------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    from aot import __version__

    parser = argparse.ArgumentParser(prog="aot", description="Ahead-of-time deployment "
                                     "packager: model file -> C package -> board.")
    parser.add_argument("--version", action="version", version=f"aot {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_: str, func, group=sub) -> argparse.ArgumentParser:
        p = group.add_parser(name, help=help_, description=help_)
        p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
        p.set_defaults(func=func)
        return p

    g = add("graph", "print the imported, optimized graph", cmd_graph)
    g.add_argument("model", help="an .onnx or .tflite file")
    _model_args(g)
    g.add_argument("--no-optimize", action="store_true", help="print the graph as imported")
    g.add_argument("--dump-ir", metavar="DIR", help="write the IR after each pass into DIR")
    g.add_argument("--force", action="store_true", help="replace an existing --dump-ir DIR")

    p = add("package", "compile a model into a package built for a board", cmd_package)
    p.add_argument("model", help="an .onnx or .tflite file")
    _package_args(p)
    _model_args(p)
    p.add_argument("-o", "--output", metavar="DIR", help="the package directory (default: ./NAME)")
    p.add_argument("--name", help="the C name of the model (default: from the file name)")
    p.add_argument("--io-in-arena", action="store_true",
                   help="place inputs and outputs inside the arena")
    p.add_argument("--pools", action="store_true",
                   help="split the arena over the board's RAM banks, the hottest tensors in "
                   "the fastest (one pool per bank, <name>_run_with_pools)")
    p.add_argument("--force", action="store_true", help="replace an existing package directory")
    p.add_argument("--profile", action="store_true",
                   help="time every kernel call (-DAOT_PROFILE; aot bench --profile)")
    p.add_argument("--checks", action="store_true",
                   help="the harness guards every buffer and checks it after each run "
                   "(-DAOT_CHECKS)")
    p.add_argument("--dump-tir", metavar="DIR",
                   help="write each kernel's TIR as lowered and after each TIR pass into DIR "
                   "(replaced with --force)")
    p.add_argument("--float-io", action="store_true",
                   help="float32 in place of the model's quantized inputs and outputs, "
                   "quantized and dequantized by the run as TFLite does")
    _threads_arg(p)
    _format_arg(p, "cmake")

    p = add("export", "write a built package in a firmware framework's layout", cmd_export)
    p.add_argument("package", help="a package directory")
    _format_arg(p, None)
    p.add_argument("-o", "--output", metavar="DIR", required=True, help="the directory to write")
    p.add_argument("--force", action="store_true", help="replace an existing DIR")

    p = add("run", "run a model or a package on a board", cmd_run)
    p.add_argument("model", metavar="MODEL_OR_PACKAGE")
    _package_args(p)
    _model_args(p)
    p.add_argument("--input", action="append", default=[], metavar="[NAME=]FILE.npy",
                   help="an input tensor (repeat; by name or in order)")
    p.add_argument("--out", metavar="DIR", help="writes DIR/<output's C name>.npy per output "
                   "(default: print each output's shape, dtype, min/max/mean and top 5)")
    p.add_argument("--force", action="store_true", help="replace an existing --out DIR")
    p.add_argument("--stream", action="store_true",
                   help="a stateful model over a stream: each input file holds the steps "
                   "([steps, *shape]), the state is kept from step to step, each output file "
                   "gets [steps, *shape]")
    _threads_arg(p)
    _ssh_args(p)

    p = add("verify", "package, run on the board and compare with the reference runtime",
            cmd_verify)
    p.add_argument("model", metavar="MODEL_OR_PACKAGE",
                   help="an .onnx or .tflite file, or a package directory (run as built, "
                   "against the model it was built from)")
    _package_args(p)
    _model_args(p)
    p.add_argument("--dataset", metavar="FILE.npz|DIR",
                   help="the inputs: an .npz with one array per input name (a leading sample "
                   "axis), or a directory of one .npz/.npy per sample; read and run a batch "
                   "at a time")
    p.add_argument("--limit", type=int, metavar="N",
                   help="with --dataset: its first N samples only")
    p.add_argument("--count", type=int, default=1, metavar="N",
                   help="N random inputs through one serve session (default: 1, the saved "
                   "input if there is one)")
    p.add_argument("--atol", type=float, metavar="A",
                   help="pass when |error| <= A * max(1, max|reference|) + R * |reference| "
                   "and ||error|| <= R * ||reference|| + A * sqrt(size) (default 1e-4; "
                   "integer outputs: bit-exact unless --atol or --rtol is given, then A "
                   "unscaled)")
    p.add_argument("--rtol", type=float, metavar="R", help="see --atol (default 1e-4)")
    p.add_argument("--model", dest="source", metavar="FILE",
                   help="for a package directory: the model it was built from (default: "
                   "the file its metadata.json names)")
    p.add_argument("--checks", action="store_true",
                   help="package with the harness's guard bytes (aot package --checks)")
    p.add_argument("--float-io", action="store_true",
                   help="package with float inputs and outputs (aot package --float-io)")
    p.add_argument("--report", metavar="FILE.md|FILE.html",
                   help="write the result per output (errors, tolerance, match) as a "
                   "Markdown report, HTML when FILE ends in .html")
    _threads_arg(p)
    _ssh_args(p)

    p = add("inspect", "a package's footprint, from the ELF objects of its library", cmd_inspect)
    p.add_argument("package", help="a package directory")

    p = add("bench", "time a model or a package on a board", cmd_bench)
    p.add_argument("model", metavar="MODEL_OR_PACKAGE")
    p.add_argument("more_models", nargs="*", metavar="MODEL",
                   help="more models, each on every board of --boards")
    _package_args(p)
    _model_args(p)
    _farm_args(p)
    p.add_argument("--repeat", type=int, default=100, metavar="N",
                   help="timed runs (default: 100)")
    p.add_argument("--warmup", type=int, default=10, metavar="W",
                   help="untimed runs first (default: 10)")
    p.add_argument("--profile", action="store_true",
                   help="time every kernel too (a model is packaged with --profile)")
    p.add_argument("--plot", metavar="FILE.png", help="with --profile: a bar chart per kernel")
    p.add_argument("--trace", metavar="FILE.json",
                   help="with --profile: every profiled run's kernel calls as a trace for "
                   "Perfetto or chrome://tracing (trace-event JSON)")
    _threads_arg(p)
    _ssh_args(p)

    p = add("analyze", "per kernel: MACs, weight and activation bytes, arena places and "
            "(with --board) code size; totals", cmd_analyze)
    p.add_argument("model", help="an .onnx or .tflite file")
    _package_args(p)
    _model_args(p)
    p.add_argument("--plot", metavar="FILE.png",
                   help="draw the memory plan and the MACs per kernel into a PNG")
    p.add_argument("--pools", action="store_true",
                   help="plan the arena over the board's RAM banks (as aot package --pools); "
                   "--plot draws each pool")
    p.add_argument("--report", metavar="FILE.md|FILE.html",
                   help="write the analysis (model, board, memory, kernels, pools) as a "
                   "Markdown report linking the --plot PNG, or HTML with the charts embedded "
                   "when FILE ends in .html")

    p = add("tune", "search kernel schedules on a board and log the fastest per workload "
            "(apply them with --tuning-records; docs/tuning.md)", cmd_tune)
    p.add_argument("models", nargs="+", metavar="model",
                   help="an .onnx or .tflite file (several with --boards)")
    p.add_argument("--board", help=f"the board to measure on (default: ${DEFAULT_BOARD_ENV}, "
                   f"else {DEFAULT_BOARD})")
    p.add_argument("--codegen", choices=("c", "llvm"), default="c",
                   help="kernels as C source or an LLVM object (default: c)")
    _model_args(p)
    p.add_argument("--trials", type=int, default=32, metavar="N",
                   help="batches of candidates, one build and run each (default: 32)")
    p.add_argument("--budget", type=float, metavar="SECONDS",
                   help="start no batch after this many seconds")
    p.add_argument("--search", choices=("random", "model"), default="random",
                   help="random: each workload's candidates drawn from its space, then the "
                   "nearest to the best; model: whole configs evolved and ranked by a cost "
                   "model trained on the measurements (needs the aot[tune] extra) "
                   "(default: random)")
    p.add_argument("--seed", type=int, default=0,
                   help="the search's random seed: the same seed, the same candidates "
                   "(default: 0)")
    p.add_argument("-o", "--output", metavar="LOG.jsonl",
                   help="the tuning log (default: ./<model>.<board>.tune.jsonl)")
    p.add_argument("--resume", action="store_true",
                   help="continue an existing log: its configs are not measured again")
    p.add_argument("--database", metavar="DB",
                   help="read and write a tuning database (SQLite, created when missing) "
                   "instead of a log: what it holds is not measured again, and new workloads "
                   "start from the nearest measured ones' best configs")
    _farm_args(p)
    p.add_argument("--repeat", type=int, default=20, metavar="N",
                   help="timed runs per package per round, 3 interleaved rounds (default: 20)")
    p.add_argument("--warmup", type=int, default=5, metavar="W",
                   help="untimed runs before each round (default: 5)")
    _ssh_args(p)

    f = add("flash", "write a package's harness onto a real microcontroller board with "
            "its flasher", cmd_flash)
    f.add_argument("package", help="a package directory built for the board")
    f.add_argument("--board", help="the board (default: the one the package was built for)")
    f.add_argument("--dry-run", action="store_true",
                   help="print the image and the flasher's command line, run nothing")
    f.add_argument("--port", help="the serial port, for flashers that write through one")

    add("boards", "list the boards aot knows", cmd_boards)
    add("targets", "list the targets aot knows: its own and $AOT_TARGETS_DIR's, with the "
        "file each comes from", cmd_targets)
    p = add("ops", "list the ops aot supports, from its op table: pattern, lowering, dtypes; "
            "with --format, the op types that importer reads", cmd_ops)
    p.add_argument("--format", choices=("onnx", "tflite"),
                   help="the ops of one model format's importer")
    add("doctor", "check this machine: every program and file aot needs, found or missing, "
        "and the boards that work now (exit 0: all found, 1: something is missing; "
        "`make setup` installs it). Programs are looked up on $AOT_TOOL_PATH instead of "
        "$PATH when it is set", cmd_doctor)

    # `aot board ACTION BOARD`: one subcommand per action, added with
    # add(name, help, func, group=board_actions).
    b = sub.add_parser("board", help="act on a board: trust its SSH host key, start or "
                       "stop a VM board", description="act on a board: trust its SSH host "
                       "key, start or stop a VM board")
    board_actions = b.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = add("trust", "add the SSH host key a board presents to known_hosts (a key that "
            "differs from the one there is refused)", cmd_board_trust, group=board_actions)
    p.add_argument("board", help="a board reached over SSH, e.g. rpi4")
    p.add_argument("--fingerprint", metavar="SHA256:...",
                   help="the key's expected fingerprint (on the board: ssh-keygen -lf "
                   "/etc/ssh/ssh_host_ed25519_key.pub); another key is refused, nothing written")
    _ssh_args(p, running=False)
    p = add("up", "boot a VM board and keep it running: later commands on it reuse it "
            "instead of booting their own", cmd_board_up, group=board_actions)
    p.add_argument("board", help="a VM board, e.g. qemu-rpi4")
    p = add("down", "stop the VM `aot board up` started (exit 0 also when none was up)",
            cmd_board_down, group=board_actions)
    p.add_argument("board", help="a VM board, e.g. qemu-rpi4")

    return parser


def fail(args_json: bool, message: str, code: int) -> int:
    print(f"aot: error: {message}", file=sys.stderr)
    if args_json:
        emit_json({"ok": False, "error": message})
    return code


# What a shell reports for a program that SIGPIPE ended: `aot graph m | head`.
EXIT_BROKEN_PIPE = 128 + 13


def _closed_stdout() -> int:
    """The reader of stdout went away (`| head`): stop quietly. Python would
    report the broken pipe again when it flushes stdout at exit, so stdout
    is pointed at /dev/null first."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from aot.support import progress
    progress.enable(not args.json)     # still off unless stderr is a terminal
    try:
        with _tuning_records(args):
            return args.func(args)
    except AotError as e:
        return fail(args.json, str(e).splitlines()[0] if str(e) else type(e).__name__,
                    EXIT_USER_ERROR)
    except KeyboardInterrupt:
        print("aot: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _closed_stdout()
    except MemoryError as e:
        # The budgets (aot.limits) refuse what they can price before it is
        # allocated; this is the rest: the process's own memory limit.
        return fail(args.json, f"out of memory: {e or 'MemoryError'} (the process's memory "
                    "limit is lower than this model needs)", EXIT_USER_ERROR)
    except Exception as e:  # a bug in aot: still one line, the traceback on request
        if os.environ.get("AOT_DEBUG"):
            raise
        return fail(args.json, f"internal error: {type(e).__name__}: {e} "
                    "(set AOT_DEBUG=1 for the traceback)", EXIT_INTERNAL_ERROR)


if __name__ == "__main__":
    sys.exit(main())
