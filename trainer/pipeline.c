/* Pipeline parallelism for the CPU device; see pipeline.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "pipeline.h"
#include "ppsched.h"

/* A micro-batch in flight: its activations and tokens, until its backward. */
struct slot {
    float *acts;
    int *inputs, *targets;
};

struct tr_pipeline {
    struct gpt2 *model;
    int stages, stage, dp, dp_rank, tp, tp_rank, zero, micro, gpipe;
    float loss_scale;                /* 1 / (M * DP): the mean over the global batch */
    struct tr_comm *dpc, *ppc, *emb; /* emb: first and last stage (ppc itself when N = 2) */
    struct train_range r[TRAIN_STAGE_MAX_RANGES];
    int nr;
    size_t wte_off, wte_len;             /* tied: reduced between the first and the last stage */
    size_t goff[TRAIN_STAGE_MAX_RANGES]; /* range i in the model's gradient (the stage's tensors only) */
    size_t stage_len;
    /* ZeRO 1/2 (policy.h, train_pp_shard_copy): the pieces of the ranges
     * in this rank's shard, every rank's shard packed in turn for the
     * reduce-scatter and the all-gather, and this rank's shard of the
     * gradient (ZeRO-2: accumulated over the micro-batches) */
    struct train_range pieces[TRAIN_STAGE_MAX_RANGES];
    size_t shard_len, wte_piece_off, wte_piece_len;
    float *packed, *gshard;
    /* ZeRO-3: this rank's shard of the stage's weights (the same pieces),
     * the only copy between steps; the model's held parameters, gradient
     * and `packed` exist only within a step, or the parameters from a
     * validation pass to the next step's end (hold). held: the model's
     * parameters are the shards' current values. */
    float *pshard;
    int held;
    struct slot *slots;
    int nslots;
    float *dout; /* (B,T,C): the gradient from the next stage */
    size_t btc;
    double comm_s;          /* this step's time in the pipeline's communication so far */
    double sched_s, idle_s; /* over the steps: schedule time, and of it no compute */
};

static int make_group(struct train_dist *dist, const char *name, const int *members, int n, int me, int timeout_ms,
                      struct tr_comm **out, skiff_err *err)
{
    return tr_comm_tcp_create_group(dist->store, name, members, n, me, dist->local_rank, timeout_ms, out, err);
}

/* The groups of tensor-parallel rank t (each tensor-parallel rank has its
 * own: a stage's ranks of one replica exchange only with the same t),
 * members placed by train_layout_rank. */
static int rank_at(const struct tr_pipeline *p, int stage, int dp_rank)
{
    return train_layout_rank(p->tp, p->dp, stage, dp_rank, p->tp_rank);
}

static int open_groups(struct tr_pipeline *p, struct train_dist *dist, int timeout_ms, skiff_err *err)
{
    int N = p->stages, D = p->dp, t = p->tp_rank;
    int *m = malloc((size_t)(N > D ? N : D) * sizeof *m);
    if (!m) return skiff_error(err, ENOMEM, "pipeline groups");
    char name[64];
    /* every rank: its DP group, then its pipeline, then the embedding pair */
    for (int i = 0; i < D; i++) m[i] = rank_at(p, p->stage, i);
    snprintf(name, sizeof name, "pp-dp/%d/%d", p->stage, t);
    int rc = make_group(dist, name, m, D, p->dp_rank, timeout_ms, &p->dpc, err);
    for (int s = 0; rc == 0 && s < N; s++) m[s] = rank_at(p, s, p->dp_rank);
    snprintf(name, sizeof name, "pp/%d/%d", p->dp_rank, t);
    if (rc == 0) rc = make_group(dist, name, m, N, p->stage, timeout_ms, &p->ppc, err);
    if (rc == 0 && N > 2 && (p->stage == 0 || p->stage == N - 1)) {
        int pair[2] = {rank_at(p, 0, p->dp_rank), rank_at(p, N - 1, p->dp_rank)};
        snprintf(name, sizeof name, "pp-emb/%d/%d", p->dp_rank, t);
        rc = make_group(dist, name, pair, 2, p->stage == 0 ? 0 : 1, timeout_ms, &p->emb, err);
    } else if (rc == 0 && N == 2) {
        p->emb = p->ppc;
    }
    free(m);
    return rc;
}

