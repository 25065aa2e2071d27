/* Layer application on real temp dirs with tars written by libarchive; every
 * case runs twice: with openat2 and with openat2 blocked by seccomp (ENOSYS),
 * so the O_NOFOLLOW component walk is exercised too. */
#include <archive.h>
#include <archive_entry.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "digest.h"
#include "fdio.h"
#include "fsutil.h"
#include "config.h"
#include "layer.h"
#include "pack.h"
#include <sqfs/error.h>
#include <sqfs/io.h>

#include "sqfsout.h"
#include "squash.h"

static char dir[256], root[300], tarpath[300];
static int rootfd = -1;

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/skiff-test-layer.XXXXXX");
    cr_assert(mkdtemp(dir));
    snprintf(root, sizeof(root), "%s/root", dir);
    snprintf(tarpath, sizeof(tarpath), "%s/layer.tar", dir);
    cr_assert_eq(mkdir(root, 0755), 0);
    rootfd = open(root, O_RDONLY | O_DIRECTORY);
    cr_assert(rootfd >= 0);
}

static void teardown(void)
{
    skiff_err e;
    close(rootfd);
    skiff_remove_tree(dir, &e);
}

static void block_openat2(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat2, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};
    cr_assert_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
    cr_assert_eq(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0);
}

enum { F, D, L, H, C };
struct ent {
    int kind;
    const char *name;
    const char *data; /* file content, or link target */
    int mode;
};

static void write_tar(const struct ent *e, size_t n, bool gzip)
{
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    if (gzip)
        archive_write_add_filter_gzip(a);
    cr_assert_eq(archive_write_open_filename(a, tarpath), ARCHIVE_OK);
    for (size_t i = 0; i < n; i++) {
        struct archive_entry *ae = archive_entry_new();
        archive_entry_set_pathname(ae, e[i].name);
        archive_entry_set_perm(ae, e[i].mode ? (mode_t)e[i].mode : 0644);
        switch (e[i].kind) {
        case F:
            archive_entry_set_filetype(ae, AE_IFREG);
            archive_entry_set_size(ae, (la_int64_t)strlen(e[i].data));
            break;
        case D:
            archive_entry_set_filetype(ae, AE_IFDIR);
            archive_entry_set_perm(ae, 0755);
            break;
        case L:
            archive_entry_set_filetype(ae, AE_IFLNK);
            archive_entry_set_symlink(ae, e[i].data);
            break;
        case H:
            archive_entry_set_filetype(ae, AE_IFREG);
            archive_entry_set_hardlink(ae, e[i].data);
            break;
        case C:
            archive_entry_set_filetype(ae, AE_IFCHR);
            archive_entry_set_rdev(ae, makedev(1, 3));
            break;
        }
        cr_assert_eq(archive_write_header(a, ae), ARCHIVE_OK);
        if (e[i].kind == F)
            archive_write_data(a, e[i].data, strlen(e[i].data));
        archive_entry_free(ae);
    }
    archive_write_close(a);
    archive_write_free(a);
}

static int apply(skiff_err *err, struct skiff_layer_stats *st)
{
    skiff_err_clear(err);
    return skiff_layer_apply(rootfd, tarpath, NULL, SKIFF_LAYER_WHITEOUTS, st, err);
}

