/* See hookconf.h. */
#include "hookconf.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"
#include "fdio.h"
#include "fsutil.h"
#include "hookutil.h"

static const char *knob_list(const struct skiff_knob *knobs, char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; knobs[i].key && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "", knobs[i].key);
    return buf;
}

struct knob_table {
    const struct skiff_knob *knobs;
};

/* One "key = value" pair into its knob; the reader (common/conf.h) adds
 * "PATH:LINE: " to an error. */
static int set_knob(void *ctx, const char *key, const char *v, skiff_err *err)
{
    const struct skiff_knob *knobs = ((struct knob_table *)ctx)->knobs, *k = NULL;
    for (size_t i = 0; knobs[i].key && !k; i++)
        if (!strcmp(knobs[i].key, key))
            k = &knobs[i];
    if (!k) {
        char keys[512];
        return skiff_error(err, 0, "unknown key '%.100s' (%s)", key, knob_list(knobs, keys, sizeof(keys)));
    }
    switch (k->type) {
    case SKIFF_KNOB_PATH:
        if (v[0] != '/' || strlen(v) >= k->size)
            return skiff_error(err, 0, "%s must be an absolute path, got '%.200s'", k->key, v);
        snprintf(k->value, k->size, "%s", v);
        return 0;
    case SKIFF_KNOB_BOOL: {
        int b = skiff_parse_bool(v);
        if (b < 0)
            return skiff_error(err, 0, "%s is yes or no, got '%.200s'", k->key, v);
        *(bool *)k->value = b;
        return 0;
    }
    case SKIFF_KNOB_WORD: {
        bool blank = false;
        for (const char *c = v; *c && !blank; c++)
            blank = isspace((unsigned char)*c);
        if (!*v || blank || strlen(v) >= k->size || (k->check && !k->check(v)))
            return skiff_error(err, 0, "%s is %s, got '%.200s'", k->key, k->expect ? k->expect : "one word", v);
        snprintf(k->value, k->size, "%s", v);
        return 0;
    }
    }
    return skiff_error(err, 0, "%s: bad knob type", k->key);
}

int skiff_hook_conf_parse(const char *text, const char *path, const struct skiff_knob *knobs, skiff_err *err)
{
    struct knob_table t = {knobs};
    return skiff_conf_parse(text ? text : "", path, set_knob, &t, err);
}

int skiff_hook_conf_load(const char *self, const struct skiff_knob *knobs, skiff_err *err)
{
    char path[4096];
    if (skiff_fmt_path(path, sizeof(path), err, "%s.conf", self) < 0)
        return -1;
    struct knob_table t = {knobs};
    return skiff_conf_read(path, NULL, false, set_knob, &t, err);
}

/* The line at p (up to '\n' or the end) and where the next starts. */
static size_t line_at(const char *p, const char **next)
{
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    *next = p + len + (nl ? 1 : 0);
    if (len && p[len - 1] == '\r')
        len--;
    return len;
}

const char *skiff_envtext_get(const char *text, const char *name, char *buf, size_t n)
{
    size_t nl = strlen(name);
    const char *found = NULL;
    size_t flen = 0;
    for (const char *p = text, *next; p && *p; p = next) {
        size_t len = line_at(p, &next);
        if (len > nl && !strncmp(p, name, nl) && p[nl] == '=') {
            found = p + nl + 1;
            flen = len - nl - 1;
        }
    }
    if (!found || !n)
        return NULL;
    if (flen >= n)
        flen = n - 1;
    memcpy(buf, found, flen);
    buf[flen] = '\0';
    return buf;
}

int skiff_envtext_each(const char *text, const char *prefix, int (*cb)(void *ctx, const char *name, const char *value),
                       void *ctx)
{
    size_t pl = strlen(prefix);
    for (const char *p = text, *next; p && *p; p = next) {
        size_t len = line_at(p, &next);
        const char *eq = memchr(p, '=', len);
        if (!eq || eq == p || (size_t)(eq - p) < pl || strncmp(p, prefix, pl))
            continue;
        cleanup_free char *name = strndup(p, (size_t)(eq - p));
        cleanup_free char *value = strndup(eq + 1, len - (size_t)(eq + 1 - p));
        if (!name || !value)
            return -1;
        if (cb(ctx, name, value) < 0)
            return -1;
    }
    return 0;
}

const char *skiff_envtext_getter(void *ctx, const char *name)
{
    static char buf[8192];
    return ctx ? skiff_envtext_get(ctx, name, buf, sizeof(buf)) : NULL;
}

void skiff_hook_driver_root(char *driver_root, char *ldcache, size_t ldcache_size)
{
    size_t n = strlen(driver_root);
    while (n > 1 && driver_root[n - 1] == '/')
        driver_root[--n] = '\0';
    if (!ldcache[0])
        snprintf(ldcache, ldcache_size, "%s/etc/ld.so.cache", n > 1 ? driver_root : "");
}

char *skiff_image_env_read(skiff_err *err)
{
    const char *root = getenv("SKIFF_ROOTFS");
    if (!root || !*root) {
        skiff_error(err, 0, "SKIFF_ROOTFS is not set (run hooks through the skiff runtime)");
        return NULL;
    }
    /* O_NONBLOCK: the image's file could be a FIFO that nobody writes */
    cleanup_close int fd = skiff_hook_open_in_root(root, "/.skiff/environment", O_RDONLY | O_NONBLOCK, err);
    if (fd < 0) {
        if (err->code != ENOENT)
            return NULL;
        skiff_err_clear(err);
        char *empty = strdup("");
        if (!empty)
            skiff_error(err, ENOMEM, "image environment");
        return empty;
    }
    char *text = skiff_read_fd_small(fd, "/.skiff/environment", 16u << 20, NULL, err);
    if (!text)
        skiff_err_wrap(err, "the image's environment (/.skiff/environment)");
    return text;
}
