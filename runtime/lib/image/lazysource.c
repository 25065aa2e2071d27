/* Where a fetcher worker gets spans' compressed bytes (lazy_int.h).
 *
 * A lazy image made from a local source (an OCI layout, a skopeo dir:
 * the plan names each layer's blob) reads them from the blob; one made
 * from a registry asks the registry for the span's byte range (the
 * registry client's Range GET, registry.h), widened to SHA-256's 64-byte
 * blocks: those are the bytes the index's check is of (lazy_int.h). With
 * lazy_span_store, spans are looked up first in that directory, where
 * every user's fetchers leave the spans they fetched, named by the layer's
 * digest and the range: a span found there is used only when its bytes
 * pass the same check (anyone who can write the store can plant a file,
 * none can plant bytes that pass), else it is fetched as if it were not
 * there. */
#include "lazy_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomicfile.h"
#include "clock.h"
#include "fdio.h"
#include "ref.h"
#include "registry.h"

struct lz_source {
    const struct lz_image *im;
    const struct skiff_config *cfg;
    int *blobfd; /* local: each layer's blob */
    struct skiff_registry *reg;
    struct skiff_ref ref;
    bool (*stop)(void *ctx);
    void *stop_ctx;
};

int lz_source_open(const struct lz_image *im, const struct skiff_config *cfg, const struct lz_source *base,
                   struct lz_source **out, skiff_err *err)
{
    struct lz_source *s = calloc(1, sizeof(*s));
    if (!s)
        return skiff_error(err, ENOMEM, "lazy source");
    s->im = im;
    s->cfg = cfg;
    if (!strcmp(im->source, "local")) {
        s->blobfd = calloc(im->nlayers, sizeof(int));
        if (!s->blobfd) {
            free(s);
            return skiff_error(err, ENOMEM, "lazy source");
        }
        for (uint32_t i = 0; i < im->nlayers; i++) {
            s->blobfd[i] = im->blob_paths[i] ? skiff_open_regular(im->blob_paths[i], 0, err) : -1;
            if (s->blobfd[i] < 0) {
                if (!im->blob_paths[i])
                    lz_error(err, EINVAL, "lazy image %s: layer %u has no blob", im->dir, i + 1);
                for (uint32_t k = 0; k < i; k++)
                    close(s->blobfd[k]);
                free(s->blobfd);
                free(s);
                return -1;
            }
        }
    } else if (base && base->reg) {
        /* another worker's: the endpoints and their tokens, a connection of its own */
        s->ref = base->ref;
        s->stop = base->stop;
        s->stop_ctx = base->stop_ctx;
        if (skiff_registry_dup(&s->reg, base->reg, err) < 0) {
            free(s);
            return skiff_err_wrap(err, "lazy image source %s", im->source);
        }
    } else {
        if (skiff_ref_parse(im->source, cfg->default_registry, &s->ref, err) < 0 ||
            skiff_registry_open(&s->reg, cfg, &s->ref, err) < 0) {
            free(s);
            return skiff_err_wrap(err, "lazy image source %s", im->source);
        }
    }
    *out = s;
    return 0;
}

void lz_source_set_stop(struct lz_source *s, bool (*stop)(void *ctx), void *ctx)
{
    s->stop = stop;
    s->stop_ctx = ctx;
}

struct membuf {
    unsigned char *buf;
    size_t len, got;
};

static int to_mem(void *ctx, const void *data, size_t n)
{
    struct membuf *m = ctx;
    if (n > m->len - m->got) {
        errno = EPROTO;
        return -1;
    }
    memcpy(m->buf + m->got, data, n);
    m->got += n;
    return 0;
}

/* The span's bytes from the registry: one Range request (retried and
 * resumed by the registry client), given up by lazy_timeout, when the FUSE
 * server gives up waiting for it. */
static int from_registry(struct lz_source *s, const char *digest, uint64_t off, unsigned char *buf, size_t len,
                         skiff_err *err)
{
    struct membuf m = {.buf = buf, .len = len};
    struct skiff_fetch_opts fo = {
        .deadline_ms = skiff_now_ms() + (s->cfg->lazy_timeout_s > 0 ? s->cfg->lazy_timeout_s : 60) * 1000.0,
        .need_ranges = true,
        .stop = s->stop,
        .stop_ctx = s->stop_ctx,
    };
    if (skiff_registry_blob_range(s->reg, digest, off, len, to_mem, &m, &fo, err) < 0)
        return -1;
    if (m.got != len)
        return skiff_error(err, 0, "blob %s: %zu of %zu bytes came", digest, m.got, len);
    return 0;
}

