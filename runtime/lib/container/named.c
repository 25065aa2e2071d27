/* See named.h. */
#include "named.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdio.h"
#include "fsutil.h"

bool skiff_name_valid(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 128 || name[0] == '.' || name[0] == '-' || name[0] == '+')
        return false;
    return strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-+") == n;
}

int skiff_name_check(const char *name, skiff_err *err)
{
    if (!skiff_name_valid(name))
        return skiff_error(err, 0,
                           "container name '%s' may only contain letters, digits, '.', '_', '-', '+' (and not "
                           "start with '.', '-' or '+'; at most 128)",
                           name ? name : "");
    return 0;
}

int skiff_named_dir(const struct skiff_config *cfg, const char *name, char *dir, size_t n, skiff_err *err)
{
    if (skiff_name_check(name, err) < 0)
        return -1;
    if ((size_t)snprintf(dir, n, "%s/containers/%s", cfg->data_path, name) >= n)
        return skiff_error(err, ENAMETOOLONG, "container path");
    return 0;
}

int skiff_named_image(const struct skiff_config *cfg, const char *name, char *image, size_t n, skiff_err *err)
{
    char dir[SKIFF_PATH_MAX], p[SKIFF_PATH_MAX + 8];
    if (skiff_named_dir(cfg, name, dir, sizeof(dir), err) < 0)
        return -1;
    snprintf(p, sizeof(p), "%s/image", dir);
    /* the user's file, like the image it names: a FIFO is refused at once */
    cleanup_close int fd = skiff_open_regular(p, 0, err);
    if (fd < 0) {
        if (err->code == ENOENT)
            return skiff_error(err, ENOENT, "no container named '%s' (see 'skiff list', or 'skiff create')", name);
        return -1;
    }
    ssize_t r = read(fd, image, n - 1);
    if (r < 0)
        return skiff_error(err, errno, "read %s", p);
    if (r == 0)
        return skiff_error(err, 0, "%s is empty (remove the container: skiff remove %s)", p, name);
    image[r] = '\0';
    image[strcspn(image, "\n")] = '\0';
    return 0;
}

bool skiff_named_exists(const struct skiff_config *cfg, const char *name)
{
    char dir[SKIFF_PATH_MAX], p[SKIFF_PATH_MAX + 8];
    skiff_err e;
    if (skiff_named_dir(cfg, name, dir, sizeof(dir), &e) < 0)
        return false;
    snprintf(p, sizeof(p), "%s/image", dir);
    return access(p, F_OK) == 0;
}

int skiff_named_create(const struct skiff_config *cfg, const char *name, const char *image, const char *node,
                       bool exist_ok, skiff_err *err)
{
    char dir[SKIFF_PATH_MAX], abs[SKIFF_PATH_MAX], p[SKIFF_PATH_MAX + 64];
    if (skiff_named_dir(cfg, name, dir, sizeof(dir), err) < 0)
        return -1;
    if (!realpath(image, abs))
        return skiff_error(err, errno, "image %s", image);
    char magic[4] = {0};
    int ifd = open(abs, O_RDONLY | O_CLOEXEC);
    if (ifd < 0)
        return skiff_error(err, errno, "open %s", abs);
    ssize_t got = read(ifd, magic, 4);
    close(ifd);
    if (got != 4 || memcmp(magic, "hsqs", 4))
        return skiff_error(err, 0, "%s is not a squashfs image (import it first: skiff import)", image);
    char parent[SKIFF_PATH_MAX + 16];
    snprintf(parent, sizeof(parent), "%s/containers", cfg->data_path);
    if (skiff_mkdir_p(parent, 0700, err) < 0)
        return -1;
    if (access(dir, F_OK) == 0) {
        if (exist_ok)
            return 0;
        return skiff_error(err, EEXIST, "a container named '%s' exists (remove it first: skiff remove %s)", name, name);
    }
    /* Made complete under a temporary name (a leading '.': never listed,
     * never a valid name) and renamed into place, so two steps creating
     * the same name at once never see, or make, half of one: the first
     * rename wins and the other step uses it. */
    char tmp[SKIFF_PATH_MAX + 32];
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s/.%s.XXXXXX", parent, name) >= sizeof(tmp))
        return skiff_error(err, ENAMETOOLONG, "container path");
    if (!mkdtemp(tmp))
        return skiff_error(err, errno, "create %s", tmp);
    int rv = -1;
    snprintf(p, sizeof(p), "%s/upper", tmp);
    if (mkdir(p, 0755) < 0) {
        skiff_error(err, errno, "create %s", p);
        goto out;
    }
    snprintf(p, sizeof(p), "%s/work", tmp);
    if (mkdir(p, 0700) < 0) {
        skiff_error(err, errno, "create %s", p);
        goto out;
    }
    snprintf(p, sizeof(p), "%s/image", tmp);
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || dprintf(fd, "%s\n", abs) < 0 || close(fd) < 0) {
        skiff_error(err, errno, "write %s", p);
        goto out;
    }
    snprintf(p, sizeof(p), "%s/node", tmp);
    if (node && ((fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0 || dprintf(fd, "%s\n", node) < 0 ||
                 close(fd) < 0)) {
        skiff_error(err, errno, "write %s", p);
        goto out;
    }
    if (rename(tmp, dir) < 0) {
        if ((errno == EEXIST || errno == ENOTEMPTY) && exist_ok)
            rv = 0; /* another step made it first: that one is the container */
        else if (errno == EEXIST || errno == ENOTEMPTY)
            skiff_error(err, EEXIST, "a container named '%s' exists (remove it first: skiff remove %s)", name, name);
        else
            skiff_error(err, errno, "create %s", dir);
        goto out;
    }
    return 0;
out : {
    skiff_err e2;
    skiff_remove_tree(tmp, &e2);
}
    return rv;
}

