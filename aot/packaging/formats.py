"""A built package -> the layout a firmware framework consumes (docs/firmware.md).

    cmake       the package as `aot package` builds it (CMakeLists.txt, Makefile)
    arduino     an Arduino library: library.properties, src/, a precompiled
                src/<mcu>/lib<name>.a, examples/<name>/<name>.ino
    zephyr      a Zephyr module: zephyr/module.yml, CMakeLists.txt, Kconfig, samples/<name>
    esp-idf     an ESP-IDF component: CMakeLists.txt, idf_component.yml
    platformio  a PlatformIO library: library.json, examples/<name>/platformio.ini
    mlf         TVM's Model Library Format tar, for microTVM users

Every format is made from the built package's own files (its C, header,
runtime and library), so `aot export PKG --format F` and
`aot package MODEL --format F` give the same bytes. Each writer is a pure
function of the package, returning path -> bytes; the directory is written
atomically. The framework glue is Jinja templates in templates/formats/.
"""
from __future__ import annotations

import io
import json
import math
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from aot.errors import InputError
from aot.packaging.firmware import BuildFlags, split_flags

# files of a built package that no format ships: the harness, build trees
_NOT_SHIPPED = ("bench/", "build/")


@dataclass(frozen=True)
class Built:
    """A built package, read back from its directory."""
    name: str
    meta: dict
    files: dict[str, bytes]       # path in the package -> contents

    @property
    def flags(self) -> BuildFlags:
        return split_flags(tuple(self.meta["target"]["cflags"]))

    def under(self, folder: str, *suffixes: str) -> list[str]:
        """The package's files directly in `folder` ending with one of suffixes, sorted."""
        return sorted(p for p in self.files
                      if p.startswith(folder + "/") and "/" not in p[len(folder) + 1:]
                      and p.endswith(suffixes))

    def runtime_files(self) -> list[str]:
        """The runtime the library needs (not a board's start-up code and linker script)."""
        return self.under("runtime_c", ".c", ".h")

    @property
    def library(self) -> str:
        return f"lib/lib{self.name}.a"


def read_package(pkg: Path) -> Built:
    """The package directory `pkg`, checked to be one aot built."""
    meta_path = pkg / "metadata.json"
    if not pkg.is_dir() or not meta_path.is_file():
        raise InputError(f"{pkg}: not a package directory (no metadata.json)")
    try:
        meta = json.loads(meta_path.read_text())
        name = meta["name"]
    except (ValueError, KeyError, TypeError):
        raise InputError(f"{pkg}/metadata.json: not an aot package's metadata") from None
    files = {p.relative_to(pkg).as_posix(): p.read_bytes() for p in sorted(pkg.rglob("*"))
             if p.is_file() and not p.relative_to(pkg).as_posix().startswith(_NOT_SHIPPED)}
    for need in (f"include/{name}.h", f"lib/lib{name}.a"):
        if need not in files:
            raise InputError(f"{pkg}: the package has no {need}")
    return Built(name, meta, files)


def _needs_sources(b: Built, fmt: str) -> None:
    """Formats compiled by the framework's own build need the kernels' C."""
    if b.meta.get("codegen") != "c":
        raise InputError(f"format {fmt} compiles the package's C: package the model with "
                         f"--codegen c (this package's kernels are {b.meta.get('codegen')} objects)")
    if b.meta.get("threads", 1) > 1:
        raise InputError(f"format {fmt} is for microcontrollers: package the model without "
                         "--threads")


def _render(template: str, **context) -> bytes:
    from aot.executor.entry import template_environment
    return template_environment().get_template(f"formats/{template}").render(**context).encode()


def _context(b: Built) -> dict:
    """What every format's templates print."""
    from aot.executor.entry import c_type

    f = b.flags
    tensors = lambda rows: [{"member": t["c_name"], "ctype": c_type(t["dtype"]),  # noqa: E731
                             "count": math.prod(t["shape"])} for t in rows]
    return {"name": b.name, "NAME": b.name.upper(), "version": b.meta["versions"]["aot"],
            "model": b.meta["model"], "board": b.meta["board"],
            "target": b.meta["target"]["name"], "cpu": b.meta["target"]["cpu"],
            "arch_flags": list(f.arch), "optimize_flags": list(f.optimize),
            "inputs": tensors(b.meta["inputs"]), "outputs": tensors(b.meta["outputs"]),
            "arena_bytes": b.meta["arena_bytes"], "arena_align": b.meta["arena_align"]}


