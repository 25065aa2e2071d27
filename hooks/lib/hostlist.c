/* Slurm-style host list expansion and compression.
 *
 * Hand-written rather than taken from libslurm: the plugin would have to
 * link libslurm's private hostlist symbols (not part of its public API), and
 * skiff-ddp-env and the hooks must work where libslurm is absent. The parser
 * works in two passes: parse + validate + count (memory proportional to the
 * input text only), then produce hosts. Nothing proportional to the expanded
 * size is allocated before the counts and lengths have been checked. */
#include "hostlist.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HL_MAX_DIGITS 18 /* fits in uint64_t with room for +1 */

struct hl_range {
    uint64_t lo, hi;
    unsigned width; /* digits of lo as written: values are zero-padded to it */
};

/* A group is a literal followed by an optional bracket (nr == 0: none). */
struct hl_group {
    size_t lit_off, lit_len;
    size_t r0, nr;
    uint64_t count; /* values in the bracket (1 when none) */
};

struct hl_expr {
    size_t g0, ng;
    uint64_t count; /* hosts this expression expands to */
    size_t maxlen;  /* longest host name it produces */
};

struct hl_parsed {
    const char *s;
    struct hl_expr *e;
    size_t ne, ce;
    struct hl_group *g;
    size_t ng, cg;
    struct hl_range *r;
    size_t nr, cr;
    uint64_t total;
    uint64_t bytes; /* upper bound of sum of (name length + 1) */
};

static void hl_parsed_free(struct hl_parsed *p)
{
    free(p->e);
    free(p->g);
    free(p->r);
    memset(p, 0, sizeof(*p));
}

/* Grows *arr to hold one more element of size sz. */
static int hl_grow(void **arr, size_t *cap, size_t n, size_t sz, skiff_err *err)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 8;
    void *na = reallocarray(*arr, nc, sz);
    if (!na)
        return skiff_error(err, errno, "host list: out of memory");
    *arr = na;
    *cap = nc;
    return 0;
}

static bool hl_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_';
}

