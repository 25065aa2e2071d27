#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"

static struct {
    bool set;
    unsigned uid;
    char user[256];
    char home[SKIFF_PATH_MAX];
} who;

void skiff_config_for_user(unsigned uid, const char *user, const char *home)
{
    if (uid == (unsigned)-1) {
        who.set = false;
        return;
    }
    who.set = true;
    who.uid = uid;
    snprintf(who.user, sizeof(who.user), "%s", user ? user : "");
    snprintf(who.home, sizeof(who.home), "%s", home ? home : "/");
}

static void current_user(unsigned *uid, const char **user, const char **home)
{
    if (who.set) {
        *uid = who.uid;
        *user = who.user;
        *home = who.home;
        return;
    }
    *uid = getuid();
    /* HOME and USER from the environment would let a caller point another
     * user's paths anywhere; the passwd entry is the truth. */
    struct passwd *pw = getpwuid(*uid);
    *user = pw ? pw->pw_name : "unknown";
    *home = pw ? pw->pw_dir : "/";
}

/* Expands ${HOME} ${UID} ${USER} ${XDG_RUNTIME_DIR} in src into dst. */
static int expand(char *dst, size_t size, const char *key, const char *src, skiff_err *err)
{
    unsigned uid;
    const char *user, *home;
    current_user(&uid, &user, &home);
    char uidbuf[16], xdg[64];
    snprintf(uidbuf, sizeof(uidbuf), "%u", uid);
    snprintf(xdg, sizeof(xdg), "/run/user/%u", uid);
    size_t n = 0;
    for (const char *p = src; *p;) {
        const char *val = NULL;
        size_t skip = 0;
        if (p[0] == '$' && p[1] == '{') {
            const char *end = strchr(p, '}');
            if (!end)
                return skiff_error(err, 0, "%s: unterminated '${' in '%s'", key, src);
            size_t len = (size_t)(end - p - 2);
            if (len == 4 && !strncmp(p + 2, "HOME", 4))
                val = home;
            else if (len == 3 && !strncmp(p + 2, "UID", 3))
                val = uidbuf;
            else if (len == 4 && !strncmp(p + 2, "USER", 4))
                val = user;
            else if (len == 15 && !strncmp(p + 2, "XDG_RUNTIME_DIR", 15))
                val = xdg;
            else
                return skiff_error(err, 0,
                                   "%s: unknown variable '%.*s' (use ${HOME}, ${UID}, ${USER} or "
                                   "${XDG_RUNTIME_DIR})",
                                   key, (int)(end - p + 1), p);
            skip = (size_t)(end - p + 1);
        }
        if (val) {
            size_t vl = strlen(val);
            if (n + vl >= size)
                return skiff_error(err, ENAMETOOLONG, "%s: value too long", key);
            memcpy(dst + n, val, vl);
            n += vl;
            p += skip;
        } else {
            if (n + 1 >= size)
                return skiff_error(err, ENAMETOOLONG, "%s: value too long", key);
            dst[n++] = *p++;
        }
    }
    dst[n] = '\0';
    return 0;
}

/* Where `make install` puts the bundled hooks; a missing directory runs none. */
#ifndef SKIFF_HOOKS_DIR_DEFAULT
#define SKIFF_HOOKS_DIR_DEFAULT "/usr/local/libexec/skiff/hooks"
#endif

enum kind { K_PATH, K_STR, K_BOOL, K_INT, K_COMP, K_SIZE, K_IMAGE_MODE };

