"""Boards reached as the user's ~/.ssh/config says: Host aliases, ProxyJump,
ProxyCommand, against real OpenSSH sshds on 127.0.0.1 (tests/support/sshd.py).

The OpenSSH config of each test is a file of its own, named with
--ssh-config, the board option ssh_config or $AOT_SSH_CONFIG; the work
dirs and the connect timeout come from test_ssh's $AOT_CONFIG.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from support.sshd import Sshd, free_port, jump_sshd, running_sshd, sshd  # noqa: F401 (fixtures)
from support.ssh_board import (BOARD, MODEL, _children, aot, config,  # noqa: F401 (fixtures)
                               nothing_left_behind, one_line_error, pkg, remote_tmp)


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def board_with(**options):
    from aot.targets import get_board, with_options

    return with_options(get_board("rpi4"), **options)


def params(**options):
    from aot.deploy.ssh_config import ssh_params

    return ssh_params(board_with(**options))


def run_model(server: Sshd, pkg: Path, out: Path, *args: str):
    r = aot(server, "run", str(pkg), *BOARD, *args, "--exec-prefix", "qemu-aarch64",
            "--input", str(MODEL.with_suffix(".input.npy")), "--out", str(out))
    assert r.returncode == 0, r.stderr
    got, want = np.load(out / "Identity.npy"), np.load(MODEL.with_suffix(".output.npy"))
    assert got.shape == want.shape and np.abs(got.astype(int) - want.astype(int)).max() <= 1


def sessions(server: Sshd, present: bool) -> bool:
    """Whether the server serves a connection (a child process) or not, within 5 s."""
    deadline = time.monotonic() + 5
    while bool(_children(server.pid)) != present and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(_children(server.pid)) == present


def peer_ports() -> set[int]:
    """The remote ports of this process's TCP connections: a connection
    through a jump host or a ProxyCommand leaves none to the board's port."""
    mine = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            mine.add(link[8:-1])
    ports = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in mine:
                ports.add(int(fields[2].rsplit(":", 1)[1], 16))
    return ports


# --- against real sshds -----------------------------------------------------------

def test_a_host_alias_runs_the_model_and_is_trusted_by_its_alias(sshd, pkg, tmp_path,
                                                                monkeypatch):
    """`--host myboard`: HostName, Port, User and IdentityFile from the config
    (the board's own user, pi, yields to the config's)."""
    cfg = write(tmp_path / "config", sshd.ssh_config("myboard"))
    run_model(sshd, pkg, tmp_path / "out", "--host", "myboard", "--ssh-config", cfg,
              "--known-hosts", sshd.known_hosts)
    known = tmp_path / "known_hosts"
    monkeypatch.setenv("AOT_SSH_CONFIG", cfg)
    r = aot(sshd, "bench", str(pkg), *BOARD, "--host", "myboard", "--known-hosts", str(known),
            "--exec-prefix", "qemu-aarch64", "--repeat", "1")
    line = one_line_error(r)
    assert f"board 'rpi4' at myboard (127.0.0.1:{sshd.port}): unknown host key" in line, line
    assert f"aot board trust rpi4 --host myboard --port {sshd.port}" in line, line
    r = aot(sshd, "board", "trust", "rpi4", "--host", "myboard", "--port", str(sshd.port),
            "--known-hosts", str(known))
    assert r.returncode == 0, r.stderr
    assert known.read_text() == sshd.known_hosts_line()       # under its HostName, as ssh has it


def test_proxy_jump_through_a_second_sshd(sshd, jump_sshd, pkg, remote_tmp, tmp_path):
    from aot.deploy.ssh import SshSession

    cfg = write(tmp_path / "config", jump_sshd.ssh_config("jumpbox") +
                sshd.ssh_config("myboard", "ProxyJump jumpbox"))
    known = write(tmp_path / "known_hosts", sshd.known_hosts_line() +
                  jump_sshd.known_hosts_line())
    p = params(host="myboard", ssh_config=cfg, known_hosts=known)
    assert (p.via.host, p.via.port, p.via.key, p.via.identity_files, p.via.jump) == \
        ("127.0.0.1", jump_sshd.port, None, (jump_sshd.key,), True)
    with SshSession(p) as s:
        assert s.run(["echo", "through"])[1] == b"through\n"
        assert jump_sshd.port in peer_ports() and sshd.port not in peer_ports()
    assert sessions(jump_sshd, False), "the connection to the jump host stayed open"
    run_model(sshd, pkg, tmp_path / "out", "--host", "myboard", "--ssh-config", cfg,
              "--known-hosts", known)