static unsigned hl_ndigits(uint64_t v)
{
    unsigned n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

/* Quotes at most 60 bytes of the list for error messages. */
static const char *hl_excerpt(const char *s, char *buf, size_t len)
{
    size_t n = strlen(s);
    if (n + 1 <= len && n <= 60)
        snprintf(buf, len, "%s", s);
    else
        snprintf(buf, len, "%.60s...", s);
    return buf;
}

static int hl_fail(const char *s, size_t off, skiff_err *err, const char *what)
{
    char ex[80];
    return skiff_error(err, 0, "host list \"%s\": %s at offset %zu", hl_excerpt(s, ex, sizeof(ex)), what, off);
}

static int hl_number(const char *s, size_t *pos, uint64_t *v, unsigned *width, skiff_err *err)
{
    size_t i = *pos, start = i;
    uint64_t x = 0;
    while (s[i] >= '0' && s[i] <= '9') {
        if (i - start >= HL_MAX_DIGITS)
            return hl_fail(s, start, err, "number with more than 18 digits");
        x = x * 10 + (uint64_t)(s[i] - '0');
        i++;
    }
    if (i == start)
        return hl_fail(s, start, err, s[i] ? "expected a number in brackets" : "unterminated '[' (missing ']')");
    *v = x;
    *width = (unsigned)(i - start);
    *pos = i;
    return 0;
}

/* Parses "[a,b-c,...]" starting after '['; leaves *pos after ']'. */
static int hl_bracket(struct hl_parsed *p, struct hl_group *grp, size_t *pos, uint64_t max_hosts, size_t *maxw,
                      skiff_err *err)
{
    const char *s = p->s;
    size_t i = *pos;
    grp->r0 = p->nr;
    grp->count = 0;
    *maxw = 0;
    for (;;) {
        struct hl_range rg;
        uint64_t hi;
        unsigned hw;
        size_t at = i;
        if (hl_number(s, &i, &rg.lo, &rg.width, err) < 0)
            return -1;
        hi = rg.lo;
        if (s[i] == '-') {
            i++;
            if (hl_number(s, &i, &hi, &hw, err) < 0)
                return -1;
            if (hi < rg.lo)
                return hl_fail(s, at, err, "reversed range (high end below low end)");
        }
        rg.hi = hi;
        uint64_t n = rg.hi - rg.lo + 1;
        if (n > max_hosts || grp->count + n > max_hosts)
            return hl_fail(s, at, err, "range expands to more hosts than the limit");
        grp->count += n;
        unsigned w = hl_ndigits(rg.hi);
        if (rg.width > w)
            w = rg.width;
        if (w > *maxw)
            *maxw = w;
        if (hl_grow((void **)&p->r, &p->cr, p->nr, sizeof(*p->r), err) < 0)
            return -1;
        p->r[p->nr++] = rg;
        if (s[i] == ',') {
            i++;
            continue;
        }
        if (s[i] == ']') {
            i++;
            break;
        }
        if (s[i] == '\0')
            return hl_fail(s, i, err, "unterminated '[' (missing ']')");
        if (s[i] == '[')
            return hl_fail(s, i, err, "nested '['");
        return hl_fail(s, i, err, "unexpected character in brackets");
    }
    grp->nr = p->nr - grp->r0;
    *pos = i;
    return 0;
}

static int hl_parse(const char *s, uint64_t max_hosts, struct hl_parsed *p, skiff_err *err)
{
    memset(p, 0, sizeof(*p));
    p->s = s;
    if (!s)
        return skiff_error(err, 0, "host list: none given");
    size_t len = strnlen(s, SKIFF_HOSTLIST_MAX_INPUT + 1);
    if (len > SKIFF_HOSTLIST_MAX_INPUT)
        return skiff_error(err, 0, "host list: longer than %u bytes", SKIFF_HOSTLIST_MAX_INPUT);
    if (len == 0)
        return skiff_error(err, 0, "host list: empty");
    if (max_hosts == 0 || max_hosts > SKIFF_HOSTLIST_MAX_HOSTS)
        max_hosts = SKIFF_HOSTLIST_MAX_HOSTS;

    size_t i = 0;
    for (;;) {
        struct hl_expr ex = {.g0 = p->ng, .count = 1};
        size_t namelen = 0, start = i;
        for (;;) {
            struct hl_group grp = {.lit_off = i, .count = 1};
            while (hl_name_char(s[i]))
                i++;
            grp.lit_len = i - grp.lit_off;
            namelen += grp.lit_len;
            if (s[i] == '[') {
                size_t maxw, at = i;
                i++;
                if (hl_bracket(p, &grp, &i, max_hosts, &maxw, err) < 0) {
                    hl_parsed_free(p);
                    return -1;
                }
                namelen += maxw;
                if (ex.count * grp.count > max_hosts) {
                    hl_parsed_free(p);
                    return hl_fail(s, at, err, "host list expands to more hosts than the limit");
                }
                ex.count *= grp.count;
            }
            if (grp.lit_len || grp.nr) {
                if (hl_grow((void **)&p->g, &p->cg, p->ng, sizeof(*p->g), err) < 0) {
                    hl_parsed_free(p);
                    return -1;
                }
                p->g[p->ng++] = grp;
            }
            if (grp.nr == 0 || !(hl_name_char(s[i]) || s[i] == '['))
                break;
        }
        ex.ng = p->ng - ex.g0;
        if (s[i] != ',' && s[i] != '\0') {
            const char *what = s[i] == ']' ? "']' without '['" : "character not allowed in a host name";
            hl_parsed_free(p);
            return hl_fail(s, i, err, what);
        }
        if (namelen == 0) {
            hl_parsed_free(p);
            return hl_fail(s, start, err, "empty host name");
        }
        if (namelen > SKIFF_HOSTLIST_MAX_NAME) {
            hl_parsed_free(p);
            return hl_fail(s, start, err, "host name longer than 255 bytes");
        }
        ex.maxlen = namelen;
        if (p->total + ex.count > max_hosts) {
            hl_parsed_free(p);
            return hl_fail(s, start, err, "host list expands to more hosts than the limit");
        }
        p->total += ex.count;
        p->bytes += ex.count * (namelen + 1);
        if (p->bytes > SKIFF_HOSTLIST_MAX_BYTES) {
            hl_parsed_free(p);
            return hl_fail(s, start, err, "expanded host names exceed 64 MiB");
        }
        if (hl_grow((void **)&p->e, &p->ce, p->ne, sizeof(*p->e), err) < 0) {
            hl_parsed_free(p);
            return -1;
        }
        p->e[p->ne++] = ex;
        if (s[i] == '\0')
            break;
        i++; /* ',' */
        if (s[i] == '\0') {
            hl_parsed_free(p);
            return hl_fail(s, i, err, "empty host name after ','");
        }
    }
    return 0;
}

/* Writes value v padded to width into out; returns the length. */
static size_t hl_put_num(char *out, uint64_t v, unsigned width)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof(tmp), "%0*llu", (int)width, (unsigned long long)v);
    memcpy(out, tmp, (size_t)n);
    return (size_t)n;
}

