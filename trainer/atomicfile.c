/* Whole-or-nothing file writes: see atomicfile.h. */
#include "atomicfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int atomic_write_file(const char *path, const char *tmp, int (*fill)(int fd, void *ctx), void *ctx, skiff_err *err)
{
    char def[4096];
    if (!tmp) {
        if ((size_t)snprintf(def, sizeof def, "%s.tmp.%d", path, (int)getpid()) >= sizeof def)
            return skiff_error(err, ENAMETOOLONG, "%s", path);
        tmp = def;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return skiff_error(err, errno, "create %s", tmp);
    int ok = fill(fd, ctx) == 0 && fsync(fd) == 0;
    int saved = errno;
    if (close(fd) < 0 && ok) {
        ok = 0;
        saved = errno;
    }
    if (!ok || rename(tmp, path) < 0) {
        if (ok) saved = errno;
        unlink(tmp);
        return skiff_error(err, saved, "writing %s", path);
    }
    return 0;
}
