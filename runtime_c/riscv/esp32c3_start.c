/* What the ESP32-C3 needs before the harness runs: its watchdogs off and
 * its cycle counter on.
 *
 * The watchdogs, first thing after the boot ROM jumps to the program
 * (direct boot, runtime_c/riscv/esp32c3.ld). The ROM starts
 * the RTC watchdog and timer group 0's in "flash boot" mode to catch a
 * boot that hangs, and the super watchdog runs from reset: with nobody to
 * feed them they would reset the chip within a second or so, in the
 * middle of an inference. No ESP-IDF bootloader runs to stop them, so the
 * start-up code does (startup.c calls aot_board_init before anything).
 *
 * Registers and keys from the ESP32-C3 Technical Reference Manual
 * (chapters "Watchdog Timers", "Timer Group", "Low-power Management"):
 * each watchdog's registers are write-protected until its key is written
 * to its WPROTECT register; writing anything else locks them again. */
#include <stdint.h>

/* The C3's core has no standard cycle counter (rdcycle): its performance
 * counter is a set of custom CSRs (TRM, "Performance Counter"): mpcer
 * (0x7E0) selects the event, bit 0 clock cycles; mpcmr (0x7E1) bit 0
 * starts counting; mpccr (0x7E2) is the 32-bit count. */
#define CSR_MPCER "0x7e0"
#define CSR_MPCMR "0x7e1"
#define CSR_MPCCR "0x7e2"
#define ZICSR(insn) ".option push\n\t.option arch, +zicsr\n\t" insn "\n\t.option pop"

#define REG(addr) (*(volatile uint32_t*)(uintptr_t)(addr))

#define RTC_CNTL_BASE 0x60008000u
#define RTC_CNTL_WDTCONFIG0 (RTC_CNTL_BASE + 0x90u)
#define RTC_CNTL_WDTWPROTECT (RTC_CNTL_BASE + 0xA8u)
#define RTC_CNTL_SWD_CONF (RTC_CNTL_BASE + 0xACu)
#define RTC_CNTL_SWD_WPROTECT (RTC_CNTL_BASE + 0xB0u)
#define TIMG0_BASE 0x6001F000u
#define TIMG1_BASE 0x60020000u
#define TIMG_WDTCONFIG0 0x48u   /* offsets in a timer group */
#define TIMG_WDTWPROTECT 0x64u

#define WDT_WKEY 0x50D83AA1u    /* RTC and timer-group watchdogs */
#define SWD_WKEY 0x8F1D312Au    /* the super watchdog */

#define TIMG_WDT_EN (1u << 31)
#define TIMG_WDT_CONF_UPDATE_EN (1u << 22) /* its configuration is latched: apply it */
#define TIMG_WDT_FLASHBOOT_MOD_EN (1u << 14)
#define RTC_CNTL_SWD_AUTO_FEED_EN (1u << 31)

/* A timer group's watchdog: its enable and its flash-boot mode cleared. */
static void timg_wdt_off(uint32_t base) {
    REG(base + TIMG_WDTWPROTECT) = WDT_WKEY;
    REG(base + TIMG_WDTCONFIG0) =
        (REG(base + TIMG_WDTCONFIG0) & ~(TIMG_WDT_EN | TIMG_WDT_FLASHBOOT_MOD_EN)) |
        TIMG_WDT_CONF_UPDATE_EN;
    REG(base + TIMG_WDTWPROTECT) = 0u;
}

void aot_board_init(void) {
    /* Interrupts off (mstatus.MIE), whatever the ROM left enabled: the
     * harness takes none, and its trap handler ends the program. */
    __asm__ volatile(ZICSR("csrci mstatus, 8"));
    /* The RTC watchdog: every field 0, its enable (bit 31), its stages'
     * actions and its flash-boot mode (bit 12) with them. */
    REG(RTC_CNTL_WDTWPROTECT) = WDT_WKEY;
    REG(RTC_CNTL_WDTCONFIG0) = 0u;
    REG(RTC_CNTL_WDTWPROTECT) = 0u;
    timg_wdt_off(TIMG0_BASE);
    timg_wdt_off(TIMG1_BASE);
    /* The super watchdog: fed by the hardware from now on (its auto-feed
     * bit, as ESP-IDF's start-up sets it). */
    REG(RTC_CNTL_SWD_WPROTECT) = SWD_WKEY;
    REG(RTC_CNTL_SWD_CONF) |= RTC_CNTL_SWD_AUTO_FEED_EN;
    REG(RTC_CNTL_SWD_WPROTECT) = 0u;
    /* Count clock cycles from now on. */
    __asm__ volatile(ZICSR("csrw " CSR_MPCER ", %0") ::"r"(1u));
    __asm__ volatile(ZICSR("csrw " CSR_MPCMR ", %0") ::"r"(1u));
}

/* The 32-bit count widened to 64 bits: it wraps every 107 s at 40 MHz,
 * longer than any interval the harness times, so a wrap between two reads
 * is one. The widening state lives in .bss, zeroed before main. */
static uint32_t last_count, wraps;

uint64_t aot_board_cycles(void) {
    uint32_t now;
    __asm__ volatile(ZICSR("csrr %0, " CSR_MPCCR) : "=r"(now));
    if (now < last_count) {
        wraps++;
    }
    last_count = now;
    return ((uint64_t)wraps << 32) | now;
}

/* Its name where the harness reports counts (a serial port's hello). */
const char* aot_platform_cycle_counter(void) {
    return "mpccr";
}