/* Host number idx of expression ex into out (at least maxlen+1 bytes);
 * digit has room for ex->ng entries. */
static size_t hl_expr_nth(const struct hl_parsed *p, const struct hl_expr *ex, uint64_t idx, char *out, uint64_t *digit)
{
    /* Mixed radix, first bracket most significant: a[1-2]b[3-4] gives
     * a1b3 a1b4 a2b3 a2b4, as Slurm does. */
    for (size_t k = ex->ng; k-- > 0;) {
        const struct hl_group *g = &p->g[ex->g0 + k];
        if (g->nr == 0)
            continue;
        digit[k] = idx % g->count;
        idx /= g->count;
    }
    size_t o = 0;
    for (size_t k = 0; k < ex->ng; k++) {
        const struct hl_group *g = &p->g[ex->g0 + k];
        memcpy(out + o, p->s + g->lit_off, g->lit_len);
        o += g->lit_len;
        if (g->nr == 0)
            continue;
        uint64_t d = digit[k];
        for (size_t r = g->r0; r < g->r0 + g->nr; r++) {
            uint64_t n = p->r[r].hi - p->r[r].lo + 1;
            if (d < n) {
                o += hl_put_num(out + o, p->r[r].lo + d, p->r[r].width);
                break;
            }
            d -= n;
        }
    }
    out[o] = '\0';
    return o;
}

int skiff_hostlist_count(const char *s, size_t *n, skiff_err *err)
{
    struct hl_parsed p;
    if (hl_parse(s, 0, &p, err) < 0)
        return -1;
    *n = (size_t)p.total;
    hl_parsed_free(&p);
    return 0;
}

int skiff_hostlist_nth(const char *s, size_t idx, char *buf, size_t len, skiff_err *err)
{
    struct hl_parsed p;
    if (hl_parse(s, 0, &p, err) < 0)
        return -1;
    int rv = -1;
    if (idx >= p.total) {
        char ex[80];
        skiff_error(err, 0, "host list \"%s\": has %llu hosts, no host number %zu", hl_excerpt(s, ex, sizeof(ex)),
                    (unsigned long long)p.total, idx);
        goto out;
    }
    for (size_t e = 0; e < p.ne; e++) {
        if (idx < p.e[e].count) {
            char name[SKIFF_HOSTLIST_MAX_NAME + 1];
            cleanup_free uint64_t *digit = calloc(p.e[e].ng ? p.e[e].ng : 1, sizeof(uint64_t));
            if (!digit) {
                skiff_error(err, errno, "host list: out of memory");
                goto out;
            }
            size_t nl = hl_expr_nth(&p, &p.e[e], idx, name, digit);
            if (nl + 1 > len) {
                skiff_error(err, ENAMETOOLONG, "host name %s: longer than the buffer", name);
                goto out;
            }
            memcpy(buf, name, nl + 1);
            rv = 0;
            goto out;
        }
        idx -= p.e[e].count;
    }
out:
    hl_parsed_free(&p);
    return rv;
}

