/* --container-* options: parsing and validation; see options.h. */
#include "options.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mountspec.h"
#include "named.h"
#include "ref.h"
#include "strv.h"

static const struct {
    const char *flag;
    const char *env;
} names[SKIFF_OPT_COUNT] = {
    [SKIFF_OPT_IMAGE] = {"container-image", "IMAGE"},
    [SKIFF_OPT_MOUNTS] = {"container-mounts", "MOUNTS"},
    [SKIFF_OPT_WORKDIR] = {"container-workdir", "WORKDIR"},
    [SKIFF_OPT_NAME] = {"container-name", "NAME"},
    [SKIFF_OPT_SAVE] = {"container-save", "SAVE"},
    [SKIFF_OPT_MOUNT_HOME] = {"container-mount-home", "MOUNT_HOME"},
    [SKIFF_OPT_REMAP_ROOT] = {"container-remap-root", "REMAP_ROOT"},
    [SKIFF_OPT_ENTRYPOINT] = {"container-entrypoint", "ENTRYPOINT"},
    [SKIFF_OPT_ENTRYPOINT_LOG] = {"container-entrypoint-log", "ENTRYPOINT_LOG"},
    [SKIFF_OPT_WRITABLE] = {"container-writable", "WRITABLE"},
    [SKIFF_OPT_ENV] = {"container-env", "ENV"},
    [SKIFF_OPT_UNSHARE] = {"container-unshare", "UNSHARE"},
};

const char *skiff_opt_flag(enum skiff_opt_id id)
{
    return (unsigned)id < SKIFF_OPT_COUNT ? names[id].flag : "?";
}

const char *skiff_opt_env_suffix(enum skiff_opt_id id)
{
    return (unsigned)id < SKIFF_OPT_COUNT ? names[id].env : "?";
}

void skiff_opts_init(struct skiff_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->mount_home = o->remap_root = o->entrypoint = o->entrypoint_log = o->writable = -1;
}

void skiff_opts_free(struct skiff_opts *o)
{
    free(o->image);
    free(o->workdir);
    free(o->name);
    free(o->save);
    skiff_strv_free(o->mounts);
    skiff_strv_free(o->env);
    skiff_opts_init(o);
}

static int set_str(char **dst, const char *arg, skiff_err *err)
{
    char *d = strdup(arg);
    if (!d)
        return skiff_error(err, ENOMEM, "out of memory");
    free(*dst);
    *dst = d;
    return 0;
}

/* Appends s to the NULL-terminated list unless it is there already. */
static int add_unique(char ***v, size_t *n, const char *s, skiff_err *err)
{
    if (skiff_strv_contains(*v, s))
        return 0;
    if (skiff_strv_push(v, s, err) < 0)
        return -1;
    ++*n;
    return 0;
}

static int check_image(const char *arg, skiff_err *err)
{
    switch (skiff_ref_classify(arg)) {
    case SKIFF_ARG_PATH:
    case SKIFF_ARG_URI:
    case SKIFF_ARG_BARE:
        return 0;
    case SKIFF_ARG_SQSH_NAME:
        /* pyxis users write --container-image=foo.sqsh; pyxis then looks for
         * an image "foo.sqsh" on Docker Hub. Say what was meant instead. */
        return skiff_error(err, 0,
                           "'%s' is a file name without a path: write ./%s for a file in the current "
                           "directory (or an absolute path); registry images are written "
                           "docker://[REGISTRY#]IMAGE[:TAG]",
                           arg, arg);
    case SKIFF_ARG_INVALID:
        break;
    }
    return skiff_error(err, 0,
                       "'%s' is neither a file path (start it with /, ./ or ../) nor a valid image reference "
                       "([docker://][USER@][REGISTRY#]IMAGE[:TAG], docker-archive:FILE, oci:DIR, "
                       "oci-archive:FILE, dir:DIR)",
                       arg);
}

/* One SRC:DST[:FLAGS] entry; a relative source (./x) is allowed here and made
 * absolute on the node, against the step's working directory. */
