/* The CPU device of the training loop (device.h): the model of model.c in
 * host memory, DDP with bucketed all-reduce overlapped with the backward
 * pass, ZeRO-1/2, Megatron-style tensor parallelism (--tp), gradient
 * accumulation, clipping and AdamW, over the TCP ring (comm.c). OpenMP
 * threads inside each operation. */
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "device.h"
#include "model.h"
#include "pipeline.h"

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

/* ---- ZeRO-3 (FSDP) ---------------------------------------------------------
 * Each rank keeps only its shard of the weights (policy.h: a piece of every
 * unit of model.h: the tensors outside the blocks, then each block), of
 * their accumulated gradient and of AdamW's state. The model asks for a
 * unit's weights just before it uses them (gpt2_units): an all-gather into
 * a unit-sized buffer, released after the block. While block l computes,
 * the all-gather of the next block (l+1 in the forward, l-1 in the
 * backward) already runs on the comm thread (prefetch, FSDP's
 * forward/backward_prefetch). A block's gradient goes into its own buffer;
 * when the block's backward ends its reduce-scatter starts at once and
 * runs while the next block's backward computes (two gradient buffers
 * alternate); the rank adds its piece of the sum to its gradient shard
 * when the buffer is needed again or at the end of the backward. Unit 0
 * (wte, wpe, the final LayerNorm) is the root: gathered once per change of
 * the weights and kept, as FSDP keeps its root unit, since the tied wte is
 * used at both ends of every pass. Every rank makes the same calls in the
 * same order (the model's), so the collectives match on the ring. */

struct z3_slot {
    int unit; /* -1: free */
    float *buf;
    struct tr_comm_req *req; /* the gather or reduce-scatter in flight */
};

struct z3_seg {
    size_t off, len; /* in the shard */
    int split;       /* of a tensor split over the tensor-parallel ranks */
};

struct zero3 {
    struct tr_comm *comm;
    int world, rank, L;
    size_t *len, *off;     /* per unit: padded length, this rank's piece in the shard */
    float *shard, *gshard; /* weights and accumulated gradient, opt_len each */
    struct z3_slot root, root_grad;
    int root_valid; /* root.buf holds the current weights */
    struct z3_slot p[2], g[2];
    int nbuf;   /* --zero3-buffers: 2 prefetches and overlaps, 1 does neither */
    int g_turn; /* the gradient buffer the next block gets */
    double wait_s;
    int failed;
    skiff_err err;
    struct gpt2_units units;
};

static void z3_fail(struct zero3 *z, const skiff_err *e)
{
    if (!z->failed) z->err = *e;
    z->failed = 1;
}

static void z3_start(struct zero3 *z, struct z3_slot *s, int op)
{
    s->req = NULL;
    if (z->failed) return;
    skiff_err e;
    if (tr_comm_start(z->comm, op, s->buf, z->len[s->unit], TR_F32, &s->req, &e) < 0) {
        s->req = NULL;
        z3_fail(z, &e);
    }
}

static void z3_wait(struct zero3 *z, struct z3_slot *s)
{
    if (!s->req) return;
    double t0 = skiff_now_s();
    skiff_err e;
    if (tr_comm_wait(z->comm, s->req, &e) < 0) z3_fail(z, &e);
    s->req = NULL;
    z->wait_s += skiff_now_s() - t0;
}

/* Puts this rank's piece of unit u into s and starts the all-gather. */
static void z3_gather_into(struct zero3 *z, struct z3_slot *s, int u)
{
    size_t plen = z->len[u] / (size_t)z->world;
    s->unit = u;
    memcpy(s->buf + (size_t)z->rank * plen, z->shard + z->off[u], plen * sizeof(float));
    z3_start(z, s, TR_COMM_ALL_GATHER);
}

static struct z3_slot *z3_find(struct zero3 *z, int u)
{
    for (int i = 0; i < z->nbuf; i++)
        if (z->p[i].unit == u) return &z->p[i];
    return NULL;
}

static float *z3_gather(void *ctx, int u, int backward)
{
    struct zero3 *z = ctx;
    struct z3_slot *s;
    if (u == 0) {
        s = &z->root;
        if (!z->root_valid) {
            z3_gather_into(z, s, 0);
            z->root_valid = 1;
        }
    } else if (!(s = z3_find(z, u))) {
        /* not prefetched: the other slot holds a prefetch we do not need */
        for (int i = 0; i < z->nbuf; i++) {
            z3_wait(z, &z->p[i]);
            z->p[i].unit = -1;
        }
        s = &z->p[0];
        z3_gather_into(z, s, u);
    }
    z3_wait(z, s);
    int next = backward ? (u == 0 ? z->L : u - 1) : u + 1;
    if (z->nbuf == 2 && next >= 1 && next <= z->L && !z3_find(z, next)) {
        struct z3_slot *f = z->p[0].unit == -1 ? &z->p[0] : z->p[1].unit == -1 ? &z->p[1] : NULL;
        if (f) z3_gather_into(z, f, next);
    }
    return s->buf;
}

static void z3_release(void *ctx, int u)
{
    struct zero3 *z = ctx;
    struct z3_slot *s = u ? z3_find(z, u) : NULL; /* the root stays */
    if (s) s->unit = -1;
}

/* Waits for s's reduce-scatter and adds this rank's piece of the sum to
 * the gradient shard. */
static void z3_reduced(struct zero3 *z, struct z3_slot *s)
{
    if (s->unit < 0) return;
    z3_wait(z, s);
    size_t plen = z->len[s->unit] / (size_t)z->world;
    const float *piece = s->buf + (size_t)z->rank * plen;
    float *g = z->gshard + z->off[s->unit];
    for (size_t i = 0; i < plen; i++) g[i] += piece[i];
    s->unit = -1;
}

