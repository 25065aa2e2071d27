/* skiff.conf (runtime/lib/config.c): key = value lines with comments,
 * quotes and ${HOME}/${UID}/${USER}/${XDG_RUNTIME_DIR}. Written by admins,
 * and its keys are also what users set as SKIFF_<KEY> and what the plugin
 * hands its user-side helper ('c' records, skiff_config_set_raw).
 * Properties: the file means what its lines say: loading it gives the
 * same result as a plain model (split at newlines, cut at '#', trim, split
 * at '=', unquote, skiff_config_set in order), however long a line is; a
 * failure names the file; every path key of a loaded config is empty or
 * absolute; each "key=value" of skiff_config_entry sets the same value
 * again through skiff_config_set_raw (the plugin-to-helper hop). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fuzzlib.h"

static const char *const path_keys[] = {"data_path",        "cache_path", "runtime_path",     "temp_path",
                                        "block_cache_path", "hooks_dir",  "credentials_file", NULL};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    skiff_config_for_user(1000, "fuzz", "/home/fuzz");
    return 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

/* The model: 0 or -1, and the config it gives. */
static int model(const uint8_t *data, size_t size, struct skiff_config *cfg)
{
    skiff_err err;
    if (skiff_config_load(cfg, "/dev/null", false, &err) < 0)
        abort();
    char *text = fuzz_str(data, size);
    int rv = 0;
    for (size_t at = 0; at < size && rv == 0;) {
        const uint8_t *nl = memchr(data + at, '\n', size - at);
        size_t end = nl ? (size_t)(nl - data) : size;
        char *line = text + at;
        text[end] = '\0'; /* a NUL inside the line ends it early, as in C */
        at = end + 1;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        line = trim(line);
        if (!*line)
            continue;
        char *eq = strchr(line, '=');
        if (!eq) {
            rv = -1;
            break;
        }
        *eq = '\0';
        char *key = trim(line), *val = trim(eq + 1);
        size_t vl = strlen(val);
        if (vl >= 2 && val[0] == '"' && val[vl - 1] == '"') {
            val[vl - 1] = '\0';
            val++;
        }
        rv = skiff_config_set(cfg, key, val, &err);
    }
    free(text);
    return rv;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    const char *path = fuzz_write(0, "skiff.conf", data, size);
    struct skiff_config cfg;
    skiff_err err = {0};
    int rc = skiff_config_load(&cfg, path, false, &err);
    fuzz_check_failure(rc, &err, "skiff_config_load");
    struct skiff_config want;
    int mrc = model(data, size, &want);
    FUZZ_CHECK(rc == mrc, "load says %d (%s), the lines say %d", rc, rc ? err.msg : "", mrc);
    if (rc < 0) {
        FUZZ_CHECK(!strncmp(err.msg, path, strlen(path)), "the error does not name the file: %s", err.msg);
        return 0;
    }
    char bc[SKIFF_PATH_MAX + 16];
    (void)skiff_config_block_cache(&cfg, bc, sizeof(bc));

    struct skiff_config again;
    rc = skiff_config_load(&again, "/dev/null", false, &err);
    FUZZ_CHECK(rc == 0, "defaults: %s", err.msg);
    char kv[SKIFF_PATH_MAX + 64], kv2[SKIFF_PATH_MAX + 64];
    size_t i;
    for (i = 0; skiff_config_entry(&cfg, i, kv, sizeof(kv)) == 1; i++) {
        char *eq = strchr(kv, '=');
        FUZZ_CHECK(eq, "entry %zu '%s' has no '='", i, kv);
        *eq = '\0';
        if (fuzz_in(kv, path_keys))
            FUZZ_CHECK(eq[1] == '\0' || eq[1] == '/', "%s = '%s' loaded: not an absolute path", kv, eq + 1);
        rc = skiff_config_set_raw(&again, kv, eq + 1, &err);
        FUZZ_CHECK(rc == 0, "%s = '%s' loaded, but set_raw refuses it: %s", kv, eq + 1, err.msg);
        *eq = '=';
    }
    FUZZ_CHECK(skiff_config_entry(&cfg, i, kv, sizeof(kv)) == 0, "entry %zu does not fit", i);
    for (i = 0; skiff_config_entry(&cfg, i, kv, sizeof(kv)) == 1; i++) {
        FUZZ_CHECK(skiff_config_entry(&again, i, kv2, sizeof(kv2)) == 1, "entry %zu lost", i);
        FUZZ_CHECK(!strcmp(kv, kv2), "'%s' came back as '%s'", kv, kv2);
        FUZZ_CHECK(skiff_config_entry(&want, i, kv2, sizeof(kv2)) == 1, "entry %zu lost", i);
        FUZZ_CHECK(!strcmp(kv, kv2), "loaded '%s', the lines say '%s'", kv, kv2);
    }
    return 0;
}
