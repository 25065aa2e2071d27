/* See proto.h: the reply root reads from the helper. Pure: no Slurm calls,
 * so it is unit-tested and fuzzed. */
#include "proto.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "container.h"
#include "records.h"
#include "sanitize.h"
#include "strv.h"

const char *const skiff_reply_phases[] = {"config", "import", "mount", "hook", "join", "env", "save", NULL};

static int reply_parse(const char *p, size_t len, struct skiff_reply *r, struct skiff_container *c, skiff_err *err)
{
    size_t off = 0, count = 0;
    bool have_status = false, ended = false;
    char tag;
    const char *s;
    int more;
    while ((more = skiff_rec_next(p, len, &off, &tag, &s)) != 0) {
        if (more < 0)
            return skiff_error(err, 0, "the answer ends inside a record");
        if (ended)
            return skiff_error(err, 0, "data after the end of the answer");
        if (++count > SKIFF_REPLY_RECORDS_MAX)
            return skiff_error(err, 0, "more than %d records", SKIFF_REPLY_RECORDS_MAX);
        if (!have_status && skiff_progress_tag(tag))
            continue; /* progress: shown as it came (skiff_progress_line) */
        if (!have_status && tag != SKIFF_REPLY_STATUS)
            return skiff_error(err, 0, "the answer does not start with its status");
        switch (tag) {
        case SKIFF_REPLY_STATUS:
            if (have_status || (strcmp(s, "0") && strcmp(s, "-1")))
                return skiff_error(err, 0, "bad status record");
            have_status = true;
            r->status = s[0] == '0' ? 0 : -1;
            break;
        case SKIFF_REPLY_PHASE: {
            bool known = false;
            for (size_t i = 0; skiff_reply_phases[i]; i++)
                known |= !strcmp(s, skiff_reply_phases[i]);
            snprintf(r->phase, sizeof(r->phase), "%s", known ? s : "mount");
            break;
        }
        case SKIFF_REPLY_ERRNO: {
            char *end;
            long v = strtol(s, &end, 10);
            r->err.code = *end || v < 0 || v > 4095 ? 0 : (int)v;
            break;
        }
        case SKIFF_REPLY_ERROR:
            snprintf(r->err.msg, sizeof(r->err.msg), "%s", s);
            skiff_sanitize_inplace(r->err.msg, sizeof(r->err.msg));
            break;
        case SKIFF_REPLY_JOINED:
            if (strcmp(s, "1"))
                return skiff_error(err, 0, "bad join record");
            r->attached = true;
            break;
        case SKIFF_REPLY_NOTICE:
            snprintf(r->notice, sizeof(r->notice), "%s", s);
            skiff_sanitize_inplace(r->notice, sizeof(r->notice));
            break;
        case SKIFF_REPLY_TIMES:
            if (sscanf(s, "%lf %lf", &r->t_resolve_ms, &r->t_start_ms) != 2 || !(r->t_resolve_ms >= 0) ||
                !(r->t_start_ms >= 0) || r->t_resolve_ms > 1e9 || r->t_start_ms > 1e9)
                r->t_resolve_ms = r->t_start_ms = 0;
            break;
        case SKIFF_REPLY_END:
            ended = true;
            break;
        default: {
            /* the container: H W E P C, libskiff's format (container.h) */
            int known = skiff_container_decode(c, tag, s, err);
            if (known < 0)
                return -1;
            if (!known)
                return skiff_error(err, 0, "unknown record 0x%02x", (unsigned char)tag);
        }
        }
    }
    if (!ended)
        return skiff_error(err, 0, "the answer has no end");
    if (r->status < 0) {
        if (!r->err.msg[0])
            snprintf(r->err.msg, sizeof(r->err.msg), "failed without a reason");
        if (!r->phase[0])
            snprintf(r->phase, sizeof(r->phase), "mount");
    }
    return 0;
}

int skiff_reply_parse(const char *p, size_t len, struct skiff_reply *r, skiff_err *err)
{
    memset(r, 0, sizeof(*r));
    r->status = -1;
    struct skiff_container c = {.server_pidfd = -1};
    int rc = reply_parse(p, len, r, &c, err);
    /* the lists move into r (freed by skiff_reply_free) either way */
    r->holder = c.holder;
    snprintf(r->workdir, sizeof(r->workdir), "%s", c.workdir);
    r->env = c.env;
    r->entrypoint = c.entrypoint;
    r->cmd = c.cmd;
    return rc;
}