static float *z3_grad(void *ctx, int u)
{
    struct zero3 *z = ctx;
    struct z3_slot *s = u ? &z->g[z->g_turn] : &z->root_grad;
    if (u) z->g_turn = (z->g_turn + 1) % z->nbuf;
    z3_reduced(z, s); /* the oldest buffer: its reduce-scatter ran during the last block */
    s->unit = u;
    return s->buf;
}

static void z3_grad_done(void *ctx, int u)
{
    struct zero3 *z = ctx;
    struct z3_slot *s = !u ? &z->root_grad : z->g[0].unit == u ? &z->g[0] : &z->g[1];
    z3_start(z, s, TR_COMM_REDUCE_SCATTER);
}

/* After a backward: every reduce-scatter in, every prefetch done. */
static void z3_drain(struct zero3 *z)
{
    z3_reduced(z, &z->g[0]);
    z3_reduced(z, &z->g[1]);
    z3_reduced(z, &z->root_grad);
    for (int i = 0; i < z->nbuf; i++) {
        z3_wait(z, &z->p[i]);
        z->p[i].unit = -1;
    }
}

static int z3_open(struct zero3 *z, struct tr_comm *c, const struct gpt2_config *cfg, int tp, size_t opt_len, int nbuf,
                   skiff_err *err)
{
    z->comm = c;
    z->nbuf = nbuf;
    z->world = c->world;
    z->rank = c->rank;
    z->L = cfg->num_layers;
    int U = gpt2_num_units(cfg);
    z->len = calloc((size_t)U, sizeof *z->len);
    z->off = calloc((size_t)U, sizeof *z->off);
    z->shard = calloc(opt_len, sizeof(float));
    z->gshard = calloc(opt_len, sizeof(float));
    if (!z->len || !z->off || !z->shard || !z->gshard) return skiff_error(err, ENOMEM, "ZeRO-3 shards");
    for (int u = 0; u < U; u++) z->len[u] = train_zero3_unit(cfg, tp, z->world, z->rank, u, &z->off[u]);
    struct z3_slot *all[] = {&z->root, &z->root_grad, &z->p[0], &z->p[1], &z->g[0], &z->g[1]};
    for (int i = 0; i < 6; i++) {
        all[i]->unit = -1;
        if (nbuf == 1 && (all[i] == &z->p[1] || all[i] == &z->g[1])) continue;
        all[i]->buf = calloc(z->len[i < 2 ? 0 : 1], sizeof(float)); /* blocks are all the same size */
        if (!all[i]->buf) return skiff_error(err, ENOMEM, "ZeRO-3 unit buffers");
    }
    z->units = (struct gpt2_units){z, z3_gather, z3_release, z3_grad, z3_grad_done};
    return 0;
}

static void z3_close(struct zero3 *z)
{
    struct z3_slot *all[] = {&z->root, &z->root_grad, &z->p[0], &z->p[1], &z->g[0], &z->g[1]};
    for (int i = 0; i < 6; i++) {
        z3_wait(z, all[i]);
        free(all[i]->buf);
    }
    free(z->len);
    free(z->off);
    free(z->shard);
    free(z->gshard);
}

/* Floats of the gathered buffers (each of parameters and gradients). */
static size_t z3_gathered(const struct zero3 *z) { return z->len ? z->len[0] + (size_t)z->nbuf * z->len[1] : 0; }

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

/* ---- the device ------------------------------------------------------------- */

struct cpu_device {
    const struct train_opts *o;
    const struct train_plan *plan; /* padding, ZeRO shard */
    struct gpt2 model;             /* with --tp: this rank's heads and hidden units */
    /* --tp: the tensor-parallel group (the model's all-reduces), the whole
     * weights on the host for the loop (n_pad, apart from model.params),
     * and the first failure of an all-reduce inside a pass */
    struct tr_comm *tp_comm;
    float *full;
    /* --pp: a stage holds its ranges only (pipeline.h); the loop's whole
     * host copies (full, and with ZeRO 0 host_m, host_v: opt_len floats)
     * exist from open to upload and from download to the next step */
    float *host_m, *host_v;
    double tp_wait_s;
    int tp_failed;
    skiff_err tp_err;
    float *m, *v, *decay; /* optimizer state and weight-decay mask for [opt_off, +opt_len) */
    float *gshard;        /* ZeRO-2: this rank's accumulated gradient shard */
    struct ddp ddp;
    struct tr_pipeline *pipe; /* --pp: this rank's stage */
    struct zero3 z3;
    struct z3_seg *z3_segs; /* ZeRO-3 --tp: the shard cut where split and replicated tensors meet */
    int z3_nsegs;
    double loss_sum; /* forward: losses since take_loss */
};

/* ZeRO-3 under --tp: this rank's piece of every unit of its part, cut where
 * its tensors meet, each piece marked split (over the tensor-parallel
 * ranks) or replicated, for the gradient norm. */
static int z3_tp_segments(struct cpu_device *c, skiff_err *err)
{
    const struct train_plan *pl = c->plan;
    const struct gpt2_config *cfg = &c->o->cfg;
    int U = gpt2_num_units(cfg), n = 0;
    c->z3_segs = calloc((size_t)U * GPT2_UNIT_MAX_SLICES, sizeof *c->z3_segs);
    if (!c->z3_segs) return skiff_error(err, ENOMEM, "ZeRO-3 shard pieces");
    struct gpt2_slice sl[GPT2_UNIT_MAX_SLICES];
    for (int u = 0; u < U; u++) {
        size_t total, uo = 0, plen = c->z3.len[u] / (size_t)pl->world, a = (size_t)pl->rank * plen, b = a + plen;
        int k = gpt2_unit_slices_tp(cfg, pl->tp, u, sl, &total);
        for (int i = 0; i < k; uo += sl[i].len, i++) {
            size_t lo = uo > a ? uo : a, hi = uo + sl[i].len < b ? uo + sl[i].len : b;
            if (lo < hi)
                c->z3_segs[n++] = (struct z3_seg){c->z3.off[u] + (lo - a), hi - lo, gpt2_tp_sharded(sl[i].tensor)};
        }
    }
    c->z3_nsegs = n;
    return 0;
}

