/* Layers applied onto the scratch tree, in order; registry layers not in
 * the cache are downloaded by up to max_connections threads at once (into
 * the cache: temp name, retried and resumed, digest checked, rename) and
 * streamed into the tree while they download; see import_int.h. */
#include "import_int.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "layer.h"
#include "registry.h"

struct fetch_progress {
    struct skiff_import_job *j;
    struct skiff_import_layer *l;
};

/* A warning for the user (o->warn), when the caller asked for them. */
__attribute__((format(printf, 2, 3))) static void import_warn(const struct skiff_import_job *j, const char *fmt, ...)
{
    if (!j->o || !j->o->warn)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    j->o->warn(j->o->warn_ctx, msg);
}

void skiff_import_progress_text(const struct skiff_import_progress *p, char *out, size_t n)
{
    double left = p->rate > 0 && p->total > p->done ? (double)(p->total - p->done) / p->rate : 0;
    char eta[32] = "";
    if (p->done < p->total && p->rate > 0)
        snprintf(eta, sizeof(eta), left >= 90 ? ", %.0f min left" : ", %.0f s left", left >= 90 ? left / 60 : left);
    snprintf(out, n, "%.1f of %.1f MB, %.1f MB/s, %u of %u layers%s", (double)p->done / 1e6, (double)p->total / 1e6,
             p->rate / 1e6, p->layers_done, p->layers, eta);
}

/* Under j->mu: the downloads' progress now. */
static void progress_now(const struct skiff_import_job *j, struct skiff_import_progress *p)
{
    unsigned long long done = j->dl_base;
    for (size_t i = 0; i < j->nlayers; i++)
        if (j->layers[i].remote && j->layers[i].state == BLOB_RUNNING)
            done += j->layers[i].avail;
    double el = skiff_now_s() - j->dl_t0;
    *p = (struct skiff_import_progress){.done = done,
                                        .total = j->dl_total > done ? j->dl_total : done,
                                        .layers_done = j->dl_layers_done,
                                        .layers = j->dl_layers,
                                        .elapsed_s = el,
                                        .rate = el > 0 ? (double)done / el : 0};
}

/* Tells o->on_progress how far the downloads are, at most every
 * progress_every_s (one thread at a time: the one that finds it due). */
static void maybe_report(struct skiff_import_job *j, bool force)
{
    if (!j->o || !j->o->on_progress)
        return;
    double every = j->o->progress_every_s > 0 ? j->o->progress_every_s : 5;
    struct skiff_import_progress p;
    pthread_mutex_lock(&j->mu);
    double now = skiff_now_s();
    bool due = force || now - j->dl_last_report >= every;
    if (due) {
        j->dl_last_report = now;
        progress_now(j, &p);
    }
    pthread_mutex_unlock(&j->mu);
    if (due)
        j->o->on_progress(j->o->progress_ctx, &p);
}

static int fetch_progress_cb(void *ctx, unsigned long long bytes)
{
    struct fetch_progress *fp = ctx;
    pthread_mutex_lock(&fp->j->mu);
    fp->l->avail = bytes;
    bool abort = fp->j->fetch_abort;
    pthread_cond_broadcast(&fp->j->cv);
    pthread_mutex_unlock(&fp->j->mu);
    maybe_report(fp->j, false);
    return abort ? -1 : 0;
}

static bool fetch_stopped(void *ctx)
{
    struct skiff_import_job *j = ctx;
    pthread_mutex_lock(&j->mu);
    bool stop = j->fetch_abort;
    pthread_mutex_unlock(&j->mu);
    return stop;
}

static void fetch_retrying(void *ctx, const char *what, int attempt, double wait_s, const char *why)
{
    struct fetch_progress *fp = ctx;
    import_warn(fp->j, "%s: try %d failed (%s); trying again in %.1f s", what, attempt, why, wait_s);
}

/* Downloads one layer into the cache (temp name, digest checked, rename),
 * publishing progress for the applier. -1 when it failed (l->error says why). */