def _machine_options(b: Built) -> dict[str, str]:
    """-mcpu=, -march=, -mfpu=, -mfloat-abi= ... of the target, by name."""
    return dict(flag[2:].split("=", 1) for flag in b.meta["target"]["cflags"]
                if flag.startswith("-m") and "=" in flag)


# ------------------------------------------------------------------ cmake

def cmake(b: Built) -> dict[str, bytes]:
    """The package as built."""
    return dict(b.files)


# ---------------------------------------------------------------- arduino

# Arduino's build.mcu of the ESP32 cores with these RISC-V ISAs
_ESP_MCU = {"rv32imc": "esp32c3", "rv32imac": "esp32c6"}
# the Arduino architectures (platform folder names) whose cores build for
# Cortex-M: the source fallback uses Arm's ACLE intrinsics
_ARM_ARCHITECTURES = "mbed,mbed_nano,mbed_portenta,mbed_giga,renesas_uno,renesas_portenta,samd,stm32,rp2040"


def arduino_mcu_dir(b: Built) -> str:
    """Where Arduino's builder looks for a precompiled library for this core:
    src/{build.mcu}, or src/{build.mcu}/{build.fpu}-{build.float-abi} for a
    core with an FPU (e.g. cortex-m4/fpv4-sp-d16-hard)."""
    m = _machine_options(b)
    cpu = m.get("cpu", "")
    if cpu.startswith("cortex-m"):
        if m.get("float-abi") in ("hard", "softfp") and "fpu" in m:
            return f"{cpu}/{m['fpu']}-{m['float-abi']}"
        return cpu
    if m.get("arch") in _ESP_MCU:
        return _ESP_MCU[m["arch"]]
    raise InputError(f"format arduino: board '{b.meta['board']}' ({b.meta['target']['name']}) "
                     "is not a microcontroller Arduino builds for (Cortex-M, ESP32-C3/C6)")


def check_arduino(b: Built) -> None:
    _needs_sources(b, "arduino")
    arduino_mcu_dir(b)


def arduino(b: Built) -> dict[str, bytes]:
    check_arduino(b)
    mcu = arduino_mcu_dir(b)
    ctx = {**_context(b), "architectures": "esp32" if mcu in _ESP_MCU.values()
           else _ARM_ARCHITECTURES}
    out = {"library.properties": _render("arduino/library.properties.j2", c=ctx),
           f"src/{mcu}/lib{b.name}.a": b.files[b.library],
           f"examples/{b.name}/{b.name}.ino": _render("arduino/example.ino.j2", c=ctx)}
    # Arduino compiles every source under src/ and adds src/ to the include
    # path: the package's sources, headers and runtime go there flat
    for path in [f"include/{b.name}.h", *b.under("src", ".c", ".h", ".S", ".bin"),
                 *b.runtime_files()]:
        out[f"src/{path.rsplit('/', 1)[1]}"] = b.files[path]
    return out


# ----------------------------------------------------------------- zephyr

def _library_sources(b: Built) -> list[str]:
    return [*b.under("src", ".c", ".S"), *b.under("runtime_c", ".c")]


def check_zephyr(b: Built) -> None:
    _needs_sources(b, "zephyr")


def zephyr(b: Built) -> dict[str, bytes]:
    check_zephyr(b)
    # the FPU is Zephyr's to enable where the package passes floats in its registers
    ctx = {**_context(b), "sources": _library_sources(b),
           "hard_float": _machine_options(b).get("float-abi") == "hard"}
    out = {p: b.files[p] for p in [f"include/{b.name}.h", *b.under("src", ".c", ".h", ".S", ".bin"),
                                   *b.runtime_files()]}
    out.update({"zephyr/module.yml": _render("zephyr/module.yml.j2", c=ctx),
                "CMakeLists.txt": _render("zephyr/CMakeLists.txt.j2", c=ctx),
                "Kconfig": _render("zephyr/Kconfig.j2", c=ctx),
                f"samples/{b.name}/CMakeLists.txt": _render("zephyr/sample_CMakeLists.txt.j2", c=ctx),
                f"samples/{b.name}/prj.conf": _render("zephyr/prj.conf.j2", c=ctx),
                f"samples/{b.name}/src/main.c": _render("zephyr/main.c.j2", c=ctx)})
    return out


