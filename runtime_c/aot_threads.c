/* aot thread pool (see aot_threads.h). A job (one split kernel, or one
 * phase of it) has one task per thread: the caller runs task 0, worker k
 * task k. Between two cores of this kind of machine every cache line that
 * moves costs a few hundred nanoseconds, so a job moves as few as it can:
 *
 * - the caller writes the job (its number, fn, ctx) on one line of its own;
 *   a worker spinning on it sees the job in one transfer;
 * - worker k claims task k on its own `claim` line (a compare-and-swap of
 *   the previous job's number to this one's; nobody else touches that line
 *   in the common case) and reports it finished on its own `done` line,
 *   which the caller reads: one transfer back;
 * - a worker the OS does not run must not stall the run: when the caller
 *   has finished its own task and a worker has not started its task within
 *   a grace period, the caller claims that task itself (the same compare-
 *   and-swap: exactly one of the two runs it);
 * - mutex and condition variables only when somebody sleeps: a worker
 *   spins about a millisecond before it sleeps, and the caller waits that
 *   long for a worker that started a task before sleeping itself. The
 *   sleeper announces itself (a counter or flag), then checks again what it
 *   waits for, the waker publishes, then checks for sleepers: sequentially
 *   consistent operations (and fences) on both sides, so one of the two
 *   always sees the other and no wake-up is lost.
 *
 * Memory order: the caller writes fn and ctx, then publishes the job number
 * with release; a worker's acquire load of it sees them. A task's writes
 * (its share of the kernel's outputs) come before its release store of
 * `done`; the caller's acquire load of `done` comes before the next kernel
 * reads them. A task the caller claimed is its own: nothing to wait for.
 * GCC/Clang __atomic builtins: the package compiles as C99. */
#if defined(__linux__)
#define _GNU_SOURCE /* sched_getcpu, pthread_{get,set}affinity_np */
#else
#define _POSIX_C_SOURCE 200809L
#endif

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include "aot_runtime.h"
#include "aot_threads.h"

/* How long a worker spins for the next job before it sleeps, and the
 * caller for a started task before it sleeps (ns): longer than the gaps
 * between a run's kernels and between back-to-back runs, short enough that
 * an idle process sleeps. */
#define SPIN_NS 1000000
/* How long, once its own task is done, the caller leaves a task nobody has
 * started to its worker (ns): a running worker starts within a microsecond
 * of the job; one that is not running by then would cost the kernel more
 * than the caller running that task itself. */
#define GRACE_NS 3000
/* Spinning this long (ns), a waiting thread gives up its CPU between
 * checks (sched_yield): the thread it waits for may be queued on its own
 * CPU on a loaded machine. */
#define YIELD_NS 50000
/* A worker that finds itself on the caller's CPU moves off it at most this
 * often (ns); see move_off. */
#define MOVE_NS 50000000
/* Whether splitting pays is judged over windows of at least WINDOW jobs
 * and WINDOW_NS: long enough that a worker descheduled once for a few
 * milliseconds (another process's time slice) does not condemn it, while a
 * worker that shares its CPU all along does. A window that did not pay
 * sends the kernels to the caller alone for SERIAL_NS, twice that after
 * another such window, up to SERIAL_MAX_NS. */
#define WINDOW 64
#define WINDOW_NS 10000000
#define SERIAL_NS 10000000
#define SERIAL_MAX_NS 160000000

#define LINE 64

struct worker {
    uint32_t claim __attribute__((aligned(LINE))); /* the last job whose task k is taken */
    uint32_t done __attribute__((aligned(LINE)));  /* the last job whose task k the worker finished */
    int caller_sleeps;                             /* the caller waits on `finished` for it */
    pthread_t thread __attribute__((aligned(LINE)));
};

