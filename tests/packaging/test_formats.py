"""A package in each firmware framework's layout (aot.packaging.formats),
checked as far as the frameworks' tools allow without their SDKs: each
layout's structure against the format's documented fields, and its build
description driven with the board's cross compiler where it is plain CMake
(Zephyr's and ESP-IDF's, through stand-in projects defining only the
documented CMake entry points as thin functions) or a list of flags
(Arduino's library.properties, PlatformIO's library.json). The Arduino
example runs on mps2-an386 and prints the top class aot's harness gives."""
from __future__ import annotations

import configparser
import fnmatch
import io
import json
import re
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from aot.api import package
from aot.cli import main
from aot.packaging.formats import FORMATS, export_package, format_files

from support import MODELS

MODEL = MODELS / "mlperf_kws_dscnn_int8.tflite"
BOARD = "mps2-an386"
ARM_CC = "arm-none-eabi-gcc"


def run_checked(cmd: list[str], cwd: Path) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """kws int8 packaged for mps2-an386 (Cortex-M4F), the cmake layout."""
    return package(MODEL, board=BOARD, name="kws", out_dir=tmp_path_factory.mktemp("p") / "kws")


@pytest.fixture(scope="module")
def arch(built) -> list[str]:
    from aot.packaging.firmware import split_flags
    return list(split_flags(tuple(built.metadata["target"]["cflags"])).arch)


def export(built, fmt: str, tmp_path: Path) -> Path:
    return export_package(built.path, fmt, tmp_path / fmt)


