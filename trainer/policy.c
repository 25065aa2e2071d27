/* The training policy shared by the CPU and CUDA loops; see policy.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "policy.h"

void train_layout_place(int rank, int tp, int dp, int *pp_rank, int *dp_rank, int *tp_rank)
{
    *tp_rank = rank % tp;
    *dp_rank = rank / tp % dp;
    *pp_rank = rank / (tp * dp);
}

int train_layout_rank(int tp, int dp, int pp_rank, int dp_rank, int tp_rank)
{
    return (pp_rank * dp + dp_rank) * tp + tp_rank;
}

void train_plan_init(struct train_plan *p, const struct train_opts *o, size_t num_params, int world, int rank)
{
    memset(p, 0, sizeof *p);
    p->tp = o->tp;
    p->pp = o->pp;
    p->world = world / (o->tp * o->pp);
    train_layout_place(rank, o->tp, p->world, &p->pp_rank, &p->rank, &p->tp_rank);
    world = p->world;
    rank = p->rank;
    p->num_params = num_params;
    p->n_pad = (num_params + (size_t)world - 1) / (size_t)world * (size_t)world;
    size_t local = gpt2_param_layout_tp(&o->cfg, o->tp, NULL, NULL);
    p->n_dev = o->tp == 1 ? p->n_pad : (local + (size_t)world - 1) / (size_t)world * (size_t)world;
    if (o->zero == 3) /* the units of this tensor-parallel rank's part (the whole model without --tp) */
        p->n_pad = p->n_dev = train_zero3_len(&o->cfg, o->tp, world);
    if (o->zero && o->pp > 1) { /* the stage's ranges, piece by piece */
        p->opt_len = train_pp_shard_len(&o->cfg, o->tp, o->pp, p->pp_rank, world);
        p->opt_off = (size_t)rank * p->opt_len;
    } else if (o->zero) {
        p->opt_len = p->n_dev / (size_t)world;
        p->opt_off = (size_t)rank * p->opt_len;
    } else {
        p->opt_off = 0;
        p->opt_len = p->n_dev;
    }
    p->start = 0;
    p->end = o->steps;
    if (o->stop_after && o->stop_after < p->end) p->end = o->stop_after;
}

static size_t pad_to(size_t n, int world) { return (n + (size_t)world - 1) / (size_t)world * (size_t)world; }

size_t train_zero3_len(const struct gpt2_config *cfg, int tp, int world)
{
    size_t n = 0, total;
    struct gpt2_slice s[GPT2_UNIT_MAX_SLICES];
    for (int u = 0; u < gpt2_num_units(cfg); u++) {
        gpt2_unit_slices_tp(cfg, tp, u, s, &total);
        n += pad_to(total, world);
    }
    return n;
}

size_t train_zero3_unit(const struct gpt2_config *cfg, int tp, int world, int rank, int u, size_t *piece_off)
{
    size_t off = 0, total, len = 0;
    struct gpt2_slice s[GPT2_UNIT_MAX_SLICES];
    for (int i = 0; i <= u; i++) {
        gpt2_unit_slices_tp(cfg, tp, i, s, &total);
        len = pad_to(total, world);
        if (i < u) off += len / (size_t)world;
    }
    (void)rank; /* every rank's piece sits at the same place in its shard */
    *piece_off = off;
    return len;
}

void train_zero3_copy(const struct gpt2_config *cfg, int tp, int world, int rank, float *flat, float *shard,
                      int to_flat)
{
    struct gpt2_slice s[GPT2_UNIT_MAX_SLICES];
    for (int u = 0; u < gpt2_num_units(cfg); u++) {
        size_t total, piece_off, len = train_zero3_unit(cfg, tp, world, rank, u, &piece_off);
        size_t plen = len / (size_t)world, a = (size_t)rank * plen, b = a + plen, uo = 0;
        int n = gpt2_unit_slices_tp(cfg, tp, u, s, &total);
        if (!to_flat) memset(shard + piece_off, 0, plen * sizeof(float)); /* the padding */
        for (int i = 0; i < n; uo += s[i].len, i++) {
            size_t lo = uo > a ? uo : a, hi = uo + s[i].len < b ? uo + s[i].len : b;
            if (lo >= hi) continue;
            float *f = flat + s[i].flat_off + (lo - uo), *x = shard + piece_off + (lo - a);
            memcpy(to_flat ? f : x, to_flat ? x : f, (hi - lo) * sizeof(float));
        }
    }
}

void train_stage_blocks(int L, int n, int s, int *lo, int *hi)
{
    int base = L / n, extra = L % n;
    *lo = s * base + (s < extra ? s : extra);
    *hi = *lo + base + (s < extra ? 1 : 0);
}

