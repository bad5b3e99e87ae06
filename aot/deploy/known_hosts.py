"""Host keys of boards reached over SSH: checked against a known_hosts file,
never accepted silently.

paramiko compares the key a board presents with the file: a different key is
refused outright (it may be a man-in-the-middle), whatever the options say.
An unknown key is refused too, unless the user asked to trust it (`aot board
trust BOARD`, or `--trust-new-host-key`): then it is appended to the file, in
OpenSSH's format, so `ssh` and later aot runs agree on it.

Marker lines: `@revoked` is honoured (its key is refused for every host,
whatever the line's host pattern, even when another line lists it as the
host's key); `@cert-authority` lines are skipped (aot checks plain host
keys, not certificates): neither makes the file invalid.
"""
from __future__ import annotations

import os
from pathlib import Path

import paramiko

from aot.errors import AotError


def describe(key: paramiko.PKey) -> str:
    """A key as OpenSSH shows it: type and SHA256 fingerprint."""
    return f"{key.get_name()} {key.fingerprint}"


def add_known_host(path: str, hostname: str, key: paramiko.PKey) -> None:
    """Append `hostname key` to the known_hosts file (created 0600, its
    directory 0700). Appending keeps the user's other entries as they are."""
    file = Path(path)
    file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
    fd = os.open(file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a") as f:
        if f.tell() > 0 and not file.read_bytes().endswith(b"\n"):
            line = "\n" + line
        f.write(line)


class UnknownHostKey(Exception):
    """The board's key is not in known_hosts (raised through paramiko)."""

    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(hostname)
        self.hostname, self.key = hostname, key


class RevokedHostKey(UnknownHostKey):
    """The board's key is marked @revoked in known_hosts."""


class HostKeyPolicy(paramiko.RejectPolicy):
    """RejectPolicy that remembers the key it rejects (to say which one), or,
    asked to trust new keys, records it in known_hosts; with `capture`, an
    unknown key is let through this once and kept in `unknown` (nothing is
    written: `aot board trust` shows it first). A revoked key is refused
    whatever the options. paramiko only asks for keys it has no entry for:
    a changed key never reaches this policy (a revoked one always does:
    load() leaves it out of the entries)."""

    def __init__(self, known_hosts: str, trust_new: bool,
                 revoked: tuple[paramiko.PKey, ...] = (), capture: bool = False) -> None:
        self.known_hosts, self.trust_new = known_hosts, trust_new
        self.revoked, self.capture = revoked, capture
        self.added: paramiko.PKey | None = None
        self.unknown: paramiko.PKey | None = None

    def missing_host_key(self, client, hostname: str, key: paramiko.PKey) -> None:
        if key in self.revoked:
            raise RevokedHostKey(hostname, key)
        if self.capture:
            self.unknown = key
            return
        if not self.trust_new:
            raise UnknownHostKey(hostname, key)
        try:
            add_known_host(self.known_hosts, hostname, key)
        except OSError as e:
            raise AotError(f"cannot add the host key of {hostname} to {self.known_hosts}: "
                           f"{e.strerror}") from None
        self.added = key


def load(client: paramiko.SSHClient, known_hosts: str) -> tuple[paramiko.PKey, ...]:
    """Load the known_hosts file into the client (a missing file: no keys);
    the keys it marks @revoked, which are left out of the client's entries."""
    if not os.path.exists(known_hosts):
        return ()
    try:
        with open(known_hosts, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise AotError(f"cannot read known_hosts file {known_hosts}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise AotError(f"known_hosts file {known_hosts} is not text") from None
    entries, revoked = [], []
    for lineno, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        marker = None
        if line.startswith("@"):
            marker, _, line = line.partition(" ")
            line = line.strip()
            if marker not in MARKERS:
                raise AotError(f"known_hosts file {known_hosts} has an invalid entry: "
                               f"{marker[:80]!r} is no marker OpenSSH knows (line {lineno})")
        entry = _entry(known_hosts, line, lineno)
        if entry is None or marker == "@cert-authority":
            continue
        (revoked if marker == "@revoked" else entries).append(entry)
    revoked_keys = tuple(e.key for e in revoked)
    host_keys = client.get_host_keys()
    for entry in entries:
        if entry.key in revoked_keys:
            continue
        entry.hostnames = [h for h in entry.hostnames if not host_keys.check(h, entry.key)]
        if entry.hostnames:
            # As HostKeys.load does (its entries list): add() would keep one
            # key per host and type, and a host may list two (a key rotation).
            host_keys._entries.append(entry)
    return revoked_keys


# known_hosts markers (sshd(8), SSH_KNOWN_HOSTS FILE FORMAT).
MARKERS = ("@revoked", "@cert-authority")


def _entry(known_hosts: str, line: str, lineno: int) -> paramiko.hostkeys.HostKeyEntry | None:
    """One line's entry; None for a line paramiko skips too (too few
    fields, a key type it does not know)."""
    try:
        return paramiko.hostkeys.HostKeyEntry.from_line(line, lineno)
    except paramiko.hostkeys.InvalidHostKey as e:
        raise AotError(f"known_hosts file {known_hosts} has an invalid entry: "
                       f"{e.line.strip()[:80]!r}") from None
    except paramiko.SSHException:
        return None


def unknown_message(where: str, board: str, host: str, port: int, known_hosts: str,
                    key: paramiko.PKey) -> str:
    trust = f"aot board trust {board or 'BOARD'} --host {host}" + \
        (f" --port {port}" if port != 22 else "")
    return (f"{where}: unknown host key {describe(key)} (not in {known_hosts}); "
            f"if that is the board's key, trust it with `{trust}` or rerun with "
            "--trust-new-host-key")


def entry_name(host: str, port: int) -> str:
    """The host's name in known_hosts, as OpenSSH writes it."""
    return host if port == 22 else f"[{host}]:{port}"


def mismatch_message(where: str, host: str, port: int, known_hosts: str,
                     got: paramiko.PKey, expected: paramiko.PKey) -> str:
    return (f"{where}: host key mismatch: the board presents {describe(got)}, but "
            f"{known_hosts} has {describe(expected)}; someone may be intercepting the "
            "connection (man-in-the-middle), so aot refuses it even with "
            "--trust-new-host-key; if the board was reinstalled, remove the old entry "
            f"(ssh-keygen -R '{entry_name(host, port)}' -f {known_hosts}) and trust the new key")
