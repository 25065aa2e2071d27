/* What the gpu and rdma hooks (hooks/gpu.c, hooks/rdma.c) parse besides
 * their GPU lists (fuzz_hookutil): byte 0 picks the parser, the rest is its
 * input.
 *   0 NAME.conf (the gpu hook's knobs and the rdma hook's at once)
 *   1 the image's environment file and a NAME (first line)
 *   2 NVIDIA_DRIVER_CAPABILITIES
 *   3 NVIDIA_REQUIRE_* against fixed facts, and against unknown ones
 *   4 /proc/driver/nvidia files: gpus/BUS/information, capabilities
 *     access files, version
 *   5 MELLANOX_VISIBLE_DEVICES
 *   6 CUDA_VISIBLE_DEVICES renumbered ("CVD\nMINORS")
 *   7 a libibverbs provider's .driver file
 *   8 two versions compared ("A\nB") and a MIG-GPU-UUID/GI/CI name
 * Properties: a failure says why; a path knob that parsed is absolute, a
 * bool is yes/no, a word has no blank; an env value is exactly the text
 * after "NAME=" on the last such line (model); capabilities format and
 * parse back to the same set; a requirement evaluates the same twice and
 * with no known fact always holds (as in NVIDIA's toolkit) or fails to
 * parse; a parsed UUID, minor and version have their shape; an RDMA list
 * has distinct indices below SKIFF_RDMA_MAX; renumbering keeps the number
 * of entries, and maps each device the container has to its position; a
 * comparison is antisymmetric. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzzlib.h"
#include "hookconf.h"
#include "hookutil.h"
#include "nvidia.h"
#include "rdma.h"

static void conf(const char *s)
{
    char p1[4096], p2[4096], w[128];
    bool b1 = false, b2 = true;
    const struct skiff_knob knobs[] = {
        {"dev_root", SKIFF_KNOB_PATH, p1, sizeof(p1), NULL, NULL},
        {"driver_root", SKIFF_KNOB_PATH, p2, sizeof(p2), NULL, NULL},
        {"update_ldcache", SKIFF_KNOB_BOOL, &b1, 0, NULL, NULL},
        {"mount_driver", SKIFF_KNOB_BOOL, &b2, 0, NULL, NULL},
        {"default_visible", SKIFF_KNOB_WORD, w, sizeof(w), NULL, "a word"},
        {NULL, 0, NULL, 0, NULL, NULL},
    };
    snprintf(p1, sizeof(p1), "/dev");
    snprintf(p2, sizeof(p2), "/");
    snprintf(w, sizeof(w), "all");
    skiff_err err = {0};
    int rc = skiff_hook_conf_parse(s, "/f.conf", knobs, &err);
    fuzz_check_failure(rc, &err, "skiff_hook_conf_parse");
    FUZZ_CHECK(p1[0] == '/' && p2[0] == '/', "a path knob that is not absolute: '%s' '%s'", p1, p2);
    FUZZ_CHECK(w[0] && !strpbrk(w, " \t\r\n#"), "a word with a blank: '%s'", w);
    if (rc < 0)
        FUZZ_CHECK(!strncmp(err.msg, "/f.conf:", 8), "an error that names no file: %s", err.msg);
}

/* the model: the last line that starts with NAME= */
static void envtext(char *s)
{
    char *nl = strchr(s, '\n');
    if (!nl)
        return;
    *nl = '\0';
    const char *name = s, *text = nl + 1;
    if (!*name || strchr(name, '='))
        return;
    char buf[256], want[256];
    const char *got = skiff_envtext_get(text, name, buf, sizeof(buf));
    const char *found = NULL;
    size_t nlen = strlen(name), flen = 0;
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        size_t l = len && p[len - 1] == '\r' ? len - 1 : len;
        if (l > nlen && !strncmp(p, name, nlen) && p[nlen] == '=') {
            found = p + nlen + 1;
            flen = l - nlen - 1;
        }
        p += len + (e ? 1 : 0);
    }
    FUZZ_CHECK(!got == !found, "'%s': found %d, the model %d", name, got != NULL, found != NULL);
    if (!found)
        return;
    if (flen >= sizeof(want))
        flen = sizeof(want) - 1;
    memcpy(want, found, flen);
    want[flen] = '\0';
    FUZZ_CHECK(!strcmp(got, want), "'%s': '%s', the model '%s'", name, got, want);
}

