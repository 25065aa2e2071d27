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
