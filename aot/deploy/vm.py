"""Virtual boards aot starts itself: qemu-system-aarch64 booting the
qemu-rpi4 image (aot/deploy/vm_image.py) into an SSH server on 127.0.0.1.

A board with `vm = "qemu-rpi4"` in its [options] is reached over SSH like a
real Pi; the ssh transport asks `running(board)` for the connection:

    with vm.running(board) as params:      # an SshParams
        ...

If `aot board up BOARD` started a VM that is still alive, that one is used
and left running. Otherwise a private VM boots (its own port and temp dir,
so two aot processes never collide) and is stopped when the block exits,
also on an error or Ctrl-C. Host keys stay verified: the image has a fixed
host key, written into a known_hosts file beside the VM.

Nothing in between for another local user: qemu binds the forwarded port
itself (hostfwd port 0) and aot reads it back over QMP, so there is no gap
between choosing a port and binding it in which someone else could take it
and pose as the VM; the VM's files (client key, known_hosts) are 0600 in a
0700 directory; and the guest's network is `restrict=on`: it reaches
nothing but the forwarded port (not the host's loopback services).

Board options (all optional):

    vm = "qemu-rpi4"              # the image
    qemu = "qemu-system-aarch64"
    machine = "virt"
    cpu = "cortex-a72"
    smp = 2                       # cores
    memory_mb = 1024
    boot_timeout_s = 120          # boot to a working SSH login
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

from aot.support import progress, tools
from aot.support.jsonfile import loads, read_json
from aot.deploy.private_files import private_dir, write_private
from aot.deploy.ssh_config import SshParams, ssh_params as board_ssh_params
from aot.deploy.vm_image import IMAGE_NAME, Image, cache_root, find_image
from aot.errors import AotError, BoardUnreachableError, MissingToolError
from aot.targets import Board, option_number, option_str, with_options

DEFAULT_BOOT_TIMEOUT_S = 120.0
USER = "root"
# Serial console lines quoted when a boot fails.
LOG_TAIL_LINES = 8


@dataclass(frozen=True)
class VmConfig:
    qemu: str
    machine: str
    cpu: str
    smp: int
    memory_mb: int
    boot_timeout_s: float


@dataclass(frozen=True)
class Vm:
    """A booted VM: its qemu process, SSH port and state directory (the
    serial log, the client key and the known_hosts file)."""
    board: str
    pid: int
    port: int
    dir: Path

    @property
    def key(self) -> Path:
        return self.dir / "client_key"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def log(self) -> Path:
        return self.dir / "console.log"


def vm_config(board: Board) -> VmConfig:
    o = board.options
    name = o.get("vm")
    if name != IMAGE_NAME:
        raise AotError(f"board '{board.name}': unknown VM image '{name}' (known: {IMAGE_NAME})")
    return VmConfig(qemu=option_str(board, "qemu", "qemu-system-aarch64"),
                    machine=option_str(board, "machine", "virt"),
                    cpu=option_str(board, "cpu", "cortex-a72"),
                    smp=option_number(board, "smp", 2, int, 1, 64),
                    memory_mb=option_number(board, "memory_mb", 1024, int, 64, 1 << 20),
                    boot_timeout_s=option_number(board, "boot_timeout_s", DEFAULT_BOOT_TIMEOUT_S,
                                                 float, 1, 86400))


# The ROM QEMU loads for the virtio-net-pci NIC below: Debian's ipxe-qemu,
# only recommended by qemu-system-arm (so absent after an install without
# recommends), and QEMU refuses to start without it.
NIC_ROM = "efi-virtio.rom"


def qemu_command(cfg: VmConfig, image: Image, log: Path, qmp_fd: int) -> list[str]:
    """qemu for the VM: the guest's port 22 forwarded from a port qemu picks
    on 127.0.0.1 (read back over QMP, on the socket `qmp_fd`), and the
    guest's network restricted to that forward."""
    return [cfg.qemu, "-M", cfg.machine, "-cpu", cfg.cpu, "-smp", str(cfg.smp),
            "-m", str(cfg.memory_mb), "-nographic", "-monitor", "none",
            "-chardev", f"socket,id=qmp,fd={qmp_fd}", "-mon", "chardev=qmp,mode=control",
            "-serial", f"file:{log}", "-no-reboot",
            "-kernel", str(image.kernel), "-initrd", str(image.initrd),
            "-append", "console=ttyAMA0 panic=-1",
            "-netdev", "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:0-:22",
            "-device", "virtio-net-pci,netdev=n0"]


def ssh_params(board: Board, vm: Vm) -> SshParams:
    """The board's SSH options, checked as for any SSH board, aimed at the VM."""
    return board_ssh_params(with_options(board, host="127.0.0.1", port=vm.port, user=USER,
                                         key=str(vm.key), known_hosts=str(vm.known_hosts)))


def _check_ssh_options(board: Board) -> None:
    """The board's own SSH options (exec_prefix, remote_tmp, timeouts)
    checked as ssh_params will check them once the VM is up."""
    board_ssh_params(with_options(board, host="127.0.0.1", port=22, user=USER))


# --- the qemu process -------------------------------------------------------------


