/* Container start / join / env / stop; see container.h.
 *
 * Parse -> plan -> execute: the parent only forks; everything that touches
 * the image runs in the holder, as the user, inside its own namespaces. The
 * holder reports back over a pipe: either a skiff_err (the real reason) or
 * the container's workdir, env, entrypoint and cmd. */
#include "fdio.h"
#include "container.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "caps.h"
#include "fusemount.h"
#include "hookrun.h"
#include "mountspec.h"
#include "ns.h"
#include "rootfs.h"
#include "warm.h"
#include "named.h"
#include "squash.h"
#include "state.h"

#define DEFAULT_PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define STATE_FILE "state"
#define CONFIG_JSON "/.skiff/config.json"

void skiff_trace(bool on, const char *what)
{
    if (!on)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    fprintf(stderr, "skiff-trace: %.3f %d %s\n", (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6, (int)getpid(),
            what);
}

void skiff_start_opts_init(struct skiff_start_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->fuse_fd = -1;
    opts->use_entrypoint = true;
}

void skiff_strv_free(char **v)
{
    if (!v)
        return;
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}

static size_t strv_len(char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    return n;
}

static int strv_push(char ***v, const char *s, skiff_err *err)
{
    size_t n = strv_len(*v);
    char **nv = realloc(*v, (n + 2) * sizeof(char *));
    if (!nv)
        return skiff_error(err, ENOMEM, "list");
    *v = nv;
    nv[n] = strdup(s);
    nv[n + 1] = NULL;
    if (!nv[n])
        return skiff_error(err, ENOMEM, "list");
    return 0;
}

/* Sets K=V in an env list: replaces an existing K, else appends. */
static int env_set(char ***v, const char *kv, skiff_err *err)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        return skiff_error(err, EINVAL, "environment entry '%s' is not KEY=VALUE", kv);
    size_t klen = (size_t)(eq - kv) + 1;
    for (char **p = *v; p && *p; p++)
        if (!strncmp(*p, kv, klen)) {
            char *d = strdup(kv);
            if (!d)
                return skiff_error(err, ENOMEM, "env");
            free(*p);
            *p = d;
            return 0;
        }
    return strv_push(v, kv, err);
}

static char **strv_dup(char *const *v, skiff_err *err)
{
    char **out = calloc(1, sizeof(char *));
    if (!out) {
        skiff_error(err, ENOMEM, "list");
        return NULL;
    }
    for (size_t i = 0; v && v[i]; i++)
        if (strv_push(&out, v[i], err) < 0) {
            skiff_strv_free(out);
            return NULL;
        }
    return out;
}

/* ---- wire format between holder and parent (and the state file) ----
 * records (state.h): 'W' workdir, 'E' env, 'P' entrypoint word, 'C' cmd
 * word, 'H' holder pid, 'X' pid of the spawned command, 'F' pid of the
 * FUSE server. */
static int parse_records(const char *p, size_t len, struct skiff_container *c, skiff_err *err)
{
    size_t off = 0;
    char tag;
    const char *s;
    int more;
    while ((more = skiff_rec_next(p, len, &off, &tag, &s)) != 0) {
        if (more < 0)
            return skiff_error(err, EINVAL, "truncated container state");
        int rc = 0;
        switch (tag) {
        case 'W':
            snprintf(c->workdir, sizeof(c->workdir), "%s", s);
            break;
        case 'H':
            c->holder = skiff_rec_pid(s);
            break;
        case 'X':
            c->command = skiff_rec_pid(s);
            break;
        case 'F':
            c->server = skiff_rec_pid(s);
            break;
        case 'E':
            rc = strv_push(&c->env, s, err);
            break;
        case 'P':
            rc = strv_push(&c->entrypoint, s, err);
            break;
        case 'C':
            rc = strv_push(&c->cmd, s, err);
            break;
        default:
            return skiff_error(err, EINVAL, "corrupt container state");
        }
        if (rc < 0)
            return -1;
    }
    return 0;
}


/* ---- paths ---- */

static int check_private_dir(const char *path, skiff_err *err)
{
    if (mkdir(path, 0700) < 0 && errno != EEXIST)
        return skiff_error(err, errno, "create %s", path);
    struct stat st;
    if (lstat(path, &st) < 0)
        return skiff_error(err, errno, "stat %s", path);
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022))
        return skiff_error(err, EPERM,
                           "%s must be a directory owned by uid %u and writable only by it (remove it, "
                           "or set runtime_path)",
                           path, (unsigned)geteuid());
    return 0;
}

static int state_dir_for(const struct skiff_config *cfg, const char *key, pid_t pid, char *out,
                         skiff_err *err)
{
    char autokey[32];
    if (!key || !*key) {
        snprintf(autokey, sizeof(autokey), "pid-%d", (int)pid);
        key = autokey;
    }
    if (!skiff_name_valid(key))
        return skiff_error(err, EINVAL, "state key '%s' may only contain letters, digits, '.', '_', '-'", key);
    if ((size_t)snprintf(out, SKIFF_PATH_MAX, "%s/%s", cfg->runtime_path, key) >= SKIFF_PATH_MAX)
        return skiff_error(err, ENAMETOOLONG, "runtime path");
    return 0;
}

/* Removes the state dir and whatever hooks left in it (they may use
 * SKIFF_STATE_DIR as scratch). Every caller runs as the state's owner (the
 * plugin starts containers from its user-side helper, never as root). */
static void remove_state(const char *state_dir)
{
    struct stat st;
    if (lstat(state_dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
        return;
    skiff_err e;
    skiff_rm_tree(state_dir, &e);
}

/* State letter and parent pid of process pid, from /proc/PID/stat
 * ("PID (COMM) STATE PPID ..."): 0, or -1 when it is gone. */
static int proc_state(pid_t pid, char *state, int *ppid)
{
    char p[64], buf[512];
    snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
    cleanup_close int fd = open(p, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');
    return paren && sscanf(paren + 1, " %c %d", state, ppid) == 2 ? 0 : -1;
}

/* A holder of ours is alive: the process exists, is not a zombie (an
 * orphan waits for init to reap it), and is ours (signalling it works: a
 * pid reused by another user's process is not our holder). */
static bool holder_alive(pid_t pid)
{
    char state;
    int ppid;
    if (kill(pid, 0) < 0)
        return false;
    return proc_state(pid, &state, &ppid) < 0 || state != 'Z'; /* unreadable: kept, to be safe */
}

int skiff_container_remove_state(const struct skiff_config *cfg, const char *key, skiff_err *err)
{
    char dir[SKIFF_PATH_MAX];
    if (!key || !*key)
        return skiff_error(err, 0, "no state key");
    if (state_dir_for(cfg, key, 0, dir, err) < 0)
        return -1;
    remove_state(dir);
    return 0;
}

void skiff_container_prune(const struct skiff_config *cfg)
{
    DIR *d = opendir(cfg->runtime_path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "pid-", 4) != 0)
            continue;
        char *end;
        long pid = strtol(e->d_name + 4, &end, 10);
        if (*end || pid <= 0 || pid > INT_MAX)
            continue;
        if (holder_alive((pid_t)pid))
            continue;
        char p[SKIFF_PATH_MAX + 300];
        if ((size_t)snprintf(p, sizeof(p), "%s/%s", cfg->runtime_path, e->d_name) < sizeof(p))
            remove_state(p);
    }
    closedir(d);
}

/* ---- the image config (/.skiff/config.json = OCI config's "config") ---- */

static int json_strv(json_t *o, const char *key, char ***out, skiff_err *err)
{
    json_t *a = json_object_get(o, key);
    if (!a || json_is_null(a))
        return 0;
    if (!json_is_array(a))
        return skiff_error(err, EINVAL, "%s: %s is not an array", CONFIG_JSON, key);
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        if (!json_is_string(v))
            return skiff_error(err, EINVAL, "%s: %s[%zu] is not a string", CONFIG_JSON, key, i);
        if (strv_push(out, json_string_value(v), err) < 0)
            return -1;
    }
    return 0;
}

