/* See env.h: the one rule for a command's environment in a container. */
#include "env.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "strv.h"

/* Whether env holds an entry NAME=... for the n bytes at name. */
static bool has(const char *const *env, const char *name, size_t n)
{
    for (size_t i = 0; env && env[i]; i++)
        if (!strncmp(env[i], name, n) && env[i][n] == '=')
            return true;
    return false;
}

/* Whether the user listed NAME bare (keep the caller's value). */
static bool listed_bare(const char *const *entries, const char *name, size_t n)
{
    for (size_t i = 0; entries && entries[i]; i++)
        if (strlen(entries[i]) == n && !strncmp(entries[i], name, n))
            return true;
    return false;
}

/* Sets every K=V of v in *env; an entry without '=' is not one to set. */
static int set_all(char ***env, const char *const *v, skiff_err *err)
{
    for (size_t i = 0; v && v[i]; i++) {
        const char *eq = strchr(v[i], '=');
        if (eq && eq != v[i] && skiff_env_set(env, v[i], err) < 0)
            return -1;
    }
    return 0;
}

int skiff_env_compose(const char *const *base, const char *const *container, const struct skiff_start_request *req,
                      char ***out, skiff_err *err)
{
    const char *const *user = req ? req->env : NULL;
    char **env = NULL;
    *out = NULL;
    if (set_all(&env, base, err) < 0)
        goto fail;
    for (size_t i = 0; container && container[i]; i++) {
        const char *eq = strchr(container[i], '=');
        if (!eq || eq == container[i])
            continue;
        size_t n = (size_t)(eq - container[i]);
        if (listed_bare(user, container[i], n) && has(base, container[i], n))
            continue; /* the caller's value stays */
        if (skiff_env_set(&env, container[i], err) < 0)
            goto fail;
    }
    if (set_all(&env, user, err) < 0)
        goto fail;
    if (!env && !(env = calloc(1, sizeof(*env)))) /* an empty list, not NULL */
        return skiff_error(err, ENOMEM, "environment");
    *out = env;
    return 0;
fail:
    skiff_strv_free(env);
    return -1;
}
