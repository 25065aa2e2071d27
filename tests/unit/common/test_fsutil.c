/* The filesystem toolkit (common/fsutil.c, common/atomicfile.c): mkdir -p,
 * bounded reads, tree removal, whole-or-nothing writes. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomicfile.h"
#include "fdio.h"
#include "fsutil.h"

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/skiff-fsutil-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void)
{
    skiff_err e;
    cr_assert_eq(skiff_remove_tree(dir, &e), 0, "%s", e.msg);
    cr_assert_neq(access(dir, F_OK), 0, "%s is still there", dir);
}

TestSuite(fsutil, .init = make_dir, .fini = remove_dir);

static int entries(const char *d)
{
    DIR *dp = opendir(d);
    cr_assert_not_null(dp);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dp)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(dp);
    return n;
}

Test(fsutil, mkdir_p_makes_parents_and_refuses_a_file)
{
    char p[128];
    skiff_err e;
    snprintf(p, sizeof p, "%s/a/b/c", dir);
    cr_assert_eq(skiff_mkdir_p(p, 0700, &e), 0, "%s", e.msg);
    cr_assert_eq(skiff_mkdir_p(p, 0700, &e), 0, "an existing directory is fine: %s", e.msg);
    snprintf(p, sizeof p, "%s/a/f", dir);
    cr_assert_eq(skiff_atomic_write(p, "x", 1, 0600, 0, &e), 0, "%s", e.msg);
    cr_assert_eq(skiff_mkdir_p(p, 0700, &e), -1);
    cr_assert_eq(e.code, ENOTDIR, "%s", e.msg);
}

Test(fsutil, fmt_path_refuses_to_cut)
{
    char small[8];
    skiff_err e;
    cr_assert_eq(skiff_fmt_path(small, sizeof small, &e, "%s/%s", "abc", "de"), 0);
    cr_assert_str_eq(small, "abc/de");
    cr_assert_eq(skiff_fmt_path(small, sizeof small, &e, "%s/%s", "abcd", "efg"), -1);
    cr_assert_eq(e.code, ENAMETOOLONG);
}

Test(fsutil, read_file_is_bounded_and_refuses_a_fifo)
{
    char p[128];
    skiff_err e;
    size_t len;
    snprintf(p, sizeof p, "%s/f", dir);
    cr_assert_eq(skiff_atomic_write(p, "hello", 5, 0600, 0, &e), 0, "%s", e.msg);
    char *s = skiff_read_file(p, O_NOFOLLOW, 5, &len, &e);
    cr_assert_not_null(s, "%s", e.msg);
    cr_assert_str_eq(s, "hello");
    cr_assert_eq(len, 5);
    free(s);
    cr_assert_null(skiff_read_file(p, 0, 4, &len, &e), "a file over the bound is refused");
    snprintf(p, sizeof p, "%s/fifo", dir);
    cr_assert_eq(mkfifo(p, 0600), 0);
    cr_assert_null(skiff_read_file(p, 0, 1 << 20, &len, &e), "a FIFO is refused, not waited on");
    snprintf(p, sizeof p, "%s/missing", dir);
    cr_assert_null(skiff_read_file(p, 0, 1 << 20, &len, &e));
    cr_assert_eq(e.code, ENOENT);
}

Test(fsutil, remove_tree_opens_up_closed_directories_and_keeps_symlink_targets)
{
    char p[160], outside[160];
    skiff_err e;
    snprintf(outside, sizeof outside, "%s/outside", dir);
    cr_assert_eq(mkdir(outside, 0700), 0);
    snprintf(p, sizeof p, "%s/outside/keep", dir);
    cr_assert_eq(skiff_atomic_write(p, "k", 1, 0600, 0, &e), 0, "%s", e.msg);
    snprintf(p, sizeof p, "%s/t/work/work", dir);
    cr_assert_eq(skiff_mkdir_p(p, 0700, &e), 0, "%s", e.msg);
    snprintf(p, sizeof p, "%s/t/link", dir);
    cr_assert_eq(symlink(outside, p), 0);
    snprintf(p, sizeof p, "%s/t/work/work", dir);
    cr_assert_eq(chmod(p, 0), 0); /* as overlayfs leaves it */
    snprintf(p, sizeof p, "%s/t/work", dir);
    cr_assert_eq(chmod(p, 0500), 0);
    snprintf(p, sizeof p, "%s/t", dir);
    cr_assert_eq(skiff_remove_tree(p, &e), 0, "%s", e.msg);
    cr_assert_neq(access(p, F_OK), 0);
    snprintf(p, sizeof p, "%s/outside/keep", dir);
    cr_assert_eq(access(p, F_OK), 0, "the symlink's target was followed");
    cr_assert_eq(skiff_remove_tree(p, &e), 0, "a single file");
    cr_assert_eq(skiff_remove_tree("/nonexistent-skiff/x", &e), 0, "a missing path is not an error");
}