struct image_config {
    char **env, **entrypoint, **cmd;
    char workdir[SKIFF_PATH_MAX];
};

static int read_image_config(int rootfd, struct image_config *ic, skiff_err *err)
{
    size_t len;
    cleanup_free char *text = skiff_root_read(rootfd, CONFIG_JSON, 1 << 20, &len, err);
    if (!text) {
        if (err->code == ENOENT) { /* images without it get defaults */
            skiff_err_clear(err);
            return 0;
        }
        return -1;
    }
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (!root)
        return skiff_error(err, EINVAL, "%s: line %d: %s", CONFIG_JSON, je.line, je.text);
    int rv = -1;
    if (!json_is_object(root)) {
        skiff_error(err, EINVAL, "%s is not a JSON object", CONFIG_JSON);
        goto out;
    }
    if (json_strv(root, "Env", &ic->env, err) < 0 || json_strv(root, "Entrypoint", &ic->entrypoint, err) < 0 ||
        json_strv(root, "Cmd", &ic->cmd, err) < 0)
        goto out;
    json_t *wd = json_object_get(root, "WorkingDir");
    if (json_is_string(wd))
        snprintf(ic->workdir, sizeof(ic->workdir), "%s", json_string_value(wd));
    rv = 0;
out:
    json_decref(root);
    return rv;
}

/* ---- holder ---- */

struct holder_ctx {
    const struct skiff_config *cfg;
    const struct skiff_start_opts *o;
    const char *state_dir;
    char image[SKIFF_PATH_MAX];
    char upper[SKIFF_PATH_MAX]; /* persistent upper (named), or "" */
    bool writable;
    bool rootfs_only; /* export: lower + overlay, no system mounts, no pivot */
    char stage[SKIFF_PATH_MAX];
    char home[SKIFF_PATH_MAX]; /* the user's home (--mount-home), looked up before the namespace */
    struct skiff_fuse *fuse;   /* the image's FUSE server (NULL: extracted) */
    sigset_t caller_mask;      /* the caller's signal mask, for the spawned command */
    pid_t caller;              /* the process that forked the holder */
};

static int stage_path(struct holder_ctx *h, const char *sub, char *out, size_t n, skiff_err *err)
{
    if ((size_t)snprintf(out, n, "%s/%s", h->stage, sub) >= n)
        return skiff_error(err, ENAMETOOLONG, "staging path");
    return 0;
}

/* The block cache's directory (blockcache.h), created if missing; -1 when
 * it cannot be used (the start goes on without the cache): it must be a
 * directory of ours that nobody else can write, as the runtime path. */
static int open_block_cache_dir(const char *path)
{
    skiff_err e;
    if (skiff_mkdir_p(path, 0700, &e) < 0)
        return -1;
    int fd = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 022))) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The host's files bound into every container (the node's own name must
 * resolve inside: gloo binds to it). */
static const char *const etc_binds[] = {"/etc/hosts", "/etc/resolv.conf", "/etc/hostname"};

/* Mount points for etc_binds that the image lacks (images exported by
 * docker usually have no /etc/resolv.conf or /etc/hostname), made as empty
 * files in a fresh upper before the overlay is mounted; through the overlay
 * each would cost a copy-up of /etc and a create at every start. Asked of
 * the image itself (no FUSE round trip), and only where its /etc is a real
 * directory, so that the upper's merges with it. */
static void premake_etc_targets(struct skiff_fuse *fuse, const char *up)
{
    mode_t mode;
    if (skiff_fuse_lookup(fuse, "/etc", &mode) < 0 || !S_ISDIR(mode))
        return;
    cleanup_close int ufd = open(up, O_PATH | O_DIRECTORY | O_CLOEXEC);
    bool made_etc = false;
    for (size_t i = 0; ufd >= 0 && i < sizeof(etc_binds) / sizeof(etc_binds[0]); i++) {
        if (access(etc_binds[i], R_OK) != 0 || skiff_fuse_lookup(fuse, etc_binds[i], &mode) == 0)
            continue;
        if (!made_etc && mkdirat(ufd, "etc", 0755) < 0 && errno != EEXIST)
            return;
        made_etc = true;
        int fd = openat(ufd, etc_binds[i] + 1, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0)
            close(fd);
    }
}