static int fetch_one(struct skiff_import_job *j, struct skiff_registry *reg, struct skiff_import_layer *l)
{
    skiff_err e;
    skiff_err_clear(&e);
    /* not synced: a cached blob is checked against its digest when read */
    int rc = skiff_atomic_begin(&l->dl, l->path, NULL, 0600, SKIFF_ATOMIC_NOSYNC, &e);
    pthread_mutex_lock(&j->mu);
    if (rc < 0) {
        snprintf(l->error, sizeof(l->error), "%s", e.msg);
        l->state = BLOB_FAILED;
    } else {
        l->state = BLOB_RUNNING;
    }
    bool stop = rc < 0 || j->fetch_abort;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (stop) {
        if (rc == 0) {
            skiff_atomic_abort(&l->dl);
            pthread_mutex_lock(&j->mu);
            snprintf(l->error, sizeof(l->error), "stopped");
            l->state = BLOB_FAILED;
            pthread_cond_broadcast(&j->cv);
            pthread_mutex_unlock(&j->mu);
        }
        return -1;
    }
    double t0 = skiff_now_s();
    struct fetch_progress fp = {j, l};
    struct skiff_fetch_opts fo = {.deadline_ms = j->o ? j->o->deadline_ms : 0,
                                  .stop = fetch_stopped,
                                  .stop_ctx = j,
                                  .retrying = fetch_retrying,
                                  .retry_ctx = &fp};
    int rv = skiff_registry_blob_fetch(reg, l->digest, l->size > 0 ? (unsigned long long)l->size : 0, l->dl.fd,
                                       fetch_progress_cb, &fp, &fo, &e);
    if (rv == 0 && j->o && j->o->progress)
        fprintf(stderr, "skiff: fetched layer %.19s %8.1f MB %5.2f s\n", l->digest, (double)l->avail / 1e6,
                skiff_now_s() - t0);
    pthread_mutex_lock(&j->mu);
    /* under the lock: the applier opens the temporary name until it is
     * renamed */
    if (rv == 0)
        rv = skiff_atomic_commit(&l->dl, &e);
    else
        skiff_atomic_abort(&l->dl);
    if (rv < 0) {
        snprintf(l->error, sizeof(l->error), "%s", e.msg);
        l->state = BLOB_FAILED;
        j->fetch_abort = true; /* the import fails: the other downloads stop */
    } else {
        l->state = BLOB_DONE;
        j->dl_base += l->avail;
        j->dl_layers_done++;
        skiff_source_fetched(j, l->path);
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return rv;
}

/* One download thread: takes the next pending layer (in order, so the
 * layers applied first arrive first) until none is left or the import
 * stops. */
static void *fetch_main(void *arg)
{
    struct skiff_import_job *j = arg;
    struct skiff_registry *reg = NULL;
    skiff_err e;
    skiff_err_clear(&e);
    int dup = skiff_registry_dup(&reg, j->reg, &e);
    for (;;) {
        pthread_mutex_lock(&j->mu);
        struct skiff_import_layer *l = NULL;
        while (!j->fetch_abort && j->fetch_next < j->nlayers && !l) {
            struct skiff_import_layer *c = &j->layers[j->fetch_next++];
            if (c->state == BLOB_PENDING)
                l = c;
        }
        if (l && dup < 0) {
            snprintf(l->error, sizeof(l->error), "%s", e.msg);
            l->state = BLOB_FAILED;
            j->fetch_abort = true;
            pthread_cond_broadcast(&j->cv);
            l = NULL;
        }
        pthread_mutex_unlock(&j->mu);
        if (!l || fetch_one(j, reg, l) < 0)
            break;
    }
    skiff_registry_close(reg);
    pthread_mutex_lock(&j->mu);
    if (--j->fetchers_left == 0)
        j->fetch_over = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

void skiff_fetch_stop(struct skiff_import_job *j)
{
    if (!j->fetching)
        return;
    pthread_mutex_lock(&j->mu);
    j->fetch_abort = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    for (unsigned i = 0; i < j->nfetchers; i++)
        pthread_join(j->fetch_tids[i], NULL);
    free(j->fetch_tids);
    j->fetch_tids = NULL;
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    j->fetching = false;
}

/* Starts the download threads for the pending layers. */
static int fetch_start(struct skiff_import_job *j, skiff_err *err)
{
    unsigned pending = 0;
    for (size_t i = 0; i < j->nlayers; i++)
        if (j->layers[i].remote) {
            pending++;
            j->dl_total += j->layers[i].size > 0 ? (unsigned long long)j->layers[i].size : 0;
        }
    if (!pending)
        return 0;
    unsigned n = j->cfg->max_connections > 0 ? (unsigned)j->cfg->max_connections : 1;
    if (n > pending)
        n = pending;
    j->fetch_tids = calloc(n, sizeof(*j->fetch_tids));
    if (!j->fetch_tids)
        return skiff_error(err, ENOMEM, "download threads");
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->dl_layers = pending;
    j->dl_t0 = j->dl_last_report = skiff_now_s();
    j->fetchers_left = n;
    j->fetching = true;
    for (unsigned i = 0; i < n; i++) {
        int pe = pthread_create(&j->fetch_tids[i], NULL, fetch_main, j);
        if (pe != 0) {
            pthread_mutex_lock(&j->mu);
            j->fetchers_left -= n - i; /* the ones never started */
            if (!j->fetchers_left)
                j->fetch_over = true;
            pthread_mutex_unlock(&j->mu);
            j->nfetchers = i;
            if (i == 0) {
                skiff_fetch_stop(j);
                return skiff_error(err, pe, "pthread_create");
            }
            break; /* fewer threads: still all the layers */
        }
        j->nfetchers = i + 1;
    }
    return 0;
}

/* wait_more for skiff_layer_apply_stream: blocks until the layer file grows
 * past have, or its download ends. */
static int fetch_wait(void *ctx, unsigned long long have)
{
    struct fetch_progress *fp = ctx;
    struct skiff_import_job *j = fp->j;
    struct skiff_import_layer *l = fp->l;
    pthread_mutex_lock(&j->mu);
    while (l->avail <= have && l->state == BLOB_RUNNING && !j->fetch_abort)
        pthread_cond_wait(&j->cv, &j->mu);
    int rv = l->avail > have ? 1 : l->state == BLOB_DONE ? 0 : -1;
    pthread_mutex_unlock(&j->mu);
    return rv;
}

/* Opens a layer the fetcher is downloading (or has): waits until it started. */
static int open_fetched(struct skiff_import_job *j, struct skiff_import_layer *l, skiff_err *err)
{
    pthread_mutex_lock(&j->mu);
    while (l->state == BLOB_PENDING && !j->fetch_over)
        pthread_cond_wait(&j->cv, &j->mu);
    int fd = -1;
    if (l->state == BLOB_RUNNING || l->state == BLOB_DONE) {
        const char *p = l->state == BLOB_DONE ? l->path : l->dl.tmp;
        fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            skiff_error(err, errno, "open %s", p);
    } else {
        skiff_error(err, 0, "download: %s", l->state == BLOB_FAILED ? l->error : "not started");
    }
    pthread_mutex_unlock(&j->mu);
    return fd;
}

/* After a streamed layer was applied: its download must also have ended well
 * (the tar may end before the blob does; the digest covers all of it). */
static int fetched_ok(struct skiff_import_job *j, struct skiff_import_layer *l, skiff_err *err)
{
    pthread_mutex_lock(&j->mu);
    while (l->state == BLOB_RUNNING && !j->fetch_abort)
        pthread_cond_wait(&j->cv, &j->mu);
    int rv =
        l->state == BLOB_DONE ? 0 : skiff_error(err, 0, "download: %s", l->state == BLOB_FAILED ? l->error : "stopped");
    pthread_mutex_unlock(&j->mu);
    return rv;
}

int skiff_fetch_apply_layers(struct skiff_import_job *j, int rootfd, const struct skiff_layer_sink *sink,
                             skiff_err *err)
{
    unsigned long devices = 0, setid = 0, xattrs = 0;
    if (fetch_start(j, err) < 0)
        return -1;
    for (size_t i = 0; i < j->nlayers; i++) {
        struct skiff_import_layer *l = &j->layers[i];
        double t0 = skiff_now_s();
        struct skiff_layer_stats st;
        int rv;
        if (l->remote) {
            /* Streamed while it downloads; the fetcher checks the digest. */
            struct fetch_progress fp = {j, l};
            int bfd = open_fetched(j, l, err);
            unsigned fl = SKIFF_LAYER_WHITEOUTS | SKIFF_LAYER_OWNERS;
            rv = bfd < 0 ? -1
                 : sink  ? skiff_layer_sink_stream(sink, bfd, l->path, NULL, fl, fetch_wait, &fp, &st, err)
                         : skiff_layer_apply_stream(rootfd, bfd, l->path, NULL, fl, fetch_wait, &fp, &st, err);
            if (rv == 0)
                rv = fetched_ok(j, l, err);
            if (rv < 0) {
                skiff_fetch_stop(j);         /* joined: l->state is ours to read now */
                if (l->state == BLOB_FAILED) /* the download's error is the cause */
                    skiff_error(err, 0, "download: %s", l->error);
                return skiff_err_wrap(err, "layer %zu/%zu %s", i + 1, j->nlayers, l->digest);
            }
        } else {
            const char *check = l->digest[0] && !l->verified ? l->digest : NULL;
            int bfd = skiff_source_open(j, l->path, err);
            unsigned fl = SKIFF_LAYER_WHITEOUTS | SKIFF_LAYER_OWNERS;
            rv = bfd < 0 ? -1
                 : sink  ? skiff_layer_sink_stream(sink, bfd, l->path, check, fl, NULL, NULL, &st, err)
                         : skiff_layer_apply_fd(rootfd, bfd, l->path, check, fl, &st, err);
            if (rv < 0 && err->code == EBADMSG && j->ref.kind == SKIFF_REF_DOCKER && unlink(l->path) == 0) {
                size_t ml = strlen(err->msg);
                snprintf(err->msg + ml, sizeof(err->msg) - ml,
                         "; removed the bad blob from the cache: run again to download it");
            }
            if (rv < 0) {
                skiff_fetch_stop(j);
                return skiff_err_wrap(err, "layer %zu/%zu %s", i + 1, j->nlayers, l->digest[0] ? l->digest : l->path);
            }
        }
        devices += st.devices_skipped;
        setid += st.setid_stripped;
        xattrs += st.xattrs_dropped;
        if (j->o && j->o->progress)
            fprintf(stderr, "skiff: layer %zu/%zu %.19s %8.1f MB %6lu entries %5.2f s\n", i + 1, j->nlayers,
                    l->digest[0] ? l->digest : "(no digest)", (double)st.bytes_in / 1e6, st.entries,
                    skiff_now_s() - t0);
    }
    if (j->fetching)
        maybe_report(j, true);
    skiff_fetch_stop(j);
    if (devices)
        import_warn(j, "skipped %lu device node(s) or socket(s): containers get their /dev from the runtime", devices);
    if (setid)
        import_warn(j, "stripped setuid/setgid bits from %lu file(s)", setid);
    if (xattrs)
        import_warn(j, "dropped %lu extended attribute(s) (file capabilities included)", xattrs);
    return 0;
}