static void unhold(struct tr_pipeline *p);

int tr_pipeline_open(struct tr_pipeline **out, struct gpt2 *model, const struct train_opts *o,
                     const struct train_plan *pl, struct train_dist *dist, skiff_err *err)
{
    int N = o->pp, L = o->cfg.num_layers;
    struct tr_pipeline *p = calloc(1, sizeof *p);
    if (!p) return skiff_error(err, ENOMEM, "pipeline");
    *out = p;
    p->model = model;
    p->stages = N;
    p->dp = pl->world; /* the plan's world and rank are the data-parallel ones */
    p->dp_rank = pl->rank;
    p->tp = pl->tp;
    p->tp_rank = pl->tp_rank;
    p->stage = pl->pp_rank;
    p->zero = o->zero;
    p->micro = o->grad_accum;
    p->gpipe = o->pp_gpipe;
    p->loss_scale = 1.0f / (float)(p->micro * p->dp);
    int lo, hi;
    train_stage_blocks(L, N, p->stage, &lo, &hi);
    if (gpt2_set_stage(model, lo, hi, err) < 0) return -1;
    /* the ranges (of this tensor-parallel rank's buffer): the stage's slice
     * of every block tensor, the embeddings on the first stage, the final
     * LayerNorm and the (tied) wte on the last */
    p->nr = train_stage_ranges(&o->cfg, p->tp, N, p->stage, p->r);
    /* the model holds the stage's ranges back to back (gpt2_set_stage), so
     * the DP all-reduce takes its gradient whole; wte is held at the start
     * on the first stage and at the end on the last */
    p->wte_off = model->held_offsets[GPT2_WTE];
    p->wte_len = model->held_sizes[GPT2_WTE];
    for (int i = 0; i < p->nr; i++) {
        p->goff[i] = model->held_offsets[p->r[i].tensor];
        if (p->goff[i] != p->stage_len)
            return skiff_error(err, 0, "pipeline stage %d: the model's gradient layout does not follow its ranges",
                               p->stage);
        p->stage_len += p->r[i].len;
    }
    if (p->stage_len != model->num_held)
        return skiff_error(err, 0, "pipeline stage %d: %zu floats of gradient ranges, %zu in the model", p->stage,
                           p->stage_len, model->num_held);
    if (p->zero) {
        size_t at = 0;
        for (int i = 0; i < p->nr; i++) {
            size_t piece;
            train_pp_piece(p->r[i].len, p->dp, 0, &piece);
            p->pieces[i] = p->r[i];
            p->pieces[i].off = at;
            p->pieces[i].len = piece;
            if (p->r[i].tensor == GPT2_WTE) {
                p->wte_piece_off = at;
                p->wte_piece_len = piece;
            }
            at += piece;
        }
        p->shard_len = at; /* train_pp_shard_len, the plan's opt_len */
        if (p->zero != 3) p->packed = malloc(p->shard_len * (size_t)p->dp * sizeof(float));
        p->gshard = calloc(p->shard_len, sizeof(float));
        if (p->zero == 3) p->pshard = calloc(p->shard_len, sizeof(float));
        if ((!p->packed && p->zero != 3) || !p->gshard || (!p->pshard && p->zero == 3))
            return skiff_error(err, ENOMEM, "pipeline ZeRO shards");
        if (p->zero == 3) unhold(p); /* the loop fills pshard (train.c); the step gathers it */
    }
    /* 1F1B keeps at most N - stage micro-batches in flight, GPipe all M */
    p->nslots = p->gpipe || N - p->stage > p->micro ? p->micro : N - p->stage;
    p->slots = calloc((size_t)p->nslots, sizeof *p->slots);
    size_t BT = (size_t)model->B * model->T;
    p->btc = BT * (size_t)model->cfg.channels;
    p->dout = malloc(p->btc * sizeof(float));
    if (!p->slots || !p->dout) return skiff_error(err, ENOMEM, "pipeline buffers");
    for (int k = 0; k < p->nslots; k++) {
        struct slot *s = &p->slots[k];
        s->acts = k == 0 ? model->acts : calloc(model->num_acts, sizeof(float));
        s->inputs = malloc(BT * sizeof(int));
        s->targets = malloc(BT * sizeof(int));
        if (!s->acts || !s->inputs || !s->targets)
            return skiff_error(err, ENOMEM, "pipeline activations (%d micro-batches in flight)", p->nslots);
    }
    return open_groups(p, dist, o->timeout_ms, err);
}