int skiff_hostlist_expand(const char *s, size_t max_hosts, struct skiff_hostlist *out, skiff_err *err)
{
    memset(out, 0, sizeof(*out));
    struct hl_parsed p;
    if (hl_parse(s, max_hosts, &p, err) < 0)
        return -1;
    /* Limits were checked by the parser: now the sizes are known and bounded. */
    out->hosts = calloc(p.total ? p.total : 1, sizeof(char *));
    out->buf = malloc(p.bytes ? p.bytes : 1);
    if (!out->hosts || !out->buf) {
        int e = errno;
        hl_parsed_free(&p);
        skiff_hostlist_free(out);
        return skiff_error(err, e, "host list: cannot allocate %llu hosts", (unsigned long long)p.total);
    }
    size_t o = 0, h = 0;
    for (size_t e = 0; e < p.ne; e++) {
        const struct hl_expr *ex = &p.e[e];
        /* Odometer over the brackets, last one fastest: linear time. */
        size_t state_n = ex->ng;
        size_t *ri = calloc(state_n ? state_n : 1, sizeof(size_t));
        uint64_t *val = calloc(state_n ? state_n : 1, sizeof(uint64_t));
        if (!ri || !val) {
            int en = errno;
            free(ri);
            free(val);
            hl_parsed_free(&p);
            skiff_hostlist_free(out);
            return skiff_error(err, en, "host list: out of memory");
        }
        for (size_t k = 0; k < ex->ng; k++) {
            const struct hl_group *g = &p.g[ex->g0 + k];
            ri[k] = g->r0;
            val[k] = g->nr ? p.r[g->r0].lo : 0;
        }
        for (uint64_t c = 0; c < ex->count; c++) {
            char *name = out->buf + o;
            for (size_t k = 0; k < ex->ng; k++) {
                const struct hl_group *g = &p.g[ex->g0 + k];
                memcpy(out->buf + o, s + g->lit_off, g->lit_len);
                o += g->lit_len;
                if (g->nr)
                    o += hl_put_num(out->buf + o, val[k], p.r[ri[k]].width);
            }
            out->buf[o++] = '\0';
            out->hosts[h++] = name;
            for (size_t k = ex->ng; k-- > 0;) {
                const struct hl_group *g = &p.g[ex->g0 + k];
                if (g->nr == 0)
                    continue;
                if (val[k] < p.r[ri[k]].hi) {
                    val[k]++;
                    break;
                }
                if (ri[k] + 1 < g->r0 + g->nr) {
                    ri[k]++;
                    val[k] = p.r[ri[k]].lo;
                    break;
                }
                ri[k] = g->r0;
                val[k] = p.r[g->r0].lo;
            }
        }
        free(ri);
        free(val);
    }
    out->n = h;
    hl_parsed_free(&p);
    return 0;
}

void skiff_hostlist_free(struct skiff_hostlist *hl)
{
    if (!hl)
        return;
    free(hl->hosts);
    free(hl->buf);
    memset(hl, 0, sizeof(*hl));
}

/* ---- compression ---- */

struct hl_buf {
    char *p;
    size_t n, cap;
};

static int hl_buf_put(struct hl_buf *b, const char *s, size_t n, skiff_err *err)
{
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 64;
        while (nc < b->n + n + 1)
            nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np)
            return skiff_error(err, errno, "host list: out of memory");
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

/* Splits a host into prefix and trailing number. Returns false when the
 * name has no trailing digits (or too many to be a number): it is then
 * written as it is. */
static bool hl_split(const char *h, size_t *plen, uint64_t *v, unsigned *width)
{
    size_t n = strlen(h), d = n;
    while (d > 0 && h[d - 1] >= '0' && h[d - 1] <= '9')
        d--;
    if (d == n || n - d > HL_MAX_DIGITS)
        return false;
    uint64_t x = 0;
    for (size_t i = d; i < n; i++)
        x = x * 10 + (uint64_t)(h[i] - '0');
    *plen = d;
    *v = x;
    *width = (unsigned)(n - d);
    return true;
}

