/* Start-up code for a Cortex-M4F (or M7/M33/M55) program run under QEMU's
 * semihosting (or a debugger's): the vector table, the reset handler, the
 * SysTick timer behind aot_platform_timer_us() and the cycle counter behind
 * aot_platform_cycles().
 *
 * The reset handler enables the FPU (CPACR) before any floating-point
 * instruction, copies .data from flash to RAM, zeroes .bss, opens newlib's
 * semihosting handles (librdimon), fetches the command line from the host
 * (SYS_GET_CMDLINE) and calls exit(main(argc, argv)): under QEMU's
 * -semihosting the exit code becomes QEMU's. Symbols come from the linker
 * script (the board's, e.g. mps2.ld).
 *
 * A real board runs with no debugger attached, where a semihosting call
 * (bkpt 0xab) is a HardFault: built with -DAOT_SEMIHOSTING=0 (and newlib's
 * nosys.specs), the reset handler opens no handles and passes no command
 * line (argc 0), and exit() stops the core in a loop. */
#include <stdint.h>
#include <stdlib.h>

#include "aot_runtime.h"

extern uint32_t __data_load__, __data_start__, __data_end__;
extern uint32_t __bss_start__, __bss_end__;
extern uint32_t __stack_top__;

#ifndef AOT_SEMIHOSTING
#define AOT_SEMIHOSTING 1
#endif

extern void initialise_monitor_handles(void);
extern int main(int argc, char** argv);

/* System registers (ARMv7-M / ARMv8-M architecture reference manual). */
#define SCB_CPACR (*(volatile uint32_t*)0xE000ED88u)
#define SYST_CSR (*(volatile uint32_t*)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t*)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t*)0xE000E018u)
#define DEMCR (*(volatile uint32_t*)0xE000EDFCu)
#define DWT_CTRL (*(volatile uint32_t*)0xE0001000u)
#define DWT_CYCCNT (*(volatile uint32_t*)0xE0001004u)
#define DEMCR_TRCENA (1u << 24)
#define DWT_CTRL_NOCYCCNT (1u << 25)

/* SysTick counts the processor clock (CSR.CLKSOURCE = 1). */
#ifndef AOT_CPU_HZ
#define AOT_CPU_HZ 25000000u  /* MPS2 boards: 25 MHz */
#endif
#define SYSTICK_PERIOD (1u << 24)  /* the 24-bit counter's full range */

#define SEMIHOSTING_SYS_GET_CMDLINE 0x15
#define MAX_ARGS 64

static char cmdline[1024];
static char* argv_storage[MAX_ARGS + 1];
static volatile uint32_t systick_wraps;
static int dwt_counts;        /* DWT CYCCNT runs: aot_platform_cycles reads it */
static uint32_t dwt_last, dwt_high;

