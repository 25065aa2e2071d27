/* enroot's site configuration (container_int.h), for sites moving from
 * pyxis + enroot: with skiff.conf's enroot_compat = yes, every container
 * also gets what enroot would have applied from enroot_sysconf_path (and,
 * under the CLI, from the user's enroot_config_path):
 *
 *   environ.d, *.env    KEY=VALUE lines, ${VAR} from enroot's environment
 *                      (the caller's, or the job's under the plugin);
 *                      leading blanks, comments, ill-formed lines and
 *                      ENROOT_* variables dropped, surrounding quotes removed
 *   mounts.d, *.fstab   fstab lines (mountspec.h), ${VAR} as above, the target
 *                      inside the container's root; applied after skiff's
 *                      system mounts, before the user's own
 *   hooks.d, *.sh       executables, run after skiff's hooks with enroot's
 *                      contract: enroot's environment plus ENROOT_PID,
 *                      ENROOT_ROOTFS, ENROOT_ENVIRON (the container's
 *                      environment so far, one KEY=VALUE a line: what the
 *                      file holds afterwards is the environment),
 *                      ENROOT_MOUNTS (fstab lines they add, mounted after
 *                      them), ENROOT_REMAP_ROOT / ENROOT_MOUNT_HOME /
 *                      ENROOT_ROOTFS_WRITABLE ("y", or unset as enroot
 *                      leaves a false one) and the paths
 *
 * Files of a directory are taken in the byte order of their names, the
 * system's directory before the user's, as enroot's run-parts does. The
 * hooks run as skiff's own do (hookrun.c, doc/hooks.md): as the container's
 * user inside its namespaces, an argv of just their path, an explicit
 * environment, stdin /dev/null, a timeout; a failing one fails the start. */
#include "container_int.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"
#include "hookrun.h"
#include "mount.h"
#include "mountspec.h"

/* enroot's paths: the system's configuration, then (CLI only) the user's. */
static void config_dirs(const struct skiff_holder *h, const char *sub, char out[2][SKIFF_PATH_MAX + 16])
{
    snprintf(out[0], sizeof(out[0]), "%s/%s", h->cfg->enroot_sysconf_path, sub);
    out[1][0] = '\0';
    if (h->o->enroot_user_dir && h->o->enroot_user_dir[0])
        snprintf(out[1], sizeof(out[1]), "%s/%s", h->o->enroot_user_dir, sub);
}

/* NAME's value in enroot's environment (len bytes of name), or "". */
static const char *enroot_var(const struct skiff_holder *h, const char *name, size_t len)
{
    for (size_t i = 0; h->o->enroot_env && h->o->enroot_env[i]; i++)
        if (!strncmp(h->o->enroot_env[i], name, len) && h->o->enroot_env[i][len] == '=')
            return h->o->enroot_env[i] + len + 1;
    return "";
}

/* line with each ${NAME} replaced by its value (enroot substitutes only the
 * braced form), malloc'd. */
static char *substitute(const struct skiff_holder *h, const char *line)
{
    size_t cap = strlen(line) + 1, n = 0;
    char *out = malloc(cap);
    for (const char *p = line; out && *p;) {
        const char *name = p[0] == '$' && p[1] == '{' ? p + 2 : NULL;
        size_t len = 0;
        while (name && (name[len] == '_' || isalnum((unsigned char)name[len])))
            len++;
        if (!name || !len || isdigit((unsigned char)name[0]) || name[len] != '}') {
            out[n++] = *p++;
            continue;
        }
        const char *v = enroot_var(h, name, len);
        size_t vl = strlen(v);
        char *grown = realloc(out, cap + vl);
        if (!grown) {
            free(out);
            return NULL;
        }
        out = grown;
        cap += vl;
        memcpy(out + n, v, vl);
        n += vl;
        p = name + len + 1;
    }
    if (out)
        out[n] = '\0';
    return out;
}

/* One line of an enroot environment file into *env: leading blanks,
 * comments, lines that are not NAME=... and ENROOT_* dropped; a value in
 * matching quotes (blanks after them allowed) loses them. */
static int env_line(char *line, char ***env, skiff_err *err)
{
    line[strcspn(line, "\r\n")] = '\0';
    char *p = line + strspn(line, " \t");
    size_t k = 0;
    if (isalpha((unsigned char)*p) || *p == '_')
        while (isalnum((unsigned char)p[k]) || p[k] == '_')
            k++;
    if (!k || p[k] != '=' || !strncmp(p, "ENROOT_", 7))
        return 0;
    char *v = p + k + 1;
    size_t vl = strlen(v);
    while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t') && (v[0] == '"' || v[0] == '\''))
        vl--;
    if (vl >= 2 && (v[0] == '"' || v[0] == '\'') && v[vl - 1] == v[0]) {
        memmove(v, v + 1, vl - 2);
        v[vl - 2] = '\0';
    }
    return skiff_env_set(env, p, err);
}