def _die_with_parent() -> None:
    """In the child before exec: a private VM dies with the aot process
    that started it, even when that one is killed outright."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)       # PR_SET_PDEATHSIG


def emulator(board: Board, cfg: VmConfig) -> str:
    """The path of the board's qemu, checked with the NIC ROM it loads (looked
    up where that qemu looks), before any boot."""
    qemu = tools.require(cfg.qemu, f"board '{board.name}'")
    # A program that names no data directories is no QEMU we can check: it
    # fails (or not) when it starts.
    dirs = tools.qemu_data_dirs(qemu)
    if dirs and not any((d / NIC_ROM).is_file() for d in dirs):
        raise MissingToolError(tools.not_installed(f"board '{board.name}': {cfg.qemu}'s NIC ROM",
                                                   NIC_ROM))
    return qemu


def _start(cfg: VmConfig, image: Image, state: Path, private: bool
           ) -> tuple[subprocess.Popen, socket.socket]:
    """qemu started, and our end of its QMP socket (a socketpair: no socket
    file anyone else could connect to)."""
    ours, theirs = socket.socketpair()
    try:
        cmd = qemu_command(cfg, image, state / "console.log", theirs.fileno())
        with open(state / "qemu.log", "wb") as err:
            # Its own session: a Ctrl-C reaches aot, which stops the VM itself.
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                    start_new_session=True, pass_fds=(theirs.fileno(),),
                                    preexec_fn=_die_with_parent if private else None)
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return proc, ours


# `info usernet`'s row of the port forward: qemu's own port on 127.0.0.1,
# then the guest's address and port 22.
# QMP's replies (`info usernet`) are a few KB.
MAX_QMP_LINE = 1 << 20
HOSTFWD_ROW = re.compile(r"TCP\[HOST_FORWARD\]\s+\d+\s+127\.0\.0\.1\s+(\d+)\s+\S+\s+22\s")


def forwarded_port(qmp: socket.socket, timeout_s: float) -> int | None:
    """The host port qemu bound for the guest's SSH, asked over QMP; None if
    qemu closed the socket (it stopped)."""
    qmp.settimeout(timeout_s)
    f = qmp.makefile("rwb")
    try:
        if not f.readline():        # the greeting
            return None
        for command in ({"execute": "qmp_capabilities"},
                        {"execute": "human-monitor-command",
                         "arguments": {"command-line": "info usernet"}}):
            f.write(json.dumps(command).encode() + b"\n")
            f.flush()
            reply = _qmp_reply(f)
            if reply is None:
                return None
        m = HOSTFWD_ROW.search(str(reply.get("return", "")))
    except (OSError, ValueError, AotError):
        return None
    finally:
        f.close()
    if m is None:
        raise BoardUnreachableError(f"the {IMAGE_NAME} VM's qemu shows no SSH port forward "
                                    f"(info usernet: {reply!r:.200})")
    return int(m[1])


def _qmp_reply(f) -> dict | None:
    """The answer to the last command (events before it are skipped)."""
    while line := f.readline(MAX_QMP_LINE):
        msg = loads(line.decode("utf-8", "replace"), "qemu's QMP reply")
        if isinstance(msg, dict) and ("return" in msg or "error" in msg):
            return msg
    return None


def _tail(path: Path, n: int = LOG_TAIL_LINES) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in lines[-n:])


def _banner(port: int, timeout: float) -> bool:
    """Whether an SSH server greets on the port. While the guest boots,
    QEMU's port forward accepts and drops connections: checked with a plain
    socket first, paramiko (which logs each failed handshake) only after."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            return s.recv(4) == b"SSH-"
    except OSError:
        return False