static int semihosting_call(int op, void* arg) {
    register int r0 __asm__("r0") = op;
    register void* r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

/* argv from the host's command line, split at spaces (the runner passes
 * no argument containing one). argc 0 when the host gives none. */
static int host_arguments(char** argv) {
    if (!AOT_SEMIHOSTING) {
        argv[0] = NULL;
        return 0;
    }
    struct { char* buffer; int length; } block = {cmdline, sizeof cmdline - 1};
    int argc = 0;
    char* p = cmdline;
    if (semihosting_call(SEMIHOSTING_SYS_GET_CMDLINE, &block) != 0) {
        argv[0] = NULL;
        return 0;
    }
    cmdline[block.length] = '\0';
    while (*p != '\0' && argc < MAX_ARGS) {
        while (*p == ' ') {
            *p++ = '\0';
        }
        if (*p == '\0') {
            break;
        }
        argv[argc++] = p;
        while (*p != '\0' && *p != ' ') {
            p++;
        }
    }
    argv[argc] = NULL;
    return argc;
}

static void systick_start(void) {
    SYST_RVR = SYSTICK_PERIOD - 1u;
    SYST_CVR = 0u;
    SYST_CSR = 7u;  /* enable, interrupt on wrap, processor clock */
}

void SysTick_Handler(void) {
    systick_wraps++;
}

/* DWT's cycle counter, where the core has one and it runs: QEMU's model
 * of the DWT (7.2) keeps CYCCNT at 0, and a Cortex-M0+/M23 has none. */
static void cycle_counter_start(void) {
    uint32_t before;
    int i;
    DEMCR |= DEMCR_TRCENA;
    if (DWT_CTRL & DWT_CTRL_NOCYCCNT) {
        return;
    }
    DWT_CYCCNT = 0u;
    DWT_CTRL |= 1u; /* CYCCNTENA */
    before = DWT_CYCCNT;
    for (i = 0; i < 16; i++) {
        __asm__ volatile("nop");
    }
    dwt_counts = DWT_CYCCNT != before;
}

static uint64_t systick_ticks(void) {
    uint32_t wraps, value;
    do {
        wraps = systick_wraps;
        value = SYST_CVR;
    } while (wraps != systick_wraps);
    return (uint64_t)wraps * SYSTICK_PERIOD + (SYSTICK_PERIOD - 1u - value);
}

/* Processor clock cycles since reset: DWT CYCCNT (its 32 bits extended in
 * software: called at least once per wrap, 2^32 cycles, by the harness's
 * runs), else SysTick, which counts the same clock in 24-bit periods. */
uint64_t aot_platform_cycles(void) {
    uint32_t now;
    if (!dwt_counts) {
        return systick_ticks();
    }
    now = DWT_CYCCNT;
    if (now < dwt_last) {
        dwt_high++;
    }
    dwt_last = now;
    return ((uint64_t)dwt_high << 32) | now;
}

const char* aot_platform_cycle_counter(void) {
    return dwt_counts ? "dwt-cyccnt" : "systick";
}

/* Microseconds since reset: wraps * 2^24 + elapsed ticks of the current
 * period, read twice when a wrap happens in between. */
uint64_t aot_platform_timer_us(void) {
    return systick_ticks() / (AOT_CPU_HZ / 1000000u);
}

void aot_platform_abort(void) {
    exit(134);
}

void Reset_Handler(void) {
    uint32_t* src = &__data_load__;
    uint32_t* dst;
    SCB_CPACR |= 0xFu << 20;  /* CP10 and CP11 (the FPU): full access */
    __asm__ volatile("dsb\n\tisb" ::: "memory");
    for (dst = &__data_start__; dst < &__data_end__;) {
        *dst++ = *src++;
    }
    for (dst = &__bss_start__; dst < &__bss_end__;) {
        *dst++ = 0u;
    }
    if (AOT_SEMIHOSTING) {
        initialise_monitor_handles();
    }
    systick_start();
    cycle_counter_start();
    exit(main(host_arguments(argv_storage), argv_storage));
}

/* newlib's __libc_init_array / __libc_fini_array call these (crti.o is not
 * linked: -nostartfiles); C needs nothing there. */
void _init(void) {
}

void _fini(void) {
}

/* Faults end the program with a distinct exit code rather than hang. */
void Fault_Handler(void) {
    exit(135);
}

static void Default_Handler(void) {
    for (;;) {
    }
}

/* Initial stack pointer, then the handlers (exceptions 1..15); external
 * interrupts are not used. */
__attribute__((section(".isr_vector"), used))
static void (*const vector_table[16])(void) = {
    (void (*)(void))&__stack_top__,
    Reset_Handler,
    Fault_Handler,  /* NMI */
    Fault_Handler,  /* HardFault */
    Fault_Handler,  /* MemManage */
    Fault_Handler,  /* BusFault */
    Fault_Handler,  /* UsageFault */
    0, 0, 0, 0,
    Default_Handler,  /* SVCall */
    Default_Handler,  /* DebugMonitor */
    0,
    Default_Handler,  /* PendSV */
    SysTick_Handler,
};