static struct {
    /* the job: written by the caller only, read by every worker */
    uint32_t job __attribute__((aligned(LINE)));
    int cpu;                        /* the caller's CPU when it published (-1: unknown) */
    aot_task_fn fn;
    void* ctx;
    int threads;                    /* 0: not started; else the caller's thread + workers */
    int stop;                       /* the next job tells workers to exit */
    int busy __attribute__((aligned(LINE)));  /* a caller holds the pool for a run of jobs */
    int sleepers __attribute__((aligned(LINE)));  /* workers asleep (or about to be) on `wake` */
    pthread_mutex_t lock;           /* guards sleeping and waking */
    pthread_cond_t wake;            /* workers: a new job (or stop) was published */
    pthread_cond_t finished;        /* the caller: a worker finished its task */
    struct worker workers[AOT_MAX_THREADS];  /* [k] for worker k (1 .. threads - 1) */
} pool = {0, -1, NULL, NULL, 0, 0, 0, 0, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
          PTHREAD_COND_INITIALIZER, {{0, 0, 0, 0}}};

/* The caller's account of whether splitting pays, kept by whoever holds
 * the pool (busy). On a loaded machine a worker may share its CPU with
 * another process: the caller then waits for a task the OS stopped halfway
 * (a time slice, milliseconds) or runs it itself late, and a split kernel
 * takes longer than on one thread. Over each window of jobs the caller
 * weighs the time it spent on its own tasks against the time it spent
 * waiting for or running the workers' tasks; when the waste is the larger,
 * split kernels run whole on the caller (aot_pool_run's fallback) for a
 * while, the idle workers go to sleep, and the next try starts with one
 * window unjudged (workers waking). */
static struct {
    uint64_t own, waste;         /* ticks over the window */
    int jobs;
    int64_t since;               /* ns: the window's start (0: its first WINDOW jobs are all) */
    int settling;                /* this window follows a pause: not judged */
    int64_t paused_until;        /* ns: kernels run whole until then (0: not paused) */
    int64_t pause;               /* ns: the next pause's length */
} health = {0, 0, 0, 0, 1, 0, SERIAL_NS};

/* start and stop, one at a time (a lazy start may race a first run) */
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* A cheap tick counter for the health account (only ratios of it count). */
static uint64_t ticks(void) {
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_ia32_rdtsc();
#else
    return (uint64_t)now_ns();
#endif
}

static int current_cpu(void) {
#if defined(__linux__)
    return sched_getcpu();
#else
    return -1;
#endif
}

/* One step of a spin-wait that began at `start` (ns, 0: not read yet):
 * a pause instruction; past YIELD_NS the CPU given up to another runnable
 * thread. Returns the time spent waiting, checked every 16th step. */
static int64_t spin(int i, int64_t* start) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || (defined(__arm__) && defined(__ARM_ARCH) && __ARM_ARCH >= 7)
    __asm__ __volatile__("yield");
#endif
    if (i % 16 != 15) {
        return 0;
    }
    if (*start == 0) {
        *start = now_ns();
        return 0;
    }
    {
        const int64_t waited = now_ns() - *start;
        if (waited > YIELD_NS) {
            sched_yield();
        }
        return waited;
    }
}

/* A worker on the caller's CPU gets that CPU only when the caller waits,
 * and the OS may leave the pair there a long time (a new thread starts on
 * its creator's CPU, a woken one is pulled to its waker's): the split
 * kernels then run slower than on one thread. The worker leaves that CPU by
 * excluding it from its affinity for a moment and restoring the mask: where
 * it goes (and later goes) stays the OS's choice; nothing is pinned. */
static void move_off(int cpu, int64_t* last) {
#if defined(__linux__)
    cpu_set_t allowed, others;
    const int64_t t = now_ns();
    if (cpu < 0 || cpu >= CPU_SETSIZE || t - *last < MOVE_NS) {
        return;
    }
    *last = t;
    if (pthread_getaffinity_np(pthread_self(), sizeof allowed, &allowed) != 0 ||
        !CPU_ISSET(cpu, &allowed) || CPU_COUNT(&allowed) < 2) {
        return;
    }
    others = allowed;
    CPU_CLR(cpu, &others);
    if (pthread_setaffinity_np(pthread_self(), sizeof others, &others) == 0) {
        pthread_setaffinity_np(pthread_self(), sizeof allowed, &allowed);
    }
#else
    (void)cpu;
    (void)last;
#endif
}

