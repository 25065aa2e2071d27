#include "cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"
#include "ref.h"

int skiff_cache_dir(const struct skiff_config *cfg, const char *sub, char *out, size_t n, skiff_err *err)
{
    if (!cfg->cache_path[0])
        return skiff_error(err, 0, "cache_path is not set");
    int w = snprintf(out, n, "%s/%s", cfg->cache_path, sub);
    if (w < 0 || (size_t)w >= n)
        return skiff_error(err, ENAMETOOLONG, "cache path");
    if (skiff_mkdir_p(out, 0700, err) < 0)
        return skiff_err_wrap(err, "cache");
    return 0;
}

int skiff_cache_blob_path(const struct skiff_config *cfg, const char *digest, char *out, size_t n, skiff_err *err)
{
    if (!skiff_ref_valid_digest(digest))
        return skiff_error(err, 0, "bad digest '%s'", digest);
    char dir[SKIFF_PATH_MAX];
    if (skiff_cache_dir(cfg, "blobs/sha256", dir, sizeof(dir), err) < 0)
        return -1;
    int w = snprintf(out, n, "%s/%s", dir, digest + 7);
    if (w < 0 || (size_t)w >= n)
        return skiff_error(err, ENAMETOOLONG, "cache path");
    return 0;
}

int skiff_cache_lock(const char *path, skiff_err *err)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return skiff_error(err, errno, "open lock %s", path);
    while (flock(fd, LOCK_EX) < 0) {
        if (errno != EINTR) {
            int e = errno;
            close(fd);
            return skiff_error(err, e, "lock %s", path);
        }
    }
    return fd;
}
