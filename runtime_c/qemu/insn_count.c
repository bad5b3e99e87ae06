/* insn_count: a QEMU TCG plugin (plugin API version 1, QEMU 7.2) that counts
 * the guest instructions a program executes under qemu-user, and logs the
 * running count at every system call ("sys <number> <count>"), then the
 * total ("total <count>") at exit.
 *
 * aot's harness reads the clock before and after every run, and around every
 * kernel in a --profile build. Under qemu-user 7.2 (no vDSO) each read is a
 * clock_gettime system call, so the difference between two marks is exactly
 * the instructions executed between them: deterministic, unlike the
 * emulator's time (aot/deploy/insn_count.py reads the log).
 *
 * Not part of any package: aot builds it for this machine (make setup, or on
 * first use) into its cache. Debian's QEMU ships neither plugins nor
 * qemu-plugin.h, so the few declarations it needs are written out here; the
 * symbols come from the qemu-user binary that loads it. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define EXPORT __attribute__((visibility("default")))

typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };

typedef void (*tb_trans_cb)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*syscall_cb)(qemu_plugin_id_t id, unsigned int vcpu, int64_t num, uint64_t a1,
                           uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6,
                           uint64_t a7, uint64_t a8);
typedef void (*udata_cb)(qemu_plugin_id_t id, void *userdata);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, tb_trans_cb cb);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op,
                                              void *ptr, uint64_t imm);
void qemu_plugin_register_vcpu_syscall_cb(qemu_plugin_id_t id, syscall_cb cb);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, udata_cb cb, void *userdata);
void qemu_plugin_outs(const char *string);

EXPORT int qemu_plugin_version = 1;

/* One counter: the harness is single-threaded. A block's instructions are
 * added as it starts; a system call ends its block, so at a system call the
 * count holds every instruction up to and including the call. */
static uint64_t executed;

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &executed,
                                             qemu_plugin_tb_n_insns(tb));
}

static void on_syscall(qemu_plugin_id_t id, unsigned int vcpu, int64_t num, uint64_t a1,
                       uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6,
                       uint64_t a7, uint64_t a8) {
    char line[64];
    (void)id, (void)vcpu, (void)a1, (void)a2, (void)a3, (void)a4, (void)a5, (void)a6, (void)a7,
        (void)a8;
    snprintf(line, sizeof line, "sys %lld %llu\n", (long long)num, (unsigned long long)executed);
    qemu_plugin_outs(line);
}

static void on_exit(qemu_plugin_id_t id, void *userdata) {
    char line[64];
    (void)id, (void)userdata;
    snprintf(line, sizeof line, "total %llu\n", (unsigned long long)executed);
    qemu_plugin_outs(line);
}

EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                               char **argv) {
    (void)info, (void)argc, (void)argv;
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_vcpu_syscall_cb(id, on_syscall);
    qemu_plugin_register_atexit_cb(id, on_exit, NULL);
    return 0;
}
