/* See nvidia.h. */
#include "nvidia.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct {
    const char *name;
    unsigned bit;
} cap_names[] = {
    {"compute", SKIFF_NV_COMPUTE}, {"compat32", SKIFF_NV_COMPAT32}, {"graphics", SKIFF_NV_GRAPHICS},
    {"utility", SKIFF_NV_UTILITY}, {"video", SKIFF_NV_VIDEO},       {"display", SKIFF_NV_DISPLAY},
};
#define NCAPS (sizeof(cap_names) / sizeof(cap_names[0]))

int skiff_nv_caps_parse(const char *s, unsigned *caps, skiff_err *err)
{
    *caps = 0;
    for (const char *p = s; p && *p;) {
        size_t len = strcspn(p, ",");
        if (len == 3 && !strncmp(p, "all", 3))
            *caps |= SKIFF_NV_ALL;
        else if (len) {
            size_t i = 0;
            while (i < NCAPS && (strlen(cap_names[i].name) != len || strncmp(cap_names[i].name, p, len)))
                i++;
            if (i == NCAPS)
                return skiff_error(err, 0,
                                   "unknown NVIDIA driver capability '%.*s' (compute, compat32, graphics, utility, "
                                   "video, display or all)",
                                   (int)(len > 40 ? 40 : len), p);
            *caps |= cap_names[i].bit;
        }
        p += len + (p[len] == ',');
    }
    return 0;
}

void skiff_nv_caps_format(unsigned caps, char *buf, size_t n)
{
    size_t o = 0;
    if (n)
        buf[0] = '\0';
    for (size_t i = 0; i < NCAPS && o < n; i++)
        if (caps & cap_names[i].bit)
            o += (size_t)snprintf(buf + o, n - o, "%s%s", o ? "," : "", cap_names[i].name);
}

int skiff_nv_version_cmp(const char *a, const char *b, int *cmp)
{
    if (!*a || !*b || strspn(a, "0123456789.") != strlen(a) || strspn(b, "0123456789.") != strlen(b))
        return -1;
    for (;;) {
        a += strspn(a, ".");
        b += strspn(b, ".");
        if (!*a || !*b)
            break;
        /* each number as a digit string without its leading zeros: any
         * length, no overflow */
        a += strspn(a, "0");
        b += strspn(b, "0");
        size_t la = strspn(a, "0123456789"), lb = strspn(b, "0123456789");
        int c = la != lb ? (la < lb ? -1 : 1) : strncmp(a, b, la);
        if (c) {
            *cmp = c < 0 ? -1 : 1;
            return 0;
        }
        a += la;
        b += lb;
    }
    /* what is left of the longer one counts only if it is not all zeros */
    bool ra = strspn(a, "0.") != strlen(a), rb = strspn(b, "0.") != strlen(b);
    *cmp = ra ? 1 : rb ? -1 : 0;
    return 0;
}

enum op { OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE };
static const char *const op_names[] = {"=", "!=", "<", "<=", ">", ">="};

static bool holds(int cmp, enum op op)
{
    switch (op) {
    case OP_EQ:
        return cmp == 0;
    case OP_NE:
        return cmp != 0;
    case OP_LT:
        return cmp < 0;
    case OP_LE:
        return cmp <= 0;
    case OP_GT:
        return cmp > 0;
    case OP_GE:
        return cmp >= 0;
    }
    return false;
}

/* One rule "NAME OP VALUE" (len bytes at r): 1 holds, 0 not, -1 bad. */
static int rule(const char *r, size_t len, skiff_nv_fact_fn fact, void *ctx, const char **fact_out, skiff_err *err)
{
    char buf[256];
    if (len >= sizeof(buf))
        return skiff_error(err, 0, "rule '%.60s...' is too long", r);
    memcpy(buf, r, len);
    buf[len] = '\0';
    size_t nl = strcspn(buf, "<>=!"), ol = strspn(buf + nl, "<>=!");
    int op = -1;
    for (int i = 0; i < 6 && nl && ol; i++)
        if (strlen(op_names[i]) == ol && !strncmp(buf + nl, op_names[i], ol))
            op = i;
    const char *value = buf + nl + ol;
    if (op < 0 || !*value)
        return skiff_error(err, 0, "rule '%s': expected NAME OP VALUE (OP one of = != < <= > >=)", buf);
    buf[nl] = '\0';
    const char *name = buf;
    bool is_brand = !strcasecmp(name, "brand");
    if (strcasecmp(name, "cuda") && strcasecmp(name, "driver") && strcasecmp(name, "arch") && !is_brand)
        return skiff_error(err, 0, "rule '%.*s': unknown constraint '%s' (cuda, driver, arch or brand)", (int)len, r,
                           name);
    int dummy;
    if (!is_brand && skiff_nv_version_cmp(value, "0", &dummy) < 0)
        return skiff_error(err, 0, "rule '%.*s': '%s' is not a version number", (int)len, r, value);
    if (is_brand && op != OP_EQ && op != OP_NE)
        return skiff_error(err, 0, "rule '%.*s': a brand is compared with = or !=", (int)len, r);
    char lower[16];
    snprintf(lower, sizeof(lower), "%.15s", name);
    for (char *c = lower; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    const char *have = fact(ctx, lower);
    *fact_out = have;
    if (!have || !*have)
        return 1; /* unknown: assumed to hold, as NVIDIA's toolkit does */
    int cmp;
    if (is_brand)
        cmp = strcasecmp(have, value) ? 1 : 0;
    else if (skiff_nv_version_cmp(have, value, &cmp) < 0)
        return 1; /* a fact that is no version: nothing to hold it against */
    return holds(cmp, (enum op)op);
}

int skiff_nv_require_eval(const char *expr, skiff_nv_fact_fn fact, void *ctx, char *why, size_t whylen, skiff_err *err)
{
    bool any = false;
    if (whylen)
        why[0] = '\0';
    for (const char *p = expr; *p;) {
        p += strspn(p, " \t");
        size_t alen = strcspn(p, " \t");
        if (!alen)
            break;
        any = true;
        bool ok = true;
        char failed[256] = "";
        for (const char *q = p; q < p + alen;) {
            size_t rlen = strcspn(q, ",");
            if (q + rlen > p + alen)
                rlen = (size_t)(p + alen - q);
            if (rlen) {
                const char *have = NULL;
                int r = rule(q, rlen, fact, ctx, &have, err);
                if (r < 0)
                    return skiff_err_wrap(err, "'%.200s'", expr);
                if (!r && ok) {
                    char name[16];
                    snprintf(name, sizeof(name), "%.*s", (int)strcspn(q, "<>=!"), q);
                    snprintf(failed, sizeof(failed), "%.*s (this node: %s %.40s)", (int)(rlen > 100 ? 100 : rlen), q,
                             name, have ? have : "?");
                    ok = false;
                }
            }
            q += rlen + 1;
        }
        if (ok)
            return 1;
        if (whylen && !why[0])
            snprintf(why, whylen, "%s", failed);
        p += alen;
    }
    return any ? 0 : 1;
}

/* The value after "KEY:" on its line (blanks skipped), or NULL. */
static const char *field(const char *text, const char *key, size_t *len)
{
    size_t kl = strlen(key);
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t ll = nl ? (size_t)(nl - p) : strlen(p);
        if (ll > kl && !strncmp(p, key, kl) && p[kl] == ':') {
            const char *v = p + kl + 1;
            v += strspn(v, " \t");
            size_t vl = ll - (size_t)(v - p);
            while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t' || v[vl - 1] == '\r'))
                vl--;
            *len = vl;
            return v;
        }
        p = nl ? nl + 1 : NULL;
    }
    return NULL;
}

