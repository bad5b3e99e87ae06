"""Targets users describe themselves ($AOT_TARGETS_DIR, --target-file,
`base` inheritance, `aot targets`) and the portable generic-c99 targets.

A user's Cortex-M variant is packaged with --target-file, run on its board's
emulator and checked against tflite-micro; generic-c99 is built by gcc and
by clang for the host and for qemu-aarch64, verified, and its sources
grepped for anything that is not portable C.
"""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from aot.api import verify
from aot.cli import main as cli_main
from aot.errors import AotError
from aot.targets import get_board, get_target, on_board, target_file, targets
from support import MODELS

# A user's variant of a core aot knows, and the board whose emulator runs it:
# (board, base target). Another core's variant is one more row.
VARIANTS = [("mps2-an386", "cortex-m4"), ("mps2-an505", "cortex-m33")]
AD = MODELS / "mlperf_ad_fcae_int8.tflite"
KWS = MODELS / "mlperf_kws_dscnn_int8.tflite"


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def variant_text(name: str, base: str, cflags: str = '"-Os", "-mcpu={cpu}"') -> str:
    return f'base = "{base}"\nname = "{name}"\ncflags = [{cflags}]\n'


@pytest.fixture
def user_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "targets"
    folder.mkdir()
    monkeypatch.setenv("AOT_TARGETS_DIR", str(folder))
    return folder


def refused(call, *needles: str) -> None:
    """call() raises an AotError of one line holding every needle."""
    with pytest.raises(AotError) as e:
        call()
    message = str(e.value)
    assert "\n" not in message, message
    for n in needles:
        assert n in message, message


# --- descriptions, inheritance and the schema ------------------------------------

def test_a_variant_takes_its_base_field_by_field(user_dir):
    write(user_dir, "acme", variant_text("acme-m4", "cortex-m4"))
    write(user_dir, "acme-fast", 'base = "acme-m4"\nname = "acme-m4-fast"\ncpu = "cortex-m7"\n')
    base, mine, deeper = (targets()[n] for n in ("cortex-m4", "acme-m4", "acme-m4-fast"))
    assert (mine.triple, mine.features, mine.cc, mine.ldflags) == \
        (base.triple, base.features, base.cc, base.ldflags)
    assert mine.has("dsp") and mine.cflags == ("-Os", "-mcpu=cortex-m4")
    assert deeper.cflags == ("-Os", "-mcpu=cortex-m7")     # {cpu} follows the variant's cpu
    assert get_target("acme-m4-fast").cpu == "cortex-m7"


