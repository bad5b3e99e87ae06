"""The Cortex-M33, M3 and M0 boards (mps2-an505, mps2-an385, microbit) and
the int8 kernels of cores without SIMD (aot/lower/kernels/cortex_m/scalar.py).

A few models bit-exact with tflite-micro on each board under QEMU (float
against LiteRT on the M3's soft float); the micro:bit's 16 KiB of RAM and
256 KiB of flash refusing, with the numbers, a model that does not fit; the
scalar kernels bit-exact on the host over the DSP kernels' zoo (the host
dressed as a Thumb core without DSP, with and without ARMv6-M's
multiply); the M0's convolutions and fully connected layers free of 64-bit
multiplies; `aot doctor` asking QEMU for each board's machine.
"""
from __future__ import annotations

import dataclasses
import subprocess

import pytest

from aot.api import package, verify
from aot.cli import main as cli_main
from aot.isa.arm_dsp import V6M_SMMULR, c_helper
from aot.lower import lower_graph
from aot.targets import get_board
from aot.testing import kernels as testing
from aot.testing.kernels import host_target
from support import MODELS, zoo
from support.kernels import call_names
from support.zoo import check_graphs, cortex_m_graphs

SWW = MODELS / "mlperf_sww_int8.tflite"


def check_bit_exact(out: dict, reference: str = "tflite-micro") -> None:
    assert out["reference"] == reference and out["ok"], out
    if reference == "tflite-micro":
        assert all(r["max_abs_err"] == 0 for r in out["outputs"]), out


@pytest.mark.parametrize("board,model,reference", [
    ("mps2-an505", "mlperf_kws_dscnn_int8.tflite", "tflite-micro"),     # M33: the DSP kernels
    ("mps2-an385", "mlperf_kws_dscnn_int8.tflite", "tflite-micro"),     # M3: the scalar tiles
    ("mps2-an385", "tflm_hello_world_f32.tflite", "litert"),            # soft float
    ("microbit", "tflm_micro_speech_int8.tflite", "tflite-micro"),      # M0
])
def test_models_on_the_new_cores(board, model, reference):
    check_bit_exact(verify(MODELS / model, board=board), reference)


