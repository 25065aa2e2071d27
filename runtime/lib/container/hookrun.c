/* See hookrun.h; skiff_hooks_container (the hook ABI of doc/hooks.md: the
 * environment, the env file and the mounts file) in container_int.h. */
#include "hookrun.h"
#include "container_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mount.h"
#include "mountspec.h"
#include "rootfs.h"
#include "spawn.h"

struct hook {
    char name[NAME_MAX + 1];
    char path[PATH_MAX];
    size_t dir; /* index of its directory in dirs */
};

/* By name; a name in two directories runs from the earlier one first (the
 * admin's before the user's): qsort alone is not stable. */
static int cmp_hook(const void *a, const void *b)
{
    const struct hook *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->dir > y->dir) - (x->dir < y->dir);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a > b && !strcmp(s + a - b, suffix);
}

static int collect(const char *dir, size_t dir_index, const char *suffix, struct hook **list, size_t *n, skiff_err *err)
{
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return 0;
        return skiff_error(err, errno, "open hooks directory %s", dir);
    }
    struct dirent *e;
    int rv = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || (suffix && !ends_with(e->d_name, suffix)))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, 0) < 0 || !S_ISREG(st.st_mode) ||
            faccessat(dirfd(d), e->d_name, X_OK, 0) < 0)
            continue; /* not an executable file: documentation, disabled hooks */
        struct hook *nl = realloc(*list, (*n + 1) * sizeof(**list));
        if (!nl) {
            rv = skiff_error(err, ENOMEM, "hooks");
            break;
        }
        *list = nl;
        snprintf(nl[*n].name, sizeof(nl[*n].name), "%s", e->d_name);
        nl[*n].dir = dir_index;
        if ((size_t)snprintf(nl[*n].path, sizeof(nl[*n].path), "%s/%s", dir, e->d_name) >= sizeof(nl[*n].path))
            continue;
        (*n)++;
    }
    closedir(d);
    return rv;
}

/* Appends "hook NAME: TEXT" to notice, TEXT's lines joined with "; ". */
static void add_notice(char *notice, size_t n, const char *name, const char *text)
{
    size_t o = strlen(notice);
    if (o + 1 >= n)
        return;
    int w = snprintf(notice + o, n - o, "%shook %s: ", o ? "; " : "", name);
    if (w < 0 || (size_t)w >= n - o)
        return;
    o += (size_t)w;
    for (const char *p = text; *p && o + 1 < n; p++) {
        if (*p == '\n') {
            if (o + 3 >= n)
                break;
            notice[o++] = ';';
            notice[o++] = ' ';
        } else
            notice[o++] = *p;
    }
    notice[o] = '\0';
}

int skiff_hooks_run(const char *const *dirs, const char *suffix, const char *const *envp, int timeout_ms, char *notice,
                    size_t n_notice, skiff_err *err)
{
    struct hook *list = NULL;
    size_t n = 0;
    for (size_t i = 0; dirs && dirs[i]; i++)
        if (dirs[i][0] && collect(dirs[i], i, suffix, &list, &n, err) < 0) {
            free(list);
            return -1;
        }
    if (n > 1)
        qsort(list, n, sizeof(*list), cmp_hook);
    int rv = 0;
    for (size_t i = 0; i < n; i++) {
        const char *argv[] = {list[i].path, NULL};
        struct skiff_spawn_result r;
        if (skiff_spawn(argv, envp, -1, timeout_ms, 0, &r, err) < 0) {
            rv = skiff_err_wrap(err, "hook %s", list[i].path);
            break;
        }
        if (r.timed_out || !WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
            char how[64];
            skiff_spawn_describe(&r, timeout_ms, how, sizeof(how));
            rv = skiff_error(err, 0, "hook %s failed (%s)%s%s", list[i].path, how, r.err_tail[0] ? ": " : "",
                             r.err_tail);
            break;
        }
        if (r.err_tail[0]) { /* a successful hook's warnings still reach the user */
            fprintf(stderr, "skiff: hook %s: %s\n", list[i].name, r.err_tail);
            if (notice && n_notice)
                add_notice(notice, n_notice, list[i].name, r.err_tail);
        }
    }
    free(list);
    return rv;
}

/* ---- the hook ABI of a container start ---- */

int skiff_hooks_apply_fstab(int rootfd, const char *path, const char *what, skiff_err *err)
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
            rv = skiff_err_wrap(err, "%s", what);
            break;
        }
        if (!m.dst)
            continue;
        rv = skiff_mount_apply(rootfd, &m, err);
        skiff_mount_free(&m);
        if (rv < 0) {
            skiff_err_wrap(err, "%s", what);
            break;
        }
    }
    free(line);
    fclose(f);
    return rv;
}

int skiff_hooks_read_env(const char *path, char ***env, skiff_err *err)
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
        if (skiff_env_set(env, line, err) < 0) {
            rv = skiff_err_wrap(err, "hook env file");
            break;
        }
    }
    free(line);
    fclose(f);
    return rv;
}

int skiff_hooks_container(const struct skiff_holder *h, char ***env, char *notice, size_t n_notice, skiff_err *err)
{
    /* the admin's directory, then the user's extra one: both run (the same
     * directory named twice, once). The library reads no environment: the
     * front end passes the user's directory in the start options. */
    const char *extra = h->o->extra_hooks_dir;
    if (extra && !strcmp(extra, h->cfg->hooks_dir))
        extra = NULL;
    const char *dirs[] = {h->cfg->hooks_dir, extra ? extra : "", NULL};
    if (!h->cfg->hooks_dir[0] && !(extra && *extra))
        return 0;
    char envfile[SKIFF_PATH_MAX + 16], mounts[SKIFF_PATH_MAX + 16], root[SKIFF_PATH_MAX + 8];
    if (skiff_stage_path(h, "hook.env", envfile, sizeof(envfile), err) < 0 ||
        skiff_stage_path(h, "hook.fstab", mounts, sizeof(mounts), err) < 0 ||
        skiff_stage_path(h, "root", root, sizeof(root), err) < 0)
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
    /* declared before the first goto: a jump over a cleanup variable's
     * initialisation would close whatever its stack slot held */
    cleanup_close int rootfd = -1;
#define ADD(...)                                                                                                       \
    do {                                                                                                               \
        snprintf(kv, sizeof(kv), __VA_ARGS__);                                                                         \
        if (skiff_strv_push(&henv, kv, err) < 0)                                                                       \
            goto out;                                                                                                  \
    } while (0)
    ADD("%s", SKIFF_DEFAULT_PATH);
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
        if (skiff_env_set(&henv, h->o->hook_env[i], err) < 0)
            goto out;
#undef ADD
    int timeout_ms = (h->o->hook_timeout_s > 0 ? h->o->hook_timeout_s : 60) * 1000;
    if (skiff_hooks_run(dirs, NULL, (const char *const *)henv, timeout_ms, notice, n_notice, err) < 0)
        goto out;
    rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0) {
        skiff_error(err, errno, "open %s", root);
        goto out;
    }
    if (skiff_hooks_read_env(envfile, env, err) < 0 ||
        skiff_hooks_apply_fstab(rootfd, mounts, "hook mounts file", err) < 0)
        goto out;
    rv = 0;
out:
    skiff_strv_free(henv);
    return rv;
}