/* The files of dir whose names end in suffix (and are longer), sorted;
 * directories skipped. A missing dir has none. */
static int list_files(const char *dir, const char *suffix, char ***out, skiff_err *err)
{
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT || errno == ENOTDIR ? 0 : skiff_error(err, errno, "open %s", dir);
    struct dirent *e;
    size_t sl = strlen(suffix);
    int rv = 0;
    while (rv == 0 && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        struct stat st;
        if (e->d_name[0] == '.' || l <= sl || strcmp(e->d_name + l - sl, suffix) ||
            fstatat(dirfd(d), e->d_name, &st, 0) < 0 || S_ISDIR(st.st_mode))
            continue;
        char p[SKIFF_PATH_MAX];
        rv = skiff_fmt_path(p, sizeof(p), err, "%s/%s", dir, e->d_name) < 0 ? -1 : skiff_strv_push(out, p, err);
    }
    closedir(d);
    size_t n = skiff_strv_len(*out);
    /* (full paths of one directory: the byte order of the names) */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && strcmp((*out)[j - 1], (*out)[j]) > 0; j--) {
            char *t = (*out)[j];
            (*out)[j] = (*out)[j - 1];
            (*out)[j - 1] = t;
        }
    return rv;
}

/* Calls fn on each line of each file (system's, then user's) of sub ending in suffix,
 * ${VAR} substituted; errors name the file. */
static int each_line(const struct skiff_holder *h, const char *sub, const char *suffix,
                     int (*fn)(const struct skiff_holder *h, char *line, void *arg, skiff_err *err), void *arg,
                     skiff_err *err)
{
    char dirs[2][SKIFF_PATH_MAX + 16];
    config_dirs(h, sub, dirs);
    for (int d = 0; d < 2; d++) {
        char **files = NULL;
        if (dirs[d][0] && list_files(dirs[d], suffix, &files, err) < 0)
            return -1;
        for (size_t i = 0; files && files[i]; i++) {
            FILE *f = fopen(files[i], "re");
            if (!f) {
                skiff_error(err, errno, "open %s", files[i]);
                skiff_strv_free(files);
                return -1;
            }
            char *line = NULL;
            size_t cap = 0;
            int rv = 0;
            while (rv == 0 && getline(&line, &cap, f) > 0) {
                char *s = substitute(h, line);
                rv = s ? fn(h, s, arg, err) : skiff_error(err, ENOMEM, "%s", files[i]);
                free(s);
            }
            free(line);
            fclose(f);
            if (rv < 0) {
                skiff_err_wrap(err, "%s", files[i]);
                skiff_strv_free(files);
                return -1;
            }
        }
        skiff_strv_free(files);
    }
    return 0;
}

static int environ_line(const struct skiff_holder *h, char *line, void *arg, skiff_err *err)
{
    (void)h;
    return env_line(line, arg, err);
}

int skiff_enroot_environ(const struct skiff_holder *h, char ***env, skiff_err *err)
{
    if (!h->cfg->enroot_compat)
        return 0;
    return each_line(h, "environ.d", ".env", environ_line, env, err) < 0 ? skiff_err_wrap(err, "enroot environ.d") : 0;
}

static int mount_line(const struct skiff_holder *h, char *line, void *arg, skiff_err *err)
{
    (void)h;
    int rootfd = *(int *)arg;
    struct skiff_mount m;
    if (skiff_mountspec_parse_fstab(line, &m, err) < 0)
        return -1;
    int rv = m.dst ? skiff_mount_apply(rootfd, &m, err) : 0;
    skiff_mount_free(&m);
    return rv;
}

int skiff_enroot_mounts(const struct skiff_holder *h, int rootfd, skiff_err *err)
{
    if (!h->cfg->enroot_compat)
        return 0;
    return each_line(h, "mounts.d", ".fstab", mount_line, &rootfd, err) < 0 ? skiff_err_wrap(err, "enroot mounts.d")
                                                                            : 0;
}

