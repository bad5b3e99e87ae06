/* Weak default platform hooks: firmware overrides any of them by defining a
 * function of the same name. */
#if defined(__unix__) || defined(__APPLE__)
#define _POSIX_C_SOURCE 199309L
#include <stdlib.h>
#include <time.h>
#define AOT_HOSTED 1
#endif

#include "aot_runtime.h"

__attribute__((weak)) uint64_t aot_platform_timer_us(void) {
#ifdef AOT_HOSTED
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
#else
    return 0;   /* no portable clock on bare metal: provide your own */
#endif
}

__attribute__((weak)) uint64_t aot_platform_timer_ns(void) {
#ifdef AOT_HOSTED
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#else
    return aot_platform_timer_us() * 1000u;   /* the firmware's clock, if it has one */
#endif
}

__attribute__((weak)) void aot_platform_abort(void) {
#ifdef AOT_HOSTED
    abort();
#else
    for (;;) {
    }
#endif
}

__attribute__((weak)) uint64_t aot_platform_cycles(void) {
    return 0;
}

__attribute__((weak)) const char* aot_platform_cycle_counter(void) {
    return "none";
}

#ifdef AOT_PROFILE
__attribute__((weak)) void aot_platform_profile(int step, const char* kernel, uint64_t nanos) {
    (void)step;
    (void)kernel;
    (void)nanos;
}
#endif