/* lower (FUSE or extracted) + overlay on stage/root; returns rootfd */
static int assemble_rootfs(struct holder_ctx *h, skiff_err *err)
{
    char lower[SKIFF_PATH_MAX + 8], root[SKIFF_PATH_MAX + 8], data[3 * SKIFF_PATH_MAX + 64];
    if (stage_path(h, "lower", lower, sizeof(lower), err) < 0 || stage_path(h, "root", root, sizeof(root), err) < 0)
        return -1;
    if (mkdir(lower, 0755) < 0 || mkdir(root, 0755) < 0)
        return skiff_error(err, errno, "create staging directories");
    cleanup_close int lowerfd = open(lower, O_PATH | O_DIRECTORY | O_CLOEXEC);
    cleanup_close int rootdirfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (lowerfd < 0 || rootdirfd < 0)
        return skiff_error(err, errno, "open staging directories");
    struct skiff_fuse_opts fo = {.devfuse_fd = h->o->fuse_fd, .own_root = geteuid() != 0, .cache_dirfd = -1};
    char cache_dir[SKIFF_PATH_MAX];
    if (h->cfg->block_cache_mb > 0 && skiff_config_block_cache(h->cfg, cache_dir, sizeof(cache_dir)) == 0) {
        fo.cache_dirfd = open_block_cache_dir(cache_dir);
        fo.cache_bytes = (uint64_t)h->cfg->block_cache_mb << 20;
    }
    h->fuse = skiff_fuse_mount_squashfs(h->image, lowerfd, &fo, err);
    if (fo.cache_dirfd >= 0)
        close(fo.cache_dirfd);
    if (h->fuse && h->o->fuse_fd >= 0)
        close(h->o->fuse_fd); /* our copy: the server's must be the last (fusemount.h) */
    if (!h->fuse) {
        int e = err->code;
        if (e != EACCES && e != EPERM && e != ENODEV && e != ENOENT && e != ENXIO)
            return skiff_err_wrap(err, "image %s", h->image);
        /* FUSE unusable here: extract into the staging tmpfs instead */
        skiff_err fe = *err;
        skiff_err_clear(err);
        if (skiff_squash_extract(h->image, lower, err) < 0)
            return skiff_err_wrap(err, "FUSE unavailable (%s), and the extraction fallback failed", fe.msg);
    }
    const char *upper = h->upper;
    char up[SKIFF_PATH_MAX + 16], work[SKIFF_PATH_MAX + 16];
    if (!*upper) {
        if (stage_path(h, "upper", up, sizeof(up), err) < 0 || stage_path(h, "work", work, sizeof(work), err) < 0)
            return -1;
        if (mkdir(up, 0755) < 0 || mkdir(work, 0755) < 0)
            return skiff_error(err, errno, "create overlay directories");
        premake_etc_targets(h->fuse, up);
    } else {
        snprintf(up, sizeof(up), "%s/upper", upper);
        snprintf(work, sizeof(work), "%s/work", upper);
    }
    if ((size_t)snprintf(data, sizeof(data), "lowerdir=%s,upperdir=%s,workdir=%s,userxattr", lower, up, work) >=
        sizeof(data))
        return skiff_error(err, ENAMETOOLONG, "overlay options");
    if (skiff_mount_fs("overlay", "overlay", rootdirfd, 0, data, err) < 0) {
        if (h->writable)
            return skiff_err_wrap(err, "writable root (overlayfs in a user namespace needs Linux >= 5.11; "
                                       "run 'skiff doctor')");
        /* read-only needs no overlay: the lower itself, as a bind */
        skiff_err_clear(err);
        if (skiff_mount_bind(lower, rootdirfd, false, true, false, false, err) < 0)
            return skiff_err_wrap(err, "root");
    }
    int rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        return skiff_error(err, errno, "open %s", root);
    return rootfd;
}

static int bind_at(int rootfd, const char *src, const char *dst, bool file, bool rec, bool ro, bool keep_dev,
                   bool noexec, skiff_err *err)
{
    cleanup_close int t = file ? skiff_root_mkfile(rootfd, dst, err) : skiff_root_mkdirs(rootfd, dst, 0755, err);
    if (t < 0 || skiff_mount_bind(src, t, rec, ro, noexec, keep_dev, err) < 0)
        return skiff_err_wrap(err, "mount %s", dst);
    return 0;
}

static int tmpfs_at(int rootfd, const char *dst, const char *data, unsigned long extra, skiff_err *err)
{
    cleanup_close int t = skiff_root_mkdirs(rootfd, dst, 0755, err);
    if (t < 0 || skiff_mount_fs("tmpfs", "tmpfs", t, extra, data, err) < 0)
        return skiff_err_wrap(err, "mount %s", dst);
    return 0;
}

static int system_mounts(int rootfd, skiff_err *err)
{
    if (bind_at(rootfd, "/proc", "/proc", false, true, false, false, true, err) < 0 ||
        bind_at(rootfd, "/sys", "/sys", false, true, true, false, true, err) < 0 ||
        tmpfs_at(rootfd, "/dev", "mode=0755,size=64k", MS_NOEXEC, err) < 0)
        return -1;
    static const char *const devs[] = {"null", "zero", "full", "random", "urandom", "tty"};
    char p[32];
    for (size_t i = 0; i < sizeof(devs) / sizeof(devs[0]); i++) {
        snprintf(p, sizeof(p), "/dev/%s", devs[i]);
        if (bind_at(rootfd, p, p, true, false, false, true, true, err) < 0)
            return -1;
    }
    if (bind_at(rootfd, "/dev/pts", "/dev/pts", false, false, false, true, true, err) < 0 ||
        bind_at(rootfd, "/dev/shm", "/dev/shm", false, false, false, false, true, err) < 0)
        return -1;
    cleanup_close int devfd = skiff_root_open(rootfd, "/dev", O_PATH | O_DIRECTORY, err);
    if (devfd < 0)
        return -1;
    static const char *const links[][2] = {{"pts/ptmx", "ptmx"},       {"/proc/self/fd", "fd"},
                                           {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"},
                                           {"/proc/self/fd/2", "stderr"}};
    for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++)
        if (symlinkat(links[i][0], devfd, links[i][1]) < 0 && errno != EEXIST)
            return skiff_error(err, errno, "create /dev/%s", links[i][1]);
    if (tmpfs_at(rootfd, "/tmp", "mode=1777", 0, err) < 0)
        return -1;
    for (size_t i = 0; i < sizeof(etc_binds) / sizeof(etc_binds[0]); i++) {
        if (access(etc_binds[i], R_OK) != 0)
            continue;
        /* A read-only image without the file (or without /etc) has no place
         * to mount it; such an image starts without it rather than failing. */
        cleanup_close int t = skiff_root_mkfile(rootfd, etc_binds[i], err);
        if (t < 0 && err->code == EROFS)
            continue;
        if (t < 0 || skiff_mount_bind(etc_binds[i], t, false, true, true, false, err) < 0)
            return skiff_err_wrap(err, "mount %s", etc_binds[i]);
    }
    return 0;
}

static int apply_spec_list(int rootfd, const char *const *specs, skiff_err *err)
{
    for (size_t i = 0; specs && specs[i]; i++) {
        struct skiff_mount m;
        if (skiff_mountspec_parse(specs[i], &m, err) < 0)
            return -1;
        int rc = skiff_mount_apply(rootfd, &m, err);
        skiff_mount_free(&m);
        if (rc < 0)
            return -1;
    }
    return 0;
}

static int apply_fstab_file(int rootfd, const char *path, skiff_err *err)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return errno == ENOENT ? 0 : skiff_error(err, errno, "open %s", path);
    char *line = NULL;
    size_t cap = 0;
    int rv = 0;
    while (getline(&line, &cap, f) > 0) {
        struct skiff_mount m;
        if (skiff_mountspec_parse_fstab(line, &m, err) < 0) {
            rv = skiff_err_wrap(err, "hook mounts file");
            break;
        }
        if (!m.dst)
            continue;
        rv = skiff_mount_apply(rootfd, &m, err);
        skiff_mount_free(&m);
        if (rv < 0) {
            skiff_err_wrap(err, "hook mounts file");
            break;
        }
    }
    free(line);
    fclose(f);
    return rv;
}

static int read_env_file(const char *path, char ***env, skiff_err *err)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return errno == ENOENT ? 0 : skiff_error(err, errno, "open %s", path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rv = 0;
    while ((n = getline(&line, &cap, f)) > 0) {
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (!n || line[0] == '#')
            continue;
        if (env_set(env, line, err) < 0) {
            rv = skiff_err_wrap(err, "hook env file");
            break;
        }
    }
    free(line);
    fclose(f);
    return rv;
}