void skiff_named_this_node(char *out, size_t n)
{
    if (gethostname(out, n) < 0 || !out[0])
        snprintf(out, n, "node");
    out[n - 1] = '\0';
    out[strcspn(out, ".")] = '\0';
}

int skiff_named_step_name(const char *name, const char *node, unsigned jobid, char *out, size_t n, skiff_err *err)
{
    if (skiff_name_check(name, err) < 0)
        return -1;
    int w = jobid ? snprintf(out, n, "%s.%s.job%u", name, node, jobid) : snprintf(out, n, "%s.%s", name, node);
    if (w < 0 || (size_t)w >= n || !skiff_name_valid(out))
        return skiff_error(err, 0, "container name '%s' is too long for node %s", name, node);
    return 0;
}

/* The node a named container was made for, or "" (NAME/node); -1 when
 * the container is gone (removed, or removed and made again, since it was
 * listed: the mark is read through the directory that was there). */
static int node_mark(const struct skiff_config *cfg, const char *name, char *out, size_t n)
{
    char p[SKIFF_PATH_MAX + 140];
    out[0] = '\0';
    snprintf(p, sizeof(p), "%s/containers/%s", cfg->data_path, name);
    cleanup_close int dfd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dfd < 0)
        return -1;
    cleanup_close int fd = openat(dfd, "node", O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    struct stat here, now;
    if (fd < 0) /* made without one (the CLI's), unless it is no longer there */
        return fstat(dfd, &here) == 0 && stat(p, &now) == 0 && here.st_ino == now.st_ino && here.st_dev == now.st_dev
                   ? 0
                   : -1;
    ssize_t r = fstat(fd, &here) == 0 && S_ISREG(here.st_mode) ? read(fd, out, n - 1) : -1;
    out[r > 0 ? r : 0] = '\0';
    out[strcspn(out, "\n")] = '\0';
    return 0;
}

/* The length of NAME when the first len bytes of s are NAME.NODE, else 0. */
static size_t strip_suffix(const char *s, size_t len, const char *node)
{
    size_t nl = strlen(node);
    if (len < nl + 2 || s[len - nl - 1] != '.' || strncmp(s + len - nl, node, nl))
        return 0;
    return len - nl - 1;
}