static void caps(const char *s)
{
    unsigned c, back;
    char buf[128];
    skiff_err err = {0};
    int rc = skiff_nv_caps_parse(s, &c, &err);
    fuzz_check_failure(rc, &err, "skiff_nv_caps_parse");
    if (rc < 0)
        return;
    FUZZ_CHECK(!(c & ~(unsigned)SKIFF_NV_ALL), "'%s': bits %#x", s, c);
    skiff_nv_caps_format(c, buf, sizeof(buf));
    FUZZ_CHECK(skiff_nv_caps_parse(buf, &back, &err) == 0 && back == c, "'%s' formats as '%s', which reads back %#x", s,
               buf, back);
}

static const char *known(void *ctx, const char *name)
{
    (void)ctx;
    return !strcmp(name, "cuda")     ? "12.4"
           : !strcmp(name, "driver") ? "550.54.15"
           : !strcmp(name, "arch")   ? "9.0"
                                     : "tesla";
}

static const char *unknown(void *ctx, const char *name)
{
    (void)ctx;
    (void)name;
    return "";
}

static void require(const char *s)
{
    char why[256], why2[256];
    skiff_err err = {0};
    int a = skiff_nv_require_eval(s, known, NULL, why, sizeof(why), &err);
    fuzz_check_failure(a, &err, "skiff_nv_require_eval");
    int b = skiff_nv_require_eval(s, known, NULL, why2, sizeof(why2), &err);
    FUZZ_CHECK(a == b, "'%s': %d then %d", s, a, b);
    if (a == 0)
        FUZZ_CHECK(why[0] && !strcmp(why, why2), "'%s' is unmet without saying why", s);
    int u = skiff_nv_require_eval(s, unknown, NULL, why, sizeof(why), &err);
    FUZZ_CHECK(u == 1 || (u == -1 && a == -1), "'%s': %d with no known fact (%d with facts)", s, u, a);
}

static void proc(const char *s)
{
    char uuid[96], ver[64];
    unsigned minor;
    skiff_err err = {0};
    int rc = skiff_nv_parse_information(s, uuid, sizeof(uuid), &minor, &err);
    fuzz_check_failure(rc, &err, "skiff_nv_parse_information");
    if (rc == 0)
        FUZZ_CHECK(!strncmp(uuid, "GPU-", 4) && strlen(uuid) > 4 && minor < 1000000000, "uuid '%s' minor %u", uuid,
                   minor);
    rc = skiff_nv_parse_access(s, &minor, &err);
    fuzz_check_failure(rc, &err, "skiff_nv_parse_access");
    rc = skiff_nv_parse_version(s, ver, sizeof(ver), &err);
    fuzz_check_failure(rc, &err, "skiff_nv_parse_version");
    if (rc == 0)
        FUZZ_CHECK(ver[0] >= '0' && ver[0] <= '9' && strspn(ver, "0123456789.") == strlen(ver) && strchr(ver, '.'),
                   "version '%s'", ver);
}

static void rdma(const char *s)
{
    struct skiff_rdma_set set;
    skiff_err err = {0};
    int rc = skiff_rdma_parse(s, &set, &err);
    fuzz_check_failure(rc, &err, "skiff_rdma_parse");
    if (rc < 0)
        return;
    FUZZ_CHECK(set.kind == SKIFF_RDMA_LIST || set.n == 0, "'%s': kind %d with %zu", s, (int)set.kind, set.n);
    for (size_t i = 0; i < set.n; i++) {
        FUZZ_CHECK(set.idx[i] < SKIFF_RDMA_MAX, "'%s': index %u", s, set.idx[i]);
        for (size_t k = 0; k < i; k++)
            FUZZ_CHECK(set.idx[k] != set.idx[i], "'%s': %u twice", s, set.idx[i]);
    }
}

