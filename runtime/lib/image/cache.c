/* The image cache (cache.h): paths, the locks of readers and importers,
 * tag and info records; listing and pruning are prune.c's. */
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "atomicfile.h"
#include "clock.h"
#include "conf.h"
#include "fdio.h"
#include "fsutil.h"
#include "ref.h"
#include "store.h"

int skiff_cache_dir(const struct skiff_config *cfg, const char *sub, char *out, size_t n, skiff_err *err)
{
    if (!cfg->cache_path[0])
        return skiff_error(err, 0, "cache_path is not set");
    if (skiff_fmt_path(out, n, err, "%s/%s", cfg->cache_path, sub) < 0)
        return skiff_err_wrap(err, "cache path");
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
    return skiff_fmt_path(out, n, err, "%s/%s", dir, digest + 7);
}

static int lock_fd(int fd, int op)
{
    while (flock(fd, op) < 0)
        if (errno != EINTR)
            return -1;
    return 0;
}

int skiff_cache_paths(const char *root, const char *key, struct skiff_cache_paths *p, skiff_err *err)
{
    if (skiff_fmt_path(p->sqsh, sizeof(p->sqsh), err, "%s/images/%s.sqsh", root, key) < 0 ||
        skiff_fmt_path(p->lock, sizeof(p->lock), err, "%s/images/%s.lock", root, key) < 0 ||
        skiff_fmt_path(p->info, sizeof(p->info), err, "%s/images/%s.info", root, key) < 0)
        return skiff_err_wrap(err, "cache path");
    return 0;
}

