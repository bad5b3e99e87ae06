/* The serial port layer (aot_runtime.h) on Arm's CMSDK APB UART, the UART
 * of the MPS2 boards. AOT_UART_BASE is the board's UART0 (its [firmware]
 * cflags): 0x40004000 on the AN385/AN386/AN500 images, 0x50200000 on the
 * AN505 (the secure alias the harness runs in); QEMU connects its first
 * -serial to that UART. Registers from Arm's CMSDK technical reference:
 * DATA, STATE (bit 0 TX full, bit 1 RX full), CTRL (bit 0 TX enable, bit 1
 * RX enable), BAUDDIV (the APB clock over the baud rate, at least 16). */
#include "aot_runtime.h"

#ifndef AOT_UART_BASE
#define AOT_UART_BASE 0x40004000u /* UART0 of the AN385/AN386/AN500 */
#endif
#ifndef AOT_CPU_HZ
#define AOT_CPU_HZ 25000000u
#endif
#define AOT_UART_BAUD 115200u

#define UART_REG(offset) (*(volatile uint32_t*)((AOT_UART_BASE) + (offset)))
#define UART_DATA UART_REG(0x00u)
#define UART_STATE UART_REG(0x04u)
#define UART_CTRL UART_REG(0x08u)
#define UART_BAUDDIV UART_REG(0x10u)
#define STATE_TX_FULL 1u
#define STATE_RX_FULL 2u

void aot_platform_uart_init(void) {
    UART_BAUDDIV = AOT_CPU_HZ / AOT_UART_BAUD;
    UART_CTRL = 3u; /* TX and RX enabled, no interrupts */
}

void aot_platform_uart_write(const void* data, size_t n) {
    const uint8_t* p = (const uint8_t*)data;
    while (n-- > 0) {
        while (UART_STATE & STATE_TX_FULL) {
        }
        UART_DATA = *p++;
    }
}

size_t aot_platform_uart_read(void* data, size_t n) {
    uint8_t* p = (uint8_t*)data;
    size_t got = 0;
    while (got < n && (UART_STATE & STATE_RX_FULL)) {
        p[got++] = (uint8_t)UART_DATA;
    }
    return got;
}
