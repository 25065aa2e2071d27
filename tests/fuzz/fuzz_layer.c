/* Image layers (runtime/lib/image/layer.c): the tarballs a registry, an OCI
 * layout or an archive hands to `skiff import`, unpacked by libarchive and
 * placed by layer.c beneath the root (openat2 RESOLVE_BENEATH), with OCI
 * whiteouts. Input: byte 0 bit 0 turns whiteouts on; the rest is the blob
 * (tar, plain or compressed), applied onto a small tree.
 * Properties: a failure says why; whatever the layer holds, nothing outside
 * the root changes (a sibling directory stays empty, a sibling file keeps
 * its content and its single link), and no file in the root is setuid or
 * setgid, or a device node. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "fuzzlib.h"
#include "layer.h"

static char base[4096], root[4200], outside[4200], secret[4200];
static const char secret_text[] = "not for the image\n";

static void put_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        abort();
    close(fd);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    snprintf(base, sizeof(base), "%s/l", fuzz_dir());
    snprintf(root, sizeof(root), "%s/root", base);
    snprintf(outside, sizeof(outside), "%s/outside", base);
    snprintf(secret, sizeof(secret), "%s/secret", base);
    return 0;
}

/* Checks the tree under dirfd: no set-id file, no device. */
static void check_tree(int dirfd, const char *at)
{
    DIR *d = fdopendir(dup(dirfd));
    if (!d)
        abort();
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        struct stat st;
        if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        FUZZ_CHECK(!S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode), "device %s/%s in the root", at, e->d_name);
        FUZZ_CHECK(S_ISDIR(st.st_mode) || !(st.st_mode & (S_ISUID | S_ISGID)), "set-id file %s/%s (mode %o)", at,
                   e->d_name, (unsigned)st.st_mode);
        if (S_ISDIR(st.st_mode)) {
            int sub = openat(dirfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0) {
                char next[8192];
                snprintf(next, sizeof(next), "%s/%s", at, e->d_name);
                check_tree(sub, next);
                close(sub);
            }
        }
    }
    closedir(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 << 18)
        return 0;
    mkdir(base, 0755);
    fuzz_empty_dir(base);
    mkdir(root, 0755);
    mkdir(outside, 0755);
    put_file(secret, secret_text);
    /* what an earlier layer left, for whiteouts and overwrites */
    char p[8192];
    snprintf(p, sizeof(p), "%s/etc", root);
    mkdir(p, 0755);
    snprintf(p, sizeof(p), "%s/etc/passwd", root);
    put_file(p, "root:x:0:0:root:/root:/bin/sh\n");
    snprintf(p, sizeof(p), "%s/dir", root);
    mkdir(p, 0755);
    snprintf(p, sizeof(p), "%s/dir/file", root);
    put_file(p, "x\n");
    snprintf(p, sizeof(p), "%s/up", root);
    if (symlink("..", p) < 0)
        abort();

    const char *blob = fuzz_write(0, "layer.blob", data + 1, size - 1);
    int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        abort();
    struct skiff_layer_stats st;
    skiff_err err = {0};
    int rc = skiff_layer_apply(rootfd, blob, NULL, (data[0] & 1) ? SKIFF_LAYER_WHITEOUTS : 0, &st, &err);
    fuzz_check_failure(rc, &err, "skiff_layer_apply");

    DIR *d = opendir(outside);
    if (!d)
        abort();
    struct dirent *e;
    while ((e = readdir(d)))
        FUZZ_CHECK(!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."), "the layer wrote %s/%s", outside, e->d_name);
    closedir(d);
    struct stat sst;
    FUZZ_CHECK(lstat(secret, &sst) == 0 && S_ISREG(sst.st_mode) && sst.st_nlink == 1,
               "the file beside the root was replaced or linked into it");
    char buf[64] = "";
    int fd = open(secret, O_RDONLY | O_CLOEXEC);
    FUZZ_CHECK(fd >= 0 && read(fd, buf, sizeof(buf) - 1) == (ssize_t)strlen(secret_text) && !strcmp(buf, secret_text),
               "the file beside the root changed");
    close(fd);
    check_tree(rootfd, "");
    close(rootfd);
    return 0;
}