def test_the_jump_hosts_key_is_checked_too(sshd, jump_sshd, pkg, tmp_path):
    """Each hop's key is checked in known_hosts, and trusted as the error says."""
    cfg = write(tmp_path / "config", jump_sshd.ssh_config("jumpbox") +
                sshd.ssh_config("myboard", "ProxyJump jumpbox"))
    known = tmp_path / "known_hosts"
    args = ["--host", "myboard", "--ssh-config", cfg, "--known-hosts", str(known)]
    for hop, alias, port in ((f"jump host jumpbox (127.0.0.1:{jump_sshd.port}) on the way "
                              "to board 'rpi4'", "jumpbox", jump_sshd.port),
                             (f"board 'rpi4' at myboard (127.0.0.1:{sshd.port})", "myboard",
                              sshd.port)):
        r = aot(sshd, "bench", str(pkg), *BOARD, *args, "--repeat", "1")
        line = one_line_error(r)
        assert f"{hop}: unknown host key ssh-ed25519" in line, line
        trust = f"aot board trust rpi4 --host {alias} --port {port}"
        assert trust in line, line
        r = aot(sshd, *trust.split()[1:], "--ssh-config", cfg, "--known-hosts", str(known))
        assert r.returncode == 0, r.stderr
    assert known.read_text() == jump_sshd.known_hosts_line() + sshd.known_hosts_line()
    r = aot(sshd, "bench", str(pkg), *BOARD, *args, "--exec-prefix", "qemu-aarch64",
            "--repeat", "1")
    assert r.returncode == 0, r.stderr
    # The board's key changed: refused, and named as the board's, not the jump host's.
    known.write_text(jump_sshd.known_hosts_line() + sshd.known_hosts_line(jump_sshd.host_key_pub))
    r = aot(sshd, "bench", str(pkg), *BOARD, *args, "--repeat", "1")
    line = one_line_error(r)
    assert f"board 'rpi4' at myboard (127.0.0.1:{sshd.port}): host key mismatch" in line, line


def test_an_unreachable_jump_host_is_named(sshd, tmp_path):
    from aot.deploy.ssh import connect
    from aot.errors import AotError

    port = free_port()
    cfg = write(tmp_path / "config", f"Host jumpbox\n  HostName 127.0.0.1\n  Port {port}\n" +
                sshd.ssh_config("myboard", "ProxyJump jumpbox"))
    p = params(host="myboard", ssh_config=cfg, known_hosts=sshd.known_hosts,
               connect_timeout_s=1)
    t0 = time.monotonic()
    with pytest.raises(AotError) as e:
        connect(p)
    assert str(e.value) == (f"cannot reach jump host jumpbox (127.0.0.1:{port}) on the way to "
                            "board 'rpi4': connection refused (tried for 1 s)")
    assert time.monotonic() - t0 < 3


def test_a_board_the_jump_host_cannot_reach(sshd, jump_sshd, tmp_path):
    from aot.deploy.ssh import connect
    from aot.errors import AotError

    port = free_port()
    cfg = write(tmp_path / "config", jump_sshd.ssh_config("jumpbox") +
                f"Host myboard\n  HostName 127.0.0.1\n  Port {port}\n  ProxyJump jumpbox\n")
    p = params(host="myboard", ssh_config=cfg, known_hosts=jump_sshd.known_hosts,
               connect_timeout_s=1)
    with pytest.raises(AotError) as e:
        connect(p)
    assert str(e.value) == (f"cannot reach board 'rpi4' at myboard (127.0.0.1:{port}): jump "
                            f"host jumpbox (127.0.0.1:{jump_sshd.port}) on the way to board "
                            "'rpi4' cannot connect to it (Connect failed) (tried for 1 s)")
    assert sessions(jump_sshd, False), "the connection to the jump host stayed open"