/* Until a job other than `seen` is published: its number. */
static uint32_t wait_for_job(uint32_t seen) {
    uint32_t job;
    int64_t start = 0;
    int i;
    for (i = 0;; i++) {
        job = __atomic_load_n(&pool.job, __ATOMIC_ACQUIRE);
        if (job != seen) {
            return job;
        }
        if (spin(i, &start) > SPIN_NS) {
            break;
        }
    }
    __atomic_add_fetch(&pool.sleepers, 1, __ATOMIC_SEQ_CST);
    if ((job = __atomic_load_n(&pool.job, __ATOMIC_SEQ_CST)) == seen) {
        pthread_mutex_lock(&pool.lock);
        while ((job = __atomic_load_n(&pool.job, __ATOMIC_ACQUIRE)) == seen) {
            pthread_cond_wait(&pool.wake, &pool.lock);
        }
        pthread_mutex_unlock(&pool.lock);
    }
    __atomic_sub_fetch(&pool.sleepers, 1, __ATOMIC_RELAXED);
    return job;
}

/* Take task k of job `job` (its worker's or, stealing, the caller's):
 * 1 if this thread is the one to run it. */
static int claim(struct worker* w, uint32_t job) {
    uint32_t before = job - 1;
    return __atomic_compare_exchange_n(&w->claim, &before, job, 0, __ATOMIC_ACQUIRE,
                                       __ATOMIC_RELAXED);
}

static void* worker(void* arg) {
    const int self = (int)(intptr_t)arg;
    struct worker* const w = &pool.workers[self];
    uint32_t seen = 0;        /* start_locked publishes job 0 before any worker runs */
    int64_t moved = -MOVE_NS;
    for (;;) {
        seen = wait_for_job(seen);
        if (__atomic_load_n(&pool.stop, __ATOMIC_ACQUIRE)) {
            return NULL;
        }
        if (current_cpu() == __atomic_load_n(&pool.cpu, __ATOMIC_RELAXED)) {
            move_off(current_cpu(), &moved);
        }
        if (!claim(w, seen)) {
            continue;          /* the caller ran it: this worker came too late */
        }
        pool.fn(pool.ctx, (int32_t)self, (int32_t)__atomic_load_n(&pool.threads, __ATOMIC_RELAXED));
        __atomic_store_n(&w->done, seen, __ATOMIC_RELEASE);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        if (__atomic_load_n(&w->caller_sleeps, __ATOMIC_RELAXED)) {
            pthread_mutex_lock(&pool.lock);
            pthread_cond_signal(&pool.finished);
            pthread_mutex_unlock(&pool.lock);
        }
    }
}

/* Publish the next job: its number. */
static uint32_t publish(void) {
    const uint32_t job = pool.job + 1;    /* only the job's publisher writes it */
    __atomic_store_n(&pool.cpu, current_cpu(), __ATOMIC_RELAXED);
    __atomic_store_n(&pool.job, job, __ATOMIC_RELEASE);
    return job;
}

/* Wake the workers that went to sleep before job `job` was published. */
static void wake_sleepers(void) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&pool.sleepers, __ATOMIC_RELAXED) > 0) {
        pthread_mutex_lock(&pool.lock);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
    }
}

/* Whether the kernels run whole now: the pool is paused after a window
 * whose waste outweighed the caller's own work. */
static int paused(void) {
    if (health.paused_until == 0) {
        return 0;
    }
    if (now_ns() < health.paused_until) {
        return 1;
    }
    health.paused_until = 0;
    health.settling = 1;
    health.own = health.waste = 0;
    health.jobs = 0;
    health.since = 0;
    return 0;
}

/* One job's account: `own` ticks on the caller's task, `waste` waiting for
 * or running the workers'. */
