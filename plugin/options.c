/* --container-* options: the table, parsing and validation; see options.h. */
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

/* How an option's argument reaches the request. */
enum kind {
    STR,    /* one string field (the last value wins), after check */
    LIST,   /* comma-separated entries, each checked, added once to a list field */
    BOOL,   /* a flag pair: true, or false (off_flag); given both ways is an error */
    CUSTOM, /* check sets what it sets */
};

enum {
    START_ONLY = 1 << 0,      /* shapes a container as it starts: a joining step ignores it */
    NEEDS_CONTAINER = 1 << 1, /* refused without --container-image or --container-name */
};

struct opt {
    const char *flag;     /* without "--" */
    const char *env;      /* SKIFF_CONTAINER_<env>, then PYXIS_CONTAINER_<env> */
    const char *arginfo;  /* (valued options) */
    const char *usage;    /* srun --help's line */
    const char *off_flag; /* BOOL: the flag for false, or NULL (none) */
    const char *off_env;  /* BOOL: an environment fallback meaning false (READONLY) */
    const char *off_usage;
    enum kind kind;
    size_t field; /* in struct skiff_start_request (NO_FIELD: only accepted) */
    int (*check)(struct skiff_opts *o, const char *arg, skiff_err *err);
    const char *empty; /* LIST: what an empty entry is told */
    unsigned flags;
};

#define NO_FIELD ((size_t)-1)
#define FIELD(f) offsetof(struct skiff_start_request, f)

static int check_image(struct skiff_opts *o, const char *arg, skiff_err *err);
static int check_mount(struct skiff_opts *o, const char *spec, skiff_err *err);
static int check_env(struct skiff_opts *o, const char *entry, skiff_err *err);
static int check_save(struct skiff_opts *o, const char *arg, skiff_err *err);
static int set_name(struct skiff_opts *o, const char *arg, skiff_err *err);
static int set_unshare(struct skiff_opts *o, const char *arg, skiff_err *err);

