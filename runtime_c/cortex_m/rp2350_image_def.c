/* The RP2350's minimum Arm IMAGE_DEF block (RP2350 datasheet, "Metadata
 * block details" and "Minimum Arm IMAGE_DEF"): without a valid block in
 * the first 4 KiB of flash the boot ROM treats the flash as blank and does
 * not start the program. rp2350.ld places it right after the vector table.
 * One block, two items, linked to itself (a loop of one block). */
#include <stdint.h>

__attribute__((section(".picobin_block"), used, aligned(4)))
static const uint32_t image_def[5] = {
    0xffffded3u, /* PICOBIN_BLOCK_MARKER_START */
    /* IMAGE_TYPE item (type 0x42, one word): flags 0x1021 = an executable
     * (image type 1), Secure mode (2 << 4), Arm, chip RP2350 (1 << 12). */
    0x10210142u,
    /* LAST item (type 0xff, two-byte size): the items take one word. */
    0x000001ffu,
    0x00000000u, /* link to the next block: itself */
    0xab123579u, /* PICOBIN_BLOCK_MARKER_END */
};
