/* insn_count: a QEMU TCG plugin (plugin API version 1, QEMU 7.2) that counts
 * the guest instructions a program executes, under qemu-user or
 * qemu-system, and logs the running count ("mark <count>") every time the
 * code at one address runs: `-plugin insn_count.so,mark=0x<address>`; then
 * the total ("total <count>") at exit.
 *
 * aot marks its harness's clock function (aot_platform_timer_ns): the
 * harness reads the clock before and after every run, and around every
 * kernel in a --profile build, so the differences between marks are exactly
 * the instructions executed in between: deterministic, unlike the
 * emulator's time (aot/deploy/insn_count.py reads the log).
 *
 * Not part of any package: aot builds it for this machine (make setup, or on
 * first use) into its cache. Debian's QEMU ships neither plugins nor
 * qemu-plugin.h, so the few declarations it needs are written out here; the
 * symbols come from the QEMU binary that loads it. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };

typedef void (*tb_trans_cb)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*vcpu_udata_cb)(unsigned int vcpu, void *userdata);
typedef void (*udata_cb)(qemu_plugin_id_t id, void *userdata);
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS };

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, tb_trans_cb cb);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op,
                                              void *ptr, uint64_t imm);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, vcpu_udata_cb cb,
                                          enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, udata_cb cb, void *userdata);
void qemu_plugin_outs(const char *string);

EXPORT int qemu_plugin_version = 1;

/* One counter: aot's harness runs on one vCPU. A block's instructions are
 * added as it starts, so at a mark the count includes the marked block. */
static uint64_t executed;
static uint64_t mark = UINT64_MAX;

static void on_mark(unsigned int vcpu, void *userdata) {
    char line[48];
    (void)vcpu, (void)userdata;
    snprintf(line, sizeof line, "mark %llu\n", (unsigned long long)executed);
    qemu_plugin_outs(line);
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &executed,
                                             qemu_plugin_tb_n_insns(tb));
    if (qemu_plugin_tb_vaddr(tb) == mark) {
        qemu_plugin_register_vcpu_tb_exec_cb(tb, on_mark, QEMU_PLUGIN_CB_NO_REGS, NULL);
    }
}

static void at_exit(qemu_plugin_id_t id, void *userdata) {
    char line[48];
    (void)id, (void)userdata;
    snprintf(line, sizeof line, "total %llu\n", (unsigned long long)executed);
    qemu_plugin_outs(line);
}

EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                               char **argv) {
    int i;
    (void)info;
    for (i = 0; i < argc; i++) {
        if (strncmp(argv[i], "mark=", 5) == 0) {
            mark = strtoull(argv[i] + 5, NULL, 0);
        }
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
