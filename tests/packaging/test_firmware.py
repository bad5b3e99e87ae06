"""A firmware-style program built against a package the way a user would:
once through its CMakeLists.txt (add_subdirectory, a Debug build at -O0),
once through its Makefile (CFLAGS of its own). It places the arena itself
(`<name>_run_with_arena`), runs the stateful model twice (the state carries
over), resets and runs again, and checks the API's error codes; the outputs
must equal the interpreter's, and the package must compile with its
target's flags whatever the firmware's.

Then: two threads on one package (an arena each is safe, the static arena
is not); and a Cortex-M4 firmware through CMake and arm-none-eabi-gcc that
links an int8 and a float package and runs them on mps2-an386 as fast, in
instructions, as aot's own harness."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import aot
from aot.api import package
from aot.packaging.firmware import build_flags
from aot.targets import get_target
from aot.check.inputs import random_inputs
from aot.testing import run_twice

from support import MODELS

MODEL = MODELS / "tflm_mnist_lstm_int8.tflite"

FIRMWARE = r"""
#include <stdio.h>
#include <string.h>

#include "NAME.h"

/* Firmware picks where the arena lives (here: its own section in RAM). */
static uint8_t arena[NAMEU_ARENA_SIZE + NAMEU_ARENA_ALIGN]
    __attribute__((aligned(NAMEU_ARENA_ALIGN), section(".bss.model_arena")));

static const int8_t input[NAMEU_INPUT_IN_SIZE] = { INPUT_VALUES };
static int8_t output[NAMEU_OUTPUT_OUT_SIZE];
static int profiled;

#ifdef AOT_PROFILE
void aot_platform_profile(int step, const char* kernel, uint64_t micros) {
    (void)step;
    (void)micros;
    if (kernel != NULL) {
        profiled++;
    }
}
#endif

static void print_output(const char* label) {
    int i;
    printf("%s", label);
    for (i = 0; i < NAMEU_OUTPUT_OUT_SIZE; i++) {
        printf(" %d", output[i]);
    }
    printf("\n");
}

int main(void) {
    struct NAME_inputs in;
    struct NAME_outputs out;
    in.IN = input;
    out.OUT = output;
    if (NAME_run_with_arena(&in, &out, arena + 1) != AOT_ERR_MISALIGNED) return 10;
    if (NAME_run_with_arena(&in, &out, NULL) != AOT_ERR_NULL_ARGUMENT) return 11;
    out.OUT = NULL;
    if (NAME_run_with_arena(&in, &out, arena) != AOT_ERR_NULL_ARGUMENT) return 12;
    out.OUT = output;
    if (NAME_run_with_arena(&in, &out, arena) != AOT_OK) return 13;
    print_output("first");
    if (NAME_run_with_arena(&in, &out, arena) != AOT_OK) return 14;
    print_output("second");
    NAME_reset();
    memset(arena, 0x5a, sizeof arena);   /* the arena holds nothing across runs */
    if (NAME_run(&in, &out) != AOT_OK) return 15;
    print_output("after_reset");
    printf("profiled %d\n", profiled);
    return 0;
}
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    graph = aot.optimize(aot.load(MODEL))
    tmp = tmp_path_factory.mktemp("fw")
    info = package(graph, out_dir=tmp / "pkg")
    meta = info.metadata
    assert len(meta["inputs"]) == len(meta["outputs"]) == 1
    inputs = random_inputs(graph, 5)
    first, second = run_twice(graph, inputs)[:2]
    out = graph.outputs[0]
    assert not np.array_equal(first[out], second[out]), "the state must show"
    return info, inputs[graph.inputs[0]], first[out], second[out]


def firmware_dir(tmp_path: Path, info, x: np.ndarray) -> Path:
    fw = tmp_path / "fw"
    shutil.copytree(info.path, fw / "pkg")
    meta = info.metadata
    name, N = info.name, info.name.upper()
    src = (FIRMWARE.replace("NAMEU", N).replace("NAME", name)
           .replace("INPUT_IN", f"INPUT_{meta['inputs'][0]['c_name'].upper()}")
           .replace("OUTPUT_OUT", f"OUTPUT_{meta['outputs'][0]['c_name'].upper()}")
           .replace("in.IN", f"in.{meta['inputs'][0]['c_name']}")
           .replace("out.OUT", f"out.{meta['outputs'][0]['c_name']}")
           .replace("INPUT_VALUES", ", ".join(str(int(v)) for v in x.reshape(-1))))
    (fw / "main.c").write_text(src)
    return fw


