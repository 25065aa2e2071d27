/* What the training loop does with any device, through its operations; see
 * device.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"

int train_device_open(struct train_device *d, const struct train_device_ops *ops, const struct train_opts *o,
                      const struct train_plan *p, struct train_dist *dist, skiff_err *err)
{
    memset(d, 0, sizeof *d);
    d->ops = ops;
    return ops->open(d, o, p, dist, err);
}

void train_device_close(struct train_device *d)
{
    if (d->ops) d->ops->close(d);
    memset(d, 0, sizeof *d);
}

int train_device_mean(struct train_device *d, double v, double *out, skiff_err *err)
{
    struct tr_comm *c = d->comm;
    size_t bytes = (size_t)c->world * sizeof(float);
    float *all = calloc((size_t)c->world, sizeof(float));
    if (!all) return skiff_error(err, ENOMEM, "gather");
    all[c->rank] = (float)v;
    int rc = 0;
    if (c->world > 1) {
        float *buf = d->host_memory ? all : d->rank_slots;
        if (!d->host_memory) rc = d->ops->h2d(d, buf, all, bytes, err);
        if (rc == 0) rc = tr_all_gather(c, buf, (size_t)c->world, TR_F32, err);
        if (rc == 0 && !d->host_memory) rc = d->ops->d2h(d, all, buf, bytes, err);
    }
    double s = 0;
    for (int r = 0; r < c->world; r++) s += all[r];
    free(all);
    if (rc < 0) return -1;
    *out = s / c->world;
    return 0;
}

int train_device_broadcast(struct train_device *d, float *host, size_t n, skiff_err *err)
{
    struct tr_comm *c = d->comm;
    if (c->world == 1) return 0;
    if (d->host_memory) return tr_broadcast(c, host, n * sizeof(float), 0, err);
    size_t piece = (size_t)16 << 20; /* floats */
    float *buf = d->ops->alloc(d, (n < piece ? n : piece) * sizeof(float), err);
    if (!buf) return -1;
    int rc = 0;
    for (size_t off = 0; off < n && rc == 0; off += piece) {
        size_t len = n - off < piece ? n - off : piece;
        rc = d->ops->h2d(d, buf, host + off, len * sizeof(float), err);
        if (rc == 0) rc = tr_broadcast(c, buf, len * sizeof(float), 0, err);
        if (rc == 0) rc = d->ops->d2h(d, host + off, buf, len * sizeof(float), err);
    }
    d->ops->release(d, buf);
    return rc;
}
