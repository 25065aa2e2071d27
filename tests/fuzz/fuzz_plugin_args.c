/* What the SPANK plugin parses from users and admins (plugin/args.c,
 * plugin/options.c): plugstack.conf arguments (byte 0 even), the user's
 * --container-* options as srun hands them over (byte 0 = 1 mod 4: one
 * flag a line, "<flag index><any byte><argument>"), and their SKIFF_/PYXIS_CONTAINER_*
 * environment fallbacks (byte 0 = 3 mod 4: NAME=VALUE lines).
 * Properties: a failure says why (plugstack errors name plugstack.conf, an
 * environment error names the variable); accepted arguments hold what
 * args.h promises (absolute paths, timeout in 1..86400, a registry without
 * '/', '#' or blanks); accepted options are valid again on their own (image
 * class, every mount spec, names, a non-empty workdir); applying the options twice, as
 * Slurm may, gives the same result as once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "fuzzlib.h"
#include "mountspec.h"
#include "named.h"
#include "options.h"
#include "ref.h"

static void plugstack(char *s)
{
    char *av[64];
    int ac = 0;
    char *save = NULL;
    for (char *t = strtok_r(s, " \t\n", &save); t && ac < 64; t = strtok_r(NULL, " \t\n", &save))
        av[ac++] = t;
    struct skiff_plugin_args a;
    skiff_err err = {0};
    int rc = skiff_plugin_args_parse(&a, ac, av, &err);
    fuzz_check_failure(rc, &err, "skiff_plugin_args_parse");
    if (rc < 0) {
        FUZZ_CHECK(!strncmp(err.msg, "plugstack.conf: ", 16), "'%s' does not name plugstack.conf", err.msg);
        return;
    }
    FUZZ_CHECK(a.runtime_path[0] == '/', "runtime_path '%s'", a.runtime_path);
    FUZZ_CHECK(!a.block_cache_path[0] || a.block_cache_path[0] == '/', "block_cache_path '%s'", a.block_cache_path);
    FUZZ_CHECK(!a.importer[0] || a.importer[0] == '/', "importer '%s'", a.importer);
    FUZZ_CHECK(!a.config[0] || a.config[0] == '/', "config '%s'", a.config);
    FUZZ_CHECK(!a.helper[0] || a.helper[0] == '/', "helper '%s'", a.helper);
    FUZZ_CHECK(a.timeout_s >= 1 && a.timeout_s <= 86400, "timeout %d", a.timeout_s);
    FUZZ_CHECK(!strpbrk(a.default_registry, "/# \t"), "default_registry '%s'", a.default_registry);
    FUZZ_CHECK(a.scope == SKIFF_SCOPE_GLOBAL || a.scope == SKIFF_SCOPE_JOB, "scope %d", (int)a.scope);
}

static size_t count(const char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    return n;
}

static void check_valid(const struct skiff_opts *o)
{
    const struct skiff_start_request *r = &o->req;
    if (r->image) {
        enum skiff_ref_class c = skiff_ref_classify(r->image);
        FUZZ_CHECK(c == SKIFF_ARG_PATH || c == SKIFF_ARG_URI || c == SKIFF_ARG_BARE, "image '%s' kept (class %d)",
                   r->image, (int)c);
    }
    for (size_t i = 0; i < count(r->mounts); i++) {
        const char *m = r->mounts[i];
        char buf[8192];
        /* a relative source is made absolute on the node, as options.c checks it */
        snprintf(buf, sizeof(buf), "%s%s", m[0] == '.' ? "/" : "", m);
        struct skiff_mount mt;
        skiff_err err = {0};
        FUZZ_CHECK(skiff_mountspec_parse(buf, &mt, &err) == 0, "mount '%s' kept: %s", m, err.msg);
        skiff_mount_free(&mt);
        for (size_t j = 0; j < i; j++)
            FUZZ_CHECK(strcmp(r->mounts[j], m), "mount '%s' twice", m);
    }
    FUZZ_CHECK(!r->name_given || skiff_name_valid(r->name_given), "name '%s' kept", r->name_given);
    FUZZ_CHECK(r->name_mode >= SKIFF_NAME_AUTO && r->name_mode <= SKIFF_NAME_NO_EXEC, "name mode %d", r->name_mode);
    /* relative is pyxis's: it starts at the image's WorkingDir, resolved
     * inside the root (skiff_root_path) */
    FUZZ_CHECK(!r->workdir || r->workdir[0], "empty workdir kept");
    FUZZ_CHECK(!r->save || (r->save[0] && r->save[strlen(r->save) - 1] != '/'), "save '%s' kept", r->save);
    for (size_t i = 0; i < count(r->env); i++) {
        const char *e = r->env[i];
        size_t n = strcspn(e, "=");
        FUZZ_CHECK(n > 0 && !(e[0] >= '0' && e[0] <= '9') &&
                       strspn(e, "_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") == n,
                   "env entry '%s' kept", e);
    }
    skiff_err err = {0};
    fuzz_check_failure(skiff_opts_check(o, &err), &err, "skiff_opts_check");
}