/* enroot's hook environment (see the top of this file). */
static int hook_env(const struct skiff_holder *h, const char *root, const char *envfile, const char *mounts,
                    char ***out, skiff_err *err)
{
    const struct skiff_config *c = h->cfg;
    const struct skiff_start_request *o = h->o;
    if (skiff_env_set(out, SKIFF_DEFAULT_PATH, err) < 0)
        return -1;
    for (size_t i = 0; o->enroot_env && o->enroot_env[i]; i++)
        if (strchr(o->enroot_env[i], '=') && skiff_env_set(out, o->enroot_env[i], err) < 0)
            return -1;
    for (size_t i = 0; o->hook_env && o->hook_env[i]; i++)
        if (skiff_env_set(out, o->hook_env[i], err) < 0)
            return -1;
    struct stat st;
    char kv[SKIFF_PATH_MAX + 64];
    const struct {
        const char *key, *value;
    } vars[] = {
        {"ENROOT_ROOTFS", root},
        {"ENROOT_ENVIRON", envfile},
        {"ENROOT_MOUNTS", mounts},
        {"ENROOT_SYSCONF_PATH", c->enroot_sysconf_path},
        {"ENROOT_CONFIG_PATH", c->enroot_config_path},
        {"ENROOT_DATA_PATH", c->data_path},
        {"ENROOT_CACHE_PATH", c->cache_path},
        {"ENROOT_RUNTIME_PATH", h->state_dir},
        {"ENROOT_TEMP_PATH", c->temp_path},
        {"ENROOT_VERSION", SKIFF_ENROOT_COMPAT_VERSION},
        /* enroot's own hooks source its shell library from there */
        {"ENROOT_LIBRARY_PATH", stat("/usr/lib/enroot", &st) == 0 && S_ISDIR(st.st_mode) ? "/usr/lib/enroot" : NULL},
        {"ENROOT_REMAP_ROOT", o->remap_root ? "y" : NULL},
        {"ENROOT_MOUNT_HOME", o->mount_home ? "y" : NULL},
        {"ENROOT_ROOTFS_WRITABLE", h->writable ? "y" : NULL},
    };
    snprintf(kv, sizeof(kv), "ENROOT_PID=%d", (int)getpid());
    if (skiff_env_set(out, kv, err) < 0)
        return -1;
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        if (!vars[i].value)
            continue;
        if ((size_t)snprintf(kv, sizeof(kv), "%s=%s", vars[i].key, vars[i].value) >= sizeof(kv))
            return skiff_error(err, ENAMETOOLONG, "%s", vars[i].key);
        if (skiff_env_set(out, kv, err) < 0)
            return -1;
    }
    return 0;
}

/* The environment so far into ENROOT_ENVIRON, one KEY=VALUE a line (a
 * value with a newline cannot be written so, and is left out). */
static int write_environ(const char *path, char *const *env, skiff_err *err)
{
    FILE *f = fopen(path, "wxe");
    if (!f)
        return skiff_error(err, errno, "create %s", path);
    for (size_t i = 0; env && env[i]; i++)
        if (!strchr(env[i], '\n'))
            fprintf(f, "%s\n", env[i]);
    return fclose(f) == 0 ? 0 : skiff_error(err, errno, "write %s", path);
}

static int read_environ(const char *path, char ***env, skiff_err *err)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return skiff_error(err, errno, "open %s", path);
    char **fresh = NULL;
    char *line = NULL;
    size_t cap = 0;
    int rv = 0;
    while (rv == 0 && getline(&line, &cap, f) > 0)
        rv = env_line(line, &fresh, err);
    free(line);
    fclose(f);
    if (rv < 0) {
        skiff_strv_free(fresh);
        return skiff_err_wrap(err, "ENROOT_ENVIRON");
    }
    skiff_strv_free(*env);
    *env = fresh;
    return 0;
}

int skiff_enroot_hooks(const struct skiff_holder *h, int rootfd, char ***env, char *notice, size_t n_notice,
                       skiff_err *err)
{
    if (!h->cfg->enroot_compat)
        return 0;
    char dirs[2][SKIFF_PATH_MAX + 16];
    config_dirs(h, "hooks.d", dirs);
    char envfile[SKIFF_PATH_MAX + 16], mounts[SKIFF_PATH_MAX + 16], root[SKIFF_PATH_MAX + 8];
    if (skiff_stage_path(h, "enroot.environ", envfile, sizeof(envfile), err) < 0 ||
        skiff_stage_path(h, "enroot.fstab", mounts, sizeof(mounts), err) < 0 ||
        skiff_stage_path(h, "root", root, sizeof(root), err) < 0)
        return -1;
    if (write_environ(envfile, *env, err) < 0 || write_environ(mounts, NULL, err) < 0)
        return skiff_err_wrap(err, "enroot hooks");
    char **henv = NULL;
    const char *const run[] = {dirs[0], dirs[1], NULL};
    int timeout_ms = (h->o->hook_timeout_s > 0 ? h->o->hook_timeout_s : 60) * 1000;
    int rv = hook_env(h, root, envfile, mounts, &henv, err) < 0 ||
                     skiff_hooks_run(run, ".sh", (const char *const *)henv, timeout_ms, notice, n_notice, err) < 0 ||
                     read_environ(envfile, env, err) < 0 ||
                     skiff_hooks_apply_fstab(rootfd, mounts, "ENROOT_MOUNTS", err) < 0
                 ? -1
                 : 0;
    skiff_strv_free(henv);
    return rv < 0 ? skiff_err_wrap(err, "enroot hooks.d") : 0;
}