#define F(field) offsetof(struct skiff_config, field), sizeof(((struct skiff_config *)0)->field)
static const struct key {
    const char *name;
    enum kind kind;
    size_t off, size;
    const char *def;
} keys[] = {
    {"data_path", K_PATH, F(data_path), "${HOME}/.local/share/skiff"},
    {"cache_path", K_PATH, F(cache_path), "${HOME}/.cache/skiff"},
    /* runtime state on a tmpfs: a container start creates and removes a
     * few files and directories there, ~20 us on tmpfs against ~250 us on a
     * journaled disk (tests/bench/start.sh) */
    {"runtime_path", K_PATH, F(runtime_path), "/dev/shm/skiff-${UID}"},
    {"temp_path", K_PATH, F(temp_path), "/tmp"},
    /* decompressed blocks kept between starts (runtime/lib/fs/blockcache.h):
     * memory on a tmpfs, so that a start reads them at memory speed */
    /* "" = runtime_path/blocks: the cache follows the runtime directory
     * (under the plugin, a per-user directory in a root-owned base) */
    {"block_cache_path", K_PATH, F(block_cache_path), ""},
    {"block_cache_size", K_INT, F(block_cache_mb), "512"},
    {"hooks_dir", K_PATH, F(hooks_dir), SKIFF_HOOKS_DIR_DEFAULT},
    {"credentials_file", K_PATH, F(credentials_file), "${HOME}/.config/skiff/.credentials"},
    {"default_registry", K_STR, F(default_registry), "registry-1.docker.io"},
    {"registry_mirror", K_STR, F(registry_mirror), ""},
    {"squash_compression", K_COMP, F(squash_compression), "zstd"},
    {"squash_level", K_INT, F(squash_level), "0"},
    {"allow_http", K_BOOL, F(allow_http), "no"},
    {"connect_timeout", K_INT, F(connect_timeout_s), "30"},
    {"transfer_timeout", K_INT, F(transfer_timeout_s), "0"},
    {"max_processors", K_INT, F(max_processors), "0"},
    /* the import's old path: every layer unpacked onto a scratch tree, then
     * mksquashfs (image/pack.h) */
    {"import_mksquashfs", K_BOOL, F(import_mksquashfs), "no"},
    /* enroot's site configuration (environ.d, mounts.d, hooks.d), applied
     * only where the admin turns it on (container/enrootsite.h) */
    /* the plugin's runtime base (plugstack.conf's runtime_path): where
     * `skiff exec` and `enroot list -f` / `enroot exec` find the containers
     * steps run, in BASE/UID */
    {"plugin_runtime_path", K_PATH, F(plugin_runtime_path), "/run/skiff"},
    {"enroot_compat", K_BOOL, F(enroot_compat), "no"},
    {"enroot_sysconf_path", K_PATH, F(enroot_sysconf_path), "/etc/enroot"},
    /* enroot's ${XDG_CONFIG_HOME}/enroot: its .credentials file is read
     * for a host skiff's own credentials_file has no entry for */
    {"enroot_config_path", K_PATH, F(enroot_config_path), "${HOME}/.config/enroot"},
    /* images at cluster scale (doc/admin-guide.md) */
    {"tag_ttl", K_INT, F(tag_ttl_s), "0"},
    {"max_connections", K_INT, F(max_connections), "4"},
    {"transfer_retries", K_INT, F(transfer_retries), "5"},
    {"stall_timeout", K_INT, F(stall_timeout_s), "60"},
    {"cache_max_size", K_SIZE, F(cache_max_size), "0"},
    {"system_cache_path", K_PATH, F(system_cache_path), ""},
    /* lazy images (lazy.h, doc/lazy.md) */
    {"image_mode", K_IMAGE_MODE, F(image_mode), "auto"},
    {"lazy_min_size", K_INT, F(lazy_min_mb), "1024"},
    /* "" = cache_path/lazy-data: the per-node data files */
    {"lazy_path", K_PATH, F(lazy_path), ""},
    {"lazy_timeout", K_INT, F(lazy_timeout_s), "60"},
    {"lazy_parallel", K_INT, F(lazy_parallel), "4"},
    {"lazy_complete", K_BOOL, F(lazy_complete), "no"},
    {"lazy_complete_rate", K_INT, F(lazy_complete_mbps), "0"},
    {"lazy_span_store", K_PATH, F(lazy_span_store), ""},
};
#undef F

static const char *const compressors[] = {"zstd", "gzip", "lz4", "xz", "lzo", "none"};
static const char *const image_modes[] = {"auto", "lazy", "full"};

static int config_set(struct skiff_config *cfg, const char *key, const char *value, bool raw, skiff_err *err);

int skiff_config_set(struct skiff_config *cfg, const char *key, const char *value, skiff_err *err)
{
    return config_set(cfg, key, value, false, err);
}

int skiff_config_set_raw(struct skiff_config *cfg, const char *key, const char *value, skiff_err *err)
{
    return config_set(cfg, key, value, true, err);
}

int skiff_config_entry(const struct skiff_config *cfg, size_t i, char *out, size_t n)
{
    if (i >= sizeof(keys) / sizeof(keys[0]))
        return 0;
    const struct key *k = &keys[i];
    const char *src = (const char *)cfg + k->off;
    int w;
    switch (k->kind) {
    case K_BOOL:
        w = snprintf(out, n, "%s=%s", k->name, *(const bool *)src ? "yes" : "no");
        break;
    case K_INT:
        w = snprintf(out, n, "%s=%d", k->name, *(const int *)src);
        break;
    case K_SIZE:
        w = snprintf(out, n, "%s=%llu", k->name, *(const unsigned long long *)src);
        break;
    default:
        w = snprintf(out, n, "%s=%s", k->name, src);
        break;
    }
    return w < 0 || (size_t)w >= n ? -1 : 1;
}

