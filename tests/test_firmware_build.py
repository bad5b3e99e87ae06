"""A firmware-style program built against a package the way a user would:
once through its CMakeLists.txt (add_subdirectory), once through its
Makefile. It places the arena itself (`<name>_run_with_arena`), runs the
stateful model twice (the state carries over), resets and runs again, and
checks the API's error codes; the outputs must equal the interpreter's."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import aot
from aot.api import package
from aot.testing import random_inputs, run_twice

from conftest import MODELS

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
    run_checked(["cmake", "-S", ".", "-B", "build", "-DCMAKE_BUILD_TYPE=Release",
                 "-DCMAKE_C_COMPILER=gcc",
                 "-DCMAKE_C_FLAGS=-Wall -Wextra -Werror"], fw)
    run_checked(["cmake", "--build", "build"], fw)
    stdout = run_checked([str(fw / "build" / "firmware")], fw)
    check_output(stdout, first, second, len(info.metadata["kernels"]), profile=False)


def test_firmware_with_makefile_and_profiling(tmp_path, model):
    info, x, first, second = model
    fw = firmware_dir(tmp_path, info, x)
    flags = "-O1 -DAOT_PROFILE -Wall -Wextra -Werror"
    run_checked(["make", "-C", "pkg", "CC=clang", f"CFLAGS={flags}"], fw)
    lib = fw / "pkg" / "build" / f"lib{info.name}.a"
    assert lib.is_file()
    run_checked(["clang", "-std=c99", *flags.split(), "-Ipkg/include", "-Ipkg/runtime_c",
                 "main.c", str(lib), "-lm", "-o", "firmware"], fw)
    stdout = run_checked([str(fw / "firmware")], fw)
    check_output(stdout, first, second, len(info.metadata["kernels"]), profile=True)
