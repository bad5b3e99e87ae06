/* The serial port layer (aot_runtime.h) on the nRF52840's UARTE0 instance
 * at 0x40002000, which the nRF52840 DK wires to the J-Link's virtual COM
 * port (P0.06 TXD, P0.08 RXD). It is driven in its UART mode (ENABLE = 4:
 * byte registers, a 6-byte receive FIFO, no EasyDMA), which reads a
 * byte as it arrives; register offsets from Nordic's nRF52840 product
 * specification (UART chapter): TASKS_STARTRX 0x000, TASKS_STARTTX 0x008,
 * EVENTS_RXDRDY 0x108, EVENTS_TXDRDY 0x11C, ENABLE 0x500, PSEL.TXD 0x50C,
 * PSEL.RXD 0x514, RXD 0x518, TXD 0x51C, BAUDRATE 0x524 (0x01D7E000:
 * 115200), CONFIG 0x56C (no parity, no flow control). Not run on hardware
 * by aot's tests. */
#include "aot_runtime.h"

#define REG(offset) (*(volatile uint32_t*)(0x40002000u + (offset)))
#define TASKS_STARTRX REG(0x000u)
#define TASKS_STARTTX REG(0x008u)
#define EVENTS_RXDRDY REG(0x108u)
#define EVENTS_TXDRDY REG(0x11Cu)
#define ENABLE REG(0x500u)
#define PSEL_TXD REG(0x50Cu)
#define PSEL_RXD REG(0x514u)
#define RXD REG(0x518u)
#define TXD REG(0x51Cu)
#define BAUDRATE REG(0x524u)
#define CONFIG REG(0x56Cu)
#define P0_OUTSET (*(volatile uint32_t*)0x50000508u)
#define P0_DIRSET (*(volatile uint32_t*)0x50000518u)
#define TXD_PIN 6u
#define RXD_PIN 8u

void aot_platform_uart_init(void) {
    P0_OUTSET = 1u << TXD_PIN; /* TXD idles high, as an output */
    P0_DIRSET = 1u << TXD_PIN;
    PSEL_TXD = TXD_PIN;        /* port 0, connected (bit 31 clear) */
    PSEL_RXD = RXD_PIN;
    BAUDRATE = 0x01D7E000u;
    CONFIG = 0u;
    ENABLE = 4u;
    EVENTS_RXDRDY = 0u;
    EVENTS_TXDRDY = 0u;
    TASKS_STARTTX = 1u;
    TASKS_STARTRX = 1u;
}

void aot_platform_uart_write(const void* data, size_t n) {
    const uint8_t* p = (const uint8_t*)data;
    while (n-- > 0) {
        EVENTS_TXDRDY = 0u;
        TXD = *p++;
        while (EVENTS_TXDRDY == 0u) {
        }
    }
}

size_t aot_platform_uart_read(void* data, size_t n) {
    uint8_t* p = (uint8_t*)data;
    size_t got = 0;
    while (got < n && EVENTS_RXDRDY != 0u) {
        EVENTS_RXDRDY = 0u; /* cleared before RXD is read: the next byte sets it again */
        p[got++] = (uint8_t)RXD;
    }
    return got;
}
