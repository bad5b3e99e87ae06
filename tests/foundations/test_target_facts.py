"""Target facts (aot.targets.Target): typed fields derived once from each
targets/*.toml, which every decision reads instead of parsing triples,
feature strings or cpu names."""
from __future__ import annotations

import dataclasses
import tomllib

import pytest

from aot.errors import AotError
from aot.support.resources import data_dir
from aot.targets import Target, get_target, targets

# What each target's TOML says, spelled out once here.
FACTS = {
    "x86_64-linux": ("x86_64", 16, True, "", {"avx2", "fma", "sse2", "sse4.1"}, {"avx512f"}),
    "x86_64-linux-avx512": ("x86_64", 32, True, "",
                            {"avx2", "fma", "avx512f", "avx512bw", "sse4.1"}, set()),
    "aarch64-linux": ("aarch64", 32, True, "", {"neon"}, {"dotprod", "avx2"}),
    "aarch64-linux-a53": ("aarch64", 32, True, "", {"neon"}, {"dotprod"}),
    "aarch64-linux-a76": ("aarch64", 32, True, "", {"neon", "dotprod"}, set()),
    "armv7-linux": ("arm", 16, True, "", {"neon", "vfp4"}, {"dsp"}),
    "armv7-linux-a53": ("arm", 16, True, "", {"neon"}, set()),
    "cortex-m4": ("thumb", 0, True, "", {"dsp", "vfp4d16sp"}, {"neon", "mve"}),
    "cortex-m7": ("thumb", 0, True, "", {"dsp"}, {"neon"}),
    "cortex-m55": ("thumb", 0, True, "", {"dsp", "mve"}, {"mve.fp"}),
    "cortex-m33": ("thumb", 0, True, "", {"dsp"}, {"mve", "neon"}),
    "cortex-m3": ("thumb", 0, True, "", set(), {"dsp", "mve"}),
    "cortex-m0": ("thumb", 0, True, "", set(), {"dsp", "mve"}),
    "riscv64-linux": ("riscv64", 0, True, "lp64d", {"m", "a", "f", "d", "c"}, {"v"}),
    # portable C: the board gives the triple (aot.targets.portable_on)
    "generic-c99": ("", 0, True, "", set(), {"neon", "sse2", "dsp"}),
    "generic-c99-clang": ("", 0, True, "", set(), {"neon", "sse2", "dsp"}),
    "rv64gcv": ("riscv64", 32, True, "lp64d", {"m", "a", "f", "d", "c", "v"}, {"zvl256b"}),
    "rv64gcv-zvl256b": ("riscv64", 32, True, "lp64d", {"v", "zvl256b"}, {"neon"}),
    # bare-metal RV32: soft float (ilp32), no vectors, no atomics on rv32imc
    "rv32imc": ("riscv32", 0, True, "ilp32", {"m", "c"}, {"a", "f", "d", "v"}),
    "rv32imac": ("riscv32", 0, True, "ilp32", {"m", "a", "c"}, {"f", "d", "v"}),
}


def test_every_target_is_described_here():
    assert set(targets()) == set(FACTS)


@pytest.mark.parametrize("name", sorted(FACTS))
def test_facts_are_what_the_toml_says(name):
    arch, regs, little, abi, has, lacks = FACTS[name]
    t = get_target(name)
    assert (t.arch, t.vector_registers, t.little_endian, t.abi) == (arch, regs, little, abi)
    assert has <= t.isa_features, sorted(has - t.isa_features)
    assert not lacks & t.isa_features, sorted(lacks & t.isa_features)
    assert isinstance(t.isa_features, frozenset)
    raw = tomllib.loads((data_dir("targets") / f"{name}.toml").read_text())
    assert set(raw.get("isa_features", ())) <= t.isa_features


