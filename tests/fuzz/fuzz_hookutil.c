/* What the bundled hooks parse (hooks/lib/hookutil.c): GPU visibility lists
 * from the job's environment, numbers and GPU-/MIG- UUIDs (byte 0 = 0 mod 3), the image's /etc/passwd
 * and /etc/group merged with the user's entry (1 mod 3: "NAME:ID\n" then the
 * file), and a glibc ld.so.cache (2 mod 3: the file).
 * Properties: a failure says why; a GPU list has at most 64 distinct
 * devices below 4096, and "all"/"none" none; a merged file is the image's
 * lines, minus exactly those whose first field is the name or whose third
 * field is the id (read as strtoul does, within that line), plus the
 * user's line; every
 * library the cache yields is a prefix match with a path (ASan checks that
 * no offset of the file is followed past its end). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzzlib.h"
#include "hookutil.h"

static void gpu(const char *s)
{
    struct skiff_gpu_set set;
    skiff_err err = {0};
    int rc = skiff_gpu_parse(s, &set, &err);
    fuzz_check_failure(rc, &err, "skiff_gpu_parse");
    if (rc < 0)
        return;
    FUZZ_CHECK(set.kind == SKIFF_GPU_LIST || set.n == 0, "'%s': kind %d with %zu devices", s, (int)set.kind, set.n);
    FUZZ_CHECK(set.n <= SKIFF_GPU_MAX, "'%s': %zu devices", s, set.n);
    FUZZ_CHECK(set.kind == SKIFF_GPU_LIST || set.nuuid == 0, "'%s': kind %d with UUIDs", s, (int)set.kind);
    for (size_t i = 0; i < set.nuuid; i++) {
        const char *u = set.uuid[i];
        FUZZ_CHECK((!strncmp(u, "GPU-", 4) || !strncmp(u, "MIG-", 4)) && strlen(u) < SKIFF_GPU_UUID_MAX &&
                       !strchr(u, ','),
                   "'%s': UUID '%s'", s, u);
        FUZZ_CHECK(strstr(s, u) != NULL, "'%s': UUID '%s' is not from the list", s, u);
    }
    for (size_t i = 0; i < set.n; i++) {
        FUZZ_CHECK(set.idx[i] < 4096, "'%s': device %u", s, set.idx[i]);
        for (size_t k = 0; k < i; k++)
            FUZZ_CHECK(set.idx[k] != set.idx[i], "'%s': device %u twice", s, set.idx[i]);
    }
}

/* Whether one line (n bytes, no newline) is the user's by name or id. */
static bool model_matches(const char *l, size_t n, const char *name, unsigned long id)
{
    char *line = strndup(l, n), *f[3] = {NULL, NULL, NULL}, *p = line;
    for (int k = 0; k < 3 && p; k++) {
        f[k] = p;
        p = strchr(p, ':');
        if (p)
            *p++ = '\0';
    }
    /* the id field as the C library reads it (strtoul: blanks and a sign
     * allowed), but only what lies within this line, and only when a ':'
     * ends it, as in a real entry */
    bool by_name = f[1] && !strcmp(f[0], name), by_id = false;
    if (f[2] && p) {
        char *end;
        unsigned long v = strtoul(f[2], &end, 10);
        by_id = end != f[2] && *end == '\0' && v == id;
    }
    free(line);
    return by_name || by_id;
}

static void identity(char *s)
{
    char *nl = strchr(s, '\n');
    if (!nl)
        return;
    *nl = '\0';
    char *colon = strchr(s, ':');
    if (!colon)
        return;
    *colon = '\0';
    const char *name = s, *image = nl + 1;
    unsigned long id = strtoul(colon + 1, NULL, 10) % 100000000; /* never an overflowed value */
    char line[512];
    snprintf(line, sizeof(line), "%s:x:%lu:%lu::/home/%s:/bin/sh", name, id, id, name);
    skiff_err err = {0};
    char *out = skiff_identity_merge(image, name, id, line, &err);
    FUZZ_CHECK(out, "merge failed: %s", err.msg);
    /* the model: the image's lines that are not the user's, then the user's */
    size_t cap = strlen(image) + strlen(line) + 3, o = 0;
    char *want = malloc(cap);
    for (const char *p = image; *p;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (!model_matches(p, n, name, id)) {
            memcpy(want + o, p, n);
            o += n;
            want[o++] = '\n';
        }
        p += n + (e ? 1 : 0);
    }
    o += (size_t)snprintf(want + o, cap - o, "%s\n", line);
    FUZZ_CHECK(!strcmp(out, want), "merging %s (%lu) gave\n%s\nthe lines say\n%s", name, id, out, want);
    free(want);
    free(out);
}

static int on_lib(void *ctx, const char *name, const char *path, unsigned flags)
{
    (void)flags;
    const char *const *prefixes = ctx;
    bool match = false;
    for (size_t i = 0; prefixes[i]; i++)
        match |= !strncmp(name, prefixes[i], strlen(prefixes[i]));
    FUZZ_CHECK(match, "library '%s' matches no prefix", name);
    (void)strlen(path);
    return 0;
}

static void ldcache(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write(0, "ld.so.cache", data, size);
    static const char *prefixes[] = {"libcuda.so", "libnvidia-", "lib", NULL};
    skiff_err err = {0};
    int rc = skiff_ldcache_find(path, (const char *const *)prefixes, on_lib, prefixes, &err);
    fuzz_check_failure(rc, &err, "skiff_ldcache_find");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 << 16)
        return 0;
    int mode = data[0] % 3;
    if (mode == 2) {
        ldcache(data + 1, size - 1);
        return 0;
    }
    char *s = fuzz_str(data + 1, size - 1);
    if (mode == 0)
        gpu(s);
    else
        identity(s);
    free(s);
    return 0;
}