def test_a_jump_host_that_does_not_forward_is_final(sshd, tmp_path):
    from aot.deploy.ssh import connect
    from aot.errors import AotError

    with running_sshd(tmp_path / "closed_jump", ("AllowTcpForwarding no",)) as jump:
        cfg = write(tmp_path / "config", jump.ssh_config("jumpbox") +
                    sshd.ssh_config("myboard", "ProxyJump jumpbox"))
        known = write(tmp_path / "known_hosts", sshd.known_hosts_line() + jump.known_hosts_line())
        p = params(host="myboard", ssh_config=cfg, known_hosts=known, connect_timeout_s=5)
        t0 = time.monotonic()
        with pytest.raises(AotError) as e:
            connect(p)
        assert time.monotonic() - t0 < 2          # not tried again until connect_timeout_s
        assert str(e.value) == (
            f"cannot reach board 'rpi4' at myboard (127.0.0.1:{sshd.port}): jump host jumpbox "
            f"(127.0.0.1:{jump.port}) on the way to board 'rpi4' refuses to forward a "
            "connection to it (Administratively prohibited: its sshd's AllowTcpForwarding or "
            "PermitOpen)")


def test_proxy_command(sshd, jump_sshd, remote_tmp, tmp_path):
    """`ssh -W %h:%p jumpbox` as ProxyCommand: the connection goes over its
    stdin and stdout (through the shell: a pipe in the command works)."""
    from aot.deploy.ssh import SshSession

    path = tmp_path / "config"
    write(path, jump_sshd.ssh_config("jumpbox", f"UserKnownHostsFile {jump_sshd.known_hosts}",
                                     "StrictHostKeyChecking yes", "BatchMode yes") +
          sshd.ssh_config("myboard", f"ProxyCommand ssh -F {path} -W %h:%p jumpbox | cat"))
    p = params(host="myboard", ssh_config=str(path), known_hosts=sshd.known_hosts)
    assert p.proxy_command == f"ssh -F {path} -W 127.0.0.1:{sshd.port} jumpbox | cat"
    with SshSession(p) as s:
        assert s.run(["echo", "proxied"])[1] == b"proxied\n"
        assert sshd.port not in peer_ports()
        assert sessions(jump_sshd, True), "no connection went through the ProxyCommand"
    assert sessions(jump_sshd, False)


# --- what the config says, and what wins ----------------------------------------------

def test_explicit_options_win_over_the_config_which_wins_over_the_boards_defaults(tmp_path,
                                                                                  monkeypatch):
    key = tmp_path / "id_board"
    key.write_text("")
    cfg = write(tmp_path / "config", f"Host myboard\n  HostName 10.1.2.3\n  Port 2222\n"
                f"  User alice\n  IdentityFile {key}\n  IdentityFile ~/no-such-key\n"
                "  ProxyCommand nc %h %p\n")
    p = params(host="myboard", ssh_config=cfg)
    assert (p.host, p.port, p.user, p.key, p.identity_files, p.alias) == \
        ("10.1.2.3", 2222, "alice", None, (str(key),), "myboard")
    assert p.proxy_command == "nc 10.1.2.3 2222"
    p = params(host="myboard", ssh_config=cfg, port=2200, user="bob", key=str(key))
    assert (p.port, p.user, p.key, p.identity_files) == (2200, "bob", str(key), ())
    assert p.proxy_command == "nc 10.1.2.3 2200"        # %p is the port that wins
    # The user's boards.toml is explicit too, even where it says what the board does.
    boards_toml = tmp_path / "boards.toml"
    boards_toml.write_text('[rpi4]\nuser = "pi"\n')
    monkeypatch.setenv("AOT_CONFIG", str(boards_toml))
    assert params(host="myboard", ssh_config=cfg).user == "pi"
    # A host the config does not name, or no config: the board's defaults.
    p = params(host="pi.lan", ssh_config=cfg)
    assert (p.host, p.port, p.user, p.alias, p.proxy_command) == ("pi.lan", 22, "pi", "", "")


