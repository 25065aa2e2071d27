/* Pipeline parallelism for the CPU device; see pipeline.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "pipeline.h"

/* The tensors of the blocks, one (L, ...) tensor each in llm.c's layout. */
static const int block_tensors[] = {GPT2_LN1W, GPT2_LN1B, GPT2_QKVW, GPT2_QKVB, GPT2_ATTPROJW, GPT2_ATTPROJB,
                                    GPT2_LN2W, GPT2_LN2B, GPT2_FCW,  GPT2_FCB,  GPT2_FCPROJW,  GPT2_FCPROJB};
enum { MAX_RANGES = 16 };

/* A micro-batch in flight: its activations and tokens, until its backward. */
struct slot {
    float *acts;
    int *inputs, *targets;
};

struct tr_pipeline {
    struct gpt2 *model;
    int stages, stage, dp, dp_rank, micro, gpipe;
    float loss_scale;                /* 1 / (M * DP): the mean over the global batch */
    struct tr_comm *dpc, *ppc, *emb; /* emb: first and last stage (ppc itself when N = 2) */
    struct tr_pipe_range r[MAX_RANGES];
    int nr;
    size_t wte_off, wte_len; /* tied: reduced between the first and the last stage */
    float *stage_buf;        /* the ranges back to back, for the DP all-reduce */
    size_t stage_len;
    struct slot *slots;
    int nslots;
    float *dout; /* (B,T,C): the gradient from the next stage */
    size_t btc;
    double comm_s, busy_s;  /* this step's point-to-point time so far */
    double sched_s, idle_s; /* over the steps: schedule time, and of it no compute */
};

void tr_pipeline_split(int L, int n, int s, int *lo, int *hi)
{
    int base = L / n, extra = L % n;
    *lo = s * base + (s < extra ? s : extra);
    *hi = *lo + base + (s < extra ? 1 : 0);
}

static void add_range(struct tr_pipeline *p, size_t off, size_t len, int norm, int owner)
{
    p->r[p->nr++] = (struct tr_pipe_range){off, len, norm, owner};
}

static int make_group(struct train_dist *dist, const char *name, const int *members, int n, int me, int timeout_ms,
                      struct tr_comm **out, skiff_err *err)
{
    return tr_comm_tcp_create_group(dist->store, name, members, n, me, dist->local_rank, timeout_ms, out, err);
}

static int open_groups(struct tr_pipeline *p, struct train_dist *dist, int timeout_ms, skiff_err *err)
{
    int N = p->stages, D = p->dp;
    int *m = malloc((size_t)(N > D ? N : D) * sizeof *m);
    if (!m) return skiff_error(err, ENOMEM, "pipeline groups");
    char name[64];
    /* every rank: its DP group, then its pipeline, then the embedding pair */
    for (int i = 0; i < D; i++) m[i] = p->stage * D + i;
    snprintf(name, sizeof name, "pp-dp/%d", p->stage);
    int rc = make_group(dist, name, m, D, p->dp_rank, timeout_ms, &p->dpc, err);
    for (int s = 0; rc == 0 && s < N; s++) m[s] = s * D + p->dp_rank;
    snprintf(name, sizeof name, "pp/%d", p->dp_rank);
    if (rc == 0) rc = make_group(dist, name, m, N, p->stage, timeout_ms, &p->ppc, err);
    if (rc == 0 && N > 2 && (p->stage == 0 || p->stage == N - 1)) {
        int pair[2] = {p->dp_rank, (N - 1) * D + p->dp_rank};
        snprintf(name, sizeof name, "pp-emb/%d", p->dp_rank);
        rc = make_group(dist, name, pair, 2, p->stage == 0 ? 0 : 1, timeout_ms, &p->emb, err);
    } else if (rc == 0 && N == 2) {
        p->emb = p->ppc;
    }
    free(m);
    return rc;
}

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
    p->stage = pl->pp_rank;
    p->micro = o->grad_accum;
    p->gpipe = o->pp_gpipe;
    p->loss_scale = 1.0f / (float)(p->micro * p->dp);
    int lo, hi;
    tr_pipeline_split(L, N, p->stage, &lo, &hi);
    if (gpt2_set_stage(model, lo, hi, err) < 0) return -1;
    /* the ranges: the stage's slice of every block tensor, the embeddings on
     * the first stage, the final LayerNorm and the (tied) wte on the last */
    size_t *sz = model->param_sizes, *off = model->param_offsets;
    int first = p->stage == 0, last = p->stage == N - 1;
    if (first) {
        add_range(p, off[GPT2_WTE], sz[GPT2_WTE], 1, 1);
        add_range(p, off[GPT2_WPE], sz[GPT2_WPE], 1, 1);
    }
    for (size_t i = 0; i < sizeof block_tensors / sizeof block_tensors[0]; i++) {
        size_t per = sz[block_tensors[i]] / (size_t)L;
        add_range(p, off[block_tensors[i]] + (size_t)lo * per, (size_t)(hi - lo) * per, 1, 1);
    }
    if (last) {
        add_range(p, off[GPT2_LNFW], sz[GPT2_LNFW] + sz[GPT2_LNFB], 1, 1); /* adjacent */
        if (!first) add_range(p, off[GPT2_WTE], sz[GPT2_WTE], 0, 0);
    }
    p->wte_off = off[GPT2_WTE];
    p->wte_len = sz[GPT2_WTE];
    for (int i = 0; i < p->nr; i++) p->stage_len += p->r[i].len;
    if (p->dp > 1 && !(p->stage_buf = malloc(p->stage_len * sizeof(float))))
        return skiff_error(err, ENOMEM, "pipeline gradient staging");
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
    free(p->stage_buf);
    if (p->emb != p->ppc) tr_comm_destroy(p->emb);
    tr_comm_destroy(p->ppc);
    tr_comm_destroy(p->dpc);
    free(p);
}

