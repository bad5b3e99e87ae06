"""qemu-rpi4: the emulated Raspberry Pi 4 aot boots itself and reaches over
SSH. The image is built by `make setup` (aot/deploy/vm_image.py); these tests
boot it for real: one command boots and stops its own VM, `aot board up`
keeps one for several commands, and a serve session answers 100 requests.

Every test runs with its own AOT_CACHE_DIR (holding a link to the built
image), so a VM the user keeps up is neither used nor stopped here, and with
its own TMPDIR, so a private VM left behind would be seen.
"""
from __future__ import annotations

import contextlib
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from support import MODELS

from aot.deploy import vm, vm_image
from aot.errors import AotError
from aot.targets import get_board

MODEL = MODELS / "mlperf_ad_fcae_int8.tflite"
BOARD = "qemu-rpi4"


# --- the image builder's pieces (no VM) -------------------------------------------

def _modinfo(depends: str) -> bytes:
    return b"\x7fELF junk\0license=GPL\0depends=" + depends.encode() + b"\0vermagic=6.1\0"


def test_module_order_puts_dependencies_first():
    mods = {"virtio_net": _modinfo("net_failover"), "net_failover": _modinfo("failover"),
            "failover": _modinfo(""), "virtio_pci": _modinfo("virtio_pci_modern_dev"),
            "virtio_pci_modern_dev": _modinfo("")}
    assert vm_image.module_order(("virtio_pci", "virtio_net"), mods) == [
        "virtio_pci_modern_dev", "virtio_pci", "failover", "net_failover", "virtio_net"]
    with pytest.raises(AotError, match="net_failover is not in the kernel package"):
        vm_image.module_order(("virtio_net",), {"virtio_net": _modinfo("net_failover")})


def _cpio_members(data: bytes) -> list[tuple[str, int, int, bytes]]:
    """(name, mode, mtime, data) of each newc member."""
    out, at = [], 0
    while True:
        assert data[at:at + 6] == b"070701"
        f = [int(data[at + 6 + 8 * i: at + 14 + 8 * i], 16) for i in range(13)]
        mode, uid, mtime, size, namesize = f[1], f[2], f[5], f[6], f[11]
        assert uid == 0
        name_at = at + 110
        name = data[name_at:name_at + namesize - 1].decode()
        body = name_at + namesize + (-(110 + namesize) % 4)
        if name == "TRAILER!!!":
            return out
        out.append((name, mode, mtime, data[body:body + size]))
        at = body + size + (-size % 4)


def test_cpio_is_sorted_root_owned_fixed_time_with_a_console(tmp_path):
    (tmp_path / "dev").mkdir()
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/busybox").write_bytes(b"\x7fELF" + bytes(5))
    (tmp_path / "bin/sh").symlink_to("busybox")
    (tmp_path / "init").write_text("#!/bin/sh\n")
    (tmp_path / "init").chmod(0o755)
    data = vm_image.cpio_newc(tmp_path)
    assert data == vm_image.cpio_newc(tmp_path)
    members = _cpio_members(data)
    assert [m[0] for m in members] == ["bin", "bin/busybox", "bin/sh", "dev", "dev/console",
                                       "init"]
    modes = {m[0]: m[1] for m in members}
    assert modes["dev/console"] == 0o020600 and modes["init"] == 0o100755
    assert modes["bin/sh"] & 0o170000 == 0o120000
    assert dict((m[0], m[3]) for m in members)["bin/sh"] == b"busybox"
    assert {m[2] for m in members} == {vm_image.EPOCH}


def test_a_missing_image_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setenv(vm_image.CACHE_ENV, str(tmp_path))
    with pytest.raises(AotError, match="not built .*run make setup"):
        with vm.running(get_board(BOARD)):
            pass


def test_an_unknown_vm_image_is_refused():
    import dataclasses

    board = get_board(BOARD)
    other = dataclasses.replace(board, options={**board.options, "vm": "pdp11"})
    with pytest.raises(AotError, match="unknown VM image 'pdp11'"):
        vm.vm_config(other)


