/* aot thread pool (see aot_threads.h). Each job (one split kernel, or one
 * phase of it) has TASKS_PER_THREAD tasks per thread; thread k owns tasks
 * k, k + n, ... Every thread runs the tasks it owns; a task nobody has
 * started after a while is run by whoever finds it (a worker the OS does
 * not run loses its task to the caller instead of stalling the run). A task
 * is claimed by a compare-and-swap of its slot from the previous job's
 * number to this one's. A mutex with two condition variables serves
 * whoever stops spinning and sleeps.
 *
 * Memory order: the caller writes the job (fn, ctx), then publishes its
 * number with release; a claim is an acquire compare-and-swap, so the
 * claimer sees the job. A task's writes (its share of the kernel's outputs)
 * come before its release increment of `done`; the caller's acquire read
 * of `done` == tasks comes before the next kernel reads them. GCC/Clang
 * __atomic builtins: the package compiles as C99. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <sched.h>

#include "aot_runtime.h"
#include "aot_threads.h"

/* Pause-loop iterations a waiting thread spins before it sleeps (about a
 * millisecond on this x86, 50 ns a pause): longer than the gaps between a
 * run's split kernels and between runs (a worker woken from its sleep came
 * too late for the job on a loaded machine), short enough that an idle
 * process sleeps. */
#define SPINS 20000
/* How long the caller leaves the workers' tasks to them (pause-loop
 * iterations) before it runs those nobody has started. */
#define STEAL_SPINS 20000

/* Tasks per thread in a job: one balanced share each (finer shares
 * measured no better: each claim moves a cache line between cores). */
#define TASKS_PER_THREAD 1
#define MAX_TASKS (AOT_MAX_THREADS * TASKS_PER_THREAD)

/* The words threads write each job sit on cache lines of their own:
 * sharing one with the job's read-mostly fields would move that line
 * between cores once more per claim. */
#define LINE 64

static struct {
    uint32_t job __attribute__((aligned(LINE)));    /* bumped once per job (or stop) */
    int done __attribute__((aligned(LINE)));        /* tasks of the current job finished */
    uint32_t claimed[MAX_TASKS] __attribute__((aligned(LINE)));  /* per task: the job that ran it last */
    aot_task_fn fn __attribute__((aligned(LINE)));
    void* ctx;
    int threads;               /* 0: not started; else the caller's thread + workers */
    int busy;                  /* a caller holds the pool for a job */
    int stop;                  /* the next job tells workers to exit */
    pthread_mutex_t lock;      /* guards sleeping and waking */
    pthread_cond_t wake;       /* workers: a new job (or stop) was published */
    pthread_cond_t finished;   /* the caller: the last task is done */
    pthread_t workers[AOT_MAX_THREADS - 1];
} pool = {0, 0, {0}, NULL, NULL, 0, 0, 0, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
          PTHREAD_COND_INITIALIZER, {0}};

/* start and stop, one at a time (a lazy start may race a first run) */
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;

/* One step of a spin-wait (the i-th): a pause instruction, and every 64th
 * step the CPU given up to another runnable thread. The thread waited for
 * may be queued on this very CPU (a loaded machine): pure spinning kept it
 * from running until the spinner's time slice ended, a millisecond or more
 * per kernel. */