# ---------------------------------------------------------------- esp-idf

def _public_headers(b: Built) -> dict[str, bytes]:
    """include/: the model's header and the runtime's it includes, for
    formats that export one include directory."""
    return {f"include/{b.name}.h": b.files[f"include/{b.name}.h"],
            **{f"include/{p.rsplit('/', 1)[1]}": b.files[p] for p in b.under("runtime_c", ".h")}}


def _esp_prebuilt(b: Built) -> bool:
    """A RISC-V ESP32 (rv32imc: ESP32-C3, rv32imac: ESP32-C6) takes the
    library aot built; any other core the C, compiled by the component."""
    return _machine_options(b).get("arch") in _ESP_MCU


def check_esp_idf(b: Built) -> None:
    if not _esp_prebuilt(b):
        _needs_sources(b, "esp-idf")


def esp_idf(b: Built) -> dict[str, bytes]:
    check_esp_idf(b)
    isa = _machine_options(b).get("arch")
    prebuilt = _esp_prebuilt(b)
    ctx = {**_context(b), "prebuilt": prebuilt, "sources": _library_sources(b),
           "idf_targets": [_ESP_MCU[isa]] if prebuilt else []}
    out = {**_public_headers(b),
           "CMakeLists.txt": _render("esp-idf/CMakeLists.txt.j2", c=ctx),
           "idf_component.yml": _render("esp-idf/idf_component.yml.j2", c=ctx)}
    if prebuilt:
        out[b.library] = b.files[b.library]
    else:
        out.update({p: b.files[p] for p in [*b.under("src", ".c", ".h", ".S", ".bin"),
                                            *b.under("runtime_c", ".c")]})
    return out


# ------------------------------------------------------------- platformio

# an example project's [env]: a PlatformIO board with the package's core
_PIO_BOARDS = {"cortex-m0": ("nordicnrf51", "bbcmicrobit"),
               "cortex-m3": ("ststm32", "bluepill_f103c8"),
               "cortex-m4": ("ststm32", "nucleo_f446re"),
               "cortex-m7": ("ststm32", "nucleo_f767zi"),
               "cortex-m33": ("ststm32", "nucleo_l552ze_q"),
               "rv32imc": ("espressif32", "esp32-c3-devkitm-1"),
               "rv32imac": ("espressif32", "esp32-c6-devkitc-1")}


def _pio_board(b: Built) -> tuple[str, str]:
    m = _machine_options(b)
    key = m.get("cpu") if m.get("cpu", "").startswith("cortex-m") else m.get("arch")
    if key not in _PIO_BOARDS:
        raise InputError(f"format platformio: board '{b.meta['board']}' "
                         f"({b.meta['target']['name']}) is not a microcontroller core the "
                         f"example project knows ({', '.join(_PIO_BOARDS)})")
    return _PIO_BOARDS[key]


def check_platformio(b: Built) -> None:
    _needs_sources(b, "platformio")
    _pio_board(b)


def platformio(b: Built) -> dict[str, bytes]:
    check_platformio(b)
    platform, board = _pio_board(b)
    library = {
        "name": b.name, "version": b.meta["versions"]["aot"],
        "description": f"{b.meta['model']} compiled by aot for {b.meta['target']['name']}",
        "keywords": ["aot", "tinyml", "inference"],
        "frameworks": "*", "platforms": platform, "headers": [f"{b.name}.h"],
        "build": {"flags": [*b.flags.optimize, "-std=c99", "-Isrc"],
                  "srcDir": ".", "includeDir": "include",
                  "srcFilter": ["-<*>", "+<src/*.c>", "+<src/*.S>", "+<runtime_c/*.c>"]},
    }
    ctx = {**_context(b), "platform": platform, "pio_board": board}
    out = {**_public_headers(b), **{p: b.files[p] for p in [
        *b.under("src", ".c", ".h", ".S", ".bin"), *b.under("runtime_c", ".c")]}}
    out.update({"library.json": (json.dumps(library, indent=2) + "\n").encode(),
                f"examples/{b.name}/platformio.ini": _render("platformio/platformio.ini.j2", c=ctx),
                f"examples/{b.name}/src/main.c": _render("platformio/main.c.j2", c=ctx)})
    return out


# -------------------------------------------------------------------- mlf