def test_replace_derives_the_facts_again():
    """dataclasses.replace re-runs the derivation: a changed triple or
    feature string never leaves stale facts behind."""
    host = get_target("x86_64-linux")
    arm = dataclasses.replace(host, triple="aarch64_be-unknown-linux-gnu", cpu="generic",
                              features="+neon", vector_bits=128)
    assert (arm.arch, arm.little_endian, arm.vector_registers) == ("aarch64", False, 32)
    assert "avx2" not in arm.isa_features
    wide = dataclasses.replace(host, cpu="x86-64", features="+avx2,+avx512f,+avx512bw")
    assert wide.has("avx512bw") and wide.vector_registers == 32
    assert not dataclasses.replace(host, features="-avx2").has("avx2")
    with pytest.raises(ValueError):
        dataclasses.replace(host, arch="arm")      # a derived fact is not set by hand


def test_declared_facts_are_validated(tmp_path):
    from aot.support.config_schema import check_target
    with pytest.raises(AotError, match="isa_features must be a list of strings"):
        check_target(tmp_path / "t.toml", {"isa_features": "dsp"})
    with pytest.raises(AotError, match="vector_registers must be a non-negative integer"):
        check_target(tmp_path / "t.toml", {"vector_registers": -1})


def test_declared_registers_and_abi_win():
    t = Target("t", "riscv64-unknown-linux-gnu", "generic-rv64", "+m,+f", 0, "hard", "clang",
               (), (), "glibc", declared_registers=8, declared_abi="lp64")
    assert (t.vector_registers, t.abi, t.arch) == (8, "lp64", "riscv64")
    assert Target("t", "riscv64-unknown-linux-gnu", "generic-rv64", "+m,+f", 0, "hard",
                  "clang", (), (), "glibc").abi == "lp64f"


# Register counts by ISA family when the TOML gives none: (scalar, int).
REGISTER_DEFAULTS = {"x86_64-linux": (16, 13), "aarch64-linux": (32, 13),
                     "armv7-linux": (16, 13), "cortex-m4": (16, 13),
                     "riscv64-linux": (32, 31), "rv32imc": (32, 31)}


@pytest.mark.parametrize("name", sorted(REGISTER_DEFAULTS))
def test_register_counts_default_to_the_isa_family(name):
    t = get_target(name)
    assert (t.scalar_registers, t.int_registers) == REGISTER_DEFAULTS[name]


def test_a_target_file_sets_its_register_counts_and_the_tuning_space_keeps_within(tmp_path):
    """A user's core with fewer registers than its family: the integer
    nest tiles and the scalar tiles the tuner may try shrink with it."""
    from aot.lower.schedule.space import legal_nest, legal_tile
    from aot.targets import target_file
    path = tmp_path / "small-m4.toml"
    path.write_text('base = "cortex-m4"\nname = "small-m4"\n'
                    'scalar_registers = 8\nint_registers = 9\n')
    small, m4 = target_file(path), get_target("cortex-m4")
    assert (small.scalar_registers, small.int_registers, small.vector_registers) == (8, 9, 0)
    assert legal_nest(2, 2, m4) and not legal_nest(2, 2, small)     # 4 + 2 + 2 + 3 = 11
    assert legal_nest(1, 2, small)                                    # 2 + 1 + 2 + 3 = 8
    knobs = {"vectors": 1, "mr": 4, "max_accs": 4}                    # 4 + 1 + 1 registers
    assert legal_tile("tile/scalar_pixels", knobs, m4.scalar_registers)
    assert not legal_tile("tile/scalar_pixels", {**knobs, "mr": 8, "max_accs": 8},
                          small.scalar_registers)


def test_register_counts_are_validated_and_a_portable_target_takes_its_boards(tmp_path):
    from aot.support.config_schema import check_target
    from aot.targets import portable_on, target_file
    for key in ("scalar_registers", "int_registers"):
        with pytest.raises(AotError, match=f"{key} must be a positive integer"):
            check_target(tmp_path / "t.toml", {key: 0})
    path = tmp_path / "p.toml"
    path.write_text('base = "generic-c99"\nname = "p"\nint_registers = 9\n')
    with pytest.raises(AotError, match="is portable"):
        target_file(path)
    rv = portable_on(get_target("generic-c99"), get_target("riscv64-linux"))
    assert (rv.scalar_registers, rv.int_registers, rv.vector_registers) == (32, 31, 0)