static int check_mount(const char *spec, skiff_err *err)
{
    cleanup_free char *copy = NULL;
    const char *s = spec;
    if (!strncmp(spec, "./", 2) || !strncmp(spec, "../", 3) || !strcmp(spec, ".") || !strncmp(spec, ".:", 2)) {
        /* validate with a stand-in absolute source; the real one comes later */
        if (asprintf(&copy, "/%s", spec) < 0)
            return skiff_error(err, ENOMEM, "out of memory");
        s = copy;
    }
    struct skiff_mount m;
    if (skiff_mountspec_parse(s, &m, err) < 0)
        return -1;
    skiff_mount_free(&m);
    return 0;
}

static int set_mounts(struct skiff_opts *o, const char *arg, skiff_err *err)
{
    cleanup_free char *copy = strdup(arg);
    if (!copy)
        return skiff_error(err, ENOMEM, "out of memory");
    char *save = NULL;
    /* a trailing or doubled comma is a typo, not an empty mount */
    if (arg[0] == ',' || arg[strlen(arg) - 1] == ',' || strstr(arg, ",,"))
        return skiff_error(err, 0, "'%s': empty mount entry (entries are separated by single commas)", arg);
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (check_mount(tok, err) < 0)
            return skiff_err_wrap(err, "mount '%s'", tok);
        if (add_unique(&o->mounts, &o->nmounts, tok, err) < 0)
            return -1;
    }
    return 0;
}

static bool env_name_valid(const char *s, size_t n)
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

static int set_env(struct skiff_opts *o, const char *arg, skiff_err *err)
{
    cleanup_free char *copy = strdup(arg);
    if (!copy)
        return skiff_error(err, ENOMEM, "out of memory");
    if (arg[0] == ',' || arg[strlen(arg) - 1] == ',' || strstr(arg, ",,"))
        return skiff_error(err, 0, "'%s': empty entry (write NAME[,NAME...] or NAME=VALUE)", arg);
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        const char *eq = strchr(tok, '=');
        size_t n = eq ? (size_t)(eq - tok) : strlen(tok);
        if (!env_name_valid(tok, n))
            return skiff_error(err, 0,
                               "'%.*s' is not a variable name (letters, digits and '_', not starting with a "
                               "digit)",
                               (int)n, tok);
        if (add_unique(&o->env, &o->nenv, tok, err) < 0)
            return -1;
    }
    return 0;
}

static int set_unshare(struct skiff_opts *o, const char *arg, skiff_err *err)
{
    cleanup_free char *copy = strdup(arg);
    if (!copy)
        return skiff_error(err, ENOMEM, "out of memory");
    int flags = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!strcmp(tok, "net"))
            flags |= CLONE_NEWNET;
        else if (!strcmp(tok, "ipc"))
            flags |= CLONE_NEWIPC;
        else if (!strcmp(tok, "uts"))
            flags |= CLONE_NEWUTS;
        else if (!strcmp(tok, "none"))
            ;
        else
            return skiff_error(err, 0, "unknown namespace '%s' (use net, ipc, uts, or none)", tok);
    }
    o->unshare_flags = flags;
    o->unshare_set = true;
    return 0;
}

static int set_name(struct skiff_opts *o, const char *arg, skiff_err *err)
{
    const char *colon = strchr(arg, ':');
    size_t n = colon ? (size_t)(colon - arg) : strlen(arg);
    enum skiff_name_mode mode = SKIFF_NAME_AUTO;
    if (colon) {
        const char *f = colon + 1;
        if (!strcmp(f, "auto") || !*f)
            mode = SKIFF_NAME_AUTO;
        else if (!strcmp(f, "create"))
            mode = SKIFF_NAME_CREATE;
        else if (!strcmp(f, "exec"))
            mode = SKIFF_NAME_EXEC;
        else if (!strcmp(f, "no_exec"))
            mode = SKIFF_NAME_NO_EXEC;
        else
            return skiff_error(err, 0,
                               "unknown mode '%s' (write NAME, or NAME:auto, NAME:create, NAME:exec, NAME:no_exec)", f);
    }
    cleanup_free char *name = strndup(arg, n);
    if (!name)
        return skiff_error(err, ENOMEM, "out of memory");
    if (!skiff_name_valid(name))
        return skiff_error(err, 0,
                           "'%s' is not a valid container name (letters, digits, '.', '_', '-', '+', at most 128, "
                           "not starting with '.', '-' or '+')",
                           name);
    free(o->name);
    o->name = name;
    name = NULL;
    o->name_mode = mode;
    return 0;
}