static int run_hooks(struct holder_ctx *h, char ***env, skiff_err *err)
{
    /* the configured directory, then $SKIFF_HOOKS_DIR (config.c may already
     * have copied it into hooks_dir: then it runs once) */
    const char *envdir = getenv("SKIFF_HOOKS_DIR");
    if (envdir && !strcmp(envdir, h->cfg->hooks_dir))
        envdir = NULL;
    const char *dirs[] = {h->cfg->hooks_dir, envdir ? envdir : "", NULL};
    if (!h->cfg->hooks_dir[0] && !(envdir && *envdir))
        return 0;
    char envfile[SKIFF_PATH_MAX + 16], mounts[SKIFF_PATH_MAX + 16], root[SKIFF_PATH_MAX + 8];
    if (stage_path(h, "hook.env", envfile, sizeof(envfile), err) < 0 ||
        stage_path(h, "hook.fstab", mounts, sizeof(mounts), err) < 0 ||
        stage_path(h, "root", root, sizeof(root), err) < 0)
        return -1;
    for (const char *p = envfile;; p = mounts) {
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
            return skiff_error(err, errno, "create %s", p);
        close(fd);
        if (p == mounts)
            break;
    }
    char **henv = NULL;
    char kv[SKIFF_PATH_MAX + 64];
    int rv = -1;
#define ADD(...)                                                                                              \
    do {                                                                                                      \
        snprintf(kv, sizeof(kv), __VA_ARGS__);                                                                \
        if (strv_push(&henv, kv, err) < 0)                                                                    \
            goto out;                                                                                         \
    } while (0)
    ADD("%s", DEFAULT_PATH);
    ADD("SKIFF_ROOTFS=%s", root);
    ADD("SKIFF_PID=%d", (int)getpid());
    ADD("SKIFF_ENV_FILE=%s", envfile);
    ADD("SKIFF_MOUNTS_FILE=%s", mounts);
    ADD("SKIFF_STATE_DIR=%s", h->state_dir);
    ADD("SKIFF_IMAGE=%s", h->image);
    ADD("SKIFF_CONTAINER_NAME=%s", h->o->name ? h->o->name : "");
    ADD("SKIFF_WRITABLE=%d", h->writable ? 1 : 0);
    ADD("SKIFF_REMAP_ROOT=%d", h->o->remap_root ? 1 : 0);
    ADD("SKIFF_UID=%u", (unsigned)geteuid());
    ADD("SKIFF_GID=%u", (unsigned)getegid());
    for (size_t i = 0; h->o->hook_env && h->o->hook_env[i]; i++)
        if (env_set(&henv, h->o->hook_env[i], err) < 0)
            goto out;
#undef ADD
    int timeout_ms = (h->o->hook_timeout_s > 0 ? h->o->hook_timeout_s : 60) * 1000;
    if (skiff_hooks_run(dirs, (const char *const *)henv, timeout_ms, err) < 0)
        goto out;
    cleanup_close int rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0) {
        skiff_error(err, errno, "open %s", root);
        goto out;
    }
    if (read_env_file(envfile, env, err) < 0 || apply_fstab_file(rootfd, mounts, err) < 0)
        goto out;
    rv = 0;
out:
    skiff_strv_free(henv);
    return rv;
}

/* skiff_container_argv's choice, from the image's Entrypoint and Cmd. */
static int build_argv(char *const *entrypoint, char *const *cmd, bool use_entrypoint, char *const *user_argv,
                      char ***argvp, skiff_err *err)
{
    char **v = calloc(1, sizeof(char *));
    if (!v)
        return skiff_error(err, ENOMEM, "argv");
    bool have_user = user_argv && user_argv[0];
    if (use_entrypoint)
        for (size_t i = 0; entrypoint && entrypoint[i]; i++)
            if (strv_push(&v, entrypoint[i], err) < 0)
                goto fail;
    char *const *rest = have_user ? user_argv : cmd;
    for (size_t i = 0; rest && rest[i]; i++)
        if (strv_push(&v, rest[i], err) < 0)
            goto fail;
    if (!v[0]) {
        skiff_error(err, EINVAL, "no command given and the image defines no Entrypoint or Cmd");
        goto fail;
    }
    *argvp = v;
    return 0;
fail:
    skiff_strv_free(v);
    return -1;
}

/* The value of the last PATH= in env, or NULL. */
static const char *path_in(const char *const *env, const char *found)
{
    for (size_t i = 0; env && env[i]; i++)
        if (!strncmp(env[i], "PATH=", 5))
            found = env[i] + 5;
    return found;
}

/* Starts warming the executable the caller will run (see warm.h): the same
 * choice of argv[0] as skiff_container_argv, the PATH the command will get
 * (hooks aside), the working directory it will start in. */
static void warm_command(const struct skiff_start_opts *o, const struct image_config *ic, int rootfd)
{
    char **argv = NULL;
    skiff_err e;
    if (o->no_warm || build_argv(ic->entrypoint, ic->cmd, o->use_entrypoint, o->command, &argv, &e) < 0)
        return; /* nothing to run: the caller says so when it asks */
    const char *path = path_in(o->env, path_in((const char *const *)ic->env, DEFAULT_PATH + 5));
    const char *wd = o->workdir && *o->workdir ? o->workdir : ic->workdir[0] ? ic->workdir : "/";
    (void)skiff_warm_start(rootfd, argv[0], path, wd);
    skiff_strv_free(argv);
}

/* Writes "skiff: start: WHAT: strerror(e)" to stderr with write(2) alone. */
static void child_fail(const char *what, const char *arg, int e)
{
    char msg[512];
    int n = snprintf(msg, sizeof(msg), "skiff: start: %s%s%s: %s\n", what, arg ? " " : "", arg ? arg : "",
                     strerror(e));
    if (n > 0)
        (void)!write(2, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
}

struct spawn_args {
    const struct holder_ctx *h;
    char **argv, **envp;
    const char *wd;
};

/* The spawned command's side, until exec. It shares the holder's memory
 * (CLONE_VM, the holder waits: CLONE_VFORK) and the holder has another
 * thread (the warm): system calls only, on its own stack, everything it
 * needs prepared before. */
static int spawned(void *arg)
{
    const struct spawn_args *a = arg;
    /* dies with the caller, as a joined child would */
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != a->h->caller)
        _exit(125);
    skiff_err e;
    if (chdir(a->wd) < 0) {
        child_fail("working directory", a->wd, errno);
        _exit(125);
    }
    if (skiff_caps_drop_all(&e) < 0) {
        child_fail(e.msg, NULL, e.code);
        _exit(125);
    }
    close_range(3, ~0U, 0); /* no holder fd into the command */
    sigprocmask(SIG_SETMASK, &a->h->caller_mask, NULL);
    extern char **environ;
    environ = a->envp; /* execvp searches the container's PATH */
    execvp(a->argv[0], a->argv);
    int en = errno;
    child_fail("exec", a->argv[0], en);
    _exit(en == ENOENT ? 127 : 126);
}