static int cpu_open_zero3(struct train_device *d, struct cpu_device *c, skiff_err *err)
{
    const struct train_plan *pl = c->plan;
    const struct gpt2_config *cfg = &c->o->cfg;
    if (z3_open(&c->z3, d->comm, cfg, pl->tp, pl->opt_len, c->o->zero3_buffers, err) < 0) return -1;
    gpt2_use_units(&c->model, &c->z3.units);
    c->m = calloc(pl->opt_len, sizeof(float));
    c->v = calloc(pl->opt_len, sizeof(float));
    c->decay = calloc(pl->opt_len, sizeof(float));
    float *mask = calloc(gpt2_param_layout_tp(cfg, pl->tp, NULL, NULL), sizeof(float));
    if (!c->m || !c->v || !c->decay || !mask) {
        free(mask);
        return skiff_error(err, ENOMEM, "optimizer state");
    }
    gpt2_decay_mask_tp(cfg, pl->tp, mask);
    train_zero3_copy(cfg, pl->tp, pl->world, pl->rank, mask, c->decay, 0);
    free(mask);
    if (pl->tp > 1 && z3_tp_segments(c, err) < 0) return -1;
    d->params = c->z3.shard;
    d->m = c->m;
    d->v = c->v;
    return 0;
}

static int tp_check(struct cpu_device *c, skiff_err *err);
static int tp_total(struct cpu_device *c, double *v, skiff_err *err);

/* Sum of squares of the ZeRO-3 gradient shard g (n floats). With --tp, the
 * replicated tensors' floats count 1/tp, as tp_sumsq counts them, so the
 * sum over the tensor-parallel group is the part's once (the shard's
 * padding is zero). */
static double z3_sumsq(const struct cpu_device *c, const float *g, size_t n)
{
    if (!c->z3_segs) return sumsq(g, n);
    double sharded = 0, replicated = 0;
    for (int i = 0; i < c->z3_nsegs; i++) {
        double x = sumsq(g + c->z3_segs[i].off, c->z3_segs[i].len);
        if (c->z3_segs[i].split)
            sharded += x;
        else
            replicated += x;
    }
    return sharded + replicated / c->model.tp;
}

/* ZeRO-3's step: forward and backward gather and reduce-scatter unit by
 * unit (the hooks above); what is left is the norm and AdamW on the shard. */
static int cpu_step_zero3(struct train_device *d, int step, float lr, struct train_batches *b,
                          struct train_step_stats *st, skiff_err *err)
{
    struct cpu_device *cd = d->impl;
    const struct train_opts *o = cd->o;
    const struct train_plan *pl = cd->plan;
    struct zero3 *z = &cd->z3;
    struct tr_comm *c = d->comm;
    int P = c->world, K = b->count;
    double loss_sum = 0, busy0 = c->stats.busy_s, tp_busy0 = cd->tp_comm ? cd->tp_comm->stats.busy_s : 0;
    z->wait_s = 0;
    cd->tp_wait_s = 0;
    memset(z->gshard, 0, pl->opt_len * sizeof(float));
    for (int k = 0; k < K; k++) {
        if (b->load(b, k, err) < 0) return -1;
        loss_sum += gpt2_forward(&cd->model, b->inputs, b->targets);
        gpt2_backward(&cd->model, 1.0f / (float)(K * P));
        z3_drain(z);
        if (z->failed) {
            *err = z->err;
            return skiff_err_wrap(err, "ZeRO-3 gather/reduce-scatter");
        }
    }
    if (tp_check(cd, err) < 0) return -1;
    /* communication not waited for ran behind the forward and backward */
    double overlap_s = c->stats.busy_s - busy0 - z->wait_s, wait_s = z->wait_s;
    double mean, ss = z3_sumsq(cd, z->gshard, pl->opt_len), w0 = skiff_now_s();
    if (pl->tp > 1 && tp_total(cd, &ss, err) < 0) return -1;
    if (train_device_mean(d, ss, &mean, err) < 0) return -1;
    float norm = (float)sqrt(mean * P);
    adamw(z->shard, z->gshard, cd->m, cd->v, cd->decay, pl->opt_len, lr, o, step + 1 - (int)d->amp.skipped,
          train_clip_scale(o, norm));
    z->root_valid = 0; /* the weights changed */
    if (train_device_mean(d, loss_sum / K, &st->loss, err) < 0) return -1;
    wait_s += skiff_now_s() - w0;
    st->grad_norm = norm;
    st->wait_ms = (wait_s + cd->tp_wait_s) * 1000;
    st->overlap_ms = overlap_s > 0 ? overlap_s * 1000 : 0;
    if (cd->tp_comm) st->group_comm_ms = (cd->tp_comm->stats.busy_s - tp_busy0) * 1000;
    return 0;
}

/* ---- tensor parallel ----------------------------------------------------
 * Megatron's layout over WORLD_SIZE = dp x tp x pp processes, tensor
 * parallel fastest (policy.h, train_layout_rank): process r is
 * tensor-parallel rank r % tp of data-parallel rank r / tp % dp of stage
 * r / (tp*dp). Its tensor-parallel group is the tp neighbours of its stage
 * and data-parallel rank (the model's all-reduces, every layer, so they sit
 * on one node where they can). d->comm, the group the loop broadcasts and
 * averages over, is the ranks with its tensor-parallel rank: without --pp
 * its data-parallel group (the gradients, once a step); with --pp those of
 * every stage (rank 0's weights reach every stage through it, and the
 * last stage's loss is averaged over it), the pipeline making its
 * data-parallel and stage groups itself (pipeline.c). */
