/* Transfers that survive real networks (registry.h, struct
 * skiff_fetch_opts): the retry policy every request of the client uses
 * (pauses with backoff and jitter, Retry-After, a deadline), blobs and byte
 * ranges of blobs resumed with Range after the bytes already handed over,
 * whole blobs hashed on the way and checked at the end. */
#include "registry_int.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fdio.h"

#define BACKOFF_MAX_MS 30000.0
#define RETRY_AFTER_MAX_S 600.0
#define REFUSED_RETRIES 2

void skiff_retry_init(struct retry *rt, const struct skiff_config *cfg, const struct skiff_fetch_opts *o)
{
    memset(rt, 0, sizeof(*rt));
    if (o)
        rt->o = *o;
    rt->retries = rt->o.retries > 0 ? rt->o.retries : rt->o.retries < 0 ? 0 : cfg->transfer_retries;
    if (rt->o.backoff_ms <= 0)
        rt->o.backoff_ms = 1000;
    rt->stall_s = cfg->stall_timeout_s > 0 ? cfg->stall_timeout_s : 60;
}

void skiff_retry_req(const struct retry *rt, struct http_req *q)
{
    q->stall_s = rt->stall_s;
    q->stop = rt->o.stop;
    q->stop_ctx = rt->o.stop_ctx;
    q->timeout_ms = 0;
    if (rt->o.deadline_ms > 0) {
        double left = rt->o.deadline_ms - skiff_now_ms();
        q->timeout_ms = left > 1 ? (long)left : 1;
    }
}

/* A number in [0, 1) for the jitter; each thread its own sequence. */
static double jitter01(void)
{
    static __thread unsigned seed;
    if (!seed) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        seed = (unsigned)ts.tv_nsec ^ (unsigned)getpid() ^ (unsigned)(uintptr_t)&seed;
        if (!seed)
            seed = 1;
    }
    return (double)rand_r(&seed) / ((double)RAND_MAX + 1.0);
}

bool skiff_retry_stopped(const struct retry *rt)
{
    return rt->o.stop && rt->o.stop(rt->o.stop_ctx);
}

int skiff_retry_pause(struct retry *rt, const char *what, const struct http_resp *resp, skiff_err *err)
{
    if (skiff_retry_stopped(rt))
        return skiff_error(err, ECANCELED, "%s: stopped", what);
    if (rt->attempt >= rt->retries)
        return -1; /* err: the last attempt's cause */
    /* Nothing listening (or no such host) is more often a wrong name or a
     * registry that is down than a blip: two more tries cover a restart
     * without keeping a user waiting half a minute for the error. */
    if (resp && (resp->rc == CURLE_COULDNT_CONNECT || resp->rc == CURLE_COULDNT_RESOLVE_HOST) &&
        rt->attempt >= REFUSED_RETRIES)
        return -1;
    rt->attempt++;
    double wait_ms;
    if (resp && resp->retry_after_s >= 0) {
        /* the registry said when: as asked (within reason), no jitter */
        wait_ms = 1000.0 * (resp->retry_after_s < RETRY_AFTER_MAX_S ? resp->retry_after_s : RETRY_AFTER_MAX_S);
    } else {
        double base = rt->o.backoff_ms;
        for (int i = 1; i < rt->attempt && base < BACKOFF_MAX_MS; i++)
            base *= 2;
        if (base > BACKOFF_MAX_MS)
            base = BACKOFF_MAX_MS;
        wait_ms = base * (0.5 + 0.5 * jitter01());
    }
    double now = skiff_now_ms();
    if (rt->o.deadline_ms > 0 && now + wait_ms >= rt->o.deadline_ms) {
        size_t l = strlen(err->msg);
        snprintf(err->msg + l, sizeof(err->msg) - l, " (no time left for try %d of %d before the deadline)",
                 rt->attempt + 1, rt->retries + 1);
        return -1;
    }
    if (rt->o.retrying)
        rt->o.retrying(rt->o.retry_ctx, what, rt->attempt, wait_ms / 1000.0, err->msg);
    double end = now + wait_ms;
    while ((now = skiff_now_ms()) < end) {
        if (skiff_retry_stopped(rt))
            return skiff_error(err, ECANCELED, "%s: stopped", what);
        double left = end - now;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)((left < 100 ? left : 100) * 1e6)};
        nanosleep(&ts, NULL);
    }
    skiff_err_clear(err);
    return 0;
}

/* ---- ranges of blobs ---------------------------------------------------- */

struct range {
    const char *digest;
    unsigned long long off, len; /* what the caller asked (len 0: to the end) */
    unsigned long long got;      /* handed to the caller so far */
    unsigned long long skip;     /* bytes of this answer before the next one wanted */
    bool first;                  /* the answer's first piece is next */
    skiff_blob_sink sink;
    void *ctx;
    int bad_range;    /* a 206 for another range than asked */
    bool need_ranges; /* a 200 for a range is an error (skiff_fetch_opts) */
    int not_ranged;   /* ... and came */
    const char *host; /* the endpoint that answered last */
    bool whole;       /* the whole blob: len is its size, no Range until a resume */
};

