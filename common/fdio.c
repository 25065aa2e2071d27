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

int skiff_read_all_at(int fd, void *buf, size_t n, uint64_t off)
{
    char *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
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
        off += (uint64_t)r;
    }
    return 0;
}

int skiff_write_all_at(int fd, const void *buf, size_t n, uint64_t off)
{
    const char *p = buf;
    while (n) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
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
        off += (uint64_t)w;
    }
    return 0;
}

int skiff_fd_empty(int fd)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -1;
    return st.st_size ? ftruncate(fd, 0) : 0;
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