/* Every option, in srun --help's order. */
enum {
    OPT_IMAGE,
    OPT_MOUNTS,
    OPT_WORKDIR,
    OPT_NAME,
    OPT_SAVE,
    OPT_MOUNT_HOME,
    OPT_REMAP_ROOT,
    OPT_ENTRYPOINT,
    OPT_ENTRYPOINT_LOG,
    OPT_WRITABLE,
    OPT_ENV,
    OPT_ENV_FILE,
    OPT_UNSHARE,
    NOPTS
};
static const struct opt opts[NOPTS] = {
    [OPT_IMAGE] = {.flag = "container-image",
                   .env = "IMAGE",
                   .arginfo = "[USER@][REGISTRY#]IMAGE[:TAG]|PATH",
                   .usage = "[skiff] image for the container: a squashfs file (/path or ./path) or an image URI "
                            "(docker://, docker-archive:, oci:, oci-archive:, dir:)",
                   .kind = STR,
                   .field = FIELD(image),
                   .check = check_image},
    [OPT_MOUNTS] = {.flag = "container-mounts",
                    .env = "MOUNTS",
                    .arginfo = "SRC:DST[:FLAGS][,SRC:DST...]",
                    .usage = "[skiff] bind mount[s] inside the container; flags separated by '+', e.g. ro+rbind; "
                             "tmpfs:DST for a tmpfs",
                    .kind = LIST,
                    .field = FIELD(mounts),
                    .check = check_mount,
                    .empty = "empty mount entry (entries are separated by single commas)",
                    .flags = START_ONLY | NEEDS_CONTAINER},
    [OPT_WORKDIR] = {.flag = "container-workdir",
                     .env = "WORKDIR",
                     .arginfo = "PATH",
                     .usage = "[skiff] working directory inside the container",
                     /* a relative one starts where the container starts (pyxis): the
                      * image's WorkingDir, else / */
                     .kind = STR,
                     .field = FIELD(workdir),
                     .flags = NEEDS_CONTAINER},
    [OPT_NAME] = {.flag = "container-name",
                  .env = "NAME",
                  .arginfo = "NAME[:auto|create|exec|no_exec]",
                  .usage = "[skiff] keep the container's changes under NAME and reuse them in later steps",
                  .kind = CUSTOM,
                  .field = FIELD(name_given),
                  .check = set_name},
    [OPT_SAVE] = {.flag = "container-save",
                  .env = "SAVE",
                  .arginfo = "PATH",
                  .usage = "[skiff] save the container's filesystem to a squashfs file at step end",
                  .kind = STR,
                  .field = FIELD(save),
                  .check = check_save,
                  .flags = START_ONLY | NEEDS_CONTAINER},
    [OPT_MOUNT_HOME] = {.flag = "container-mount-home",
                        .env = "MOUNT_HOME",
                        .usage = "[skiff] bind mount the user's home directory",
                        .off_flag = "no-container-mount-home",
                        .off_usage = "[skiff] do not bind mount the user's home directory",
                        .kind = BOOL,
                        .field = FIELD(mount_home),
                        .flags = START_ONLY},
    [OPT_REMAP_ROOT] = {.flag = "container-remap-root",
                        .env = "REMAP_ROOT",
                        .usage = "[skiff] be uid 0 inside the container (grants no privilege on the host)",
                        .off_flag = "no-container-remap-root",
                        .off_usage = "[skiff] keep your own uid inside the container",
                        .kind = BOOL,
                        .field = FIELD(remap_root),
                        .flags = START_ONLY},
    [OPT_ENTRYPOINT] = {.flag = "container-entrypoint",
                        .env = "ENTRYPOINT",
                        .usage = "[skiff] run the image's entrypoint before the command",
                        .off_flag = "no-container-entrypoint",
                        .off_usage = "[skiff] do not run the image's entrypoint",
                        .kind = BOOL,
                        .field = FIELD(use_entrypoint),
                        .flags = START_ONLY},
    [OPT_ENTRYPOINT_LOG] = {.flag = "container-entrypoint-log",
                            .env = "ENTRYPOINT_LOG",
                            .usage = "[skiff] show the entrypoint's output",
                            /* pyxis's; the entrypoint's output is always the task's */
                            .kind = BOOL,
                            .field = NO_FIELD},
    [OPT_WRITABLE] = {.flag = "container-writable",
                      .env = "WRITABLE",
                      .usage = "[skiff] make the container filesystem writable (default)",
                      .off_flag = "container-readonly",
                      .off_env = "READONLY",
                      .off_usage = "[skiff] make the container filesystem read-only",
                      .kind = BOOL,
                      .field = FIELD(writable),
                      .flags = START_ONLY},
    [OPT_ENV] = {.flag = "container-env",
                 .env = "ENV",
                 .arginfo = "NAME[,NAME...]",
                 .usage = "[skiff] keep these variables' host values over the image's (NAME=VALUE sets one)",
                 .kind = LIST,
                 .field = FIELD(env),
                 .check = check_env,
                 .empty = "empty entry (write NAME[,NAME...] or NAME=VALUE)",
                 .flags = NEEDS_CONTAINER},
    [OPT_ENV_FILE] = {.flag = "container-env-file",
                      .env = "ENV_FILE",
                      .arginfo = "PATH",
                      .usage = "[skiff] NAME=VALUE lines for the container's environment (enroot's --env-file)",
                      .kind = STR,
                      .field = FIELD(env_file),
                      .flags = START_ONLY | NEEDS_CONTAINER},
    [OPT_UNSHARE] = {.flag = "container-unshare",
                     .env = "UNSHARE",
                     .arginfo = "net,ipc,uts",
                     .usage = "[skiff] give the container its own network/IPC/hostname namespaces",
                     .kind = CUSTOM,
                     .field = FIELD(unshare_flags),
                     .check = set_unshare,
                     .flags = START_ONLY | NEEDS_CONTAINER},
};
_Static_assert(NOPTS <= 64, "one bit per option in skiff_opts.given");

#define BIT(i) (UINT64_C(1) << (i))

/* The request's field of option p, as a T. */
#define AT(o, p, T) ((T *)(void *)((char *)&(o)->req + (p)->field))

/* ---- the table as SPANK flags ---- */

int skiff_opts_flag(size_t i, struct skiff_opt_flag *f)
{
    for (const struct opt *p = opts; p < opts + NOPTS; p++) {
        if (i == 0) {
            *f = (struct skiff_opt_flag){p->flag, p->arginfo, p->usage, p->kind != BOOL};
            return 0;
        }
        i--;
        if (p->kind == BOOL && p->off_flag) {
            if (i == 0) {
                *f = (struct skiff_opt_flag){p->off_flag, NULL, p->off_usage, false};
                return 0;
            }
            i--;
        }
    }
    return -1;
}

/* ---- storage: the option's own strings and lists in the request ---- */

void skiff_opts_init(struct skiff_opts *o)
{
    memset(o, 0, sizeof(*o));
    skiff_start_request_init(&o->req);
    o->req.writable = true; /* pyxis's default */
}

/* The string and list fields hold what strdup and skiff_strv_push made;
 * the request declares them const for its readers. */
static char **str_slot(struct skiff_opts *o, const struct opt *p)
{
    return AT(o, p, char *);
}

static char ***list_slot(struct skiff_opts *o, const struct opt *p)
{
    return AT(o, p, char **);
}