/* opts->spawn: the command, cloned from the holder (inside the namespaces,
 * after pivot_root) as a child of the caller (CLONE_PARENT), so that the
 * caller waits for it and its signals reach it as with a join, without the
 * join; like vfork, nothing of the holder is copied for an exec. */
static pid_t spawn_command(const struct holder_ctx *h, char **argv, char **envp, const char *wd, skiff_err *err)
{
    const size_t stack_size = 64 << 10;
    char *stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED)
        return skiff_error(err, errno, "start the command: stack");
    struct spawn_args a = {.h = h, .argv = argv, .envp = envp, .wd = wd};
    pid_t pid = clone(spawned, stack + stack_size, CLONE_VM | CLONE_VFORK | CLONE_PARENT | SIGCHLD, &a);
    int e = errno;
    munmap(stack, stack_size); /* the child has exec'ed or exited */
    if (pid < 0)
        return skiff_error(err, e, "start the command");
    return pid;
}

int skiff_env_add_defaults(char ***env, const char *const *defaults, skiff_err *err)
{
    for (size_t i = 0; defaults && defaults[i]; i++) {
        const char *eq = strchr(defaults[i], '=');
        if (!eq)
            continue;
        bool have = false;
        for (size_t j = 0; *env && (*env)[j] && !have; j++)
            have = !strncmp((*env)[j], defaults[i], (size_t)(eq - defaults[i]) + 1);
        if (!have && strv_push(env, defaults[i], err) < 0)
            return -1;
    }
    return 0;
}

static int holder_setup(struct holder_ctx *h, struct skiff_recbuf *out, skiff_err *err)
{
    const struct skiff_start_opts *o = h->o;
    char mnt[SKIFF_PATH_MAX + 8];
    if (check_private_dir(h->cfg->runtime_path, err) < 0 || check_private_dir(h->state_dir, err) < 0)
        return -1;
    if (o->name) {
        /* held (fd left open) until the holder exits: one user at a time of
         * the persistent upper layer */
        int lock = skiff_named_lock(h->cfg, o->name, err);
        if (lock < 0)
            return -1;
        (void)lock;
    }
    snprintf(mnt, sizeof(mnt), "%s/mnt", h->state_dir);
    if (mkdir(mnt, 0700) < 0 && errno != EEXIST)
        return skiff_error(err, errno, "create %s", mnt);
    if (o->mount_home) {
        /* before the namespace: inside it, getuid() may be 0 (remap-root) */
        struct passwd *pw = getpwuid(getuid());
        if (!pw || !pw->pw_dir || pw->pw_dir[0] != '/')
            return skiff_error(err, ENOENT, "--mount-home: no home directory for uid %u", (unsigned)getuid());
        if ((size_t)snprintf(h->home, sizeof(h->home), "%s", pw->pw_dir) >= sizeof(h->home))
            return skiff_error(err, ENAMETOOLONG, "home directory");
    }
    if (skiff_ns_create(o->unshare_flags, o->remap_root || h->rootfs_only, err) < 0)
        return -1;
    skiff_trace(o->trace, "holder: namespaces");
    if (o->die_with_parent)
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    /* everything below lives on this tmpfs, visible only in our namespace */
    if (mount("tmpfs", mnt, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700") < 0)
        return skiff_error(err, errno, "mount staging tmpfs on %s", mnt);
    if ((size_t)snprintf(h->stage, sizeof(h->stage), "%s", mnt) >= sizeof(h->stage))
        return skiff_error(err, ENAMETOOLONG, "staging path");
    cleanup_close int rootfd = assemble_rootfs(h, err);
    if (rootfd < 0)
        return -1;
    skiff_trace(o->trace, "holder: rootfs (lower + overlay)");
    if (h->rootfs_only)
        return 0;
    /* the image config first (it is the image's own file, under no mount):
     * it names the command to warm while the rest is set up */
    struct image_config ic = {0};
    char **env = NULL;
    int rv = -1;
    if (read_image_config(rootfd, &ic, err) < 0)
        goto out;
    warm_command(o, &ic, rootfd);
    skiff_trace(o->trace, "holder: image config, warm");
    if (system_mounts(rootfd, err) < 0) {
        skiff_err_wrap(err, "system mounts");
        goto out;
    }
    skiff_trace(o->trace, "holder: system mounts");
    if (o->mount_home && bind_at(rootfd, h->home, h->home, false, true, false, false, false, err) < 0) {
        skiff_err_wrap(err, "home directory");
        goto out;
    }
    if (apply_spec_list(rootfd, o->mounts, err) < 0)
        goto out;
    if (env_set(&env, DEFAULT_PATH, err) < 0)
        goto out;
    for (size_t i = 0; ic.env && ic.env[i]; i++)
        if (env_set(&env, ic.env[i], err) < 0) {
            skiff_err_wrap(err, "image Env");
            goto out;
        }
    if (run_hooks(h, &env, err) < 0)
        goto out;
    skiff_trace(o->trace, "holder: hooks");
    for (size_t i = 0; o->env && o->env[i]; i++)
        if (env_set(&env, o->env[i], err) < 0)
            goto out;
    const char *wd = o->workdir && *o->workdir ? o->workdir : ic.workdir[0] ? ic.workdir : "/";
    if (wd[0] != '/') {
        skiff_error(err, EINVAL, "working directory '%s' is not absolute", wd);
        goto out;
    }
    {
        cleanup_close int wfd = skiff_root_open(rootfd, wd, O_PATH | O_DIRECTORY, err);
        if (wfd < 0) {
            skiff_err_wrap(err, "working directory");
            goto out;
        }
    }
    if (!h->writable && skiff_mount_setattr(rootfd, false, true, err) < 0) {
        skiff_err_wrap(err, "make the root read-only");
        goto out;
    }
    char pid[16];
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    char server[16];
    snprintf(server, sizeof(server), "%d", (int)skiff_fuse_server_pid(h->fuse));
    if (skiff_rec_put(out, 'H', pid, err) < 0 || skiff_rec_put(out, 'W', wd, err) < 0 ||
        (h->fuse && skiff_rec_put(out, 'F', server, err) < 0))
        goto out;
    for (size_t i = 0; env[i]; i++)
        if (skiff_rec_put(out, 'E', env[i], err) < 0)
            goto out;
    for (size_t i = 0; ic.entrypoint && ic.entrypoint[i]; i++)
        if (skiff_rec_put(out, 'P', ic.entrypoint[i], err) < 0)
            goto out;
    for (size_t i = 0; ic.cmd && ic.cmd[i]; i++)
        if (skiff_rec_put(out, 'C', ic.cmd[i], err) < 0)
            goto out;
    skiff_trace(o->trace, "holder: env, workdir, read-only");
    {
        /* state for `skiff exec`, written atomically */
        char tmp[SKIFF_PATH_MAX + 16], fin[SKIFF_PATH_MAX + 16];
        snprintf(tmp, sizeof(tmp), "%s/" STATE_FILE ".tmp", h->state_dir);
        snprintf(fin, sizeof(fin), "%s/" STATE_FILE, h->state_dir);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 || skiff_write_all(fd, out->p, out->len) < 0 || close(fd) < 0 || rename(tmp, fin) < 0) {
            skiff_error(err, errno, "write %s", fin);
            goto out;
        }
    }
    skiff_trace(o->trace, "holder: state written");
    /* enter the root: pivot_root(".", ".") stacks the old root on the new
     * one; detaching it leaves only the container's tree in this namespace */
    if (fchdir(rootfd) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0 ||
        chdir("/") < 0) {
        skiff_error(err, errno, "pivot_root into the container");
        goto out;
    }
    skiff_trace(o->trace, "holder: pivot_root, ready");
    if (o->spawn) {
        char **argv = NULL;
        char num[16];
        pid_t cmd;
        if (skiff_env_add_defaults(&env, o->default_env, err) < 0 ||
            build_argv(ic.entrypoint, ic.cmd, o->use_entrypoint, o->command, &argv, err) < 0)
            goto out;
        cmd = spawn_command(h, argv, env, wd, err);
        skiff_strv_free(argv);
        if (cmd < 0)
            goto out;
        snprintf(num, sizeof(num), "%d", (int)cmd);
        if (skiff_rec_put(out, 'X', num, err) < 0) {
            kill(cmd, SIGKILL); /* the caller will not know of it */
            goto out;
        }
        skiff_trace(o->trace, "holder: command started");
    }
    rv = 0;
out:
    skiff_strv_free(env);
    skiff_strv_free(ic.env);
    skiff_strv_free(ic.entrypoint);
    skiff_strv_free(ic.cmd);
    return rv;
}

/* Points stdin and stdout (and stderr when all) at /dev/null. */
static void null_stdio(bool all)
{
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0)
        return;
    dup2(null, 0);
    dup2(null, 1);
    if (all)
        dup2(null, 2);
    close(null);
}

