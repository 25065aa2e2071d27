/* The training loop of `skiff-train train`, one for every device: env://
 * rendezvous, the plan, data, LR schedule, validation, checkpoints and the
 * log. What a device does (the step, and moving its memory) is behind
 * device.h; what the loop decides (which windows, when to validate and save,
 * the resume rules) is policy.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "clock.h"
#include "data.h"
#include "device.h"
#include "dist.h"
#include "logger.h"
#include "policy.h"
#include "train.h"

struct run {
    const struct train_opts *o;
    struct train_dist dist;
    int have_dist;
    struct train_plan plan; /* padding, ZeRO shard, steps of this run */
    struct train_device dev;
    struct data_loader train, val;
    int have_val;
    int *in, *tg; /* one micro-batch: B*T token ids and targets */
    struct train_log log;
};

static void run_free(struct run *r)
{
    train_device_close(&r->dev);
    data_loader_close(&r->train);
    if (r->have_val) data_loader_close(&r->val);
    free(r->in);
    free(r->tg);
    train_log_close(&r->log);
    train_dist_fini(&r->dist);
}

/* ZeRO-3: d->params is this rank's shard (policy.h), and no rank keeps all
 * the weights: a fresh run builds them once, takes its shard and frees
 * them; --resume reads each rank's shard from its own file. With --tp the
 * shard is of the tensor-parallel rank's part, which every data-parallel
 * group (d->comm) takes from its rank 0's whole weights; with --pp of its
 * stage's ranges. */
static int init_shard(struct run *r, skiff_err *err)
{
    const struct train_opts *o = r->o;
    struct train_plan *pl = &r->plan;
    struct train_device *d = &r->dev;
    size_t n = gpt2_param_layout(&o->cfg, NULL, NULL), nl = gpt2_param_layout_tp(&o->cfg, pl->tp, NULL, NULL);
    float *full = malloc(n * sizeof(float)), *local = pl->tp > 1 ? malloc(nl * sizeof(float)) : full;
    int rc = full && local ? 0 : skiff_error(err, ENOMEM, "initial weights");
    if (rc == 0) rc = train_init_params(o, pl->rank, full, err);
    if (rc == 0 && (rc = train_device_broadcast(d, full, n, err)) < 0)
        skiff_err_wrap(err, "broadcasting parameters from rank 0");
    if (rc == 0 && pl->tp > 1) gpt2_tp_copy(&o->cfg, pl->tp, pl->tp_rank, full, local, 1);
    if (rc == 0 && pl->pp > 1) /* its shard of its stage's ranges (policy.h), as ZeRO-1/2 cut them */
        train_pp_shard_copy(&o->cfg, pl->tp, pl->pp, pl->pp_rank, pl->world, pl->rank, local, d->params, 0);
    else if (rc == 0)
        train_zero3_copy(&o->cfg, pl->tp, pl->world, pl->rank, local, d->params, 0);
    if (local != full) free(local);
    free(full);
    return rc;
}

/* The starting weights (from --init-from or the seed), or the checkpoint's
 * weights and optimizer state with --resume, the same on every rank. */
static int load_state(struct run *r, skiff_err *err)
{
    const struct train_opts *o = r->o;
    struct train_plan *pl = &r->plan;
    struct train_device *d = &r->dev;
    int sharded = o->zero == 3;
    if (sharded && !o->resume && init_shard(r, err) < 0) return -1;
    if (!sharded && train_init_params(o, pl->rank, d->params, err) < 0) return -1;
    if (o->resume) {
        if (train_resume_load(pl, o, d->params, d->m, d->v, err) < 0) return -1;
        d->amp = pl->amp; /* the fp16 loss scale and skipped steps, for the device's upload */
        if (train_resume_shares_opt(pl, o) && (train_device_broadcast(d, d->m, pl->opt_len, err) < 0 ||
                                               train_device_broadcast(d, d->v, pl->opt_len, err) < 0))
            return skiff_err_wrap(err, "sharing optimizer state");
        double mean;
        if (train_device_mean(d, pl->start, &mean, err) < 0 || train_resume_agree(pl, o, mean, err) < 0) return -1;
    }
    /* one source of truth for the weights: rank 0 */
    if (!sharded && train_device_broadcast(d, d->params, pl->n_pad, err) < 0)
        return skiff_err_wrap(err, "broadcasting parameters from rank 0");
    return d->ops->upload ? d->ops->upload(d, o->resume, err) : 0;
}

