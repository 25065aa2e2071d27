/* See conf.h. */
#include "conf.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

int skiff_conf_line(char *line, char **key, char **value)
{
    char *hash = strchr(line, '#');
    if (hash)
        *hash = '\0';
    char *s = trim(line);
    if (!*s)
        return 0;
    char *eq = strchr(s, '=');
    if (!eq)
        return -1;
    *eq = '\0';
    char *k = trim(s), *v = trim(eq + 1);
    size_t vl = strlen(v);
    if (vl >= 2 && v[0] == '"' && v[vl - 1] == '"') {
        v[vl - 1] = '\0';
        v++;
    }
    *key = k;
    *value = v;
    return 1;
}

/* The one loop over a file's lines, for a file (skiff_conf_read) and for
 * text in memory (skiff_conf_parse). */
static int conf_stream(FILE *f, const char *path,
                       int (*set)(void *ctx, const char *key, const char *value, skiff_err *err), void *ctx,
                       skiff_err *err)
{
    /* getline, not a fixed buffer: fgets split a long line, and the part
     * past the buffer (of a comment, say) was read as a line of its own */
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, rv = 0;
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        char *key, *value;
        int kind = skiff_conf_line(line, &key, &value);
        if (kind == 0)
            continue;
        if (kind < 0) {
            rv = skiff_error(err, 0, "%s:%d: expected 'key = value'", path, lineno);
            break;
        }
        if (set(ctx, key, value, err) < 0) {
            rv = skiff_err_wrap(err, "%s:%d", path, lineno);
            break;
        }
    }
    free(line);
    fclose(f);
    return rv;
}

int skiff_conf_read(const char *path, const char *what, bool must_exist,
                    int (*set)(void *ctx, const char *key, const char *value, skiff_err *err), void *ctx,
                    skiff_err *err)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        if (errno == ENOENT && !must_exist)
            return 0;
        return skiff_error(err, errno, "open %s%s%s", what ? what : "", what ? " " : "", path);
    }
    return conf_stream(f, path, set, ctx, err);
}

int skiff_conf_parse(const char *text, const char *path,
                     int (*set)(void *ctx, const char *key, const char *value, skiff_err *err), void *ctx,
                     skiff_err *err)
{
    size_t len = strlen(text);
    if (!len) /* fmemopen may refuse a buffer of size 0 */
        return 0;
    /* "r": the stream never writes to the buffer */
    FILE *f = fmemopen((void *)(uintptr_t)text, len, "r");
    if (!f)
        return skiff_error(err, errno, "%s", path);
    return conf_stream(f, path, set, ctx, err);
}

int skiff_parse_bool(const char *s)
{
    static const char *const yes[] = {"yes", "true", "on", "y", "1"}, *const no[] = {"no", "false", "off", "n", "0"};
    if (!s)
        return -1;
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (!strcasecmp(s, yes[i]))
            return 1;
        if (!strcasecmp(s, no[i]))
            return 0;
    }
    return -1;
}
