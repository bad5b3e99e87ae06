/* Start-up code for a bare-metal RV32 program run under QEMU's semihosting
 * (qemu-system-riscv32 -M virt or sifive_e; or a debugger's): the reset
 * entry, the trap handler and the cycle counter behind
 * aot_platform_timer_us().
 *
 * _start sets the stack, global and thread pointers (symbols from the
 * board's linker script), points mtvec at the trap handler, copies .data from
 * flash to RAM (and the thread-local data), zeroes .bss, fetches the command line from the host
 * (SYS_GET_CMDLINE) and calls exit(main(argc, argv)); picolibc's
 * semihosting library (libsemihost) does the files and the exit, whose code
 * becomes QEMU's. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "aot_runtime.h"

extern uint32_t __data_load__, __data_start__, __data_end__;
extern uint32_t __tdata_load__, __tdata_start__, __tdata_end__;
extern uint32_t __bss_start__, __bss_end__;

extern int main(int argc, char** argv);

/* The cycle counter counts the processor clock; under QEMU's -icount it
 * counts instructions (deterministic, and no real timing). */
#ifndef AOT_CPU_HZ
#define AOT_CPU_HZ 160000000u /* ESP32-C3: 160 MHz */
#endif

#define SEMIHOSTING_SYS_OPEN 0x01
#define SEMIHOSTING_SYS_WRITE 0x05
#define SEMIHOSTING_SYS_GET_CMDLINE 0x15
#define MAX_ARGS 64

static char cmdline[1024];
static char* argv_storage[MAX_ARGS + 1];

/* The RISC-V semihosting call: ebreak between two marker instructions, the
 * three uncompressed and in one page: a function of its own, aligned to 16
 * bytes (padding inside a function would be zeros, not nops). op in a0,
 * its argument block in a1, the result in a0. */
__attribute__((naked, noinline, aligned(16))) static int semihosting_call(int op, void* arg) {
    (void)op;
    (void)arg;
    __asm__ volatile(".option push\n\t.option norvc\n\t"
                     "slli zero, zero, 0x1f\n\tebreak\n\tsrai zero, zero, 7\n\t"
                     ".option pop\n\tret");
}

/* stdout and stderr as the host's own (SYS_OPEN of ":tt" for writing, for
 * appending), line-buffered. picolibc's semihosting library writes both a
 * character at a time to QEMU's console, which is its stderr: these
 * definitions replace its (they are all its iob.o defines). */
struct console {
    FILE file;
    int mode;       /* SYS_OPEN's: 4 "w" (stdout), 8 "a" (stderr) */
    int handle;     /* 0 until opened */
    int used;
    char buffer[128];
};

static int console_flush(FILE* f) {
    struct console* c = (struct console*)f;
    if (c->handle == 0) {
        struct { const char* name; int mode; int length; } open = {":tt", c->mode, 3};
        c->handle = semihosting_call(SEMIHOSTING_SYS_OPEN, &open);
    }
    if (c->used > 0 && c->handle > 0) {
        struct { int handle; const char* buffer; int length; } write = {c->handle, c->buffer,
                                                                        c->used};
        semihosting_call(SEMIHOSTING_SYS_WRITE, &write);
    }
    c->used = 0;
    return 0;
}

static int console_put(char ch, FILE* f) {
    struct console* c = (struct console*)f;
    c->buffer[c->used++] = ch;
    if (ch == '\n' || c->used == (int)sizeof c->buffer) {
        console_flush(f);
    }
    return (unsigned char)ch;
}

static struct console console_out = {
    FDEV_SETUP_STREAM(console_put, NULL, console_flush, _FDEV_SETUP_WRITE), 4, 0, 0, {0}};
static struct console console_err = {
    FDEV_SETUP_STREAM(console_put, NULL, console_flush, _FDEV_SETUP_WRITE), 8, 0, 0, {0}};
static FILE console_in = FDEV_SETUP_STREAM(NULL, NULL, NULL, _FDEV_SETUP_READ);

FILE* const stdin = &console_in;
FILE* const stdout = &console_out.file;
FILE* const stderr = &console_err.file;

/* argv from the host's command line, split at spaces (the runner passes
 * no argument containing one). argc 0 when the host gives none. */
static int host_arguments(char** argv) {
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

/* A CSR instruction: the target's -march (rv32imc, which picks picolibc's
 * multilib) leaves out Zicsr, which the assembler of GCC 12 then refuses. */
#define ZICSR(insn) ".option push\n\t.option arch, +zicsr\n\t" insn "\n\t.option pop"

/* The cycle count: the standard counter; a chip without it (the
 * ESP32-C3, whose counter is a custom CSR) defines its own. */
__attribute__((weak)) uint64_t aot_board_cycles(void) {
    uint32_t hi, lo, again;
    do {
        __asm__ volatile(ZICSR("rdcycleh %0") : "=r"(hi));
        __asm__ volatile(ZICSR("rdcycle %0") : "=r"(lo));
        __asm__ volatile(ZICSR("rdcycleh %0") : "=r"(again));
    } while (hi != again);
    return ((uint64_t)hi << 32) | lo;
}

/* The board's cycle counter: the cycle CSR (the read-only shadow of
 * mcycle) unless the board's start-up code has its own. */
uint64_t aot_platform_cycles(void) {
    return aot_board_cycles();
}

__attribute__((weak)) const char* aot_platform_cycle_counter(void) {
    return "mcycle";
}

uint64_t aot_platform_timer_us(void) {
    return aot_board_cycles() / (AOT_CPU_HZ / 1000000u);
}

void aot_platform_abort(void) {
    fflush(stdout);
    exit(134);
}

/* Any trap (an illegal instruction, a misaligned or faulting access) ends
 * the program with a distinct exit code rather than hang; no interrupt is
 * enabled. A core whose mtvec is vectored only (the ESP32-C3's) takes its
 * base 256-byte aligned: its board sets AOT_TRAP_ALIGN. */
#ifndef AOT_TRAP_ALIGN
#define AOT_TRAP_ALIGN 4
#endif
__attribute__((interrupt("machine"), aligned(AOT_TRAP_ALIGN))) void trap_handler(void) {
    exit(135);
}

static void load(uint32_t* src, uint32_t* dst, const uint32_t* end) {
    while (dst < end) {
        *dst++ = *src++;
    }
}

/* What a chip needs before anything else runs (the ESP32-C3's watchdogs
 * off: esp32c3_start.c); nothing on QEMU's machines. It may use no
 * .data or .bss: they are not set up yet. */
__attribute__((weak)) void aot_board_init(void) {}

void aot_reset(void) {
    uint32_t* dst;
    aot_board_init();
    __asm__ volatile(ZICSR("csrw mtvec, %0") ::"r"(&trap_handler));
    load(&__data_load__, &__data_start__, &__data_end__);
    load(&__tdata_load__, &__tdata_start__, &__tdata_end__);
    for (dst = &__bss_start__; dst < &__bss_end__;) {
        *dst++ = 0u;
    }
    int status = main(host_arguments(argv_storage), argv_storage);
    fflush(stdout);
    fflush(stderr);
    exit(status);
}

/* The entry: the stack, global and thread pointers first (C and
 * picolibc's errno need them), then C. */
__attribute__((naked, section(".text.entry"))) void _start(void) {
    __asm__ volatile(".option push\n\t.option norelax\n\t"
                     "la gp, __global_pointer$\n\t"
                     ".option pop\n\t"
                     "la sp, __stack_top__\n\t"
                     "la tp, __tls_base\n\t"
                     "j aot_reset");
}
