"""A short run of the read-back fuzzer (aot/testing/fuzz/readback.py):
mutated metadata.json, tuning logs, --input .npy files, --dataset .npz files
and harness reports
through the real `aot` command under RLIMIT_AS; scripts/fuzz_readback.py is
the long run."""
from __future__ import annotations

import pytest

from aot.testing.fuzz.readback import KINDS, prepare, run_case
from support import MODELS

# The seeds the suite runs: each kind's first (a few seconds in all).
SEEDS = {"metadata": (1, 2), "records": (2,), "npy": (0,), "report": (1,), "npz": (0, 1)}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return prepare(tmp_path_factory.mktemp("readback"), MODELS)


@pytest.mark.parametrize("kind, seed", [(k, s) for k in KINDS for s in SEEDS[k]])
def test_readback_fuzz_cases_exit_0_1_or_2(setup, kind, seed):
    r = run_case(setup, kind, seed, time_limit=120)
    assert not r.failure, (r.detail, r.failure, r.stderr)
    assert r.code in (0, 1, 2)


def test_the_cases_are_deterministic(setup, tmp_path):
    from aot.testing.fuzz.readback import metadata_case

    texts = []
    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        args, detail = metadata_case(setup, 7, d)
        texts.append(((d / "pkg" / "metadata.json").read_bytes(), args[0], detail))
    assert texts[0] == texts[1]