static int tp_groups(struct train_device *d, struct cpu_device *c, struct train_dist *dist, skiff_err *err)
{
    const struct train_plan *pl = c->plan;
    int tp = pl->tp, dp = pl->world, pp = pl->pp, *m = malloc((size_t)(tp > dp * pp ? tp : dp * pp) * sizeof *m);
    if (!m) return skiff_error(err, ENOMEM, "process groups");
    char name[64];
    for (int i = 0; i < tp; i++) m[i] = train_layout_rank(tp, dp, pl->pp_rank, pl->rank, i);
    snprintf(name, sizeof name, "tp/%d", pl->pp_rank * dp + pl->rank);
    int rc = tr_comm_tcp_create_group(dist->store, name, m, tp, pl->tp_rank, dist->local_rank, c->o->timeout_ms,
                                      &c->tp_comm, err);
    if (rc == 0) {
        for (int s = 0; s < pp; s++)
            for (int i = 0; i < dp; i++) m[s * dp + i] = train_layout_rank(tp, dp, s, i, pl->tp_rank);
        snprintf(name, sizeof name, "dp/%d", pl->tp_rank);
        rc = tr_comm_tcp_create_group(dist->store, name, m, dp * pp, pl->pp_rank * dp + pl->rank, dist->local_rank,
                                      c->o->timeout_ms, &d->comm, err);
    }
    free(m);
    return rc < 0 ? skiff_err_wrap(err, "tensor-parallel process groups (--tp %d)", tp) : 0;
}

/* The model's all-reduce (gpt2.tp_allreduce): synchronous, as each layer
 * needs the sum before it goes on. After a failure the rest of the pass
 * skips its all-reduces; the step reports the first error. */
static int tp_allreduce(void *ctx, float *buf, size_t n)
{
    struct cpu_device *c = ctx;
    if (c->tp_failed) return -1;
    double t0 = skiff_now_s();
    if (tr_allreduce_sum(c->tp_comm, buf, n, TR_F32, &c->tp_err) < 0) c->tp_failed = 1;
    c->tp_wait_s += skiff_now_s() - t0;
    return c->tp_failed ? -1 : 0;
}

static int tp_check(struct cpu_device *c, skiff_err *err)
{
    if (!c->tp_failed) return 0;
    *err = c->tp_err;
    return skiff_err_wrap(err, "tensor-parallel all-reduce");
}

/* Sum of squares of g, the gradient of [lo, lo+n) of the device's buffer.
 * With --tp, the replicated tensors' part counts 1/tp (every tensor-parallel
 * rank holds the same values), so the sum over the group (tp_total) is the
 * whole model's. */
static double tp_sumsq(const struct cpu_device *c, const float *g, size_t lo, size_t n)
{
    const struct gpt2 *m = &c->model;
    if (m->tp == 1) return sumsq(g, n);
    double sharded = 0, replicated = 0;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        size_t a = m->param_offsets[i], b = a + m->param_sizes[i];
        if (a < lo) a = lo;
        if (b > lo + n) b = lo + n;
        if (a >= b) continue;
        double s = sumsq(g + (a - lo), b - a);
        if (gpt2_tp_sharded(i))
            sharded += s;
        else
            replicated += s;
    }
    return sharded + replicated / m->tp;
}

/* *v summed over the tensor-parallel group (as a float, the wire type: the
 * same bits on every rank of the group, so they clip alike). */
static int tp_total(struct cpu_device *c, double *v, skiff_err *err)
{
    float x = (float)*v;
    double t0 = skiff_now_s();
    int rc = tr_allreduce_sum(c->tp_comm, &x, 1, TR_F32, err);
    c->tp_wait_s += skiff_now_s() - t0;
    if (rc < 0) return skiff_err_wrap(err, "tensor-parallel gradient norm");
    *v = x;
    return 0;
}