def run_checked(cmd, cwd) -> str:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def check_output(stdout: str, first, second, kernels: int, profile: bool) -> None:
    rows = dict(line.split(" ", 1) for line in stdout.strip().splitlines())
    def parse(key):
        return np.array([int(v) for v in rows[key].split()], np.int8)
    np.testing.assert_array_equal(parse("first"), first.reshape(-1))
    np.testing.assert_array_equal(parse("second"), second.reshape(-1))
    np.testing.assert_array_equal(parse("after_reset"), first.reshape(-1))
    assert int(rows["profiled"]) == (3 * kernels if profile else 0)


def test_firmware_with_cmake(tmp_path, model):
    info, x, first, second = model
    fw = firmware_dir(tmp_path, info, x)
    (fw / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.13)\nproject(firmware C)\n"
        "add_subdirectory(pkg)\nadd_executable(firmware main.c)\n"
        f"target_link_libraries(firmware PRIVATE {info.name})\n"
        "target_compile_options(firmware PRIVATE -std=c99 -Wall -Wextra -Werror)\n")
    run_checked(["cmake", "-S", ".", "-B", "build", "-DCMAKE_BUILD_TYPE=Debug",
                 "-DCMAKE_C_COMPILER=gcc", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
                 "-DCMAKE_C_FLAGS=-O0 -Wall -Wextra -Werror"], fw)
    run_checked(["cmake", "--build", "build"], fw)
    stdout = run_checked([str(fw / "build" / "firmware")], fw)
    check_output(stdout, first, second, len(info.metadata["kernels"]), profile=False)
    # A Debug firmware at -O0 still compiles the package with the target's
    # flags, last on the line (the last -O wins), and only the package;
    # the driver's (clang's installation) stay with the target's clang.
    flags = build_flags(get_target(info.metadata["target"]["name"]))
    target_flags = [*flags.arch, *flags.optimize]
    for cmd in json.loads((fw / "build" / "compile_commands.json").read_text()):
        args = cmd["command"].split()
        last_o = [a for a in args if a.startswith("-O")][-1]
        if cmd["file"].endswith("main.c"):
            assert last_o == "-O0" and not set(target_flags) & set(args), cmd
        else:
            assert last_o in target_flags and set(target_flags) <= set(args), cmd


def test_firmware_with_makefile_and_profiling(tmp_path, model):
    info, x, first, second = model
    fw = firmware_dir(tmp_path, info, x)
    flags = "-O1 -DAOT_PROFILE -Wall -Wextra -Werror"
    log = run_checked(["make", "-C", "pkg", "CC=clang", f"CFLAGS={flags}"], fw)
    # the package's flags come after the user's CFLAGS: its -O wins
    compiles = [line.split() for line in log.splitlines() if line.startswith("clang ")]
    target_o = [a for a in info.metadata["target"]["cflags"] if a.startswith("-O")]
    assert compiles and all([a for a in c if a.startswith("-O")][-1:] == target_o
                            for c in compiles)
    lib = fw / "pkg" / "build" / f"lib{info.name}.a"
    assert lib.is_file()
    run_checked(["clang", "-std=c99", *flags.split(), "-Ipkg/include", "-Ipkg/runtime_c",
                 "main.c", str(lib), "-lm", "-o", "firmware"], fw)
    stdout = run_checked([str(fw / "firmware")], fw)
    check_output(stdout, first, second, len(info.metadata["kernels"]), profile=True)


# ------------------------------------------------------------------ threads

