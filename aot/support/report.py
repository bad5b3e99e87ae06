"""Report files: `aot analyze --report` and `aot verify --report`.

A report is a small document (a title, sections of paragraphs and tables,
an optional chart) rendered as Markdown, or as HTML when the file's name
ends in .html: one document, two renderings, so both say the same. The file
is kept beside the firmware, as stedgeai analyze's report is; it is written
whole or not at all, and the same analysis gives the same bytes.
"""
from __future__ import annotations

import base64
import html
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence



@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...]          # per column: right-aligned


@dataclass(frozen=True)
class Section:
    title: str
    items: tuple[str | Table, ...]     # a paragraph, or a table


@dataclass(frozen=True)
class Chart:
    """A PNG: embedded in HTML; in Markdown a link to `link` (a file beside
    the report), or left out without one."""
    png: bytes | None
    link: str | None
    caption: str


@dataclass(frozen=True)
class Document:
    title: str
    sections: tuple[Section, ...]
    chart: Chart | None = None


def is_html(path: Path) -> bool:
    return Path(path).suffix.lower() in (".html", ".htm")


def check_report_path(path: str | Path) -> Path:
    """--report's file, checked before any work: its directory exists and it
    is not a directory."""
    from aot.support.fsutil import check_output_file

    return check_output_file(path, "--report")


def write_report(path: Path, doc: Document) -> None:
    from aot.support.fsutil import write_file_atomically

    text = render_html(doc) if is_html(path) else render_markdown(doc)
    write_file_atomically(Path(path), text.encode())


def chart_link(report: Path, png: Path) -> str:
    """How the report refers to a PNG written beside it: relative to it."""
    return Path(os.path.relpath(Path(png).resolve(), Path(report).resolve().parent)).as_posix()


# ---------------------------------------------------------------- Markdown

def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def out_offsets(tensors: list[dict[str, Any]]) -> str:
    """Where a kernel writes: its outputs' arena offsets, else their place."""
    return ", ".join(str(t["offset"]) if t["place"] == "arena" else t["place"]
                     for t in tensors if t["access"] == "write")