static int cpu_open(struct train_device *d, const struct train_opts *o, const struct train_plan *pl,
                    struct train_dist *dist, skiff_err *err)
{
    struct cpu_device *c = calloc(1, sizeof *c);
    if (!c) return skiff_error(err, ENOMEM, "CPU device");
    d->impl = c;
    d->host_memory = 1;
    c->o = o;
    c->plan = pl;
    if (o->threads > 0) omp_set_num_threads(o->threads);
    /* Large buffers from mmap, always: glibc raises its mmap threshold to
     * the size of any mmapped block freed (a pipeline stage frees the whole
     * model's parameters and gradients for its own), after which buffers
     * below it come from the heap, where calloc clears them page by page:
     * AdamW's state and the loop's host copies would then be resident from
     * the start instead of when first written. */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    if (pl->tp == 1) { /* every rank (with --pp: every stage, every data-parallel rank) */
        if (tr_comm_tcp_create(dist->store, dist->rank, dist->world, dist->local_rank, o->timeout_ms, &d->comm, err) <
            0)
            return -1;
    } else if (tp_groups(d, c, dist, err) < 0) {
        return -1;
    }
    if (gpt2_create_tp(&c->model, &o->cfg, pl->tp, o->batch, o->seq, err) < 0) return -1;
    c->model.tp_allreduce = tp_allreduce;
    c->model.tp_ctx = c;
    if (o->recompute && gpt2_recompute(&c->model, err) < 0) return -1;
    /* (ZeRO-3 under --pp: the pipeline keeps the stage's shards, pipeline.c) */
    if (o->zero == 3 && o->pp == 1) return cpu_open_zero3(d, c, err);
    /* --pp: the model holds the stage's ranges (gpt2_set_stage), and
     * AdamW's state follows it with ZeRO 0 */
    if (o->pp > 1 && tr_pipeline_open(&c->pipe, &c->model, o, pl, dist, err) < 0) return -1;
    int held = c->pipe && !o->zero;
    size_t n = c->model.num_params, nopt = held ? tr_pipeline_num_held(c->pipe) : pl->opt_len;
    if (!c->pipe) {
        float *p = realloc(c->model.params, pl->n_dev * sizeof(float));
        if (p) c->model.params = p;
        float *g = p ? realloc(c->model.grads, pl->n_dev * sizeof(float)) : NULL;
        if (g) c->model.grads = g;
        if (!p || !g) return skiff_error(err, ENOMEM, "parameters");
        memset(c->model.params + n, 0, (pl->n_dev - n) * sizeof(float));
        memset(c->model.grads, 0, pl->n_dev * sizeof(float));
    }
    /* (ZeRO-3 under --pp: no whole copy; the weights are the shards) */
    if ((pl->tp > 1 || c->pipe) && o->zero != 3 && !(c->full = calloc(pl->n_pad, sizeof(float))))
        return skiff_error(err, ENOMEM, "host copy of the parameters");
    if (held &&
        (!(c->host_m = calloc(pl->opt_len, sizeof(float))) || !(c->host_v = calloc(pl->opt_len, sizeof(float)))))
        return skiff_error(err, ENOMEM, "host copy of the optimizer state");
    c->m = calloc(nopt, sizeof(float));
    c->v = calloc(nopt, sizeof(float));
    c->decay = calloc(nopt, sizeof(float));
    int z2 = o->zero == 2 && o->pp == 1; /* (the pipeline keeps its own) */
    if (z2) c->gshard = calloc(pl->opt_len, sizeof(float));
    if (!c->m || !c->v || !c->decay || (z2 && !c->gshard)) return skiff_error(err, ENOMEM, "optimizer state");
    /* the mask of the optimizer's range only (ZeRO: 1/world of it; with
     * --pp of the stage's ranges) */
    float *mask = calloc(pl->n_dev, sizeof(float));
    if (!mask) return skiff_error(err, ENOMEM, "weight-decay mask");
    gpt2_decay_mask_tp(&o->cfg, pl->tp, mask);
    if (o->zero && o->pp > 1)
        train_pp_shard_copy(&o->cfg, pl->tp, pl->pp, pl->pp_rank, pl->world, pl->rank, mask, c->decay, 0);
    else if (held)
        tr_pipeline_take(c->pipe, mask, c->decay);
    else
        memcpy(c->decay, mask + pl->opt_off, pl->opt_len * sizeof(float));
    free(mask);
    if (o->zero == 0 && pl->world > 1 && !c->pipe) {
        c->ddp.comm = d->comm;
        c->ddp.grads = c->model.grads;
        c->ddp.cap = (size_t)(o->bucket_mb * 1024 * 1024 / sizeof(float));
        if (c->ddp.cap < 1) c->ddp.cap = 1;
        c->ddp.stage = malloc(pl->n_dev * sizeof(float));
        if (!c->ddp.stage) return skiff_error(err, ENOMEM, "bucket staging");
    }
    d->params = o->zero == 3 ? tr_pipeline_param_shard(c->pipe) : c->full ? c->full : c->model.params;
    d->m = held ? c->host_m : c->m;
    d->v = held ? c->host_v : c->v;
    return 0;
}

static void cpu_close(struct train_device *d)
{
    struct cpu_device *c = d->impl;
    if (c) {
        tr_pipeline_close(c->pipe); /* before the model: it hands back the model's activations */
        gpt2_destroy(&c->model);
        free(c->m);
        free(c->v);
        free(c->decay);
        free(c->gshard);
        free(c->ddp.stage);
        free(c->ddp.segs);
        free(c->ddp.reqs);
        z3_close(&c->z3);
        free(c->full);
        free(c->host_m);
        free(c->host_v);
        free(c->z3_segs);
        tr_comm_destroy(c->tp_comm);
        free(c);
    }
    tr_comm_destroy(d->comm);
}

/* --pp: the loop's whole host copies go once the stage has taken its
 * ranges (upload), and after a checkpoint (the next step), so a stage
 * holds the whole model only around those two. */
static void drop_host(struct train_device *d)
{
    struct cpu_device *c = d->impl;
    if (!c->pipe || c->o->zero == 3) return; /* (ZeRO-3: d->params is the shard, the only copy) */
    free(c->full);
    free(c->host_m);
    free(c->host_v);
    c->full = c->host_m = c->host_v = NULL;
    d->params = NULL;
    if (!c->o->zero) d->m = d->v = NULL; /* (ZeRO: m and v are the shards themselves) */
}

/* --pp: the stage's share of one step: the schedule and the reductions
 * (pipeline.c), then the norm over every stage and AdamW over the stage's
 * ranges (ZeRO: over this rank's shard of them, then the all-gather).
 * The norm counts each range once: wte on the first stage only, and with
 * --tp the replicated tensors 1/tp on each tensor-parallel rank. */
