/* The file libsquashfs writes an image into (sqfsout.h says why skiff has
 * its own). The writer thread takes whole chunks in order; the appending
 * thread fills the next chunk meanwhile, and waits only when every chunk is
 * queued. Memory: OUT_CHUNKS x OUT_CHUNK, whatever the image's size. */
#include "sqfsout.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqfs/error.h>
#include <sqfs/io.h>

#include "fdio.h"

#define OUT_CHUNK (2u << 20)
#define OUT_CHUNKS 4

struct out_chunk {
    sqfs_u64 off; /* where its first byte goes */
    size_t len;
    char *buf;
};

struct out_file {
    sqfs_file_t base;
    int fd;
    sqfs_u64 size; /* including the bytes still queued */
    bool threaded;
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct out_chunk ch[OUT_CHUNKS];
    /* (under mu) ch[head] .. ch[head + queued - 1] wait for the writer, which
     * holds ch[head] while it writes it */
    unsigned head, queued;
    unsigned fill; /* the chunk being filled, ch[head + queued] (the appender's) */
    bool stop;
    int error; /* errno of the first write that failed */
};

/* errno of a failed write, or 0 */
static int write_all(int fd, const void *buf, size_t n, sqfs_u64 off)
{
    return skiff_write_all_at(fd, buf, n, off) < 0 ? (errno ? errno : EIO) : 0;
}

static void *writer(void *arg)
{
    struct out_file *o = arg;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (!o->queued && !o->stop)
            pthread_cond_wait(&o->cv, &o->mu);
        if (!o->queued)
            break;
        struct out_chunk *c = &o->ch[o->head];
        int e = o->error;
        pthread_mutex_unlock(&o->mu);
        if (!e)
            e = write_all(o->fd, c->buf, c->len, c->off);
        pthread_mutex_lock(&o->mu);
        if (e && !o->error)
            o->error = e;
        c->len = 0;
        o->head = (o->head + 1) % OUT_CHUNKS;
        o->queued--;
        pthread_cond_broadcast(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

static struct out_chunk *filling(struct out_file *o)
{
    return &o->ch[o->fill];
}

/* The chunk being filled goes to the writer; returns once another chunk is
 * free to fill. Called by the appending thread only. */
static int submit(struct out_file *o)
{
    pthread_mutex_lock(&o->mu);
    if (filling(o)->len) {
        o->queued++;
        o->fill = (o->fill + 1) % OUT_CHUNKS;
        pthread_cond_broadcast(&o->cv);
    }
    while (o->queued == OUT_CHUNKS)
        pthread_cond_wait(&o->cv, &o->mu);
    int e = o->error;
    pthread_mutex_unlock(&o->mu);
    return e;
}

/* Everything written so far is in the file: the errno of the first failed
 * write, or 0. */
static int drain(struct out_file *o)
{
    if (!o->threaded)
        return 0;
    int e = submit(o);
    pthread_mutex_lock(&o->mu);
    while (o->queued)
        pthread_cond_wait(&o->cv, &o->mu);
    e = o->error;
    pthread_mutex_unlock(&o->mu);
    return e;
}

static void out_destroy(sqfs_object_t *obj)
{
    struct out_file *o = (struct out_file *)obj;
    if (o->threaded) {
        drain(o);
        pthread_mutex_lock(&o->mu);
        o->stop = true;
        pthread_cond_broadcast(&o->cv);
        pthread_mutex_unlock(&o->mu);
        pthread_join(o->tid, NULL);
        pthread_cond_destroy(&o->cv);
        pthread_mutex_destroy(&o->mu);
    }
    for (unsigned i = 0; i < OUT_CHUNKS; i++)
        free(o->ch[i].buf);
    close(o->fd);
    free(o);
}

static int out_read_at(sqfs_file_t *f, sqfs_u64 off, void *buf, size_t n)
{
    struct out_file *o = (struct out_file *)f;
    if (off > o->size || n > o->size - off)
        return SQFS_ERROR_OUT_OF_BOUNDS;
    if (drain(o))
        return SQFS_ERROR_IO;
    return skiff_read_all_at(o->fd, buf, n, off) < 0 ? SQFS_ERROR_IO : 0;
}

static int out_write_at(sqfs_file_t *f, sqfs_u64 off, const void *buf, size_t n)
{
    struct out_file *o = (struct out_file *)f;
    if (n && off + n > o->size)
        o->size = off + n;
    if (!o->threaded)
        return write_all(o->fd, buf, n, off) ? SQFS_ERROR_IO : 0;
    while (n) {
        struct out_chunk *c = filling(o);
        if (c->len && c->off + c->len != off) { /* not where the chunk ends: a chunk of its own */
            if (submit(o))
                return SQFS_ERROR_IO;
            c = filling(o);
        }
        if (!c->len)
            c->off = off;
        size_t k = OUT_CHUNK - c->len < n ? OUT_CHUNK - c->len : n;
        memcpy(c->buf + c->len, buf, k);
        c->len += k;
        buf = (const char *)buf + k;
        off += k;
        n -= k;
        if (c->len == OUT_CHUNK && submit(o))
            return SQFS_ERROR_IO;
    }
    return 0;
}

static sqfs_u64 out_get_size(const sqfs_file_t *f)
{
    return ((const struct out_file *)f)->size;
}

static int out_truncate(sqfs_file_t *f, sqfs_u64 size)
{
    struct out_file *o = (struct out_file *)f;
    if (drain(o) || ftruncate(o->fd, (off_t)size) < 0)
        return SQFS_ERROR_IO;
    o->size = size;
    return 0;
}

sqfs_file_t *skiff_sqfs_out_open(const char *path, bool threaded)
{
    struct out_file *o = calloc(1, sizeof(*o));
    if (!o)
        return NULL;
    o->fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (o->fd < 0 || skiff_fd_empty(o->fd) < 0)
        goto fail;
    for (unsigned i = 0; threaded && i < OUT_CHUNKS; i++)
        if (!(o->ch[i].buf = malloc(OUT_CHUNK)))
            goto fail;
    if (threaded) {
        int e = pthread_mutex_init(&o->mu, NULL);
        if (e || (e = pthread_cond_init(&o->cv, NULL))) {
            if (!e)
                pthread_mutex_destroy(&o->mu);
            errno = e;
            goto fail;
        }
        if ((e = pthread_create(&o->tid, NULL, writer, o))) {
            pthread_cond_destroy(&o->cv);
            pthread_mutex_destroy(&o->mu);
            errno = e;
            goto fail;
        }
        o->threaded = true;
    }
    o->base.base.destroy = out_destroy;
    o->base.base.copy = NULL; /* a file open for writing is never copied (sqfs/io.h) */
    o->base.read_at = out_read_at;
    o->base.write_at = out_write_at;
    o->base.get_size = out_get_size;
    o->base.truncate = out_truncate;
    return &o->base;
fail:;
    int e = errno;
    for (unsigned i = 0; i < OUT_CHUNKS; i++)
        free(o->ch[i].buf);
    if (o->fd >= 0)
        close(o->fd);
    free(o);
    errno = e;
    return NULL;
}

int skiff_sqfs_out_flush(sqfs_file_t *f, skiff_err *err)
{
    int e = drain((struct out_file *)f);
    return e ? skiff_error(err, e, "write the squashfs image") : 0;
}