int train_stage_ranges(const struct gpt2_config *cfg, int tp, int pp, int stage,
                       struct train_range r[TRAIN_STAGE_MAX_RANGES])
{
    static const int blocks[] = {GPT2_LN1W, GPT2_LN1B, GPT2_QKVW, GPT2_QKVB, GPT2_ATTPROJW, GPT2_ATTPROJB,
                                 GPT2_LN2W, GPT2_LN2B, GPT2_FCW,  GPT2_FCB,  GPT2_FCPROJW,  GPT2_FCPROJB};
    size_t sz[GPT2_NUM_PARAM_TENSORS], off[GPT2_NUM_PARAM_TENSORS], L = (size_t)cfg->num_layers;
    gpt2_param_layout_tp(cfg, tp, sz, off);
    int lo, hi, n = 0, first = stage == 0, last = stage == pp - 1;
    train_stage_blocks(cfg->num_layers, pp, stage, &lo, &hi);
    if (first) {
        r[n++] = (struct train_range){off[GPT2_WTE], sz[GPT2_WTE], GPT2_WTE, 1, 1};
        r[n++] = (struct train_range){off[GPT2_WPE], sz[GPT2_WPE], GPT2_WPE, 1, 1};
    }
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++) {
        size_t per = sz[blocks[i]] / L;
        r[n++] = (struct train_range){off[blocks[i]] + (size_t)lo * per, (size_t)(hi - lo) * per, blocks[i], 1, 1};
    }
    if (last) {
        r[n++] = (struct train_range){off[GPT2_LNFW], sz[GPT2_LNFW] + sz[GPT2_LNFB], GPT2_LNFW, 1, 1}; /* adjacent */
        if (!first) r[n++] = (struct train_range){off[GPT2_WTE], sz[GPT2_WTE], GPT2_WTE, 0, 0};
    }
    return n;
}

size_t train_pp_shard_len(const struct gpt2_config *cfg, int tp, int pp, int stage, int dp)
{
    struct train_range r[TRAIN_STAGE_MAX_RANGES];
    int n = train_stage_ranges(cfg, tp, pp, stage, r);
    size_t len = 0;
    for (int i = 0; i < n; i++) len += pad_to(r[i].len, dp) / (size_t)dp;
    return len;
}

void train_pp_shard_copy(const struct gpt2_config *cfg, int tp, int pp, int stage, int dp, int dp_rank, float *local,
                         float *shard, int to_local)
{
    struct train_range r[TRAIN_STAGE_MAX_RANGES];
    int n = train_stage_ranges(cfg, tp, pp, stage, r);
    train_pp_pieces_copy(r, NULL, n, dp, dp_rank, local, shard, to_local);
}

size_t train_pp_piece(size_t len, int dp, int d, size_t *piece)
{
    *piece = pad_to(len, dp) / (size_t)dp;
    size_t a = (size_t)d * *piece;
    return a >= len ? 0 : len - a < *piece ? len - a : *piece;
}

void train_pp_pieces_copy(const struct train_range *r, const size_t *offs, int n, int dp, int d, float *buf,
                          float *shard, int to_buf)
{
    for (int i = 0; i < n; i++) {
        size_t piece, have = train_pp_piece(r[i].len, dp, d, &piece);
        float *b = buf + (offs ? offs[i] : r[i].off) + (size_t)d * piece;
        if (to_buf) {
            memcpy(b, shard, have * sizeof(float));
        } else {
            memcpy(shard, b, have * sizeof(float));
            memset(shard + have, 0, (piece - have) * sizeof(float)); /* the padding */
        }
        shard += piece;
    }
}

int train_plan_check(const struct train_opts *o, int world, skiff_err *err)
{
    if (world % o->tp)
        return skiff_error(err, 0,
                           "--tp %d must divide WORLD_SIZE=%d (the data-parallel size is WORLD_SIZE / --tp); "
                           "start a multiple of %d ranks",
                           o->tp, world, o->tp);
    if (world % o->pp)
        return skiff_error(err, 0,
                           "--pp %d does not divide WORLD_SIZE %d: the ranks make DP = WORLD_SIZE / %d pipelines",
                           o->pp, world, o->pp);
    if (world % (o->tp * o->pp))
        return skiff_error(err, 0,
                           "--tp %d x --pp %d = %d does not divide WORLD_SIZE %d: the data-parallel size is "
                           "WORLD_SIZE / (tp x pp); start a multiple of %d ranks",
                           o->tp, o->pp, o->tp * o->pp, world, o->tp * o->pp);
    return 0;
}

uint64_t train_plan_window(const struct train_plan *p, const struct train_opts *o, int step, int k)
{
    uint64_t B = (uint64_t)o->batch, P = (uint64_t)p->world;
    uint64_t G = B * (uint64_t)o->grad_accum * P;
    return (uint64_t)step * G + ((uint64_t)k * P + (uint64_t)p->rank) * B;
}

uint64_t train_plan_val_window(const struct train_plan *p, int B, int i)
{
    return ((uint64_t)i * (uint64_t)p->world + (uint64_t)p->rank) * (uint64_t)B;
}

int train_plan_val_due(const struct train_opts *o, int step)
{
    return o->val && o->val_every && ((step + 1) % o->val_every == 0 || step + 1 == o->steps);
}

