/* Confined path resolution: openat2(RESOLVE_IN_ROOT) and the fallback walk
 * must agree, and neither may leave the root. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rootfs.h"

static char base[PATH_MAX];
static int rootfd = -1;

static void mk(const char *rel, bool dir)
{
    char p[PATH_MAX * 2];
    snprintf(p, sizeof(p), "%s/%s", base, rel);
    if (dir)
        cr_assert_eq(mkdir(p, 0755), 0, "mkdir %s", p);
    else {
        int fd = open(p, O_WRONLY | O_CREAT, 0644);
        cr_assert(fd >= 0);
        close(fd);
    }
}

static void ln(const char *target, const char *rel)
{
    char p[PATH_MAX * 2];
    snprintf(p, sizeof(p), "%s/%s", base, rel);
    cr_assert_eq(symlink(target, p), 0);
}

static void setup(void)
{
    snprintf(base, sizeof(base), "/tmp/skiff-rootfs-test.XXXXXX");
    cr_assert_not_null(mkdtemp(base));
    /* base/outside is outside the root base/root */
    mk("outside", true);
    mk("outside/secret", false);
    mk("root", true);
    mk("root/etc", true);
    mk("root/etc/hosts", false);
    ln("/etc", "root/abs");                /* absolute: must mean root/etc */
    ln("../../../outside", "root/dotdot"); /* must clamp at the root */
    char host[PATH_MAX * 2];
    snprintf(host, sizeof(host), "%s/outside", base);
    ln(host, "root/hostpath"); /* a host path: stays inside */
    ln("loop2", "root/loop1");
    ln("loop1", "root/loop2");
    char r[PATH_MAX * 2];
    snprintf(r, sizeof(r), "%s/root", base);
    rootfd = open(r, O_PATH | O_DIRECTORY);
    cr_assert(rootfd >= 0);
}

static void teardown(void)
{
    close(rootfd);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
    cr_assert_eq(system(cmd), 0);
}

static void check_both(void (*fn)(void))
{
    skiff_root_force_fallback(false);
    fn();
    skiff_root_force_fallback(true);
    fn();
    skiff_root_force_fallback(false);
}

static void same_file(int fd, const char *rel)
{
    char p[PATH_MAX * 2];
    snprintf(p, sizeof(p), "%s/%s", base, rel);
    struct stat a, b;
    cr_assert_eq(fstat(fd, &a), 0);
    cr_assert_eq(stat(p, &b), 0, "stat %s", p);
    cr_assert(a.st_ino == b.st_ino && a.st_dev == b.st_dev, "resolved to the wrong file (want %s)", rel);
}

static void resolve_cases(void)
{
    skiff_err err = {0};
    int fd = skiff_root_open(rootfd, "/abs/hosts", O_PATH, &err);
    cr_assert(fd >= 0, "%s", err.msg);
    same_file(fd, "root/etc/hosts");
    close(fd);
    fd = skiff_root_open(rootfd, "/dotdot", O_PATH | O_DIRECTORY, &err);
    cr_assert(fd < 0, "'..' symlink escaped the root");
    cr_assert_eq(err.code, ENOENT, "%s", err.msg);
    fd = skiff_root_open(rootfd, "/../../etc/hosts", O_PATH, &err);
    cr_assert(fd >= 0, "%s", err.msg);
    same_file(fd, "root/etc/hosts");
    close(fd);
    fd = skiff_root_open(rootfd, "/hostpath/secret", O_PATH, &err);
    cr_assert(fd < 0, "absolute host path escaped the root");
    fd = skiff_root_open(rootfd, "/loop1", O_PATH, &err);
    cr_assert(fd < 0);
    cr_assert_eq(err.code, ELOOP, "%s", err.msg);
}

Test(rootfs, resolution_stays_inside, .init = setup, .fini = teardown)
{
    check_both(resolve_cases);
}

static void mkdirs_cases(void)
{
    skiff_err err = {0};
    /* creating through an escaping symlink creates inside the root */
    int fd = skiff_root_mkdirs(rootfd, "/hostpath/newdir", 0755, &err);
    cr_assert(fd >= 0, "%s", err.msg);
    close(fd);
    char p[PATH_MAX * 3];
    snprintf(p, sizeof(p), "%s/outside/newdir", base);
    cr_assert_neq(access(p, F_OK), 0, "mkdir escaped to %s", p);
    snprintf(p, sizeof(p), "%s/root%s/outside/newdir", base, base);
    cr_assert_eq(access(p, F_OK), 0, "expected %s", p);
    fd = skiff_root_mkfile(rootfd, "/dotdot/f", &err);
    cr_assert(fd >= 0, "%s", err.msg);
    close(fd);
    snprintf(p, sizeof(p), "%s/outside/f", base);
    cr_assert_neq(access(p, F_OK), 0, "file creation escaped");
    snprintf(p, sizeof(p), "%s/root/outside/f", base);
    cr_assert_eq(access(p, F_OK), 0, "expected %s", p);
    /* existing non-directory is an error */
    fd = skiff_root_mkdirs(rootfd, "/etc/hosts", 0755, &err);
    cr_assert(fd < 0);
}

Test(rootfs, mkdirs_openat2, .init = setup, .fini = teardown)
{
    skiff_root_force_fallback(false);
    mkdirs_cases();
}

Test(rootfs, mkdirs_fallback, .init = setup, .fini = teardown)
{
    skiff_root_force_fallback(true);
    mkdirs_cases();
    skiff_root_force_fallback(false);
}

Test(rootfs, path_join_clamps_or_refuses)
{
    char out[256];
    skiff_err err = {0};
    const struct {
        const char *base, *path;
        bool clamp;
        const char *want;
    } ok[] = {
        {"/", "../", true, "/"}, /* pyxis: --container-workdir=../ from / */
        {"/opt/work", "..", true, "/opt"},
        {"/opt/work", "sub/./x/", true, "/opt/work/sub/x"},
        {"/opt", "../../../..", true, "/"},
        {"/", "/abs/../b", false, "/b"},
        {"/", "rel", false, "/rel"},
        {"/", "", true, "/"},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        cr_assert_eq(skiff_root_path(ok[i].base, ok[i].path, ok[i].clamp, out, sizeof(out), &err), 0, "%s", err.msg);
        cr_assert_str_eq(out, ok[i].want, "%s + %s", ok[i].base, ok[i].path);
    }
    /* a mount destination that would leave the root: EXDEV, as enroot */
    cr_assert_eq(skiff_root_path("/", "../home", false, out, sizeof(out), &err), -1);
    cr_assert_eq(err.code, EXDEV);
    cr_assert(strstr(err.msg, "Invalid cross-device link"), "%s", err.msg);
    cr_assert_eq(skiff_root_path("/", "/a/../../b", false, out, sizeof(out), &err), -1);
    cr_assert_eq(skiff_root_path("/", "a/b/c", false, out, 4, &err), -1);
}
