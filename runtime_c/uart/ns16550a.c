/* The serial port layer (aot_runtime.h) on a 16550-compatible UART: the
 * NS16550A of QEMU's RISC-V `virt` machine at 0x10000000 (AOT_UART_BASE,
 * the board's [firmware] cflags), registers one byte apart: RBR/THR and
 * DLL at 0, IER and DLM at 1, FCR 2, LCR 3, MCR 4, LSR 5 (bit 0 data
 * ready, bit 5 transmit holding register empty). */
#include "aot_runtime.h"

#ifndef AOT_UART_BASE
#define AOT_UART_BASE 0x10000000u /* QEMU virt's */
#endif
#ifndef AOT_UART_CLOCK_HZ
#define AOT_UART_CLOCK_HZ 3686400u /* QEMU virt's (the divisor is ignored there) */
#endif
#define AOT_UART_BAUD 115200u

#define UART_REG(offset) (*(volatile uint8_t*)((AOT_UART_BASE) + (offset)))
#define UART_RBR UART_REG(0u)
#define UART_THR UART_REG(0u)
#define UART_DLL UART_REG(0u)
#define UART_IER UART_REG(1u)
#define UART_DLM UART_REG(1u)
#define UART_FCR UART_REG(2u)
#define UART_LCR UART_REG(3u)
#define UART_MCR UART_REG(4u)
#define UART_LSR UART_REG(5u)
#define LSR_DATA_READY 0x01u
#define LSR_THR_EMPTY 0x20u

void aot_platform_uart_init(void) {
    unsigned divisor = AOT_UART_CLOCK_HZ / (16u * AOT_UART_BAUD);
    UART_IER = 0u;
    UART_LCR = 0x80u; /* divisor latch access */
    UART_DLL = (uint8_t)divisor;
    UART_DLM = (uint8_t)(divisor >> 8);
    UART_LCR = 0x03u; /* 8N1 */
    UART_FCR = 0x07u; /* FIFOs on and cleared */
    UART_MCR = 0x03u; /* DTR, RTS */
}

void aot_platform_uart_write(const void* data, size_t n) {
    const uint8_t* p = (const uint8_t*)data;
    while (n-- > 0) {
        while (!(UART_LSR & LSR_THR_EMPTY)) {
        }
        UART_THR = *p++;
    }
}

size_t aot_platform_uart_read(void* data, size_t n) {
    uint8_t* p = (uint8_t*)data;
    size_t got = 0;
    while (got < n && (UART_LSR & LSR_DATA_READY)) {
        p[got++] = UART_RBR;
    }
    return got;
}
