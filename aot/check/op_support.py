"""`aot ops`: what aot supports, read from the op table and the importers'
own tables, so the listing cannot drift from the code.

- The op table (aot/ops/registry.py OPS): every op with its fusion
  pattern, its lowering (a value or kernel rule, or why it never reaches
  code generation), whether it counts MACs, and its dtypes.
- The ONNX importer (aot/frontend/onnx.py): the table's ops that have an
  ONNX schema, the com.microsoft ops it reads, the older forms it upgrades
  (UPGRADES), Constant and the control flow it resolves at import.
- The TFLite importer (aot/frontend/tflite/importer.py): its `_op_<BUILTIN>`
  converters, one per builtin operator.

An op's dtypes are found by asking its type inference: the element types
it accepts when every input has that type, over a few small shapes and one
to three inputs. An op that needs constant inputs (a shape, axes),
attributes (kernel_shape) or inputs of different types gives no probe it
accepts, and lists no dtypes ("-"): its documentation says what it takes.
Code generation may still refuse a dtype inference accepts; it says so,
naming the node.
"""
from __future__ import annotations

import warnings
from typing import Any

FORMATS = ("onnx", "tflite")
# Shapes and input counts the probe tries, first that passes wins.
_PROBE_SHAPES = ((1, 2, 4, 4), (4, 4), (4,))
_PROBE_ARITIES = (1, 2, 3)


def probe_dtypes(opdef) -> list[str]:
    """The element types (those aot packages have a C type for) the op's
    type inference accepts with all inputs of that type."""
    from aot.codegen.c import C_TYPES

    return [dtype for dtype in C_TYPES if _accepts(opdef, dtype)]


def _accepts(opdef, dtype: str) -> bool:
    from aot.ir.graph import Node, TensorType
    from aot.ops.registry import Sig

    for shape in _PROBE_SHAPES:
        for n in _PROBE_ARITIES:
            node = Node(opdef.name, "probe", tuple(f"in{i}" for i in range(n)), ("out",), {})
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    opdef.infer(Sig(node, (TensorType(shape, dtype),) * n, (None,) * n))
            except Exception:      # noqa: BLE001 - any refusal means: not this probe
                continue
            return True
    return False


def _lowering(opdef) -> str:
    if opdef.rule is not None:
        return opdef.rule.kind.value
    return f"never lowered: {opdef.never_lowered}"


def table_rows() -> list[dict[str, Any]]:
    """Every op of the table, by name."""
    import aot.lower  # noqa: F401 - attaches the compute rules to the table
    from aot.ops import OPS

    return [{"op": name, "pattern": d.pattern.name, "lowering": _lowering(d),
             "macs": d.macs is not None, "dtypes": probe_dtypes(d)}
            for name, d in sorted(OPS.items())]


def onnx_rows(table: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The op types the ONNX importer reads: name, domain, the table op it
    becomes (None: resolved at import) and how."""
    import onnx.defs

    from aot.frontend.onnx import MICROSOFT_OPS, UPGRADES
    from aot.frontend.onnx_control import CONTROL_OPS

    rows = []
    standard = {op for op in table if onnx.defs.has(op) and op not in MICROSOFT_OPS}
    for name in sorted(standard | set(UPGRADES) | set(CONTROL_OPS) | {"Constant"}):
        if name in table:
            how = "the table's op" + (", older opsets upgraded" if name in UPGRADES else "")
            rows.append(_onnx_row(name, "", table[name], how))
        elif name in UPGRADES:
            rows.append(_onnx_row(name, "", None, "an older form the importer rewrites "
                                  "into a table op"))
        elif name in CONTROL_OPS:
            rows.append(_onnx_row(name, "", None, "control flow, resolved at import into "
                                  "plain ops (docs/ops.md)"))
        else:
            rows.append(_onnx_row(name, "", None, "a constant, folded at import"))
    rows += [_onnx_row(name, "com.microsoft", table[name], "the table's op")
             for name in sorted(MICROSOFT_OPS)]
    return rows


def _onnx_row(name: str, domain: str, op: dict | None, how: str) -> dict[str, Any]:
    return {"name": name, "domain": domain, "op": op["op"] if op else None, "how": how,
            "dtypes": op["dtypes"] if op else [], "lowering": op["lowering"] if op else None}


def tflite_rows() -> list[dict[str, Any]]:
    """The builtin operators the TFLite importer converts (its `_op_*`
    methods). Which table ops a builtin becomes depends on its tensors
    (float: the ONNX-named op; int8 and int16: the tfl.* ops), so no dtypes
    are listed here: see the table's tfl.* ops and docs/ops.md."""
    from aot.frontend.tflite.importer import converted_builtins

    return [{"name": name} for name in converted_builtins()]


def supported(fmt: str | None = None) -> dict[str, Any]:
    """`aot ops --json`: the op table and both importers; with `fmt`, that
    importer's ops alone."""
    from aot.errors import AotError

    if fmt is not None and fmt not in FORMATS:
        raise AotError(f"--format {fmt}: give one of {', '.join(FORMATS)}")
    table = table_rows()
    if fmt == "onnx":
        return {"format": "onnx", "ops": onnx_rows({r["op"]: r for r in table})}
    if fmt == "tflite":
        return {"format": "tflite", "ops": tflite_rows()}
    return {"ops": table, "onnx": onnx_rows({r["op"]: r for r in table}),
            "tflite": tflite_rows()}


def dtypes_text(dtypes: list[str]) -> str:
    """A row's dtypes for the terminal, a whole kind in one word: "ints"
    (every signed and unsigned width), "floats" (16, 32 and 64 bits), "any"."""
    import numpy as np

    from aot.codegen.c import C_TYPES

    if len(dtypes) == len(C_TYPES):
        return "any"
    words, rest = [], list(dtypes)
    for word, kinds in (("ints", "iu"), ("floats", "f")):
        kind = [d for d in C_TYPES if np.dtype(d).kind in kinds]
        if all(d in dtypes for d in kind):
            words.append(word)
            rest = [d for d in rest if d not in kind]
    return ", ".join(rest + words) or "-"


def print_supported(out: dict[str, Any]) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console()
    fmt = out.get("format")
    table = Table(box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False, title={
        None: "the op table", "onnx": "ONNX op types the importer reads",
        "tflite": "TFLite builtin operators the importer converts"}[fmt])
    if fmt == "tflite":
        table.add_column("builtin")
        for r in out["ops"]:
            table.add_row(r["name"])
    elif fmt == "onnx":
        for col in ("op type", "domain", "dtypes", "how"):
            table.add_column(col, overflow="fold")
        for r in out["ops"]:
            table.add_row(r["name"], r["domain"] or "ai.onnx", dtypes_text(r["dtypes"]),
                          r["how"] if r["op"] is None else r["lowering"])
    else:
        for col in ("op", "pattern", "lowering", "dtypes"):
            table.add_column(col, overflow="fold")
        for r in out["ops"]:
            table.add_row(r["op"], r["pattern"], r["lowering"], dtypes_text(r["dtypes"]))
    console.print(table)
    if fmt is None:
        console.print(f"{len(out['ops'])} ops; the ONNX importer reads {len(out['onnx'])} op "
                      f"types, the TFLite importer {len(out['tflite'])} builtins "
                      "(aot ops --format onnx|tflite)", highlight=False)
