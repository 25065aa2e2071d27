/* A command's environment in a container (runtime/lib/container/env.c):
 * one rule for the CLI and the plugin's tasks. */
#include <criterion/criterion.h>
#include <string.h>

#include "env.h"
#include "strv.h"

static skiff_err err;

/* The value of NAME in env, or NULL. */
static const char *get(char **env, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; env && env[i]; i++)
        if (!strncmp(env[i], name, n) && env[i][n] == '=')
            return env[i] + n + 1;
    return NULL;
}

Test(env, precedence_job_image_user)
{
    const char *job[] = {"HOME=/home/u", "KEEP=host", "SHARED=host", "LANG=C", NULL};
    const char *container[] = {"PATH=/bin", "KEEP=image", "SHARED=image", "ONLY=image", "MISSING=image", NULL};
    const char *user[] = {"KEEP", "MISSING", "NEW=set", "SHARED=user", NULL};
    struct skiff_start_request r;
    skiff_start_request_init(&r);
    r.env = user;
    char **env = NULL;
    cr_assert_eq(skiff_env_compose(job, container, &r, &env, &err), 0, "%s", err.msg);
    cr_assert_str_eq(get(env, "HOME"), "/home/u");  /* the job's, nobody else's */
    cr_assert_str_eq(get(env, "KEEP"), "host");     /* listed bare: the job's over the image's */
    cr_assert_str_eq(get(env, "MISSING"), "image"); /* listed bare, the job lacks it: the image's */
    cr_assert_str_eq(get(env, "ONLY"), "image");
    cr_assert_str_eq(get(env, "SHARED"), "user"); /* NAME=VALUE over both */
    cr_assert_str_eq(get(env, "NEW"), "set");
    cr_assert_str_eq(get(env, "PATH"), "/bin");
    cr_assert_eq(skiff_strv_len(env), 8);
    skiff_strv_free(env);
}

Test(env, the_cli_defaults_fill_only_what_the_container_lacks)
{
    const char *defaults[] = {"TERM=xterm", "HOME=/home/u", NULL};
    const char *container[] = {"HOME=/root", "PATH=/bin", "bad-entry", NULL};
    char **env = NULL;
    cr_assert_eq(skiff_env_compose(defaults, container, NULL, &env, &err), 0, "%s", err.msg);
    cr_assert_str_eq(get(env, "TERM"), "xterm");
    cr_assert_str_eq(get(env, "HOME"), "/root");
    cr_assert_eq(skiff_strv_len(env), 3);
    skiff_strv_free(env);
    cr_assert_eq(skiff_env_compose(NULL, NULL, NULL, &env, &err), 0);
    cr_assert(env && !env[0], "nothing to set is an empty list");
    skiff_strv_free(env);
}
