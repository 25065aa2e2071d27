/* The env:// rendezvous; see dist.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "opts.h"

static int env_int(const char *name, int lo, int *out, skiff_err *err)
{
    const char *s = getenv(name);
    if (!s || !*s) return 0;
    if (train_parse_int(name, s, lo, out, err) < 0) return -1;
    return 1;
}

int train_dist_init(struct train_dist *d, int timeout_ms, skiff_err *err)
{
    memset(d, 0, sizeof *d);
    d->world = 1;
    int hr = env_int("RANK", 0, &d->rank, err);
    if (hr < 0) return -1;
    int hw = env_int("WORLD_SIZE", 1, &d->world, err);
    if (hw < 0) return -1;
    if (env_int("LOCAL_RANK", 0, &d->local_rank, err) < 0) return -1;
    if (!hr && !hw) return 0; /* one process */
    if (!hr || !hw)
        return skiff_error(err, 0,
                           "env://: %s is set but %s is not; set both (or neither for "
                           "one process)",
                           hr ? "RANK" : "WORLD_SIZE", hr ? "WORLD_SIZE" : "RANK");
    if (d->rank >= d->world) return skiff_error(err, 0, "env://: RANK=%d must be < WORLD_SIZE=%d", d->rank, d->world);
    if (d->world == 1) return 0;
    const char *a = getenv("MASTER_ADDR");
    if (!a || !*a) return skiff_error(err, 0, "env://: WORLD_SIZE=%d needs MASTER_ADDR", d->world);
    snprintf(d->master_addr, sizeof d->master_addr, "%s", a);
    int hp = env_int("MASTER_PORT", 1, &d->master_port, err);
    if (hp < 0) return -1;
    if (!hp || d->master_port > 65535)
        return skiff_error(err, 0, "env://: WORLD_SIZE=%d needs MASTER_PORT (1-65535)", d->world);
    if (tr_store_open(d->master_addr, d->master_port, d->rank == 0, timeout_ms, &d->store, err) < 0)
        return skiff_err_wrap(err, "rank %d", d->rank);
    if (tr_store_rendezvous(d->store, d->rank, d->world, err) < 0) {
        tr_store_close(d->store);
        d->store = NULL;
        return skiff_err_wrap(err, "rank %d", d->rank);
    }
    return 0;
}

void train_dist_fini(struct train_dist *d)
{
    tr_store_close(d->store);
    d->store = NULL;
}