/* The flag that gives a boolean option the value val. */
static void bool_flag(enum skiff_opt_id id, int val, char *out, size_t n)
{
    if (id == SKIFF_OPT_WRITABLE && !val)
        snprintf(out, n, "--container-readonly");
    else
        snprintf(out, n, "--%s%s", val ? "" : "no-", skiff_opt_flag(id));
}

/* A boolean pair given both ways is a mistake, not "the last one wins"
 * (pyxis refuses it too). Slurm passing the same value twice is fine. */
static int set_bool(int *dst, enum skiff_opt_id id, int val, skiff_err *err)
{
    int v = val ? 1 : 0;
    if (*dst >= 0 && *dst != v) {
        char a[64], b[64];
        bool_flag(id, *dst, a, sizeof(a));
        bool_flag(id, v, b, sizeof(b));
        return skiff_error(err, 0, "%s and %s contradict each other: give one of them", a, b);
    }
    *dst = v;
    return 0;
}

int skiff_opts_set(struct skiff_opts *o, enum skiff_opt_id id, int val, const char *arg, skiff_err *err)
{
    bool valued = id == SKIFF_OPT_IMAGE || id == SKIFF_OPT_MOUNTS || id == SKIFF_OPT_WORKDIR || id == SKIFF_OPT_NAME ||
                  id == SKIFF_OPT_SAVE || id == SKIFF_OPT_ENV || id == SKIFF_OPT_UNSHARE;
    if (valued && (!arg || !*arg))
        return skiff_error(err, 0, "--%s needs an argument", skiff_opt_flag(id));
    int rv = 0;
    switch (id) {
    case SKIFF_OPT_IMAGE:
        rv = check_image(arg, err);
        if (rv == 0)
            rv = set_str(&o->image, arg, err);
        break;
    case SKIFF_OPT_MOUNTS:
        rv = set_mounts(o, arg, err);
        break;
    case SKIFF_OPT_WORKDIR:
        /* a relative one starts where the container starts (pyxis): the
         * image's WorkingDir, else / */
        rv = set_str(&o->workdir, arg, err);
        break;
    case SKIFF_OPT_NAME:
        rv = set_name(o, arg, err);
        break;
    case SKIFF_OPT_SAVE:
        if (arg[strlen(arg) - 1] == '/')
            return skiff_error(err, 0, "--container-save: '%s' is a directory; give a file name (e.g. %sout.sqsh)", arg,
                               arg);
        rv = set_str(&o->save, arg, err);
        break;
    case SKIFF_OPT_MOUNT_HOME:
        return set_bool(&o->mount_home, id, val, err);
    case SKIFF_OPT_REMAP_ROOT:
        return set_bool(&o->remap_root, id, val, err);
    case SKIFF_OPT_ENTRYPOINT:
        return set_bool(&o->entrypoint, id, val, err);
    case SKIFF_OPT_ENTRYPOINT_LOG:
        return set_bool(&o->entrypoint_log, id, val, err);
    case SKIFF_OPT_WRITABLE:
        return set_bool(&o->writable, id, val, err);
    case SKIFF_OPT_ENV:
        rv = set_env(o, arg, err);
        break;
    case SKIFF_OPT_UNSHARE:
        rv = set_unshare(o, arg, err);
        break;
    default:
        return skiff_error(err, 0, "unknown option id %d", (int)id);
    }
    if (rv < 0 && valued)
        return skiff_err_wrap(err, "--%s", skiff_opt_flag(id));
    return rv;
}