static int range_data(void *ctx, const struct http_resp *resp, const char *buf, size_t n)
{
    struct range *rg = ctx;
    if (rg->first) {
        rg->first = false;
        unsigned long long want = rg->off + rg->got;
        if (resp->status == 206) {
            if (!resp->has_range || resp->range_first > want) {
                rg->bad_range = 1;
                errno = EPROTO;
                return -1;
            }
            rg->skip = want - resp->range_first;
        } else if (rg->need_ranges && want > 0) {
            rg->not_ranged = 1;
            errno = ENOTSUP;
            return -1;
        } else {
            rg->skip = want; /* a 200: the whole blob, from its first byte */
        }
    }
    if (rg->skip) {
        size_t s = rg->skip < n ? (size_t)rg->skip : n;
        rg->skip -= s;
        buf += s;
        n -= s;
        if (!n)
            return 0;
    }
    bool last = false;
    if (rg->len && n >= rg->len - rg->got) {
        n = (size_t)(rg->len - rg->got);
        last = true;
    }
    if (rg->sink(rg->ctx, buf, n) != 0)
        return -1;
    rg->got += n;
    return last ? 1 : 0;
}

/* One endpoint's tries at the rest of the range: 0 when it is all there,
 * 1 to try the next endpoint (err says why this one failed), -1 to stop. */
static int range_from_endpoint(struct skiff_registry *r, struct endpoint *e, struct range *rg, struct retry *rt,
                               skiff_err *err)
{
    char url[2048];
    snprintf(url, sizeof(url), "%s/v2/%s/blobs/%s", e->base, r->ref->repository, rg->digest);
    rg->host = e->host;
    for (;;) {
        struct http_req q = {0};
        skiff_retry_req(rt, &q);
        unsigned long long want = rg->off + rg->got;
        q.ranged = want > 0 || (rg->len && !rg->whole);
        q.from = want;
        q.to = rg->len ? rg->off + rg->len - 1 : 0;
        rg->first = true;
        rg->skip = 0;
        rg->bad_range = 0;
        struct sink s = {.data = range_data, .ctx = rg};
        struct http_resp resp;
        unsigned long long before = rg->got;
        skiff_err_clear(err);
        int rc = skiff_registry_authed_get(r, e, url, &q, &s, &resp, err);
        if (rc < 0 && rg->bad_range)
            return skiff_error(err, 0, "blob %s on %s: asked for bytes from %llu, the answer starts at %llu",
                               rg->digest, e->host, want, resp.range_first),
                   1;
        if (rc < 0 && rg->not_ranged) {
            skiff_error(err, 0, "blob %s on %s: the registry (or a proxy in front of it) ignores Range requests",
                        rg->digest, e->host);
            err->code = ENOTSUP;
            return -1;
        }
        if (rc < 0 && s.write_errno == 0 && resp.rc == CURLE_WRITE_ERROR)
            return -1; /* the caller's sink failed: its error stands */
        if (rc == 0) {
            if (resp.status == 200 || resp.status == 206) {
                if (!rg->len || rg->got >= rg->len)
                    return 0;
                /* a clean end short of what was asked: as a cut connection */
                skiff_error(err, 0, "blob %s on %s: the answer ended after %llu of %llu bytes", rg->digest, e->host,
                            rg->got, rg->len);
                resp.rc = CURLE_PARTIAL_FILE;
            } else if (resp.status == 404) {
                return skiff_error(err, ENOENT, "blob %s on %s: HTTP 404", rg->digest, e->host), 1;
            } else if (resp.status == 416) {
                return skiff_error(err, 0, "blob %s on %s: HTTP 416 (the blob is shorter than byte %llu)", rg->digest,
                                   e->host, want),
                       1;
            } else {
                skiff_error(err, 0, "blob %s on %s: HTTP %ld", rg->digest, e->host, resp.status);
            }
        }
        if (err->code == ECANCELED || skiff_retry_stopped(rt))
            return -1;
        if (!skiff_http_transient(&resp))
            return 1;
        if (rg->got > before)
            rt->attempt = 0; /* it moved on: a fresh count of tries for the next cut */
        char what[128];
        snprintf(what, sizeof(what), "blob %.19s", rg->digest);
        if (skiff_retry_pause(rt, what, &resp, err) < 0)
            return err->code == ECANCELED ? -1 : 1;
    }
}