/* The comma-separated entries of s into v (at most max), their count. */
static size_t split(char *s, char **v, size_t max)
{
    size_t n = 0;
    for (char *p = s;; p++) {
        char *c = strchr(p, ',');
        if (n < max)
            v[n] = p;
        n++;
        if (!c)
            break;
        *c = '\0';
        p = c;
    }
    return n;
}

static void renumber(char *s)
{
    char *nl = strchr(s, '\n');
    if (!nl)
        return;
    *nl = '\0';
    const char *cvd = s, *minors = nl + 1;
    char out[512];
    skiff_err err = {0};
    int rc = skiff_gpu_renumber(cvd, minors, out, sizeof(out), &err);
    fuzz_check_failure(rc, &err, "skiff_gpu_renumber");
    if (rc < 0)
        return;
    FUZZ_CHECK(rc == (strcmp(out, cvd) != 0), "'%s' in %s: '%s', said %d", cvd, minors, out, rc);
    char *a = strdup(cvd), *b = strdup(out), *m = strdup(minors), *av[300], *bv[300], *mv[300];
    size_t na = split(a, av, 300), nb = split(b, bv, 300), nm = split(m, mv, 300);
    FUZZ_CHECK(na == nb, "'%s' in %s: '%s' has another number of entries", cvd, minors, out);
    for (size_t i = 0; i < na && i < 300; i++) {
        size_t pos = nm;
        if (*av[i] && strlen(av[i]) < 5 && strspn(av[i], "0123456789") == strlen(av[i]))
            for (size_t k = 0; k < nm && k < 300 && pos == nm; k++)
                if (strtoul(mv[k], NULL, 10) == strtoul(av[i], NULL, 10))
                    pos = k;
        if (pos < nm) {
            char want[16];
            snprintf(want, sizeof(want), "%zu", pos);
            FUZZ_CHECK(!strcmp(bv[i], want), "'%s' in %s: %s became %s, not %s", cvd, minors, av[i], bv[i], want);
        } else
            FUZZ_CHECK(!strcmp(bv[i], av[i]), "'%s' in %s: %s changed to %s", cvd, minors, av[i], bv[i]);
    }
    free(a);
    free(b);
    free(m);
}

static void driver_file(const char *s)
{
    char out[256];
    skiff_err err = {0};
    int rc = skiff_rdma_parse_driver_file(s, out, sizeof(out), &err);
    fuzz_check_failure(rc, &err, "skiff_rdma_parse_driver_file");
    if (rc == 0)
        FUZZ_CHECK(out[0] && !strpbrk(out, " \t\r\n"), "provider '%s'", out);
}

static void versions(char *s)
{
    char *nl = strchr(s, '\n');
    if (nl) {
        *nl = '\0';
        int ab, ba;
        int r1 = skiff_nv_version_cmp(s, nl + 1, &ab), r2 = skiff_nv_version_cmp(nl + 1, s, &ba);
        FUZZ_CHECK(r1 == r2, "'%s' vs '%s': %d and %d", s, nl + 1, r1, r2);
        if (r1 == 0)
            FUZZ_CHECK(ab == -ba, "'%s' vs '%s': %d, reversed %d", s, nl + 1, ab, ba);
    }
    char uuid[96];
    unsigned gi, ci;
    if (skiff_nv_parse_mig_path(s, uuid, sizeof(uuid), &gi, &ci) == 0)
        FUZZ_CHECK(!strncmp(uuid, "GPU-", 4) && strstr(s, uuid) == s + 4, "'%s' gave '%s'", s, uuid);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 << 16)
        return 0;
    char *s = fuzz_str(data + 1, size - 1);
    switch (data[0] % 9) {
    case 0:
        conf(s);
        break;
    case 1:
        envtext(s);
        break;
    case 2:
        caps(s);
        break;
    case 3:
        require(s);
        break;
    case 4:
        proc(s);
        break;
    case 5:
        rdma(s);
        break;
    case 6:
        renumber(s);
        break;
    case 7:
        driver_file(s);
        break;
    default:
        versions(s);
        break;
    }
    free(s);
    return 0;
}