static void account(uint64_t own, uint64_t waste) {
    int64_t t;
    health.own += own;
    health.waste += waste;
    if (++health.jobs % WINDOW != 0) {
        return;
    }
    t = now_ns();
    if (t - health.since < WINDOW_NS) {
        return;
    }
    if (health.settling) {
        health.settling = 0;
    } else if (health.waste > health.own) {
        health.paused_until = now_ns() + health.pause;
        health.pause = health.pause * 2 > SERIAL_MAX_NS ? SERIAL_MAX_NS : health.pause * 2;
    } else {
        health.pause = SERIAL_NS;
    }
    health.own = health.waste = 0;
    health.jobs = 0;
    health.since = t;
}

/* Until worker w's task of job `job` is done: by the worker, or by the
 * caller when the worker has not started it within the grace period. */
static void finish(struct worker* w, int k, uint32_t job, int tasks) {
    int64_t start = 0;
    int stolen = 0;
    int i;
    for (i = 0; __atomic_load_n(&w->done, __ATOMIC_ACQUIRE) != job; i++) {
        const int64_t waited = spin(i, &start);
        if (!stolen && waited > GRACE_NS) {
            stolen = 1;       /* one try: from here the task is taken, by someone */
            if (claim(w, job)) {
                pool.fn(pool.ctx, (int32_t)k, (int32_t)tasks);
                return;
            }
        }
        if (waited > SPIN_NS) {
            break;
        }
    }
    if (__atomic_load_n(&w->done, __ATOMIC_ACQUIRE) == job) {
        return;
    }
    __atomic_store_n(&w->caller_sleeps, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&w->done, __ATOMIC_SEQ_CST) != job) {
        pthread_mutex_lock(&pool.lock);
        while (__atomic_load_n(&w->done, __ATOMIC_ACQUIRE) != job) {
            pthread_cond_wait(&pool.finished, &pool.lock);
        }
        pthread_mutex_unlock(&pool.lock);
    }
    __atomic_store_n(&w->caller_sleeps, 0, __ATOMIC_RELAXED);
}

static void join_workers(int count) {
    int i;
    __atomic_store_n(&pool.stop, 1, __ATOMIC_RELEASE);
    publish();
    wake_sleepers();
    for (i = 1; i <= count; i++) {
        pthread_join(pool.workers[i].thread, NULL);
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
    health.own = health.waste = 0;
    health.jobs = 0;
    health.since = 0;
    health.settling = 1;        /* the new workers' first jobs are not judged */
    health.paused_until = 0;
    health.pause = SERIAL_NS;
    pool.threads = threads;     /* workers read it; published by pthread_create */
    __atomic_store_n(&pool.job, 0, __ATOMIC_RELEASE);
    for (i = 1; i < threads; i++) {
        __atomic_store_n(&pool.workers[i].claim, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&pool.workers[i].done, 0, __ATOMIC_RELAXED);
        if (pthread_create(&pool.workers[i].thread, NULL, worker, (void*)(intptr_t)i) != 0) {
            join_workers(i - 1);
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
    uint64_t t0, t1;
    uint32_t job;
    int free = 0;
    int k;
    if (threads <= 1 || !__atomic_compare_exchange_n(&pool.busy, &free, 1, 0, __ATOMIC_ACQUIRE,
                                                     __ATOMIC_RELAXED)) {
        fn(ctx, 0, 1);
        return;
    }
    if (paused()) {
        fn(ctx, 0, 1);
        __atomic_store_n(&pool.busy, 0, __ATOMIC_RELEASE);
        return;
    }
    pool.fn = fn;
    pool.ctx = ctx;
    t0 = ticks();
    job = publish();
    fn(ctx, 0, threads);
    t1 = ticks();
    /* after its own task: the fence there costs nothing by then */
    wake_sleepers();
    for (k = 1; k < threads; k++) {
        finish(&pool.workers[k], k, job, threads);
    }
    account(t1 - t0, ticks() - t1);
    __atomic_store_n(&pool.busy, 0, __ATOMIC_RELEASE);
}