static int fetch_range(struct skiff_registry *r, struct range *rg, const struct skiff_fetch_opts *o, skiff_err *err)
{
    if (!skiff_ref_valid_digest(rg->digest))
        return skiff_error(err, 0, "bad digest '%s'", rg->digest);
    double t0 = skiff_now_ms();
    int tries = 0;
    for (int k = 0; k < r->nep; k++) {
        int i = (r->cur + k) % r->nep;
        struct retry rt;
        skiff_retry_init(&rt, r->cfg, o ? o : &r->defaults);
        int rc = range_from_endpoint(r, &r->ep[i], rg, &rt, err);
        tries += rt.attempt + 1;
        if (rc == 0)
            return 0;
        if (rc < 0)
            return -1;
    }
    if (tries > 1) {
        size_t l = strlen(err->msg);
        snprintf(err->msg + l, sizeof(err->msg) - l, " (gave up after %d tries in %.0f s)", tries,
                 (skiff_now_ms() - t0) / 1000.0);
    }
    return -1;
}

int skiff_registry_blob_range(struct skiff_registry *r, const char *digest, unsigned long long off,
                              unsigned long long len, skiff_blob_sink sink, void *ctx, const struct skiff_fetch_opts *o,
                              skiff_err *err)
{
    struct range rg = {
        .digest = digest, .off = off, .len = len, .sink = sink, .ctx = ctx, .need_ranges = o && o->need_ranges};
    return fetch_range(r, &rg, o, err);
}

/* ---- whole blobs ---------------------------------------------------------- */

/* A whole blob goes to its file through a buffer: libcurl hands its body
 * over 16 KiB at a time (CURL_MAX_WRITE_SIZE), and a write(), a hash update
 * and a wake-up of the layer's reader per piece cost more CPU than the
 * bytes' own copy (doc/benchmarks.md, issue 26). The bytes in the buffer are
 * the caller's already (range.got counts them), so a resumed transfer goes
 * on after them. */
#define BLOBFILE_BUFFER (1024u * 1024)

struct blobfile {
    int fd;
    struct skiff_sha256 *hash;
    unsigned long long written;
    int (*progress)(void *ctx, unsigned long long bytes);
    void *ctx;
    char *buf;
    size_t used;
};

/* The buffer to the file, then hashed, then reported. */
static int blobfile_flush(struct blobfile *b)
{
    const char *p = b->buf;
    size_t left = b->used;
    while (left) {
        ssize_t w = write(b->fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        p += w;
        left -= (size_t)w;
    }
    skiff_sha256_update(b->hash, b->buf, b->used);
    b->written += b->used;
    b->used = 0;
    if (b->progress && b->progress(b->ctx, b->written) != 0) {
        errno = ECANCELED;
        return -1;
    }
    return 0;
}

struct sinkerr {
    struct blobfile *b;
    int errno_;
};

static int blobfile_sink(void *ctx, const void *buf, size_t n)
{
    struct sinkerr *se = ctx;
    struct blobfile *b = se->b;
    while (n) {
        size_t c = BLOBFILE_BUFFER - b->used < n ? BLOBFILE_BUFFER - b->used : n;
        memcpy(b->buf + b->used, buf, c);
        b->used += c;
        buf = (const char *)buf + c;
        n -= c;
        if (b->used == BLOBFILE_BUFFER && blobfile_flush(b) < 0) {
            se->errno_ = errno;
            return -1;
        }
    }
    return 0;
}

int skiff_registry_blob_fetch(struct skiff_registry *r, const char *digest, unsigned long long size, int fd,
                              int (*progress)(void *ctx, unsigned long long bytes), void *ctx,
                              const struct skiff_fetch_opts *o, skiff_err *err)
{
    if (skiff_fd_empty(fd) < 0 || lseek(fd, 0, SEEK_SET) < 0)
        return skiff_error(err, errno, "truncate blob file");
    struct skiff_sha256 h;
    if (skiff_sha256_init(&h, err) < 0)
        return -1;
    struct blobfile b = {.fd = fd, .hash = &h, .progress = progress, .ctx = ctx, .buf = malloc(BLOBFILE_BUFFER)};
    if (!b.buf) {
        skiff_sha256_abort(&h);
        return skiff_error(err, ENOMEM, "blob %s", digest);
    }
    struct sinkerr se = {.b = &b};
    struct range rg = {.digest = digest, .len = size, .sink = blobfile_sink, .ctx = &se, .whole = true};
    int rv = fetch_range(r, &rg, o, err);
    if (rv == 0 && blobfile_flush(&b) < 0) {
        se.errno_ = errno;
        rv = -1;
    }
    free(b.buf);
    if (rv < 0) {
        skiff_sha256_abort(&h);
        if (se.errno_)
            return skiff_error(err, se.errno_, "blob %s: %s", digest,
                               se.errno_ == ECANCELED ? "stopped" : "write to the cache");
        return -1;
    }
    char got[SKIFF_DIGEST_LEN];
    skiff_sha256_final(&h, got);
    if (strcmp(got, digest) != 0)
        return skiff_error(err, EBADMSG, "blob %s from %s: digest mismatch (got %s): the registry sent other bytes",
                           digest, rg.host, got);
    return 0;
}

int skiff_registry_blob(struct skiff_registry *r, const char *digest, int fd, skiff_err *err)
{
    return skiff_registry_blob_fetch(r, digest, 0, fd, NULL, NULL, NULL, err);
}