void skiff_opts_free(struct skiff_opts *o)
{
    for (const struct opt *p = opts; p < opts + NOPTS; p++) {
        if (p->field == NO_FIELD)
            continue;
        if (p->kind == STR || p == &opts[OPT_NAME])
            free(*str_slot(o, p));
        else if (p->kind == LIST)
            skiff_strv_free(*list_slot(o, p));
    }
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

/* ---- checks ---- */

static int check_image(struct skiff_opts *o, const char *arg, skiff_err *err)
{
    (void)o;
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

/* A relative source, made absolute on the node (skiff_opts_finish). */
static bool relative_source(const char *spec)
{
    return !strncmp(spec, "./", 2) || !strncmp(spec, "../", 3) || !strcmp(spec, ".") || !strncmp(spec, ".:", 2);
}

/* One SRC:DST[:FLAGS] entry; a relative source (./x) is allowed here and made
 * absolute on the node, against the step's working directory. */
static int check_mount(struct skiff_opts *o, const char *spec, skiff_err *err)
{
    (void)o;
    cleanup_free char *copy = NULL;
    const char *s = spec;
    if (relative_source(spec)) {
        /* validate with a stand-in absolute source; the real one comes later */
        if (asprintf(&copy, "/%s", spec) < 0)
            return skiff_error(err, ENOMEM, "out of memory");
        s = copy;
    }
    struct skiff_mount m;
    if (skiff_mountspec_parse(s, &m, err) < 0)
        return skiff_err_wrap(err, "mount '%s'", spec);
    skiff_mount_free(&m);
    return 0;
}

static int check_env(struct skiff_opts *o, const char *entry, skiff_err *err)
{
    (void)o;
    const char *eq = strchr(entry, '=');
    size_t n = eq ? (size_t)(eq - entry) : strlen(entry);
    if (!skiff_env_name_valid(entry, n))
        return skiff_error(err, 0,
                           "'%.*s' is not a variable name (letters, digits and '_', not starting with a "
                           "digit)",
                           (int)n, entry);
    return 0;
}

static int check_save(struct skiff_opts *o, const char *arg, skiff_err *err)
{
    (void)o;
    if (arg[strlen(arg) - 1] == '/')
        return skiff_error(err, 0, "--container-save: '%s' is a directory; give a file name (e.g. %sout.sqsh)", arg,
                           arg);
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
    o->req.unshare_flags = flags;
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
    free(*str_slot(o, &opts[OPT_NAME]));
    *str_slot(o, &opts[OPT_NAME]) = name;
    name = NULL;
    o->req.name_mode = mode;
    return 0;
}

/* ---- setting ---- */

static int set_list(struct skiff_opts *o, const struct opt *p, const char *arg, skiff_err *err)
{
    cleanup_free char *copy = strdup(arg);
    if (!copy)
        return skiff_error(err, ENOMEM, "out of memory");
    /* a trailing or doubled comma is a typo, not an empty entry */
    if (arg[0] == ',' || arg[strlen(arg) - 1] == ',' || strstr(arg, ",,"))
        return skiff_error(err, 0, "'%s': %s", arg, p->empty);
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (p->check(o, tok, err) < 0)
            return -1;
        if (!skiff_strv_contains(*list_slot(o, p), tok) && skiff_strv_push(list_slot(o, p), tok, err) < 0)
            return -1;
    }
    return 0;
}

/* The flag that gives boolean option p the value on. */
static void bool_flag(const struct opt *p, bool on, char *out, size_t n)
{
    if (!on && p->off_flag)
        snprintf(out, n, "--%s", p->off_flag);
    else
        snprintf(out, n, "--%s%s", on ? "" : "no-", p->flag);
}

/* A boolean pair given both ways is a mistake, not "the last one wins"
 * (pyxis refuses it too). Slurm passing the same value twice is fine. */
static int set_bool(struct skiff_opts *o, size_t i, bool on, skiff_err *err)
{
    const struct opt *p = &opts[i];
    bool before = (o->on & BIT(i)) != 0;
    if ((o->given & BIT(i)) && before != on) {
        char a[64], b[64];
        bool_flag(p, before, a, sizeof(a));
        bool_flag(p, on, b, sizeof(b));
        return skiff_error(err, 0, "%s and %s contradict each other: give one of them", a, b);
    }
    o->given |= BIT(i);
    o->on = on ? o->on | BIT(i) : o->on & ~BIT(i);
    if (p->field != NO_FIELD)
        *AT(o, p, bool) = on;
    return 0;
}

static int apply(struct skiff_opts *o, size_t i, bool on, const char *arg, skiff_err *err)
{
    const struct opt *p = &opts[i];
    if (p->kind == BOOL)
        return set_bool(o, i, on, err);
    if (!arg || !*arg)
        return skiff_error(err, 0, "--%s needs an argument", p->flag);
    int rc;
    switch (p->kind) {
    case STR:
        rc = p->check && p->check(o, arg, err) < 0 ? -1 : set_str(str_slot(o, p), arg, err);
        break;
    case LIST:
        rc = set_list(o, p, arg, err);
        break;
    default:
        rc = p->check(o, arg, err);
        break;
    }
    if (rc < 0)
        return skiff_err_wrap(err, "--%s", p->flag);
    o->given |= BIT(i);
    return 0;
}

int skiff_opts_set(struct skiff_opts *o, const char *flag, const char *arg, skiff_err *err)
{
    for (size_t i = 0; i < (size_t)NOPTS; i++) {
        if (!strcmp(flag, opts[i].flag))
            return apply(o, i, true, arg, err);
        if (opts[i].kind == BOOL && opts[i].off_flag && !strcmp(flag, opts[i].off_flag))
            return apply(o, i, false, arg, err);
    }
    return skiff_error(err, 0, "unknown option --%s", flag);
}

/* ---- the environment, checks, the node's part ---- */

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
    for (size_t i = 0; i < (size_t)NOPTS; i++) {
        const struct opt *p = &opts[i];
        if (o->given & BIT(i))
            continue;
        const char *v = env_lookup(get, ctx, p->env, var, sizeof(var));
        bool on = true;
        if (!v && p->off_env) {
            v = env_lookup(get, ctx, p->off_env, var, sizeof(var));
            on = false;
        }
        if (!v)
            continue;
        if (p->kind == BOOL) {
            int b = skiff_parse_bool(v);
            if (b < 0)
                return skiff_error(err, 0, "%s='%s': not a boolean (use 1/0, yes/no, true/false)", var, v);
            on = on ? b : !b;
        }
        if (apply(o, i, on, v, err) < 0)
            return skiff_err_wrap(err, "%s", var);
    }
    return 0;
}