def _ssh_ready(vm: Vm, timeout: float) -> bool:
    """True once a key login works; False while the guest still boots."""
    import paramiko

    if not _banner(vm.port, timeout):
        return False
    client = paramiko.SSHClient()
    client.load_host_keys(str(vm.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.connect("127.0.0.1", port=vm.port, username=USER, key_filename=str(vm.key),
                       look_for_keys=False, allow_agent=False, timeout=timeout,
                       banner_timeout=timeout, auth_timeout=timeout)
        return True
    except paramiko.BadHostKeyException as e:
        raise BoardUnreachableError(f"the {IMAGE_NAME} VM presents a host key other than its "
                                    f"image's ({e})") from None
    except (OSError, EOFError, paramiko.SSHException):
        return False
    finally:
        client.close()


def _stopped(proc: subprocess.Popen, state: Path) -> str:
    return (f"the {IMAGE_NAME} VM stopped while booting (qemu exit {proc.returncode}): "
            f"{_tail(state / 'qemu.log') or _tail(state / 'console.log')}")


def _no_answer(timeout_s: float, state: Path) -> str:
    return (f"the {IMAGE_NAME} VM did not answer on SSH within {timeout_s:g} s "
            f"(options.boot_timeout_s); console: {_tail(state / 'console.log')}")


def _wait_ssh(vm: Vm, proc: subprocess.Popen, timeout_s: float, deadline: float) -> None:
    # A connection made before the guest's network is up hangs rather than
    # fails: short tries first, longer ones in case the guest is just slow.
    probe_s = 0.5
    while True:
        if proc.poll() is not None:
            raise BoardUnreachableError(_stopped(proc, vm.dir))
        left = deadline - time.monotonic()
        if left <= 0:
            raise BoardUnreachableError(_no_answer(timeout_s, vm.dir))
        if _ssh_ready(vm, min(probe_s, max(left, 0.1))):
            return
        probe_s = min(probe_s + 0.25, 5.0)
        time.sleep(0.1)


def _stop_pid(pid: int, proc: subprocess.Popen | None = None) -> None:
    """SIGTERM, then SIGKILL if qemu lingers; reaps it when it is our child."""
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if proc is not None:
                if proc.poll() is not None:
                    return
            elif not _pid_alive(pid):
                return
            time.sleep(0.05)
    if proc is not None:
        proc.wait()


def _pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def boot(board: Board, state: Path, private: bool) -> tuple[Vm, subprocess.Popen]:
    """Boot the board's VM with its files in `state` (a 0700 directory);
    returns once SSH logins work."""
    cfg = vm_config(board)
    cfg = replace(cfg, qemu=emulator(board, cfg))
    image = find_image()
    write_private(state / "client_key", image.client_key.read_bytes())
    deadline = time.monotonic() + cfg.boot_timeout_s
    proc, qmp = _start(cfg, image, state, private)
    try:
        with progress.step(f"boot {board.name}"):
            with qmp:
                port = forwarded_port(qmp, cfg.boot_timeout_s)
            if port is None:        # qemu closed its QMP socket: it is stopping
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
                raise BoardUnreachableError(_stopped(proc, state) if proc.poll() is not None else
                                            _no_answer(cfg.boot_timeout_s, state))
            write_private(state / "known_hosts",
                          f"[127.0.0.1]:{port} {image.host_key()}\n".encode())
            vm = Vm(board.name, proc.pid, port, state)
            _wait_ssh(vm, proc, cfg.boot_timeout_s, deadline)
        return vm, proc
    except BaseException:
        _stop_pid(proc.pid, proc)
        raise


# --- persistent VMs (aot board up / down) ---------------------------------------

def run_dir(board_name: str) -> Path:
    return cache_root() / "vm" / "run" / board_name


def _is_our_qemu(vm: Vm) -> bool:
    """The recorded pid is still the qemu that writes this VM's console log
    (not a recycled pid)."""
    try:
        argv = Path(f"/proc/{vm.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return _pid_alive(vm.pid) and f"file:{vm.log}".encode() in argv


def persistent(board: Board) -> Vm | None:
    """The VM `aot board up` started for this board, if it is still alive."""
    d = run_dir(board.name)
    try:
        s = read_json(d / "state.json", "the VM's state.json", 4096)
        vm = Vm(board.name, int(s["pid"]), int(s["port"]), d)
    except (AotError, ValueError, KeyError, TypeError):
        return None
    return vm if _is_our_qemu(vm) else None


@contextlib.contextmanager
def _locked(board_name: str) -> Iterator[None]:
    """One `aot board up/down` of a board at a time (two ups at once would
    boot two VMs and keep the state of one)."""
    d = private_dir(run_dir(board_name).parent)
    with open(d / f".{board_name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def up(board: Board) -> tuple[Vm, bool]:
    """Start the board's persistent VM; (vm, False) when it was already up."""
    vm_config(board)
    with _locked(board.name):
        return _up(board)


def _up(board: Board) -> tuple[Vm, bool]:
    running_vm = persistent(board)
    if running_vm is not None:
        return running_vm, False
    d = run_dir(board.name)
    shutil.rmtree(d, ignore_errors=True)
    private_dir(d)
    try:
        vm, _ = boot(board, d, private=False)
    except BaseException:
        shutil.rmtree(d, ignore_errors=True)
        raise
    tmp = d / "state.json.tmp"
    tmp.write_text(json.dumps({"board": vm.board, "pid": vm.pid, "port": vm.port}) + "\n")
    tmp.rename(d / "state.json")
    return vm, True


def down(board: Board) -> Vm | None:
    """Stop the board's persistent VM; None when none was running."""
    with _locked(board.name):
        vm = persistent(board)
        if vm is not None:
            _stop_pid(vm.pid)
        shutil.rmtree(run_dir(board.name), ignore_errors=True)
        return vm


# --- what the ssh transport uses -----------------------------------------------

@contextlib.contextmanager
def running(board: Board) -> Iterator:
    """SshParams for the board's VM: the one `aot board up` started, or a
    private one booted now and stopped when the block exits."""
    vm_config(board)
    _check_ssh_options(board)        # a bad option fails now, not after the boot
    vm = persistent(board)
    if vm is not None:
        yield ssh_params(board, vm)
        return
    state = Path(tempfile.mkdtemp(prefix="aot-vm-"))      # 0700
    proc = None
    try:
        vm, proc = boot(board, state, private=True)
        yield ssh_params(board, vm)
    finally:
        if proc is not None:
            _stop_pid(proc.pid, proc)
        shutil.rmtree(state, ignore_errors=True)
