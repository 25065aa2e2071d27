/* A getter (ddp_env.h's shape) over a NULL-terminated list of "NAME=VALUE"
 * strings, for the hook tests: tget(CTX(list), "NAME"). */
#ifndef SKIFF_TEST_TENV_H
#define SKIFF_TEST_TENV_H

#include <stdint.h>
#include <string.h>

static inline const char *tget(void *ctx, const char *name)
{
    const char *const *env = ctx;
    size_t n = strlen(name);
    for (size_t i = 0; env && env[i]; i++)
        if (!strncmp(env[i], name, n) && env[i][n] == '=')
            return env[i] + n + 1;
    return NULL;
}
#define CTX(p) ((void *)(uintptr_t)(p))

#endif