def _tar(members: dict[str, bytes]) -> bytes:
    """A deterministic tar: sorted members, mtime 0, root-owned, fixed modes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        dirs = sorted({"/".join(p.split("/")[:i]) for p in members
                       for i in range(1, p.count("/") + 1)})
        for path in sorted([*dirs, *members]):
            info = tarfile.TarInfo(path)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path in members:
                info.size, info.mode = len(members[path]), 0o644
                tar.addfile(info, io.BytesIO(members[path]))
            else:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
    return buf.getvalue()


def check_mlf(b: Built) -> None:
    _needs_sources(b, "mlf")


def mlf(b: Built) -> dict[str, bytes]:
    """TVM's Model Library Format: codegen/host/src holds the generated C
    (the weights linked in, as TVM's link-params), runtime/ aot's C runtime,
    parameters/ the weights' table; metadata.json in MLF's fields plus aot's."""
    check_mlf(b)
    m = b.meta
    members = {f"codegen/host/src/{p.rsplit('/', 1)[1]}": b.files[p]
               for p in b.under("src", ".c", ".h", ".S", ".bin")}
    members[f"codegen/host/include/{b.name}.h"] = b.files[f"include/{b.name}.h"]
    for p in b.runtime_files():
        kind = "include" if p.endswith(".h") else "src"
        members[f"runtime/{kind}/{p.rsplit('/', 1)[1]}"] = b.files[p]
    members[f"parameters/{b.name}.params.json"] = (json.dumps(
        {"linked": True, "params": m["params"]}, indent=2, sort_keys=True) + "\n").encode()
    meta = {"version": 7, "model_name": b.name, "style": "full-model",
            "export_datetime": "1970-01-01 00:00:00Z",   # fixed: the tar is byte-identical
            "target": {"host": m["target"]["triple"]}, "executors": ["aot"],
            "modules": {b.name: {
                "executors": ["aot"], "export_datetime": "1970-01-01 00:00:00Z",
                "target": {"host": m["target"]["triple"]},
                "memory": {"functions": {"main": [{
                    "workspace_size_bytes": m["arena_bytes"], "constants_size_bytes":
                    m["params_bytes"], "io_size_bytes": sum(t["bytes"] for t in
                                                            m["inputs"] + m["outputs"])}]}},
                "inputs": m["inputs"], "outputs": m["outputs"]}},
            "aot": {"board": m["board"], "cflags": m["target"]["cflags"],
                    "package_format": m["package_format"], "versions": m["versions"]}}
    members["metadata.json"] = (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode()
    return {f"{b.name}.tar": _tar(members)}


# ------------------------------------------------------------------ table

FORMATS: dict[str, Callable[[Built], dict[str, bytes]]] = {
    "cmake": cmake, "arduino": arduino, "zephyr": zephyr, "esp-idf": esp_idf,
    "platformio": platformio, "mlf": mlf,
}


# what each format refuses, checked on the board and options before a build
CHECKS: dict[str, Callable[[Built], None]] = {
    "cmake": lambda b: None, "arduino": check_arduino, "zephyr": check_zephyr,
    "esp-idf": check_esp_idf, "platformio": check_platformio, "mlf": check_mlf,
}


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise InputError(f"unknown package format '{fmt}' (known: {', '.join(FORMATS)})")
    return fmt


def check_package_options(fmt: str, board, codegen: str, threads: int) -> None:
    """Refuse, before anything is built, a board or options format `fmt`
    cannot take (the checks the writer makes on the built package)."""
    t = board.target
    CHECKS[check_format(fmt)](Built("", {"board": board.name, "codegen": codegen,
                                         "threads": threads,
                                         "target": {"name": t.name, "cflags": list(t.cflags)}},
                                    {}))


def format_files(pkg: Path, fmt: str) -> dict[str, bytes]:
    """The files of package `pkg` in format `fmt`."""
    return FORMATS[check_format(fmt)](read_package(Path(pkg)))


def export_package(pkg: Path, fmt: str, out: Path, force: bool = False) -> Path:
    """Write package `pkg` as format `fmt` into the directory `out`, whole or not at all."""
    from aot.support.fsutil import write_dir_atomically

    files = format_files(pkg, fmt)
    if Path(out).resolve() == Path(pkg).resolve():
        raise InputError(f"{out}: the export would replace the package it is made from")

    def fill(tmp: Path) -> None:
        for path, data in sorted(files.items()):
            (tmp / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp / path).write_bytes(data)
    write_dir_atomically(Path(out), fill, force)
    return Path(out)
