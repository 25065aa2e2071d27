/* The span fetcher (lazy.h): a process of the user's, exec'd by the
 * front end before the container's namespaces are made (so it has the
 * host's network even under --container-unshare=net, and the container
 * never has a socket to the registry). It serves the container's FUSE
 * server over a SOCK_SEQPACKET channel: a NEED for a span not there yet
 * is queued; worker threads (lazy_parallel) take spans off the queue,
 * get their compressed bytes (lazysource.c: a Range request to the
 * registry, or a read of a local blob), and fill them (lazyfill.c); each
 * NEED is answered DONE or FAILED. Spans asked for by the FUSE server come
 * first; then those an earlier start read (the image's prefetch list,
 * recorded here); then, with lazy_complete, every other span, at most
 * lazy_complete_rate MB/s. */
#include "lazy_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "atomicfile.h"
#include "clock.h"
#include "fdio.h"
#include "fsutil.h"

enum { ST_IDLE, ST_QUEUED, ST_BUSY, ST_BUSY_ASKED };

struct fetcher {
    const struct skiff_config *cfg;
    struct lz_image *im;
    int chan;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint8_t *state;
    /* queues of span numbers: asked for (FIFO), then the prefetch list */
    uint32_t *ask, *pre;
    size_t nask, ask_head, npre, pre_head;
    uint32_t complete_next; /* lazy_complete: the next span to look at */
    bool stop;
    /* what this start asked for, in order: the next start's prefetch list */
    uint32_t *seen;
    size_t nseen;
    double t_start, t_last_ask;
    bool recorded;
    double rate_next;      /* lazy_complete_rate: when the next completion span may start */
    struct lz_source *src; /* the first worker's (its registry tokens are lent to the others) */
};

static bool stopping(void *ctx)
{
    const struct fetcher *f = ctx;
    return __atomic_load_n(&f->stop, __ATOMIC_RELAXED);
}

static void reply(struct fetcher *f, uint32_t type, uint32_t g, int e, const char *text)
{
    struct skiff_lazy_msg m;
    memset(&m, 0, sizeof(m));
    m.type = type;
    m.span = g;
    m.err = e;
    if (text)
        snprintf(m.text, sizeof(m.text), "%s", text);
    while (send(f->chan, &m, sizeof(m), MSG_NOSIGNAL) < 0 && errno == EINTR)
        ;
}

/* The next span to fetch (f->mu held), or -1 when there is none now. */
static int64_t next_span(struct fetcher *f, bool *background)
{
    *background = false;
    while (f->ask_head < f->nask) {
        uint32_t g = f->ask[f->ask_head++];
        if (f->state[g] == ST_QUEUED)
            return g;
    }
    f->ask_head = f->nask = 0;
    while (f->pre_head < f->npre) {
        uint32_t g = f->pre[f->pre_head++];
        if (f->state[g] == ST_IDLE && !skiff_lazy_present(f->im, g)) {
            *background = true;
            return g;
        }
    }
    if (f->cfg->lazy_complete) {
        while (f->complete_next < f->im->nspans) {
            uint32_t g = f->complete_next++;
            if (f->state[g] == ST_IDLE && !skiff_lazy_present(f->im, g)) {
                *background = true;
                return g;
            }
        }
    }
    return -1;
}

/* lazy_complete_rate: background spans no faster than the rate (f->mu
 * held; waits unlocked). */
static void pace(struct fetcher *f, uint64_t bytes)
{
    if (!f->cfg->lazy_complete_mbps)
        return;
    double now = skiff_now_ms(), start = f->rate_next > now ? f->rate_next : now;
    f->rate_next = start + (double)bytes / (f->cfg->lazy_complete_mbps * 1000.0);
    while (skiff_now_ms() < start && !f->stop) {
        pthread_mutex_unlock(&f->mu);
        usleep(20000);
        pthread_mutex_lock(&f->mu);
    }
}

static void *worker_main(void *arg)
{
    struct fetcher *f = arg;
    skiff_err err, open_err;
    struct lz_source *src = NULL;
    skiff_err_clear(&open_err);
    if (lz_source_open(f->im, f->cfg, f->src, &src, &open_err) < 0)
        src = NULL; /* every span then fails with open_err */
    else
        lz_source_set_stop(src, stopping, f);
    pthread_mutex_lock(&f->mu);
    for (;;) {
        bool background;
        int64_t g = -1;
        while (!f->stop && (g = next_span(f, &background)) < 0)
            pthread_cond_wait(&f->cv, &f->mu);
        if (f->stop)
            break;
        f->state[g] = ST_BUSY;
        const struct lz_span *s = lz_image_span(f->im, (uint32_t)g, NULL);
        if (background)
            pace(f, s->cend - s->cstart);
        pthread_mutex_unlock(&f->mu);
        int rc = 0;
        if (!skiff_lazy_present(f->im, (uint32_t)g)) {
            skiff_err_clear(&err);
            unsigned char *buf = NULL;
            size_t len = 0;
            if (!src)
                err = open_err;
            rc = src ? lz_source_get(src, (uint32_t)g, &buf, &len, &err) : -1;
            if (rc == 0)
                rc = lz_fill_span(f->im, (uint32_t)g, buf, len, &err);
            free(buf);
        }
        pthread_mutex_lock(&f->mu);
        bool asked = f->state[g] == ST_BUSY_ASKED || !background;
        f->state[g] = ST_IDLE;
        pthread_mutex_unlock(&f->mu);
        if (rc == 0)
            reply(f, SKIFF_LAZY_DONE, (uint32_t)g, 0, NULL);
        else if (!background || asked)
            reply(f, SKIFF_LAZY_FAILED, (uint32_t)g, err.code ? err.code : EIO, err.msg);
        pthread_mutex_lock(&f->mu);
    }
    pthread_mutex_unlock(&f->mu);
    lz_source_close(src);
    return NULL;
}

