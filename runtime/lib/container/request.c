/* See request.h: the start request, its encoder and its strict decoder.
 * Pure (no processes, no files): unit-tested (tests/unit/runtime/
 * test_request.c) and fuzzed (tests/fuzz/fuzz_records.c). */
#include "request.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kind { STR, BOOL, INT, LIST };

struct field {
    const char *key;
    enum kind kind;
    size_t off;
};

/* Each row's offset, through a _Generic that only compiles when the
 * field's type is its KIND's. */
#define TYPE_STR const char *
#define TYPE_BOOL bool
#define TYPE_INT int
#define TYPE_LIST const char *const *
#define ROW(f, k)                                                                                                      \
    {#f, k, _Generic(((struct skiff_start_request *)0)->f, TYPE_##k : offsetof(struct skiff_start_request, f))},
static const struct field fields[] = {SKIFF_START_REQUEST_FIELDS(ROW)};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))
_Static_assert(NFIELDS <= 64, "one bit per field in decode's 'seen'");

#define AT(r, f, type) ((type *)(void *)((char *)(r) + (f)->off))
#define AT_C(r, f, type) ((type const *)(const void *)((const char *)(r) + (f)->off))

void skiff_start_request_init(struct skiff_start_request *r)
{
    memset(r, 0, sizeof(*r));
    r->fuse_fd = -1;
    r->lazy_chan = -1;
    r->use_entrypoint = true;
}