THREADS = r"""
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "NAME.h"

#define RUNS 2000
#define IN_SIZE NAMEU_INPUT_IN_SIZE
#define OUT_SIZE NAMEU_OUTPUT_OUT_SIZE

static const int8_t inputs[2][IN_SIZE] = { { INPUT_A }, { INPUT_B } };
static int8_t reference[2][OUT_SIZE];
static uint8_t arenas[2][NAMEU_ARENA_SIZE] __attribute__((aligned(NAMEU_ARENA_ALIGN)));

struct job {
    int which;          /* thread 0 runs input A, thread 1 input B */
    int own_arena;      /* NAME_run_with_arena(arenas[which]), else NAME_run */
    int mismatches;
    int errors;
};

static void* worker(void* p) {
    struct job* job = p;
    int8_t output[OUT_SIZE];
    struct NAME_inputs in;
    struct NAME_outputs out;
    int i;
    in.IN = inputs[job->which];
    out.OUT = output;
    for (i = 0; i < RUNS; i++) {
        int rc = job->own_arena ? NAME_run_with_arena(&in, &out, arenas[job->which])
                                : NAME_run(&in, &out);
        job->errors += rc != AOT_OK;
        job->mismatches += memcmp(output, reference[job->which], OUT_SIZE) != 0;
    }
    return NULL;
}

static int race(int own_arena, int* errors) {
    struct job jobs[2] = { { 0, own_arena, 0, 0 }, { 1, own_arena, 0, 0 } };
    pthread_t threads[2];
    int i;
    for (i = 0; i < 2; i++) {
        if (pthread_create(&threads[i], NULL, worker, &jobs[i]) != 0) return -1;
    }
    for (i = 0; i < 2; i++) {
        pthread_join(threads[i], NULL);
    }
    *errors += jobs[0].errors + jobs[1].errors;
    return jobs[0].mismatches + jobs[1].mismatches;
}

int main(void) {
    struct NAME_inputs in;
    struct NAME_outputs out;
    int which, i, errors = 0, own, shared;
    for (which = 0; which < 2; which++) {
        in.IN = inputs[which];
        out.OUT = reference[which];
        if (NAME_run(&in, &out) != AOT_OK) return 1;
        printf("reference%d", which);
        for (i = 0; i < OUT_SIZE; i++) printf(" %d", reference[which][i]);
        printf("\n");
    }
    own = race(1, &errors);
    shared = race(0, &errors);
    printf("own_arena_mismatches %d\nstatic_arena_mismatches %d\nerrors %d\n", own, shared,
           errors);
    return own < 0 || shared < 0;
}
"""


def test_threads_with_one_arena_each_are_safe(tmp_path, record_property):
    """Two threads x 2,000 runs, each on its own input: with an arena per
    thread (`<name>_run_with_arena`, a stateless model) every output equals
    the single-thread reference; both on the static arena (`<name>_run`)
    they overwrite each other's tensors (counted, not asserted: a race may
    miss)."""
    graph = aot.optimize(aot.load(MODELS / "mlperf_kws_dscnn_int8.tflite"))
    assert not graph.variables
    info = package(graph, board="host", out_dir=tmp_path / "pkg")
    meta = info.metadata
    xs = [random_inputs(graph, seed)[graph.inputs[0]] for seed in (1, 2)]
    src = (THREADS.replace("NAMEU", info.name.upper()).replace("NAME", info.name)
           .replace("INPUT_IN", f"INPUT_{meta['inputs'][0]['c_name'].upper()}")
           .replace("OUTPUT_OUT", f"OUTPUT_{meta['outputs'][0]['c_name'].upper()}")
           .replace("in.IN", f"in.{meta['inputs'][0]['c_name']}")
           .replace("out.OUT", f"out.{meta['outputs'][0]['c_name']}")
           .replace("INPUT_A", ", ".join(str(int(v)) for v in xs[0].reshape(-1)))
           .replace("INPUT_B", ", ".join(str(int(v)) for v in xs[1].reshape(-1))))
    (tmp_path / "threads.c").write_text(src)
    run_checked(["clang", "-std=c99", "-O2", "-pthread", "-Wall", "-Wextra", "-Werror",
                 "-Ipkg/include", "-Ipkg/runtime_c", "threads.c", f"pkg/lib/lib{info.name}.a",
                 "-lm", "-o", "threads"], tmp_path)
    rows = dict(line.split(" ", 1) for line in
                run_checked([str(tmp_path / "threads")], tmp_path).strip().splitlines())
    out = graph.outputs[0]
    for i, x in enumerate(xs):
        want = aot.interpret(graph, {graph.inputs[0]: x})[out].reshape(-1)
        np.testing.assert_array_equal([int(v) for v in rows[f"reference{i}"].split()], want)
    assert int(rows["errors"]) == 0
    assert int(rows["own_arena_mismatches"]) == 0
    record_property("summary", f"threads on kws int8, 2 x 2,000 runs: own arenas 0 mismatches, "
                               f"the static arena {rows['static_arena_mismatches']}")


