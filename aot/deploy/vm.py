"""Virtual boards aot starts itself: qemu-system-aarch64 booting the
qemu-rpi4 image (aot/deploy/vm_image.py) into an SSH server on 127.0.0.1.

A board with `vm = "qemu-rpi4"` in its [options] is reached over SSH like a
real Pi; the ssh transport asks `running(board)` for the connection:

    with vm.running(board) as params:      # an SshParams
        ...

If `aot board up BOARD` started a VM that is still alive, that one is used
and left running. Otherwise a private VM boots (its own free port and temp
dir, so two aot processes never collide) and is stopped when the block
exits, also on an error or Ctrl-C. Host keys stay verified: the image has a
fixed host key, written into a known_hosts file beside the VM.

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
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

from aot import progress, tools
from aot.deploy.vm_image import IMAGE_NAME, Image, cache_root, find_image
from aot.errors import AotError
from aot.targets import Board, option_number, with_options

DEFAULT_BOOT_TIMEOUT_S = 120.0
USER = "root"
# Serial console lines quoted when a boot fails.
LOG_TAIL_LINES = 8
PORT_ATTEMPTS = 3


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
    return VmConfig(qemu=str(o.get("qemu", "qemu-system-aarch64")),
                    machine=str(o.get("machine", "virt")), cpu=str(o.get("cpu", "cortex-a72")),
                    smp=option_number(board, "smp", 2, int, 1, 64),
                    memory_mb=option_number(board, "memory_mb", 1024, int, 64, 1 << 20),
                    boot_timeout_s=option_number(board, "boot_timeout_s", DEFAULT_BOOT_TIMEOUT_S,
                                                 float, 1, 86400))


# The ROM QEMU loads for the virtio-net-pci NIC below: Debian's ipxe-qemu,
# only recommended by qemu-system-arm (so absent after an install without
# recommends), and QEMU refuses to start without it.
NIC_ROM = "efi-virtio.rom"


def qemu_command(cfg: VmConfig, image: Image, port: int, log: Path) -> list[str]:
    return [cfg.qemu, "-M", cfg.machine, "-cpu", cfg.cpu, "-smp", str(cfg.smp),
            "-m", str(cfg.memory_mb), "-nographic", "-monitor", "none",
            "-serial", f"file:{log}", "-no-reboot",
            "-kernel", str(image.kernel), "-initrd", str(image.initrd),
            "-append", "console=ttyAMA0 panic=-1",
            "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{port}-:22",
            "-device", "virtio-net-pci,netdev=n0"]


def ssh_params(board: Board, vm: Vm):
    """The board's SSH options, checked as for any SSH board, aimed at the VM."""
    from aot.deploy import ssh

    return ssh.ssh_params(with_options(board, host="127.0.0.1", port=vm.port, user=USER,
                                       key=str(vm.key), known_hosts=str(vm.known_hosts)))


def _check_ssh_options(board: Board) -> None:
    """The board's own SSH options (exec_prefix, remote_tmp, timeouts)
    checked as ssh_params will check them once the VM is up."""
    from aot.deploy import ssh

    ssh.ssh_params(with_options(board, host="127.0.0.1", port=22, user=USER))


# --- the qemu process -------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: a private VM dies with the aot process
    that started it, even when that one is killed outright."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)       # PR_SET_PDEATHSIG


def emulator(board: Board, cfg: VmConfig) -> str:
    """The path of the board's qemu, checked with the NIC ROM it loads (looked
    up where that qemu looks), before any boot."""
    qemu = tools.require(cfg.qemu, f"board '{board.name}'")
    if tools.qemu_data_file(qemu, NIC_ROM) is None:
        raise AotError(tools.not_installed(f"board '{board.name}': {cfg.qemu}'s NIC ROM", NIC_ROM))
    return qemu


def _start(cfg: VmConfig, image: Image, state: Path, port: int, private: bool
           ) -> subprocess.Popen:
    cmd = qemu_command(cfg, image, port, state / "console.log")
    with open(state / "qemu.log", "wb") as err:
        # Its own session: a Ctrl-C reaches aot, which stops the VM itself.
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                start_new_session=True,
                                preexec_fn=_die_with_parent if private else None)


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
        raise AotError(f"the {IMAGE_NAME} VM presents a host key other than its image's "
                       f"({e})") from None
    except (OSError, EOFError, paramiko.SSHException):
        return False
    finally:
        client.close()


def _wait_ssh(vm: Vm, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    # A connection made before the guest's network is up hangs rather than
    # fails: short tries first, longer ones in case the guest is just slow.
    probe_s = 0.5
    while True:
        if proc.poll() is not None:
            raise AotError(f"the {IMAGE_NAME} VM stopped while booting (qemu exit "
                           f"{proc.returncode}): {_tail(vm.dir / 'qemu.log') or _tail(vm.log)}")
        left = deadline - time.monotonic()
        if left <= 0:
            raise AotError(f"the {IMAGE_NAME} VM did not answer on SSH within {timeout_s:g} s "
                           f"(options.boot_timeout_s); console: {_tail(vm.log)}")
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
    """Boot the board's VM with its files in `state`; returns once SSH logins work."""
    cfg = vm_config(board)
    cfg = replace(cfg, qemu=emulator(board, cfg))
    image = find_image()
    shutil.copyfile(image.client_key, state / "client_key")
    (state / "client_key").chmod(0o600)
    for attempt in range(PORT_ATTEMPTS):
        port = free_port()
        (state / "known_hosts").write_text(f"[127.0.0.1]:{port} {image.host_key()}\n")
        proc = _start(cfg, image, state, port, private)
        vm = Vm(board.name, proc.pid, port, state)
        try:
            with progress.step(f"boot {board.name}"):
                _wait_ssh(vm, proc, cfg.boot_timeout_s)
            return vm, proc
        except AotError:
            _stop_pid(proc.pid, proc)
            # Another process took the port between our check and qemu's bind.
            if attempt + 1 < PORT_ATTEMPTS and "hostfwd" in _tail(state / "qemu.log"):
                continue
            raise
        except BaseException:
            _stop_pid(proc.pid, proc)
            raise
    raise AssertionError("unreachable")


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
        s = json.loads((d / "state.json").read_text())
        vm = Vm(board.name, int(s["pid"]), int(s["port"]), d)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return vm if _is_our_qemu(vm) else None


@contextlib.contextmanager
def _locked(board_name: str) -> Iterator[None]:
    """One `aot board up/down` of a board at a time (two ups at once would
    boot two VMs and keep the state of one)."""
    d = run_dir(board_name).parent
    d.mkdir(parents=True, exist_ok=True)
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
    d.mkdir(parents=True)
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
    state = Path(tempfile.mkdtemp(prefix="aot-vm-"))
    proc = None
    try:
        vm, proc = boot(board, state, private=True)
        yield ssh_params(board, vm)
    finally:
        if proc is not None:
            _stop_pid(proc.pid, proc)
        shutil.rmtree(state, ignore_errors=True)
