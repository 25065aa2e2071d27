/* The files container hooks hand back to the runtime (doc/hooks.md): the
 * env file ($SKIFF_ENV_FILE, K=V lines, read by runtime/lib/container/hookrun.c) and
 * the mounts file ($SKIFF_MOUNTS_FILE, fstab lines, parsed by
 * runtime/lib/container/mountspec.c), and the helpers hooks write them with
 * (skiff_hook_setenv, skiff_hook_mount in hooks/lib/hookutil.c).
 * Byte 0 even: the rest is an env file, read over a base environment.
 * Byte 0 odd: the rest is what hooks write, one call a line:
 * "e NAME<TAB>VALUE" or "m SRC<TAB>DST<TAB>TYPE<TAB>OPTS".
 * Properties: the reader's result equals a model of the file (each line
 * that is not blank or a comment sets its K=V, replacing an earlier K), or
 * it fails with a message; whatever a helper accepted is read back by the
 * runtime exactly (a variable with its value, a mount with its fields) or
 * refused with a message, never silently dropped or changed. */
#include "../../runtime/lib/container/hookrun.c" /* skiff_hooks_read_env, with the file's statics */

#include "fuzzlib.h"
#include "hookutil.h"

static char envfile[4096], mountsfile[4096];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    snprintf(envfile, sizeof(envfile), "%s/hook.env", fuzz_dir());
    snprintf(mountsfile, sizeof(mountsfile), "%s/hook.fstab", fuzz_dir());
    setenv("SKIFF_ENV_FILE", envfile, 1);
    setenv("SKIFF_MOUNTS_FILE", mountsfile, 1);
    return 0;
}

static char **base_env(void)
{
    char **env = NULL;
    skiff_err err;
    if (skiff_strv_push(&env, "PATH=/usr/bin:/bin", &err) < 0 || skiff_strv_push(&env, "HOME=/root", &err) < 0)
        abort();
    return env;
}

static void same_env(char **a, char **b)
{
    size_t i = 0;
    for (; a && a[i]; i++)
        FUZZ_CHECK(b && b[i] && !strcmp(a[i], b[i]), "entry %zu: read '%s', the file says '%s'", i, a[i],
                   b && b[i] ? b[i] : "(none)");
    FUZZ_CHECK(!b || !b[i], "the file says more than was read ('%s')", b[i]);
}

/* The model of an env file: lines split at '\n', trailing CR/LF dropped,
 * blank and '#' lines skipped, the line (to its first NUL) set as K=V. */
static int model_env(const uint8_t *data, size_t size, char ***env)
{
    for (size_t at = 0; at < size;) {
        const uint8_t *nl = memchr(data + at, '\n', size - at);
        size_t end = nl ? (size_t)(nl - data) : size, n = end - at;
        char *line = fuzz_str(data + at, n);
        at = end + 1;
        while (n && (line[n - 1] == '\r' || line[n - 1] == '\n'))
            line[--n] = '\0';
        int rc = 0;
        if (n && line[0] != '#') {
            const char *eq = strchr(line, '=');
            skiff_err err;
            rc = !eq || eq == line ? -1 : skiff_env_set(env, line, &err);
        }
        free(line);
        if (rc < 0)
            return -1;
    }
    return 0;
}

static void read_back(const uint8_t *data, size_t size)
{
    fuzz_write(0, "hook.env", data, size);
    char **env = base_env(), **want = base_env();
    skiff_err err = {0};
    int rc = skiff_hooks_read_env(envfile, &env, &err);
    fuzz_check_failure(rc, &err, "skiff_hooks_read_env");
    int mrc = model_env(data, size, &want);
    FUZZ_CHECK(rc == mrc, "the reader says %d (%s), the model %d", rc, rc ? err.msg : "", mrc);
    if (rc == 0)
        same_env(env, want);
    skiff_strv_free(env);
    skiff_strv_free(want);
}

struct mount_call {
    char *f[4];
};

static void written_by_hooks(char *text)
{
    fuzz_write(0, "hook.env", "", 0);
    fuzz_write(1, "hook.fstab", "", 0);
    char **want = base_env();
    struct mount_call mounts[64];
    size_t nm = 0;
    char *save = NULL;
    for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        char *f[4] = {NULL, NULL, NULL, NULL}, *p = l + (l[0] ? 1 : 0);
        for (int k = 0; k < 4; k++) {
            f[k] = p;
            char *tab = strchr(p, '\t');
            if (tab)
                *tab = '\0';
            p = tab ? tab + 1 : p + strlen(p);
        }
        skiff_err err = {0};
        if (l[0] == 'e') {
            int rc = skiff_hook_setenv(f[0], f[1], &err);
            fuzz_check_failure(rc, &err, "skiff_hook_setenv");
            if (rc == 0) {
                size_t n = strlen(f[0]) + strlen(f[1]) + 2;
                char *kv = malloc(n);
                snprintf(kv, n, "%s=%s", f[0], f[1]);
                FUZZ_CHECK(skiff_env_set(&want, kv, &err) == 0, "'%s' written, not a K=V: %s", kv, err.msg);
                free(kv);
            }
        } else if (l[0] == 'm' && nm < 64) {
            int rc = skiff_hook_mount(f[0], f[1], f[2], f[3], &err);
            fuzz_check_failure(rc, &err, "skiff_hook_mount");
            if (rc == 0)
                mounts[nm++] = (struct mount_call){{f[0], f[1], f[2], f[3]}};
        }
    }
    /* the runtime's side */
    char **env = base_env();
    skiff_err err = {0};
    int rc = skiff_hooks_read_env(envfile, &env, &err);
    FUZZ_CHECK(rc == 0, "the env file the helpers wrote does not read: %s", err.msg);
    same_env(env, want);
    skiff_strv_free(env);
    skiff_strv_free(want);

    FILE *f = fopen(mountsfile, "re");
    if (!f)
        abort();
    char *line = NULL;
    size_t cap = 0, i = 0;
    while (getline(&line, &cap, f) > 0) {
        FUZZ_CHECK(i < nm, "more lines than mounts written");
        struct skiff_mount m;
        rc = skiff_mountspec_parse_fstab(line, &m, &err);
        fuzz_check_failure(rc, &err, "skiff_mountspec_parse_fstab");
        const struct mount_call *c = &mounts[i++];
        if (rc < 0)
            continue; /* refused, with a message: the start fails and says so */
        FUZZ_CHECK(m.dst, "mount of '%s' on '%s' written, read as a comment", c->f[0], c->f[1]);
        FUZZ_CHECK(!strcmp(m.dst, c->f[1]), "destination '%s' read as '%s'", c->f[1], m.dst);
        /* an unmount (x-detach, enroot's umount line) has no source */
        FUZZ_CHECK(m.detach  ? !m.src
                   : m.tmpfs ? !strcmp(c->f[2], "tmpfs")
                             : !strcmp(m.src, c->f[0]),
                   "source '%s' read differently", c->f[0]);
        skiff_mount_free(&m);
    }
    FUZZ_CHECK(i == nm, "%zu mounts written, %zu lines read", nm, i);
    free(line);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 16384)
        return 0;
    if (!(data[0] & 1)) {
        read_back(data + 1, size - 1);
    } else {
        char *s = fuzz_str(data + 1, size - 1);
        written_by_hooks(s);
        free(s);
    }
    return 0;
}
