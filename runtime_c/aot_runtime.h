/* aot runtime: status codes and platform hooks shared by every package.
 *
 * A package's entry point returns one of the status codes below. The
 * platform hooks have weak default implementations in aot_platform.c;
 * firmware overrides them by defining the same functions. */
#ifndef AOT_RUNTIME_H_
#define AOT_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes returned by <name>_run and <name>_run_with_arena. */
#define AOT_OK 0
#define AOT_ERR_NULL_ARGUMENT 1   /* an inputs/outputs struct, a tensor or the arena is NULL */
#define AOT_ERR_MISALIGNED 2      /* the caller's arena is not <NAME>_ARENA_ALIGN-aligned */
/* An index the model computed from its inputs is out of range (a Gather's
 * indices, a ScatterND's index tuples, ...): the run stopped at that kernel
 * and the outputs are incomplete. <name>_failed_check() says which check
 * failed; metadata.json "index_checks" names its node and the inputs the
 * indices come from. Negative indices count from the end, as in ONNX. */
#define AOT_ERR_INDEX 3

/* A monotonic clock in microseconds (the bench harness and AOT_PROFILE use
 * it). The weak default uses clock_gettime on hosted systems and returns 0
 * on bare metal: firmware provides its own (e.g. from SysTick or DWT). */
uint64_t aot_platform_timer_us(void);

/* A monotonic clock in nanoseconds, for AOT_PROFILE (kernels take a few
 * microseconds). The weak default uses clock_gettime on hosted systems and
 * aot_platform_timer_us() * 1000 on bare metal (0 unless firmware provides
 * that clock); firmware with a cycle counter overrides this one. */
uint64_t aot_platform_timer_ns(void);

/* Called on an unrecoverable error. The weak default spins forever on bare
 * metal and calls abort() on hosted systems. */
void aot_platform_abort(void);

/* A free-running counter of the device (a cycle counter where it has
 * one) and its name, for timings in the device's own unit: the harness
 * reports each run's count over a serial port. The weak defaults count
 * nothing (0, "none"); the bare-metal start-up code of runtime_c provides
 * them (DWT CYCCNT or SysTick on Cortex-M, mcycle on RISC-V). */
uint64_t aot_platform_cycles(void);
const char* aot_platform_cycle_counter(void);

/* The serial port layer the harness serves over on a microcontroller
 * (bench --serve over a UART, built with -DAOT_SERVE_UART): one driver per
 * UART in runtime_c/uart/. init sets the port up (115200 baud, 8N1);
 * write sends all n bytes, waiting while the transmitter is busy; read
 * takes at most n bytes already received and returns how many (0: none
 * yet), never waiting, so the caller keeps its own time-out. */
void aot_platform_uart_init(void);
void aot_platform_uart_write(const void* data, size_t n);
size_t aot_platform_uart_read(void* data, size_t n);

#ifdef AOT_PROFILE
/* Called after each kernel with its step index, name and duration in
 * nanoseconds (aot_platform_timer_ns) when the package is compiled with
 * -DAOT_PROFILE; the weak default does nothing. */
void aot_platform_profile(int step, const char* kernel, uint64_t nanos);
#endif

#ifdef __cplusplus
}
#endif

#endif /* AOT_RUNTIME_H_ */