int skiff_named_to_enroot(const struct skiff_config *cfg, const char *stored, const char *node, char *out, size_t n)
{
    char mark[256];
    if (node_mark(cfg, stored, mark, sizeof(mark)) < 0 || (mark[0] && strcmp(mark, node)))
        return 0;
    size_t len = strlen(stored), base;
    const char *job = strrchr(stored, '.');
    unsigned long jobid = 0;
    char *end = NULL;
    if (job && !strncmp(job, ".job", 4) && job[4] >= '0' && job[4] <= '9')
        jobid = strtoul(job + 4, &end, 10);
    if (jobid && end && !*end && (base = strip_suffix(stored, (size_t)(job - stored), node)))
        snprintf(out, n, "pyxis_%lu_%.*s", jobid, (int)base, stored);
    else if ((base = strip_suffix(stored, len, node)))
        snprintf(out, n, "pyxis_%.*s", (int)base, stored);
    else
        snprintf(out, n, "%s", stored);
    return 1;
}

int skiff_named_from_enroot(const struct skiff_config *cfg, const char *ename, const char *node, char *out, size_t n,
                            bool *node_made, skiff_err *err)
{
    *node_made = false;
    if (strncmp(ename, "pyxis_", 6) != 0 || !ename[6]) {
        if (skiff_name_check(ename, err) < 0)
            return -1;
        snprintf(out, n, "%s", ename);
        return 0;
    }
    const char *rest = ename + 6;
    size_t digits = strspn(rest, "0123456789");
    *node_made = true;
    if (digits && (rest[digits] == '_' || rest[digits] == '.') && rest[digits + 1]) {
        char job[SKIFF_PATH_MAX], global[SKIFF_PATH_MAX];
        unsigned long id = strtoul(rest, NULL, 10);
        skiff_err e;
        if (skiff_named_step_name(rest + digits + 1, node, (unsigned)id, job, sizeof(job), err) < 0)
            return -1;
        /* pyxis_12_x: job 12's x, or a global container named 12_x */
        if (rest[digits] == '_' && !skiff_named_exists(cfg, job) &&
            skiff_named_step_name(rest, node, 0, global, sizeof(global), &e) == 0 && skiff_named_exists(cfg, global)) {
            snprintf(out, n, "%s", global);
            return 0;
        }
        snprintf(out, n, "%s", job);
        return 0;
    }
    return skiff_named_step_name(rest, node, 0, out, n, err);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int skiff_named_list(const struct skiff_config *cfg, void (*fn)(const char *name, const char *image, void *arg),
                     void *arg, skiff_err *err)
{
    char parent[SKIFF_PATH_MAX + 16];
    snprintf(parent, sizeof(parent), "%s/containers", cfg->data_path);
    DIR *d = opendir(parent);
    if (!d)
        return errno == ENOENT ? 0 : skiff_error(err, errno, "open %s", parent);
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!skiff_name_valid(e->d_name))
            continue;
        char **nn = realloc(names, (n + 1) * sizeof(char *));
        if (!nn)
            break;
        names = nn;
        if ((names[n] = strdup(e->d_name)))
            n++;
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof(char *), cmp_str);
    for (size_t i = 0; i < n; i++) {
        char image[SKIFF_PATH_MAX];
        skiff_err e2;
        if (skiff_named_image(cfg, names[i], image, sizeof(image), &e2) == 0)
            fn(names[i], image, arg);
        free(names[i]);
    }
    free(names);
    return 0;
}

struct image_match {
    const char *path;
    bool found;
};

static void image_matches(const char *name, const char *image, void *arg)
{
    (void)name;
    struct image_match *m = arg;
    m->found |= image && !strcmp(image, m->path);
}

bool skiff_named_keeps_image(void *ctx, const char *path)
{
    struct image_match m = {.path = path};
    skiff_err ignore;
    return skiff_named_list(ctx, image_matches, &m, &ignore) == 0 && m.found;
}

