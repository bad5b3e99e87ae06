"""bench/same_code.py's replay finds each name in the new layout, then in
today's, and prints the tables without module paths; bench/same_code.py
itself refuses bad options before replaying anything."""
from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from support import REPO


def bench_module(name: str):
    """A bench/ script as a module, without bench/ on sys.path (its
    compare.py, threads.py ... would shadow other modules)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


emit, tables = bench_module("same_code_emit"), bench_module("same_code_tables")


@pytest.fixture
def where():
    emit.need.cache_clear()
    yield emit.WHERE
    emit.need.cache_clear()


def test_a_name_falls_back_to_todays_module(where, monkeypatch):
    monkeypatch.setitem(where, "x", ("aot.no_such_folder.kernels:single_op_graph",
                                     "aot.testing.kernels:single_op_graph"))
    from aot.testing.kernels import single_op_graph
    assert emit.need("x") is single_op_graph


def test_a_name_found_nowhere_names_every_place_tried(where, monkeypatch):
    monkeypatch.setitem(where, "x", ("aot.no_such_folder:f", "aot.lower:no_such_name"))
    with pytest.raises(SystemExit, match=r"no x; tried aot.no_such_folder:f \(no module "
                                         r"aot.no_such_folder\), aot.lower:no_such_name"):
        emit.need("x")


def test_a_module_failing_on_its_own_import_is_not_skipped(where, monkeypatch, tmp_path):
    (tmp_path / "same_code_broken.py").write_text("import no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(where, "x", ("same_code_broken:f", "aot.lower:lower_graph"))
    with pytest.raises(ModuleNotFoundError, match="no_such_dependency"):
        emit.need("x")


def test_every_name_is_found_in_this_tree(where):
    for name in set(where) - set(emit.BASE_ONLY):
        assert emit.need(name) is not None, name


def test_tables_name_functions_without_modules(where):
    dump = tables.tables(emit.need)
    assert set(dump) == {"ops", "layout", "legalize", "graph_passes", "tir_passes",
                         "tuning_sites"}
    conv = next(line for line in dump["ops"] if line.startswith("Conv:"))
    assert "family nn, pattern OUT_ELEMWISE_FUSABLE, rule KERNEL " in conv
    text = "\n".join(line for lines in dump.values() for line in lines)
    assert "aot." not in text
    assert dump["tir_passes"][-1] == "legalize: legalize"
    assert "@tunable('accumulator') int8_accumulator" in dump["tuning_sites"]
    assert dump["legalize"][0].startswith("Instruction(generic='aot_dot2', name='x86_pmaddwd'")


def test_recursive_closure_names_once():
    def outer():
        def again(n):
            return again(n - 1) if n else 0
        return again
    assert tables.name_of(outer()) == "test_recursive_closure_names_once.<locals>.outer." \
        "<locals>.again(test_recursive_closure_names_once.<locals>.outer.<locals>.again)"


@pytest.mark.parametrize("args, needle", [
    (["HEAD", "--boards", "host,nope"], "--boards: unknown board 'nope'"),
    (["HEAD", "--threads", "1,x"], "--threads takes counts"),
    (["HEAD", "--jobs", "0"], "--jobs 0: give 1 or more"),
    (["no-such-revision"], "'no-such-revision' is not a revision"),
])
def test_bad_options_are_one_line_errors(args, needle):
    r = subprocess.run([sys.executable, str(REPO / "bench" / "same_code.py"), *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and needle in r.stderr and not r.stdout, r
