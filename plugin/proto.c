/* See proto.h. Pure: no Slurm calls, so it is unit-tested and fuzzed. */
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

static const char *const phases[] = {"config", "import", "mount", "hook", "join", "env", "save"};

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
        if (!have_status && tag != 'S')
            return skiff_error(err, 0, "the answer does not start with its status");
        switch (tag) {
        case 'S':
            if (have_status || (strcmp(s, "0") && strcmp(s, "-1")))
                return skiff_error(err, 0, "bad status record");
            have_status = true;
            r->status = s[0] == '0' ? 0 : -1;
            break;
        case 'p': {
            bool known = false;
            for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++)
                known |= !strcmp(s, phases[i]);
            snprintf(r->phase, sizeof(r->phase), "%s", known ? s : "mount");
            break;
        }
        case 'n': {
            char *end;
            long v = strtol(s, &end, 10);
            r->err.code = *end || v < 0 || v > 4095 ? 0 : (int)v;
            break;
        }
        case 'e':
            snprintf(r->err.msg, sizeof(r->err.msg), "%s", s);
            skiff_sanitize_inplace(r->err.msg, sizeof(r->err.msg));
            break;
        case 'J':
            if (strcmp(s, "1"))
                return skiff_error(err, 0, "bad join record");
            r->attached = true;
            break;
        case 'U':
            snprintf(r->notice, sizeof(r->notice), "%s", s);
            skiff_sanitize_inplace(r->notice, sizeof(r->notice));
            break;
        case 'T':
            if (sscanf(s, "%lf %lf", &r->t_resolve_ms, &r->t_start_ms) != 2 || !(r->t_resolve_ms >= 0) ||
                !(r->t_start_ms >= 0) || r->t_resolve_ms > 1e9 || r->t_start_ms > 1e9)
                r->t_resolve_ms = r->t_start_ms = 0;
            break;
        case 'Z':
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

static bool flag(const char *v)
{
    return v && !strcmp(v, "1");
}

/* The request is root's: parsed strictly all the same. Strings point into
 * data, which lives as long as the process. */
int skiff_request_parse(const char *data, size_t len, struct skiff_request *q, skiff_err *err)
{
    memset(q, 0, sizeof(*q));
    if (skiff_config_load(&q->cfg, "/dev/null", false, err) < 0)
        return -1;
    size_t off = 0;
    char tag;
    const char *s;
    int more;
    while ((more = skiff_rec_next(data, len, &off, &tag, &s)) != 0) {
        if (more < 0)
            return skiff_error(err, 0, "truncated request");
        const char *eq = strchr(s, '=');
        char key[64];
        if ((tag == 'c' || tag == 'o') && (!eq || (size_t)(eq - s) >= sizeof(key)))
            return skiff_error(err, 0, "bad request record");
        if (eq && (size_t)(eq - s) < sizeof(key)) {
            memcpy(key, s, (size_t)(eq - s));
            key[eq - s] = '\0';
        }
        switch (tag) {
        case 'c':
            if (skiff_config_set_raw(&q->cfg, key, eq + 1, err) < 0)
                return -1;
            break;
        case 'm':
            if (q->nmounts >= SKIFF_REQUEST_LIST_MAX)
                return skiff_error(err, 0, "too many mounts");
            q->mounts[q->nmounts++] = s;
            break;
        case 'h':
            if (q->nhook_env >= SKIFF_REQUEST_LIST_MAX)
                return skiff_error(err, 0, "too many hook variables");
            q->hook_env[q->nhook_env++] = s;
            break;
        case 'l':
            if (q->nlocale_env >= sizeof(q->locale_env) / sizeof(q->locale_env[0]) - 1)
                return skiff_error(err, 0, "too many locale variables");
            q->locale_env[q->nlocale_env++] = s;
            break;
        case 'o': {
            const char *v = eq + 1;
            static const struct {
                const char *key;
                size_t off;
            } strs[] = {
                {SKIFF_REQ_CWD, offsetof(struct skiff_request, cwd)},
                {SKIFF_REQ_NODE, offsetof(struct skiff_request, node)},
                {SKIFF_REQ_IMAGE, offsetof(struct skiff_request, image)},
                {SKIFF_REQ_NAME, offsetof(struct skiff_request, name)},
                {SKIFF_REQ_NAMED, offsetof(struct skiff_request, named)},
                {SKIFF_REQ_NAME_MODE, offsetof(struct skiff_request, name_mode)},
                {SKIFF_REQ_IMPORTER, offsetof(struct skiff_request, importer)},
                {SKIFF_REQ_WORKDIR, offsetof(struct skiff_request, workdir)},
                {SKIFF_REQ_COMMAND, offsetof(struct skiff_request, command)},
                {SKIFF_REQ_STATE_KEY, offsetof(struct skiff_request, state_key)},
                {SKIFF_REQ_SAVE, offsetof(struct skiff_request, save)},
                {SKIFF_REQ_SUFFIX, offsetof(struct skiff_request, suffix)},
            };
            bool done = false;
            for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]) && !done; i++)
                if (!strcmp(key, strs[i].key)) {
                    *(const char **)(void *)((char *)q + strs[i].off) = v;
                    done = true;
                }
            if (done)
                break;
            if (!strcmp(key, SKIFF_REQ_TEMP))
                q->temp = flag(v);
            else if (!strcmp(key, SKIFF_REQ_WRITABLE))
                q->writable = flag(v);
            else if (!strcmp(key, SKIFF_REQ_REMAP_ROOT))
                q->remap_root = flag(v);
            else if (!strcmp(key, SKIFF_REQ_MOUNT_HOME))
                q->mount_home = flag(v);
            else if (!strcmp(key, SKIFF_REQ_ENTRYPOINT))
                q->entrypoint = flag(v);
            else if (!strcmp(key, SKIFF_REQ_UNSHARE))
                q->unshare = atoi(v);
            else if (!strcmp(key, SKIFF_REQ_TIMEOUT) || !strcmp(key, SKIFF_REQ_IMPORT_TIMEOUT)) {
                int *t = key[0] == 't' ? &q->timeout_s : &q->import_timeout_s;
                *t = atoi(v);
                if (*t < 0 || *t > 86400)
                    return skiff_error(err, 0, "bad %s '%s'", key, v);
            } else
                return skiff_error(err, 0, "unknown request key '%s'", key);
            break;
        }
        default:
            return skiff_error(err, 0, "unknown request record 0x%02x", (unsigned char)tag);
        }
    }
    return 0;
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
    return tag == 'I' || tag == 'i' || tag == 'd' || tag == 'r' || tag == 'q' || tag == 'L';
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
    if (tag == 'I') {
        snprintf(uri, sizeof(uri), "%s", s);
        skiff_sanitize_inplace(uri, sizeof(uri));
        snprintf(out, n, "importing %s \u2026", uri);
        return 0;
    }
    if (tag == 'L') {
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
    if (tag == 'r') {
        snprintf(uri, sizeof(uri), "%s", s);
        skiff_sanitize_inplace(uri, sizeof(uri));
        snprintf(out, n, "import: %s", uri);
        return 0;
    }
    if (tag == 'd') {
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
    if (tag == 'q') {
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
    if (tag != 'i')
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
