/* The site's image store (store.h): who it belongs to and what a reader
 * accepts from it. */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"
#include "squash.h"

/* A directory of the store: owned by owner (any, for the top: it names
 * the owner), writable by nobody else. */
static int check_dir(const char *path, bool top, uid_t *owner, skiff_err *err)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return skiff_error(err, errno, "system_cache_path: %s", path);
    if (!S_ISDIR(st.st_mode))
        return skiff_error(err, 0, "system_cache_path: %s is not a directory; refused", path);
    if (top)
        *owner = st.st_uid;
    else if (st.st_uid != *owner)
        return skiff_error(err, 0,
                           "system_cache_path: %s belongs to uid %u, not to the store's owner (uid %u); refused "
                           "(the store's owner should remove it and import again with skiff import --system)",
                           path, (unsigned)st.st_uid, (unsigned)*owner);
    if (st.st_mode & 022)
        return skiff_error(err, 0,
                           "system_cache_path: %s is writable by others than its owner (mode %03o); refused "
                           "(chmod go-w %s)",
                           path, (unsigned)(st.st_mode & 0777), path);
    return 0;
}

int skiff_store_check_root(const char *root, uid_t *owner, skiff_err *err)
{
    char images[4096 + 16];
    if (check_dir(root, true, owner, err) < 0)
        return -1;
    if (skiff_fmt_path(images, sizeof(images), err, "%s/images", root) < 0)
        return -1;
    return check_dir(images, false, owner, err);
}

int skiff_store_check_image(int fd, const char *path, uid_t owner, skiff_err *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return skiff_error(err, errno, "%s", path);
    if (!S_ISREG(st.st_mode))
        return skiff_error(err, 0, "system store: %s is not a regular file; refused", path);
    if (st.st_uid != owner)
        return skiff_error(err, 0,
                           "system store: %s belongs to uid %u, not to the store's owner (uid %u): a foreign file; "
                           "refused (the store's owner should remove it and run skiff import --system again)",
                           path, (unsigned)st.st_uid, (unsigned)owner);
    if (st.st_mode & 022)
        return skiff_error(err, 0, "system store: %s is writable by others than its owner (mode %03o); refused", path,
                           (unsigned)(st.st_mode & 0777));
    if (skiff_squash_check_fd(fd, path, err) < 0)
        return skiff_error(err, 0,
                           "system store: %s; refused (the store's owner should remove it and run skiff import "
                           "--system again)",
                           err->msg);
    return 0;
}

int skiff_store_prepare(const char *root, skiff_err *err)
{
    if (!root[0])
        return skiff_error(err, 0, "system_cache_path is not set (set it in skiff.conf to the site's image store)");
    mode_t old = umask(022);
    int rv = skiff_mkdir_p(root, 0755, err);
    umask(old);
    if (rv < 0)
        return skiff_err_wrap(err, "system_cache_path");
    struct stat st;
    if (stat(root, &st) < 0)
        return skiff_error(err, errno, "system_cache_path %s", root);
    if (st.st_uid != geteuid())
        return skiff_error(err, 0,
                           "system_cache_path %s belongs to uid %u: only the store's owner fills it (run this as "
                           "that user)",
                           root, (unsigned)st.st_uid);
    const char *subs[] = {"images", "tags"};
    for (size_t i = 0; i < 2; i++) {
        char p[4096 + 16];
        if (skiff_fmt_path(p, sizeof(p), err, "%s/%s", root, subs[i]) < 0)
            return -1;
        old = umask(022);
        rv = skiff_mkdir_p(p, 0755, err);
        umask(old);
        if (rv < 0)
            return skiff_err_wrap(err, "system_cache_path");
    }
    uid_t owner;
    return skiff_store_check_root(root, &owner, err);
}