static bool exists(const char *p)
{
    struct stat st;
    return fstatat(rootfd, p, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

static void run_basic(void)
{
    struct ent l1[] = {{D, "a/", NULL, 0},     {F, "a/x", "x", 0},      {F, "a/y", "y1", 0},   {D, "o/", NULL, 0},
                       {F, "o/old", "o", 0},   {F, "suid", "s", 04755}, {L, "abs", "/etc", 0}, {H, "hl", "a/y", 0},
                       {C, "dev/null", "", 0}, {F, "./b/../c", "", 0}};
    skiff_err err;
    struct skiff_layer_stats st;
    write_tar(l1, 9, true); /* without the last, '..' entry */
    cr_assert_eq(apply(&err, &st), 0, "%s", err.msg);
    cr_assert_eq(st.setid_stripped, 1);
    cr_assert_eq(st.devices_skipped, 1);
    struct stat s;
    cr_assert_eq(fstatat(rootfd, "suid", &s, 0), 0);
    cr_assert_eq(s.st_mode & 07777, 0755);
    cr_assert(!exists("dev/null"));
    struct stat a, b;
    cr_assert_eq(fstatat(rootfd, "hl", &a, 0), 0);
    cr_assert_eq(fstatat(rootfd, "a/y", &b, 0), 0);
    cr_assert_eq(a.st_ino, b.st_ino);
    char target[64] = "";
    cr_assert_eq(readlinkat(rootfd, "abs", target, sizeof(target) - 1), 4);

    struct ent l2[] = {
        {F, "a/.wh.x", "", 0}, {F, "o/.wh..wh..opq", "", 0}, {F, "o/new", "n", 0}, {F, ".wh.abs", "", 0}};
    write_tar(l2, 4, false);
    cr_assert_eq(apply(&err, &st), 0, "%s", err.msg);
    cr_assert(!exists("a/x"));
    cr_assert(exists("a/y"));
    cr_assert(!exists("o/old"));
    cr_assert(exists("o/new"));
    cr_assert(!exists("abs"));

    struct ent bad[] = {{F, "./b/../c", "", 0}};
    write_tar(bad, 1, false);
    cr_assert_eq(apply(&err, &st), -1);
    cr_assert(strstr(err.msg, "'..' component"), "%s", err.msg);
}

static void run_through_symlink(void)
{
    char outside[300];
    snprintf(outside, sizeof(outside), "%s/outside", dir);
    cr_assert_eq(mkdir(outside, 0755), 0);
    struct ent e[] = {{L, "esc", outside, 0}, {F, "esc/pwned", "x", 0}};
    write_tar(e, 2, false);
    skiff_err err;
    cr_assert_eq(apply(&err, NULL), -1);
    cr_assert(strstr(err.msg, "through a symlink"), "%s", err.msg);
    char p[400];
    snprintf(p, sizeof(p), "%s/pwned", outside);
    cr_assert_eq(access(p, F_OK), -1);
    /* relative symlink climbing out, and a deeper path through it */
    struct ent e2[] = {{L, "up", "../../..", 0}, {D, "up/x/", NULL, 0}};
    write_tar(e2, 2, false);
    cr_assert_eq(apply(&err, NULL), -1);
    cr_assert(strstr(err.msg, "through a symlink"), "%s", err.msg);
}

static void run_hardlink_outside(void)
{
    struct ent e[] = {{H, "pw", "../../etc/passwd", 0}};
    write_tar(e, 1, false);
    skiff_err err;
    cr_assert_eq(apply(&err, NULL), -1);
    cr_assert(strstr(err.msg, "hardlink 'pw'"), "%s", err.msg);
    struct ent e2[] = {{H, "pw", "nonexistent", 0}};
    write_tar(e2, 1, false);
    cr_assert_eq(apply(&err, NULL), -1);
    cr_assert(strstr(err.msg, "must be in the image"), "%s", err.msg);
}

Test(layer, basic_whiteouts_links, .init = setup, .fini = teardown)
{
    run_basic();
}
Test(layer, basic_without_openat2, .init = setup, .fini = teardown)
{
    block_openat2();
    run_basic();
}
Test(layer, refuses_path_through_symlink, .init = setup, .fini = teardown)
{
    run_through_symlink();
}
Test(layer, refuses_path_through_symlink_without_openat2, .init = setup, .fini = teardown)
{
    block_openat2();
    run_through_symlink();
}
Test(layer, refuses_hardlink_outside, .init = setup, .fini = teardown)
{
    run_hardlink_outside();
}

Test(layer, digest_checked, .init = setup, .fini = teardown)
{
    struct ent e[] = {{F, "f", "content", 0}};
    write_tar(e, 1, true);
    char d[SKIFF_DIGEST_LEN];
    skiff_err err;
    cr_assert_eq(skiff_digest_file(tarpath, d, &err), 0);
    cr_assert_eq(skiff_layer_apply(rootfd, tarpath, d, 0, NULL, &err), 0, "%s", err.msg);
    const char *wrong = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    cr_assert_eq(skiff_layer_apply(rootfd, tarpath, wrong, 0, NULL, &err), -1);
    cr_assert(strstr(err.msg, "digest mismatch"), "%s", err.msg);
}

Test(layer, truncated_gzip, .init = setup, .fini = teardown)
{
    static char big[200000];
    for (size_t i = 0; i < sizeof(big) - 1; i++)
        big[i] = (char)('a' + (i * 7919) % 26);
    struct ent e[] = {{F, "big", big, 0}};
    write_tar(e, 1, true);
    struct stat st;
    cr_assert_eq(stat(tarpath, &st), 0);
    cr_assert_eq(truncate(tarpath, st.st_size / 2), 0);
    skiff_err err;
    cr_assert_eq(apply(&err, NULL), -1);
    cr_assert(strstr(err.msg, "runcated") || strstr(err.msg, "corrupt"), "%s", err.msg);
}

Test(layer, not_a_tar, .init = setup, .fini = teardown)
{
    FILE *f = fopen(tarpath, "w");
    fputs("this is not a tar archive at all, not even close; it is just text\n", f);
    fclose(f);
    skiff_err err;
    cr_assert_eq(apply(&err, NULL), -1);
}

/* The same layers packed into a squashfs (pack.h: the import's default),
 * read back with unsquashfs: what layer.c leaves on a tree. */
static int pack_apply(struct skiff_pack *k, skiff_err *err, struct skiff_layer_stats *st)
{
    skiff_err_clear(err);
    int fd = open(tarpath, O_RDONLY | O_CLOEXEC);
    cr_assert(fd >= 0);
    return skiff_layer_sink_stream(skiff_pack_sink(k), fd, tarpath, NULL, SKIFF_LAYER_WHITEOUTS, NULL, NULL, st, err);
}

Test(layer, packed_whiteouts_links, .init = setup, .fini = teardown)
{
    struct skiff_config cfg;
    skiff_err err;
    cr_assert_eq(skiff_config_load(&cfg, "/dev/null", false, &err), 0, "%s", err.msg);
    char out[400], tree[400];
    snprintf(out, sizeof(out), "%s/img.sqsh", dir);
    snprintf(tree, sizeof(tree), "%s/tree", dir);
    struct skiff_pack *k;
    cr_assert_eq(skiff_pack_open(&cfg, out, &k, &err), 0, "%s", err.msg);
    struct ent l1[] = {{D, "a/", NULL, 0},     {F, "a/x", "x", 0},      {F, "a/y", "y1", 0},   {D, "o/", NULL, 0},
                       {F, "o/old", "o", 0},   {F, "suid", "s", 04755}, {L, "abs", "/etc", 0}, {H, "hl", "a/y", 0},
                       {C, "dev/null", "", 0}, {L, "sl", "a", 0}};
    struct skiff_layer_stats st;
    write_tar(l1, 10, true);
    cr_assert_eq(pack_apply(k, &err, &st), 0, "%s", err.msg);
    cr_assert_eq(st.setid_stripped, 1);
    cr_assert_eq(st.devices_skipped, 1);
    struct ent l2[] = {
        {F, "a/.wh.x", "", 0}, {F, "o/.wh..wh..opq", "", 0}, {F, "o/new", "n", 0}, {F, ".wh.abs", "", 0}};
    write_tar(l2, 4, false);
    cr_assert_eq(pack_apply(k, &err, &st), 0, "%s", err.msg);
    /* refused as layer.c refuses them */
    struct ent dotdot[] = {{F, "./b/../c", "", 0}};
    write_tar(dotdot, 1, false);
    cr_assert_eq(pack_apply(k, &err, &st), -1);
    cr_assert(strstr(err.msg, "'..' component"), "%s", err.msg);
    struct ent through[] = {{F, "sl/evil", "e", 0}};
    write_tar(through, 1, false);
    cr_assert_eq(pack_apply(k, &err, &st), -1);
    cr_assert(strstr(err.msg, "symlink"), "%s", err.msg);
    json_t *config = json_pack("{s:{s:[s]}}", "config", "Env", "A=b");
    cr_assert_eq(skiff_pack_finish(k, config, NULL, NULL, &err), 0, "%s", err.msg);
    json_decref(config);
    skiff_pack_free(k);
    int fd = open(out, O_RDONLY | O_CLOEXEC);
    cr_assert_eq(skiff_squash_check_fd(fd, out, &err), 0, "%s", err.msg);
    close(fd);
    cr_assert_eq(skiff_squash_extract(out, tree, &err), 0, "%s", err.msg);
    close(rootfd);
    rootfd = open(tree, O_RDONLY | O_DIRECTORY);
    cr_assert(rootfd >= 0);
    cr_assert(!exists("a/x"));
    cr_assert(exists("a/y"));
    cr_assert(!exists("o/old"));
    cr_assert(exists("o/new"));
    cr_assert(!exists("abs"));
    cr_assert(!exists("dev/null"));
    cr_assert(!exists("b"));
    cr_assert(exists(".skiff/config.json"));
    cr_assert(exists(".skiff/environment"));
    struct stat s, a, b;
    cr_assert_eq(fstatat(rootfd, "suid", &s, 0), 0);
    cr_assert_eq(s.st_mode & 07777, 0755);
    cr_assert_eq(fstatat(rootfd, "hl", &a, 0), 0);
    cr_assert_eq(fstatat(rootfd, "a/y", &b, 0), 0);
    cr_assert_eq(a.st_ino, b.st_ino);
    cr_assert_eq(a.st_nlink, 2);
    char y[8] = "";
    int yfd = openat(rootfd, "a/y", O_RDONLY);
    cr_assert_eq(read(yfd, y, sizeof(y)), 2);
    close(yfd);
    cr_assert_str_eq(y, "y1");
}

/* The image file pack.c writes through (sqfsout.h): writes handed to the
 * writer thread land where they were aimed, in any order and across its
 * chunks; reads and truncations see every write before them. */
Test(layer, sqfsout_writer_orders_writes, .init = setup, .fini = teardown)
{
    char out[400];
    snprintf(out, sizeof(out), "%s/out", dir);
    size_t len = 9u << 20; /* more than the writer's chunks hold at once */
    unsigned char *want = malloc(len), *got = malloc(len);
    cr_assert(want && got);
    for (size_t i = 0; i < len; i++)
        want[i] = (unsigned char)(i * 7 + i / 4099);
    sqfs_file_t *f = skiff_sqfs_out_open(out, true);
    cr_assert(f);
    /* the second half first, then the first in uneven pieces, one rewritten */
    cr_assert_eq(f->write_at(f, len / 2, want + len / 2, len - len / 2), 0);
    for (size_t at = 0; at < len / 2;) {
        size_t n = at % 3 ? 70001 : 1234567;
        n = n > len / 2 - at ? len / 2 - at : n;
        cr_assert_eq(f->write_at(f, at, want + at, n), 0);
        at += n;
    }
    cr_assert_eq(f->write_at(f, 100, "xyz", 3), 0);
    memcpy(want + 100, "xyz", 3);
    cr_assert_eq(f->get_size(f), len);
    cr_assert_eq(f->read_at(f, 0, got, len), 0);
    cr_assert_eq(memcmp(got, want, len), 0);
    cr_assert_eq(f->read_at(f, len - 1, got, 2), SQFS_ERROR_OUT_OF_BOUNDS);
    cr_assert_eq(f->write_at(f, len, "tail", 4), 0);
    cr_assert_eq(f->truncate(f, len + 4096), 0); /* pads as pack.c does */
    skiff_err err;
    cr_assert_eq(skiff_sqfs_out_flush(f, &err), 0, "%s", err.msg);
    sqfs_destroy(f);
    int fd = open(out, O_RDONLY);
    struct stat st;
    cr_assert(fd >= 0 && fstat(fd, &st) == 0);
    cr_assert_eq(st.st_size, (off_t)len + 4096);
    cr_assert_eq(pread(fd, got, len, 0), (ssize_t)len);
    cr_assert_eq(memcmp(got, want, len), 0);
    cr_assert_eq(pread(fd, got, 4, (off_t)len), 4);
    cr_assert_eq(memcmp(got, "tail", 4), 0);
    close(fd);
    free(want);
    free(got);
}

/* A write the writer thread cannot make (/dev/full: ENOSPC, as a full disk)
 * is reported by the next write or by the flush, never lost. */
Test(layer, sqfsout_write_error_reported, .init = setup, .fini = teardown)
{
    sqfs_file_t *f = skiff_sqfs_out_open("/dev/full", true);
    cr_assert(f);
    static char buf[1 << 20];
    int r = 0;
    for (int i = 0; i < 16 && !r; i++)
        r = f->write_at(f, (sqfs_u64)i << 20, buf, sizeof(buf));
    skiff_err err;
    cr_assert_eq(skiff_sqfs_out_flush(f, &err), -1);
    cr_assert_eq(err.code, ENOSPC, "%d %s", err.code, err.msg);
    cr_assert(strstr(err.msg, "write the squashfs image"), "%s", err.msg);
    sqfs_destroy(f);
}

/* An existing file is emptied first, as sqfs_open_file(OVERWRITE) did. */
Test(layer, sqfsout_empties_existing, .init = setup, .fini = teardown)
{
    char out[400];
    snprintf(out, sizeof(out), "%s/old", dir);
    int fd = open(out, O_WRONLY | O_CREAT, 0600);
    cr_assert(fd >= 0 && write(fd, "old contents", 12) == 12);
    close(fd);
    sqfs_file_t *f = skiff_sqfs_out_open(out, false);
    cr_assert(f);
    cr_assert_eq(f->get_size(f), 0);
    cr_assert_eq(f->write_at(f, 0, "new", 3), 0);
    sqfs_destroy(f);
    struct stat st;
    cr_assert_eq(stat(out, &st), 0);
    cr_assert_eq(st.st_size, 3);
}