/* Keeps fds 0-2 (stdin and stdout to /dev/null unless keep_stdio), keep1
 * and keep2; closes the rest so the holder holds none of the caller's
 * sockets or pipes. */
static void close_stray_fds(int keep1, int keep2, bool keep_stdio)
{
    if (!keep_stdio)
        null_stdio(false);
    const int keep[] = {keep1, keep2};
    skiff_close_fds_except(keep, 2);
}

static void holder_main(struct holder_ctx *h, int wfd)
{
    /* The holder ignores job-control and terminal signals (they are meant for
     * the command); it dies by SIGKILL from stop, or with its parent. */
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &h->caller_mask);
    prctl(PR_SET_NAME, "skiff-holder", 0, 0, 0);
    /* the spawned command gets the caller's stdio and signal mask */
    close_stray_fds(wfd, h->o->fuse_fd, h->o->spawn);
    skiff_err err;
    skiff_err_clear(&err);
    struct skiff_recbuf out = {0};
    int rc = holder_setup(h, &out, &err);
    int32_t status = rc;
    if (skiff_write_all(wfd, &status, sizeof(status)) < 0)
        _exit(1);
    if (rc < 0) {
        skiff_fuse_stop(h->fuse); /* gone before our parent reaps us */
        (void)skiff_write_all(wfd, &err, sizeof(err));
        _exit(1);
    }
    (void)skiff_write_all(wfd, out.p, out.len);
    close(wfd);
    free(out.p);
    null_stdio(!h->o->trace);
    for (;;)
        pause(); /* all signals blocked: only SIGKILL ends us */
}

static int resolve_image(const struct skiff_config *cfg, const struct skiff_start_opts *o, struct holder_ctx *h,
                         skiff_err *err)
{
    h->writable = o->writable;
    if (o->name) {
        char dir[SKIFF_PATH_MAX];
        if (skiff_named_dir(cfg, o->name, dir, sizeof(dir), err) < 0)
            return -1;
        if (!o->image && skiff_named_image(cfg, o->name, h->image, sizeof(h->image), err) < 0)
            return -1;
        snprintf(h->upper, sizeof(h->upper), "%s", dir);
        h->writable = true;
    }
    if (o->image) {
        if (!o->image[0])
            return skiff_error(err, EINVAL, "empty image path");
        if (o->image[0] == '/')
            snprintf(h->image, sizeof(h->image), "%s", o->image);
        else if (!realpath(o->image, h->image))
            return skiff_error(err, errno, "image %s", o->image);
    }
    if (!h->image[0])
        return skiff_error(err, EINVAL, "no image given");
    return 0;
}

/* The holder's report is bounded: its env and argv, a few KiB normally. */
#define REPLY_MAX (16u << 20)

