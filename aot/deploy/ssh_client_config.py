"""The user's OpenSSH client config (~/.ssh/config, ssh_config(5)), read
with paramiko.SSHConfig: what it says about one host name.

Read are HostName, Port, User, IdentityFile, ProxyJump and ProxyCommand;
every other keyword is left to OpenSSH. paramiko does not follow Include:
an Include outside any Host or Match block (where tools such as OrbStack
and Colima put theirs) is inlined here, one inside a block is refused
rather than silently skipped.

Options given explicitly (the command line, the user's boards.toml) win
over the file, as `ssh -p`/`-l` do: they are parsed first, as a `Host *`
block of their own, so that the file's %p and %r tokens see them too.
"""
from __future__ import annotations

import glob
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from aot.errors import AotError

DEFAULT_PATH = "~/.ssh/config"
PATH_ENV = "AOT_SSH_CONFIG"
# OpenSSH's `-F none`: read no file.
NONE = "none"
# Include's depth, as OpenSSH limits it (READCONF_MAX_DEPTH).
MAX_INCLUDE_DEPTH = 16


@dataclass(frozen=True)
class HostConfig:
    """What the config says for one name; None or empty: it says nothing."""
    hostname: str
    port: int | None = None
    user: str | None = None
    identity_files: tuple[str, ...] = ()
    proxy_jump: str = ""          # "[user@]host[:port],...": the first proxy of the file
    proxy_command: str = ""       # run by the shell; its stdin/stdout carry the connection


@dataclass(frozen=True)
class Hop:
    """One jump host of a ProxyJump: a name looked up in the config again."""
    host: str
    port: int | None = None
    user: str | None = None


def config_path(option: str) -> Path | None:
    """The file to read: the ssh_config option, else $AOT_SSH_CONFIG, else
    ~/.ssh/config; None when there is none to read. A file named
    explicitly must exist (a typo would otherwise go unnoticed)."""
    named = option or os.environ.get(PATH_ENV, "")
    if named == NONE:
        return None
    if not named:
        default = Path(DEFAULT_PATH).expanduser()
        return default if default.is_file() else None
    path = Path(named).expanduser()
    if not path.exists() or path.is_dir():
        source = "ssh_config" if option else f"${PATH_ENV}"
        raise AotError(f"{source} names {path}, which is not a file (`none`: read no "
                       "OpenSSH config)")
    return path


_KEYWORD = re.compile(r"\s*(\w+)(?:\s*=\s*|\s+)(.*)")


def _inlined(path: Path, depth: int) -> str:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise AotError(f"cannot read the OpenSSH config {path}: "
                       f"{getattr(e, 'strerror', None) or e}") from None
    out, in_block = [], False
    for lineno, line in enumerate(lines, 1):
        m = _KEYWORD.match(line)
        keyword = m.group(1).lower() if m else ""
        if keyword in ("host", "match"):
            in_block = not (keyword == "host" and m.group(2).split() == ["*"])
        if keyword != "include":
            out.append(line)
            continue
        if in_block:
            raise AotError(f"{path} line {lineno}: an Include inside a Host or Match block "
                           "is not supported (paramiko reads the file): move it above the "
                           "first Host, or name another file with ssh_config")
        if depth >= MAX_INCLUDE_DEPTH:
            raise AotError(f"{path} line {lineno}: Includes nested more than "
                           f"{MAX_INCLUDE_DEPTH} deep")
        for included in _included(m.group(2)):
            out += [_inlined(included, depth + 1), "Host *"]   # back to the top level
    return "\n".join(out) + "\n"


def _included(value: str) -> list[Path]:
    """The files an Include names: globs, relative ones under ~/.ssh."""
    found = []
    for pattern in shlex.split(value):
        pattern = os.path.expanduser(pattern)
        if not os.path.isabs(pattern):
            pattern = os.path.join(os.path.expanduser("~/.ssh"), pattern)
        found += sorted(Path(p) for p in glob.glob(pattern) if os.path.isfile(p))
    return found


@dataclass(frozen=True)
class ClientConfig:
    """An OpenSSH client config's text (Includes inlined) and where it came from."""
    text: str = ""
    source: str = "no OpenSSH config"

    def lookup(self, name: str, port: int | None = None, user: str | None = None) -> HostConfig:
        """What the config says for `name`, an explicit port and user first."""
        import paramiko

        # Before the file's text: the first value given wins.
        explicit = (f"Port {port}\n" if port is not None else "") + \
            (f"User {user}\n" if user else "")
        try:
            conf = paramiko.SSHConfig.from_text(explicit + self.text).lookup(name)
        except (paramiko.SSHException, ImportError, ValueError) as e:
            raise AotError(f"{self.source}: cannot read it for host {name!r} ({e})") from None
        return HostConfig(
            hostname=conf["hostname"], port=_port(conf.get("port"), self.source, name),
            user=conf.get("user") or None,
            identity_files=tuple(str(Path(f).expanduser()) for f in conf.get("identityfile", ())),
            **_proxy(conf))


def load(option: str) -> ClientConfig:
    """The config the ssh_config option (else $AOT_SSH_CONFIG, else
    ~/.ssh/config) names; an empty one when there is none to read."""
    path = config_path(option)
    return ClientConfig() if path is None else ClientConfig(_inlined(path, 0), str(path))


def _port(value: str | None, source: str, name: str) -> int | None:
    if value is None:
        return None
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise AotError(f"{source}: Port {value!r} for host {name!r} is not a port number")
    return int(value)


def _proxy(conf) -> dict[str, str]:
    """ProxyJump or ProxyCommand, whichever the file gives first (OpenSSH
    takes the first of the two); `none` turns either off."""
    for key in conf:
        if key in ("proxyjump", "proxycommand"):
            value = conf[key]
            if value is None or value.strip().lower() == NONE:
                return {}
            return {"proxy_jump" if key == "proxyjump" else "proxy_command": value.strip()}
    return {}


def parse_jumps(spec: str, source: str) -> tuple[Hop, ...]:
    """ProxyJump's `[user@]host[:port]` (or ssh://...) hops, comma-separated."""
    hops = []
    for part in spec.split(","):
        text = part.strip().removeprefix("ssh://")
        user, _, hostport = text.rpartition("@")
        m = re.fullmatch(r"\[([^\]]+)\](?::(\d+))?|([^:\[\]/]+)(?::(\d+))?", hostport)
        port = m and (m.group(2) or m.group(4))
        if not m or (port and not 1 <= int(port) <= 65535):
            raise AotError(f"{source}: ProxyJump {spec!r}: {part.strip()!r} is not "
                           "[user@]host[:port]")
        hops.append(Hop(m.group(1) or m.group(3), int(port) if port else None, user or None))
    return tuple(hops)