static bool same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

static bool same_list(const char *const *a, const char *const *b)
{
    if (count(a) != count(b))
        return false;
    for (size_t i = 0; i < count(a); i++)
        if (strcmp(a[i], b[i]))
            return false;
    return true;
}

static void same_opts(const struct skiff_opts *a, const struct skiff_opts *b)
{
    const struct skiff_start_request *x = &a->req, *y = &b->req;
    FUZZ_CHECK(same_str(x->image, y->image) && same_str(x->workdir, y->workdir) &&
                   same_str(x->name_given, y->name_given) && same_str(x->save, y->save),
               "strings differ after applying the options twice");
    FUZZ_CHECK(x->name_mode == y->name_mode && x->mount_home == y->mount_home && x->remap_root == y->remap_root &&
                   x->use_entrypoint == y->use_entrypoint && x->writable == y->writable &&
                   x->unshare_flags == y->unshare_flags && a->given == b->given && a->on == b->on,
               "scalars differ after applying the options twice");
    FUZZ_CHECK(same_list(x->mounts, y->mounts) && same_list(x->env, y->env),
               "lists differ after applying the options twice");
}

/* Applies each line; 0, or -1 at the first error (with a message). */
static int apply_lines(struct skiff_opts *o, char *s)
{
    size_t nflags = 0;
    struct skiff_opt_flag f;
    while (skiff_opts_flag(nflags, &f) == 0)
        nflags++;
    char *save = NULL;
    for (char *l = strtok_r(s, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (strlen(l) < 2)
            continue;
        skiff_opts_flag((unsigned char)l[0] % nflags, &f);
        skiff_err err = {0};
        int rc = skiff_opts_set(o, f.name, l + 2, &err);
        fuzz_check_failure(rc, &err, "skiff_opts_set");
        if (rc < 0)
            return -1;
    }
    return 0;
}

static void options(const char *s)
{
    struct skiff_opts once, twice;
    skiff_opts_init(&once);
    skiff_opts_init(&twice);
    char *a = strdup(s), *b = strdup(s), *c = strdup(s);
    int rc = apply_lines(&once, a);
    if (rc == 0) {
        check_valid(&once);
        FUZZ_CHECK(apply_lines(&twice, b) == 0 && apply_lines(&twice, c) == 0, "the same options fail the second time");
        same_opts(&once, &twice);
    }
    free(a);
    free(b);
    free(c);
    skiff_opts_free(&once);
    skiff_opts_free(&twice);
}

struct envs {
    char *text;
};

static const char *lookup(void *ctx, const char *name)
{
    const char *t = ((struct envs *)ctx)->text;
    size_t n = strlen(name);
    for (const char *l = t; l && *l;) {
        const char *nl = strchr(l, '\n');
        if (!strncmp(l, name, n) && l[n] == '=') {
            static char val[8192];
            size_t vl = nl ? (size_t)(nl - l - n - 1) : strlen(l + n + 1);
            if (vl >= sizeof(val))
                vl = sizeof(val) - 1;
            memcpy(val, l + n + 1, vl);
            val[vl] = '\0';
            return val;
        }
        l = nl ? nl + 1 : NULL;
    }
    return NULL;
}

static void from_env(char *s)
{
    struct envs e = {s};
    struct skiff_opts o;
    skiff_opts_init(&o);
    skiff_err err = {0};
    int rc = skiff_opts_from_env(&o, lookup, &e, &err);
    fuzz_check_failure(rc, &err, "skiff_opts_from_env");
    if (rc < 0)
        FUZZ_CHECK(strstr(err.msg, "_CONTAINER_"), "'%s' names no variable", err.msg);
    else
        check_valid(&o);
    skiff_opts_free(&o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 16384)
        return 0;
    char *s = fuzz_str(data + 1, size - 1);
    if (!(data[0] & 1))
        plugstack(s);
    else if (!(data[0] & 2))
        options(s);
    else
        from_env(s);
    free(s);
    return 0;
}