def test_where_the_config_comes_from(tmp_path, monkeypatch):
    from aot.errors import AotError

    a = write(tmp_path / "a", "Host b\n  HostName from-a\n")
    b = write(tmp_path / "b", "Host b\n  HostName from-b\n")
    monkeypatch.setenv("AOT_SSH_CONFIG", a)
    assert params(host="b").host == "from-a"
    assert params(host="b", ssh_config=b).host == "from-b"      # the option wins
    assert params(host="b", ssh_config="none").host == "b"
    monkeypatch.setenv("AOT_SSH_CONFIG", str(tmp_path / "missing"))
    with pytest.raises(AotError, match=f"AOT_SSH_CONFIG names {tmp_path}/missing, which is "
                                       "not a file"):
        params(host="b")
    with pytest.raises(AotError, match="ssh_config names"):
        params(host="b", ssh_config=str(tmp_path))
    monkeypatch.delenv("AOT_SSH_CONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))       # no ~/.ssh/config: fine
    assert params(host="b").host == "b"
    (tmp_path / ".ssh").mkdir()
    write(tmp_path / ".ssh" / "config", "Include inc/*.conf\nHost b\n  User u\n")
    (tmp_path / ".ssh" / "inc").mkdir()
    write(tmp_path / ".ssh" / "inc" / "1.conf", "Host b\n  HostName included\n")
    write(tmp_path / ".ssh" / "inc" / "2.conf", "Host other\n  Port 1\n")
    p = params(host="b")
    assert (p.host, p.user, p.port) == ("included", "u", 22)
    write(tmp_path / ".ssh" / "config", "Host b\n  Include inc/*.conf\n")
    with pytest.raises(AotError, match="config line 2: an Include inside a Host or Match "
                                       "block is not supported"):
        params(host="b")


def test_a_vm_board_reads_no_ssh_config(tmp_path):
    from aot.deploy.ssh_config import ssh_params
    from aot.targets import get_board, with_options

    cfg = write(tmp_path / "config", "Host *\n  ProxyJump elsewhere\n  User alice\n")
    board = with_options(get_board("qemu-rpi4"), host="127.0.0.1", port=2222, user="root",
                         ssh_config=cfg)
    p = ssh_params(board)
    assert (p.host, p.user, p.via, p.proxy_command) == ("127.0.0.1", "root", None, "")


def test_proxy_jump_chains(tmp_path):
    from aot.errors import AotError

    cfg = write(tmp_path / "config", "Host a\n  HostName 10.0.0.1\n  ProxyJump c\n"
                "Host b\n  HostName 10.0.0.2\n  User bu\n"
                "Host c\n  ProxyJump none\n"
                "Host direct\n  ProxyJump none\n"
                "Host loop1\n  ProxyJump loop2\nHost loop2\n  ProxyJump loop1\n"
                "Host bad\n  ProxyJump a:port\n"
                "Host *\n  ProxyJump a,ju@b:2022\n")
    p = params(host="myboard", ssh_config=cfg)
    hops = []
    while p.via is not None:
        p = p.via
        hops.append((p.alias, p.host, p.port, p.user == "ju", p.jump))
    # b (its user and port from the ProxyJump line) through a, which its own
    # config sends through c; b's own ProxyJump (Host *) is not taken.
    assert hops == [("b", "10.0.0.2", 2022, True, True), ("a", "10.0.0.1", 22, False, True),
                    ("", "c", 22, False, True)]
    assert params(host="direct", ssh_config=cfg).via is None
    cfg2 = write(tmp_path / "config2", "Host a\n  ProxyJump b\nHost b\n  ProxyJump c\n")
    p = params(host="a", ssh_config=cfg2)
    assert (p.via.host, p.via.via.host, p.via.via.via) == ("b", "c", None)
    with pytest.raises(AotError, match="more than 8 jump hosts on the way to it: is there a "
                                       "ProxyJump loop in"):
        params(host="loop1", ssh_config=cfg)
    with pytest.raises(AotError, match="ProxyJump 'a:port': 'a:port' is not "
                                       r"\[user@\]host\[:port\]"):
        params(host="bad", ssh_config=cfg)


def test_a_failing_proxy_command_says_why_once(tmp_path, capfd):
    """Its stderr's last line, in the one error line: not once per attempt."""
    from aot.deploy.ssh import connect
    from aot.errors import AotError

    cfg = write(tmp_path / "config", "Host myboard\n  HostName 10.9.9.9\n"
                "  ProxyCommand sh -c 'echo no route to %h >&2; exit 7'\n")
    p = params(host="myboard", ssh_config=cfg, known_hosts=str(tmp_path / "known_hosts"),
               connect_timeout_s=1)
    with pytest.raises(AotError) as e:
        connect(p)
    assert str(e.value).endswith("(through ProxyCommand \"sh -c 'echo no route to 10.9.9.9 >&2; "
                                 "exit 7'\"): the ProxyCommand exited with status 7: no route "
                                 "to 10.9.9.9 (tried for 1 s)"), str(e.value)
    assert "no route" not in capfd.readouterr().err
