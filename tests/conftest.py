"""Markers by cost, the fast tier's guard, the models_dir fixture and the
summaries tests record; what test modules share is in tests/support."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
# Test modules import what they share from the tests/support package
# (support/__init__.py); pytest imports the test files themselves by path
# (--import-mode=importlib), so same-named files in different folders stay
# apart. Asserts in support's helpers are rewritten like the tests' own.
sys.path.insert(0, str(TESTS))
pytest.register_assert_rewrite("support")
from support import MODELS  # noqa: E402 (needs tests/ on sys.path)

# aot's default board (no --board) is the emulated Pi 4, which boots a VM:
# the suite's commands without --board run on this machine instead ($AOT_BOARD
# names the default); the qemu-rpi4 tests name their board.
os.environ["AOT_BOARD"] = "host"


# Markers by cost, from each test module's path under tests/ (pytest -m):
# - fast: the pure-Python layers, tests that start no compiler, emulator,
#   board or aot process (make test-fast). Inside the fast tier a test that
#   starts a process fails, naming the command, so the list cannot drift
#   into the slow tier unseen.
# - build: every other module: its tests start the toolchain, an aot
#   process or another tool.
# - board: the modules with a test that runs on an emulator or over SSH:
#   every module of targets/, deploy/ and models/ outside the fast tier, and
#   BOARD_MODULES elsewhere. -m "not board" keeps to this machine.
FAST_MODULES = frozenset({
    "ops/quant/test_onnx_quant.py",
    "executor/test_plan.py", "foundations/test_config_schema.py", "foundations/test_readback.py",
    "check/test_cliffs.py", "check/test_dataset.py", "check/test_reference.py",
    "executor/test_template_cache.py",
    "foundations/test_target_facts.py", "frontend/test_onnx.py", "packaging/test_boot2.py",
    "frontend/test_onnx_functions.py", "frontend/tflite/test_tflite.py",
    "lower/kernels/test_conv_tile.py", "lower/kernels/test_dense.py",
    "isa/test_dots.py", "isa/test_instruction.py", "isa/test_neon.py", "isa/test_rvv.py",
    "isa/test_x86.py",
    "lower/kernels/test_windows.py", "lower/schedule/test_conv.py", "lower/test_lower_layers.py",
    "lower/tir_passes/test_legalize.py", "lower/tir_passes/test_shared_walks.py",
    "models/test_onnx_conformance.py",
    "models/test_onnx_models.py", "ops/quant/test_qmath.py", "ops/test_ml.py", "ops/test_nn.py",
    "passes/test_passes.py", "repo/test_layers.py", "repo/test_readme.py",
    "tune/test_cost_model.py", "tune/test_database.py", "tune/test_farm_checks.py"})
BOARD_FOLDERS = ("targets", "deploy", "models")
BOARD_MODULES = frozenset({
    "check/test_streaming.py", "check/test_validate.py", "codegen/test_codegen.py",
    "executor/test_pools.py", "frontend/tflite/test_tflite_ops.py",
    "lower/tir_passes/test_float16.py", "ops/quant/test_tflite_int16.py", "ops/test_attention.py",
    "ops/test_rnn.py", "ops/test_signal_detect.py", "packaging/test_firmware.py",
    "packaging/test_threads.py", "passes/test_float_io.py", "repo/test_compare.py",
    "repo/test_demo.py", "tune/test_farm.py", "tune/test_tune.py"})


def markers(module: str) -> tuple[str, ...]:
    """The cost markers of the test module at `module` (a path under tests/)."""
    if module in FAST_MODULES:
        return ("fast",)
    if module.split("/")[0] in BOARD_FOLDERS or module in BOARD_MODULES:
        return ("build", "board")
    return ("build",)


def pytest_configure(config):
    # A suite started in the background of a non-interactive shell (`cmd &`,
    # nohup) inherits Ctrl-C ignored, and so would every process it starts;
    # the tests that press Ctrl-C on aot (packaging, remote runs) need it
    # delivered as a terminal delivers it. A Python handler here becomes the
    # default disposition in the processes the tests start.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    stale = sorted(m for m in FAST_MODULES | BOARD_MODULES if not (TESTS / m).is_file())
    if stale:
        raise pytest.UsageError(f"tests/conftest.py names test modules that do not exist: "
                                f"{', '.join(stale)}")


def pytest_collection_modifyitems(config, items):
    for item in items:
        for name in markers(item.path.relative_to(TESTS).as_posix()):
            item.add_marker(name)


def _no_process(self, args, *rest, **kwargs):
    command = args if isinstance(args, (str, bytes)) else " ".join(map(str, args))
    raise RuntimeError(f"the fast tier starts no process, this test ran: {command[:200]} "
                       "(drop its module from conftest.FAST_MODULES)")


@pytest.fixture(autouse=True)
def _fast_tier_starts_no_process(request, monkeypatch):
    if request.config.getoption("markexpr", "") == "fast":
        monkeypatch.setattr(subprocess.Popen, "_execute_child", _no_process)


@pytest.fixture(scope="session")
def models_dir() -> Path:
    assert MODELS.is_dir(), f"{MODELS} is missing: the shared models must sit beside the repo"
    return MODELS


def pytest_terminal_summary(terminalreporter):
    """Print what tests recorded with record_property("summary", text).

    Output printed inside a pytest-xdist worker never reaches the terminal;
    recorded properties travel with the test reports to the controller.
    """
    lines = []
    for outcome in ("passed", "failed"):
        for report in terminalreporter.stats.get(outcome, []):
            if getattr(report, "when", None) != "call":
                continue
            lines += [str(v) for k, v in getattr(report, "user_properties", ()) if k == "summary"]
    if lines:
        terminalreporter.section("aot summaries")
        for line in lines:
            terminalreporter.write_line(line)
