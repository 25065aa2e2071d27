/* The CPU training loop: DDP with bucketed all-reduce overlapped with the
 * backward pass, ZeRO-1/2, AdamW, gradient clipping and accumulation,
 * validation, checkpoints and logging. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "comm.h"
#include "data.h"
#include "dist.h"
#include "logger.h"
#include "model.h"
#include "policy.h"
#include "train.h"

/* ---- DDP buckets ------------------------------------------------------------
 * The backward reports gradient slices as they become final (per layer, last
 * layer first). Slices are packed in that order into buckets of bucket_mb;
 * a full bucket is copied into its staging buffer and its all-reduce starts
 * on the comm thread while the backward goes on (PyTorch DDP's idea; the
 * staging copy exists because llm.c's layout keeps one tensor of all layers
 * together, so a layer's gradients are not contiguous). The order of
 * slices is the same on every rank, so every rank builds the same buckets and
 * issues the same collectives in the same order. */

struct seg {
    size_t lo, len;   /* range of the gradient buffer */
    size_t stage_off; /* where it sits in the staging buffer */
};

struct ddp {
    struct tr_comm *comm;
    float *grads;
    float *stage; /* num_params floats: all buckets back to back */
    size_t cap;   /* bucket capacity in floats */
    size_t fill;  /* floats in the open bucket */
    size_t bucket_start;
    struct seg *segs;
    size_t nsegs, segs_cap;
    struct tr_comm_req **reqs;
    size_t nreqs, reqs_cap;
    int failed;
    skiff_err err;
};

static int push_seg(struct ddp *d, size_t lo, size_t len, size_t off)
{
    if (d->nsegs == d->segs_cap) {
        size_t nc = d->segs_cap ? 2 * d->segs_cap : 64;
        struct seg *n = realloc(d->segs, nc * sizeof *n);
        if (!n) return -1;
        d->segs = n;
        d->segs_cap = nc;
    }
    d->segs[d->nsegs++] = (struct seg){lo, len, off};
    return 0;
}

static void launch(struct ddp *d)
{
    if (d->failed || d->fill == 0) return;
    if (d->nreqs == d->reqs_cap) {
        size_t nc = d->reqs_cap ? 2 * d->reqs_cap : 16;
        struct tr_comm_req **n = realloc(d->reqs, nc * sizeof *n);
        if (!n) {
            d->failed = 1;
            skiff_error(&d->err, ENOMEM, "bucket list");
            return;
        }
        d->reqs = n;
        d->reqs_cap = nc;
    }
    if (tr_comm_start(d->comm, TR_COMM_ALLREDUCE, d->stage + d->bucket_start, d->fill, TR_F32, &d->reqs[d->nreqs],
                      &d->err) < 0) {
        d->failed = 1;
        return;
    }
    d->nreqs++;
    d->bucket_start += d->fill;
    d->fill = 0;
}

static void ddp_grad_ready(void *ctx, size_t lo, size_t hi)
{
    struct ddp *d = ctx;
    while (lo < hi && !d->failed) {
        size_t room = d->cap - d->fill, len = hi - lo < room ? hi - lo : room;
        size_t off = d->bucket_start + d->fill;
        memcpy(d->stage + off, d->grads + lo, len * sizeof(float));
        if (push_seg(d, lo, len, off) < 0) {
            d->failed = 1;
            skiff_error(&d->err, ENOMEM, "bucket segments");
            return;
        }
        d->fill += len;
        lo += len;
        if (d->fill == d->cap) launch(d);
    }
}

static void ddp_begin(struct ddp *d)
{
    d->fill = d->bucket_start = d->nsegs = d->nreqs = 0;
    d->failed = 0;
}

/* Launches the last bucket, waits for all, copies the sums back. Returns the
 * seconds spent waiting (the communication not hidden behind backward). */
static int ddp_finish(struct ddp *d, double *wait_s, skiff_err *err)
{
    launch(d);
    double t0 = skiff_now_s();
    int rc = d->failed ? -1 : 0;
    if (rc < 0) *err = d->err;
    for (size_t i = 0; i < d->nreqs; i++) {
        skiff_err e;
        if (tr_comm_wait(d->comm, d->reqs[i], &e) < 0 && rc == 0) {
            *err = e;
            rc = -1;
        }
    }
    *wait_s += skiff_now_s() - t0;
    if (rc < 0) return skiff_err_wrap(err, "gradient all-reduce");
    for (size_t i = 0; i < d->nsegs; i++)
        memcpy(d->grads + d->segs[i].lo, d->stage + d->segs[i].stage_off, d->segs[i].len * sizeof(float));
    return 0;
}