char *skiff_hostlist_compress(const char *const *hosts, size_t n, skiff_err *err)
{
    struct hl_buf b = {0};
    if (n == 0)
        return strdup("");
    if (n > SKIFF_HOSTLIST_MAX_HOSTS) {
        skiff_error(err, 0, "host list: more than %u hosts", SKIFF_HOSTLIST_MAX_HOSTS);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        const char *h = hosts[i];
        size_t len = h ? strlen(h) : 0;
        if (len == 0 || len > SKIFF_HOSTLIST_MAX_NAME) {
            skiff_error(err, 0, "host list: host %zu: %s", i, len ? "name longer than 255 bytes" : "empty name");
            return NULL;
        }
        for (size_t k = 0; k < len; k++)
            if (!hl_name_char(h[k])) {
                skiff_error(err, 0, "host list: host \"%s\": character '%c' not allowed in a host name", h, h[k]);
                return NULL;
            }
    }
    size_t i = 0;
    while (i < n) {
        size_t plen;
        uint64_t v;
        unsigned w;
        if (b.n && hl_buf_put(&b, ",", 1, err) < 0)
            goto fail;
        if (!hl_split(hosts[i], &plen, &v, &w)) {
            if (hl_buf_put(&b, hosts[i], strlen(hosts[i]), err) < 0)
                goto fail;
            i++;
            continue;
        }
        /* The run of following hosts with the same prefix shares one bracket. */
        size_t j = i + 1;
        for (; j < n; j++) {
            size_t pl2;
            uint64_t v2;
            unsigned w2;
            if (!hl_split(hosts[j], &pl2, &v2, &w2) || pl2 != plen || memcmp(hosts[j], hosts[i], plen) != 0)
                break;
        }
        if (j == i + 1) {
            if (hl_buf_put(&b, hosts[i], strlen(hosts[i]), err) < 0)
                goto fail;
            i++;
            continue;
        }
        if (hl_buf_put(&b, hosts[i], plen, err) < 0 || hl_buf_put(&b, "[", 1, err) < 0)
            goto fail;
        size_t k = i;
        while (k < j) {
            size_t pl;
            uint64_t lo, hi;
            unsigned wlo;
            hl_split(hosts[k], &pl, &lo, &wlo);
            hi = lo;
            size_t m = k + 1;
            /* Extend while the next value is hi+1 and writing it with lo's
             * width gives exactly its digits (so "9,10" joins, "9,010" not). */
            while (m < j) {
                uint64_t vm;
                unsigned wm;
                hl_split(hosts[m], &pl, &vm, &wm);
                unsigned nat = hl_ndigits(vm);
                if (hi == UINT64_MAX || vm != hi + 1 || wm != (wlo > nat ? wlo : nat))
                    break;
                hi = vm;
                m++;
            }
            if (k > i && hl_buf_put(&b, ",", 1, err) < 0)
                goto fail;
            const char *d = hosts[k] + plen;
            if (hl_buf_put(&b, d, strlen(d), err) < 0)
                goto fail;
            if (m > k + 1) {
                const char *dh = hosts[m - 1] + plen;
                if (hl_buf_put(&b, "-", 1, err) < 0 || hl_buf_put(&b, dh, strlen(dh), err) < 0)
                    goto fail;
            }
            k = m;
        }
        if (hl_buf_put(&b, "]", 1, err) < 0)
            goto fail;
        i = j;
    }
    /* Only a trailing number is compressed; names numbered elsewhere stay
     * whole, and the text could outgrow what the parser accepts. Refuse
     * rather than return a list that does not read back. */
    if (b.n > SKIFF_HOSTLIST_MAX_INPUT) {
        skiff_error(err, 0, "host list: compressed form is %zu bytes, longer than the %u accepted", b.n,
                    SKIFF_HOSTLIST_MAX_INPUT);
        goto fail;
    }
    return b.p;
fail:
    free(b.p);
    return NULL;
}