int skiff_config_lazy_path(const struct skiff_config *cfg, char *out, size_t n)
{
    int w =
        cfg->lazy_path[0] ? snprintf(out, n, "%s", cfg->lazy_path) : snprintf(out, n, "%s/lazy-data", cfg->cache_path);
    return w < 0 || (size_t)w >= n ? -1 : 0;
}

int skiff_config_plugin_runtime(const struct skiff_config *cfg, unsigned uid, char *out, size_t n)
{
    int w = snprintf(out, n, "%s/%u", cfg->plugin_runtime_path, uid);
    return w < 0 || (size_t)w >= n || !cfg->plugin_runtime_path[0] ? -1 : 0;
}

int skiff_config_block_cache(const struct skiff_config *cfg, char *out, size_t n)
{
    int w = cfg->block_cache_path[0] ? snprintf(out, n, "%s", cfg->block_cache_path)
                                     : snprintf(out, n, "%s/blocks", cfg->runtime_path);
    return w < 0 || (size_t)w >= n ? -1 : 0;
}

int skiff_config_parse_size(const char *s, unsigned long long *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v >= 0) || (s[0] < '0' || s[0] > '9'))
        return -1;
    static const char units[] = "KMGT";
    const char *u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
    if (*end && !u)
        return -1;
    if (u) {
        for (const char *p = units; p <= u; p++)
            v *= 1024;
        end++;
        if (*end == 'i' || *end == 'I')
            end++;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || v > 9.2e18)
        return -1;
    *out = (unsigned long long)v;
    return 0;
}

static int config_set(struct skiff_config *cfg, const char *key, const char *value, bool raw, skiff_err *err)
{
    const struct key *k = NULL;
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (!strcmp(keys[i].name, key))
            k = &keys[i];
    if (!k)
        return skiff_error(err, 0, "unknown configuration key '%s' (see doc/admin-guide.md)", key);
    char *dst = (char *)cfg + k->off;
    switch (k->kind) {
    case K_PATH: {
        char path[SKIFF_PATH_MAX];
        if (raw) {
            if (strlen(value) >= k->size)
                return skiff_error(err, ENAMETOOLONG, "%s: value too long", key);
            strcpy(path, value);
        } else if (expand(path, k->size, key, value, err) < 0) {
            return -1;
        }
        /* checked after expansion: "$HOME/x" (no braces) or "${USER}/x"
         * passed a check of the first character and stayed relative */
        if (path[0] && path[0] != '/')
            return skiff_error(err, 0, "%s: '%s' is not an absolute path%s", key, value,
                               strcmp(path, value) ? " once expanded" : "");
        strcpy(dst, path);
        return 0;
    }
    case K_STR:
        if (strlen(value) >= k->size)
            return skiff_error(err, ENAMETOOLONG, "%s: value too long", key);
        strcpy(dst, value);
        return 0;
    case K_COMP:
        for (size_t i = 0; i < sizeof(compressors) / sizeof(compressors[0]); i++)
            if (!strcmp(value, compressors[i])) {
                strcpy(dst, value);
                return 0;
            }
        return skiff_error(err, 0, "%s: unknown compressor '%s' (use zstd, gzip, lz4, xz, lzo or none)", key, value);
    case K_IMAGE_MODE:
        for (size_t i = 0; i < sizeof(image_modes) / sizeof(image_modes[0]); i++)
            if (!strcmp(value, image_modes[i])) {
                strcpy(dst, value);
                return 0;
            }
        return skiff_error(err, 0, "%s: unknown mode '%s' (use auto, lazy or full)", key, value);
    case K_BOOL: {
        int b = skiff_parse_bool(value);
        if (b < 0)
            return skiff_error(err, 0, "%s: '%s' is not a boolean (use yes or no)", key, value);
        *(bool *)dst = b;
        return 0;
    }
    case K_INT: {
        char *end;
        errno = 0;
        long v = strtol(value, &end, 10);
        if (errno || end == value || *end || v < 0 || v > INT_MAX)
            return skiff_error(err, 0, "%s: '%s' is not a non-negative integer", key, value);
        *(int *)dst = (int)v;
        return 0;
    }
    case K_SIZE:
        if (skiff_config_parse_size(value, (unsigned long long *)dst) < 0)
            return skiff_error(err, 0, "%s: '%s' is not a size (a number of bytes, or with K, M, G or T: 500G)", key,
                               value);
        return 0;
    }
    return skiff_error(err, 0, "%s: internal error", key);
}

/* enroot's variables that name a skiff.conf key (the rest are the enroot
 * front end's start defaults, or have no skiff meaning: doc/user-guide.md). */