void tr_pipeline_close(struct tr_pipeline *p)
{
    if (!p) return;
    for (int k = 0; p->slots && k < p->nslots; k++) {
        if (k > 0) free(p->slots[k].acts);
        free(p->slots[k].inputs);
        free(p->slots[k].targets);
    }
    if (p->slots) p->model->acts = p->slots[0].acts; /* the model frees its own */
    free(p->slots);
    free(p->dout);
    free(p->packed);
    free(p->gshard);
    free(p->pshard);
    if (p->emb != p->ppc) tr_comm_destroy(p->emb);
    tr_comm_destroy(p->ppc);
    tr_comm_destroy(p->dpc);
    free(p);
}

const struct train_range *tr_pipeline_ranges(const struct tr_pipeline *p, int *count)
{
    *count = p->nr;
    return p->r;
}

const struct train_range *tr_pipeline_shard_ranges(const struct tr_pipeline *p, int *count)
{
    *count = p->nr;
    return p->pieces;
}

/* ---- ZeRO within the stage's data-parallel group --------------------------
 * The stage's ranges are sharded piece by piece (policy.h): `packed` holds
 * every data-parallel rank's shard in turn, so one reduce-scatter leaves
 * each rank the sum of its own and one all-gather gives every rank all of
 * them back. */

/* Data-parallel rank d's shard of a buffer in the stage's held layout
 * (the ranges back to back), as train_pp_shard_copy cuts the ranges of the
 * whole buffer: each range in dp pieces, the last padded with zeros; or
 * with to_held the shard back into it. */
static void shard_copy(const struct tr_pipeline *p, int d, float *held, float *shard, int to_held)
{
    train_pp_pieces_copy(p->r, p->goff, p->nr, p->dp, d, held, shard, to_held);
}

static void pack_grads(struct tr_pipeline *p)
{
    for (int d = 0; d < p->dp; d++) shard_copy(p, d, p->model->grads, p->packed + (size_t)d * p->shard_len, 0);
}

/* The gradient of the stage's ranges reduce-scattered over its DP group:
 * this rank's shard of the sum into gshard, or added to it (ZeRO-2, every
 * micro-batch). */
static int shard_reduce(struct tr_pipeline *p, int add, skiff_err *err)
{
    if (!p->packed && !(p->packed = malloc(p->shard_len * (size_t)p->dp * sizeof(float)))) /* ZeRO-3: made here */
        return skiff_error(err, ENOMEM, "pipeline stage %d: packing its gradient (%zu floats)", p->stage,
                           p->shard_len * (size_t)p->dp);
    pack_grads(p);
    if (p->dp > 1 && tr_reduce_scatter(p->dpc, p->packed, p->shard_len * (size_t)p->dp, TR_F32, err) < 0)
        return skiff_err_wrap(err, "pipeline stage %d: gradient reduce-scatter over its %d data-parallel ranks",
                              p->stage, p->dp);
    const float *mine = p->packed + (size_t)p->dp_rank * p->shard_len;
    if (add)
        for (size_t i = 0; i < p->shard_len; i++) p->gshard[i] += mine[i];
    else
        memcpy(p->gshard, mine, p->shard_len * sizeof(float));
    return 0;
}

float *tr_pipeline_grad_shard(struct tr_pipeline *p) { return p->gshard; }

