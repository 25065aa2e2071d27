#include "fdio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int skiff_write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int skiff_read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0) {
            errno = EPROTO;
            return -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

int skiff_open_regular(const char *path, int extra, skiff_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | extra);
    if (fd < 0)
        return skiff_error(err, errno, "open %s", path);
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return skiff_error(err, e, "stat %s", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return skiff_error(err, 0, "%s is not a regular file (it is a %s)", path,
                           S_ISFIFO(st.st_mode)   ? "FIFO"
                           : S_ISDIR(st.st_mode)  ? "directory"
                           : S_ISSOCK(st.st_mode) ? "socket"
                                                  : "device");
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int e = errno;
        close(fd);
        return skiff_error(err, e, "open %s", path);
    }
    return fd;
}

char *skiff_read_fd_small(int fd, const char *path, size_t max, size_t *len, skiff_err *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0) {
        skiff_error(err, errno, "stat %s", path);
        return NULL;
    }
    if (!S_ISREG(st.st_mode) || (size_t)st.st_size > max) {
        skiff_error(err, 0, "%s: not a regular file of at most %zu bytes", path, max);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    char *buf = malloc(size + 1);
    if (!buf) {
        skiff_error(err, ENOMEM, "read %s", path);
        return NULL;
    }
    /* A file that shrank under us is read as it is now; one that grew is
     * read up to its size at fstat time. */
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            skiff_error(err, errno, "read %s", path);
            free(buf);
            return NULL;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    if (len)
        *len = got;
    return buf;
}

void skiff_close_fds_except(const int *keep, size_t n)
{
    /* the gaps in order: from `from` up to the next kept fd (n is a handful) */
    unsigned from = 3;
    for (;;) {
        unsigned next = ~0U;
        for (size_t i = 0; i < n; i++)
            if (keep[i] >= 0 && (unsigned)keep[i] >= from && (unsigned)keep[i] < next)
                next = (unsigned)keep[i];
        if (next == ~0U)
            break;
        if (next > from)
            close_range(from, next - 1, 0);
        from = next + 1;
    }
    close_range(from, ~0U, 0);
}

/* ---- removal ---------------------------------------------------------- */

int skiff_remove_tree_at(int dirfd, const char *name, skiff_err *err)
{
    if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
        return 0;
    if (errno != EISDIR && errno != EPERM)
        return skiff_error(err, errno, "remove %s", name);
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return skiff_error(err, errno, "open %s", name);
    int rv = skiff_clear_dir_fd(fd, err);
    close(fd);
    if (rv < 0)
        return -1;
    if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
        return skiff_error(err, errno, "remove %s", name);
    return 0;
}

int skiff_clear_dir_fd(int fd, skiff_err *err)
{
    int dfd = dup(fd);
    if (dfd < 0)
        return skiff_error(err, errno, "dup");
    DIR *d = fdopendir(dfd);
    if (!d) {
        int e = errno;
        close(dfd);
        return skiff_error(err, e, "opendir");
    }
    int rv = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        /* A read-only directory cannot be emptied by its owner; open it up. */
        if (de->d_type == DT_DIR && fchmodat(fd, de->d_name, 0700, 0) < 0) {
            /* best effort: the removal below reports what matters */
        }
        if (skiff_remove_tree_at(fd, de->d_name, err) < 0) {
            rv = -1;
            break;
        }
    }
    closedir(d);
    return rv;
}

int skiff_remove_tree(const char *path, skiff_err *err)
{
    char parent[4096];
    snprintf(parent, sizeof(parent), "%s", path);
    char *slash = strrchr(parent, '/');
    const char *name = path;
    int dirfd = AT_FDCWD;
    if (slash) {
        *slash = '\0';
        name = slash + 1;
        dirfd = open(slash == parent ? "/" : parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dirfd < 0)
            return errno == ENOENT ? 0 : skiff_error(err, errno, "open %s", parent);
    }
    if (fchmodat(dirfd, name, 0700, 0) < 0) {
        /* best effort: the removal below reports what matters */
    }
    int rv = skiff_remove_tree_at(dirfd, name, err);
    if (dirfd >= 0)
        close(dirfd);
    return rv;
}