# --------------------------------------------------------------- Cortex-M4

CORTEX_M_MAIN = r"""
#include <stdio.h>
#include <string.h>

#include "kws_int8.h"
#include "kws_f32.h"

#define RUNS 3

static const int8_t x8[KWS_INT8_INPUT_@X8U@_SIZE] = { @X8_VALUES@ };
static const float xf[KWS_F32_INPUT_@XFU@_SIZE] = { @XF_VALUES@ };
static int8_t y8[KWS_INT8_OUTPUT_@Y8U@_SIZE];
static float yf[KWS_F32_OUTPUT_@YFU@_SIZE];

static int run_int8(void) {
    struct kws_int8_inputs in;
    struct kws_int8_outputs out;
    in.@X8@ = x8;
    out.@Y8@ = y8;
    return kws_int8_run(&in, &out);
}

static int run_f32(void) {
    struct kws_f32_inputs in;
    struct kws_f32_outputs out;
    in.@XF@ = xf;
    out.@YF@ = yf;
    return kws_f32_run(&in, &out);
}

/* As the package's harness times: the state reset, then the run alone, on
 * the start-up code's SysTick clock (under -icount shift=0: instructions). */
static int timed(const char* label, int (*run)(void), void (*reset)(void)) {
    int i;
    printf("%s_us", label);
    for (i = 0; i <= RUNS; i++) {
        uint64_t t0, t1;
        reset();
        t0 = aot_platform_timer_us();
        if (run() != AOT_OK) return 1;
        t1 = aot_platform_timer_us();
        if (i > 0) printf(" %lu", (unsigned long)(t1 - t0));   /* run 0: warm-up */
    }
    printf("\n");
    return 0;
}

int main(void) {
    int i;
    if (timed("int8", run_int8, kws_int8_reset) || timed("f32", run_f32, kws_f32_reset)) {
        return 1;
    }
    printf("int8");
    for (i = 0; i < KWS_INT8_OUTPUT_@Y8U@_SIZE; i++) printf(" %d", y8[i]);
    printf("\nf32");
    for (i = 0; i < KWS_F32_OUTPUT_@YFU@_SIZE; i++) {
        uint32_t bits;
        memcpy(&bits, &yf[i], sizeof bits);
        printf(" %08lx", (unsigned long)bits);
    }
    printf("\n");
    return 0;
}
"""

ARM_TOOLCHAIN = """set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR arm)
set(CMAKE_C_COMPILER arm-none-eabi-gcc)
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
"""

# No build type, no optimization of its own: the packages bring theirs. Its
# own code takes the packages' ABI (hard float, FPv4) from KWS_INT8_ARCH_FLAGS.
CORTEX_M_CMAKE = """cmake_minimum_required(VERSION 3.13)
project(firmware C)
add_subdirectory(kws_int8)
add_subdirectory(kws_f32)
add_executable(fw.elf main.c kws_int8/runtime_c/cortex_m/startup.c)
target_compile_options(fw.elf PRIVATE ${KWS_INT8_ARCH_FLAGS} -Wall -Wextra -Werror)
target_link_libraries(fw.elf PRIVATE kws_int8 kws_f32)
target_link_options(fw.elf PRIVATE ${KWS_INT8_ARCH_FLAGS} -nostartfiles --specs=rdimon.specs
    -T ${CMAKE_CURRENT_SOURCE_DIR}/fw.ld -L${CMAKE_CURRENT_SOURCE_DIR}/kws_int8
    -Wl,--gc-sections)
"""


def firmware_linker_script(board_script: str) -> str:
    """The board's linker script with the weights placed by the package's
    snippet (INCLUDE kws_int8_sections.ld) in the region it names."""
    own = "    .rodata.aot : ALIGN(16)\n    {\n        *(.rodata.aot)\n    } > FLASH\n"
    assert own in board_script
    script = board_script.replace(own, "    INCLUDE kws_int8_sections.ld\n")
    return script.replace("ENTRY(", 'REGION_ALIAS("AOT_WEIGHTS_REGION", FLASH);\n\nENTRY(', 1)