float *tr_pipeline_param_shard(struct tr_pipeline *p)
{
    if (p->zero == 3) return p->pshard; /* the weights themselves */
    float *mine = p->packed + (size_t)p->dp_rank * p->shard_len;
    shard_copy(p, p->dp_rank, p->model->params, mine, 0);
    return mine;
}

int tr_pipeline_share_params(struct tr_pipeline *p, skiff_err *err)
{
    if (p->zero == 3) { /* gathered where next used: the next step, or a validation pass */
        p->held = 0;
        return 0;
    }
    if (p->dp > 1 && tr_all_gather(p->dpc, p->packed, p->shard_len * (size_t)p->dp, TR_F32, err) < 0)
        return skiff_err_wrap(err, "pipeline stage %d: parameter all-gather over its %d data-parallel ranks", p->stage,
                              p->dp);
    for (int d = 0; d < p->dp; d++) shard_copy(p, d, p->model->params, p->packed + (size_t)d * p->shard_len, 1);
    return 0;
}

/* ZeRO-3: the stage's weights gathered from the data-parallel ranks'
 * shards into the model's held layout, once per step for the whole
 * schedule (every micro-batch's forward and backward uses them). Of the
 * three stage-sized buffers a step needs, the weights, their gradient and
 * the packing of the gather and the reduce-scatter (`packed`), a rank
 * holds two at most: the packing while it gathers (then freed, before the
 * gradient is made), the weights and the gradient during the schedule, the
 * gradient and the packing while it reduces (the weights freed first).
 * Between steps it holds its shards only (doc/trainer-parallelism.md,
 * "ZeRO-3 and the pipeline", compares this with ZeRO-2). */
static int hold(struct tr_pipeline *p, skiff_err *err)
{
    struct gpt2 *m = p->model;
    if (p->zero != 3 || p->held) return 0;
    if (!m->params) m->params = malloc(p->stage_len * sizeof(float));
    float *packed = m->params ? malloc(p->shard_len * (size_t)p->dp * sizeof(float)) : NULL;
    if (!packed)
        return skiff_error(err, ENOMEM, "pipeline stage %d: gathering its weights (%zu floats)", p->stage,
                           p->stage_len);
    memcpy(packed + (size_t)p->dp_rank * p->shard_len, p->pshard, p->shard_len * sizeof(float));
    int rc = p->dp > 1 ? tr_all_gather(p->dpc, packed, p->shard_len * (size_t)p->dp, TR_F32, err) : 0;
    if (rc == 0)
        for (int d = 0; d < p->dp; d++) shard_copy(p, d, m->params, packed + (size_t)d * p->shard_len, 1);
    free(packed);
    if (rc < 0)
        return skiff_err_wrap(err, "pipeline stage %d: ZeRO-3 parameter all-gather over its %d data-parallel ranks",
                              p->stage, p->dp);
    p->held = 1;
    return 0;
}

/* ZeRO-3: the weights go once the schedule is done (before the
 * reductions make `packed`), the gradient and `packed` after them. */
static void drop_weights(struct tr_pipeline *p)
{
    free(p->model->params);
    p->model->params = NULL;
    p->held = 0;
}

static void unhold(struct tr_pipeline *p)
{
    drop_weights(p);
    free(p->model->grads);
    free(p->packed);
    p->model->grads = p->packed = NULL;
}

int tr_pipeline_dp_sum(struct tr_pipeline *p, double *v, skiff_err *err)
{
    float x = (float)*v;
    if (p->dp > 1 && tr_allreduce_sum(p->dpc, &x, 1, TR_F32, err) < 0)
        return skiff_err_wrap(err, "pipeline stage %d: summing over its data-parallel ranks", p->stage);
    *v = x;
    return 0;
}

/* ---- the schedule -----------------------------------------------------------
 * Each stage runs fwd(k) and bwd(k) of micro-batch k, talking only to its
 * neighbours: prev = stage-1 (activations in, their gradients out) and
 * next = stage+1. Where a stage sends to a neighbour that sends to it at the
 * same moment (1F1B's steady state), the two halves travel together in one
 * sendrecv, so neither waits for the other to read (Megatron's
 * send_forward_recv_backward / send_backward_recv_forward). */