Test(fsutil, atomic_write_replaces_or_refuses_and_leaves_no_temporary_file)
{
    char p[128];
    skiff_err e;
    snprintf(p, sizeof p, "%s/out", dir);
    cr_assert_eq(skiff_atomic_write(p, "one", 3, 0644, 0, &e), 0, "%s", e.msg);
    cr_assert_eq(skiff_atomic_write(p, "two", 3, 0644, SKIFF_ATOMIC_NOSYNC, &e), 0, "%s", e.msg);
    size_t len;
    char *s = skiff_read_file(p, 0, 16, &len, &e);
    cr_assert_str_eq(s, "two");
    free(s);
    cr_assert_eq(skiff_atomic_write(p, "three", 5, 0644, SKIFF_ATOMIC_NOREPLACE, &e), -1);
    cr_assert_eq(e.code, EEXIST, "%s", e.msg);
    s = skiff_read_file(p, 0, 16, &len, &e);
    cr_assert_str_eq(s, "two", "a refused write left the file as it was");
    free(s);
    cr_assert_eq(entries(dir), 1, "a temporary file is left behind");
}

Test(fsutil, atomic_abort_and_a_fixed_temporary_name)
{
    char p[128], tmp[128];
    skiff_err e;
    struct skiff_atomic a;
    snprintf(p, sizeof p, "%s/out", dir);
    cr_assert_eq(skiff_atomic_begin(&a, p, NULL, 0600, 0, &e), 0, "%s", e.msg);
    cr_assert_eq(write(a.fd, "x", 1), 1);
    cr_assert_eq(entries(dir), 1);
    skiff_atomic_abort(&a);
    cr_assert_eq(entries(dir), 0, "abort left something");
    snprintf(tmp, sizeof tmp, "%s/.out.tmp", dir);
    cr_assert_eq(skiff_atomic_begin(&a, p, tmp, 0600, 0, &e), 0, "%s", e.msg);
    cr_assert_eq(access(tmp, F_OK), 0);
    close(a.fd); /* written by its name, as mksquashfs does */
    a.fd = -1;
    cr_assert_eq(skiff_atomic_commit(&a, &e), 0, "%s", e.msg);
    cr_assert_eq(access(p, F_OK), 0);
    cr_assert_neq(access(tmp, F_OK), 0);
}

/* skiff_fd_empty: a file with bytes is emptied; an empty one is not
 * truncated at all (ext4's auto_da_alloc, fdio.h), which its mtime shows:
 * ftruncate sets it even when the size stays 0. */
Test(fsutil, fd_empty_truncates_only_a_file_with_bytes)
{
    char p[128];
    snprintf(p, sizeof p, "%s/f", dir);
    int fd = open(p, O_RDWR | O_CREAT, 0600);
    cr_assert(fd >= 0);
    struct timespec old[2] = {{.tv_sec = 1000000000}, {.tv_sec = 1000000000}};
    struct stat st;
    cr_assert_eq(futimens(fd, old), 0);
    cr_assert_eq(skiff_fd_empty(fd), 0);
    cr_assert_eq(fstat(fd, &st), 0);
    cr_assert_eq(st.st_mtime, 1000000000, "an empty file was truncated");
    cr_assert_eq(write(fd, "bytes", 5), 5);
    cr_assert_eq(skiff_fd_empty(fd), 0);
    cr_assert_eq(fstat(fd, &st), 0);
    cr_assert_eq(st.st_size, 0);
    close(fd);
}