void lz_source_close(struct lz_source *s)
{
    if (!s)
        return;
    for (uint32_t i = 0; s->blobfd && i < s->im->nlayers; i++)
        if (s->blobfd[i] >= 0)
            close(s->blobfd[i]);
    free(s->blobfd);
    skiff_registry_close(s->reg);
    free(s);
}

/* A span's name in the store: LAYERHEX-START-END, its widened range. */
static void store_path(const struct lz_source *s, const struct lz_index *ix, const struct lz_span *sp, char *p,
                       size_t n)
{
    snprintf(p, n, "%s/%s-%llu-%llu", s->cfg->lazy_span_store, ix->digest + 7, (unsigned long long)lz_span_wstart(sp),
             (unsigned long long)lz_span_wend(sp, ix->csize));
}

/* The span store's copy, when there is one and it is the span. */
static unsigned char *from_store(const struct lz_source *s, const struct lz_index *ix, const struct lz_span *sp,
                                 size_t len)
{
    if (!s->cfg->lazy_span_store[0])
        return NULL;
    char p[SKIFF_PATH_MAX + 128];
    store_path(s, ix, sp, p, sizeof(p));
    skiff_err ignore;
    int fd = skiff_open_regular(p, O_NOFOLLOW, &ignore);
    if (fd < 0)
        return NULL;
    unsigned char *buf = malloc(len ? len : 1);
    struct stat st;
    bool ok = buf && fstat(fd, &st) == 0 && (uint64_t)st.st_size == len && skiff_read_all_at(fd, buf, len, 0) == 0 &&
              lz_span_check(ix, sp, buf, len) == 0;
    close(fd);
    if (!ok) {
        free(buf);
        return NULL; /* not the span (planted, or cut short): fetched anew */
    }
    return buf;
}

static void to_store(const struct lz_source *s, const struct lz_index *ix, const struct lz_span *sp,
                     const unsigned char *buf, size_t len)
{
    if (!s->cfg->lazy_span_store[0])
        return;
    char p[SKIFF_PATH_MAX + 128];
    store_path(s, ix, sp, p, sizeof(p));
    skiff_err ignore;
    /* readable by all: what is in it is checked by whoever reads it */
    skiff_atomic_write(p, buf, len, 0644, SKIFF_ATOMIC_NOSYNC, &ignore);
}

int lz_source_get(struct lz_source *s, uint32_t g, unsigned char **out, size_t *outlen, skiff_err *err)
{
    uint32_t layer;
    const struct lz_span *sp = lz_image_span(s->im, g, &layer);
    const struct lz_index *ix = &s->im->layers[layer].ix;
    uint64_t from = lz_span_wstart(sp), to = lz_span_wend(sp, ix->csize);
    size_t len = (size_t)(to - from);
    unsigned char *buf = from_store(s, ix, sp, len);
    if (buf) {
        *out = buf;
        *outlen = len;
        return 0;
    }
    buf = malloc(len ? len : 1);
    if (!buf)
        return skiff_error(err, ENOMEM, "lazy span");
    int rc;
    if (s->blobfd) {
        rc = skiff_read_all_at(s->blobfd[layer], buf, len, from);
        if (rc < 0)
            skiff_error(err, errno, "read %s", s->im->blob_paths[layer]);
    } else {
        rc = from_registry(s, ix->digest, from, buf, len, err);
    }
    if (rc == 0 && lz_span_check(ix, sp, buf, len) < 0)
        rc = lz_error(err, EBADMSG,
                      "layer %s: bytes %llu-%llu from %s are not what the index recorded (corrupt or tampered data)",
                      ix->digest, (unsigned long long)from, (unsigned long long)to,
                      s->blobfd ? "the blob" : "the registry");
    if (rc < 0) {
        free(buf);
        return -1;
    }
    to_store(s, ix, sp, buf, len);
    *out = buf;
    *outlen = len;
    return 0;
}