/* ---- helpers ------------------------------------------------------------- */

/* Sum of squares in fixed blocks summed in order: the same bits for any
 * thread count. */
static double sumsq(const float *g, size_t n)
{
    enum { NB = 64 };
    double part[NB];
#pragma omp parallel for
    for (int b = 0; b < NB; b++) {
        size_t lo = n * (size_t)b / NB, hi = n * (size_t)(b + 1) / NB;
        double s = 0;
        for (size_t i = lo; i < hi; i++) s += (double)g[i] * g[i];
        part[b] = s;
    }
    double s = 0;
    for (int b = 0; b < NB; b++) s += part[b];
    return s;
}

/* Mean over ranks of one value per rank, summed in rank order (the same on
 * every rank). */
static int mean_over_ranks(struct tr_comm *c, double v, double *out, skiff_err *err)
{
    float *all = calloc((size_t)c->world, sizeof(float));
    if (!all) return skiff_error(err, ENOMEM, "gather");
    all[c->rank] = (float)v;
    if (c->world > 1 && tr_all_gather(c, all, (size_t)c->world, TR_F32, err) < 0) {
        free(all);
        return -1;
    }
    double s = 0;
    for (int r = 0; r < c->world; r++) s += all[r];
    free(all);
    *out = s / c->world;
    return 0;
}

static void adamw(float *p, const float *g, float *m, float *v, const float *decay, size_t n, float lr,
                  const struct train_opts *o, int t, float gscale)
{
    float b1c = 1.0f - powf(o->beta1, (float)t), b2c = 1.0f - powf(o->beta2, (float)t);
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        float mi = o->beta1 * m[i] + (1.0f - o->beta1) * gi;
        float vi = o->beta2 * v[i] + (1.0f - o->beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mh = mi / b1c, vh = vi / b2c;
        p[i] -= lr * (mh / (sqrtf(vh) + o->eps) + o->weight_decay * decay[i] * p[i]);
    }
}

static int evaluate(struct gpt2 *m, struct data_loader *val, struct tr_comm *c, const struct train_plan *p, int nb,
                    int *in, int *tg, double *out, skiff_err *err)
{
    double s = 0;
    for (int i = 0; i < nb; i++) {
        if (data_loader_batch(val, train_plan_val_window(p, val->B, i), in, tg, err) < 0) return -1;
        s += gpt2_forward(m, in, tg);
    }
    return mean_over_ranks(c, s / nb, out, err);
}

/* ---- the loop ---------------------------------------------------------------- */

struct run {
    const struct train_opts *o;
    struct train_dist dist;
    struct tr_comm *comm;
    struct gpt2 model;
    struct data_loader train, val;
    int have_val;
    struct train_plan plan; /* padding, ZeRO shard, steps of this run */
    float *m, *v, *decay;   /* optimizer state for [opt_off, +opt_len); decay mask (n_pad) */
    float *gshard;          /* ZeRO-2: this rank's accumulated gradient shard */
    int *in, *tg;
    struct train_log log;
    struct ddp ddp;
};

static void run_free(struct run *r)
{
    gpt2_destroy(&r->model);
    data_loader_close(&r->train);
    if (r->have_val) data_loader_close(&r->val);
    free(r->m);
    free(r->v);
    free(r->decay);
    free(r->gshard);
    free(r->in);
    free(r->tg);
    free(r->ddp.stage);
    free(r->ddp.segs);
    free(r->ddp.reqs);
    train_log_close(&r->log);
    tr_comm_destroy(r->comm);
    train_dist_fini(&r->dist);
}

static int save(struct run *r, int step, skiff_err *err)
{
    struct train_ckpt c;
    train_plan_ckpt(&r->plan, r->o, step, r->model.params, r->m, r->v, &c);
    if (train_ckpt_save(r->o->ckpt_dir, &c, err) < 0) return -1;
    /* every rank's file is complete before anyone reports the step saved */
    return tr_barrier(r->comm, err);
}