static int p2p(struct tr_pipeline *p, const void *sbuf, int to, void *rbuf, int from, skiff_err *err)
{
    if (to < 0 && from < 0) return 0;
    size_t bytes = p->btc * sizeof(float);
    double t0 = skiff_now_s();
    int rc = tr_sendrecv(p->ppc, sbuf, bytes, to, rbuf, bytes, from, err);
    p->comm_s += skiff_now_s() - t0;
    return rc < 0 ? skiff_err_wrap(err, "pipeline stage %d", p->stage) : 0;
}

static int prev(const struct tr_pipeline *p) { return p->stage > 0 ? p->stage - 1 : -1; }
static int next(const struct tr_pipeline *p) { return p->stage < p->stages - 1 ? p->stage + 1 : -1; }

static struct slot *slot_of(struct tr_pipeline *p, int k) { return &p->slots[k % p->nslots]; }

/* Loads micro-batch k's tokens into its slot where the stage uses them. */
static int load(struct tr_pipeline *p, struct train_batches *b, int k, skiff_err *err)
{
    if (p->stage != 0 && p->stage != p->stages - 1) return 0;
    if (b->load(b, k, err) < 0) return -1;
    struct slot *s = slot_of(p, k);
    size_t BT = (size_t)p->model->B * p->model->T;
    memcpy(s->inputs, b->inputs, BT * sizeof(int));
    memcpy(s->targets, b->targets, BT * sizeof(int));
    return 0;
}

struct sched {
    struct tr_pipeline *p;
    struct train_batches *b;
    double loss_sum, compute_s;
};

/* The stage's forward of micro-batch k, whose input is already in its slot
 * (a later stage received it there). */
static int fwd(struct sched *sc, int k, skiff_err *err)
{
    struct tr_pipeline *p = sc->p;
    struct gpt2 *m = p->model;
    double t0 = skiff_now_s(); /* reading the batch is work too, not bubble */
    if (load(p, sc->b, k, err) < 0) return -1;
    struct slot *s = slot_of(p, k);
    m->acts = s->acts;
    float loss = gpt2_forward(m, s->inputs, s->targets);
    sc->compute_s += skiff_now_s() - t0;
    if (next(p) < 0) sc->loss_sum += loss;
    return 0;
}

/* The stage's backward of micro-batch k from the gradient in p->dout;
 * under ZeRO-2 its gradient goes to the shards at once, so no rank
 * accumulates the stage's whole gradient. */
static int bwd(struct sched *sc, int k, skiff_err *err)
{
    struct tr_pipeline *p = sc->p;
    struct gpt2 *m = p->model;
    struct slot *s = slot_of(p, k);
    m->acts = s->acts;
    m->inputs = s->inputs;
    m->targets = s->targets;
    m->stage_dout = p->dout;
    double t0 = skiff_now_s();
    gpt2_backward(m, p->loss_scale);
    sc->compute_s += skiff_now_s() - t0;
    if (p->zero != 2) return 0;
    t0 = skiff_now_s();
    if (shard_reduce(p, 1, err) < 0) return -1;
    p->comm_s += skiff_now_s() - t0;
    gpt2_zero_grad(m);
    return 0;
}

static float *in_of(struct tr_pipeline *p, int k)
{
    p->model->acts = slot_of(p, k)->acts;
    return gpt2_stage_in(p->model);
}

static float *out_of(struct tr_pipeline *p, int k)
{
    p->model->acts = slot_of(p, k)->acts;
    return gpt2_stage_out(p->model);
}