static int read_reply(int rfd, pid_t pid, struct skiff_container *c, skiff_err *err)
{
    int32_t status;
    char *data = NULL;
    size_t len = 0;
    if (skiff_rec_read_fd(rfd, REPLY_MAX, 0, 0, &data, &len, NULL, err) < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        c->holder = 0;
        return skiff_err_wrap(err, "container setup process");
    }
    int rv = -1;
    if (len < sizeof(status)) {
        int st = 0;
        waitpid(pid, &st, 0);
        c->holder = 0;
        if (WIFSIGNALED(st))
            skiff_error(err, 0, "container setup process was killed by signal %d", WTERMSIG(st));
        else
            skiff_error(err, 0, "container setup process exited (status %d) without a report",
                        WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        goto out;
    }
    memcpy(&status, data, sizeof(status));
    if (status < 0) {
        if (len >= sizeof(status) + sizeof(*err))
            memcpy(err, data + sizeof(status), sizeof(*err));
        else
            skiff_error(err, 0, "container setup failed");
        err->msg[sizeof(err->msg) - 1] = '\0';
        waitpid(pid, NULL, 0);
        c->holder = 0;
        goto out;
    }
    rv = parse_records(data + sizeof(status), len - sizeof(status), c, err);
    c->holder = pid; /* the pid as we see it */
out:
    free(data);
    return rv;
}

/* Whether pid's parent is parent. */
static bool is_child_of(pid_t pid, pid_t parent)
{
    char state;
    int ppid;
    return proc_state(pid, &state, &ppid) == 0 && ppid == (int)parent;
}

int skiff_container_start(const struct skiff_config *cfg, const struct skiff_start_opts *opts,
                          struct skiff_container *c, skiff_err *err)
{
    memset(c, 0, sizeof(*c));
    c->server_pidfd = -1;
    struct holder_ctx h = {.cfg = cfg, .o = opts};
    if (resolve_image(cfg, opts, &h, err) < 0)
        return skiff_err_wrap(err, "start");
    /* validate mount specs before forking: a typo gets its message at once */
    for (size_t i = 0; opts->mounts && opts->mounts[i]; i++) {
        struct skiff_mount m;
        if (skiff_mountspec_parse(opts->mounts[i], &m, err) < 0)
            return skiff_err_wrap(err, "start");
        skiff_mount_free(&m);
    }
    for (size_t i = 0; opts->env && opts->env[i]; i++)
        if (!strchr(opts->env[i], '=') || opts->env[i][0] == '=')
            return skiff_error(err, EINVAL, "start: environment entry '%s' is not KEY=VALUE", opts->env[i]);
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return skiff_error(err, errno, "start: pipe");
    if (opts->state_key && opts->state_key[0] &&
        state_dir_for(cfg, opts->state_key, 0, c->state_dir, err) < 0) {
        close(p[0]);
        close(p[1]);
        return skiff_err_wrap(err, "start");
    }
    pid_t parent = getpid();
    h.caller = parent;
    skiff_trace(opts->trace, "start: fork holder");
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return skiff_error(err, errno, "start: fork");
    }
    if (pid == 0) {
        close(p[0]);
        if (opts->die_with_parent) {
            prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
            if (getppid() != parent)
                _exit(1);
        }
        if (!c->state_dir[0]) {
            skiff_err e2;
            state_dir_for(cfg, NULL, getpid(), c->state_dir, &e2);
        }
        h.state_dir = c->state_dir;
        holder_main(&h, p[1]);
        _exit(1);
    }
    close(p[1]);
    if (!c->state_dir[0])
        state_dir_for(cfg, NULL, pid, c->state_dir, err);
    c->owns_state = true;
    c->trace = opts->trace;
    int rc = read_reply(p[0], pid, c, err);
    close(p[0]);
    skiff_trace(opts->trace, "start: holder ready");
    if (rc < 0) {
        remove_state(c->state_dir);
        skiff_strv_free(c->env);
        skiff_strv_free(c->entrypoint);
        skiff_strv_free(c->cmd);
        c->env = c->entrypoint = c->cmd = NULL;
        if (c->holder > 0) {
            kill(c->holder, SIGKILL);
            waitpid(c->holder, NULL, 0);
            c->holder = 0;
        }
        return skiff_err_wrap(err, "start");
    }
    c->holder = pid;
    /* while the holder lives, so does its server (PR_SET_PDEATHSIG): this
     * pidfd is the server's, and stop can kill both at once */
    if (c->server > 0 && (c->server_pidfd = pidfd_open(c->server, 0)) >= 0 && !is_child_of(c->server, pid)) {
        close(c->server_pidfd); /* (not the server: it has died, its pid is reused) */
        c->server_pidfd = -1;
    }
    c->subreaper = opts->subreaper;
    if (c->subreaper) {
        char nsp[64];
        struct stat ns;
        snprintf(nsp, sizeof(nsp), "/proc/%d/ns/mnt", (int)pid);
        if (stat(nsp, &ns) == 0) {
            c->mntns_dev = ns.st_dev;
            c->mntns_ino = ns.st_ino;
        }
    }
    return 0;
}

int skiff_container_join(pid_t holder, const char *workdir, skiff_err *err)
{
    if (skiff_ns_join(holder, err) < 0)
        return skiff_err_wrap(err, "join container");
    if (workdir && *workdir && chdir(workdir) < 0)
        return skiff_error(err, errno, "join container: working directory %s", workdir);
    if (skiff_caps_drop_all(err) < 0)
        return skiff_err_wrap(err, "join container");
    return 0;
}

int skiff_container_env(const struct skiff_container *c, char ***envp, skiff_err *err)
{
    *envp = strv_dup(c->env, err);
    return *envp ? 0 : -1;
}

int skiff_container_argv(const struct skiff_container *c, bool use_entrypoint, char *const *user_argv,
                         char ***argvp, skiff_err *err)
{
    return build_argv(c->entrypoint, c->cmd, use_entrypoint, user_argv, argvp, err);
}

/* Kills the processes left in the container's mount namespace (a command's
 * background children): without a PID namespace they are found by their
 * /proc/PID/ns/mnt, compared with the holder's (ns = its stat). */
static void kill_leftovers(pid_t holder, const struct stat *ns)
{
    char p[64];
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *e;
    pid_t self = getpid();
    while ((e = readdir(d))) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid == holder || pid == self)
            continue;
        struct stat st;
        snprintf(p, sizeof(p), "/proc/%d/ns/mnt", (int)pid);
        if (stat(p, &st) == 0 && st.st_ino == ns->st_ino && st.st_dev == ns->st_dev) {
            /* wait until it is dead (not reaped: its parent may be init),
             * so nothing of the container runs once stop returns */
            int pfd = pidfd_open(pid, 0);
            kill(pid, SIGKILL);
            if (pfd >= 0) {
                struct pollfd pf = {.fd = pfd, .events = POLLIN};
                poll(&pf, 1, 2000);
                close(pfd);
            }
        }
    }
    closedir(d);
}

/* The FUSE server dies with the holder anyway (PR_SET_PDEATHSIG), but only
 * once the holder has torn its namespace down: killed now, both exit at
 * once. */
static void kill_server(struct skiff_container *c)
{
    if (c->server_pidfd < 0)
        return;
    pidfd_send_signal(c->server_pidfd, SIGKILL, NULL, 0);
    close(c->server_pidfd);
    c->server_pidfd = -1;
}

#define JOINED_FILE "joined"