def test_the_built_image_holds_what_the_vm_needs():
    image = vm_image.find_image()       # make setup built it
    info = json.loads((image.dir / "image.json").read_text())
    assert info["version"] == vm_image.image_version()
    assert image.kernel.read_bytes()[56:60] == b"ARM\x64"       # arm64 Image magic
    assert image.host_key().startswith("ssh-ed25519 ")
    names = {m[0]: m for m in _cpio_members(gzip.decompress(image.initrd.read_bytes()))}
    authorized = names["root/.ssh/authorized_keys"][3].split()[:2]
    assert authorized == (image.dir / "client_key.pub").read_bytes().split()[:2]
    for path in ("init", "bin/busybox", "usr/sbin/sshd", "etc/ssh/sshd_config", "run/sshd",
                 vm_image.HOST_KEY, "lib/ld-linux-aarch64.so.1",
                 *(f"lib/modules/{m}.ko" for m in info["modules"])):
        assert path in names, path
    assert {"virtio_pci", "virtio_net"} <= set(info["modules"])
    # The guest's private host key is in initrd.gz, aot's login in client_key.
    assert _mode(image.dir) == 0o700
    assert {p.name: _mode(p) for p in image.dir.iterdir()} == {
        name: 0o600 for name in ("Image", "initrd.gz", "client_key", "client_key.pub",
                                 "host_key.pub", "image.json")}
    assert names[vm_image.HOST_KEY][1] & 0o777 == 0o600     # as sshd wants it


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_private_files_are_never_wider_than_0600(tmp_path, monkeypatch):
    """Created 0600 (and dirs 0700) even under umask 0, and never chmodded:
    another user could open the file in between."""
    from aot.deploy.private_files import private_dir, write_private

    def no_chmod(*args, **kwargs):
        raise AssertionError("chmod after the fact")

    monkeypatch.setattr(os, "chmod", no_chmod)
    monkeypatch.setattr(Path, "chmod", no_chmod)
    old = os.umask(0)
    try:
        d = private_dir(tmp_path / "a" / "b")
        write_private(d / "key", b"secret")
        write_private(d / "key", b"secret 2")        # replaced whole
    finally:
        os.umask(old)
    assert [_mode(tmp_path / "a"), _mode(d), _mode(d / "key")] == [0o700, 0o700, 0o600]
    assert (d / "key").read_bytes() == b"secret 2" and [p.name for p in d.iterdir()] == ["key"]


def test_the_qemu_command_restricts_the_guest_and_lets_qemu_pick_the_port(tmp_path):
    cfg = vm.vm_config(get_board(BOARD))
    cmd = vm.qemu_command(cfg, vm_image.Image(tmp_path), tmp_path / "console.log", 7)
    assert cmd[cmd.index("-netdev") + 1] == ("user,id=n0,restrict=on,"
                                             "hostfwd=tcp:127.0.0.1:0-:22")
    assert cmd[cmd.index("-chardev") + 1] == "socket,id=qmp,fd=7"
    assert cmd[cmd.index("-mon") + 1] == "chardev=qmp,mode=control"
    assert not hasattr(vm, "free_port")


# --- booting it -------------------------------------------------------------------

@pytest.fixture
def env(tmp_path):
    """A private cache dir (linking the built image) and TMPDIR."""
    image = vm_image.find_image()
    cache = tmp_path / "cache"
    (cache / "vm").mkdir(parents=True)
    (cache / "vm" / image.dir.name).symlink_to(image.dir)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    return {**os.environ, vm_image.CACHE_ENV: str(cache), "TMPDIR": str(tmp)}


def aot(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aot", *args], capture_output=True, text=True,
                          timeout=300, env=env)