bool skiff_opts_active(const struct skiff_opts *o)
{
    return o->req.image || o->req.name_given;
}

int skiff_opts_check(const struct skiff_opts *o, skiff_err *err)
{
    if (!skiff_opts_active(o)) {
        for (size_t i = 0; i < (size_t)NOPTS; i++)
            if ((opts[i].flags & NEEDS_CONTAINER) && (o->given & BIT(i)))
                return skiff_error(err, 0, "--%s needs --container-image (or --container-name)", opts[i].flag);
        return 0;
    }
    if (o->req.save && !o->req.writable)
        return skiff_error(err, 0,
                           "--container-save with --container-readonly: a read-only container has "
                           "nothing to save");
    if (o->req.name_given && o->req.name_mode == SKIFF_NAME_CREATE && !o->req.image)
        return skiff_error(err, 0, "--container-name=%s:create needs --container-image to create it from",
                           o->req.name_given);
    return 0;
}

/* path made absolute against cwd, in place. */
static int absolute(char **path, const char *cwd, skiff_err *err)
{
    char *abs;
    if (!*path || (*path)[0] == '/')
        return 0;
    if (asprintf(&abs, "%s/%s", cwd, *path) < 0)
        return skiff_error(err, ENOMEM, "out of memory");
    free(*path);
    *path = abs;
    return 0;
}

int skiff_opts_finish(struct skiff_opts *o, bool execute_entrypoint, const char *cwd, skiff_err *err)
{
    if (!(o->given & BIT(OPT_ENTRYPOINT)))
        o->req.use_entrypoint = execute_entrypoint;
    if (absolute(str_slot(o, &opts[OPT_SAVE]), cwd, err) < 0)
        return -1;
    char **mounts = *list_slot(o, &opts[OPT_MOUNTS]);
    for (size_t i = 0; mounts && mounts[i]; i++)
        if (mounts[i][0] == '.' && absolute(&mounts[i], cwd, err) < 0)
            return -1;
    return 0;
}

int skiff_opts_add_mount(struct skiff_opts *o, const char *spec, skiff_err *err)
{
    return skiff_strv_push(list_slot(o, &opts[OPT_MOUNTS]), spec, err);
}

size_t skiff_opts_start_only(const struct skiff_opts *o, char *out, size_t n)
{
    size_t used = 0, k = 0;
    out[0] = '\0';
    for (size_t i = 0; i < (size_t)NOPTS; i++) {
        if (!(opts[i].flags & START_ONLY) || !(o->given & BIT(i)))
            continue;
        char flag[64];
        bool_flag(&opts[i], opts[i].kind != BOOL || (o->on & BIT(i)), flag, sizeof(flag));
        int w = snprintf(out + used, n - used, "%s%s", k++ ? ", " : "", flag);
        if (w > 0 && (size_t)w < n - used)
            used += (size_t)w;
    }
    return k;
}
