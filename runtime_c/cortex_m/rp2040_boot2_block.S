/* The RP2040's 256-byte boot2 block (rp2040_boot2.S assembled, padded to
 * 252 bytes, its CRC32 appended: bench/boot2.bin, written by aot before the
 * harness links), placed at the start of flash by rp2040.ld. */
    .section .boot2, "ax"
    .incbin "bench/boot2.bin"