/* The schedule's view of this stage (ppsched.h). */
static int sc_p2p(void *ctx, const void *sbuf, int to, void *rbuf, int from, skiff_err *err)
{
    return p2p(((struct sched *)ctx)->p, sbuf, to, rbuf, from, err);
}
static int sc_fwd(void *ctx, int k, skiff_err *err) { return fwd(ctx, k, err); }
static int sc_bwd(void *ctx, int k, skiff_err *err) { return bwd(ctx, k, err); }
static void *sc_in(void *ctx, int k) { return in_of(((struct sched *)ctx)->p, k); }
static void *sc_out(void *ctx, int k) { return out_of(((struct sched *)ctx)->p, k); }
static void *sc_dout(void *ctx) { return ((struct sched *)ctx)->p->dout; }
static void *sc_din(void *ctx, int k)
{
    (void)k;
    return gpt2_stage_din(((struct sched *)ctx)->p->model);
}

/* Sums the stage's gradient ranges over its DP group (packed: the ranges
 * are not contiguous), then wte's between the first and the last stage.
 * ZeRO: reduce-scatters them (ZeRO-2 did during the schedule), then sums
 * wte's piece of the shard between the stages: the first stage's
 * data-parallel rank d and the last's hold the same piece. */
static int reduce(struct tr_pipeline *p, skiff_err *err)
{
    float *g = p->model->grads;
    if ((p->zero == 1 || p->zero == 3) && shard_reduce(p, 0, err) < 0) return -1; /* ZeRO-2 did during the schedule */
    if (p->zero) {
        if (p->emb && tr_allreduce_sum(p->emb, p->gshard + p->wte_piece_off, p->wte_piece_len, TR_F32, err) < 0)
            return skiff_err_wrap(err, "pipeline: the tied embedding's gradient between the first and the last stage");
    } else if (p->dp > 1 && tr_allreduce_sum(p->dpc, g, p->stage_len, TR_F32, err) < 0) {
        return skiff_err_wrap(err, "pipeline stage %d: gradient all-reduce over its %d data-parallel ranks", p->stage,
                              p->dp);
    }
    if (!p->zero && p->emb && tr_allreduce_sum(p->emb, g + p->wte_off, p->wte_len, TR_F32, err) < 0)
        return skiff_err_wrap(err, "pipeline: the tied embedding's gradient between the first and the last stage");
    return 0;
}

int tr_pipeline_grads(struct tr_pipeline *p, struct train_batches *b, double *loss_sum, double *comm_s, skiff_err *err)
{
    struct sched sc = {.p = p, .b = b};
    p->comm_s = 0;
    double h0 = skiff_now_s();
    if (hold(p, err) < 0) return -1;
    p->comm_s += skiff_now_s() - h0;
    if (!p->model->grads && !(p->model->grads = malloc(p->stage_len * sizeof(float)))) /* ZeRO-3: made here */
        return skiff_error(err, ENOMEM, "pipeline stage %d: its gradient (%zu floats)", p->stage, p->stage_len);
    gpt2_zero_grad(p->model);
    if (p->zero == 2) memset(p->gshard, 0, p->shard_len * sizeof(float));
    double t0 = skiff_now_s();
    struct tr_pp_steps st = {.stage = p->stage,
                             .stages = p->stages,
                             .micro = p->micro,
                             .ctx = &sc,
                             .p2p = sc_p2p,
                             .fwd = sc_fwd,
                             .bwd = sc_bwd,
                             .in = sc_in,
                             .out = sc_out,
                             .dout = sc_dout,
                             .din = sc_din};
    if ((p->gpipe ? tr_pp_gpipe(&st, err) : tr_pp_1f1b(&st, err)) < 0) return -1;
    double t = skiff_now_s() - t0;
    p->sched_s += t;
    p->idle_s += t - sc.compute_s;
    double r0 = skiff_now_s();
    if (p->zero == 3) drop_weights(p); /* AdamW steps the shard */
    if (reduce(p, err) < 0) return -1;
    if (p->zero == 3) unhold(p); /* the gradient is in gshard, the weights in pshard */
    *loss_sum = sc.loss_sum;
    *comm_s = p->comm_s + (skiff_now_s() - r0);
    return 0;
}