/* ---- the prefetch list: what a start read, for the next one ------------- */

static void load_prefetch(struct fetcher *f)
{
    f->pre = lz_prefetch_read(f->im, &f->npre);
}

/* Written once per fetcher, when the start has gone quiet (no NEED for
 * 2 s) or at its end: the spans the start asked for, in order. */
static void record_prefetch(struct fetcher *f)
{
    if (f->recorded || f->nseen == 0)
        return;
    f->recorded = true;
    size_t cap = f->nseen * 12 + 1, len = 0;
    char *text = malloc(cap);
    if (!text)
        return;
    for (size_t i = 0; i < f->nseen; i++)
        len += (size_t)snprintf(text + len, cap - len, "%u\n", f->seen[i]);
    char p[SKIFF_PATH_MAX + 16];
    snprintf(p, sizeof(p), "%s/prefetch", f->im->dir);
    skiff_err ignore;
    skiff_atomic_write(p, text, len, 0600, SKIFF_ATOMIC_NOSYNC, &ignore);
    free(text);
}

static void on_need(struct fetcher *f, uint32_t g)
{
    if (g >= f->im->nspans) {
        reply(f, SKIFF_LAZY_FAILED, g, EINVAL, "no such span");
        return;
    }
    if (skiff_lazy_present(f->im, g)) {
        reply(f, SKIFF_LAZY_DONE, g, 0, NULL);
        return;
    }
    pthread_mutex_lock(&f->mu);
    f->t_last_ask = skiff_now_ms();
    if (!f->recorded && f->nseen < f->im->nspans)
        f->seen[f->nseen++] = g;
    if (f->state[g] == ST_IDLE) {
        f->state[g] = ST_QUEUED;
        f->ask[f->nask++] = g;
        pthread_cond_signal(&f->cv);
    } else if (f->state[g] == ST_BUSY) {
        /* a background fetch of it is running: its answer is this one's */
        f->state[g] = ST_BUSY_ASKED;
    }
    pthread_mutex_unlock(&f->mu);
}

int skiff_lazy_fetch_main(const struct skiff_config *cfg, const char *dir, int chan, skiff_err *err)
{
    struct fetcher f;
    memset(&f, 0, sizeof(f));
    f.cfg = cfg;
    f.chan = chan;
    f.im = lz_image_open_fetch(cfg, dir, err);
    if (!f.im)
        return -1;
    uint32_t n = f.im->nspans;
    f.state = calloc(n, 1);
    f.ask = calloc(n, sizeof(*f.ask));
    f.seen = calloc(n, sizeof(*f.seen));
    int rv = -1;
    if (!f.state || !f.ask || !f.seen) {
        skiff_error(err, ENOMEM, "fetcher");
        goto out_free;
    }
    /* the source answers now, or every span asked for fails with why */
    skiff_err serr;
    skiff_err_clear(&serr);
    if (lz_source_open(f.im, cfg, NULL, &f.src, &serr) < 0)
        f.src = NULL;
    load_prefetch(&f);
    pthread_mutex_init(&f.mu, NULL);
    pthread_cond_init(&f.cv, NULL);
    f.t_start = skiff_now_ms();
    int nw = cfg->lazy_parallel > 0 ? (cfg->lazy_parallel > 32 ? 32 : cfg->lazy_parallel) : 1;
    pthread_t t[32];
    int started = 0;
    for (; started < nw; started++)
        if (pthread_create(&t[started], NULL, worker_main, &f) != 0)
            break;
    if (started == 0) {
        lz_error(err, EAGAIN, "fetcher threads");
        goto out;
    }
    for (;;) {
        struct skiff_lazy_msg m;
        /* a quiet start (2 s without a NEED) is recorded for the next one */
        struct timeval tv = {.tv_sec = 0, .tv_usec = 500000};
        setsockopt(chan, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        ssize_t r = recv(chan, &m, sizeof(m), 0);
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (f.nseen && skiff_now_ms() - f.t_last_ask > 2000)
                record_prefetch(&f);
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break; /* every server is gone */
        if ((size_t)r == sizeof(m) && m.type == SKIFF_LAZY_NEED)
            on_need(&f, m.span);
    }
    record_prefetch(&f);
    rv = 0;
out:
    pthread_mutex_lock(&f.mu);
    __atomic_store_n(&f.stop, true, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&f.cv);
    pthread_mutex_unlock(&f.mu);
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    pthread_mutex_destroy(&f.mu);
    pthread_cond_destroy(&f.cv);
    lz_source_close(f.src);
out_free:
    free(f.state);
    free(f.ask);
    free(f.pre);
    free(f.seen);
    skiff_lazy_close(f.im);
    return rv;
}