static int pipe_step(struct train_device *d, int step, float lr, struct train_batches *b, struct train_step_stats *st,
                     skiff_err *err)
{
    struct cpu_device *cd = d->impl;
    struct gpt2 *model = &cd->model;
    struct tr_pipeline *pipe = cd->pipe;
    const struct train_plan *pl = cd->plan;
    int zero = cd->o->zero, nr;
    double loss_sum, comm_s, sharded = 0, replicated = 0, norm2, busy0 = tr_pipeline_busy(pipe);
    double tp_busy0 = cd->tp_comm ? cd->tp_comm->stats.busy_s : 0;
    cd->tp_wait_s = 0;
    drop_host(d); /* a checkpoint's whole copies, if one was saved */
    if (tr_pipeline_grads(pipe, b, &loss_sum, &comm_s, err) < 0 || tp_check(cd, err) < 0) return -1;
    const struct train_range *r = zero ? tr_pipeline_shard_ranges(pipe, &nr) : tr_pipeline_ranges(pipe, &nr);
    float *g = zero ? tr_pipeline_grad_shard(pipe) : model->grads;
    /* ZeRO 0: range i in the stage's held layout (gpt2_set_stage), for its
     * weights, gradient and AdamW state alike */
    size_t go[TRAIN_STAGE_MAX_RANGES];
    for (int i = 0; i < nr; i++) go[i] = zero ? r[i].off : model->held_offsets[r[i].tensor];
    for (int i = 0; i < nr; i++) {
        if (!r[i].norm) continue;
        double s = sumsq(g + go[i], r[i].len);
        if (pl->tp > 1 && !gpt2_tp_sharded(r[i].tensor))
            replicated += s;
        else
            sharded += s;
    }
    double ss = sharded + replicated / pl->tp, w0 = skiff_now_s();
    if ((zero && tr_pipeline_dp_sum(pipe, &ss, err) < 0) || (pl->tp > 1 && tp_total(cd, &ss, err) < 0) ||
        tr_pipeline_sum(pipe, ss, &norm2, err) < 0)
        return -1;
    float norm = (float)sqrt(norm2);
    float gscale = train_clip_scale(cd->o, norm);
    int t = step + 1 - (int)d->amp.skipped;
    if (zero) {
        adamw(tr_pipeline_param_shard(pipe), g, cd->m, cd->v, cd->decay, pl->opt_len, lr, cd->o, t, gscale);
        if (tr_pipeline_share_params(pipe, err) < 0) return -1;
    } else {
        for (int i = 0; i < nr; i++)
            adamw(model->params + go[i], g + go[i], cd->m + go[i], cd->v + go[i], cd->decay + go[i], r[i].len, lr,
                  cd->o, t, gscale);
    }
    /* only the last stage has the loss */
    if (train_device_mean(d, tr_pipeline_loss_share(pipe, loss_sum / b->count), &st->loss, err) < 0) return -1;
    /* the stages' and the tensor-parallel groups, beside the loop's counter */
    st->group_comm_ms = (tr_pipeline_busy(pipe) - busy0) * 1000;
    if (cd->tp_comm) st->group_comm_ms += (cd->tp_comm->stats.busy_s - tp_busy0) * 1000;
    st->grad_norm = norm;
    st->wait_ms = (comm_s + skiff_now_s() - w0 + cd->tp_wait_s) * 1000;
    return 0;
}

static int cpu_step(struct train_device *d, int step, float lr, struct train_batches *b, struct train_step_stats *st,
                    skiff_err *err)
{
    struct cpu_device *cd = d->impl;
    if (cd->pipe) return pipe_step(d, step, lr, b, st, err);
    const struct train_opts *o = cd->o;
    const struct train_plan *pl = cd->plan;
    struct gpt2 *model = &cd->model;
    struct tr_comm *c = d->comm;
    int P = c->world, K = b->count;
    double wait_s = 0, overlap_s = 0, tp_busy0 = cd->tp_comm ? cd->tp_comm->stats.busy_s : 0;
    cd->tp_wait_s = 0;
    if (o->zero == 3) return cpu_step_zero3(d, step, lr, b, st, err);
    gpt2_zero_grad(model);
    if (o->zero == 2) memset(cd->gshard, 0, pl->opt_len * sizeof(float));
    double loss_sum = 0;
    for (int k = 0; k < K; k++) {
        if (b->load(b, k, err) < 0) return -1;
        loss_sum += gpt2_forward(model, b->inputs, b->targets);
        int last = k == K - 1;
        /* no_sync: only the last micro-step's backward talks to peers */
        if (o->zero == 0 && P > 1 && last) {
            ddp_begin(&cd->ddp);
            model->grad_ready = ddp_grad_ready;
            model->grad_ready_ctx = &cd->ddp;
        } else {
            model->grad_ready = NULL;
        }
        double busy_b0 = c->stats.busy_s;
        gpt2_backward(model, 1.0f / (float)(K * P));
        if (model->grad_ready) overlap_s += c->stats.busy_s - busy_b0;
        model->grad_ready = NULL;
        if (tp_check(cd, err) < 0) return -1;
        if (o->zero == 0 && P > 1 && last && ddp_finish(&cd->ddp, &wait_s, err) < 0) return -1;
        if (o->zero == 2) {
            /* ZeRO-2: reduce-scatter every micro-step and keep only our
             * shard, so no rank holds a full accumulated gradient */
            double w0 = skiff_now_s();
            if (tr_reduce_scatter(c, model->grads, pl->n_dev, TR_F32, err) < 0) return -1;
            wait_s += skiff_now_s() - w0;
            const float *g = model->grads + pl->opt_off;
            for (size_t i = 0; i < pl->opt_len; i++) cd->gshard[i] += g[i];
            if (!last) gpt2_zero_grad(model);
        }
    }
    const float *gopt; /* gradient of [opt_off, +opt_len) */
    double norm2;
    if (o->zero == 0) {
        gopt = model->grads;
        norm2 = tp_sumsq(cd, gopt, 0, pl->n_dev);
        if (pl->tp > 1 && tp_total(cd, &norm2, err) < 0) return -1;
    } else {
        if (o->zero == 1) {
            double w0 = skiff_now_s();
            if (tr_reduce_scatter(c, model->grads, pl->n_dev, TR_F32, err) < 0) return -1;
            wait_s += skiff_now_s() - w0;
            gopt = model->grads + pl->opt_off;
        } else {
            gopt = cd->gshard;
        }
        /* norm^2 = sum over ranks of each shard's sum of squares */
        double mean, ss = tp_sumsq(cd, gopt, pl->opt_off, pl->opt_len), w0 = skiff_now_s();
        if (pl->tp > 1 && tp_total(cd, &ss, err) < 0) return -1;
        if (train_device_mean(d, ss, &mean, err) < 0) return -1;
        wait_s += skiff_now_s() - w0;
        norm2 = mean * P;
    }
    float norm = (float)sqrt(norm2);
    float gscale = train_clip_scale(o, norm);
    /* AdamW's step counter leaves out the steps a CUDA fp16 run skipped
     * before this checkpoint (none on the CPU) */
    adamw(model->params + pl->opt_off, gopt, cd->m, cd->v, cd->decay, pl->opt_len, lr, o,
          step + 1 - (int)d->amp.skipped, gscale);
    if (o->zero) {
        double w0 = skiff_now_s();
        if (tr_all_gather(c, model->params, pl->n_dev, TR_F32, err) < 0) return -1;
        wait_s += skiff_now_s() - w0;
    }
    double w1 = skiff_now_s();
    if (train_device_mean(d, loss_sum / K, &st->loss, err) < 0) return -1;
    wait_s += skiff_now_s() - w1; /* so wait_ms and comm_ms cover the same collectives */
    st->grad_norm = norm;
    if (cd->tp_comm) st->group_comm_ms = (cd->tp_comm->stats.busy_s - tp_busy0) * 1000;
    wait_s += cd->tp_wait_s;
    st->wait_ms = wait_s * 1000;
    st->overlap_ms = overlap_s * 1000;
    return 0;
}