static int setup(struct run *r, const struct train_opts *o, const struct train_device_ops *ops, skiff_err *err)
{
    r->o = o;
    if (train_dist_init(&r->dist, o->timeout_ms, err) < 0) return -1;
    r->have_dist = 1;
    struct train_plan *pl = &r->plan;
    if (train_plan_check(o, r->dist.world, err) < 0) return -1;
    train_plan_init(pl, o, gpt2_param_layout(&o->cfg, NULL, NULL), r->dist.world, r->dist.rank);
    if (train_device_open(&r->dev, ops, o, pl, &r->dist, err) < 0) return -1;
    r->in = calloc((size_t)o->batch * o->seq, sizeof(int));
    r->tg = calloc((size_t)o->batch * o->seq, sizeof(int));
    if (!r->in || !r->tg) return skiff_error(err, ENOMEM, "batch buffers");
    if (data_loader_open(&r->train, o->data, o->batch, o->seq, o->cfg.vocab_size, o->seed, !o->sequential, err) < 0)
        return skiff_err_wrap(err, "--data");
    if (o->val) {
        if (data_loader_open(&r->val, o->val, o->batch, o->seq, o->cfg.vocab_size, o->seed, 0, err) < 0)
            return skiff_err_wrap(err, "--val");
        r->have_val = 1;
    }
    if (load_state(r, err) < 0) return -1;
    if (r->dist.rank == 0 && train_log_open(&r->log, o->log_path, o->resume, o->quiet, err) < 0) return -1;
    if (r->dist.rank == 0 && !o->quiet) {
        char where[512];
        r->dev.ops->describe(&r->dev, where, sizeof where);
        char tp[64] = "";
        if (pl->tp > 1 || pl->pp > 1) { /* " = dp 2 x tp 2 x pp 2", the factors above 1 */
            size_t at = (size_t)snprintf(tp, sizeof tp, " = dp %d", pl->world);
            if (pl->tp > 1) at += (size_t)snprintf(tp + at, sizeof tp - at, " x tp %d", pl->tp);
            if (pl->pp > 1) snprintf(tp + at, sizeof tp - at, " x pp %d", pl->pp);
        }
        printf("skiff-train: model %s (%zu params, L%d H%d C%d T%d V%d), world %d%s, batch %d x %d "
               "x accum %d x dp = %zu tokens/step, zero %d, %zu train windows, on %s%s\n",
               o->model, pl->num_params, o->cfg.num_layers, o->cfg.num_heads, o->cfg.channels, o->seq,
               o->cfg.vocab_size, pl->world * pl->tp * pl->pp, tp, o->batch, o->seq, o->grad_accum,
               (size_t)o->batch * o->seq * o->grad_accum * pl->world, o->zero, r->train.num_windows, where,
               o->resume ? ", resumed" : "");
    }
    return 0;
}

/* The micro-batches of one step, loaded when the device's step asks. */
struct step_batches {
    struct train_batches b; /* first: the device sees this */
    struct run *r;
    int step;
};

static int load_micro_batch(struct train_batches *b, int k, skiff_err *err)
{
    struct step_batches *sb = (struct step_batches *)b;
    struct run *r = sb->r;
    return data_loader_batch(&r->train, train_plan_window(&r->plan, r->o, sb->step, k), b->inputs, b->targets, err);
}

/* Mean validation loss over --val-batches batches per rank and all ranks. */
static int evaluate(struct run *r, double *out, skiff_err *err)
{
    struct train_device *d = &r->dev;
    int nb = r->o->val_batches;
    for (int i = 0; i < nb; i++) {
        if (data_loader_batch(&r->val, train_plan_val_window(&r->plan, r->val.B, i), r->in, r->tg, err) < 0 ||
            d->ops->forward(d, r->in, r->tg, err) < 0)
            return -1;
    }
    double sum;
    if (d->ops->take_loss(d, &sum, err) < 0) return -1;
    return train_device_mean(d, sum / nb, out, err);
}

static int save(struct run *r, int step, skiff_err *err)
{
    struct train_device *d = &r->dev;
    if (d->ops->download && d->ops->download(d, err) < 0) return -1;
    struct train_ckpt c;
    train_plan_ckpt(&r->plan, r->o, step, d->params, d->m, d->v, &c);
    c.amp = d->amp;
    if (train_ckpt_save(r->o->ckpt_dir, &c, err) < 0) return -1;
    /* every rank's file is complete before anyone reports the step saved */
    return tr_barrier(d->comm, err);
}

static int run_steps(struct run *r, skiff_err *err)
{
    const struct train_opts *o = r->o;
    const struct train_plan *pl = &r->plan;
    struct train_device *d = &r->dev;
    struct tr_comm *c = d->comm;
    uint64_t G = (uint64_t)o->batch * (uint64_t)o->grad_accum * (uint64_t)pl->world;
    struct step_batches sb = {
        .b = {.count = o->grad_accum, .inputs = r->in, .targets = r->tg, .load = load_micro_batch}, .r = r};
    for (int step = pl->start; step < pl->end; step++) {
        double t0 = skiff_now_s(), busy0 = c->stats.busy_s;
        float lr = train_lr(o, step);
        struct train_step_stats st = {0};
        sb.step = step;
        if (d->ops->step(d, step, lr, &sb.b, &st, err) < 0) return -1;
        double val_loss = NAN;
        if (r->have_val && train_plan_val_due(o, step) && evaluate(r, &val_loss, err) < 0) return -1;
        double dt = skiff_now_s() - t0;
        if (r->dist.rank == 0) {
            struct train_step_log s = {.step = step + 1,
                                       .loss = st.loss,
                                       .lr = lr,
                                       .grad_norm = st.grad_norm,
                                       .tokens_per_s = (double)G * o->seq / dt,
                                       .ms = dt * 1000,
                                       .val_loss = val_loss,
                                       .comm_ms = (c->stats.busy_s - busy0) * 1000 + st.group_comm_ms,
                                       .wait_ms = st.wait_ms,
                                       .overlap_ms = st.overlap_ms};
            train_log_step(&r->log, &s);
        }
        if (train_plan_save_due(o, pl, step + 1) && save(r, step + 1, err) < 0) return -1;
    }
    return d->ops->finish ? d->ops->finish(d, err) : 0;
}

int train_run(const struct train_opts *o, const struct train_device_ops *device, skiff_err *err)
{
    struct run r;
    memset(&r, 0, sizeof r);
    int rc = setup(&r, o, device, err) == 0 && run_steps(&r, err) == 0 ? 0 : -1;
    /* the rendezvous names the rank in its own errors */
    if (rc < 0 && r.have_dist && r.dist.world > 1) skiff_err_wrap(err, "rank %d", r.dist.rank);
    run_free(&r);
    return rc;
}
