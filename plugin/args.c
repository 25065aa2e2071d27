/* plugstack.conf arguments; see args.h. */
#include "args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"

static int copy(char *dst, size_t n, const char *key, const char *val, skiff_err *err)
{
    if ((size_t)snprintf(dst, n, "%s", val) >= n)
        return skiff_error(err, ENAMETOOLONG, "plugstack.conf: %s: value too long", key);
    return 0;
}

static int abs_path(char *dst, size_t n, const char *key, const char *val, skiff_err *err)
{
    if (val[0] != '/')
        return skiff_error(err, 0, "plugstack.conf: %s=%s: give an absolute path", key, val);
    return copy(dst, n, key, val, err);
}

static int boolean(bool *dst, const char *key, const char *val, skiff_err *err)
{
    int b = skiff_parse_bool(val);
    if (b < 0)
        return skiff_error(err, 0, "plugstack.conf: %s=%s: not a boolean (use 1/0, yes/no, true/false)", key, val);
    *dst = b;
    return 0;
}

int skiff_plugin_args_parse(struct skiff_plugin_args *a, int ac, char **av, skiff_err *err)
{
    memset(a, 0, sizeof(*a));
    a->scope = SKIFF_SCOPE_GLOBAL;
    a->sbatch_support = true;
    a->ddp_env = true;
    snprintf(a->runtime_path, sizeof(a->runtime_path), "%s", SKIFF_PLUGIN_RUNTIME_DEFAULT);
    a->timeout_s = SKIFF_PLUGIN_TIMEOUT_DEFAULT;
    a->import_timeout_s = SKIFF_PLUGIN_IMPORT_TIMEOUT_DEFAULT;
    for (int i = 0; i < ac; i++) {
        const char *arg = av[i];
        const char *eq = strchr(arg, '=');
        if (!eq || eq == arg)
            return skiff_error(err, 0, "plugstack.conf: argument '%s' is not KEY=VALUE", arg);
        char key[64];
        size_t kl = (size_t)(eq - arg);
        if (kl >= sizeof(key))
            return skiff_error(err, 0, "plugstack.conf: unknown argument '%s'", arg);
        memcpy(key, arg, kl);
        key[kl] = '\0';
        const char *val = eq + 1;
        int rv = 0;
        if (!strcmp(key, "runtime_path"))
            rv = abs_path(a->runtime_path, sizeof(a->runtime_path), key, val, err);
        else if (!strcmp(key, "block_cache_path"))
            rv = abs_path(a->block_cache_path, sizeof(a->block_cache_path), key, val, err);
        else if (!strcmp(key, "execute_entrypoint"))
            rv = boolean(&a->execute_entrypoint, key, val, err);
        else if (!strcmp(key, "container_scope")) {
            if (!strcmp(val, "job"))
                a->scope = SKIFF_SCOPE_JOB;
            else if (!strcmp(val, "global"))
                a->scope = SKIFF_SCOPE_GLOBAL;
            else
                return skiff_error(err, 0, "plugstack.conf: container_scope=%s: use job or global", val);
            rv = 0;
        } else if (!strcmp(key, "sbatch_support"))
            rv = boolean(&a->sbatch_support, key, val, err);
        else if (!strcmp(key, "importer"))
            rv = abs_path(a->importer, sizeof(a->importer), key, val, err);
        else if (!strcmp(key, "config"))
            rv = abs_path(a->config, sizeof(a->config), key, val, err);
        else if (!strcmp(key, "default_registry")) {
            if (!*val || strpbrk(val, "/# \t"))
                return skiff_error(err, 0, "plugstack.conf: default_registry=%s: give a host[:port]", val);
            rv = copy(a->default_registry, sizeof(a->default_registry), key, val, err);
        } else if (!strcmp(key, "ddp_env"))
            rv = boolean(&a->ddp_env, key, val, err);
        else if (!strcmp(key, "helper"))
            rv = abs_path(a->helper, sizeof(a->helper), key, val, err);
        else if (!strcmp(key, "timeout") || !strcmp(key, "import_timeout")) {
            char *end;
            errno = 0;
            long v = strtol(val, &end, 10);
            if (errno || end == val || *end || v < 1 || v > 86400)
                return skiff_error(err, 0, "plugstack.conf: %s=%s: give whole seconds from 1 to 86400", key, val);
            *(key[0] == 't' ? &a->timeout_s : &a->import_timeout_s) = (int)v;
        } else if (!strcmp(key, "use_squashfuse") || !strcmp(key, "use_enroot_load")) {
            /* pyxis's enroot knobs: skiff always mounts with its own FUSE
             * server and never runs enroot; accepted so a pyxis line works. */
            bool dummy;
            rv = boolean(&dummy, key, val, err);
            if (rv == 0) {
                size_t used = strlen(a->ignored);
                snprintf(a->ignored + used, sizeof(a->ignored) - used, "%s%s", used ? ", " : "", key);
            }
        } else
            return skiff_error(err, 0,
                               "plugstack.conf: unknown argument '%s' (known: runtime_path, block_cache_path, "
                               "execute_entrypoint, container_scope, sbatch_support, importer, config, "
                               "default_registry, ddp_env, helper, timeout, import_timeout)",
                               arg);
        if (rv < 0)
            return -1;
    }
    return 0;
}