static int number_field(const char *text, const char *key, unsigned *out, skiff_err *err)
{
    size_t len;
    const char *v = field(text, key, &len);
    if (!v || !len || len > 9 || strspn(v, "0123456789") != len)
        return skiff_error(err, 0, "no '%s: NUMBER' line", key);
    *out = (unsigned)strtoul(v, NULL, 10);
    return 0;
}

int skiff_nv_parse_information(const char *text, char *uuid, size_t n, unsigned *minor, skiff_err *err)
{
    size_t len;
    const char *v = field(text, "GPU UUID", &len);
    if (!v || len < 5 || len >= n || strncmp(v, "GPU-", 4) || strspn(v + 4, "0123456789abcdefABCDEF-") != len - 4)
        return skiff_error(err, 0, "no 'GPU UUID: GPU-...' line");
    memcpy(uuid, v, len);
    uuid[len] = '\0';
    return number_field(text, "Device Minor", minor, err);
}

int skiff_nv_parse_access(const char *text, unsigned *minor, skiff_err *err)
{
    return number_field(text, "DeviceFileMinor", minor, err);
}

int skiff_nv_parse_version(const char *text, char *ver, size_t n, skiff_err *err)
{
    size_t len;
    const char *v = field(text, "NVRM version", &len);
    if (!v)
        return skiff_error(err, 0, "no 'NVRM version:' line");
    /* the first word after "Module" that is a dotted number */
    const char *m = NULL;
    for (const char *s = v; s < v + len && (s = strstr(s, "Module")) && s < v + len; s += 6)
        m = s + 6;
    for (const char *s = m; s && s < v + len;) {
        s += strspn(s, " \t");
        size_t w = strcspn(s, " \t\n");
        if (s + w > v + len)
            w = (size_t)(v + len - s);
        if (w && w < n && isdigit((unsigned char)s[0]) && strspn(s, "0123456789.") == w && memchr(s, '.', w)) {
            memcpy(ver, s, w);
            ver[w] = '\0';
            return 0;
        }
        if (!w)
            break;
        s += w;
    }
    return skiff_error(err, 0, "no kernel module version in the 'NVRM version:' line");
}

int skiff_nv_parse_mig_path(const char *s, char *gpu_uuid, size_t n, unsigned *gi, unsigned *ci)
{
    if (strncmp(s, "MIG-GPU-", 8))
        return -1;
    const char *u = s + 4, *slash = strchr(u, '/');
    if (!slash || (size_t)(slash - u) >= n || slash - u < 5)
        return -1;
    char *end;
    const char *g = slash + 1;
    if (!isdigit((unsigned char)*g))
        return -1;
    unsigned long a = strtoul(g, &end, 10);
    if (*end != '/' || !isdigit((unsigned char)end[1]) || a > 1000000)
        return -1;
    const char *c = end + 1;
    unsigned long b = strtoul(c, &end, 10);
    if (*end || b > 1000000)
        return -1;
    memcpy(gpu_uuid, u, (size_t)(slash - u));
    gpu_uuid[slash - u] = '\0';
    *gi = (unsigned)a;
    *ci = (unsigned)b;
    return 0;
}

const char *skiff_nv_brand_name(int brand)
{
    /* NVML's nvmlBrandType_t values, as the toolkit's brand rule spells them */
    static const char *const names[] = {"unknown",   "quadro",    "tesla",  "nvs",        "grid",    "geforce",
                                        "titan",     "vapps",     "vpc",    "vcs",        "vws",     "cloudgaming",
                                        "quadrortx", "nvidiartx", "nvidia", "geforcertx", "titanrtx"};
    if (brand < 0 || (size_t)brand >= sizeof(names) / sizeof(names[0]))
        return "";
    return names[brand];
}