static int cpu_forward(struct train_device *d, const int *inputs, const int *targets, skiff_err *err)
{
    struct cpu_device *c = d->impl;
    if (c->pipe) {
        double loss;
        if (tr_pipeline_forward(c->pipe, inputs, targets, &loss, err) < 0 || tp_check(c, err) < 0) return -1;
        c->loss_sum += tr_pipeline_loss_share(c->pipe, loss);
        return 0;
    }
    c->loss_sum += gpt2_forward(&c->model, inputs, targets);
    if (c->z3.failed) {
        *err = c->z3.err;
        return skiff_err_wrap(err, "ZeRO-3 gather");
    }
    return tp_check(c, err);
}

static int cpu_take_loss(struct train_device *d, double *sum, skiff_err *err)
{
    (void)err;
    struct cpu_device *c = d->impl;
    *sum = c->loss_sum;
    c->loss_sum = 0;
    return 0;
}

/* --tp: the loop's whole weights (rank 0's, from the seed, --init-from or a
 * checkpoint, broadcast over the data-parallel group) to every
 * tensor-parallel rank, which keeps its part. --pp: the stage takes its
 * ranges of the weights (of its tensor-parallel part) and, resuming with
 * ZeRO 0, of AdamW's m and v. */
static int cpu_upload(struct train_device *d, int with_opt, skiff_err *err)
{
    struct cpu_device *c = d->impl;
    const struct train_plan *pl = c->plan;
    if (c->o->zero == 3) return 0; /* ZeRO-3: each rank made its shard of its part (train.c) */
    if (pl->tp > 1 && tr_broadcast(c->tp_comm, c->full, pl->n_pad * sizeof(float), 0, err) < 0)
        return skiff_err_wrap(err, "broadcasting parameters over the tensor-parallel group");
    if (!c->pipe) {
        if (pl->tp > 1) gpt2_tp_copy(&c->o->cfg, pl->tp, pl->tp_rank, c->full, c->model.params, 1);
        return 0; /* m and v are the device's own memory, in its layout */
    }
    float *local = c->full;
    if (pl->tp > 1) {
        if (!(local = calloc(pl->n_dev, sizeof(float))))
            return skiff_error(err, ENOMEM, "the tensor-parallel part of the parameters");
        gpt2_tp_copy(&c->o->cfg, pl->tp, pl->tp_rank, c->full, local, 1);
    }
    tr_pipeline_take(c->pipe, local, c->model.params);
    if (local != c->full) free(local);
    if (with_opt && !c->o->zero) {
        tr_pipeline_take(c->pipe, c->host_m, c->m);
        tr_pipeline_take(c->pipe, c->host_v, c->v);
    }
    drop_host(d);
    return 0;
}

/* Before a checkpoint. --pp: every stage's parameters (and with ZeRO 0
 * its optimizer state) gathered into whole host copies on every rank of
 * d->comm, the ranks with this tensor-parallel rank, so each holds its
 * whole part of the model. --tp: then rank 0's tensor-parallel group
 * (data-parallel rank 0, stage 0) gathers its parts into the whole
 * weights, which rank 0 writes. */
