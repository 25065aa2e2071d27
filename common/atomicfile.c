/* Whole-or-nothing file writes: see atomicfile.h. */
#include "atomicfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "fdio.h"

/* A new file ".NAME.tmp.XXXXXX" beside path, created with O_EXCL (mkostemp
 * would make it 0600 whatever the caller asked, and ignore the umask). */
static int create_unique(struct skiff_atomic *a, mode_t mode, skiff_err *err)
{
    static const char chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    const char *slash = strrchr(a->path, '/');
    int dirlen = slash ? (int)(slash - a->path) : 0;
    const char *base = slash ? slash + 1 : a->path;
    for (int tries = 0; tries < 100; tries++) {
        unsigned char r[6];
        if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
            return skiff_error(err, errno, "create a temporary file for %s", a->path);
        char suffix[sizeof(r) + 1];
        for (size_t i = 0; i < sizeof(r); i++)
            suffix[i] = chars[r[i] % (sizeof(chars) - 1)];
        suffix[sizeof(r)] = '\0';
        int w = slash ? snprintf(a->tmp, sizeof(a->tmp), "%.*s/.%s.tmp.%s", dirlen, a->path, base, suffix)
                      : snprintf(a->tmp, sizeof(a->tmp), ".%s.tmp.%s", base, suffix);
        if (w < 0 || (size_t)w >= sizeof(a->tmp))
            return skiff_error(err, ENAMETOOLONG, "%s", a->path);
        a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (a->fd >= 0)
            return 0;
        if (errno != EEXIST)
            return skiff_error(err, errno, "create %s", a->tmp);
    }
    return skiff_error(err, EEXIST, "create a temporary file for %s", a->path);
}

int skiff_atomic_begin(struct skiff_atomic *a, const char *path, const char *tmp, mode_t mode, unsigned flags,
                       skiff_err *err)
{
    a->fd = -1;
    a->tmp[0] = '\0';
    a->flags = flags;
    if ((size_t)snprintf(a->path, sizeof(a->path), "%s", path) >= sizeof(a->path))
        return skiff_error(err, ENAMETOOLONG, "%s", path);
    if (!tmp)
        return create_unique(a, mode, err);
    if ((size_t)snprintf(a->tmp, sizeof(a->tmp), "%s", tmp) >= sizeof(a->tmp))
        return skiff_error(err, ENAMETOOLONG, "%s", tmp);
    a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode);
    if (a->fd < 0) {
        int e = errno;
        a->tmp[0] = '\0'; /* not ours: nothing to remove */
        return skiff_error(err, e, "create %s", tmp);
    }
    return 0;
}

void skiff_atomic_abort(struct skiff_atomic *a)
{
    if (a->fd >= 0)
        close(a->fd);
    a->fd = -1;
    if (a->tmp[0])
        unlink(a->tmp);
    a->tmp[0] = '\0';
}

int skiff_atomic_commit(struct skiff_atomic *a, skiff_err *err)
{
    int e = 0;
    if (a->fd >= 0) {
        if (!(a->flags & SKIFF_ATOMIC_NOSYNC) && fsync(a->fd) < 0)
            e = errno;
        if (close(a->fd) < 0 && !e)
            e = errno;
        a->fd = -1;
        if (e) {
            skiff_atomic_abort(a);
            return skiff_error(err, e, "write %s", a->path);
        }
    }
    int rc = a->flags & SKIFF_ATOMIC_NOREPLACE ? renameat2(AT_FDCWD, a->tmp, AT_FDCWD, a->path, RENAME_NOREPLACE)
                                               : rename(a->tmp, a->path);
    if (rc < 0) {
        e = errno;
        skiff_atomic_abort(a);
        return skiff_error(err, e, "publish %s", a->path);
    }
    a->tmp[0] = '\0';
    return 0;
}

int skiff_atomic_write(const char *path, const void *buf, size_t len, mode_t mode, unsigned flags, skiff_err *err)
{
    struct skiff_atomic a;
    if (skiff_atomic_begin(&a, path, NULL, mode, flags, err) < 0)
        return -1;
    if (skiff_write_all(a.fd, buf, len) < 0) {
        int e = errno;
        skiff_atomic_abort(&a);
        return skiff_error(err, e, "write %s", path);
    }
    return skiff_atomic_commit(&a, err);
}

int skiff_atomic_write_file(const char *path, const char *tmp, int (*fill)(int fd, void *ctx), void *ctx,
                            skiff_err *err)
{
    struct skiff_atomic a;
    if (skiff_atomic_begin(&a, path, tmp, 0644, 0, err) < 0)
        return -1;
    if (fill(a.fd, ctx) < 0) {
        int e = errno;
        skiff_atomic_abort(&a);
        return skiff_error(err, e, "writing %s", path);
    }
    return skiff_atomic_commit(&a, err);
}