/* NAME/FILE opened for flock, created if missing. */
static int lock_file(const char *dir, const char *file, skiff_err *err)
{
    char p[SKIFF_PATH_MAX + 16];
    if ((size_t)snprintf(p, sizeof(p), "%s/%s", dir, file) >= sizeof(p))
        return skiff_error(err, ENAMETOOLONG, "%s", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return skiff_error(err, errno, "open %s", p);
    return fd;
}

/* flock that retries an interrupted call. */
static int flock_retry(int fd, int op)
{
    int r;
    while ((r = flock(fd, op)) < 0 && errno == EINTR)
        ;
    return r;
}

void skiff_named_release(struct skiff_named_use *u)
{
    if (u->users >= 0)
        close(u->users);
    if (u->lock >= 0)
        close(u->lock);
    u->users = u->lock = -1;
    u->writer = false;
}

int skiff_named_acquire(const struct skiff_config *cfg, const char *name, bool writer, struct skiff_named_use *u,
                        skiff_err *err)
{
    *u = (struct skiff_named_use){.users = -1, .lock = -1};
    char dir[SKIFF_PATH_MAX];
    if (skiff_named_dir(cfg, name, dir, sizeof(dir), err) < 0)
        return -1;
    if ((u->users = lock_file(dir, "users", err)) < 0 || (writer && (u->lock = lock_file(dir, "lock", err)) < 0))
        goto fail;
    /* Alone (nobody holds "users"): take the writable layer, then share
     * "users" like every other instance. Anyone else: share "users" and
     * read. A short exclusive hold (a starter between the two steps, or a
     * removal) is waited out, up to 2 s. */
    if (writer && flock_retry(u->users, LOCK_EX | LOCK_NB) == 0) {
        if (flock_retry(u->lock, LOCK_EX | LOCK_NB) == 0) {
            u->writer = true;
            if (flock_retry(u->users, LOCK_SH | LOCK_NB) == 0)
                return 0;
            skiff_error(err, EBUSY, "container '%s' is being removed", name);
            goto fail;
        }
        /* (a holder that takes "lock" without "users": one of an older skiff) */
    }
    if (u->lock >= 0) {
        close(u->lock);
        u->lock = -1;
    }
    for (int i = 0; i < 200; i++) {
        if (flock_retry(u->users, LOCK_SH | LOCK_NB) == 0)
            return 0;
        if (errno != EWOULDBLOCK) {
            skiff_error(err, errno, "lock %s/users", dir);
            goto fail;
        }
        usleep(10000);
    }
    skiff_error(err, EBUSY, "container '%s' is being removed or exported (try again)", name);
fail:
    skiff_named_release(u);
    return -1;
}

int skiff_named_remove(const struct skiff_config *cfg, const char *name, skiff_err *err)
{
    char dir[SKIFF_PATH_MAX];
    if (skiff_named_dir(cfg, name, dir, sizeof(dir), err) < 0)
        return -1;
    struct stat st;
    if (lstat(dir, &st) < 0)
        return skiff_error(err, errno, "no container named '%s' (see 'skiff list')", name);
    /* nobody may use it meanwhile: no instance (users) and no writer (lock) */
    cleanup_close int users = lock_file(dir, "users", err);
    cleanup_close int lock = users < 0 ? -1 : lock_file(dir, "lock", err);
    if (users < 0 || lock < 0)
        return skiff_err_wrap(err, "remove");
    /* A step's container is stopped as its last task exits, while srun
     * already returns: a script's next line (`enroot remove -f`, MLPerf's
     * cleanup) may come while it stops. Such an instance is waited for, a
     * 3 s; one that runs on is "in use". */
    bool free = false;
    for (int i = 0; i < 150 && !(free = flock_retry(users, LOCK_EX | LOCK_NB) == 0); i++)
        usleep(20000);
    if (!free || flock_retry(lock, LOCK_EX | LOCK_NB) < 0)
        return skiff_error(err, EBUSY, "remove: container '%s' is in use (running, or being exported)", name);
    /* Out of sight first, under a temporary name (a leading '.': never
     * listed), as create brings one in: a list on another node meanwhile
     * (MLPerf's cleanup runs `enroot remove -f $(enroot list)` on every node
     * at once over a shared home) never sees half of one, without the node
     * mark that says whose it is. */
    char gone[SKIFF_PATH_MAX + 48];
    if ((size_t)snprintf(gone, sizeof(gone), "%s/containers/.%s.removing.%d", cfg->data_path, name, (int)getpid()) >=
        sizeof(gone))
        return skiff_error(err, ENAMETOOLONG, "container path");
    if (rename(dir, gone) < 0)
        return skiff_error(err, errno, "remove container %s", name);
    if (skiff_remove_tree(gone, err) < 0)
        return skiff_err_wrap(err, "remove container %s", name);
    return 0;
}
