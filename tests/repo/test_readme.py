"""The README's layout table names every folder of aot/, so a reader who
finds a folder in the tree finds what it is for."""
from __future__ import annotations

import re

from support import REPO


def test_the_layout_table_names_every_folder_of_aot():
    text = (REPO / "README.md").read_text()
    named = set(re.findall(r"^\| `(aot/[a-z_]+/)`", text, re.M))
    folders = {f"aot/{p.parent.name}/" for p in (REPO / "aot").glob("*/__init__.py")}
    assert folders <= named, f"README's layout table lacks {sorted(folders - named)}"
    assert named <= folders, f"README's layout table names no folder {sorted(named - folders)}"
