"""The thread pool itself (runtime_c/aot_threads.c), under ThreadSanitizer.

A C driver runs jobs on the pool: every task of every job must run exactly
once, its writes seen by the caller when aot_pool_run returns; a worker the
OS does not run (the whole process on one CPU) has its tasks taken by the
caller; a worker that is slow every job (its task sleeps) gets the pool
paused (tasks run whole on the caller, ntasks 1) and splitting resumes once
it is fast again.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNTIME = REPO / "runtime_c"
TSAN = ("-fsanitize=thread", "-g", "-O1")

DRIVER = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "aot_runtime.h"
#include "aot_threads.h"

#define SLOTS 4096

struct job {
    int32_t ntasks;               /* the task count the job ran with (task 0's) */
    int32_t runs[AOT_MAX_THREADS];
    int32_t stolen;               /* tasks > 0 run on the caller's thread */
    int slow;                     /* task 1 sleeps this long (us) */
    pthread_t caller;
    float out[SLOTS];
};

/* Task k of n fills its share of out with the job's fingerprint. */
static void task(void* ctx, int32_t k, int32_t n) {
    struct job* j = (struct job*)ctx;
    int32_t i, lo = SLOTS * k / n, hi = SLOTS * (k + 1) / n;
    if (k == 1 && j->slow > 0) {
        struct timespec t = {0, j->slow * 1000L};
        nanosleep(&t, NULL);
    }
    for (i = lo; i < hi; i++) {
        j->out[i] = (float)(i * 3 + 1);
    }
    j->runs[k] += 1;
    if (k == 0) {
        j->ntasks = n;
    }
    if (k > 0 && pthread_equal(pthread_self(), j->caller)) {
        j->stolen += 1;
    }
}

/* One job: 0 if every slot was written and every task ran once. */
static int one(struct job* j) {
    int32_t i;
    memset(j->runs, 0, sizeof j->runs);
    memset(j->out, 0, sizeof j->out);
    aot_pool_run(task, j);
    for (i = 0; i < j->ntasks; i++) {
        if (j->runs[i] != 1) return 1;
    }
    for (i = 0; i < SLOTS; i++) {
        if (j->out[i] != (float)(i * 3 + 1)) return 1;
    }
    return 0;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char** argv) {
    static struct job j;
    const int threads = atoi(argv[2]);
    int i, split = 0, whole = 0, stolen = 0;
    double t0;
    j.caller = pthread_self();
    if (aot_pool_start(threads) != AOT_OK) return 4;
    if (strcmp(argv[1], "many") == 0) {
        for (i = 0; i < 5000; i++) {
            if (one(&j)) return 3;
            split += j.ntasks == threads;
            whole += j.ntasks == 1;
        }
        printf("split %d whole %d stolen %d\n", split, whole, j.stolen);
    } else if (strcmp(argv[1], "slow") == 0) {
        /* a worker slow every job: the pool pauses (jobs run whole) ... */
        j.slow = 1000;
        for (i = 0; i < 400; i++) {
            if (one(&j)) return 3;
            whole += j.ntasks == 1;
        }
        /* ... and splits again once the worker keeps up */
        j.slow = 0;
        t0 = now_ms();
        while (now_ms() - t0 < 3000 && split < 1000) {
            if (one(&j)) return 3;
            if (j.ntasks == threads) split++;
        }
        printf("whole %d split %d\n", whole, split);
    }
    aot_pool_stop();
    return 0;
}
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pool")
    (d / "driver.c").write_text(DRIVER)
    exe = d / "driver"
    subprocess.run(["clang", *TSAN, "-std=c99", "-pthread", f"-I{RUNTIME}", str(d / "driver.c"),
                    str(RUNTIME / "aot_threads.c"), "-o", str(exe)], check=True)
    return exe


def _run(exe: Path, *args: str, cpus: set[int] | None = None) -> dict[str, int]:
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120,
                       env={"TSAN_OPTIONS": "halt_on_error=1:exitcode=66"},
                       preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    assert r.returncode == 0 and "ThreadSanitizer" not in r.stderr, \
        (r.returncode, r.stdout, r.stderr[-3000:])
    words = r.stdout.split()
    return {k: int(v) for k, v in zip(words[::2], words[1::2])}


def test_every_task_runs_once_and_its_writes_are_seen(driver):
    counts = _run(driver, "many", "3")
    assert counts["split"] > 0, counts


def test_a_worker_without_a_cpu_loses_its_tasks_to_the_caller(driver):
    # one CPU for the whole process: the worker runs only when the caller
    # is preempted, so the caller must take (or wait out) its tasks
    cpu = sorted(os.sched_getaffinity(0))[-1]
    counts = _run(driver, "many", "2", cpus={cpu})
    assert counts["stolen"] > 0, counts
    assert counts["whole"] > 0, counts     # and the pool paused: splitting did not pay


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_slow_worker_pauses_the_split_until_it_keeps_up(driver):
    counts = _run(driver, "slow", "2")
    assert counts["whole"] > 0, counts     # paused: kernels ran whole on the caller
    assert counts["split"] > 0, counts     # and split again afterwards