def test_cortex_m4_firmware_through_cmake_links_int8_and_float(tmp_path, record_property):
    """A Cortex-M4 firmware built with arm-none-eabi-gcc through the two
    packages' CMakeLists.txt (toolchain file, no build type), with the
    start-up code the package ships and the board's linker script placing
    the weights through the package's snippet: the float model links libm
    (expf), both run on mps2-an386 with the outputs of aot's harness, in as
    many instructions (SysTick under -icount shift=0) within 5%."""
    from aot.deploy import run_package
    from aot.deploy.qemu_system import qemu_command
    from aot.targets import get_board

    board = get_board("mps2-an386")
    fw = tmp_path / "fw"
    fw.mkdir()
    expected, main = {}, CORTEX_M_MAIN
    for kind, io in (("int8", "8"), ("f32", "F")):
        graph = aot.optimize(aot.load(MODELS / f"mlperf_kws_dscnn_{kind}.tflite"))
        info = package(graph, board=board, name=f"kws_{kind}", out_dir=tmp_path / kind)
        x = random_inputs(graph, 0)[graph.inputs[0]]
        result = run_package(info.path, board, [x], warmup=1, runs=3)
        expected[kind] = (result.outputs[0].reshape(-1), np.median(result.times_us))
        shutil.copytree(info.path, fw / f"kws_{kind}")
        members = {f"X{io}": info.metadata["inputs"][0]["c_name"],
                   f"Y{io}": info.metadata["outputs"][0]["c_name"]}
        for key, member in members.items():
            main = main.replace(f"@{key}U@", member.upper()).replace(f"@{key}@", member)
        main = main.replace(f"@X{io}_VALUES@", ", ".join(
            str(int(v)) if kind == "int8" else f"{float(v)!r}f" for v in x.reshape(-1)))
    (fw / "main.c").write_text(main)
    (fw / "arm.cmake").write_text(ARM_TOOLCHAIN)
    (fw / "CMakeLists.txt").write_text(CORTEX_M_CMAKE)
    (fw / "fw.ld").write_text(firmware_linker_script(
        (fw / "kws_int8" / board.firmware["linker_script"]).read_text()))
    run_checked(["cmake", "-S", ".", "-B", "build", "-DCMAKE_TOOLCHAIN_FILE=arm.cmake"], fw)
    run_checked(["cmake", "--build", "build"], fw)
    shutil.copy(fw / "build" / "fw.elf", fw / "bench")      # the name qemu_command runs
    rows = dict(line.split(" ", 1) for line in
                run_checked(qemu_command(board, []), fw).strip().splitlines())
    np.testing.assert_array_equal([int(v) for v in rows["int8"].split()], expected["int8"][0])
    got = np.array([int(v, 16) for v in rows["f32"].split()], np.uint32).view(np.float32)
    np.testing.assert_array_equal(got, expected["f32"][0])
    for kind in ("int8", "f32"):
        ours, harness = np.median([int(v) for v in rows[f"{kind}_us"].split()]), expected[kind][1]
        assert abs(ours / harness - 1) <= 0.05, (kind, ours, harness)
        record_property("summary", f"mps2-an386 kws {kind}: firmware through CMake "
                                   f"{ours:.0f} us, aot's harness {harness:.0f} us "
                                   "(instructions / 1000 under -icount shift=0)")


def test_a_package_of_a_newer_format_is_refused(tmp_path, model):
    """metadata.json "package_format" (and <NAME>_PACKAGE_FORMAT) name the
    layout; aot refuses to run a package laid out by a newer aot."""
    from aot.errors import AotError
    from aot.packaging.metadata import PACKAGE_FORMAT, read_metadata

    info = model[0]
    header = (info.path / "include" / f"{info.name}.h").read_text()
    assert f"#define {info.name.upper()}_PACKAGE_FORMAT {PACKAGE_FORMAT}\n" in header
    assert f'#define {info.name.upper()}_AOT_VERSION "{aot.__version__}"\n' in header
    assert read_metadata(info.path)["package_format"] == PACKAGE_FORMAT
    pkg = tmp_path / "pkg"
    shutil.copytree(info.path, pkg)
    meta = json.loads((pkg / "metadata.json").read_text())
    meta["package_format"] = PACKAGE_FORMAT + 1
    (pkg / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(AotError, match="newer than this aot reads"):
        read_metadata(pkg)
