"""The `aot` command line.

Every subcommand takes --json (one JSON object on stdout). Errors caused by
the input are one line on stderr and exit code 2; nothing half-written is
left behind.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from aot.errors import AotError, NotImplementedYet

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 3


# --- output helpers -----------------------------------------------------------

def emit_json(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")


def write_dir_atomically(target: Path, fill: Callable[[Path], None], force: bool) -> None:
    """Create `target` whole or not at all: fill a sibling temp dir, then rename."""
    if target.exists() and not force:
        raise AotError(f"{target} already exists (use --force to replace it)")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        fill(tmp)
        if target.exists():
            old = tmp.with_name(tmp.name + ".old")
            target.rename(old)
            tmp.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


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

    graph = aot.load(args.model)
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


# --- not yet built --------------------------------------------------------------

PLANNED = {
    "package": "compiling a model into a package (codegen and AOT executor)",
    "run": "running a package on a board",
    "verify": "verifying a package against the reference runtime",
    "bench": "benchmarking on a board",
    "inspect": "reading a package's footprint",
    "boards": "the board list (cross-compilation and emulated boards)",
}


def cmd_planned(args: argparse.Namespace) -> int:
    raise NotImplementedYet(f"'aot {args.command}' is not implemented yet: "
                            f"{PLANNED[args.command]} is planned but not built")


# --- parser ---------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    from aot import __version__

    parser = argparse.ArgumentParser(prog="aot", description="Ahead-of-time deployment "
                                     "packager: model file -> C package -> board.")
    parser.add_argument("--version", action="version", version=f"aot {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_: str, func) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
        p.set_defaults(func=func)
        return p

    g = add("graph", "print the imported, optimized graph", cmd_graph)
    g.add_argument("model", help="an .onnx or .tflite file")
    g.add_argument("--no-optimize", action="store_true", help="print the graph as imported")
    g.add_argument("--dump-ir", metavar="DIR", help="write the IR after each pass into DIR")
    g.add_argument("--force", action="store_true", help="replace an existing --dump-ir DIR")

    for name, what in PLANNED.items():
        p = add(name, what + " (not implemented yet)", cmd_planned)
        p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def fail(args_json: bool, message: str, code: int) -> int:
    print(f"aot: error: {message}", file=sys.stderr)
    if args_json:
        emit_json({"ok": False, "error": message})
    return code


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if "--json" in getattr(args, "rest", ()):  # planned commands swallow their options
        args.json = True
    try:
        return args.func(args)
    except AotError as e:
        return fail(args.json, str(e).splitlines()[0] if str(e) else type(e).__name__,
                    EXIT_USER_ERROR)
    except KeyboardInterrupt:
        print("aot: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug in aot: still one line, the traceback on request
        if os.environ.get("AOT_DEBUG"):
            raise
        return fail(args.json, f"internal error: {type(e).__name__}: {e} "
                    "(set AOT_DEBUG=1 for the traceback)", EXIT_INTERNAL_ERROR)


if __name__ == "__main__":
    sys.exit(main())