static const struct {
    const char *var, *key;
} enroot_vars[] = {
    {"ENROOT_DATA_PATH", "data_path"},
    {"ENROOT_CACHE_PATH", "cache_path"},
    {"ENROOT_RUNTIME_PATH", "runtime_path"},
    {"ENROOT_TEMP_PATH", "temp_path"},
    {"ENROOT_CONFIG_PATH", "enroot_config_path"},
    {"ENROOT_SYSCONF_PATH", "enroot_sysconf_path"},
    {"ENROOT_CONNECT_TIMEOUT", "connect_timeout"},
    {"ENROOT_TRANSFER_TIMEOUT", "transfer_timeout"},
    {"ENROOT_TRANSFER_RETRIES", "transfer_retries"},
    {"ENROOT_MAX_PROCESSORS", "max_processors"},
    {"ENROOT_ALLOW_HTTP", "allow_http"},
};

const char *skiff_config_enroot_var(const char *name)
{
    for (size_t i = 0; i < sizeof(enroot_vars) / sizeof(enroot_vars[0]); i++)
        if (!strcmp(enroot_vars[i].var, name))
            return enroot_vars[i].key;
    return NULL;
}

/* ENROOT_SQUASH_OPTIONS: mksquashfs options as enroot passes them. skiff
 * runs mksquashfs with its own argv, so only what maps onto skiff.conf is
 * taken: -comp and -Xcompression-level; the rest (-noD, -no-duplicates,
 * ...) is ignored. */
static int enroot_squash_options(struct skiff_config *cfg, const char *v, skiff_err *err)
{
    cleanup_free char *copy = strdup(v);
    if (!copy)
        return skiff_error(err, ENOMEM, "ENROOT_SQUASH_OPTIONS");
    char *save = NULL;
    for (char *t = strtok_r(copy, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
        const char *key = !strcmp(t, "-comp")                 ? "squash_compression"
                          : !strcmp(t, "-Xcompression-level") ? "squash_level"
                                                              : NULL;
        char *val = key ? strtok_r(NULL, " \t", &save) : NULL;
        if (key && (!val || skiff_config_set(cfg, key, val, err) < 0))
            return val ? -1 : skiff_error(err, 0, "%s needs a value", t);
    }
    return 0;
}

/* The ENROOT_* layer: below skiff.conf and SKIFF_*, above the defaults. */
static int load_enroot_env(struct skiff_config *cfg, skiff_err *err)
{
    for (size_t i = 0; i < sizeof(enroot_vars) / sizeof(enroot_vars[0]); i++) {
        const char *v = getenv(enroot_vars[i].var);
        if (v && *v && skiff_config_set(cfg, enroot_vars[i].key, v, err) < 0)
            return skiff_err_wrap(err, "environment %s", enroot_vars[i].var);
    }
    const char *sq = getenv("ENROOT_SQUASH_OPTIONS");
    if (sq && enroot_squash_options(cfg, sq, err) < 0)
        return skiff_err_wrap(err, "environment ENROOT_SQUASH_OPTIONS");
    return 0;
}

static int set_from_file(void *cfg, const char *key, const char *value, skiff_err *err)
{
    return skiff_config_set(cfg, key, value, err);
}

int skiff_config_load(struct skiff_config *cfg, const char *path, bool use_env, skiff_err *err)
{
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (skiff_config_set(cfg, keys[i].name, keys[i].def, err) < 0)
            return -1;
    if (use_env && load_enroot_env(cfg, err) < 0)
        return -1;
    bool must_exist = path != NULL;
    if (!path && use_env && getenv("SKIFF_CONFIG")) {
        path = getenv("SKIFF_CONFIG");
        must_exist = true;
    }
    if (skiff_conf_read(path ? path : SKIFF_CONFIG_DEFAULT_PATH, "config", must_exist, set_from_file, cfg, err) < 0)
        return -1;
    if (!use_env)
        return 0;
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        char name[64] = "SKIFF_";
        size_t j = 6;
        for (const char *p = keys[i].name; *p && j < sizeof(name) - 1; p++)
            name[j++] = (char)toupper((unsigned char)*p);
        name[j] = '\0';
        /* SKIFF_HOOKS_DIR is the user's extra hooks directory, which the CLI
         * passes in the start options (doc/hooks.md): read as hooks_dir it
         * replaced the admin's hooks instead of adding to them. */
        if (!strcmp(keys[i].name, "hooks_dir"))
            continue;
        const char *v = getenv(name);
        if (v && skiff_config_set(cfg, keys[i].name, v, err) < 0)
            return skiff_err_wrap(err, "environment %s", name);
    }
    return 0;
}
