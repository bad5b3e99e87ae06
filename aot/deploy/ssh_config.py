"""How to reach a board over SSH: its options as SshParams, checked.

Both the SSH transport (aot/deploy/ssh.py) and the VM boards
(aot/deploy/vm.py, which aim these options at the VM they boot) read them
here, so neither imports the other for it; nothing here loads paramiko.
The keys and their types: aot/config_schema.py SSH_OPTIONS; the table of
defaults: docs/deploy.md.
"""
from __future__ import annotations

import getpass
import shlex
from dataclasses import dataclass
from pathlib import Path

from aot.errors import AotError
from aot.targets import Board, config_path, option_bool, option_number, option_str

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_COMMAND_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class SshParams:
    host: str
    port: int
    user: str
    key: str | None              # private key file; None: the ssh agent / default keys
    known_hosts: str             # file checked with paramiko RejectPolicy
    exec_prefix: str = ""        # e.g. "taskset -c 3" or "qemu-aarch64": prepended to the harness
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    # Every command, upload and download on the board (each on its own).
    command_timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S
    trust_new_host_key: bool = False
    remote_tmp: str = "/tmp"     # the per-run work dirs are made here
    board: str = ""              # the board's name, for messages


def ssh_params(board: Board) -> SshParams:
    """The board's options (overrides already merged) as SshParams, checked."""
    host = option_str(board, "host", "")
    if not host:
        raise AotError(f"board '{board.name}' has no host: pass --host HOST, or set "
                       f"host = \"...\" in the [{board.name}] table of {config_path()}")
    key = option_str(board, "key", "", path=True)
    prefix = option_str(board, "exec_prefix", "")
    try:
        shlex.split(prefix)
    except ValueError as e:
        raise AotError(f"board '{board.name}': exec_prefix {prefix!r} is not valid ({e})") from None
    remote_tmp = option_str(board, "remote_tmp", "/tmp", path=True)
    if not remote_tmp.startswith("/"):
        raise AotError(f"board '{board.name}': remote_tmp must be an absolute path, "
                       f"got {remote_tmp!r}")
    known_hosts = option_str(board, "known_hosts", DEFAULT_KNOWN_HOSTS, path=True)
    return SshParams(
        host=host, port=option_number(board, "port", 22, int, 1, 65535),
        user=option_str(board, "user", "") or getpass.getuser(),
        key=str(Path(key).expanduser()) if key else None,
        known_hosts=str(Path(known_hosts).expanduser()),
        exec_prefix=prefix,
        connect_timeout_s=option_number(board, "connect_timeout_s", DEFAULT_CONNECT_TIMEOUT_S,
                                        float, 0.1, 3600),
        command_timeout_s=option_number(board, "command_timeout_s", DEFAULT_COMMAND_TIMEOUT_S,
                                        float, 0.1, 86400 * 7),
        trust_new_host_key=option_bool(board, "trust_new_host_key", False),
        remote_tmp=remote_tmp.rstrip("/") or "/", board=board.name)


def where(params: SshParams) -> str:
    at = f"{params.host}:{params.port}"
    return f"board '{params.board}' at {at}" if params.board else at
