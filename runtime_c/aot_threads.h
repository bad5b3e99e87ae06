/* aot thread pool: runs the split kernels of a package built with
 * `aot package --threads N` (N > 1) on N threads. Packages built with one
 * thread (the default) neither ship nor call it.
 *
 * One pool per process, shared by every package in it: the calling thread
 * is task 0, N - 1 worker threads are tasks 1 .. N - 1. Workers are created
 * once (aot_pool_start) and live until aot_pool_stop; a job (one kernel)
 * allocates nothing. Between jobs a worker spins briefly, then sleeps on a
 * condition variable, so an idle process costs no CPU.
 *
 * A split kernel gives each task a balanced share of its independent
 * output loops and never reorders a reduction: its outputs are the same,
 * bit for bit, whatever the number of tasks. */
#ifndef AOT_THREADS_H_
#define AOT_THREADS_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A status of <name>_init beyond aot_runtime.h's: threads could not be
 * created, or the count is outside 1 .. AOT_MAX_THREADS. */
#define AOT_ERR_THREADS 16
#define AOT_MAX_THREADS 64

/* One task of a split kernel: task in 0 .. ntasks - 1. */
typedef void (*aot_task_fn)(void* ctx, int32_t task, int32_t ntasks);

/* Start the pool with `threads` threads in all (the caller's included):
 * AOT_OK, or AOT_ERR_THREADS. A pool already running with another count
 * is stopped first (no run may be in progress then). */
int aot_pool_start(int threads);

/* Start the pool with `threads` threads unless it was started already
 * (by aot_pool_start, or by another package): the lazy start of a run. */
int aot_pool_ensure(int threads);

/* Stop and join the workers. No run may be in progress. */
void aot_pool_stop(void);

/* The threads of the pool (the caller's included); 0 when not started. */
int aot_pool_threads(void);

/* Run fn(ctx, task, n) for every task of the pool at once and return when
 * all are done. If another thread is using the pool at this moment (two
 * runs of packages on their own arenas), the pool has one thread, or it is
 * paused (splitting lately cost more than it saved: a loaded machine), the
 * caller runs the whole kernel alone as fn(ctx, 0, 1): same outputs. */
void aot_pool_run(aot_task_fn fn, void* ctx);

#ifdef __cplusplus
}
#endif

#endif /* AOT_THREADS_H_ */
