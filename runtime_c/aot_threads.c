/* aot thread pool (see aot_threads.h): a generation counter the caller
 * bumps per job, a count of workers still busy with it, and a mutex with
 * two condition variables for whoever stops spinning and sleeps.
 *
 * Memory order: the caller writes the job (fn, ctx), then bumps `job` with
 * release; a worker reads `job` with acquire, then the job. A worker's
 * writes (its share of the kernel's outputs) come before its release
 * decrement of `pending`; the caller's acquire read of `pending` == 0 comes
 * before the next kernel reads them. GCC/Clang __atomic builtins: the
 * package compiles as C99. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>

#include "aot_runtime.h"
#include "aot_threads.h"

/* Pause-loop iterations a waiting thread spins before it sleeps: some tens
 * of microseconds, longer than the gap a small one-thread kernel leaves
 * between two split ones. */
#define SPINS 20000

static struct {
    pthread_mutex_t lock;      /* guards sleeping and waking, start and stop */
    pthread_cond_t wake;       /* workers: `job` moved (a job, or stop) */
    pthread_cond_t done;       /* the caller: `pending` reached 0 */
    pthread_t workers[AOT_MAX_THREADS - 1];
    int threads;               /* 0: not started; else the caller's thread + workers */
    unsigned job;              /* bumped once per job */
    int pending;               /* workers not done with the current job */
    int busy;                  /* a caller holds the pool for a job */
    int stop;                  /* the next `job` tells workers to exit */
    aot_task_fn fn;
    void* ctx;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER};

/* start and stop, one at a time (a lazy start may race a first run) */
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || (defined(__arm__) && defined(__ARM_ARCH) && __ARM_ARCH >= 7)
    __asm__ __volatile__("yield");
#endif
}

static void wait_for_job(unsigned seen) {
    int i;
    for (i = 0; i < SPINS; i++) {
        if (__atomic_load_n(&pool.job, __ATOMIC_ACQUIRE) != seen) {
            return;
        }
        cpu_relax();
    }
    pthread_mutex_lock(&pool.lock);
    while (__atomic_load_n(&pool.job, __ATOMIC_ACQUIRE) == seen) {
        pthread_cond_wait(&pool.wake, &pool.lock);
    }
    pthread_mutex_unlock(&pool.lock);
}

static void* worker(void* arg) {
    const int32_t task = (int32_t)(intptr_t)arg;
    unsigned seen = 0;        /* aot_pool_start sets job to 0 before any worker runs */
    for (;;) {
        wait_for_job(seen);
        seen = __atomic_load_n(&pool.job, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&pool.stop, __ATOMIC_ACQUIRE)) {
            return NULL;
        }
        pool.fn(pool.ctx, task, (int32_t)pool.threads);
        if (__atomic_sub_fetch(&pool.pending, 1, __ATOMIC_ACQ_REL) == 0) {
            pthread_mutex_lock(&pool.lock);
            pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.lock);
        }
    }
}

/* Bump `job` under the lock, so that a worker about to sleep sees it. */
static void post(void) {
    pthread_mutex_lock(&pool.lock);
    __atomic_add_fetch(&pool.job, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
}

static void join_workers(int count) {
    int i;
    __atomic_store_n(&pool.stop, 1, __ATOMIC_RELEASE);
    post();
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
    __atomic_store_n(&pool.job, 0, __ATOMIC_RELAXED);
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
    int free = 0;
    int i;
    if (threads <= 1 || !__atomic_compare_exchange_n(&pool.busy, &free, 1, 0, __ATOMIC_ACQUIRE,
                                                     __ATOMIC_RELAXED)) {
        fn(ctx, 0, 1);
        return;
    }
    pool.fn = fn;
    pool.ctx = ctx;
    __atomic_store_n(&pool.pending, threads - 1, __ATOMIC_RELAXED);
    post();
    fn(ctx, 0, threads);
    for (i = 0; i < SPINS && __atomic_load_n(&pool.pending, __ATOMIC_ACQUIRE) != 0; i++) {
        cpu_relax();
    }
    if (__atomic_load_n(&pool.pending, __ATOMIC_ACQUIRE) != 0) {
        pthread_mutex_lock(&pool.lock);
        while (__atomic_load_n(&pool.pending, __ATOMIC_ACQUIRE) != 0) {
            pthread_cond_wait(&pool.done, &pool.lock);
        }
        pthread_mutex_unlock(&pool.lock);
    }
    __atomic_store_n(&pool.busy, 0, __ATOMIC_RELEASE);
}