int skiff_cache_hold(const char *sqsh, enum skiff_hold how, skiff_err *err)
{
    int fd = open(sqsh, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return skiff_error(err, errno, "open %s", sqsh);
    struct stat a, b;
    /* (a lock on a file other users can open would let any of them hold
     * every reader back: the store's images are not locked) */
    if ((how == SKIFF_HOLD_LOCKED && lock_fd(fd, LOCK_SH) < 0) || fstat(fd, &a) < 0) {
        int e = errno;
        close(fd);
        return skiff_error(err, e, "lock %s", sqsh);
    }
    /* a prune may have removed it between the lookup and the hold */
    if (!S_ISREG(a.st_mode) || a.st_nlink == 0 || stat(sqsh, &b) < 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
        close(fd);
        return skiff_error(err, ENOENT, "%s was removed", sqsh);
    }
    return fd;
}

int skiff_cache_hold_image(const struct skiff_config *cfg, const char *sqsh, skiff_err *err)
{
    char images[SKIFF_PATH_MAX + 16];
    size_t n = 0;
    if (cfg->system_cache_path[0] &&
        skiff_fmt_path(images, sizeof(images), err, "%s/images/", cfg->system_cache_path) == 0)
        n = strlen(images);
    if (!n || strncmp(sqsh, images, n) != 0 || strchr(sqsh + n, '/'))
        return skiff_cache_hold(sqsh, SKIFF_HOLD_LOCKED, err);
    uid_t owner;
    if (skiff_store_check_root(cfg->system_cache_path, &owner, err) < 0)
        return -1;
    int fd = skiff_cache_hold(sqsh, SKIFF_HOLD_OPEN, err);
    if (fd >= 0 && skiff_store_check_image(fd, sqsh, owner, err) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- the import lock ------------------------------------------------------ */

static void lock_owner(int fd, char *who, size_t n, double *running_s)
{
    char buf[256];
    ssize_t r = pread(fd, buf, sizeof(buf) - 1, 0);
    buf[r > 0 ? r : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    long long since = 0;
    char *s = strstr(buf, " since ");
    if (s) {
        since = strtoll(s + 7, NULL, 10);
        *s = '\0';
    }
    snprintf(who, n, "%.*s", (int)(n > 1 ? n - 1 : 0), buf[0] ? buf : "another process");
    *running_s = since > 0 && time(NULL) >= since ? (double)(time(NULL) - since) : 0;
}

int skiff_cache_import_lock(const char *path, const struct skiff_cache_wait *w, skiff_err *err)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return skiff_error(err, errno, "open lock %s", path);
    bool told = false;
    double pause_ms = 20, t0 = skiff_now_ms();
    while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        if (errno == EINTR)
            continue;
        if (errno != EWOULDBLOCK) {
            int e = errno;
            close(fd);
            return skiff_error(err, e, "lock %s", path);
        }
        char who[256];
        double running = 0;
        if (!told) {
            told = true;
            lock_owner(fd, who, sizeof(who), &running);
            if (w && w->waiting)
                w->waiting(w->ctx, who, running);
        }
        if (w && w->deadline_ms > 0 && skiff_now_ms() + pause_ms > w->deadline_ms) {
            lock_owner(fd, who, sizeof(who), &running);
            close(fd);
            return skiff_error(err, ETIMEDOUT,
                               "gave up waiting for the import by %s (running for %.0f s): the import's time limit "
                               "(import_timeout) is over",
                               who, running);
        }
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(pause_ms * 1e6)};
        nanosleep(&ts, NULL);
        /* a tenth of the wait so far (20 ms to 0.5 s): a waiter starts at
         * most ~10 % later than the import ends, and asks a shared
         * filesystem's lock server a few times a second at most */
        pause_ms = (skiff_now_ms() - t0) / 10;
        pause_ms = pause_ms < 20 ? 20 : pause_ms > 500 ? 500 : pause_ms;
    }
    char host[128] = "?", line[256];
    gethostname(host, sizeof(host) - 1);
    int l = snprintf(line, sizeof(line), "%s pid %d since %lld\n", host, (int)getpid(), (long long)time(NULL));
    if (ftruncate(fd, 0) == 0 && pwrite(fd, line, (size_t)l, 0) < 0) {
        /* only the waiters' message loses the importer's name */
    }
    return fd;
}

void skiff_cache_import_unlock(int fd)
{
    if (fd < 0)
        return;
    if (ftruncate(fd, 0) < 0) {
        /* the next waiter reads a stale name: nothing worse */
    }
    close(fd);
}

/* ---- records (key = value files) ------------------------------------------- */

static int tag_set(void *ctx, const char *key, const char *value, skiff_err *err)
{
    struct skiff_cache_tag *t = ctx;
    (void)err;
    if (!strcmp(key, "ref"))
        snprintf(t->ref, sizeof(t->ref), "%s", value);
    else if (!strcmp(key, "digest"))
        snprintf(t->digest, sizeof(t->digest), "%s", value);
    else if (!strcmp(key, "image"))
        snprintf(t->key, sizeof(t->key), "%s", value);
    else if (!strcmp(key, "resolved"))
        t->resolved = (time_t)strtoll(value, NULL, 10);
    return 0; /* unknown keys: a later version's */
}

bool skiff_cache_valid_key(const char *k)
{
    size_t n = strlen(k);
    if (n != 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((k[i] >= '0' && k[i] <= '9') || (k[i] >= 'a' && k[i] <= 'f')))
            return false;
    return true;
}

/* The records are small: anything larger is not one of skiff's. */
#define TAG_MAX 8192

/* fd (path) is owned by owner and writable by nobody else, or -1 with err
 * saying so and what the store's owner should do. */
static int owned_by(int fd, const char *path, uid_t owner, bool dir, skiff_err *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return skiff_error(err, errno, "%s", path);
    if (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
        return skiff_error(err, 0, "system store: %s is not a %s; refused", path, dir ? "directory" : "regular file");
    if (st.st_uid != owner)
        return skiff_error(err, 0,
                           "system store: %s belongs to uid %u, not to the store's owner (uid %u); refused (the "
                           "store's owner should remove it and run skiff import --system again)",
                           path, (unsigned)st.st_uid, (unsigned)owner);
    if (st.st_mode & 022)
        return skiff_error(err, 0,
                           "system store: %s is writable by others than its owner (mode %03o); refused (chmod go-w %s)",
                           path, (unsigned)(st.st_mode & 0777), path);
    return 0;
}

int skiff_cache_tag_read(const char *root, const char *refkey, const uid_t *owner, struct skiff_cache_tag *t,
                         skiff_err *err)
{
    memset(t, 0, sizeof(*t));
    char dir[SKIFF_PATH_MAX + 16], path[SKIFF_PATH_MAX + 96];
    if (skiff_fmt_path(dir, sizeof(dir), err, "%s/tags", root) < 0 ||
        skiff_fmt_path(path, sizeof(path), err, "%s/%s", dir, refkey) < 0)
        return -1;
    /* through the fds checked: nothing swapped in between counts */
    cleanup_close int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0 : skiff_error(err, errno, "open %s", dir);
    if (owner && owned_by(dfd, dir, *owner, true, err) < 0)
        return -1;
    cleanup_close int fd = openat(dfd, refkey, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : skiff_error(err, errno, "open %s", path);
    if (owner && owned_by(fd, path, *owner, false, err) < 0)
        return -1;
    skiff_err e;
    cleanup_free char *text = skiff_read_fd_small(fd, path, TAG_MAX, NULL, &e);
    /* one that does not parse is none: the next resolution writes it anew */
    if (!text || skiff_conf_parse(text, path, tag_set, t, &e) < 0)
        return 0;
    return skiff_cache_valid_key(t->key) && skiff_ref_valid_digest(t->digest) ? 1 : 0;
}

int skiff_cache_tag_write(const char *root, const char *refkey, const struct skiff_cache_tag *t, mode_t mode,
                          skiff_err *err)
{
    char dir[SKIFF_PATH_MAX + 16], path[SKIFF_PATH_MAX + 96], buf[2048];
    if (skiff_fmt_path(dir, sizeof(dir), err, "%s/tags", root) < 0 ||
        skiff_fmt_path(path, sizeof(path), err, "%s/%s", dir, refkey) < 0)
        return -1;
    if (skiff_mkdir_p(dir, (mode & 0044) ? 0755 : 0700, err) < 0)
        return -1;
    int n = snprintf(buf, sizeof(buf), "ref = \"%s\"\ndigest = %s\nimage = %s\nresolved = %lld\n", t->ref, t->digest,
                     t->key, (long long)t->resolved);
    if (n < 0 || (size_t)n >= sizeof(buf))
        return skiff_error(err, ENAMETOOLONG, "tag record");
    /* not synced: a lost record only costs a request */
    return skiff_atomic_write(path, buf, (size_t)n, mode, SKIFF_ATOMIC_NOSYNC, err);
}

static int info_set(void *ctx, const char *key, const char *value, skiff_err *err)
{
    struct skiff_cache_info *in = ctx;
    if (!strcmp(key, "ref"))
        snprintf(in->ref, sizeof(in->ref), "%s", value);
    else if (!strcmp(key, "digest"))
        snprintf(in->digest, sizeof(in->digest), "%s", value);
    else if (!strcmp(key, "imported"))
        in->imported = (time_t)strtoll(value, NULL, 10);
    else if (!strcmp(key, "layers")) {
        free(in->layers);
        if (!(in->layers = strdup(value)))
            return skiff_error(err, ENOMEM, "info");
    }
    return 0;
}

int skiff_cache_info_read(const char *path, struct skiff_cache_info *in)
{
    memset(in, 0, sizeof(*in));
    skiff_err err;
    if (skiff_conf_read(path, NULL, true, info_set, in, &err) < 0) {
        skiff_cache_info_free(in);
        return 0;
    }
    return 1;
}

void skiff_cache_info_free(struct skiff_cache_info *in)
{
    free(in->layers);
    in->layers = NULL;
}

int skiff_cache_info_write(const char *path, const struct skiff_cache_info *in, mode_t mode, skiff_err *err)
{
    size_t cap = 4096 + (in->layers ? strlen(in->layers) : 0);
    cleanup_free char *buf = malloc(cap);
    if (!buf)
        return skiff_error(err, ENOMEM, "info");
    int n = snprintf(buf, cap, "ref = \"%s\"\ndigest = %s\nimported = %lld\nlayers = %s\n", in->ref, in->digest,
                     (long long)in->imported, in->layers ? in->layers : "");
    if (n < 0 || (size_t)n >= cap)
        return skiff_error(err, ENAMETOOLONG, "info");
    return skiff_atomic_write(path, buf, (size_t)n, mode, SKIFF_ATOMIC_NOSYNC, err);
}

void skiff_cache_touch(const char *root, const char *key)
{
    struct skiff_cache_paths p;
    skiff_err err;
    if (skiff_cache_paths(root, key, &p, &err) == 0 && utimensat(AT_FDCWD, p.info, NULL, AT_SYMLINK_NOFOLLOW) < 0) {
        /* no info file (an older cache) or not ours to write (the store):
         * the image's own mtime stands for its last use */
    }
}