void skiff_reply_free(struct skiff_reply *r)
{
    skiff_strv_free(r->env);
    skiff_strv_free(r->entrypoint);
    skiff_strv_free(r->cmd);
    r->env = r->entrypoint = r->cmd = NULL;
}

bool skiff_progress_tag(char tag)
{
    return tag == SKIFF_REPLY_IMPORTING || tag == SKIFF_REPLY_IMPORTED || tag == SKIFF_REPLY_DOWNLOAD ||
           tag == SKIFF_REPLY_RETRY || tag == SKIFF_REPLY_WAITING || tag == SKIFF_REPLY_LAZY;
}

static void fmt_bytes(unsigned long long b, char *out, size_t n)
{
    if (b >= 1000ull * 1000 * 1000)
        snprintf(out, n, "%.2f GB", (double)b / 1e9);
    else
        snprintf(out, n, "%.1f MB", (double)b / 1e6);
}

int skiff_progress_line(char tag, const char *s, char *out, size_t n)
{
    char uri[300];
    if (tag == SKIFF_REPLY_IMPORTING) {
        snprintf(uri, sizeof(uri), "%s", s);
        skiff_sanitize_inplace(uri, sizeof(uri));
        snprintf(out, n, "importing %s \u2026", uri);
        return 0;
    }
    if (tag == SKIFF_REPLY_LAZY) {
        unsigned long long fetched, total;
        int used = 0;
        if (sscanf(s, "%llu %llu %n", &fetched, &total, &used) != 2 || used <= 0 || !s[used])
            return -1;
        snprintf(uri, sizeof(uri), "%s", s + used);
        skiff_sanitize_inplace(uri, sizeof(uri));
        snprintf(out, n, "lazy start of %s: fetched %.1f of %.0f MB (the rest as it is read)", uri,
                 (double)fetched / (1 << 20), (double)total / (1 << 20));
        return 0;
    }
    if (tag == SKIFF_REPLY_RETRY) {
        snprintf(uri, sizeof(uri), "%s", s);
        skiff_sanitize_inplace(uri, sizeof(uri));
        snprintf(out, n, "import: %s", uri);
        return 0;
    }
    if (tag == SKIFF_REPLY_DOWNLOAD) {
        unsigned long long done, total;
        double rate;
        unsigned ld, lt;
        if (sscanf(s, "%llu %llu %lf %u %u", &done, &total, &rate, &ld, &lt) != 5 || !(rate >= 0) || rate > 1e13 ||
            done > total || ld > lt)
            return -1;
        char d[32], t[32], eta[48] = "";
        fmt_bytes(done, d, sizeof(d));
        fmt_bytes(total, t, sizeof(t));
        double left = rate > 0 ? (double)(total - done) / rate : 0;
        if (rate > 0 && done < total)
            snprintf(eta, sizeof(eta), left >= 90 ? ", %.0f min left" : ", %.0f s left", left >= 90 ? left / 60 : left);
        snprintf(out, n, "downloading %s of %s (%u of %u layers), %.1f MB/s%s", d, t, ld, lt, rate / 1e6, eta);
        return 0;
    }
    if (tag == SKIFF_REPLY_WAITING) {
        unsigned long secs;
        int used = 0;
        if (sscanf(s, "%lu\t%n", &secs, &used) != 1 || used <= 0 || secs > 86400ul * 365)
            return -1;
        const char *who = s + used, *tab = strchr(who, '\t');
        if (!tab)
            return -1;
        char w[128];
        snprintf(w, sizeof(w), "%.*s", (int)(tab - who < 127 ? tab - who : 127), who);
        skiff_sanitize_inplace(w, sizeof(w));
        snprintf(uri, sizeof(uri), "%s", tab + 1);
        skiff_sanitize_inplace(uri, sizeof(uri));
        snprintf(out, n, "waiting for the import of %s by %s (running for %lu s)", uri, w, secs);
        return 0;
    }
    if (tag != SKIFF_REPLY_IMPORTED)
        return -1;
    unsigned long long bytes, ms;
    int used = 0;
    if (sscanf(s, "%llu %llu %n", &bytes, &ms, &used) != 2 || used <= 0 || !s[used] || ms > 1000ull * 86400 * 365)
        return -1;
    snprintf(uri, sizeof(uri), "%s", s + used);
    skiff_sanitize_inplace(uri, sizeof(uri));
    snprintf(out, n, "imported %s (%llu MB, %.1f s)", uri, (bytes + (1u << 19)) >> 20, (double)ms / 1000);
    return 0;
}
