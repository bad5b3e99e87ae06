/* insn_mix: a QEMU TCG plugin (plugin API version 1, QEMU 7.2, AArch64
 * guests) that counts the instructions executed inside given address ranges
 * by class: SDOT (vector or by element), the signed widening multiplies
 * SMULL / SMLAL (and their 2 forms, vector or by element), loads (every load
 * encoding: LDR, LDP, LD1, ...), stores, and the rest; and how many times the
 * first range's
 * first instruction ran (the calls of the kernel it starts).
 *
 *   -plugin insn_mix.so,range=0x<lo>:0x<hi>[,range=...] -d plugin -D <log>
 *
 * At exit it logs "calls N", then "<class> N" per class. bench/insn_mix.py
 * builds it and passes the kernels' ranges from the harness's symbols. The
 * few plugin declarations are written out: Debian's QEMU ships no
 * qemu-plugin.h. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*tb_trans_cb)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*udata_cb)(qemu_plugin_id_t id, void *userdata);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, tb_trans_cb cb);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
void qemu_plugin_register_vcpu_insn_exec_inline(struct qemu_plugin_insn *insn,
                                                enum qemu_plugin_op op, void *ptr, uint64_t imm);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, udata_cb cb, void *userdata);
void qemu_plugin_outs(const char *string);

EXPORT int qemu_plugin_version = 1;

enum { SDOT, MULL, LOAD, STORE, OTHER, CLASSES };
static const char *const NAMES[CLASSES] = {"sdot", "mull", "load", "store", "other"};
static uint64_t counts[CLASSES];
static uint64_t calls;
#define MAX_RANGES 64
static uint64_t lo[MAX_RANGES], hi[MAX_RANGES];
static int ranges;

static int classify(uint32_t w) {
    /* SDOT by element (0Q001111 10LM Rm 1110H0) and vector (0Q001110 100 Rm 100101) */
    if ((w & 0xBFC0F400u) == 0x0F80E000u || (w & 0xBFE0FC00u) == 0x0E809400u) {
        return SDOT;
    }
    /* SMLAL{2} / SMULL{2}: vector (0Q001110 size1 Rm, opcode 1000 / 1100, then
     * 00) and by element (0Q001111 size LM Rm, opcode 0010 / 1010, bit 10 clear) */
    if ((w & 0xBF20FC00u) == 0x0E208000u || (w & 0xBF20FC00u) == 0x0E20C000u ||
        (w & 0xBF00F400u) == 0x0F002000u || (w & 0xBF00F400u) == 0x0F00A000u) {
        return MULL;
    }
    if ((w & 0x0A000000u) == 0x08000000u) {    /* loads and stores: op0 = x1x0 */
        /* load-literal (op0 bits 29:27 = 011, 25:24 = 00) has no L bit */
        if ((w & 0x3B000000u) == 0x18000000u) {
            return LOAD;
        }
        return (w >> 22) & 1u ? LOAD : STORE;
    }
    return OTHER;
}

static int inside(uint64_t a) {
    for (int i = 0; i < ranges; i++) {
        if (a >= lo[i] && a < hi[i]) {
            return 1;
        }
    }
    return 0;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    for (size_t i = 0; i < qemu_plugin_tb_n_insns(tb); i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint64_t a = qemu_plugin_insn_vaddr(insn);
        uint32_t w;
        if (!inside(a) || qemu_plugin_insn_size(insn) != 4) {
            continue;
        }
        memcpy(&w, qemu_plugin_insn_data(insn), 4);
        qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64,
                                                   &counts[classify(w)], 1);
        if (a == lo[0]) {
            qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64, &calls, 1);
        }
    }
}

static void at_exit(qemu_plugin_id_t id, void *userdata) {
    char line[64];
    (void)id, (void)userdata;
    snprintf(line, sizeof line, "calls %llu\n", (unsigned long long)calls);
    qemu_plugin_outs(line);
    for (int c = 0; c < CLASSES; c++) {
        snprintf(line, sizeof line, "%s %llu\n", NAMES[c], (unsigned long long)counts[c]);
        qemu_plugin_outs(line);
    }
}

EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                               char **argv) {
    (void)info;
    for (int i = 0; i < argc; i++) {
        char *end;
        if (strncmp(argv[i], "range=", 6) == 0 && ranges < MAX_RANGES) {
            lo[ranges] = strtoull(argv[i] + 6, &end, 0);
            if (*end == ':') {
                hi[ranges++] = strtoull(end + 1, NULL, 0);
            }
        }
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