def md_code(text: str) -> str:
    """`text` as a Markdown code span that survives any model's names: a
    fence longer than its backtick runs, `|` escaped for table cells."""
    text = text.replace("|", "\\|").replace("\n", " ")
    runs = [len(r) for r in re.findall("`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text[:1] == "`" or text[-1:] == "`" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _md_table(t: Table) -> list[str]:
    rule = ["---:" if n else "---" for n in t.numeric]
    return ["| " + " | ".join(_md_cell(h) for h in t.headers) + " |",
            "| " + " | ".join(rule) + " |",
            *("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in t.rows)]


def render_markdown(doc: Document) -> str:
    lines = [f"# {doc.title}", ""]
    for s in doc.sections:
        lines += [f"## {s.title}", ""]
        for item in s.items:
            lines += [*(_md_table(item) if isinstance(item, Table) else [item]), ""]
    if doc.chart is not None and doc.chart.link is not None:
        lines += [f"![{doc.chart.caption}](<{doc.chart.link}>)", ""]
    return "\n".join(lines)


# -------------------------------------------------------------------- HTML

_STYLE = ("body{font-family:sans-serif;max-width:72em;margin:1em auto;padding:0 1em}"
          "table{border-collapse:collapse}th,td{border:1px solid #bbb;padding:2px 6px}"
          "td.n{text-align:right;font-variant-numeric:tabular-nums}"
          "td{overflow-wrap:anywhere}img{max-width:100%}")


_NUM_CELL = '<td class="n">'


def _html_table(t: Table) -> list[str]:
    out = ["<table>", "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in t.headers)
           + "</tr>"]
    for row in t.rows:
        out.append("<tr>" + "".join((_NUM_CELL if n else "<td>") + f"{html.escape(c)}</td>"
                                    for c, n in zip(row, t.numeric)) + "</tr>")
    return [*out, "</table>"]


def render_html(doc: Document) -> str:
    title = html.escape(doc.title)
    lines = ["<!DOCTYPE html>", "<html>", "<head>", '<meta charset="utf-8">',
             f"<title>{title}</title>", f"<style>{_STYLE}</style>", "</head>", "<body>",
             f"<h1>{title}</h1>"]
    for s in doc.sections:
        lines.append(f"<h2>{html.escape(s.title)}</h2>")
        for item in s.items:
            lines += _html_table(item) if isinstance(item, Table) \
                else [f"<p>{html.escape(item)}</p>"]
    if doc.chart is not None and doc.chart.png is not None:
        data = base64.b64encode(doc.chart.png).decode()
        lines.append(f'<p><img alt="{html.escape(doc.chart.caption)}" '
                     f'src="data:image/png;base64,{data}"></p>')
    return "\n".join([*lines, "</body>", "</html>", ""])


# ---------------------------------------------------------------- analyze

def _n(x: int | None) -> str:
    return "-" if x is None else f"{x:,}"


def _kernels_table(layers: Sequence[dict[str, Any]]) -> Table:

    code = bool(layers) and "code_bytes" in layers[0]
    headers = ("step", "kernel", "ops", "MACs", "weights", "in", "out", "out @",
               *(("code",) if code else ()))
    rows = tuple((str(la["step"]), la["name"], " + ".join(la["ops"]), _n(la["macs"]),
                  _n(la["weights_bytes"]), _n(la["activations_read_bytes"]),
                  _n(la["activations_written_bytes"]), out_offsets(la["tensors"]),
                  *((_n(la["code_bytes"]),) if code else ())) for la in layers)
    return Table(headers, rows, tuple(h not in ("kernel", "ops") for h in headers))


def _memory_table(r: dict[str, Any]) -> Table:
    rows = [("arena (RAM)", _n(r["arena_bytes"]),
             f"planned; lower bound {r['arena_lower_bound_bytes']:,}"),
            ("weights (flash)", _n(r["weights_bytes"]), "section .rodata.aot"),
            ("state (RAM)", _n(r["state_bytes"]), "variables kept across runs"),
            ("inputs", _n(r["io_bytes"]["inputs"]), "the caller's buffers"),
            ("outputs", _n(r["io_bytes"]["outputs"]), "the caller's buffers")]
    if "memory" in r:
        m = r["memory"]
        rows += [("code (flash)", _n(m["code_bytes"]),
                  f"the kernels {r['kernels_code_bytes']:,}"),
                 ("flash, the library", _n(m["flash_bytes"]), "code, weights and constants"),
                 ("RAM, the library", _n(m["ram_bytes"]), "arena, state and other data")]
    else:
        rows.append(("code (flash)", "-", "give --board to compile and measure it"))
    return Table(("what", "bytes", "note"), tuple(rows), (False, True, False))


def analysis_document(r: dict[str, Any], chart: Chart | None) -> Document:
    """The `aot analyze` report (its JSON) as a document."""
    sections = [
        Section("Model", (Table(("", ""), (
            ("model", r["model"]), ("board", r["board"]), ("target", r["target"]),
            ("codegen", r["codegen"]), ("kernels", str(len(r["layers"]))),
            ("multiply-accumulates", _n(r["total_macs"]))), (False, False)),)),
        Section("Memory", (_memory_table(r),)),
        Section("Kernels", ("In call order. Bytes; weights: the constants a kernel reads; "
                            "in/out: the activations it reads and writes; out @: the arena "
                            "offsets of its outputs.", _kernels_table(r["layers"]))),
    ]
    if "memory_pools" in r:
        sections.append(Section("Pools", ("The arena split over the board's RAM banks.",
                                          Table(("pool", "bytes"), tuple(
                                              (p, _n(b)) for p, b in r["memory_pools"].items()),
                                              (False, True)))))
    return Document(f"{r['model']} for {r['board']}", tuple(sections), chart)


# ----------------------------------------------------------------- verify

def _g(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _tolerance(t: dict[str, Any] | None) -> str:
    if t is None:
        return "-"
    if t["bit_exact"]:
        return "bit-exact"
    scale = " max(1, max|ref|)" if t.get("scaled") else ""
    return f"|err| <= {t['atol']:.3g}{scale} + {t['rtol']:.3g} |ref|"


def verify_document(out: dict[str, Any]) -> Document:
    """The `aot verify` result (its JSON) as a document."""
    rows = tuple((r["name"], _g(r["max_abs"], ".3g"), _g(r["rmse"], ".3g"),
                  _g(r["cosine"], ".6f"),
                  "-" if r["top1_agreement"] is None else f"{100 * r['top1_agreement']:.1f}%",
                  _g(r["max_lsb"], "d"), _tolerance(r.get("tolerance")),
                  "yes" if r["ok"] else "NO", r.get("error", ""))
                 for r in out["outputs"])
    table = Table(("output", "max abs error", "rmse", "cosine", "top-1", "max LSB",
                   "tolerance", "match", "error"), rows,
                  (False, True, True, True, True, True, False, False, False))
    model = Path(out["model"]).name
    summary = (f"{'OK' if out['ok'] else 'MISMATCH'}: {model} on {out['board']} against "
               f"{out['reference']}, {out['samples']} sample(s), inputs: {out['inputs']}.")
    items: list[str | Table] = [summary]
    if "stream" in out:
        s = out["stream"]
        items.append(f"One stream of {s['steps']} steps; the state ({len(s['state'])} tensors) "
                     "compared after each step.")
    items += ["Errors in real values (a quantized output dequantized); max LSB in its "
              "quantization steps.", table]
    sections = [Section("Result", tuple(items))]
    pkg = out.get("package")
    if isinstance(pkg, dict) and "arena_bytes" in pkg:
        sections.append(Section("Package", (Table(("what", "bytes"), (
            ("arena", _n(pkg["arena_bytes"])), ("weights", _n(pkg["params_bytes"]))),
            (False, True)),)))
    return Document(f"Verification of {model} on {out['board']}", tuple(sections))