int skiff_start_request_encode(const struct skiff_config *cfg, const struct skiff_start_request *r,
                               struct skiff_recbuf *b, skiff_err *err)
{
    char kv[SKIFF_PATH_MAX + 64];
    for (size_t i = 0; cfg; i++) {
        int n = skiff_config_entry(cfg, i, kv, sizeof(kv));
        if (n == 0)
            break;
        if (n < 0)
            return skiff_error(err, ENAMETOOLONG, "request: configuration entry %zu", i);
        if (skiff_rec_put(b, SKIFF_REQ_CONFIG, kv, err) < 0)
            return -1;
    }
    for (const struct field *f = fields; f < fields + NFIELDS; f++) {
        int rc = 0;
        switch (f->kind) {
        case STR: {
            const char *s = *AT_C(r, f, const char *);
            if (s)
                rc = skiff_rec_putf(b, SKIFF_REQ_FIELD, err, "%s=%s", f->key, s);
            break;
        }
        case BOOL:
            rc = skiff_rec_putf(b, SKIFF_REQ_FIELD, err, "%s=%d", f->key, *AT_C(r, f, bool) ? 1 : 0);
            break;
        case INT:
            rc = skiff_rec_putf(b, SKIFF_REQ_FIELD, err, "%s=%d", f->key, *AT_C(r, f, int));
            break;
        case LIST: {
            const char *const *v = *AT_C(r, f, const char *const *);
            for (size_t i = 0; v && v[i] && rc == 0; i++)
                rc = skiff_rec_putf(b, SKIFF_REQ_FIELD, err, "%s=%s", f->key, v[i]);
            break;
        }
        }
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* The field of a "key=value" record, and where its value starts. */
static const struct field *field_of(const char *s, const char **value)
{
    const char *eq = strchr(s, '=');
    if (!eq)
        return NULL;
    for (const struct field *f = fields; f < fields + NFIELDS; f++)
        if (strlen(f->key) == (size_t)(eq - s) && !strncmp(f->key, s, (size_t)(eq - s))) {
            *value = eq + 1;
            return f;
        }
    return NULL;
}

/* A decimal in [0, INT_MAX], nothing else (no sign, no spaces, no hex). */
static int parse_count(const char *s, int *out)
{
    if (!*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 10)
        return -1;
    long long v = strtoll(s, NULL, 10);
    if (v > INT_MAX)
        return -1;
    *out = (int)v;
    return 0;
}

/* Pass 1 of decode: checks every record, sets the scalars, counts each
 * list's entries into count[]. */
static int scan(const char *data, size_t len, struct skiff_config *cfg, struct skiff_start_request *r,
                size_t count[NFIELDS], skiff_err *err)
{
    uint64_t seen = 0;
    size_t off = 0;
    char tag;
    const char *s;
    int more;
    while ((more = skiff_rec_next(data, len, &off, &tag, &s)) != 0) {
        if (more < 0)
            return skiff_error(err, 0, "request: truncated record");
        if (tag == SKIFF_REQ_CONFIG) {
            const char *eq = strchr(s, '=');
            char key[64];
            if (!eq || (size_t)(eq - s) >= sizeof(key))
                return skiff_error(err, 0, "request: bad configuration record");
            memcpy(key, s, (size_t)(eq - s));
            key[eq - s] = '\0';
            if (skiff_config_set_raw(cfg, key, eq + 1, err) < 0)
                return -1;
            continue;
        }
        if (tag != SKIFF_REQ_FIELD)
            return skiff_error(err, 0, "request: unknown record 0x%02x", (unsigned char)tag);
        const char *v = NULL;
        const struct field *f = field_of(s, &v);
        if (!f)
            return skiff_error(err, 0, "request: unknown field '%.64s'", s);
        size_t i = (size_t)(f - fields);
        if (f->kind == LIST) {
            if (++count[i] > SKIFF_REQUEST_LIST_MAX)
                return skiff_error(err, 0, "request: more than %d entries in %s", SKIFF_REQUEST_LIST_MAX, f->key);
            continue;
        }
        if (seen & (UINT64_C(1) << i))
            return skiff_error(err, 0, "request: field %s given twice", f->key);
        seen |= UINT64_C(1) << i;
        switch (f->kind) {
        case STR:
            *AT(r, f, const char *) = v;
            break;
        case BOOL:
            if (strcmp(v, "0") && strcmp(v, "1"))
                return skiff_error(err, 0, "request: %s='%.32s' is not 0 or 1", f->key, v);
            *AT(r, f, bool) = v[0] == '1';
            break;
        case INT:
            if (parse_count(v, AT(r, f, int)) < 0)
                return skiff_error(err, 0, "request: %s='%.32s' is not a count", f->key, v);
            break;
        case LIST:
            break;
        }
    }
    return 0;
}

/* Pass 2: each list's entries, in order, into one allocation. */
static int fill_lists(const char *data, size_t len, struct skiff_start_request *r, const size_t count[NFIELDS],
                      skiff_err *err)
{
    size_t total = 0, at[NFIELDS];
    for (size_t i = 0; i < NFIELDS; i++)
        total += count[i] ? count[i] + 1 : 0;
    if (!total)
        return 0;
    const char **block = calloc(total, sizeof(*block));
    if (!block)
        return skiff_error(err, ENOMEM, "request: out of memory");
    r->decoded = block;
    for (size_t i = 0, next = 0; i < NFIELDS; i++) {
        at[i] = next;
        if (count[i]) {
            *AT(r, &fields[i], const char *const *) = block + next;
            next += count[i] + 1; /* (the NULL after the entries: calloc's) */
        }
    }
    size_t off = 0;
    char tag;
    const char *s, *v;
    while (skiff_rec_next(data, len, &off, &tag, &s) == 1) {
        const struct field *f = tag == SKIFF_REQ_FIELD ? field_of(s, &v) : NULL;
        if (f && f->kind == LIST)
            block[at[f - fields]++] = v;
    }
    return 0;
}

int skiff_start_request_decode(const char *data, size_t len, struct skiff_config *cfg, struct skiff_start_request *r,
                               skiff_err *err)
{
    skiff_start_request_init(r);
    size_t count[NFIELDS] = {0};
    if (skiff_config_load(cfg, "/dev/null", false, err) < 0 || scan(data, len, cfg, r, count, err) < 0 ||
        fill_lists(data, len, r, count, err) < 0)
        return -1;
    if (r->name_mode > SKIFF_NAME_NO_EXEC)
        return skiff_error(err, 0, "request: name_mode %d is none of auto, create, exec, no_exec", r->name_mode);
    if (r->unshare_flags & ~(CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS))
        return skiff_error(err, 0, "request: unshare_flags 0x%x names other namespaces than net, ipc, uts",
                           (unsigned)r->unshare_flags);
    if (r->timeout_s > SKIFF_REQUEST_TIMEOUT_MAX)
        return skiff_error(err, 0, "request: timeout_s %d is over %d", r->timeout_s, SKIFF_REQUEST_TIMEOUT_MAX);
    if (r->import_timeout_s > SKIFF_REQUEST_TIMEOUT_MAX)
        return skiff_error(err, 0, "request: import_timeout_s %d is over %d", r->import_timeout_s,
                           SKIFF_REQUEST_TIMEOUT_MAX);
    return 0;
}

void skiff_start_request_free(struct skiff_start_request *r)
{
    free(r->decoded);
    r->decoded = NULL;
}