@pytest.mark.fast
@pytest.mark.parametrize("model,message", [
    ("mlperf_kws_dscnn_int8.tflite",
     "(arena 15.6 KiB, harness inputs 490 bytes, harness outputs 12 bytes: 16502 bytes) do not "
     "fit the RAM of board 'microbit' (16384 bytes, 7680 of them kept for the harness's data"),
    ("mlperf_ad_fcae_int8.tflite",
     "weights (270880 bytes) do not fit the flash of board 'microbit' (262144 bytes, 61440 of "
     "them kept for the harness's code and newlib"),
])
def test_the_microbit_refuses_what_does_not_fit(tmp_path, capsys, model, message):
    out = tmp_path / "pkg"
    assert cli_main(["package", str(MODELS / model), "--board", "microbit", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists()


def test_m0_convolutions_and_fc_call_no_64_bit_multiply(tmp_path):
    """ARMv6-M has no 32x32->64 multiply: the int8 kernels of scalar.py
    (sww's convolutions, depthwise layers and FC) multiply with MULS and
    requantize with v6m_smmulr, never a call to __aeabi_lmul (which the
    softmax keeps: the int64 forms of the plain loops, bit-exact)."""
    pkg = package(SWW, board="microbit", out_dir=tmp_path / "sww")
    lib = next((pkg.path / "lib").glob("lib*.a"))
    text = subprocess.run(["arm-none-eabi-objdump", "-d", str(lib)], capture_output=True,
                          text=True, check=True).stdout
    functions, calling = [], set()
    for line in text.splitlines():
        if line.endswith(">:"):
            functions.append(line.split("<")[1][:-2])
        elif "__aeabi_lmul" in line:
            calling.add(functions[-1])
    kernels = {f for f in functions if "_conv" in f or "_fc_" in f}
    assert len(kernels) == 9, functions
    assert not kernels & calling, sorted(calling)


def thumb_host(features=frozenset({"v6m"})):
    """The host as a Thumb core without DSP or vectors (by default with
    ARMv6-M's multiply): the scalar kernels, compiled by the host's C
    compiler."""
    return dataclasses.replace(host_target(), triple="thumbv6m-unknown-none-eabi",
                               vector_bits=0, declared_features=frozenset(features))


@pytest.mark.parametrize("features,smmulr", [({"v6m"}, "v6m_smmulr"), ((), "aot_smmulr")])
def test_scalar_kernels_bit_exact_on_the_host(tmp_path, monkeypatch, features, smmulr):
    """The M0's tiles (1 x 3, v6m_smmulr) and the M3's (2 x 2, SMMULR's formula)."""
    target = thumb_host(features)
    monkeypatch.setattr(testing, "host_target", lambda: target)
    monkeypatch.setattr(zoo, "host_target", lambda: target)
    graphs = cortex_m_graphs()
    funcs = [k.func for g in graphs for k in lower_graph(g, target)]
    calls = {c for f in funcs for c in call_names(f)}
    # the 32-bit requantization of the Cortex-M kernels, as the core computes it
    assert smmulr in calls and not {"aot_smlad", "aot_sxtb16", "arm_smmulr"} & calls, calls
    check_graphs(graphs, codegen="c", tmp_path=tmp_path)


def test_v6m_smmulr_is_smmulr(tmp_path):
    """The C helper against (a b + 2^31) >> 32 at the edges of int32."""
    class Module:
        helpers: dict = {}

        def helper(self, name, make):
            self.helpers[name] = make()
            return name
    mod = Module()
    c_helper(mod, V6M_SMMULR)
    edges = [-2**31, -2**31 + 1, -65537, -65536, -32769, -1, 0, 1, 32767, 65535, 65536,
             2**30, 0x12345678, 2**31 - 1]
    cases = [(a, b) for a in edges for b in edges]
    src = tmp_path / "t.c"
    src.write_text("#include <stdint.h>\n#include <stdio.h>\n" + mod.helpers[V6M_SMMULR.name]
                   + "\nint main(void) {\n    static const int32_t c[][2] = {"
                   + ", ".join(f"{{{a}, {b}}}" if a != -2**31 and b != -2**31 else
                               f"{{{a if a != -2**31 else '(-2147483647 - 1)'}, "
                               f"{b if b != -2**31 else '(-2147483647 - 1)'}}}"
                               for a, b in cases)
                   + "};\n    for (unsigned i = 0; i < sizeof c / sizeof c[0]; i++)\n"
                   "        printf(\"%ld\\n\", (long)v6m_smmulr(c[i][0], c[i][1]));\n"
                   "    return 0;\n}\n")
    exe = tmp_path / "t"
    subprocess.run(["cc", "-O2", "-fsanitize=undefined", "-fno-sanitize-recover", "-o",
                    str(exe), str(src)], check=True)
    got = [int(v) for v in subprocess.run([str(exe)], capture_output=True, text=True,
                                          check=True).stdout.split()]
    assert got == [(a * b + (1 << 31)) >> 32 for a, b in cases]


def test_doctor_checks_each_board_machine_in_qemu():
    """`aot doctor` asks the installed qemu-system-arm for each board's
    machine; a machine it does not know leaves the board not ready."""
    from aot.doctor import report
    boards = {name: get_board(name) for name in ("microbit", "mps2-an505", "mps2-an385")}
    boards["mps2-an999"] = dataclasses.replace(
        boards["mps2-an385"], name="mps2-an999",
        options={**boards["mps2-an385"].options, "machine": "mps2-an999"})
    r = report(boards)
    machines = {c.name: c.found for c in r.checks if c.kind == "machine"}
    assert machines == {"qemu-system-arm -M microbit": True, "qemu-system-arm -M mps2-an505": True,
                        "qemu-system-arm -M mps2-an385": True,
                        "qemu-system-arm -M mps2-an999": False}, machines
    ready = {b.name: b.usable for b in r.boards}
    assert ready == {"microbit": True, "mps2-an505": True, "mps2-an385": True,
                     "mps2-an999": False}, ready