static int setup(struct run *r, const struct train_opts *o, skiff_err *err)
{
    r->o = o;
    if (o->threads > 0) omp_set_num_threads(o->threads);
    if (train_dist_init(&r->dist, o->timeout_ms, err) < 0) return -1;
    if (tr_comm_tcp_create(r->dist.store, r->dist.rank, r->dist.world, r->dist.local_rank, o->timeout_ms, &r->comm,
                           err) < 0)
        return -1;
    int P = r->comm->world, rank = r->comm->rank;
    if (gpt2_create(&r->model, &o->cfg, o->batch, o->seq, err) < 0) return -1;
    size_t n = r->model.num_params;
    struct train_plan *pl = &r->plan;
    train_plan_init(pl, o, n, P, rank);
    float *p = realloc(r->model.params, pl->n_pad * sizeof(float));
    if (p) r->model.params = p;
    float *g = p ? realloc(r->model.grads, pl->n_pad * sizeof(float)) : NULL;
    if (g) r->model.grads = g;
    if (!p || !g) return skiff_error(err, ENOMEM, "parameters");
    memset(r->model.params + n, 0, (pl->n_pad - n) * sizeof(float));
    memset(r->model.grads, 0, pl->n_pad * sizeof(float));
    r->m = calloc(pl->opt_len, sizeof(float));
    r->v = calloc(pl->opt_len, sizeof(float));
    r->decay = calloc(pl->n_pad, sizeof(float));
    r->in = calloc((size_t)o->batch * o->seq, sizeof(int));
    r->tg = calloc((size_t)o->batch * o->seq, sizeof(int));
    if (o->zero == 2) r->gshard = calloc(pl->opt_len, sizeof(float));
    if (!r->m || !r->v || !r->decay || !r->in || !r->tg || (o->zero == 2 && !r->gshard))
        return skiff_error(err, ENOMEM, "optimizer state");
    gpt2_decay_mask(&o->cfg, r->decay);
    if (data_loader_open(&r->train, o->data, o->batch, o->seq, o->cfg.vocab_size, o->seed, !o->sequential, err) < 0)
        return skiff_err_wrap(err, "--data");
    if (o->val) {
        if (data_loader_open(&r->val, o->val, o->batch, o->seq, o->cfg.vocab_size, o->seed, 0, err) < 0)
            return skiff_err_wrap(err, "--val");
        r->have_val = 1;
    }
    if (o->zero == 0 && P > 1) {
        r->ddp.comm = r->comm;
        r->ddp.grads = r->model.grads;
        r->ddp.cap = (size_t)(o->bucket_mb * 1024 * 1024 / sizeof(float));
        if (r->ddp.cap < 1) r->ddp.cap = 1;
        r->ddp.stage = malloc(pl->n_pad * sizeof(float));
        if (!r->ddp.stage) return skiff_error(err, ENOMEM, "bucket staging");
    }

    if (train_init_params(o, rank, r->model.params, err) < 0) return -1;
    if (o->resume) {
        if (train_resume_load(pl, o, r->model.params, r->m, r->v, err) < 0) return -1;
        if (train_resume_shares_opt(pl, o) && (tr_broadcast(r->comm, r->m, pl->n_pad * sizeof(float), 0, err) < 0 ||
                                               tr_broadcast(r->comm, r->v, pl->n_pad * sizeof(float), 0, err) < 0))
            return skiff_err_wrap(err, "sharing optimizer state");
        double mean;
        if (mean_over_ranks(r->comm, pl->start, &mean, err) < 0 || train_resume_agree(pl, o, mean, err) < 0) return -1;
    }
    /* one source of truth for the weights: rank 0 */
    if (tr_broadcast(r->comm, r->model.params, pl->n_pad * sizeof(float), 0, err) < 0)
        return skiff_err_wrap(err, "broadcasting parameters from rank 0");
    if (rank == 0 && train_log_open(&r->log, o->log_path, o->resume, o->quiet, err) < 0) return -1;
    if (rank == 0 && !o->quiet)
        printf("skiff-train: model %s (%zu params, L%d H%d C%d T%d V%d), world %d, batch %d x %d "
               "x accum %d x world = %zu tokens/step, zero %d, %d threads, %zu train windows%s\n",
               o->model, n, o->cfg.num_layers, o->cfg.num_heads, o->cfg.channels, o->seq, o->cfg.vocab_size, P,
               o->batch, o->seq, o->grad_accum, (size_t)o->batch * o->seq * o->grad_accum * P, o->zero,
               omp_get_max_threads(), r->train.num_windows, o->resume ? ", resumed" : "");
    return 0;
}

