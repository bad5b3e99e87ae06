"""The package's README.md: what a firmware project needs first, from the
package's metadata (templates/README.md.j2). The entry points are read from
the package's own header, so the README shows the declarations the header
makes, whatever options shaped them (pools, threads)."""
from __future__ import annotations

import math
import re
from typing import Any


def entry_points(header: str, name: str) -> list[str]:
    """The function declarations of `<name>.h`, one line each."""
    found = re.findall(rf"^(?:int|void) {re.escape(name)}_\w+\([^;]*\);", header, re.M)
    return [" ".join(decl.split()).replace("( ", "(") for decl in found]


def _quant_text(q: dict[str, Any] | None) -> str:
    if q is None:
        return "-"
    if q["axis"] is None:
        return f"scale {q['scale'][0]:.9g}, zero point {q['zero_point'][0]}"
    return f"per channel on axis {q['axis']} ({len(q['scale'])} scales)"


def _tensor_rows(tensors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from aot.executor.entry import c_type
    from aot.support.report import md_code

    return [{"name": md_code(t["name"]), "member": t["c_name"], "dtype": t["dtype"],
             "ctype": c_type(t["dtype"]), "count": math.prod(t["shape"]),
             "shape": "x".join(map(str, t["shape"])) or "scalar", "bytes": t["bytes"],
             "quant": _quant_text(t.get("quant"))} for t in tensors]


def readme_template():
    """The README's template, compiled once a process (build_into asks for
    it while the compilers run: on a cold cache compiling it is ~0.03 s)."""
    from aot.executor.entry import template_environment

    return template_environment().get_template("README.md.j2")


def render_readme(meta: dict[str, Any], header: str) -> str:
    from aot.support.report import md_code

    return readme_template().render(
        m=meta, name=meta["name"], model=md_code(meta["model"]), entry_points=entry_points(header, meta["name"]),
        inputs=_tensor_rows(meta["inputs"]), outputs=_tensor_rows(meta["outputs"]),
        threads=meta.get("threads", 1), pools=meta.get("memory_pools"))
