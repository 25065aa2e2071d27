/* See strv.h. */
#include "strv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

size_t skiff_strv_len(char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    return n;
}

int skiff_strv_push(char ***v, const char *s, skiff_err *err)
{
    size_t n = skiff_strv_len(*v);
    char *d = strdup(s);
    char **nv = d ? realloc(*v, (n + 2) * sizeof(char *)) : NULL;
    if (!nv) {
        free(d);
        return skiff_error(err, ENOMEM, "list");
    }
    nv[n] = d;
    nv[n + 1] = NULL;
    *v = nv;
    return 0;
}

bool skiff_strv_contains(char *const *v, const char *s)
{
    for (size_t i = 0; v && v[i]; i++)
        if (!strcmp(v[i], s))
            return true;
    return false;
}

char **skiff_strv_dup(char *const *v, skiff_err *err)
{
    char **out = calloc(1, sizeof(char *));
    if (!out) {
        skiff_error(err, ENOMEM, "list");
        return NULL;
    }
    for (size_t i = 0; v && v[i]; i++)
        if (skiff_strv_push(&out, v[i], err) < 0) {
            skiff_strv_free(out);
            return NULL;
        }
    return out;
}

void skiff_strv_free(char **v)
{
    if (!v)
        return;
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}

/* ---- environment lists ---- */

int skiff_env_set(char ***v, const char *kv, skiff_err *err)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        return skiff_error(err, 0, "environment entry '%s' is not KEY=VALUE", kv);
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
    return skiff_strv_push(v, kv, err);
}

bool skiff_env_name_valid(const char *s, size_t n)
{
    if (n == 0 || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
            return false;
    }
    return true;
}
