"""Docs, comments and tests speak to users and maintainers: they say what a
rule is for, not who wrote it, in which work session, for which tracker
item or on which day. This greps the trees a reader sees for words of a
work log and names every file:line that has one."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("aot", "tests", "docs", "bench", "scripts", "templates", "runtime_c", "targets",
         "boards", "README.md")
SKIP_DIRS = {"__pycache__", ".pytest_cache"}

# Each pattern is precise enough that the code's own words pass: onnxruntime's
# InferenceSession, a serve or SSH session, "leading dims", a CPU that can
# "issue" several instructions a cycle.
FORBIDDEN = {
    "a work session": re.compile(r"\b(this|that|previous|last|next|earlier|later|other|another)"
                                 r" sessions?\b", re.I),
    "a session number": re.compile(r"\bsession \d+", re.I),
    "a person's role": re.compile(r"\b(the lead|lead engineer|engineers?|helper (engineer|session)s?)\b",
                                  re.I),
    "a tracker item": re.compile(r"\b(issues? ?#?\d+|the issue\b|item \d+ of)", re.I),
    "a work-item code": re.compile(r"\bH\d{1,3}\b"),
    "a date": re.compile(r"\b20\d\d-[01]\d(-[0-3]\d)?\b"),
}


def offending_lines(text: str) -> list[tuple[int, str, str]]:
    """(line number, what, line) for every line with a forbidden word."""
    hits = []
    for n, line in enumerate(text.splitlines(), 1):
        for what, pattern in FORBIDDEN.items():
            if pattern.search(line):
                hits.append((n, what, line.strip()))
    return hits


def files() -> list[Path]:
    out = []
    for tree in TREES:
        top = ROOT / tree
        candidates = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        out += [p for p in candidates
                if not SKIP_DIRS.intersection(p.relative_to(ROOT).parts)
                and p != Path(__file__).resolve()]
    return out


def read_text(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data:
        return None                     # a binary file: no prose in it
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def test_the_patterns_catch_a_work_log_and_pass_the_code():
    log = ("Measured this session by the lead, 2026-11-27.\n"
           "three other engineers ran tests meanwhile\n"
           "the split (issue 18) is item 2 of issue 16\n"
           "as H23 found in the previous session\n"
           "what the issue measured\n")
    assert [n for n, _, _ in offending_lines(log)] == [1, 1, 1, 2, 3, 4, 4, 5]
    code = ("sess = ort.InferenceSession(path)\n"
            "with SshSession(params) as session:  # one serve session per package\n"
            "lead = tuple(shape[:-1])  # the leading dims\n"
            "the A72 can issue several instructions a cycle\n"
            "h0 = init.tensor('h0')\n"
            "dropbear 2022.83, fixed upstream in 2024.86\n"
            "# --- the session API ---\n")
    assert offending_lines(code) == []


def test_no_work_log_words_in_docs_code_or_tests():
    found = []
    for path in files():
        text = read_text(path)
        if text is None:
            continue
        rel = path.relative_to(ROOT)
        found += [f"{rel}:{n}: {what}: {line[:100]}" for n, what, line in offending_lines(text)]
    assert not found, ("words of a work log (say what the rule is for instead):\n"
                       + "\n".join(found))