int train_plan_save_due(const struct train_opts *o, const struct train_plan *p, int done)
{
    return o->ckpt_dir && ((o->ckpt_every && done % o->ckpt_every == 0) || done == p->end);
}

void train_plan_ckpt(const struct train_plan *p, const struct train_opts *o, int step, float *params, float *m,
                     float *v, struct train_ckpt *c)
{
    int has_opt = o->zero || p->rank == 0;
    memset(c, 0, sizeof *c);
    c->cfg = o->cfg;
    int global = train_layout_rank(p->tp, p->world, p->pp_rank, p->rank, p->tp_rank);
    c->world = p->world * p->tp * p->pp;
    c->rank = global;
    c->tp = p->tp;
    c->pp = p->pp;
    c->zero = o->zero;
    c->step = step;
    c->data_pos = (uint64_t)step * (uint64_t)o->batch * (uint64_t)o->grad_accum * (uint64_t)p->world;
    c->rng = o->seed;
    c->num_params = p->n_pad;
    c->opt_off = has_opt ? p->opt_off : 0;
    c->opt_len = has_opt ? p->opt_len : 0;
    c->params = global == 0 || o->zero == 3 ? params : NULL; /* ZeRO-3: each rank its shard */
    c->m = m;
    c->v = v;
}

int train_resume_load(struct train_plan *p, const struct train_opts *o, float *params, float *m, float *v,
                      skiff_err *err)
{
    struct train_ckpt c, saved = {.rank = 0};
    train_plan_ckpt(p, o, 0, params, m, v, &c);
    skiff_err e;
    /* another layout (world size, --tp, --pp, ZeRO stage) of the same model: the
     * same state laid out for this run, when the run reads the same data
     * (the same global batch); else train_ckpt_load says what differs */
    if (train_ckpt_peek(o->ckpt_dir, &saved, &e) == 0 && !memcmp(&saved.cfg, &c.cfg, sizeof c.cfg) &&
        (saved.world != c.world || saved.tp != c.tp || saved.pp != c.pp || saved.zero != c.zero)) {
        uint64_t g = (uint64_t)o->batch * (uint64_t)o->grad_accum * (uint64_t)p->world;
        if (saved.data_pos != (uint64_t)saved.step * g)
            return skiff_error(err, 0,
                               "--resume: %s was saved with WORLD_SIZE=%d, this run has %d (--tp %d, %d; --pp %d, "
                               "%d; --zero %d, %d); another layout resumes with the same global batch: %llu "
                               "sequences per step there, %llu here (--batch x --grad-accum x WORLD_SIZE / (--tp x "
                               "--pp))",
                               o->ckpt_dir, saved.world, c.world, saved.tp, c.tp, saved.pp, c.pp, saved.zero, c.zero,
                               (unsigned long long)(saved.step ? saved.data_pos / (uint64_t)saved.step : 0),
                               (unsigned long long)g);
        if (train_ckpt_load_relayout(o->ckpt_dir, &c, &saved, err) < 0) return -1;
    } else if (train_ckpt_load(o->ckpt_dir, &c, err) < 0) {
        return -1;
    }
    p->start = c.step;
    p->amp = c.amp;
    p->end = o->steps;
    if (o->stop_after && p->start + o->stop_after < p->end) p->end = p->start + o->stop_after;
    return 0;
}

int train_resume_shares_opt(const struct train_plan *p, const struct train_opts *o)
{
    return o->zero == 0 && p->world > 1;
}

int train_resume_agree(const struct train_plan *p, const struct train_opts *o, double mean_start, skiff_err *err)
{
    if (mean_start != (double)p->start)
        return skiff_error(err, 0,
                           "--resume: rank %d's checkpoint is at step %d but the ranks disagree "
                           "(mean %.2f): a save was interrupted; remove %s or restart from scratch",
                           p->rank, p->start, mean_start, o->ckpt_dir);
    /* finished already: success, so a requeued job's `--resume` loop ends */
    if (p->start >= o->steps && p->rank == 0 && p->tp_rank == 0)
        fprintf(stderr,
                "skiff-train: checkpoint in %s is at step %d of --steps %d: nothing "
                "left to do\n",
                o->ckpt_dir, p->start, o->steps);
    return 0;
}

float train_clip_scale(const struct train_opts *o, float norm)
{
    return o->grad_clip > 0 && norm > o->grad_clip ? o->grad_clip / norm : 1.0f;
}

float train_lr(const struct train_opts *o, int step)
{
    if (step < o->warmup) return o->lr * (float)(step + 1) / (float)o->warmup;
    float lo = o->lr * o->lr_min_frac;
    if (o->steps <= o->warmup) return o->lr;
    double r = (double)(step - o->warmup) / (double)(o->steps - o->warmup);
    if (r > 1) r = 1;
    double coeff = 0.5 * (1.0 + cos(M_PI * r));
    return (float)(lo + coeff * (o->lr - lo));
}
