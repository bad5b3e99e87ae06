"""A non-editable install finds its data directories inside the package."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_wheel_install_has_data_dirs(tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(target), str(REPO)],
                   check=True, capture_output=True, timeout=300,
                   env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    code = ("import aot.resources as r, sys;"
            "assert r.__file__.startswith(sys.argv[1]), r.__file__;"
            "print(*[r.data_dir(k) for k in r.DATA_DIRS], sep='\\n')")
    out = subprocess.run([sys.executable, "-c", code, str(target)], cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(target)},
                         capture_output=True, text=True, check=True).stdout.split()
    assert len(out) == 4
    for d in out:
        assert d.startswith(str(target)), d
        assert (Path(d) / "README.md").is_file()
