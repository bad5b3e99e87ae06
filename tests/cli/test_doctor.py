"""A fresh machine works: what aot loads at run time is installed by
scripts/setup.sh, `aot doctor` says what is there and what is not, and a
missing program or file is one line naming it and the fix.

The closure test reads the package list from scripts/setup.sh itself and
asks apt and dpkg (the setup has run `apt-get update`); the others hide the
tools with $AOT_TOOL_PATH (aot/support/tools.py), or a file with a real flag
(-resource-dir), and check what aot then says.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aot import cli, doctor
from aot.support import gcc_pin, tools
from aot.errors import AotError
from support import MODELS, REPO
from support.decoy_gcc import clang_in, debian_installation, junk_installation

APT_DEPENDS = ("apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
               "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances")
needs_dpkg = pytest.mark.skipif(shutil.which("dpkg") is None or shutil.which("apt-cache") is None,
                                reason="not a Debian machine")


def setup_packages() -> list[str]:
    """DEB_PACKAGES=( ... ) of scripts/setup.sh: words up to the closing
    parenthesis, comments (which may hold parentheses) left out."""
    text = (REPO / "scripts" / "setup.sh").read_text()
    body = text[text.index("DEB_PACKAGES=(") + len("DEB_PACKAGES=("):]
    words = []
    for line in body.splitlines():
        code = line.split("#", 1)[0]
        words += code.split(")", 1)[0].split()
        if ")" in code:
            return words
    raise AssertionError("DEB_PACKAGES=( has no closing parenthesis in scripts/setup.sh")


def depends_graph(packages: list[str]) -> dict[str, set[str]]:
    """Each package of the Depends closure -> the packages it depends on
    (alternatives and the providers of virtual packages included, as apt's
    --recurse follows them), from one `apt-cache depends --recurse`."""
    out = subprocess.run([*APT_DEPENDS, *packages], capture_output=True, text=True,
                         check=True).stdout
    graph: dict[str, set[str]] = {}
    node = ""
    for line in out.splitlines():
        if not line.startswith(" "):
            node = line.strip()
            graph.setdefault(node, set())
        elif ":" in line:                       # "  Depends: x", " |PreDepends: <virtual>"
            graph[node].add(line.split(":", 1)[1].strip())
        else:                                   # a provider of the virtual package above
            graph[node].add(line.strip())
    return graph


def closure(graph: dict[str, set[str]], root: str) -> set[str]:
    seen, todo = set(), [root]
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo += graph.get(p, ())
    return seen


def owners(paths: list[str]) -> dict[str, str]:
    """path -> the installed package that owns it (dpkg -S), also through a
    symlinked directory (/lib -> usr/lib)."""
    def ask(names: list[str]) -> dict[str, str]:
        r = subprocess.run(["dpkg", "-S", *names], capture_output=True, text=True)
        found = {}
        for line in r.stdout.splitlines():
            package, _, path = line.partition(": ")
            if not line.startswith("diversion") and path:
                found[path.strip()] = package.split(",")[0].split(":")[0].strip()
        return found

    direct = ask(sorted(set(paths)))
    real = ask(sorted({os.path.realpath(p) for p in paths if p not in direct}))
    return {p: direct.get(p) or real[os.path.realpath(p)]
            for p in paths if p in direct or os.path.realpath(p) in real}


@needs_dpkg
def test_every_file_aot_loads_comes_from_what_setup_installs():
    packages = setup_packages()
    assert {"clang", "ipxe-qemu", "libclang-rt-14-dev", "libnewlib-arm-none-eabi",
            "gcc-riscv64-unknown-elf", "picolibc-riscv64-unknown-elf"} <= set(packages)
    graph = depends_graph(packages)
    everything = set(graph)
    assert set(packages) <= everything
    rep = doctor.report()
    missing = [c.name for c in rep.checks if not c.found]
    assert not missing, f"make setup left these out: {missing}"
    system = [c for c in rep.checks if c.kind in ("tool", "file")]
    kinds = {c.name for c in system}
    assert {"efi-virtio.rom", "qemu-system-aarch64", "librdimon.a", "rdimon.specs", "libm.a",
            "libclang_rt.asan-x86_64.a", "libclang_rt.ubsan_standalone-x86_64.a", "libc.a",
            "clang", "ld.lld", "arm-none-eabi-gcc", "sshd"} <= kinds
    for triple in ("aarch64-linux-gnu", "arm-linux-gnueabihf", "riscv64-linux-gnu"):
        assert any(c.name == "libc.a" and c.path == f"/usr/{triple}/lib/libc.a" for c in system)
    assert any("thumb/v7e-m+fp/hard/librdimon.a" in c.path for c in system)
    # The RISC-V microcontroller boards link picolibc's rv32 multilibs (rv32imc
    # takes rv32im's); beside them, the Linux targets still link their own
    # installations (the libc.a paths above): the bare-metal GCC changes nothing.
    assert any(c.path.endswith("picolibc/riscv64-unknown-elf/lib/rv32im/ilp32/libsemihost.a")
               for c in system)
    assert any(c.path.endswith("rv32imac/ilp32/libc.a") for c in system)
    assert any(c.name == "qemu-system-riscv32" for c in system)
    owner = owners([c.path for c in system])
    for c in system:
        assert c.path in owner, f"{c.name}: dpkg knows no package with {c.path}"
        assert owner[c.path] in everything, \
            f"{c.name} ({c.path}) is in {owner[c.path]}, which setup.sh does not install"
        # The package aot names in its messages really brings the file.
        assert c.package in packages, f"{c.name}: {c.package} is not in setup.sh"
        assert owner[c.path] in closure(graph, c.package), \
            f"{c.name} ({c.path}, {owner[c.path]}) does not come with {c.package}"


@needs_dpkg
def test_qemu_loads_the_nic_rom_from_where_the_doctor_found_it():
    qemu = tools.which("qemu-system-aarch64")
    rom = tools.qemu_data_file(qemu, "efi-virtio.rom")
    assert rom is not None and rom.is_file()
    assert subprocess.run(["dpkg", "-S", str(rom)], capture_output=True, text=True
                          ).stdout.startswith("ipxe-qemu:")


def test_setup_package_list_is_parsed_whole():
    packages = setup_packages()
    assert packages[0] == "clang" and "gcc" in packages and "python3-venv" in packages
    assert all(p.replace("-", "").replace(".", "").isalnum() for p in packages), packages


# --- a machine without the tools ---------------------------------------------------

@pytest.fixture
def relu(tmp_path) -> Path:
    from onnx import TensorProto, helper, save

    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    path = tmp_path / "relu.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    np.save(tmp_path / "x.npy", np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8))
    return path


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_doctor_on_an_empty_tool_path(tmp_path, monkeypatch, capsys, relu):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv(tools.TOOL_PATH_ENV, str(empty))
    code, out, _ = run_cli(["doctor", "--json"], capsys)
    rep = json.loads(out)
    assert code == 1 and rep["ok"] is False and rep["fix"] == "make setup"
    by_name = {c["name"]: c for c in rep["checks"]}
    for name in ("clang", "ar", "ld.lld", "arm-none-eabi-gcc", "qemu-aarch64", "qemu-system-arm",
                 "qemu-system-aarch64", "efi-virtio.rom", "librdimon.a", "gcc"):
        assert by_name[name]["found"] is False and by_name[name]["path"] is None, name
    assert "qemu-rpi4" in by_name["efi-virtio.rom"]["needed_by"]
    assert by_name["onnxruntime"]["found"] is True       # Python modules are not programs
    boards = {b["name"]: b for b in rep["boards"]}
    assert set(boards) >= {"host", "qemu-rpi4", "mps2-an386", "rpi4"}
    assert not any(b["usable"] for b in boards.values())
    assert "qemu-system-aarch64" in boards["qemu-rpi4"]["missing"]
    assert "clang" in boards["rpi4"]["missing"] and "SSH" in boards["rpi4"]["note"]

    # A real command now fails with one line naming the program and the fix.
    code, out, err = run_cli(["package", str(relu), "--board", "qemu-riscv64",
                              "-o", str(tmp_path / "pkg")], capsys)
    assert code == 2 and not (tmp_path / "pkg").exists()
    assert err.count("\n") == 1
    assert "'clang' is not installed (Debian package clang)" in err
    assert "make setup" in err and "aot doctor" in err

    code, out, err = run_cli(["doctor"], capsys)
    assert code == 1 and "make setup" in out and "AOT_TOOL_PATH" in out


def test_doctor_all_found_exits_0(capsys):
    code, out, _ = run_cli(["doctor", "--json"], capsys)
    rep = json.loads(out)
    assert code == (0 if rep["ok"] else 1)
    assert rep["ok"] == all(c["found"] for c in rep["checks"])
    for c in rep["checks"]:
        assert c["found"] == (c["path"] is not None) and c["needed_by"], c
        if c["found"] and c["kind"] in ("tool", "file"):
            assert Path(c["path"]).is_file(), c
    for b in rep["boards"]:
        mine = [c["name"] for c in rep["checks"] if b["name"] in c["needed_by"]
                and not c["found"]]
        assert set(mine) <= set(b["missing"]) and b["usable"] == (not b["missing"])


def tool_dir(tmp_path: Path, links: tuple[str, ...], copies: tuple[str, ...] = ()) -> Path:
    """A tool directory with some of this machine's programs: `links` as
    symlinks, `copies` as copies (a copied qemu looks for its ROMs beside
    the copy, where there are none)."""
    d = tmp_path / "tools" / "bin"
    d.mkdir(parents=True)
    for name in links:
        (d / name).symlink_to(shutil.which(name))
    for name in copies:
        shutil.copy(shutil.which(name), d / name)
    return d


AARCH64_BUILD = ("clang", "ar", "ld.lld")


def test_a_missing_nic_rom_is_named_before_the_vm_boots(tmp_path, monkeypatch, capsys, relu):
    bin_dir = tool_dir(tmp_path, AARCH64_BUILD, copies=("qemu-system-aarch64",))
    qemu = bin_dir / "qemu-system-aarch64"
    # The copy really cannot start the NIC: the doctor's lookup is QEMU's.
    r = subprocess.run([str(qemu), "-M", "virt", "-nographic", "-monitor", "none", "-serial",
                        "null", "-S", "-netdev", "user,id=n0", "-device",
                        "virtio-net-pci,netdev=n0"], capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert r.returncode != 0 and 'failed to find romfile "efi-virtio.rom"' in r.stderr
    monkeypatch.setenv(tools.TOOL_PATH_ENV, str(bin_dir))
    rep = doctor.report()
    rom = next(c for c in rep.checks if c.name == "efi-virtio.rom")
    assert not rom.found and rom.package == "ipxe-qemu"
    status = {b.name: b for b in rep.boards}
    assert status["qemu-rpi4"].missing == ("efi-virtio.rom",)
    # and gcc, which builds the QEMU instruction counter
    assert set(status["qemu-aarch64"].missing) == {"qemu-aarch64", "gcc"}

    code, _, err = run_cli(["run", str(relu), "--board", "qemu-rpi4", "--input",
                            str(tmp_path / "x.npy"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "'efi-virtio.rom' is not installed (Debian package ipxe-qemu)" in err
    assert "make setup" in err

    code, _, err = run_cli(["run", str(relu), "--board", "qemu-aarch64", "--input",
                            str(tmp_path / "x.npy"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "'qemu-aarch64' is not installed (Debian package qemu-user)" in err
    assert not (tmp_path / "out").exists()


def test_a_missing_sanitizer_runtime_is_named(tmp_path, relu):
    from aot.api import package

    # clang's runtimes live in its resource directory: point it at none.
    with pytest.raises(AotError) as e:
        package(relu, board="host", out_dir=tmp_path / "pkg",
                extra_cflags=("-fsanitize=address,undefined", "-resource-dir=/nonexistent"))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("linking the bench harness failed: libclang_rt.asan")
    assert "libclang-rt-14-dev" in msg and "make setup" in msg
    assert not (tmp_path / "pkg").exists()


@pytest.mark.parametrize("cmd, want", [
    (["clang", "-fuse-ld=lld", "-x", "c", "-", "-lnonesuch_aot"], "libnonesuch_aot.a"),
    (["clang", "-fuse-ld=bfd", "-x", "c", "-", "-lnonesuch_aot"], "libnonesuch_aot.a"),
    (["arm-none-eabi-gcc", "--specs=nonesuch_aot.specs", "-x", "c", "-"], "nonesuch_aot.specs"),
    (["clang", "--target=aarch64-linux-gnu", "--sysroot=/nonexistent", "-nostdinc", "-c", "-x",
      "c", "-"], "stdio.h"),
    (["gcc", "--sysroot=/nonexistent", "-c", "-x", "c", "-"], "stdio.h"),
])
def test_missing_files_in_real_tool_failures(cmd, want, tmp_path):
    if shutil.which(cmd[0]) is None:
        pytest.skip(f"{cmd[0]} is not installed")
    r = subprocess.run([*cmd, "-o", str(tmp_path / "a.out")], capture_output=True, text=True,
                       input="#include <stdio.h>\nint main(void) { return 0; }\n")
    assert r.returncode != 0
    assert tools.missing_file(r.stderr) == want
    assert "make setup" in tools.explain_failure("linking", r.stderr)


def test_a_package_header_is_not_a_missing_installation():
    assert tools.missing_file("src/m.c:3:10: fatal error: 'm.h' file not found") is None
    assert tools.missing_file("main.c:1:10: fatal error: model.h: No such file or directory") \
        is None
    assert tools.missing_file("error: undefined reference to `foo'") is None


# --- reference runtimes ------------------------------------------------------------

def test_a_missing_reference_runtime_is_named(tmp_path, monkeypatch, capsys, relu):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)       # as if not installed
    code, out, err = run_cli(["verify", str(relu), "--board", "host", "--json"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "the reference runtime onnxruntime is not installed" in err
    assert "pip install 'aot[verify]' (or onnxruntime)" in err and "make setup" in err
    rep = doctor.report({})
    assert not next(c for c in rep.checks if c.name == "onnxruntime").found


def test_int8_tflite_needs_tflite_micro_not_a_silent_litert(monkeypatch):
    import aot
    from aot.check.reference import reference_outputs, saved_or_random_inputs

    path = MODELS / "mlperf_ad_fcae_int8.tflite"
    graph = aot.load(path)
    _, inputs, _ = saved_or_random_inputs(path, graph)
    # Blocked by its full name too: an earlier test in this process may have
    # imported it, and the import system then answers from sys.modules.
    for name in ("tflite_micro", "tflite_micro.python.tflite_micro.runtime"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(AotError, match="reference runtime tflite-micro is not installed"):
        reference_outputs(path, graph, inputs)


# --- installed, but not where the target's build looks ------------------------------

def riscv64_board(target):
    from aot.targets import get_board

    board = get_board("qemu-riscv64")
    return {board.name: dataclasses.replace(board, target=target)}


def not_found(rep) -> dict[str, doctor.Check]:
    return {c.name: c for c in rep.checks if not c.found}


def test_a_gcc_the_target_does_not_name_is_not_for_make_setup(capsys):
    from aot.targets import get_target

    real = get_target("riscv64-linux").gcc_pin
    other = gcc_pin.GccPin(real.sysroot, real.gcc_install_dir.replace("/12", "/11"))
    rep = doctor.report(riscv64_board(get_target("riscv64-linux").pinned(other)))
    missing = not_found(rep)
    assert set(missing) == {"crtbeginT.o", "crtend.o", "libgcc.a", "libgcc_eh.a"}
    for name, c in missing.items():
        assert c.installed_at == f"{real.gcc_install_dir}/{name}"
        assert c.not_used_because == (f"target riscv64-linux names the GCC installation "
                                      f"{other.gcc_install_dir}, not installed")
        assert c.fix == doctor.FIX_PIN and c.as_json()["fix"] == doctor.FIX_PIN
    assert rep.fixes == (doctor.FIX_PIN,)
    doctor.print_report(rep)
    out = " ".join(capsys.readouterr().out.split())
    assert "4 installed but not used" in out and "make setup cannot change that" in out
    assert "installs them" not in out


def test_a_bare_metal_gcc_clang_picks_is_named(tmp_path):
    """Debian's riscv64 cross GCC and glibc, and gcc-riscv64-unknown-elf
    (12.2.0, newer than "12", without crt1.o): clang's own pick is the
    bare-metal one. Pinned, the same clang finds everything."""
    from aot.targets import get_target

    clang = clang_in(tmp_path)
    debian_installation(tmp_path, "riscv64-linux-gnu")
    elf = junk_installation(tmp_path, "riscv64-unknown-elf", "12.2.0", libc=("libc.a", "libm.a"))
    pinned = dataclasses.replace(get_target("riscv64-linux"), cc=str(clang))
    unpinned = pinned.pinned(gcc_pin.GccPin("", ""))
    assert gcc_pin.installations(str(clang), unpinned.cflags).selected == str(elf)

    crt1 = not_found(doctor.report(riscv64_board(unpinned)))["crt1.o"]
    assert crt1.installed_at == str(tmp_path / "riscv64-linux-gnu" / "lib" / "crt1.o")
    assert crt1.not_used_because == f"clang picks the GCC installation {elf}, which has no crt1.o"
    assert crt1.fix == doctor.FIX_PIN

    assert not not_found(doctor.report(riscv64_board(pinned)))


def test_a_file_nowhere_is_for_make_setup():
    from aot.targets import get_target

    rv = get_target("riscv64-linux").pinned(gcc_pin.GccPin("", ""))
    mips = dataclasses.replace(rv, cflags=tuple(
        "--target=mips64el-linux-gnuabi64" if f.startswith("--target=") else f
        for f in rv.cflags if not f.startswith("-m")))
    rep = doctor.report(riscv64_board(mips))
    crt1 = not_found(rep)["crt1.o"]
    assert crt1.installed_at == "" and crt1.fix == doctor.FIX and rep.fixes == (doctor.FIX,)
