/* See fsutil.h. */
#include "fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdio.h"

int skiff_fmt_path(char *buf, size_t n, skiff_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= n)
        return skiff_error(err, ENAMETOOLONG, "path too long");
    return 0;
}

int skiff_mkdir_p(const char *path, unsigned mode, skiff_err *err)
{
    char buf[4096];
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
        return skiff_error(err, ENAMETOOLONG, "mkdir %s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, mode) < 0 && errno != EEXIST)
            return skiff_error(err, errno, "mkdir %s", buf);
        *p = '/';
    }
    if (mkdir(buf, mode) < 0 && errno != EEXIST)
        return skiff_error(err, errno, "mkdir %s", buf);
    struct stat st;
    if (stat(buf, &st) < 0)
        return skiff_error(err, errno, "stat %s", buf);
    if (!S_ISDIR(st.st_mode))
        return skiff_error(err, ENOTDIR, "%s", buf);
    return 0;
}

char *skiff_read_file(const char *path, int flags, size_t max, size_t *len, skiff_err *err)
{
    /* O_NONBLOCK: a FIFO in place of the file opens at once, and is then
     * refused as not a regular file, instead of waiting for a writer */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | flags);
    if (fd < 0) {
        skiff_error(err, errno, "open %s", path);
        return NULL;
    }
    char *s = skiff_read_fd_small(fd, path, max, len, err);
    close(fd);
    return s;
}

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
        /* A read-only directory cannot be emptied by its owner; open it up
         * (never through a symlink: d_type, or lstat where the filesystem
         * does not say). */
        struct stat st;
        bool dir =
            de->d_type == DT_DIR ||
            (de->d_type == DT_UNKNOWN && fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode));
        if (dir && fchmodat(fd, de->d_name, 0700, 0) < 0) {
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
