/* The image config inside an image (runtime/lib/image/imgconfig.c): a container
 * start reads /.skiff/config.json from the image, which whoever built the
 * image controls; `skiff import` writes it and /.skiff/environment (one
 * K=V a line) from the OCI config's "config" object.
 * Input: the bytes of /.skiff/config.json.
 * Properties: a failure says why; what import writes from this config reads
 * back identical (Env, Entrypoint, Cmd, WorkingDir); /.skiff/environment
 * holds exactly the Env strings that are one K=V line, in order, and every
 * entry left out was reported. */
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzzlib.h"
#include "imgconfig.h"

static int open_root(const char *name, char *path, size_t n)
{
    snprintf(path, n, "%s/%s", fuzz_dir(), name);
    mkdir(path, 0700);
    int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        abort();
    return fd;
}

static void same_strv(char **a, char **b, const char *what)
{
    size_t i = 0;
    for (; a && a[i]; i++)
        FUZZ_CHECK(b && b[i] && !strcmp(a[i], b[i]), "%s[%zu] '%s' did not come back", what, i, a[i]);
    FUZZ_CHECK(!b || !b[i], "%s grew", what);
}

static void warned(void *ctx, const char *msg)
{
    FUZZ_CHECK(msg && msg[0], "an empty warning");
    ++*(size_t *)ctx;
}

/* The environment file against the Env array. */
static void check_environment(const char *root, json_t *env, size_t warnings)
{
    char p[8192];
    snprintf(p, sizeof(p), "%s/.skiff/environment", root);
    FILE *f = fopen(p, "re");
    FUZZ_CHECK(f, "no %s", p);
    char *line = NULL;
    size_t cap = 0, want = 0, left_out = 0;
    ssize_t n;
    size_t i;
    json_t *v;
    json_array_foreach(env, i, v)
    {
        const char *s = json_string_value(v);
        if (!s || !strchr(s, '=') || strchr(s, '\n')) {
            left_out++;
            continue;
        }
        n = getline(&line, &cap, f);
        FUZZ_CHECK(n > 0 && line[n - 1] == '\n', "Env[%zu] '%s' missing from the environment file", i, s);
        line[n - 1] = '\0';
        FUZZ_CHECK(!strcmp(line, s), "Env[%zu] '%s' written as '%s'", i, s, line);
        want++;
    }
    FUZZ_CHECK(getline(&line, &cap, f) < 0, "the environment file has more than the %zu entries of Env", want);
    FUZZ_CHECK(left_out == warnings, "%zu entries left out, %zu reported", left_out, warnings);
    free(line);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    char r1[4096], r2[4096];
    int fd1 = open_root("image", r1, sizeof(r1)), fd2 = open_root("import", r2, sizeof(r2));
    char dir[4200];
    snprintf(dir, sizeof(dir), "%s/.skiff", r1);
    mkdir(dir, 0755);
    fuzz_write(0, "image/.skiff/config.json", data, size);

    struct skiff_image_config ic1, ic2;
    memset(&ic1, 0, sizeof(ic1));
    memset(&ic2, 0, sizeof(ic2));
    skiff_err err = {0};
    int rc = skiff_imgconfig_read(fd1, &ic1, &err);
    fuzz_check_failure(rc, &err, "skiff_imgconfig_read");

    json_error_t je;
    json_t *c = json_loadb((const char *)data, size, 0, &je);
    FUZZ_CHECK(rc < 0 || json_is_object(c), "read accepted what is not a JSON object");
    if (c) { /* import writes whatever config the image has */
        json_t *whole = json_pack("{sO}", "config", c);
        size_t warnings = 0;
        int wrc = skiff_imgconfig_write(fd2, whole, warned, &warnings, &err);
        fuzz_check_failure(wrc, &err, "skiff_imgconfig_write");
        FUZZ_CHECK(wrc == 0, "import could not write the config it read: %s", err.msg);
        json_t *env = json_is_object(c) ? json_object_get(c, "Env") : NULL;
        check_environment(r2, env, warnings);
        if (rc == 0) { /* an image config as a start reads it: comes back the same */
            int rc2 = skiff_imgconfig_read(fd2, &ic2, &err);
            FUZZ_CHECK(rc2 == 0, "what import wrote does not read back: %s", err.msg);
            same_strv(ic1.env, ic2.env, "Env");
            same_strv(ic1.entrypoint, ic2.entrypoint, "Entrypoint");
            same_strv(ic1.cmd, ic2.cmd, "Cmd");
            FUZZ_CHECK(!strcmp(ic1.workdir, ic2.workdir), "WorkingDir '%s' came back as '%s'", ic1.workdir,
                       ic2.workdir);
        }
        json_decref(whole);
        json_decref(c);
    }
    skiff_imgconfig_free(&ic1);
    skiff_imgconfig_free(&ic2);
    close(fd1);
    close(fd2);
    return 0;
}
