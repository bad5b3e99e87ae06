/* The serial port layer (aot_runtime.h) on an STM32F4's USART2, which the
 * NUCLEO-F446RE wires to the ST-LINK's virtual COM port (PA2 TX, PA3 RX,
 * alternate function 7). Addresses and bits from ST's RM0390 (STM32F446
 * reference manual): RCC at 0x40023800 (AHB1ENR GPIOAEN, APB1ENR
 * USART2EN), GPIOA at 0x40020000 (MODER, AFRL), USART2 at 0x40004400 (SR:
 * TXE bit 7, RXNE bit 5, ORE bit 3; DR; BRR; CR1: UE, TE, RE). The APB1
 * clock is the CPU's after reset (HSI, prescalers 1): AOT_CPU_HZ. Not run
 * on hardware by aot's tests. */
#include "aot_runtime.h"

#ifndef AOT_CPU_HZ
#define AOT_CPU_HZ 16000000u
#endif
#define AOT_UART_BAUD 115200u

#define REG(address) (*(volatile uint32_t*)(address))
#define RCC_AHB1ENR REG(0x40023830u)
#define RCC_APB1ENR REG(0x40023840u)
#define GPIOA_MODER REG(0x40020000u)
#define GPIOA_AFRL REG(0x40020020u)
#define USART2_SR REG(0x40004400u)
#define USART2_DR REG(0x40004404u)
#define USART2_BRR REG(0x40004408u)
#define USART2_CR1 REG(0x4000440Cu)
#define SR_TXE (1u << 7)
#define SR_RXNE (1u << 5)
#define SR_ORE (1u << 3)

void aot_platform_uart_init(void) {
    RCC_AHB1ENR |= 1u << 0;  /* GPIOA */
    RCC_APB1ENR |= 1u << 17; /* USART2 */
    (void)RCC_APB1ENR;       /* the clock is on before the first access */
    GPIOA_MODER = (GPIOA_MODER & ~(0xFu << 4)) | (0xAu << 4); /* PA2, PA3: alternate */
    GPIOA_AFRL = (GPIOA_AFRL & ~(0xFFu << 8)) | (0x77u << 8);  /* AF7: USART2 */
    /* 16x oversampling: BRR holds the clock over the baud rate, rounded. */
    USART2_BRR = (AOT_CPU_HZ + AOT_UART_BAUD / 2u) / AOT_UART_BAUD;
    USART2_CR1 = (1u << 13) | (1u << 3) | (1u << 2); /* UE, TE, RE */
}

void aot_platform_uart_write(const void* data, size_t n) {
    const uint8_t* p = (const uint8_t*)data;
    while (n-- > 0) {
        while (!(USART2_SR & SR_TXE)) {
        }
        USART2_DR = *p++;
    }
}

size_t aot_platform_uart_read(void* data, size_t n) {
    uint8_t* p = (uint8_t*)data;
    size_t got = 0;
    while (got < n) {
        uint32_t sr = USART2_SR;
        if (!(sr & (SR_RXNE | SR_ORE))) {
            break;
        }
        /* reading DR clears RXNE, and an overrun after SR was read: the
         * lost byte shows as a broken frame, which the host reports */
        p[got] = (uint8_t)USART2_DR;
        if (sr & SR_RXNE) {
            got++;
        }
    }
    return got;
}