bool skiff_opts_isset(const struct skiff_opts *o, enum skiff_opt_id id)
{
    switch (id) {
    case SKIFF_OPT_IMAGE:
        return o->image;
    case SKIFF_OPT_MOUNTS:
        return o->nmounts > 0;
    case SKIFF_OPT_WORKDIR:
        return o->workdir;
    case SKIFF_OPT_NAME:
        return o->name;
    case SKIFF_OPT_SAVE:
        return o->save;
    case SKIFF_OPT_MOUNT_HOME:
        return o->mount_home >= 0;
    case SKIFF_OPT_REMAP_ROOT:
        return o->remap_root >= 0;
    case SKIFF_OPT_ENTRYPOINT:
        return o->entrypoint >= 0;
    case SKIFF_OPT_ENTRYPOINT_LOG:
        return o->entrypoint_log >= 0;
    case SKIFF_OPT_WRITABLE:
        return o->writable >= 0;
    case SKIFF_OPT_ENV:
        return o->nenv > 0;
    case SKIFF_OPT_UNSHARE:
        return o->unshare_set;
    default:
        return false;
    }
}

static bool is_bool_opt(enum skiff_opt_id id)
{
    return id == SKIFF_OPT_MOUNT_HOME || id == SKIFF_OPT_REMAP_ROOT || id == SKIFF_OPT_ENTRYPOINT ||
           id == SKIFF_OPT_ENTRYPOINT_LOG || id == SKIFF_OPT_WRITABLE;
}

/* Looks up SKIFF_CONTAINER_<sfx>, then PYXIS_CONTAINER_<sfx>. */
static const char *env_lookup(skiff_opts_getenv get, void *ctx, const char *sfx, char *var, size_t n)
{
    static const char *const prefixes[] = {"SKIFF_CONTAINER_", "PYXIS_CONTAINER_"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(var, n, "%s%s", prefixes[i], sfx);
        const char *v = get(ctx, var);
        if (v && *v)
            return v;
    }
    return NULL;
}

int skiff_opts_from_env(struct skiff_opts *o, skiff_opts_getenv get, void *ctx, skiff_err *err)
{
    char var[64];
    for (int i = 0; i < SKIFF_OPT_COUNT; i++) {
        enum skiff_opt_id id = (enum skiff_opt_id)i;
        if (skiff_opts_isset(o, id))
            continue;
        const char *v = env_lookup(get, ctx, skiff_opt_env_suffix(id), var, sizeof(var));
        int val = 1;
        if (!v && id == SKIFF_OPT_WRITABLE) {
            v = env_lookup(get, ctx, "READONLY", var, sizeof(var));
            val = 0;
        }
        if (!v)
            continue;
        if (is_bool_opt(id)) {
            int b = skiff_parse_bool(v);
            if (b < 0)
                return skiff_error(err, 0, "%s='%s': not a boolean (use 1/0, yes/no, true/false)", var, v);
            val = val ? b : !b;
        }
        if (skiff_opts_set(o, id, val, v, err) < 0)
            return skiff_err_wrap(err, "%s", var);
    }
    return 0;
}

bool skiff_opts_active(const struct skiff_opts *o)
{
    return o->image || o->name;
}

int skiff_opts_check(const struct skiff_opts *o, skiff_err *err)
{
    if (!skiff_opts_active(o)) {
        static const enum skiff_opt_id need[] = {SKIFF_OPT_MOUNTS, SKIFF_OPT_WORKDIR, SKIFF_OPT_SAVE, SKIFF_OPT_ENV,
                                                 SKIFF_OPT_UNSHARE};
        for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++)
            if (skiff_opts_isset(o, need[i]))
                return skiff_error(err, 0, "--%s needs --container-image (or --container-name)",
                                   skiff_opt_flag(need[i]));
        return 0;
    }
    if (o->save && o->writable == 0)
        return skiff_error(err, 0,
                           "--container-save with --container-readonly: a read-only container has "
                           "nothing to save");
    if (o->name && o->name_mode == SKIFF_NAME_CREATE && !o->image)
        return skiff_error(err, 0, "--container-name=%s:create needs --container-image to create it from", o->name);
    return 0;
}