int train_cpu(const struct train_opts *o, skiff_err *err)
{
    struct run r;
    memset(&r, 0, sizeof r);
    int rc = -1;
    if (setup(&r, o, err) < 0) goto out;
    struct tr_comm *c = r.comm;
    int P = c->world, K = o->grad_accum;
    uint64_t G = (uint64_t)o->batch * (uint64_t)K * (uint64_t)P;
    const struct train_plan *pl = &r.plan;
    for (int step = pl->start; step < pl->end; step++) {
        double t0 = skiff_now_s(), wait_s = 0, overlap_s = 0, busy0 = c->stats.busy_s;
        float lr = train_lr(o, step);
        gpt2_zero_grad(&r.model);
        if (o->zero == 2) memset(r.gshard, 0, pl->opt_len * sizeof(float));
        double loss_sum = 0;
        for (int k = 0; k < K; k++) {
            if (data_loader_batch(&r.train, train_plan_window(pl, o, step, k), r.in, r.tg, err) < 0) goto out;
            loss_sum += gpt2_forward(&r.model, r.in, r.tg);
            int last = k == K - 1;
            /* no_sync: only the last micro-step's backward talks to peers */
            if (o->zero == 0 && P > 1 && last) {
                ddp_begin(&r.ddp);
                r.model.grad_ready = ddp_grad_ready;
                r.model.grad_ready_ctx = &r.ddp;
            } else {
                r.model.grad_ready = NULL;
            }
            double busy_b0 = c->stats.busy_s;
            gpt2_backward(&r.model, 1.0f / (float)(K * P));
            if (r.model.grad_ready) overlap_s += c->stats.busy_s - busy_b0;
            r.model.grad_ready = NULL;
            if (o->zero == 0 && P > 1 && last && ddp_finish(&r.ddp, &wait_s, err) < 0) goto out;
            if (o->zero == 2) {
                /* ZeRO-2: reduce-scatter every micro-step and keep only our
                 * shard, so no rank holds a full accumulated gradient */
                double w0 = skiff_now_s();
                if (tr_reduce_scatter(c, r.model.grads, pl->n_pad, TR_F32, err) < 0) goto out;
                wait_s += skiff_now_s() - w0;
                const float *g = r.model.grads + pl->opt_off;
                for (size_t i = 0; i < pl->opt_len; i++) r.gshard[i] += g[i];
                if (!last) gpt2_zero_grad(&r.model);
            }
        }
        const float *gopt; /* gradient of [opt_off, +opt_len) */
        double norm2;
        if (o->zero == 0) {
            gopt = r.model.grads;
            norm2 = sumsq(gopt, pl->n_pad);
        } else {
            if (o->zero == 1) {
                double w0 = skiff_now_s();
                if (tr_reduce_scatter(c, r.model.grads, pl->n_pad, TR_F32, err) < 0) goto out;
                wait_s += skiff_now_s() - w0;
                gopt = r.model.grads + pl->opt_off;
            } else {
                gopt = r.gshard;
            }
            /* norm^2 = sum over ranks of each shard's sum of squares */
            double mean, ss = sumsq(gopt, pl->opt_len), w0 = skiff_now_s();
            if (mean_over_ranks(c, ss, &mean, err) < 0) goto out;
            wait_s += skiff_now_s() - w0;
            norm2 = mean * P;
        }
        float norm = (float)sqrt(norm2);
        float gscale = train_clip_scale(o, norm);
        adamw(r.model.params + pl->opt_off, gopt, r.m, r.v, r.decay + pl->opt_off, pl->opt_len, lr, o, step + 1,
              gscale);
        if (o->zero) {
            double w0 = skiff_now_s();
            if (tr_all_gather(c, r.model.params, pl->n_pad, TR_F32, err) < 0) goto out;
            wait_s += skiff_now_s() - w0;
        }
        double loss, w1 = skiff_now_s();
        if (mean_over_ranks(c, loss_sum / K, &loss, err) < 0) goto out;
        wait_s += skiff_now_s() - w1; /* so wait_ms and comm_ms cover the same collectives */
        double val_loss = NAN;
        if (r.have_val && train_plan_val_due(o, step) &&
            evaluate(&r.model, &r.val, c, pl, o->val_batches, r.in, r.tg, &val_loss, err) < 0)
            goto out;
        double dt = skiff_now_s() - t0;
        if (c->rank == 0) {
            struct train_step_log s = {.step = step + 1,
                                       .loss = loss,
                                       .lr = lr,
                                       .grad_norm = norm,
                                       .tokens_per_s = (double)G * o->seq / dt,
                                       .ms = dt * 1000,
                                       .val_loss = val_loss,
                                       .comm_ms = (c->stats.busy_s - busy0) * 1000,
                                       .wait_ms = wait_s * 1000,
                                       .overlap_ms = overlap_s * 1000};
            train_log_step(&r.log, &s);
        }
        int done = step + 1;
        if (train_plan_save_due(o, pl, done) && save(&r, done, err) < 0) goto out;
    }
    rc = 0;
out:
    if (rc < 0 && r.comm && r.comm->world > 1) skiff_err_wrap(err, "rank %d", r.comm->rank);
    run_free(&r);
    return rc;
}
