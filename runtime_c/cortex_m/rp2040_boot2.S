/* aot's second-stage boot (boot2) for the RP2040, written from the RP2040
 * datasheet ("Bootrom: Flash Second Stage", "SSI" and its register list).
 *
 * The boot ROM copies the first 256 bytes of flash to the top of SRAM
 * (0x20041F00), checks their CRC32 (the last 4 bytes) and runs them: until
 * the flash's SSI is configured, flash cannot be read through the XIP
 * window at 0x10000000. This one configures the SSI for plain 03h serial
 * reads: one instruction byte, a 24-bit address, 32 bits of data per
 * access, on one data line at clk_sys / 4. Slow, but every SPI NOR flash
 * chip answers 03h, whatever its quad mode or its dummy cycles; the boot
 * ROM reads boot2 itself the same way. Then it points VTOR at the program's
 * vector table right after this block (0x10000100), loads the stack pointer
 * from it and jumps to its reset handler.
 *
 * aot assembles this file alone (aot/packaging/boot2.py): the code, its
 * literal pool included, must stay within 252 bytes and free of
 * relocations (it runs from SRAM, not where it is linked); aot pads it to
 * 252 bytes and appends the CRC. */
    .syntax unified
    .cpu cortex-m0plus
    .thumb

    .equ XIP_SSI_BASE, 0x18000000
    .equ SSI_CTRLR0, 0x00
    .equ SSI_CTRLR1, 0x04
    .equ SSI_SSIENR, 0x08
    .equ SSI_BAUDR, 0x14
    .equ SSI_SPI_CTRLR0, 0xF4

    /* CTRLR0: SPI_FRF (bits 22:21) 0, standard one-line SPI; DFS_32 (20:16)
     * 31, 32-bit data frames; TMOD (9:8) 3, EEPROM read: send the
     * instruction and address, then receive. */
    .equ CTRLR0_XIP, (0 << 21) | (31 << 16) | (3 << 8)
    /* SPI_CTRLR0: XIP_CMD (31:24) 0x03, the read command sent on every XIP
     * access; INST_L (9:8) 2, an 8-bit instruction; ADDR_L (5:2) 6, a
     * 24-bit address (in 4-bit units); WAIT_CYCLES 0; TRANS_TYPE (1:0) 0,
     * instruction and address on one line too. */
    .equ SPI_CTRLR0_XIP, (0x03 << 24) | (2 << 8) | (6 << 2) | 0
    /* SCKDV: clk_sys divided by 4 (an even number, as BAUDR requires). */
    .equ CLKDIV, 4

    .equ VECTORS, 0x10000100        /* the program's vector table, after boot2 */
    .equ M0PLUS_VTOR, 0xE000ED08

    .section .boot2_code, "ax"
    .global aot_boot2
    .type aot_boot2, %function
aot_boot2:
    ldr r3, =XIP_SSI_BASE
    movs r1, #0
    str r1, [r3, #SSI_SSIENR]       /* the SSI takes a new set-up only disabled */
    movs r1, #CLKDIV
    str r1, [r3, #SSI_BAUDR]
    ldr r1, =CTRLR0_XIP
    str r1, [r3, #SSI_CTRLR0]
    movs r1, #0                     /* NDF 0: one data frame (32 bits) per access */
    str r1, [r3, #SSI_CTRLR1]
    ldr r0, =XIP_SSI_BASE + SSI_SPI_CTRLR0  /* past a 16-bit STR's reach */
    ldr r1, =SPI_CTRLR0_XIP
    str r1, [r0]
    movs r1, #1
    str r1, [r3, #SSI_SSIENR]       /* enabled: the XIP window now reads flash */

    ldr r0, =VECTORS
    ldr r1, =M0PLUS_VTOR
    str r0, [r1]
    ldmia r0, {r0, r1}              /* initial SP, reset handler (Thumb bit set) */
    msr msp, r0
    bx r1
    .ltorg
    .size aot_boot2, . - aot_boot2