int skiff_container_mark_joined(const struct skiff_container *c, skiff_err *err)
{
    if (!c->state_dir[0])
        return skiff_error(err, ENOENT, "container state directory unknown");
    char p[SKIFF_PATH_MAX + 16];
    snprintf(p, sizeof(p), "%s/" JOINED_FILE, c->state_dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return skiff_error(err, errno, "mark %s as joined", c->state_dir);
    close(fd);
    return 0;
}

/* Subreaper stop: SIGKILLs every child of ours and reaps it, until none is
 * left (orphans of the container come to us as their parents die). -1
 * when /proc cannot list our children. */
static int kill_children(void)
{
    char p[64];
    snprintf(p, sizeof(p), "/proc/self/task/%d/children", (int)getpid());
    for (;;) {
        char buf[4096];
        cleanup_close int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return -1;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        if (n < 0)
            return -1; /* (waiting blind could wait for a child never killed) */
        buf[n] = '\0';
        for (char *q = buf, *end; *q; q = end) {
            long pid = strtol(q, &end, 10);
            if (end == q)
                break;
            if (pid > 0)
                kill((pid_t)pid, SIGKILL);
        }
        if (waitpid(-1, NULL, 0) < 0 && errno == ECHILD)
            return 0;
    }
}

static bool was_joined(const char *state_dir)
{
    char p[SKIFF_PATH_MAX + 16];
    snprintf(p, sizeof(p), "%s/" JOINED_FILE, state_dir);
    return state_dir[0] && access(p, F_OK) == 0;
}

int skiff_container_stop(struct skiff_container *c, skiff_err *err)
{
    (void)err;
    if (c->subreaper && (c->holder > 0 || c->mntns_ino)) {
        /* the holder first: once it is reaped, nobody can join any more,
         * so the mark below is final */
        if (c->holder > 0) {
            kill(c->holder, SIGKILL);
            kill_server(c);
            while (waitpid(c->holder, NULL, 0) < 0 && errno == EINTR)
                ;
            c->holder = 0;
        }
        skiff_trace(c->trace, "stop: holder reaped");
        if (was_joined(c->state_dir) && c->mntns_ino) {
            struct stat ns = {.st_dev = c->mntns_dev, .st_ino = c->mntns_ino};
            kill_leftovers(0, &ns);
        }
        if (kill_children() < 0 && c->mntns_ino) {
            struct stat ns = {.st_dev = c->mntns_dev, .st_ino = c->mntns_ino};
            kill_leftovers(0, &ns);
        }
        c->mntns_ino = 0;
        skiff_trace(c->trace, "stop: children reaped");
    }
    if (c->holder > 0) {
        /* kill first, clean up while the kernel tears the namespace down,
         * reap last */
        char p[64];
        struct stat ns;
        snprintf(p, sizeof(p), "/proc/%d/ns/mnt", (int)c->holder);
        bool have_ns = stat(p, &ns) == 0;
        int pfd = pidfd_open(c->holder, 0);
        kill(c->holder, SIGKILL);
        kill_server(c);
        if (have_ns)
            kill_leftovers(c->holder, &ns);
        skiff_trace(c->trace, "stop: killed");
        if (waitpid(c->holder, NULL, 0) < 0 && errno == ECHILD && pfd >= 0) {
            /* not our child: wait until it is gone */
            struct pollfd pf = {.fd = pfd, .events = POLLIN};
            poll(&pf, 1, 5000);
        }
        if (pfd >= 0)
            close(pfd);
        c->holder = 0;
        skiff_trace(c->trace, "stop: holder reaped");
    }
    kill_server(c); /* (its holder was gone already) */
    if (c->owns_state && c->state_dir[0])
        remove_state(c->state_dir);
    c->state_dir[0] = '\0';
    skiff_strv_free(c->env);
    skiff_strv_free(c->entrypoint);
    skiff_strv_free(c->cmd);
    c->env = c->entrypoint = c->cmd = NULL;
    return 0;
}

void skiff_container_free(struct skiff_container *c)
{
    if (c->server_pidfd >= 0)
        close(c->server_pidfd);
    c->server_pidfd = -1;
    skiff_strv_free(c->env);
    skiff_strv_free(c->entrypoint);
    skiff_strv_free(c->cmd);
    c->env = c->entrypoint = c->cmd = NULL;
    c->holder = 0;
}

int skiff_container_load(const struct skiff_config *cfg, pid_t pid, struct skiff_container *c, skiff_err *err)
{
    memset(c, 0, sizeof(*c));
    c->server_pidfd = -1;
    char p[64];
    struct stat want;
    snprintf(p, sizeof(p), "/proc/%d/ns/mnt", (int)pid);
    if (stat(p, &want) < 0)
        return skiff_error(err, errno, "process %d (is it running, and yours?)", (int)pid);
    DIR *d = opendir(cfg->runtime_path);
    if (!d)
        return skiff_error(err, errno, "no running containers (%s)", cfg->runtime_path);
    struct dirent *e;
    int rv = -1;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char sp[SKIFF_PATH_MAX + 300];
        snprintf(sp, sizeof(sp), "%s/%s/" STATE_FILE, cfg->runtime_path, e->d_name);
        cleanup_close int fd = open(sp, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            continue;
        char buf[1 << 16];
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0)
            continue;
        struct skiff_container t = {0};
        skiff_err e2;
        if (parse_records(buf, (size_t)n, &t, &e2) == 0 && t.holder > 0) {
            struct stat hs;
            snprintf(p, sizeof(p), "/proc/%d/ns/mnt", (int)t.holder);
            if (stat(p, &hs) == 0 && hs.st_ino == want.st_ino && hs.st_dev == want.st_dev) {
                *c = t;
                if ((size_t)snprintf(c->state_dir, sizeof(c->state_dir), "%s/%s", cfg->runtime_path,
                                     e->d_name) >= sizeof(c->state_dir))
                    c->state_dir[0] = '\0';
                c->owns_state = false;
                rv = 0;
                break;
            }
        }
        skiff_strv_free(t.env);
        skiff_strv_free(t.entrypoint);
        skiff_strv_free(t.cmd);
    }
    closedir(d);
    if (rv < 0)
        skiff_error(err, ESRCH, "process %d is not in a skiff container of yours (see 'skiff list')", (int)pid);
    return rv;
}

/* ---- rootfs-only assembly for export ---- */

int skiff_container_export(const struct skiff_config *cfg, const char *name, const char *out_path,
                           skiff_err *err)
{
    struct skiff_start_opts o;
    skiff_start_opts_init(&o);
    o.name = name;
    struct holder_ctx h = {.cfg = cfg, .o = &o, .rootfs_only = true};
    if (resolve_image(cfg, &o, &h, err) < 0)
        return skiff_err_wrap(err, "export %s", name);
    char abs_out[SKIFF_PATH_MAX];
    if (out_path[0] == '/')
        snprintf(abs_out, sizeof(abs_out), "%s", out_path);
    else {
        char cwd[SKIFF_PATH_MAX - 256];
        if (!getcwd(cwd, sizeof(cwd)))
            return skiff_error(err, errno, "export: current directory");
        snprintf(abs_out, sizeof(abs_out), "%s/%s", cwd, out_path);
    }
    char state_dir[SKIFF_PATH_MAX];
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return skiff_error(err, errno, "export: pipe");
    pid_t pid = fork();
    if (pid < 0)
        return skiff_error(err, errno, "export: fork");
    if (pid == 0) {
        close(p[0]);
        skiff_err e;
        skiff_err_clear(&e);
        int rc = state_dir_for(cfg, NULL, getpid(), state_dir, &e);
        h.state_dir = state_dir;
        if (rc == 0)
            rc = holder_setup(&h, NULL, &e);
        char root[SKIFF_PATH_MAX + 8];
        snprintf(root, sizeof(root), "%s/root", h.stage);
        if (rc == 0)
            rc = skiff_squash_from_dir(cfg, root, abs_out, &e);
        skiff_fuse_stop(h.fuse);
        if (rc < 0)
            (void)skiff_write_all(p[1], &e, sizeof(e));
        _exit(rc < 0 ? 1 : 0);
    }
    close(p[1]);
    skiff_err child;
    ssize_t n;
    while ((n = read(p[0], &child, sizeof(child))) < 0 && errno == EINTR)
        ;
    close(p[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    state_dir_for(cfg, NULL, pid, state_dir, err);
    remove_state(state_dir);
    if (n == (ssize_t)sizeof(child)) {
        *err = child;
        err->msg[sizeof(err->msg) - 1] = '\0';
        return skiff_err_wrap(err, "export %s", name);
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return skiff_error(err, 0, "export %s: the export process failed", name);
    return 0;
}