const struct tr_pipe_range *tr_pipeline_ranges(const struct tr_pipeline *p, int *count)
{
    *count = p->nr;
    return p->r;
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
    double t0 = skiff_now_s(), b0 = p->ppc->stats.busy_s;
    int rc = tr_sendrecv(p->ppc, sbuf, bytes, to, rbuf, bytes, from, err);
    p->comm_s += skiff_now_s() - t0;
    p->busy_s += p->ppc->stats.busy_s - b0;
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

/* The stage's backward of micro-batch k from the gradient in p->dout. */
static void bwd(struct sched *sc, int k)
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

static int gpipe(struct sched *sc, skiff_err *err)
{
    struct tr_pipeline *p = sc->p;
    int M = p->micro;
    for (int k = 0; k < M; k++)
        if (p2p(p, NULL, -1, in_of(p, k), prev(p), err) < 0 || fwd(sc, k, err) < 0 ||
            p2p(p, out_of(p, k), next(p), NULL, -1, err) < 0)
            return -1;
    for (int k = 0; k < M; k++) {
        if (p2p(p, NULL, -1, p->dout, next(p), err) < 0) return -1;
        bwd(sc, k);
        if (p2p(p, gpt2_stage_din(p->model), prev(p), NULL, -1, err) < 0) return -1;
    }
    return 0;
}

/* 1F1B (PipeDream-Flush, Megatron's non-interleaved schedule): N-1-stage
 * forwards to fill the pipeline, then one forward and one backward in
 * turn, then the remaining backwards. Activations of at most N-stage
 * micro-batches are alive at once, against M for GPipe. */
static int one_f_one_b(struct sched *sc, skiff_err *err)
{
    struct tr_pipeline *p = sc->p;
    int M = p->micro, warm = p->stages - p->stage - 1;
    if (warm > M) warm = M;
    int steady = M - warm, fk = 0, bk = 0;
    for (; fk < warm; fk++)
        if (p2p(p, NULL, -1, in_of(p, fk), prev(p), err) < 0 || fwd(sc, fk, err) < 0 ||
            p2p(p, out_of(p, fk), next(p), NULL, -1, err) < 0)
            return -1;
    if (steady > 0 && p2p(p, NULL, -1, in_of(p, fk), prev(p), err) < 0) return -1;
    for (int i = 0; i < steady; i++, fk++, bk++) {
        if (fwd(sc, fk, err) < 0 || p2p(p, out_of(p, fk), next(p), p->dout, next(p), err) < 0) return -1;
        bwd(sc, bk);
        /* the freed slot of bk takes micro-batch fk+1 (nslots = warm + 1) */
        int more = i < steady - 1;
        if (p2p(p, gpt2_stage_din(p->model), prev(p), more ? in_of(p, fk + 1) : NULL, more ? prev(p) : -1, err) < 0)
            return -1;
    }
    for (; bk < M; bk++) {
        if (p2p(p, NULL, -1, p->dout, next(p), err) < 0) return -1;
        bwd(sc, bk);
        if (p2p(p, gpt2_stage_din(p->model), prev(p), NULL, -1, err) < 0) return -1;
    }
    return 0;
}

/* Sums the stage's gradient ranges over its DP group (packed: the ranges
 * are not contiguous), then wte's between the first and the last stage. */
static int reduce(struct tr_pipeline *p, skiff_err *err)
{
    float *g = p->model->grads;
    double b0 = p->dpc->stats.busy_s + (p->emb ? p->emb->stats.busy_s : 0);
    if (p->dp > 1) {
        size_t at = 0;
        for (int i = 0; i < p->nr; i++) {
            memcpy(p->stage_buf + at, g + p->r[i].off, p->r[i].len * sizeof(float));
            at += p->r[i].len;
        }
        if (tr_allreduce_sum(p->dpc, p->stage_buf, p->stage_len, TR_F32, err) < 0)
            return skiff_err_wrap(err, "pipeline stage %d: gradient all-reduce over its %d data-parallel ranks",
                                  p->stage, p->dp);
        at = 0;
        for (int i = 0; i < p->nr; i++) {
            memcpy(g + p->r[i].off, p->stage_buf + at, p->r[i].len * sizeof(float));
            at += p->r[i].len;
        }
    }
    if (p->emb && tr_allreduce_sum(p->emb, g + p->wte_off, p->wte_len, TR_F32, err) < 0)
        return skiff_err_wrap(err, "pipeline: the tied embedding's gradient between the first and the last stage");
    p->busy_s += p->dpc->stats.busy_s + (p->emb ? p->emb->stats.busy_s : 0) - b0;
    return 0;
}

int tr_pipeline_grads(struct tr_pipeline *p, struct train_batches *b, double *loss_sum, double *comm_s, double *busy_s,
                      skiff_err *err)
{
    struct sched sc = {.p = p, .b = b};
    p->comm_s = p->busy_s = 0;
    gpt2_zero_grad(p->model);
    double t0 = skiff_now_s();
    if ((p->gpipe ? gpipe(&sc, err) : one_f_one_b(&sc, err)) < 0) return -1;
    double t = skiff_now_s() - t0;
    p->sched_s += t;
    p->idle_s += t - sc.compute_s;
    double r0 = skiff_now_s();
    if (reduce(p, err) < 0) return -1;
    *loss_sum = sc.loss_sum;
    *comm_s = p->comm_s + (skiff_now_s() - r0);
    *busy_s = p->busy_s;
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
    if (p2p(p, NULL, -1, in_of(p, 0), prev(p), err) < 0) return -1;
    *loss = gpt2_forward(m, inputs, targets);
    return p2p(p, gpt2_stage_out(m), next(p), NULL, -1, err);
}

int tr_pipeline_gather(struct tr_pipeline *p, struct tr_comm *world, float *params, float *m, float *v, size_t n,
                       skiff_err *err)
{
    /* each range from the DP rank 0 of the stage that owns it, zeros from
     * everyone else: the world's sum is every stage's values, exactly */
    float *bufs[3] = {params, m, v};
    float *tmp = calloc(n, sizeof(float));
    if (!tmp) return skiff_error(err, ENOMEM, "pipeline checkpoint gather");
    for (int b = 0; b < 3; b++) {
        memset(tmp, 0, n * sizeof(float));
        for (int i = 0; i < p->nr && p->dp_rank == 0; i++)
            if (p->r[i].owner) memcpy(tmp + p->r[i].off, bufs[b] + p->r[i].off, p->r[i].len * sizeof(float));
        if (tr_allreduce_sum(world, tmp, n, TR_F32, err) < 0) {
            free(tmp);
            return skiff_err_wrap(err, "pipeline: gathering the stages for a checkpoint");
        }
        memcpy(bufs[b], tmp, n * sizeof(float));
    }
    free(tmp);
    return 0;
}

double tr_pipeline_bubble(const struct tr_pipeline *p) { return p->sched_s > 0 ? p->idle_s / p->sched_s : 0; }

double tr_pipeline_bubble_ideal(const struct tr_pipeline *p)
{
    return (double)(p->stages - 1) / (double)(p->micro + p->stages - 1);
}

void tr_pipeline_describe(const struct tr_pipeline *p, char *buf, size_t len)
{
    snprintf(buf, len, "pipeline stage %d of %d (blocks %d-%d), dp %d, %s, %d micro-batch%s in flight", p->stage,
             p->stages, p->model->layer_lo, p->model->layer_hi - 1, p->dp, p->gpipe ? "gpipe" : "1f1b", p->nslots,
             p->nslots == 1 ? "" : "es");
}

size_t tr_pipeline_num_acts(const struct tr_pipeline *p) { return (size_t)(p->nslots + 1) * p->model->num_acts; }
