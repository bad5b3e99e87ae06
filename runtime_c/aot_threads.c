/* aot thread pool (see aot_threads.h): one 64-bit word holds the current
 * job's number (high half) and the next task nobody has claimed (low half).
 * The caller and the workers claim tasks from it with a compare-and-swap, so
 * a worker the OS has not scheduled yet costs nothing: the caller runs the
 * tasks it has not claimed. A mutex with two condition variables serves
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

#include "aot_runtime.h"
#include "aot_threads.h"

/* Pause-loop iterations a waiting thread spins before it sleeps (about a
 * hundred microseconds): longer than the gap a small one-thread kernel
 * leaves between two split ones, short enough not to steal a busy
 * machine's cores for long. */
#define SPINS 4000

/* Tasks per thread in a job: finer than one share per thread, so that a
 * thread the OS runs late (a loaded machine) leaves its shares to the
 * others; each task's share is still whole vector tiles. */
#define TASKS_PER_THREAD 2

/* The two words every thread writes each job sit on cache lines of their
 * own: sharing one with each other or with the job's read-mostly fields
 * would move that line between cores once more per claim. */
#define LINE 64

static struct {
    uint64_t state __attribute__((aligned(LINE)));  /* job number << 32 | next unclaimed task */
    int done __attribute__((aligned(LINE)));        /* tasks of the current job finished */
    aot_task_fn fn __attribute__((aligned(LINE)));
    void* ctx;
    int threads;               /* 0: not started; else the caller's thread + workers */
    int busy;                  /* a caller holds the pool for a job */
    int stop;                  /* the next job tells workers to exit */
    pthread_mutex_t lock;      /* guards sleeping and waking */
    pthread_cond_t wake;       /* workers: a new job (or stop) was published */
    pthread_cond_t finished;   /* the caller: the last task is done */
    pthread_t workers[AOT_MAX_THREADS - 1];
} pool = {0, 0, NULL, NULL, 0, 0, 0, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
          PTHREAD_COND_INITIALIZER, {0}};

/* start and stop, one at a time (a lazy start may race a first run) */
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || (defined(__arm__) && defined(__ARM_ARCH) && __ARM_ARCH >= 7)
    __asm__ __volatile__("yield");
#endif
}

static uint32_t job_of(uint64_t state) {
    return (uint32_t)(state >> 32);
}

/* Until a job other than `seen` is published: its number. */
static uint32_t wait_for_job(uint32_t seen) {
    uint32_t job;
    int i;
    for (i = 0; i < SPINS; i++) {
        job = job_of(__atomic_load_n(&pool.state, __ATOMIC_ACQUIRE));
        if (job != seen) {
            return job;
        }
        cpu_relax();
    }
    pthread_mutex_lock(&pool.lock);
    while ((job = job_of(__atomic_load_n(&pool.state, __ATOMIC_ACQUIRE))) == seen) {
        pthread_cond_wait(&pool.wake, &pool.lock);
    }
    pthread_mutex_unlock(&pool.lock);
    return job;
}

/* Claim and run tasks of job `job` until none is left unclaimed. */
static void run_tasks(uint32_t job, int tasks) {
    uint64_t state = __atomic_load_n(&pool.state, __ATOMIC_ACQUIRE);
    while (job_of(state) == job && (uint32_t)state < (uint32_t)tasks) {
        if (!__atomic_compare_exchange_n(&pool.state, &state, state + 1, 1, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE)) {
            continue;         /* `state` now holds the current value */
        }
        pool.fn(pool.ctx, (int32_t)(uint32_t)state, (int32_t)tasks);
        if (__atomic_add_fetch(&pool.done, 1, __ATOMIC_ACQ_REL) == tasks) {
            pthread_mutex_lock(&pool.lock);
            pthread_cond_signal(&pool.finished);
            pthread_mutex_unlock(&pool.lock);
        }
        state = __atomic_load_n(&pool.state, __ATOMIC_ACQUIRE);
    }
}

static void* worker(void* arg) {
    uint32_t seen = 0;        /* start_locked publishes job 0 before any worker runs */
    (void)arg;
    for (;;) {
        seen = wait_for_job(seen);
        if (__atomic_load_n(&pool.stop, __ATOMIC_ACQUIRE)) {
            return NULL;
        }
        run_tasks(seen, pool.threads * TASKS_PER_THREAD);
    }
}

/* Publish job `job` with no task claimed, under the lock, so that a worker
 * about to sleep sees it. */
static void publish(uint32_t job) {
    pthread_mutex_lock(&pool.lock);
    __atomic_store_n(&pool.state, (uint64_t)job << 32, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
}

static uint32_t next_job(void) {
    return job_of(__atomic_load_n(&pool.state, __ATOMIC_ACQUIRE)) + 1;
}

static void join_workers(int count) {
    int i;
    __atomic_store_n(&pool.stop, 1, __ATOMIC_RELEASE);
    publish(next_job());
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
    __atomic_store_n(&pool.state, 0, __ATOMIC_RELEASE);
    for (i = 0; i + 1 < threads; i++) {
        if (pthread_create(&pool.workers[i], NULL, worker, NULL) != 0) {
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
    job = next_job();
    pool.fn = fn;
    pool.ctx = ctx;
    __atomic_store_n(&pool.done, 0, __ATOMIC_RELAXED);
    publish(job);
    run_tasks(job, tasks);
    for (i = 0; i < SPINS && __atomic_load_n(&pool.done, __ATOMIC_ACQUIRE) != tasks; i++) {
        cpu_relax();
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