def files_of(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------ command

def test_unknown_format_is_one_line_naming_the_known_ones(built, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["export", str(built.path), "--format", "keil", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown package format 'keil'" in err
    assert all(f in err for f in FORMATS)
    assert not out.exists()
    assert main(["package", str(MODEL), "--board", BOARD, "--format", "keil",
                 "-o", str(out)]) == 2
    assert "unknown package format 'keil'" in capsys.readouterr().err
    assert not out.exists()


def test_a_board_a_format_cannot_take_is_refused_before_the_build(tmp_path, capsys, monkeypatch):
    import aot.packaging.build as build

    def no_build(*args, **kwargs):
        raise AssertionError("built before the board was checked")
    monkeypatch.setattr(build, "build_into", no_build)
    out = tmp_path / "out"
    assert main(["package", str(MODEL), "--board", "host", "--format", "arduino",
                 "-o", str(out)]) == 2
    assert "format arduino: board 'host' (x86_64-linux) is not a microcontroller" in \
        capsys.readouterr().err
    assert main(["package", str(MODEL), "--board", BOARD, "--format", "zephyr", "--codegen",
                 "llvm", "-o", str(out)]) == 2
    assert "format zephyr compiles the package's C: package the model with --codegen c" in \
        capsys.readouterr().err
    assert not out.exists()


def test_package_with_a_format_equals_the_export_of_the_built_package(built, tmp_path):
    """`aot package --format F` = `aot export PKG --format F`, byte for byte;
    the default (cmake) is the package as built."""
    info = package(MODEL, board=BOARD, name="kws", out_dir=tmp_path / "z", format="zephyr")
    assert info.path == tmp_path / "z"
    assert files_of(tmp_path / "z") == files_of(export(built, "zephyr", tmp_path))
    default = package(MODEL, board=BOARD, name="kws", out_dir=tmp_path / "c")
    assert files_of(default.path) == files_of(built.path)
    assert format_files(built.path, "cmake") == {
        k: v for k, v in files_of(built.path).items() if not k.startswith("bench/")}


def test_export_refuses_what_is_not_a_package(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["export", str(tmp_path / "empty"), "--format", "zephyr",
                 "-o", str(tmp_path / "out")]) == 2
    assert "not a package directory" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ arduino

ARDUINO_H = """#pragma once
#include <stdio.h>
/* Arduino.h's Serial as far as the example uses it, printing through stdio */
struct StandInSerial {
    void begin(long) {}
    void print(const char* s) { printf("%s", s); }
    void print(int v) { printf("%d", v); }
    void println(const char* s) { printf("%s\\n", s); }
    void println(int v) { printf("%d\\n", v); }
};
extern StandInSerial Serial;
void setup(void);
void loop(void);
"""
ARDUINO_MAIN = """#include <Arduino.h>
StandInSerial Serial;
int main(void) { setup(); loop(); return 0; }
"""
# what Arduino's builder passes besides the core's -mcpu/-mfpu (mbed cores)
ARDUINO_CFLAGS = ["-Os", "-g", "-ffunction-sections", "-fdata-sections", "-w"]


def test_arduino_library_builds_as_arduino_would_and_the_example_runs(built, arch, tmp_path):
    """library.properties; src/ compiled file by file as Arduino's builder
    does (-c, -I src, the core's flags, .c with gcc), the .ino as C++ with a
    stand-in Arduino.h; linked once against those objects and once against
    the precompiled src/cortex-m4/fpv4-sp-d16-hard/libkws.a, the second run
    on mps2-an386 printing the top class of aot's harness on zero input."""
    from aot.deploy import run_package
    from aot.deploy.qemu_system import qemu_command
    from aot.targets import get_board

    lib = export(built, "arduino", tmp_path)
    props = dict(line.split("=", 1) for line in (lib / "library.properties").read_text().splitlines())
    assert {"name", "version", "architectures", "precompiled", "ldflags", "sentence",
            "paragraph", "category", "author", "maintainer"} <= props.keys()
    assert props["name"] == "kws" and props["precompiled"] == "full"
    precompiled = lib / "src" / "cortex-m4" / "fpv4-sp-d16-hard" / "libkws.a"
    assert precompiled.read_bytes() == (built.path / "lib" / "libkws.a").read_bytes()
    assert (lib / "examples" / "kws" / "kws.ino").is_file()

    work = tmp_path / "arduino_build"
    (work / "core").mkdir(parents=True)
    (work / "core" / "Arduino.h").write_text(ARDUINO_H)
    (work / "core" / "main.cpp").write_text(ARDUINO_MAIN)
    (work / "kws.ino.cpp").write_text((lib / "examples/kws/kws.ino").read_text())
    flags = [*arch, *ARDUINO_CFLAGS, f"-I{lib / 'src'}", f"-I{work / 'core'}"]
    objects = []
    for src in sorted((lib / "src").glob("*.c")):     # the source fallback
        objects.append(str(work / f"{src.stem}.o"))
        run_checked([ARM_CC, *flags, "-std=gnu11", "-c", str(src), "-o", objects[-1]], work)
    for cpp in ("kws.ino.cpp", "core/main.cpp"):
        run_checked(["arm-none-eabi-g++", *flags, "-std=gnu++17", "-fno-exceptions", "-fno-rtti",
                     "-c", cpp, "-o", cpp + ".o"], work)
    board = get_board(BOARD)
    run_checked([ARM_CC, *arch, f"-I{built.path / 'runtime_c'}", "-c",
                 str(built.path / "runtime_c" / "cortex_m" / "startup.c"), "-o", "startup.o"], work)
    script = built.path / board.firmware["linker_script"]
    # linked by gcc: the stand-in needs no C++ library (Debian's arm-none-eabi has none)
    link = [ARM_CC, *arch, "-nostartfiles", "--specs=rdimon.specs", "-T", str(script),
            "kws.ino.cpp.o", "core/main.cpp.o", "startup.o"]
    run_checked([*link, *objects, props["ldflags"], "-o", "from_sources.elf"], work)
    run_checked([*link, f"-L{precompiled.parent}", "-lkws", props["ldflags"], "-o", "bench"], work)
    printed = run_checked(qemu_command(board, []), work)
    zeros = np.zeros(built.metadata["inputs"][0]["shape"], np.int8)
    expected = run_package(built.path, board, [zeros], warmup=0, runs=1).outputs[0]
    assert printed.strip() == f"top class: {int(np.argmax(expected.reshape(-1)))}"


# ------------------------------------------------------------------- zephyr

# an application calling the model through its header alone
APP_MAIN = """#include <kws.h>
static int8_t x[490], y[12];
int main(void) {
    struct kws_inputs in = {x};
    struct kws_outputs out = {y};
    return kws_run(&in, &out);
}
"""


# Zephyr's CMake entry points the module uses, as thin functions over plain
# CMake (their documented meaning; Zephyr's own add the board's flags too)
ZEPHYR_STAND_IN = """cmake_minimum_required(VERSION 3.13)
project(stand_in C)
add_library(zephyr_interface INTERFACE)       # what every Zephyr library and the app see
macro(zephyr_library)
  get_filename_component(ZEPHYR_CURRENT_LIBRARY ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  add_library(${ZEPHYR_CURRENT_LIBRARY} STATIC)
  target_link_libraries(${ZEPHYR_CURRENT_LIBRARY} PUBLIC zephyr_interface)
endmacro()
function(zephyr_library_sources)
  target_sources(${ZEPHYR_CURRENT_LIBRARY} PRIVATE ${ARGN})
endfunction()
function(zephyr_include_directories)
  foreach(dir ${ARGN})
    target_include_directories(zephyr_interface INTERFACE ${CMAKE_CURRENT_SOURCE_DIR}/${dir})
  endforeach()
endfunction()
function(zephyr_library_include_directories)
  target_include_directories(${ZEPHYR_CURRENT_LIBRARY} PRIVATE ${ARGN})
endfunction()
function(zephyr_library_compile_options)
  target_compile_options(${ZEPHYR_CURRENT_LIBRARY} PRIVATE ${ARGN})
endfunction()
function(zephyr_library_link_libraries)
  target_link_libraries(${ZEPHYR_CURRENT_LIBRARY} PUBLIC ${ARGN})
endfunction()
set(CONFIG_KWS y)
set(CONFIG_KWS_ARCH_FLAGS y)
add_subdirectory(module)
add_executable(app.elf main.c)
target_link_libraries(app.elf PRIVATE module)
target_link_options(app.elf PRIVATE ${LINK_SPECS})
"""
TOOLCHAIN = """set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_C_COMPILER {cc})
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
"""


def cmake_build(project: Path, arch: list[str], cc: str = ARM_CC,
                link_specs: str = "--specs=nosys.specs") -> None:
    """Configure and build `project` with cross compiler `cc`, the board's
    instruction set flags as the framework's toolchain file would set them."""
    (project / "cross.cmake").write_text(TOOLCHAIN.format(cc=cc))
    run_checked(["cmake", "-S", ".", "-B", "build", "-DCMAKE_TOOLCHAIN_FILE=cross.cmake",
                 f"-DCMAKE_C_FLAGS={' '.join(arch)}", f"-DLINK_SPECS={link_specs}"], project)
    run_checked(["cmake", "--build", "build"], project)


def defined_symbols(archive: Path) -> set[str]:
    out = subprocess.run(["arm-none-eabi-nm", "--defined-only", str(archive)],
                         capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if len(line.split()) == 3}


def test_zephyr_module_builds_through_its_cmake(built, arch, tmp_path):
    mod = export(built, "zephyr", tmp_path)
    module = yaml.safe_load((mod / "zephyr" / "module.yml").read_text())
    assert module == {"name": "kws", "build": {"cmake": ".", "kconfig": "Kconfig"},
                      "samples": ["samples/kws"]}
    kconfig = (mod / "Kconfig").read_text()
    symbols = re.findall(r"^(?:menu)?config (\w+)$", kconfig, re.M)
    assert symbols == ["KWS", "KWS_ARCH_FLAGS", "KWS_ARENA_IN_SECTION", "KWS_ARENA_SECTION",
                       "KWS_THREAD_STACK_SIZE", "KWS_THREAD_PRIORITY"]
    sample = mod / "samples" / "kws"
    assert "CONFIG_KWS=y" in (sample / "prj.conf").read_text().splitlines()
    main_c = (sample / "src" / "main.c").read_text()
    for symbol in symbols[2:]:
        assert f"CONFIG_{symbol}" in main_c, symbol       # each option is used
    assert "find_package(Zephyr" in (sample / "CMakeLists.txt").read_text()
    cmake = (mod / "CMakeLists.txt").read_text()
    for call in ("zephyr_library()", "zephyr_library_sources(", "zephyr_library_compile_options("):
        assert call in cmake

    project = tmp_path / "zephyr_app"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(ZEPHYR_STAND_IN)
    (project / "module").symlink_to(mod)
    (project / "main.c").write_text(APP_MAIN)
    cmake_build(project, arch)
    assert (project / "build" / "app.elf").is_file()
    library = project / "build" / "module" / "libmodule.a"
    assert {"kws_run", "kws_run_with_arena"} <= defined_symbols(library)
    flags = (project / "build" / "module" / "CMakeFiles" / "module.dir" / "flags.make").read_text()
    assert all(f in flags for f in [*arch, "-O2", "-ffp-contract=fast"])


# ------------------------------------------------------------------ esp-idf

ESP_IDF_STAND_IN = """cmake_minimum_required(VERSION 3.13)
project(stand_in C)
function(idf_component_register)
  cmake_parse_arguments(IDF "" "" "SRCS;INCLUDE_DIRS;PRIV_INCLUDE_DIRS" ${ARGN})
  get_filename_component(name ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  set(lib __idf_${name})
  if(IDF_SRCS)
    add_library(${lib} STATIC ${IDF_SRCS})
    target_include_directories(${lib} PUBLIC ${IDF_INCLUDE_DIRS} PRIVATE ${IDF_PRIV_INCLUDE_DIRS})
  else()
    add_library(${lib} INTERFACE)
    target_include_directories(${lib} INTERFACE ${IDF_INCLUDE_DIRS})
  endif()
  set(COMPONENT_LIB ${lib} PARENT_SCOPE)
endfunction()
function(add_prebuilt_library target path)
  add_library(${target} STATIC IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES IMPORTED_LOCATION ${CMAKE_CURRENT_SOURCE_DIR}/${path})
endfunction()
add_subdirectory(components/kws)
add_executable(app.elf main.c)
target_link_libraries(app.elf PRIVATE __idf_kws)
target_link_options(app.elf PRIVATE ${LINK_SPECS})
"""


# Zephyr's headers as far as the sample uses them
ZEPHYR_HEADERS = {
    "zephyr/kernel.h": "#include <stdint.h>\n#include <zephyr/toolchain.h>\n"
    "#define K_THREAD_DEFINE(name, stack, entry, p1, p2, p3, prio, opt, delay) "
    "void (*const name##_entry)(void *, void *, void *) = entry; "
    "const int name##_stack = (stack), name##_prio = (prio)\n",
    "zephyr/sys/printk.h": "void printk(const char *fmt, ...);\n",
    "zephyr/toolchain.h": "#define __aligned(x) __attribute__((aligned(x)))\n"
    "#define Z_GENERIC_SECTION(s) __attribute__((section(s)))\n",
}


@pytest.mark.parametrize("in_section", [False, True])
def test_zephyr_sample_compiles_with_its_kconfig_options(built, arch, tmp_path, in_section):
    """The sample's main.c with each Kconfig option it reads defined as
    Zephyr's build defines them (CONFIG_<symbol>; the arena's section both
    ways), against stand-ins for the three Zephyr headers it includes."""
    mod = export(built, "zephyr", tmp_path)
    for path, text in ZEPHYR_HEADERS.items():
        (tmp_path / "zinc" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "zinc" / path).write_text(text)
    config = ["-DCONFIG_KWS=1", "-DCONFIG_KWS_THREAD_STACK_SIZE=2048",
              "-DCONFIG_KWS_THREAD_PRIORITY=5"]
    if in_section:
        config += ["-DCONFIG_KWS_ARENA_IN_SECTION=1",
                   '-DCONFIG_KWS_ARENA_SECTION=".noinit.kws_arena"']
    run_checked([ARM_CC, *arch, "-Os", "-Wall", "-Werror", *config, f"-I{tmp_path / 'zinc'}",
                 f"-I{mod / 'include'}", f"-I{mod / 'runtime_c'}", "-c",
                 str(mod / "samples" / "kws" / "src" / "main.c"), "-o", "main.o"], tmp_path)
    sections = run_checked(["arm-none-eabi-objdump", "-h", "main.o"], tmp_path)
    assert (".noinit.kws_arena" in sections) == in_section


def test_esp_idf_component_builds_through_its_cmake(built, arch, tmp_path):
    comp = export(built, "esp-idf", tmp_path)
    manifest = yaml.safe_load((comp / "idf_component.yml").read_text())
    assert manifest["version"] == built.metadata["versions"]["aot"]
    assert set(manifest) <= {"version", "description", "targets", "dependencies", "url"}
    assert "targets" not in manifest          # Cortex-M: the portable C, any target
    assert "idf_component_register(" in (comp / "CMakeLists.txt").read_text()
    assert not (comp / "lib").exists()

    project = tmp_path / "idf_app"
    (project / "components").mkdir(parents=True)
    (project / "components" / "kws").symlink_to(comp)
    (project / "CMakeLists.txt").write_text(ESP_IDF_STAND_IN)
    (project / "main.c").write_text(APP_MAIN)
    cmake_build(project, arch)
    assert (project / "build" / "app.elf").is_file()


def test_esp_idf_component_of_an_rv32_board_ships_the_built_library(tmp_path):
    from elftools.elf.elffile import ELFFile

    info = package(MODEL, board="qemu-rv32", name="kws", out_dir=tmp_path / "kws",
                   format="esp-idf")
    comp = info.path
    assert yaml.safe_load((comp / "idf_component.yml").read_text())["targets"] == ["esp32c3"]
    cmake = (comp / "CMakeLists.txt").read_text()
    assert "add_prebuilt_library(kws_prebuilt lib/libkws.a)" in cmake
    assert not (comp / "src").exists()
    project = tmp_path / "idf_app"
    (project / "components").mkdir(parents=True)
    (project / "components" / "kws").symlink_to(comp)
    (project / "CMakeLists.txt").write_text(ESP_IDF_STAND_IN)
    (project / "main.c").write_text(APP_MAIN)
    # the C library as the board's (ESP-IDF brings its own newlib); CMAKE_C_FLAGS
    # reach the link too
    cmake_build(project, ["-march=rv32imc", "-mabi=ilp32", "--specs=picolibc.specs"],
                "riscv64-unknown-elf-gcc", "")
    assert (project / "build" / "app.elf").is_file()
    members = subprocess.run(["ar", "t", str(comp / "lib" / "libkws.a")], capture_output=True,
                             text=True, check=True).stdout.split()
    assert "kws.o" in members
    subprocess.run(["ar", "x", str(comp / "lib" / "libkws.a"), "kws.o"], cwd=tmp_path, check=True)
    with open(tmp_path / "kws.o", "rb") as f:
        elf = ELFFile(f)
        assert (elf["e_machine"], elf.elfclass) == ("EM_RISCV", 32)


# --------------------------------------------------------------- platformio

# library.json fields (docs.platformio.org, "library.json") and their types
PIO_FIELDS = {"name": str, "version": str, "description": str, "keywords": (str, list),
              "frameworks": (str, list), "platforms": (str, list), "headers": (str, list),
              "build": dict}
PIO_BUILD_FIELDS = {"flags": (str, list), "srcFilter": (str, list), "srcDir": str,
                    "includeDir": str, "unflags": (str, list), "libArchive": bool}


def pio_selected(root: Path, src_dir: str, src_filter: list[str]) -> list[str]:
    """The files PlatformIO's srcFilter keeps: +<glob> adds, -<glob> removes, in order."""
    base = (root / src_dir).resolve()
    files = [p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file()]
    kept: set[str] = set()
    for rule in src_filter:
        sign, pattern = rule[0], rule[2:-1]
        assert sign in "+-" and rule[1] == "<" and rule[-1] == ">", rule
        hit = {f for f in files if fnmatch.fnmatch(f, pattern)}
        kept = kept | hit if sign == "+" else kept - hit
    return sorted(kept)


def test_platformio_library_follows_the_schema_and_builds_from_its_flags(built, arch, tmp_path):
    lib = export(built, "platformio", tmp_path)
    manifest = json.loads((lib / "library.json").read_text())
    assert set(manifest) <= PIO_FIELDS.keys() and {"name", "version"} <= manifest.keys()
    for key, value in manifest.items():
        assert isinstance(value, PIO_FIELDS[key]), key
    assert set(manifest["build"]) <= PIO_BUILD_FIELDS.keys()
    for key, value in manifest["build"].items():
        assert isinstance(value, PIO_BUILD_FIELDS[key]), key
    assert re.fullmatch(r"\d+\.\d+\.\d+", manifest["version"])
    ini = configparser.ConfigParser()
    ini.read(lib / "examples" / "kws" / "platformio.ini")
    env = ini["env:nucleo_f446re"]
    assert (env["platform"], env["board"], env["lib_deps"]) == ("ststm32", "nucleo_f446re",
                                                                "symlink://../..")
    assert (lib / "examples/kws" / env["lib_deps"].removeprefix("symlink://")).resolve() == lib

    build = manifest["build"]
    sources = pio_selected(lib, build["srcDir"], build["srcFilter"])
    assert sources == ["runtime_c/aot_platform.c", "src/kws.c", "src/kws_kernels.c",
                       "src/kws_params.c"]
    for src in sources:        # as PlatformIO compiles a library: its flags, its includeDir
        run_checked([ARM_CC, *arch, *build["flags"], f"-I{build['includeDir']}", "-c", src,
                     "-o", str(tmp_path / (Path(src).stem + ".o"))], lib)
    # the example, as an application: the library's includeDir only
    run_checked([ARM_CC, *arch, "-Os", f"-I{build['includeDir']}", "-c",
                 "examples/kws/src/main.c", "-o", str(tmp_path / "main.o")], lib)


# ---------------------------------------------------------------------- mlf

def test_mlf_is_a_deterministic_model_library_format_tar(built, arch, tmp_path):
    out = export(built, "mlf", tmp_path)
    data = (out / "kws.tar").read_bytes()
    assert export_package(built.path, "mlf", tmp_path / "again").joinpath("kws.tar") \
        .read_bytes() == data
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
        names = [m.name for m in members]
        assert names == sorted(names)
        assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
        files = {m.name for m in members if m.isfile()}
        assert {"metadata.json", "codegen/host/src/kws.c", "codegen/host/src/kws_kernels.c",
                "codegen/host/src/kws_params.c", "codegen/host/include/kws.h",
                "runtime/src/aot_platform.c", "runtime/include/aot_runtime.h",
                "parameters/kws.params.json"} == files - {"codegen/host/src/kws_internal.h"}
        meta = json.load(tar.extractfile("metadata.json"))
        tar.extractall(tmp_path / "mlf", filter="data")
    assert meta["version"] == 7 and meta["model_name"] == "kws" and meta["style"] == "full-model"
    memory = meta["modules"]["kws"]["memory"]["functions"]["main"][0]
    assert memory["workspace_size_bytes"] == built.metadata["arena_bytes"]
    root = tmp_path / "mlf"
    for src in sorted(root.glob("codegen/host/src/*.c")) + sorted(root.glob("runtime/src/*.c")):
        run_checked([ARM_CC, *arch, "-O2", "-std=c99", "-Icodegen/host/include",
                     "-Iruntime/include", "-Icodegen/host/src", "-c", str(src.relative_to(root)),
                     "-o", str(tmp_path / (src.stem + ".o"))], root)