static void spin(int i) {
    if (i % 64 == 63) {
        sched_yield();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || (defined(__arm__) && defined(__ARM_ARCH) && __ARM_ARCH >= 7)
    __asm__ __volatile__("yield");
#endif
}

/* Until a job other than `seen` is published: its number. */
static uint32_t wait_for_job(uint32_t seen) {
    uint32_t job;
    int i;
    for (i = 0; i < SPINS; i++) {
        job = __atomic_load_n(&pool.job, __ATOMIC_ACQUIRE);
        if (job != seen) {
            return job;
        }
        spin(i);
    }
    pthread_mutex_lock(&pool.lock);
    while ((job = __atomic_load_n(&pool.job, __ATOMIC_ACQUIRE)) == seen) {
        pthread_cond_wait(&pool.wake, &pool.lock);
    }
    pthread_mutex_unlock(&pool.lock);
    return job;
}

/* Run task t of job `job` unless another thread has claimed it: 1 if run. */
static int try_task(int t, uint32_t job, int tasks) {
    uint32_t before = job - 1;
    if (!__atomic_compare_exchange_n(&pool.claimed[t], &before, job, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_RELAXED)) {
        return 0;
    }
    pool.fn(pool.ctx, (int32_t)t, (int32_t)tasks);
    if (__atomic_add_fetch(&pool.done, 1, __ATOMIC_ACQ_REL) == tasks) {
        pthread_mutex_lock(&pool.lock);
        pthread_cond_signal(&pool.finished);
        pthread_mutex_unlock(&pool.lock);
    }
    return 1;
}

/* Thread `self`'s own tasks of job `job`. */
static void run_own(uint32_t job, int self, int threads) {
    int t;
    for (t = self; t < threads * TASKS_PER_THREAD; t += threads) {
        try_task(t, job, threads * TASKS_PER_THREAD);
    }
}

/* The tasks of job `job` other threads have not started: how many. */
static int run_rest(uint32_t job, int self, int threads) {
    int t, ran = 0;
    for (t = 0; t < threads * TASKS_PER_THREAD; t++) {
        if (t % threads != self) {
            ran += try_task(t, job, threads * TASKS_PER_THREAD);
        }
    }
    return ran;
}

static void* worker(void* arg) {
    const int self = (int)(intptr_t)arg;
    uint32_t seen = 0;        /* start_locked publishes job 0 before any worker runs */
    for (;;) {
        seen = wait_for_job(seen);
        if (__atomic_load_n(&pool.stop, __ATOMIC_ACQUIRE)) {
            return NULL;
        }
        run_own(seen, self, pool.threads);
        run_rest(seen, self, pool.threads);
    }
}

/* Publish the next job, under the lock, so that a worker about to sleep
 * sees it; its number. */
static uint32_t publish(void) {
    uint32_t job;
    pthread_mutex_lock(&pool.lock);
    job = __atomic_add_fetch(&pool.job, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    return job;
}

static void join_workers(int count) {
    int i;
    __atomic_store_n(&pool.stop, 1, __ATOMIC_RELEASE);
    publish();
    for (i = 0; i < count; i++) {
        pthread_join(pool.workers[i], NULL);
    }
    __atomic_store_n(&pool.stop, 0, __ATOMIC_RELEASE);
}

static void stop_locked(void) {
    if (pool.threads > 1) {
        join_workers(pool.threads - 1);
    }
    __atomic_store_n(&pool.threads, 0, __ATOMIC_RELEASE);
}

static int start_locked(int threads) {
    int i;
    if (threads < 1 || threads > AOT_MAX_THREADS) {
        return AOT_ERR_THREADS;
    }
    if (pool.threads == threads) {
        return AOT_OK;
    }
    stop_locked();
    pool.threads = threads;     /* workers read it; published by pthread_create */
    __atomic_store_n(&pool.job, 0, __ATOMIC_RELEASE);
    for (i = 0; i < MAX_TASKS; i++) {
        __atomic_store_n(&pool.claimed[i], 0, __ATOMIC_RELAXED);
    }
    for (i = 0; i + 1 < threads; i++) {
        if (pthread_create(&pool.workers[i], NULL, worker, (void*)(intptr_t)(i + 1)) != 0) {
            join_workers(i);
            __atomic_store_n(&pool.threads, 0, __ATOMIC_RELEASE);
            return AOT_ERR_THREADS;
        }
    }
    __atomic_store_n(&pool.threads, threads, __ATOMIC_RELEASE);
    return AOT_OK;
}

int aot_pool_start(int threads) {
    int status;
    pthread_mutex_lock(&start_lock);
    status = start_locked(threads);
    pthread_mutex_unlock(&start_lock);
    return status;
}

int aot_pool_ensure(int threads) {
    int status = AOT_OK;
    if (__atomic_load_n(&pool.threads, __ATOMIC_ACQUIRE) != 0) {
        return AOT_OK;
    }
    pthread_mutex_lock(&start_lock);
    if (pool.threads == 0) {
        status = start_locked(threads);
    }
    pthread_mutex_unlock(&start_lock);
    return status;
}

void aot_pool_stop(void) {
    pthread_mutex_lock(&start_lock);
    stop_locked();
    pthread_mutex_unlock(&start_lock);
}

int aot_pool_threads(void) {
    return __atomic_load_n(&pool.threads, __ATOMIC_ACQUIRE);
}

void aot_pool_run(aot_task_fn fn, void* ctx) {
    const int threads = __atomic_load_n(&pool.threads, __ATOMIC_ACQUIRE);
    const int tasks = threads * TASKS_PER_THREAD;
    uint32_t job;
    int free = 0;
    int i;
    if (threads <= 1 || !__atomic_compare_exchange_n(&pool.busy, &free, 1, 0, __ATOMIC_ACQUIRE,
                                                     __ATOMIC_RELAXED)) {
        fn(ctx, 0, 1);
        return;
    }
    pool.fn = fn;
    pool.ctx = ctx;
    __atomic_store_n(&pool.done, 0, __ATOMIC_RELAXED);
    job = publish();
    run_own(job, 0, threads);
    /* The workers' tasks are theirs while they may still be on their way:
     * taking them at once (or after a short wait) left a worker almost
     * nothing on a loaded machine, at no gain. Past STEAL_SPINS the caller
     * runs what nobody has started, so a worker the OS does not run costs
     * a kernel a millisecond at most. */
    for (i = 0; i < STEAL_SPINS && __atomic_load_n(&pool.done, __ATOMIC_ACQUIRE) != tasks; i++) {
        spin(i);
    }
    run_rest(job, 0, threads);
    for (i = 0; i < SPINS && __atomic_load_n(&pool.done, __ATOMIC_ACQUIRE) != tasks; i++) {
        spin(i);
    }
    if (__atomic_load_n(&pool.done, __ATOMIC_ACQUIRE) != tasks) {
        pthread_mutex_lock(&pool.lock);
        while (__atomic_load_n(&pool.done, __ATOMIC_ACQUIRE) != tasks) {
            pthread_cond_wait(&pool.finished, &pool.lock);
        }
        pthread_mutex_unlock(&pool.lock);
    }
    __atomic_store_n(&pool.busy, 0, __ATOMIC_RELEASE);
}