BAD = {
    "wrong type": ('name = "x"\nbase = "cortex-m4"\nvector_bits = "0"\n', ["vector_bits must be"]),
    "unknown key": ('name = "x"\nbase = "cortex-m4"\ncflagz = []\n', ["unknown key(s) cflagz"]),
    "no name": ('base = "cortex-m4"\ncpu = "cortex-m7"\n', ["missing name"]),
    "no cc": ('name = "x"\ntriple = "thumbv7em-none-eabi"\ncpu = "c"\nvector_bits = 0\n',
              ["lacks cc"]),
    "unknown base": ('name = "x"\nbase = "cortex-m44"\n',
                     ["unknown base 'cortex-m44'", "'cortex-m4'?"]),
    "own base": ('name = "x"\nbase = "x"\n', ["base cycle x -> x"]),
    "aot's name": ('name = "cortex-m4"\nbase = "cortex-m7"\n',
                   ["'cortex-m4' is one of aot's own"]),
    "vector portable": ('name = "x"\nbase = "generic-c99"\nvector_bits = 128\n', ["is portable"]),
    "triple portable": ('name = "x"\nbase = "generic-c99"\ntriple = "xtensa-none-elf"\n',
                        ["is portable", "triple not given"]),
    "not toml": ('name = "x"\nbase = "cortex-m4"\nthis is not toml\n',
                 ["not a valid description"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_description_is_refused_naming_file_and_field(user_dir, case):
    text, needles = BAD[case]
    path = write(user_dir, "bad", text)
    refused(lambda: targets(), str(path), *needles)
    refused(lambda: target_file(path), str(path), *needles)     # the same for --target-file


def test_a_base_cycle_is_named_link_by_link(user_dir):
    write(user_dir, "a", 'name = "a"\nbase = "b"\n')
    write(user_dir, "b", 'name = "b"\nbase = "a"\n')
    refused(lambda: targets(), "base cycle a -> b -> a")


def test_two_user_files_of_one_name_are_refused(user_dir, tmp_path, monkeypatch):
    other = tmp_path / "more"
    write(user_dir, "one", variant_text("acme", "cortex-m4"))
    write(other, "two", variant_text("acme", "cortex-m7"))
    monkeypatch.setenv("AOT_TARGETS_DIR", f"{user_dir}:{other}")
    refused(lambda: targets(), str(other / "two.toml"), "also described in",
            str(user_dir / "one.toml"))
    monkeypatch.setenv("AOT_TARGETS_DIR", str(tmp_path / "nowhere"))
    refused(lambda: targets(), "AOT_TARGETS_DIR", "not a directory")


def test_a_users_board_names_a_users_target(user_dir, tmp_path, monkeypatch):
    """$AOT_BOARDS_DIR's boards see $AOT_TARGETS_DIR's targets: a smaller
    board of the variant, its flash and RAM its own."""
    write(user_dir, "acme", variant_text("acme-m4", "cortex-m4"))
    board = (Path(__file__).parents[2] / "boards" / "mps2-an386.toml").read_text()
    board = board.replace('name = "mps2-an386"', 'name = "acme-board"').replace(
        'target = "cortex-m4"', 'target = "acme-m4"').replace(
        "ram_bytes = 4194304", "ram_bytes = 262144")
    write(tmp_path / "boards", "acme-board", board)
    monkeypatch.setenv("AOT_BOARDS_DIR", str(tmp_path / "boards"))
    b = get_board("acme-board")
    assert (b.target.name, b.ram_bytes, b.target.cflags[0]) == ("acme-m4", 262144, "-Os")


def test_aot_targets_lists_where_each_comes_from(user_dir, capsys):
    mine = write(user_dir, "acme", variant_text("acme-m4", "cortex-m4"))
    assert cli_main(["targets", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["targets"]}
    assert rows["cortex-m4"]["source"] == "aot" and rows["cortex-m4"]["base"] is None
    assert rows["acme-m4"]["source"] == str(mine) and rows["acme-m4"]["base"] == "cortex-m4"
    assert rows["acme-m4"]["triple"] == rows["cortex-m4"]["triple"]
    assert rows["generic-c99"]["portable"] and rows["generic-c99"]["triple"] == ""
    assert cli_main(["targets"]) == 0
    table = capsys.readouterr().out
    assert re.search(rf"^acme-m4 .* {re.escape(str(mine))}$", table, re.M), table


def test_a_target_of_another_architecture_is_refused_by_the_cli(tmp_path, capsys):
    mine = write(tmp_path, "acme", variant_text("acme-m4", "cortex-m4"))
    code = cli_main(["package", str(AD), "--board", "host", "--target-file", str(mine),
                     "-o", str(tmp_path / "pkg")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "target 'acme-m4' is for thumb" in err[0] and "board 'host'" in err[0], err
    assert not (tmp_path / "pkg").exists()
    code = cli_main(["package", str(AD), "--target-file", str(tmp_path / "none.toml")])
    assert code == 2 and "none.toml: no such file" in capsys.readouterr().err
    package_dir = tmp_path / "built"    # a package is run as built
    assert cli_main(["package", str(AD), "--board", "host", "-o", str(package_dir)]) == 0
    capsys.readouterr()
    code = cli_main(["run", str(package_dir), "--target", "generic-c99"])
    assert code == 2 and "built for its target" in capsys.readouterr().err


# --- portable C ---------------------------------------------------------------------

@pytest.mark.parametrize("board,gcc,abi", [
    ("host", "x86_64-linux-gnu-gcc", ()),
    ("qemu-aarch64", "aarch64-linux-gnu-gcc", ("--target=aarch64-linux-gnu",)),
    ("qemu-armv7", "arm-linux-gnueabihf-gcc",
     ("--target=armv7a-linux-gnueabihf", "-mfloat-abi=hard")),
    ("qemu-riscv64", "riscv64-linux-gnu-gcc", ("--target=riscv64-linux-gnu", "-mabi=lp64d")),
])
def test_generic_c99_takes_the_boards_abi_and_no_isa(board, gcc, abi):
    b = get_board(board)
    with_gcc = on_board(b, get_target("generic-c99")).target
    with_clang = on_board(b, get_target("generic-c99-clang")).target
    for t in (with_gcc, with_clang):
        assert (t.triple, t.vector_bits, t.isa_features, t.vector_registers) == \
            (b.target.triple, 0, frozenset(), 0)
        assert not [f for f in t.cflags if f.startswith(("-mcpu", "-march", "-mfpu"))]
    assert with_gcc.cc == gcc and with_gcc.cflags == ("-O2",)
    assert with_clang.cc == "clang"
    assert with_clang.gcc_pin == b.target.gcc_pin       # the board's C library and GCC
    assert with_clang.cflags[:len(abi) + 1] == (*abi, "-O2")


def test_generic_c99_refuses_bare_metal_and_llvm(tmp_path):
    refused(lambda: on_board(get_board("mps2-an386"), get_target("generic-c99")),
            "portable C for the Linux boards", "bare metal")
    board = on_board(get_board("host"), get_target("generic-c99"))
    refused(lambda: verify(AD, board=board, codegen="llvm"), "codegen llvm")


# Whatever is not C99 for any compiler: vector extensions, builtins,
# intrinsics headers, inline assembly.
NOT_PORTABLE = re.compile(r"__builtin_|vector_size|__attribute__\s*\(\(\s*vector|_intrin\.h|"
                          r"arm_neon|arm_acle|arm_mve|riscv_vector|\basm\b|__asm")


# qemu-aarch64 with gcc: test_generic_c99_package_is_portable_c
@pytest.mark.parametrize("board,target", [
    ("host", "generic-c99"), ("host", "generic-c99-clang"), ("qemu-aarch64", "generic-c99-clang")])
def test_generic_c99_builds_with_gcc_and_clang_and_verifies(board, target):
    out = verify(KWS, board=on_board(get_board(board), get_target(target)))
    assert out["ok"] and out["reference"] == "tflite-micro", out
    assert all(r["max_abs_err"] == 0 for r in out["outputs"]), out


def test_generic_c99_package_is_portable_c(tmp_path, capsys):
    """No vector extension, builtin, intrinsic or assembly in the package's
    sources; each compiles as ISO C99 with -pedantic-errors; it verifies; and
    another compiler rebuilds it through its Makefile."""
    pkg = tmp_path / "kws"
    assert cli_main(["package", str(KWS), "--board", "qemu-aarch64", "--target",
                     "generic-c99", "-o", str(pkg)]) == 0, capsys.readouterr().err
    meta = json.loads((pkg / "metadata.json").read_text())
    assert meta["target"]["name"] == "generic-c99" and meta["target"]["cflags"] == ["-O2"]
    sources = sorted(p for d in ("src", "include", "runtime_c") for p in (pkg / d).rglob("*")
                     if p.suffix in (".c", ".h", ".S"))
    assert any("_kernels" in p.name for p in sources), sources
    found = {p.name: NOT_PORTABLE.findall(p.read_text()) for p in sources}
    assert not any(found.values()), found
    # ISO C99 as the standard spells it, for this machine's compiler too
    for src in (p for p in sources if p.suffix == ".c"):
        r = subprocess.run(["gcc", "-std=c99", "-pedantic-errors", "-Iinclude", "-Iruntime_c",
                            "-Isrc", "-c", str(src.relative_to(pkg)), "-o", "/dev/null"],
                           cwd=pkg, capture_output=True, text=True)
        assert r.returncode == 0, (src.name, r.stderr)
    out = verify(pkg, source=KWS)       # built by aarch64-linux-gnu-gcc, run under qemu-user
    assert out["ok"] and all(r["max_abs_err"] == 0 for r in out["outputs"]), out
    # the package's Makefile rebuilds it for a core aot has no target for: a
    # Cortex-M0 (armv6-m, no DSP, no FPU), flags the user's own
    r = subprocess.run(["make", "-s", "CC=arm-none-eabi-gcc", "AR=arm-none-eabi-ar",
                        "CFLAGS=-mcpu=cortex-m0 -mthumb -mfloat-abi=soft"],
                       cwd=pkg, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    kinds = subprocess.run(["arm-none-eabi-objdump", "-f", *map(str, (pkg / "build").rglob("*.o"))],
                           capture_output=True, text=True, check=True).stdout
    assert kinds.count("architecture: armv6s-m") == len(list((pkg / "build").rglob("*.o"))) > 2


# --- a user's variant, packaged and run on its board ------------------------------------

@pytest.mark.parametrize("board,base", VARIANTS, ids=[b for b, _ in VARIANTS])
def test_a_target_file_variant_packages_and_runs_on_its_board(board, base, tmp_path, capsys):
    mine = write(tmp_path, "mine", variant_text(
        "acme-variant", base, '"-Os", "-mcpu={cpu}", "-mthumb", "-mfloat-abi=hard", '
        '"-ffunction-sections", "-fdata-sections", "-ffp-contract=fast"'))
    pkg = tmp_path / "pkg"
    assert cli_main(["package", str(AD), "--board", board, "--target-file", str(mine),
                     "-o", str(pkg), "--json"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    meta = json.loads((pkg / "metadata.json").read_text())
    assert (meta["board"], meta["target"]["name"]) == (board, "acme-variant")
    assert meta["target"]["cflags"][0] == "-Os"
    # the package runs on the board's emulator, as built, bit-exact with tflite-micro
    assert cli_main(["verify", str(pkg), "--model", str(AD), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["board"] == board and out["reference"] == "tflite-micro", out
    assert all(r["max_abs_err"] == 0 for r in out["outputs"]), out
    got = tmp_path / "out"
    assert cli_main(["run", str(pkg), "--input", str(AD.with_suffix(".input.npy")),
                     "--out", str(got), "--json"]) == 0
    capsys.readouterr()
    # the saved output is TFLite's (its requantization rounds apart from
    # tflite-micro's by at most one step)
    want = np.load(AD.with_suffix(".output.npy")).astype(int)
    assert np.abs(np.load(next(got.glob("*.npy"))).reshape(want.shape) - want).max() <= 1
