/* Confined path resolution and mount primitives; see rootfs.h. */
#include "fdio.h"
#include "rootfs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static bool force_fallback;

void skiff_root_force_fallback(bool on)
{
    force_fallback = on;
}

static int sys_openat2(int dirfd, const char *path, struct open_how *how)
{
    return (int)syscall(SYS_openat2, dirfd, path, how, sizeof(*how));
}

/* The fallback walk, hand-written because no library offers in-root
 * resolution: a stack of directory fds from the root down, one component at
 * a time with O_NOFOLLOW; a symlink's target is spliced in front of the rest
 * ("/" restarts at the root, ".." pops but never above it). */
#define WALK_MAX_DEPTH 256
#define WALK_MAX_LINKS 40

static int walk(int rootfd, const char *path, int flags, skiff_err *err)
{
    int stack[WALK_MAX_DEPTH];
    int depth = 0;
    int links = 0;
    int rv = -1;
    size_t cap = strlen(path) + 1;
    char *rest = malloc(cap);
    if (!rest)
        return skiff_error(err, ENOMEM, "resolve %s", path);
    strcpy(rest, path);
    stack[0] = dup(rootfd);
    if (stack[0] < 0) {
        skiff_error(err, errno, "resolve %s", path);
        goto out;
    }
    size_t pos = 0;
    for (;;) {
        while (rest[pos] == '/')
            pos++;
        if (!rest[pos]) { /* done: the top of the stack is the result */
            int fd = openat(stack[depth], ".", (flags & ~(O_NOFOLLOW | O_CREAT)) | O_CLOEXEC);
            if (fd < 0)
                skiff_error(err, errno, "open %s", path);
            rv = fd;
            goto out;
        }
        size_t end = pos;
        while (rest[end] && rest[end] != '/')
            end++;
        bool last = true;
        for (size_t k = end; rest[k]; k++)
            if (rest[k] != '/') {
                last = false;
                break;
            }
        char name[NAME_MAX + 1];
        if (end - pos > NAME_MAX) {
            skiff_error(err, ENAMETOOLONG, "resolve %s", path);
            goto out;
        }
        memcpy(name, rest + pos, end - pos);
        name[end - pos] = '\0';
        pos = end;
        if (!strcmp(name, "."))
            continue;
        if (!strcmp(name, "..")) {
            if (depth > 0)
                close(stack[depth--]);
            continue;
        }
        struct stat st;
        if (fstatat(stack[depth], name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            skiff_error(err, errno, "open %s", path);
            goto out;
        }
        if (last && (!S_ISLNK(st.st_mode) || (flags & O_NOFOLLOW))) {
            /* the object itself (a symlink only when O_NOFOLLOW asked for it) */
            int fd = openat(stack[depth], name, flags | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0)
                skiff_error(err, errno, "open %s", path);
            rv = fd;
            goto out;
        }
        if (S_ISLNK(st.st_mode)) {
            if (++links > WALK_MAX_LINKS) {
                skiff_error(err, ELOOP, "resolve %s", path);
                goto out;
            }
            char target[PATH_MAX];
            ssize_t n = readlinkat(stack[depth], name, target, sizeof(target) - 1);
            if (n < 0) {
                skiff_error(err, errno, "readlink in %s", path);
                goto out;
            }
            target[n] = '\0';
            size_t tail = strlen(rest + pos);
            char *nrest = malloc((size_t)n + tail + 2);
            if (!nrest) {
                skiff_error(err, ENOMEM, "resolve %s", path);
                goto out;
            }
            sprintf(nrest, "%s/%s", target, rest + pos);
            free(rest);
            rest = nrest;
            pos = 0;
            if (target[0] == '/')
                while (depth > 0)
                    close(stack[depth--]);
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            skiff_error(err, ENOTDIR, "resolve %s", path);
            goto out;
        }
        if (depth + 1 >= WALK_MAX_DEPTH) {
            skiff_error(err, ENAMETOOLONG, "resolve %s", path);
            goto out;
        }
        int fd = openat(stack[depth], name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            skiff_error(err, errno, "resolve %s", path);
            goto out;
        }
        stack[++depth] = fd;
    }
out:
    for (int i = 0; i <= depth; i++)
        if (stack[i] >= 0)
            close(stack[i]);
    free(rest);
    return rv;
}

int skiff_root_open(int rootfd, const char *path, int flags, skiff_err *err)
{
    if (!force_fallback) {
        struct open_how how = {
            .flags = (unsigned)(flags | O_CLOEXEC),
            .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
        };
        /* EAGAIN: a rename or mount anywhere on the system raced with a ".."
         * in the walk; the kernel asks callers to retry (openat2(2)) */
        int fd, tries = 0;
        do
            fd = sys_openat2(rootfd, path, &how);
        while (fd < 0 && errno == EAGAIN && ++tries < 64);
        if (fd >= 0)
            return fd;
        if (errno != ENOSYS && errno != EPERM && errno != EAGAIN) /* EPERM: seccomp'd */
            return skiff_error(err, errno, "open %s", path);
        /* ENOSYS, seccomp, or still racing: the walk has the same semantics */
    }
    return walk(rootfd, path, flags, err);
}

static int mkdirs_depth(int rootfd, const char *path, mode_t mode, int depth, skiff_err *err);
static int mkfile_depth(int rootfd, const char *path, int depth, skiff_err *err);

/* name in parent (whose path inside the root is ppath) is a symlink that
 * did not resolve: build the path it points to, so creation follows it the
 * way resolution would (confined: the result is resolved in-root again). */
static int link_target_path(int parent, const char *ppath, const char *name, char *out, size_t n, skiff_err *err)
{
    char target[PATH_MAX];
    ssize_t len = readlinkat(parent, name, target, sizeof(target) - 1);
    if (len < 0)
        return skiff_error(err, errno, "readlink %s/%s", ppath, name);
    target[len] = '\0';
    int w = target[0] == '/' ? snprintf(out, n, "%s", target) : snprintf(out, n, "%s/%s", ppath, target);
    if (w < 0 || (size_t)w >= n)
        return skiff_error(err, ENAMETOOLONG, "%s/%s", ppath, name);
    return 0;
}

/* Splits path into parent and last name; opens the parent (creating it). */
static int open_parent(int rootfd, const char *path, char *name, char *ppath, int depth, skiff_err *err)
{
    char buf[PATH_MAX];
    if (strlen(path) >= sizeof(buf))
        return skiff_error(err, ENAMETOOLONG, "%s", path);
    strcpy(buf, path);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    char *slash = strrchr(buf, '/');
    const char *base = slash ? slash + 1 : buf;
    if (strlen(base) > NAME_MAX)
        return skiff_error(err, ENAMETOOLONG, "%s", path);
    strcpy(name, base);
    if (!slash || slash == buf) {
        strcpy(ppath, "/");
        return skiff_root_open(rootfd, "/", O_PATH | O_DIRECTORY, err);
    }
    *slash = '\0';
    strcpy(ppath, buf);
    return mkdirs_depth(rootfd, buf, 0755, depth, err);
}

#define MAX_LINK_DEPTH 40

static int mkdirs_depth(int rootfd, const char *path, mode_t mode, int depth, skiff_err *err)
{
    int fd = skiff_root_open(rootfd, path, O_PATH | O_DIRECTORY, err);
    if (fd >= 0 || err->code != ENOENT)
        return fd;
    if (depth > MAX_LINK_DEPTH)
        return skiff_error(err, ELOOP, "mkdir %s", path);
    skiff_err_clear(err);
    char name[NAME_MAX + 1], ppath[PATH_MAX];
    cleanup_close int parent = open_parent(rootfd, path, name, ppath, depth, err);
    if (parent < 0)
        return -1;
    if (!strcmp(name, "..") || !strcmp(name, "."))
        return skiff_error(err, 0, "mkdir %s: ends in '.' or '..'", path);
    /* mkdirat on an O_PATH dir fd works: the name is created in that dir */
    if (mkdirat(parent, name, mode) < 0) {
        if (errno != EEXIST)
            return skiff_error(err, errno, "mkdir %s", path);
        struct stat st;
        if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
            char next[PATH_MAX];
            if (link_target_path(parent, ppath, name, next, sizeof(next), err) < 0)
                return -1;
            return mkdirs_depth(rootfd, next, mode, depth + 1, err);
        }
    }
    fd = openat(parent, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return skiff_error(err, errno, "open %s", path);
    return fd;
}

int skiff_root_mkdirs(int rootfd, const char *path, mode_t mode, skiff_err *err)
{
    return mkdirs_depth(rootfd, path, mode, 0, err);
}

static int mkfile_depth(int rootfd, const char *path, int depth, skiff_err *err)
{
    int fd = skiff_root_open(rootfd, path, O_PATH, err);
    if (fd >= 0 || err->code != ENOENT)
        return fd;
    if (depth > MAX_LINK_DEPTH)
        return skiff_error(err, ELOOP, "create %s", path);
    skiff_err_clear(err);
    char name[NAME_MAX + 1], ppath[PATH_MAX];
    cleanup_close int parent = open_parent(rootfd, path, name, ppath, depth, err);
    if (parent < 0)
        return -1;
    int wfd = openat(parent, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (wfd < 0) {
        if (errno != EEXIST)
            return skiff_error(err, errno, "create %s", path);
        struct stat st;
        if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
            char next[PATH_MAX];
            if (link_target_path(parent, ppath, name, next, sizeof(next), err) < 0)
                return -1;
            return mkfile_depth(rootfd, next, depth + 1, err);
        }
    } else
        close(wfd);
    fd = openat(parent, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return skiff_error(err, errno, "open %s", path);
    return fd;
}

int skiff_root_mkfile(int rootfd, const char *path, skiff_err *err)
{
    return mkfile_depth(rootfd, path, 0, err);
}

int skiff_root_path(const char *base, const char *path, bool clamp, char *out, size_t n, skiff_err *err)
{
    char buf[PATH_MAX];
    int w = path[0] == '/' ? snprintf(buf, sizeof(buf), "%s", path) : snprintf(buf, sizeof(buf), "%s/%s", base, path);
    if (w < 0 || (size_t)w >= sizeof(buf) || n < 2)
        return skiff_error(err, ENAMETOOLONG, "%s", path);
    size_t o = 0; /* out holds "" for the root, else "/a/b" */
    char *save = NULL;
    for (char *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if (!strcmp(c, "."))
            continue;
        if (!strcmp(c, "..")) {
            if (o == 0) {
                if (clamp)
                    continue;
                return skiff_error(err, EXDEV, "'..' leaves the container's root");
            }
            while (o > 0 && out[--o] != '/')
                ;
            continue;
        }
        size_t l = strlen(c);
        if (o + 1 + l + 1 > n)
            return skiff_error(err, ENAMETOOLONG, "%s", path);
        out[o++] = '/';
        memcpy(out + o, c, l);
        o += l;
    }
    if (o == 0)
        out[o++] = '/';
    out[o] = '\0';
    return 0;
}

char *skiff_root_read(int rootfd, const char *path, size_t max, size_t *len, skiff_err *err)
{
    cleanup_close int fd = skiff_root_open(rootfd, path, O_RDONLY, err);
    if (fd < 0)
        return NULL;
    return skiff_read_fd_small(fd, path, max, len, err);
}