def qemu_pids(marker: str) -> list[int]:
    """qemu processes whose command line mentions `marker` (a test's dir)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and argv[0].endswith(b"qemu-system-aarch64") and \
                any(marker.encode() in a for a in argv):
            pids.append(int(proc.name))
    return pids


def _reference(x: np.ndarray) -> np.ndarray:
    import aot as aot_api
    from aot.check.reference import tflite_micro

    [out] = tflite_micro(MODEL, aot_api.load(MODEL), [x])
    return out


def test_run_boots_and_stops_its_own_vm(env, tmp_path):
    """Every command reaches the VM through the same transport (run, verify,
    bench: aot.deploy.ssh.reach), so one boot shows it; verify and bench run
    on the VM `aot board up` keeps (below)."""
    r = aot(env, "run", str(MODEL), "--board", BOARD,
            "--input", str(MODEL.with_suffix(".input.npy")), "--out", str(tmp_path / "out"),
            "--json")
    assert r.returncode == 0, r.stderr
    got = np.load(tmp_path / "out" / "Identity.npy")   # named after the output
    assert json.loads(r.stdout)["outputs"][0]["file"].endswith("Identity.npy")
    want = _reference(np.load(MODEL.with_suffix(".input.npy")))
    np.testing.assert_array_equal(got, want.reshape(got.shape))
    assert qemu_pids(str(tmp_path)) == []
    assert list(Path(env["TMPDIR"]).iterdir()) == []        # no private VM dir left


def test_board_up_is_reused_by_later_commands_until_down(env, tmp_path):
    r = aot(env, "board", "up", BOARD, "--json")
    assert r.returncode == 0, r.stderr
    up = json.loads(r.stdout)
    try:
        assert up["started"] and up["host"] == "127.0.0.1"
        assert qemu_pids(str(tmp_path)) == [up["pid"]]
        state = Path(up["key"]).parent
        assert [_mode(state), _mode(state.parent), _mode(state / "client_key"),
                _mode(state / "known_hosts")] == [0o700, 0o700, 0o600, 0o600]
        argv = Path(f"/proc/{up['pid']}/cmdline").read_bytes().split(b"\0")
        assert b"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:0-:22" in argv
        _guest_cannot_reach_the_host(up)
        console = Path(up["key"]).parent / "console.log"
        logins = console.read_text().count("Accepted publickey for root")
        again = json.loads(aot(env, "board", "up", BOARD, "--json").stdout)
        assert not again["started"] and again["pid"] == up["pid"]
        r = aot(env, "verify", str(MODEL), "--board", BOARD, "--json")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["ok"] and out["reference"] == "tflite-micro", out
        assert out["outputs"][0]["max_abs_err"] == 0.0
        r = aot(env, "bench", str(MODEL), "--board", BOARD, "--repeat", "3", "--warmup", "1",
                "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["board"] == BOARD
        # Both commands logged in to this VM, and no other VM was started.
        assert console.read_text().count("Accepted publickey for root") >= logins + 2
        assert qemu_pids(str(tmp_path)) == [up["pid"]]
    finally:
        r = aot(env, "board", "down", BOARD)
    assert r.returncode == 0 and r.stdout.strip() == f"{BOARD} stopped", r.stderr
    assert qemu_pids(str(tmp_path)) == []
    r = aot(env, "board", "down", BOARD)
    assert r.returncode == 0 and r.stdout.strip() == f"{BOARD} was not up"


def _guest_cannot_reach_the_host(up: dict) -> None:
    """restrict=on: the guest reaches no service of the host (10.0.2.2 is the
    host's loopback under QEMU's user network), though the host reaches the
    guest's sshd through the forward."""
    import socket
    import threading

    from aot.deploy.ssh import SshSession
    from aot.deploy.ssh_config import SshParams

    reached = []

    def serve(server: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                reached.append(conn.recv(16))
                conn.close()

    with socket.create_server(("127.0.0.1", 0)) as server:
        threading.Thread(target=serve, args=(server,), daemon=True).start()
        params = SshParams("127.0.0.1", up["port"], up["user"], up["key"], up["known_hosts"],
                           board=BOARD)
        with SshSession(params) as s:
            s.run(["sh", "-c", f"echo from-the-guest | nc -w 2 10.0.2.2 "
                   f"{server.getsockname()[1]}"], timeout=30)
        server.shutdown(socket.SHUT_RDWR)
    assert reached == []


def test_board_up_refuses_a_board_that_is_no_vm(env):
    r = aot(env, "board", "up", "host")
    assert r.returncode == 2
    assert r.stderr.strip() == ("aot: error: board 'host' is not a VM aot starts (it has no vm "
                                "option; qemu-rpi4 is one)")


def test_serve_mode_answers_100_requests_checked_against_the_reference(env, tmp_path,
                                                                       monkeypatch):
    import aot as aot_api
    from aot.api import package
    from aot.check.reference import tflite_micro
    from aot.check.inputs import random_inputs

    import tempfile

    monkeypatch.setenv(vm_image.CACHE_ENV, env[vm_image.CACHE_ENV])
    monkeypatch.setattr(tempfile, "tempdir", env["TMPDIR"])
    graph = aot_api.load(MODEL)
    pkg = package(MODEL, board=BOARD, out_dir=tmp_path / "pkg").path
    inputs = [random_inputs(graph, seed)[graph.inputs[0]] for seed in range(100)]
    [name], [out] = graph.inputs, graph.outputs
    with aot_api.connect(BOARD) as dev:
        for x in inputs:
            got = dev.run(pkg, {name: x})       # by name, as ONNX Runtime takes them
            [want] = tflite_micro(MODEL, graph, [x])
            assert list(got) == [out]
            np.testing.assert_array_equal(got[out], want.reshape(got[out].shape))
        [state] = Path(env["TMPDIR"]).glob("aot-vm-*")          # the private VM's files
        assert [_mode(state), _mode(state / "client_key"), _mode(state / "known_hosts")] == [
            0o700, 0o600, 0o600]
    assert qemu_pids(str(tmp_path)) == []
    assert list(Path(env["TMPDIR"]).iterdir()) == []


def _with(**options):
    import dataclasses

    board = get_board(BOARD)
    return dataclasses.replace(board, options={**board.options, **options})


def test_a_boot_that_gives_no_login_in_time_fails_with_the_console(env, tmp_path, monkeypatch):
    monkeypatch.setenv(vm_image.CACHE_ENV, env[vm_image.CACHE_ENV])
    with pytest.raises(AotError, match=r"did not answer on SSH within 1 s \(options.boot_timeout_s"
                       r"\); console: "):
        with vm.running(_with(boot_timeout_s=1)):
            pass
    assert qemu_pids(str(tmp_path)) == []


def test_a_qemu_that_stops_while_booting_is_reported(env, tmp_path, monkeypatch):
    monkeypatch.setenv(vm_image.CACHE_ENV, env[vm_image.CACHE_ENV])
    with pytest.raises(AotError, match=r"the qemu-rpi4 VM stopped while booting \(qemu exit 1\)"):
        with vm.running(_with(qemu="false")):
            pass


@pytest.mark.parametrize("options, message", [
    ({"remote_tmp": "tmp"}, "remote_tmp must be an absolute path"),
    ({"exec_prefix": "nice '-n"}, "exec_prefix .* is not valid"),
    ({"command_timeout_s": 0}, "command_timeout_s"),
])
def test_bad_ssh_options_fail_before_the_boot(env, tmp_path, monkeypatch, options, message):
    """A VM board's SSH options are checked before qemu starts: no boot to
    wait for, no VM left behind."""
    monkeypatch.setenv(vm_image.CACHE_ENV, env[vm_image.CACHE_ENV])
    monkeypatch.setattr(vm, "boot", lambda *a, **k: pytest.fail("booted with a bad option"))
    with pytest.raises(AotError, match=message):
        with vm.running(_with(**options)):
            pass
