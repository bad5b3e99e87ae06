"""Board, target and config files are checked against a schema with types
(aot/support/config_schema.py): a value of the wrong type, or an unknown key, is one
line naming the file and the key. `bool("false")` is True: unchecked, a
string would have turned trust-on-first-use on."""
from __future__ import annotations

import pytest

from aot.support import config_schema
from aot.errors import AotError
from aot.targets import boards, get_board, targets, with_options

SSH_BOARD = ('name = "pi"\ntarget = "aarch64-linux"\ntransport = "ssh"\n'
             "flash_bytes = 1024\nram_bytes = 1024\n")

# For each kind of key: a TOML value of another type, and how the error names it.
WRONG = {"a string": ("1", "an integer"), "a boolean": ('"false"', "a string"),
         "an integer": ('"22"', "a string"), "a non-negative integer": ("-1", "-1"),
         "a number": ("true", "a boolean"), "a list of strings": ('"-O2"', "a string"),
         "a table": ("3", "an integer"), "a list of tables": ('"bank"', "a string")}


@pytest.fixture
def board_dir(tmp_path, monkeypatch):
    d = tmp_path / "boards"
    d.mkdir()
    monkeypatch.setenv("AOT_BOARDS_DIR", str(d))
    monkeypatch.setenv("AOT_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    return d


def test_the_shipped_boards_and_targets_follow_the_schema():
    assert len(boards()) >= 12 and len(targets()) >= 11
    for b in boards().values():
        assert b.transport in config_schema.OPTIONS, b.name


def test_a_string_for_trust_new_host_key_is_refused(tmp_path, monkeypatch):
    cfg = tmp_path / "boards.toml"
    cfg.write_text('[rpi4]\nhost = "pi.lan"\ntrust_new_host_key = "false"\n')
    monkeypatch.setenv("AOT_CONFIG", str(cfg))
    with pytest.raises(AotError) as e:
        get_board("rpi4")
    assert str(e.value) == (f"{cfg}: rpi4.trust_new_host_key must be a boolean, "
                            "got a string")
    cfg.write_text('[rpi4]\nhost = "pi.lan"\ntrust_new_host_key = false\n')
    assert get_board("rpi4").options["trust_new_host_key"] is False


def test_a_wrong_type_from_python_is_refused_where_the_transport_reads_it():
    from aot.deploy.ssh_config import ssh_params

    board = with_options(get_board("rpi4"), host="pi.lan")
    assert ssh_params(board).trust_new_host_key is False
    for key, value, kind in (("trust_new_host_key", "false", "a boolean"),
                             ("host", 42, "a string"), ("exec_prefix", ["nice"], "a string")):
        with pytest.raises(AotError, match=f"board 'rpi4': {key} must be {kind}"):
            ssh_params(with_options(board, **{key: value}))


@pytest.mark.parametrize("table, key, kind", [
    *(("", k, v.name) for k, v in config_schema.BOARD.items()),
    *(("options.", k, v.name) for k, v in config_schema.OPTIONS["ssh"].items()),
    *(("firmware.", k, v.name) for k, v in config_schema.FIRMWARE.items()),
])
def test_every_board_key_of_the_wrong_type_is_named(board_dir, table, key, kind):
    """Each key a board file may hold, given a value of another type."""
    fields = dict(line.split(" = ", 1) for line in SSH_BOARD.splitlines())
    value, got = WRONG[kind]
    if table:
        text = SSH_BOARD + f"\n[{table.rstrip('.')}]\n{key} = {value}\n"
    else:
        text = "".join(f"{k} = {v}\n" for k, v in {**fields, key: value}.items())
    (board_dir / "pi.toml").write_text(text)
    with pytest.raises(AotError) as e:
        boards()
    assert str(e.value) == f"{board_dir / 'pi.toml'}: {table}{key} must be {kind}, got {got}"


def test_unknown_keys_and_the_transports_own_options(board_dir):
    path = board_dir / "pi.toml"
    path.write_text(SSH_BOARD + "flash = 3\n")
    with pytest.raises(AotError, match=r"pi.toml: unknown key\(s\) flash \(known: "):
        boards()
    path.write_text(SSH_BOARD + '\n[options]\nhots = "pi.lan"\n')
    with pytest.raises(AotError, match=r"unknown key\(s\) options.hots"):
        boards()
    # cpu_flags is the local transport's, not ssh's; timeout_s qemu-system's.
    path.write_text(SSH_BOARD + '\n[options]\ncpu_flags = ["avx2"]\n')
    with pytest.raises(AotError, match=r"unknown key\(s\) options.cpu_flags"):
        boards()
    path.write_text(SSH_BOARD.replace('"ssh"', '"local"') + "\n[options]\ncpu_flags = [1]\n")
    with pytest.raises(AotError, match="options.cpu_flags must be a list of strings, got a "
                                       "list holding an integer"):
        boards()
    path.write_text(SSH_BOARD + '\n[options]\nport = 2222\ntrust_new_host_key = true\n'
                    'command_timeout_s = 2.5\n')
    assert boards()["pi"].options["port"] == 2222


@pytest.mark.parametrize("key, kind", config_schema.CONFIG.items())
def test_every_config_key_of_the_wrong_type_is_named(tmp_path, monkeypatch, key, kind):
    cfg = tmp_path / "boards.toml"
    value, got = WRONG[kind.name]
    cfg.write_text(f"[rpi5]\n{key} = {value}\n")
    monkeypatch.setenv("AOT_CONFIG", str(cfg))
    with pytest.raises(AotError) as e:
        get_board("rpi4")        # any table of the file is checked
    assert str(e.value) == f"{cfg}: rpi5.{key} must be {kind.name}, got {got}"


def test_config_file_shape(tmp_path, monkeypatch):
    cfg = tmp_path / "boards.toml"
    monkeypatch.setenv("AOT_CONFIG", str(cfg))
    cfg.write_text('rpi4 = "pi.lan"\n')
    with pytest.raises(AotError, match=r"rpi4 must be a table \(\[rpi4\]\), got a string"):
        get_board("rpi4")
    cfg.write_text('[rpi4]\nvm = "qemu-rpi4"\n')
    with pytest.raises(AotError, match=r"unknown key\(s\) rpi4.vm"):
        get_board("rpi4")
    cfg.write_text("[qemu-rpi4]\nsmp = 4\nboot_timeout_s = 60\n")
    assert get_board("qemu-rpi4").options["smp"] == 4


def test_target_files():
    good = {"name": "t", "triple": "x", "cpu": "c", "vector_bits": 128, "cc": "clang",
            "cflags": ["-O2"], "ldflags": [], "llvm_opt_level": 3}
    config_schema.check_target("t.toml", good)
    for key, value, message in (("vector_bits", "128", "vector_bits must be a non-negative "
                                 "integer, got a string"),
                                ("cflags", "-O2", "cflags must be a list of strings, got a "
                                 "string"),
                                ("llvm_opt_level", 2.0, "llvm_opt_level must be an integer, "
                                 "got a float"),
                                ("lto", True, r"unknown key\(s\) lto")):
        with pytest.raises(AotError, match=f"^t.toml: {message}"):
            config_schema.check_target("t.toml", {**good, key: value})