int tr_pipeline_sum(struct tr_pipeline *p, double v, double *out, skiff_err *err)
{
    /* one double per stage as two floats, all-gathered (a copy: exact) */
    int N = p->stages;
    double *all = calloc((size_t)N, sizeof *all);
    if (!all) return skiff_error(err, ENOMEM, "pipeline sum");
    all[p->stage] = v;
    int rc = tr_all_gather(p->ppc, all, (size_t)N * 2, TR_F32, err);
    double s = 0;
    for (int i = 0; i < N; i++) s += all[i];
    free(all);
    *out = s;
    return rc < 0 ? skiff_err_wrap(err, "pipeline: summing over the stages") : 0;
}

double tr_pipeline_loss_share(const struct tr_pipeline *p, double v)
{
    return p->stage == p->stages - 1 ? v * p->stages : 0;
}

int tr_pipeline_forward(struct tr_pipeline *p, const int *inputs, const int *targets, double *loss, skiff_err *err)
{
    struct gpt2 *m = p->model;
    if (hold(p, err) < 0) return -1; /* ZeRO-3: kept until the next step's end */
    if (p2p(p, NULL, -1, in_of(p, 0), prev(p), err) < 0) return -1;
    *loss = gpt2_forward(m, inputs, targets);
    return p2p(p, gpt2_stage_out(m), next(p), NULL, -1, err);
}

int tr_pipeline_gather(struct tr_pipeline *p, struct tr_comm *comm, float *params, float *m, float *v, size_t n,
                       const float *held_m, const float *held_v, skiff_err *err)
{
    /* each range from the DP rank 0 of the stage that owns it, zeros from
     * everyone else: the group's sum is every stage's values, exactly */
    float *bufs[3] = {params, m, v};
    const float *from[3] = {p->model->params, held_m, held_v};
    for (int b = 0; b < 3; b++) {
        if (!bufs[b]) continue;
        memset(bufs[b], 0, n * sizeof(float));
        for (int i = 0; i < p->nr && p->dp_rank == 0; i++)
            if (p->r[i].owner) memcpy(bufs[b] + p->r[i].off, from[b] + p->goff[i], p->r[i].len * sizeof(float));
        if (tr_allreduce_sum(comm, bufs[b], n, TR_F32, err) < 0)
            return skiff_err_wrap(err, "pipeline: gathering the stages for a checkpoint");
    }
    return 0;
}

void tr_pipeline_take(const struct tr_pipeline *p, const float *whole, float *held)
{
    for (int i = 0; i < p->nr; i++) memcpy(held + p->goff[i], whole + p->r[i].off, p->r[i].len * sizeof(float));
}

size_t tr_pipeline_num_held(const struct tr_pipeline *p) { return p->stage_len; }

double tr_pipeline_busy(const struct tr_pipeline *p)
{
    double b = p->dpc->stats.busy_s + p->ppc->stats.busy_s;
    return p->emb && p->emb != p->ppc ? b + p->emb->stats.busy_s : b;
}

double tr_pipeline_bubble(const struct tr_pipeline *p) { return p->sched_s > 0 ? p->idle_s / p->sched_s : 0; }

double tr_pipeline_bubble_ideal(const struct tr_pipeline *p)
{
    return (double)(p->stages - 1) / (double)(p->micro + p->stages - 1);
}

void tr_pipeline_describe(const struct tr_pipeline *p, char *buf, size_t len)
{
    char tp[32] = "";
    if (p->tp > 1) snprintf(tp, sizeof tp, ", tp %d", p->tp);
    snprintf(buf, len, "pipeline stage %d of %d (blocks %d-%d), dp %d%s, %s, %d micro-batch%s in flight", p->stage,
             p->stages, p->model->layer_lo, p->model->layer_hi - 1, p->dp, tp, p->gpipe ? "gpipe" : "1f1b", p->nslots,
             p->nslots == 1 ? "" : "es");
}

size_t tr_pipeline_num_staging(const struct tr_pipeline *p) { return p->zero ? p->shard_len * (size_t)(p->dp + 1) : 0; }

size_t tr_pipeline_num_acts(const struct tr_pipeline *p) { return (size_t)(p->nslots + 1) * p->model->num_acts; }