static int cpu_download(struct train_device *d, skiff_err *err)
{
    struct cpu_device *c = d->impl;
    const struct train_plan *pl = c->plan;
    int z = c->o->zero, rc = 0;
    if (z == 3) return 0; /* each rank saves its shard (of its tensor-parallel part) */
    size_t n = pl->n_dev;
    float *local = c->model.params; /* this tensor-parallel rank's whole part */
    if (c->pipe) {
        if (!c->full && !(c->full = calloc(pl->n_pad, sizeof(float))))
            return skiff_error(err, ENOMEM, "host copy of the parameters");
        if (!z && ((!c->host_m && !(c->host_m = calloc(pl->opt_len, sizeof(float)))) ||
                   (!c->host_v && !(c->host_v = calloc(pl->opt_len, sizeof(float))))))
            return skiff_error(err, ENOMEM, "host copy of the optimizer state");
        d->params = c->full;
        if (!z) {
            d->m = c->host_m;
            d->v = c->host_v;
        }
        local = pl->tp > 1 ? malloc(n * sizeof(float)) : c->full;
        if (!local) return skiff_error(err, ENOMEM, "the tensor-parallel part of the parameters");
        rc =
            tr_pipeline_gather(c->pipe, d->comm, local, z ? NULL : c->host_m, z ? NULL : c->host_v, n, c->m, c->v, err);
    }
    if (rc == 0 && pl->tp > 1 && pl->rank == 0 && pl->pp_rank == 0) {
        float *all = malloc((size_t)pl->tp * n * sizeof(float));
        if (!all) {
            rc = skiff_error(err, ENOMEM, "gathering the tensor-parallel parameters");
        } else {
            memcpy(all + (size_t)pl->tp_rank * n, local, n * sizeof(float));
            rc = tr_all_gather(c->tp_comm, all, (size_t)pl->tp * n, TR_F32, err);
            if (rc == 0)
                for (int r = 0; r < pl->tp; r++) gpt2_tp_copy(&c->o->cfg, pl->tp, r, c->full, all + (size_t)r * n, 0);
            else
                skiff_err_wrap(err, "gathering the tensor-parallel parameters");
            free(all);
        }
    }
    if (local != c->model.params && local != c->full) free(local);
    return rc;
}

/* What this rank holds, by kind (ZeRO shards what it shards; the rest is on
 * every rank): the parameters, the gradient (with ZeRO-2 its accumulated
 * shard too; with DDP the bucket staging), AdamW's m and v for the
 * optimizer range and the weight-decay mask, the activations and their
 * gradients (what --recompute changes). */
/* --pp: the measured bubble beside the ideal one, averaged over the ranks. */
static int cpu_finish(struct train_device *d, skiff_err *err)
{
    struct cpu_device *c = d->impl;
    if (!c->pipe) return 0;
    double mean;
    if (train_device_mean(d, tr_pipeline_bubble(c->pipe), &mean, err) < 0) return -1;
    if (c->plan->rank == 0 && !c->o->quiet)
        printf("skiff-train: pipeline bubble %.3f measured (mean over ranks and steps), (N-1)/(M+N-1) = %.3f "
               "(N %d, M %d, %s)\n",
               mean, tr_pipeline_bubble_ideal(c->pipe), c->o->pp, c->o->grad_accum, c->o->pp_gpipe ? "gpipe" : "1f1b");
    return 0;
}

static void cpu_describe(struct train_device *d, char *buf, size_t len)
{
    struct cpu_device *c = d->impl;
    const struct train_plan *pl = c->plan;
    int n = omp_get_max_threads();
    double f = (double)sizeof(float) / (1 << 20);
    double grads = (double)(c->pipe ? c->model.num_held : pl->n_dev) + (c->gshard ? (double)pl->opt_len : 0) +
                   (c->ddp.stage ? (double)pl->n_dev : 0) + (c->pipe ? (double)tr_pipeline_num_staging(c->pipe) : 0);
    double acts = c->pipe ? (double)tr_pipeline_num_acts(c->pipe) : 2.0 * (double)c->model.num_acts;
    double params = (double)(c->pipe ? c->model.num_held : pl->n_dev), gathered = (double)z3_gathered(&c->z3);
    char host[96] = "", z3[192] = "", stage[160] = "";
    if (c->full)
        snprintf(host, sizeof host, " (its tensor-parallel part; whole on the host %.1f MiB)", (double)pl->n_pad * f);
    else if (pl->tp > 1)
        snprintf(host, sizeof host, " (of its tensor-parallel part)");
    if (c->pipe) {
        stage[0] = ',';
        stage[1] = ' ';
        tr_pipeline_describe(c->pipe, stage + 2, sizeof stage - 2);
    }
    if (c->o->zero == 3 && c->pipe) {
        /* the shards between steps; the stage's weights and gradient for
         * each step's schedule, the reductions' packing in place of the
         * weights while it gathers and reduces (pipeline.c, hold) */
        double held = (double)c->model.num_held, packed = (double)tr_pipeline_num_staging(c->pipe) - pl->opt_len;
        params = (double)pl->opt_len + held;
        grads = (double)pl->opt_len + held;
        snprintf(z3, sizeof z3,
                 ", of which held for the step only %.1f MiB + %.1f MiB (the packing, %.1f MiB, in place of the "
                 "weights while gathering and reducing)",
                 held * f, held * f, packed * f);
    } else if (c->o->zero == 3) { /* shards, and the root's and --zero3-buffers blocks' buffers of each kind */
        params = grads = (double)pl->opt_len + gathered;
        snprintf(z3, sizeof z3, ", of which gathered units %.1f MiB + %.1f MiB", gathered * f, gathered * f);
    }
    snprintf(buf, len,
             "cpu (%d thread%s), per rank: params %.1f MiB%s, gradients %.1f MiB, optimizer %.1f MiB, "
             "activations %.1f MiB%s%s%s",
             n, n == 1 ? "" : "s", params * f, host, grads * f,
             3.0 * (double)(c->pipe && !c->o->zero ? c->model.num_held : pl->opt_len) * f, acts * f,
             c->model.recompute ? " (recomputed per block)" : "", z3, stage);
}

const struct train_device_ops train_cpu_device = {
    .name = "cpu",
    .open = cpu_open,
    .upload = cpu_upload, /* the host copies are the model's own buffers but with --tp */
    .download = cpu_download,
    .step = cpu_step,
    .forward = cpu_forward,
    .take_loss = cpu_take_loss,
    .alloc = NULL, /* device memory is host memory (host_memory) */
    .release = NULL,
    .h2d = NULL,
    .d2h = NULL,
    .describe = cpu_describe,
    .finish = cpu_finish,
    .close = cpu_close,
};
