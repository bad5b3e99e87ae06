"""How to reach a board over SSH: its options as SshParams, checked, with
what the user's ~/.ssh/config says of its host (aot/deploy/ssh_client_config.py).

Both the SSH transport (aot/deploy/ssh.py) and the VM boards
(aot/deploy/vm.py, which aim these options at the VM they boot) read them
here, so neither imports the other for it; nothing here loads paramiko
until an OpenSSH config is read (never for a VM board).
The keys and their types: aot/support/config_schema.py SSH_OPTIONS; the table of
defaults and the order of precedence: docs/deploy.md.

Precedence, as OpenSSH has it for its command line: an option the user gave
(the command line, boards.toml, a Board from Python) wins over ~/.ssh/config,
which wins over the board file's own defaults (rpi4's user pi, port 22).
"""
from __future__ import annotations

import getpass
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

from aot.deploy import ssh_client_config
from aot.deploy.ssh_client_config import ClientConfig, HostConfig, parse_jumps
from aot.errors import AotError
from aot.targets import (Board, boards, config_path, option_bool, option_number, option_str,
                         user_options)

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_COMMAND_TIMEOUT_S = 600.0
# Jump hosts on the way to one board: more is a ProxyJump loop in the config.
MAX_JUMPS = 8


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
    # From ~/.ssh/config. Its IdentityFiles, tried (with the agent) when no key is given:
    identity_files: tuple[str, ...] = ()
    proxy_command: str = ""      # run by /bin/sh; the connection goes over its stdin/stdout
    via: SshParams | None = None     # the jump host the connection goes through (ProxyJump)
    alias: str = ""              # the name the user gave, which the config maps to host
    jump: bool = False           # these params reach a jump host on the way to `board`


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
    port = option_number(board, "port", 22, int, 1, 65535)
    user = option_str(board, "user", "")
    params = SshParams(
        host=host, port=port, user=user or getpass.getuser(),
        key=str(Path(key).expanduser()) if key else None,
        known_hosts=str(Path(known_hosts).expanduser()),
        exec_prefix=prefix,
        connect_timeout_s=option_number(board, "connect_timeout_s", DEFAULT_CONNECT_TIMEOUT_S,
                                        float, 0.1, 3600),
        command_timeout_s=option_number(board, "command_timeout_s", DEFAULT_COMMAND_TIMEOUT_S,
                                        float, 0.1, 86400 * 7),
        trust_new_host_key=option_bool(board, "trust_new_host_key", False),
        remote_tmp=remote_tmp.rstrip("/") or "/", board=board.name)
    ssh_config = option_str(board, "ssh_config", "", path=True)
    if board.options.get("vm"):     # aot's own VM: its address, user and key are aot's
        return params
    explicit = _explicit(board)
    config = ssh_client_config.load(ssh_config)
    conf = config.lookup(host, port if "port" in explicit else None,
                         user if "user" in explicit else None)
    return _through(config, conf, replace(
        params, host=conf.hostname, port=conf.port or port,
        user=conf.user or params.user, alias=host if conf.hostname != host else "",
        identity_files=() if key else _existing(conf.identity_files)), 0)


def _explicit(board: Board) -> frozenset[str]:
    """The options the user gave: not the board file's own defaults (which
    ~/.ssh/config overrides). A value the same as the default counts as
    the default, unless it comes from boards.toml."""
    own = boards().get(board.name)
    defaults = own.options if own is not None else {}
    mine = user_options(board.name) if own is not None else {}
    return frozenset(k for k, v in board.options.items()
                     if k in mine or k not in defaults or defaults[k] != v)


def _existing(files: tuple[str, ...]) -> tuple[str, ...]:
    """IdentityFiles that exist: OpenSSH skips the others quietly too."""
    return tuple(f for f in files if Path(f).is_file())


def _through(config: ClientConfig, conf: HostConfig, params: SshParams,
             depth: int) -> SshParams:
    """params with the proxy conf gives: a ProxyCommand or jump hosts."""
    if conf.proxy_command:
        return replace(params, proxy_command=conf.proxy_command)
    if conf.proxy_jump:
        return replace(params, via=_jump(config, parse_jumps(conf.proxy_jump, config.source),
                                         params, depth + 1))
    return params


def _jump(config: ClientConfig, hops, target: SshParams, depth: int) -> SshParams:
    """The last of `hops`, reached through the ones before it; the first
    through whatever proxy its own config gives (as `ssh -J a,b` does).
    Its name, port and user are looked up again; known_hosts, timeouts and
    trust are the board's."""
    if depth > MAX_JUMPS:
        raise AotError(f"board '{target.board}': more than {MAX_JUMPS} jump hosts on the "
                       f"way to it: is there a ProxyJump loop in {config.source}?")
    hop = hops[-1]
    conf = config.lookup(hop.host, hop.port, hop.user)
    params = replace(target, host=conf.hostname, port=conf.port or 22,
                     user=conf.user or getpass.getuser(), key=None,
                     identity_files=_existing(conf.identity_files), proxy_command="", via=None,
                     alias=hop.host if conf.hostname != hop.host else "", jump=True)
    if len(hops) > 1:
        return replace(params, via=_jump(config, hops[:-1], target, depth + 1))
    return _through(config, conf, params, depth)


def where(params: SshParams) -> str:
    at = f"{params.host}:{params.port}"
    if params.alias:
        at = f"{params.alias} ({at})"
    if params.jump:
        return f"jump host {at}" + (f" on the way to board '{params.board}'"
                                    if params.board else "")
    return f"board '{params.board}' at {at}" if params.board else at
