/* See idfilter.h. */
#include "idfilter.h"

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The id arguments of each call: which argument, and whether it is a uid
 * (else a gid). */
struct idcall {
    const char *name;
    unsigned args[3];
    unsigned nargs;
    unsigned uids; /* bit i set: args[i] is a uid */
};

static const struct idcall idcalls[] = {
    {"setuid", {0}, 1, 1},      {"setreuid", {0, 1}, 2, 3}, {"setresuid", {0, 1, 2}, 3, 7},
    {"setgid", {0}, 1, 0},      {"setregid", {0, 1}, 2, 0}, {"setresgid", {0, 1, 2}, 3, 0},
    {"chown", {1, 2}, 2, 1},    {"lchown", {1, 2}, 2, 1},   {"fchown", {1, 2}, 2, 1},
    {"fchownat", {2, 3}, 2, 1},
};

static int add_rules(scmp_filter_ctx ctx, uid_t uid, gid_t gid, skiff_err *err)
{
    /* (every comparison with both data: the second is unused by NE, but
     * clang's -Wmissing-field-initializers wants each field given) */
    const uint32_t fake = SCMP_ACT_ERRNO(0); /* "success", nothing done */
    for (size_t i = 0; i < sizeof(idcalls) / sizeof(idcalls[0]); i++) {
        int nr = seccomp_syscall_resolve_name(idcalls[i].name);
        if (nr == __NR_SCMP_ERROR)
            continue; /* not on this architecture (chown on aarch64) */
        for (unsigned a = 0; a < idcalls[i].nargs; a++) {
            uint32_t mapped = idcalls[i].uids & (1u << a) ? (uint32_t)uid : (uint32_t)gid;
            int r = seccomp_rule_add(ctx, fake, nr, 1, SCMP_CMP32(idcalls[i].args[a], SCMP_CMP_NE, mapped, 0));
            if (r < 0)
                return skiff_error(err, -r, "seccomp rule for %s", idcalls[i].name);
        }
    }
    int r = seccomp_rule_add(ctx, fake, SCMP_SYS(setgroups), 0);
    if (r == 0 && uid == 0)
        r = seccomp_rule_add(ctx, fake, SCMP_SYS(setfsuid), 1, SCMP_A0_32(SCMP_CMP_NE, 0, 0));
    if (r == 0 && uid == 0)
        r = seccomp_rule_add(ctx, fake, SCMP_SYS(setfsgid), 1, SCMP_A0_32(SCMP_CMP_NE, 0, 0));
    if (r < 0)
        return skiff_error(err, -r, "seccomp rule");
    return 0;
}

int skiff_idfilter_build(uid_t uid, gid_t gid, struct skiff_idfilter_prog *p, skiff_err *err)
{
    memset(p, 0, sizeof(*p));
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return skiff_error(err, ENOMEM, "seccomp filter");
    int rv = -1, fd = -1;
    /* a process of another ABI is not filtered, rather than killed */
    int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ALLOW);
    if (r < 0) {
        skiff_error(err, -r, "seccomp filter");
        goto out;
    }
    if (add_rules(ctx, uid, gid, err) < 0)
        goto out;
    /* libseccomp 2.5 exports to an fd only */
    fd = memfd_create("skiff-seccomp", MFD_CLOEXEC);
    if (fd < 0) {
        skiff_error(err, errno, "seccomp filter");
        goto out;
    }
    if ((r = seccomp_export_bpf(ctx, fd)) < 0) {
        skiff_error(err, -r, "compile the seccomp filter");
        goto out;
    }
    off_t size = lseek(fd, 0, SEEK_END);
    if (size <= 0 || size % (off_t)sizeof(struct sock_filter) ||
        size / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS) {
        skiff_error(err, EINVAL, "compile the seccomp filter: %lld bytes", (long long)size);
        goto out;
    }
    p->insns = malloc((size_t)size);
    if (!p->insns || pread(fd, p->insns, (size_t)size, 0) != (ssize_t)size) {
        skiff_error(err, p->insns ? errno : ENOMEM, "compile the seccomp filter");
        skiff_idfilter_free(p);
        goto out;
    }
    p->len = (unsigned short)(size / (off_t)sizeof(struct sock_filter));
    rv = 0;
out:
    if (fd >= 0)
        close(fd);
    seccomp_release(ctx);
    return rv;
}

void skiff_idfilter_free(struct skiff_idfilter_prog *p)
{
    free(p->insns);
    p->insns = NULL;
    p->len = 0;
}

int skiff_idfilter_load(const struct skiff_idfilter_prog *p)
{
    struct sock_fprog prog = {.len = p->len, .filter = p->insns};
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
        return -errno;
    return 0;
}

int skiff_idfilter_install(skiff_err *err)
{
    struct skiff_idfilter_prog p;
    if (skiff_idfilter_build(getuid(), getgid(), &p, err) < 0)
        return -1;
    int r = skiff_idfilter_load(&p);
    skiff_idfilter_free(&p);
    if (r < 0)
        return skiff_error(err, -r, "install the seccomp filter");
    return 0;
}
