/* The training policy both loops follow (trainer/policy.h): ZeRO layout,
 * data and validation windows, when to validate and save, checkpoint
 * records, and the --resume rules (a finished run is not an error; ranks at
 * different steps are). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "policy.h"
#include "scratch.h"

SCRATCH_SUITE(policy, "skiff-policy-test");

static struct train_opts opts(int zero, int steps)
{
    struct train_opts o;
    skiff_err err;
    train_opts_defaults(&o);
    cr_assert_eq(gpt2_config_preset("tiny", &o.cfg, &err), 0);
    o.batch = 2;
    o.seq = 16;
    o.grad_accum = 3;
    o.steps = steps;
    o.zero = zero;
    o.ckpt_dir = dir;
    return o;
}

Test(policy, zero_layout_pads_and_shards)
{
    struct train_opts o = opts(0, 10);
    struct train_plan p;
    train_plan_init(&p, &o, 1001, 4, 2);
    cr_assert_eq(p.n_pad, 1004u, "padded to a multiple of the world");
    cr_assert_eq(p.opt_off, 0u);
    cr_assert_eq(p.opt_len, 1004u, "ZeRO 0: every rank steps everything");
    cr_assert_eq(p.start, 0);
    cr_assert_eq(p.end, 10);
    o.zero = 1;
    size_t next = 0;
    for (int r = 0; r < 4; r++) {
        train_plan_init(&p, &o, 1001, 4, r);
        cr_assert_eq(p.opt_off, next, "rank %d's shard follows rank %d's", r, r - 1);
        cr_assert_eq(p.opt_len, 251u);
        next = p.opt_off + p.opt_len;
    }
    cr_assert_eq(next, 1004u, "the shards cover the padded buffer");
    o.stop_after = 4;
    train_plan_init(&p, &o, 1001, 4, 0);
    cr_assert_eq(p.end, 4, "--stop-after ends this run early");
}

/* ZeRO-3: every unit padded to a multiple of the data-parallel world,
 * each rank a piece of each; the shards of all ranks hold every weight
 * once and give the llm.c buffer back. With --tp the units are those of
 * each tensor-parallel rank's part (gpt2_unit_slices_tp), sharded over the
 * WORLD_SIZE / tp data-parallel ranks of that part, and the parts put
 * together are the whole model. */
static void zero3_shards(int TP)
{
    struct train_opts o = opts(3, 10);
    o.tp = TP;
    enum { W = 3 }; /* data-parallel ranks */
    size_t n = gpt2_param_layout(&o.cfg, NULL, NULL), nl = gpt2_param_layout_tp(&o.cfg, TP, NULL, NULL);
    size_t total = train_zero3_len(&o.cfg, TP, W);
    float *flat = malloc(n * sizeof(float)), *back = calloc(n, sizeof(float));
    float *local = malloc(nl * sizeof(float)), *lback = malloc(nl * sizeof(float));
    for (size_t i = 0; i < n; i++)
        flat[i] = (float)i;
    struct train_plan p;
    for (int t = 0; t < TP; t++) {
        gpt2_tp_copy(&o.cfg, TP, t, flat, local, 1);
        memset(lback, 0, nl * sizeof(float));
        for (int r = 0; r < W; r++) {
            train_plan_init(&p, &o, n, W * TP, train_layout_rank(TP, W, 0, r, t));
            cr_assert_eq(p.rank, r);
            cr_assert_eq(p.tp_rank, t);
            cr_assert_eq(p.n_pad, total);
            cr_assert_eq(p.opt_len * W, total, "equal shards");
            cr_assert_eq(p.opt_off, (size_t)r * p.opt_len);
            for (int u = 0; u < gpt2_num_units(&o.cfg); u++) {
                size_t off, len = train_zero3_unit(&o.cfg, TP, W, r, u, &off);
                cr_assert_eq(len % W, 0u, "unit %d padded to the world", u);
                cr_assert_leq(off + len / W, p.opt_len);
            }
            float *shard = malloc(p.opt_len * sizeof(float));
            train_zero3_copy(&o.cfg, TP, W, r, local, shard, 0);
            train_zero3_copy(&o.cfg, TP, W, r, lback, shard, 1);
            free(shard);
        }
        cr_assert(memcmp(local, lback, nl * sizeof(float)) == 0, "tp %d rank %d: the shards are its part", TP, t);
        gpt2_tp_copy(&o.cfg, TP, t, back, lback, 0);
    }
    cr_assert(memcmp(flat, back, n * sizeof(float)) == 0, "the shards put together are the weights");
    cr_assert_lt(total - nl, (size_t)W * gpt2_num_units(&o.cfg), "padding under world per unit");
    if (TP > 1)
        cr_assert_lt(total, train_zero3_len(&o.cfg, 1, W), "a part's units are smaller than the model's");
    free(flat);
    free(back);
    free(local);
    free(lback);
}

Test(policy, zero3_shards_hold_every_weight_once)
{
    zero3_shards(1);
}

Test(policy, zero3_shards_of_tensor_parallel_parts)
{
    zero3_shards(2);
}

Test(policy, windows_are_disjoint_across_ranks_and_micro_steps)
{
    struct train_opts o = opts(0, 10); /* B=2, K=3 */
    enum { W = 4, STEPS = 5 };
    int seen[STEPS * 3 * W * 2] = {0};
    for (int r = 0; r < W; r++) {
        struct train_plan p;
        train_plan_init(&p, &o, 100, W, r);
        for (int s = 0; s < STEPS; s++)
            for (int k = 0; k < 3; k++) {
                uint64_t w = train_plan_window(&p, &o, s, k);
                cr_assert_lt(w + 1, sizeof seen / sizeof seen[0]);
                seen[w]++, seen[w + 1]++; /* B = 2 windows from w */
            }
        cr_assert_eq(train_plan_val_window(&p, 2, 3), (uint64_t)(3 * W + r) * 2);
    }
    for (size_t i = 0; i < sizeof seen / sizeof seen[0]; i++)
        cr_assert_eq(seen[i], 1, "window %zu read %d times", i, seen[i]);
}

Test(policy, when_to_validate_and_save)
{
    struct train_opts o = opts(0, 10);
    struct train_plan p;
    train_plan_init(&p, &o, 100, 1, 0);
    cr_assert_not(train_plan_val_due(&o, 3), "no --val: never");
    o.val = "x";
    o.val_every = 4;
    cr_assert(train_plan_val_due(&o, 3));
    cr_assert_not(train_plan_val_due(&o, 4));
    cr_assert(train_plan_val_due(&o, 9), "the last step of the schedule");
    o.ckpt_every = 3;
    cr_assert(train_plan_save_due(&o, &p, 3));
    cr_assert_not(train_plan_save_due(&o, &p, 4));
    cr_assert(train_plan_save_due(&o, &p, 10), "the end of the run");
    o.ckpt_dir = NULL;
    cr_assert_not(train_plan_save_due(&o, &p, 3), "no --ckpt-dir: never");
    o.grad_clip = 1.0f;
    cr_assert_float_eq(train_clip_scale(&o, 0.5f), 1.0f, 0);
    cr_assert_float_eq(train_clip_scale(&o, 4.0f), 0.25f, 1e-7);
    o.grad_clip = 0;
    cr_assert_float_eq(train_clip_scale(&o, 4.0f), 1.0f, 0);
}

/* Saves rank r's checkpoint at `step` the way both loops do. */
static void save_rank(const struct train_opts *o, int world, int r, int step, size_t n)
{
    struct train_plan p;
    train_plan_init(&p, o, n, world, r);
    float *params = calloc(p.n_pad, 4), *m = calloc(p.opt_len, 4), *v = calloc(p.opt_len, 4);
    for (size_t i = 0; i < p.n_pad; i++)
        params[i] = (float)i;
    for (size_t i = 0; i < p.opt_len; i++)
        m[i] = (float)(r + 1), v[i] = 2;
    struct train_ckpt c;
    train_plan_ckpt(&p, o, step, params, m, v, &c);
    cr_assert_eq(c.data_pos, (uint64_t)step * 2 * 3 * (uint64_t)world, "next global window");
    cr_assert_eq(c.params != NULL, r == 0, "only rank 0's file holds the parameters");
    skiff_err err;
    cr_assert_eq(train_ckpt_save(o->ckpt_dir, &c, &err), 0, "%s", err.msg);
    free(params), free(m), free(v);
}

Test(policy, resume_reads_the_shard_and_sets_the_range)
{
    struct train_opts o = opts(1, 10);
    size_t n = gpt2_param_layout(&o.cfg, NULL, NULL);
    for (int r = 0; r < 2; r++)
        save_rank(&o, 2, r, 6, n);
    struct train_plan p;
    train_plan_init(&p, &o, n, 2, 1);
    float *params = calloc(p.n_pad, 4), *m = calloc(p.opt_len, 4), *v = calloc(p.opt_len, 4);
    skiff_err err;
    o.stop_after = 2;
    cr_assert_eq(train_resume_load(&p, &o, params, m, v, &err), 0, "%s", err.msg);
    cr_assert_eq(p.start, 6);
    cr_assert_eq(p.end, 8, "--stop-after counts from the resumed step");
    cr_assert_float_eq(m[0], 2.0f, 0, "rank 1's own optimizer shard");
    cr_assert_not(train_resume_shares_opt(&p, &o), "ZeRO: each rank has its shard");
    cr_assert_eq(train_resume_agree(&p, &o, 6.0, &err), 0, "%s", err.msg);
    cr_assert_eq(train_resume_agree(&p, &o, 5.5, &err), -1, "ranks at different steps");
    cr_assert(strstr(err.msg, "a save was interrupted"), "%s", err.msg);
    o.zero = 0;
    cr_assert(train_resume_shares_opt(&p, &o), "ZeRO 0: rank 0 broadcasts m and v");
    free(params), free(m), free(v);
}

Test(policy, resuming_a_finished_run_is_not_an_error)
{
    struct train_opts o = opts(0, 10);
    size_t n = gpt2_param_layout(&o.cfg, NULL, NULL);
    save_rank(&o, 1, 0, 10, n);
    struct train_plan p;
    train_plan_init(&p, &o, n, 1, 0);
    float *params = calloc(p.n_pad, 4), *m = calloc(p.opt_len, 4), *v = calloc(p.opt_len, 4);
    skiff_err err;
    cr_assert_eq(train_resume_load(&p, &o, params, m, v, &err), 0, "%s", err.msg);
    cr_assert_eq(train_resume_agree(&p, &o, 10.0, &err), 0, "a requeued finished job ends with exit 0");
    cr_assert_geq(p.start, p.end, "and the loop does no step");
    cr_assert_float_eq(params[5], 5.0f, 0);
    free(params), free(m), free(v);
}

/* fp16's loss-scaling state travels with the checkpoint (a resume continues
 * bit for bit) and a file of an older build, with zeros there, reads as
 * "start afresh"; an impossible count is a corrupt file. */
Test(policy, checkpoint_carries_the_loss_scaling_state)
{
    struct train_opts o = opts(0, 10);
    size_t n = gpt2_param_layout(&o.cfg, NULL, NULL);
    struct train_plan p;
    train_plan_init(&p, &o, n, 1, 0);
    float *params = calloc(p.n_pad, 4), *m = calloc(p.opt_len, 4), *v = calloc(p.opt_len, 4);
    struct train_ckpt c;
    train_plan_ckpt(&p, &o, 7, params, m, v, &c);
    cr_assert_eq(c.amp.loss_scale, 0.0, "a plain record has no loss scale");
    c.amp = (struct train_amp_state){.loss_scale = 16384, .scale_good = 3, .skipped_run = 1, .skipped = 2};
    skiff_err err;
    cr_assert_eq(train_ckpt_save(o.ckpt_dir, &c, &err), 0, "%s", err.msg);
    cr_assert_eq(train_resume_load(&p, &o, params, m, v, &err), 0, "%s", err.msg);
    cr_assert_eq(p.start, 7);
    cr_assert_eq(p.amp.loss_scale, 16384.0);
    cr_assert_eq(p.amp.scale_good, 3);
    cr_assert_eq(p.amp.skipped_run, 1);
    cr_assert_eq(p.amp.skipped, 2);
    c.amp.skipped = 8; /* more skipped steps than steps */
    cr_assert_eq(train_ckpt_save(o.ckpt_dir, &c, &err), 0, "%s", err.msg);
    cr_assert_eq(train_resume_load(&p, &o, params, m, v, &err), -1);
    cr_assert(strstr(err.msg, "corrupt checkpoint: loss scale"), "%s", err.msg);
    free(params), free(m), free(v);
}

/* --tp: Megatron's rank order (tensor parallel fastest), the data-parallel
 * view the loop sees, ZeRO over the local buffer within the data-parallel
 * group, and the checkpoint records: one file per process, rank 0's with
 * the whole weights, the optimizer state on data-parallel rank 0 (ZeRO 0). */
Test(policy, tensor_parallel_layout)
{
    struct train_opts o = opts(1, 10);
    o.tp = 2;
    skiff_err err;
    cr_assert_neq(train_plan_check(&o, 3, &err), 0);
    cr_assert(strstr(err.msg, "--tp 2 must divide WORLD_SIZE=3"), "%s", err.msg);
    cr_assert_eq(train_plan_check(&o, 4, &err), 0);
    size_t n = gpt2_param_layout(&o.cfg, NULL, NULL), local = gpt2_param_layout_tp(&o.cfg, 2, NULL, NULL);
    cr_assert_lt(local, n);
    size_t next = 0;
    for (int r = 0; r < 4; r++) {
        struct train_plan p;
        train_plan_init(&p, &o, n, 4, r);
        cr_assert_eq(p.world, 2, "dp = WORLD_SIZE / tp");
        cr_assert_eq(p.rank, r / 2, "process %d is data-parallel rank %d", r, r / 2);
        cr_assert_eq(p.tp_rank, r % 2, "process %d is tensor-parallel rank %d", r, r % 2);
        cr_assert_eq(p.n_dev, (local + 1) / 2 * 2);
        cr_assert_eq(p.opt_len, p.n_dev / 2, "ZeRO shards the local buffer over the data-parallel group");
        cr_assert_eq(p.opt_off, (size_t)p.rank * p.opt_len);
        if (p.tp_rank == 0)
            next += p.opt_len;
        float w[1], m[1], v[1];
        struct train_ckpt c;
        train_plan_ckpt(&p, &o, 3, w, m, v, &c);
        cr_assert_eq(c.rank, r, "one file per process");
        cr_assert_eq(c.world, 4);
        cr_assert_eq(c.tp, 2);
        cr_assert_eq(c.params != NULL, r == 0, "rank 0 writes the whole weights");
        cr_assert_eq(c.data_pos, 3u * 2 * 3 * 2, "the data position counts the data-parallel ranks only");
    }
    cr_assert_eq(next, (local + 1) / 2 * 2, "the shards cover the local buffer");
    o.zero = 0;
    for (int r = 0; r < 4; r++) {
        struct train_plan p;
        struct train_ckpt c;
        train_plan_init(&p, &o, n, 4, r);
        train_plan_ckpt(&p, &o, 3, NULL, NULL, NULL, &c);
        cr_assert_eq(c.opt_len != 0, r < 2, "ZeRO 0: data-parallel rank 0's processes keep the optimizer state");
    }
}

/* Megatron's rank order over dp x tp x pp: tensor parallel fastest, then
 * data parallel, then the stage; every rank has one place and back. */
Test(policy, rank_layout_is_tensor_then_data_then_pipeline)
{
    int s, d, t;
    /* dp 2 x tp 2 x pp 2: ranks 0-3 stage 0, 4-7 stage 1; tp pairs {0,1}, {2,3}, ... */
    train_layout_place(5, 2, 2, &s, &d, &t);
    cr_assert(s == 1 && d == 0 && t == 1, "rank 5 is stage 1, dp 0, tp 1 (got %d %d %d)", s, d, t);
    train_layout_place(2, 2, 2, &s, &d, &t);
    cr_assert(s == 0 && d == 1 && t == 0, "rank 2 is stage 0, dp 1, tp 0 (got %d %d %d)", s, d, t);
    cr_assert_eq(train_layout_rank(2, 2, 1, 1, 0), 6);
    static const int shapes[][3] = {{1, 1, 1}, {2, 1, 1}, {1, 3, 1}, {1, 1, 4}, {2, 3, 2}, {4, 1, 3}, {3, 2, 2}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int tp = shapes[k][0], dp = shapes[k][1], pp = shapes[k][2], world = tp * dp * pp;
        for (int r = 0; r < world; r++) {
            train_layout_place(r, tp, dp, &s, &d, &t);
            cr_assert(s >= 0 && s < pp && d >= 0 && d < dp && t >= 0 && t < tp, "tp %d dp %d pp %d: rank %d", tp, dp,
                      pp, r);
            cr_assert_eq(train_layout_rank(tp, dp, s, d, t), r, "tp %d dp %d pp %d: rank %d back", tp, dp, pp, r);
            if (r + 1 < world && t + 1 < tp) { /* the next rank is the next tensor-parallel rank */
                int s2, d2, t2;
                train_layout_place(r + 1, tp, dp, &s2, &d2, &t2);
                cr_assert(s2 == s && d2 == d && t2 == t + 1);
            }
        }
        /* the plan sees the same place */
        struct train_opts o = opts(0, 10);
        o.tp = tp;
        o.pp = pp;
        o.cfg.num_heads = 12; /* tp 1..4 divide the heads */
        o.cfg.channels = 96;
        o.cfg.num_layers = 4;
        for (int r = 0; r < world; r++) {
            struct train_plan p;
            skiff_err err;
            cr_assert_eq(train_plan_check(&o, world, &err), 0, "%s", err.msg);
            train_plan_init(&p, &o, gpt2_param_layout(&o.cfg, NULL, NULL), world, r);
            train_layout_place(r, tp, dp, &s, &d, &t);
            cr_assert(p.world == dp && p.rank == d && p.tp_rank == t && p.pp_rank == s);
            struct train_ckpt c;
            train_plan_ckpt(&p, &o, 1, NULL, NULL, NULL, &c);
            cr_assert(c.rank == r && c.world == world && c.pp == pp && c.tp == tp, "one file per process");
        }
    }
    struct train_opts o = opts(0, 10);
    o.tp = 2;
    o.pp = 2;
    skiff_err err;
    cr_assert_neq(train_plan_check(&o, 6, &err), 0);
    cr_assert(strstr(err.msg, "--tp 2 x --pp 2 = 4 does not divide WORLD_SIZE 6"), "%s", err.msg);
}

/* --pp: the stages' ranges hold every weight of a tensor-parallel rank's
 * buffer once (the tied wte twice, owned and counted in the norm once);
 * ZeRO's pieces of a stage's ranges, over its data-parallel ranks, hold
 * every weight of the stage once and give the buffer back. */
Test(policy, pipeline_stages_and_their_zero_shards_cover_the_model)
{
    struct train_opts o = opts(1, 10);
    skiff_err err;
    cr_assert_eq(gpt2_config_preset("mini", &o.cfg, &err), 0);                   /* L 4 */
    static const int shapes[][3] = {{1, 2, 1}, {1, 3, 2}, {2, 2, 3}, {2, 4, 2}}; /* tp, pp, dp */
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int tp = shapes[k][0], pp = shapes[k][1], dp = shapes[k][2];
        size_t n = gpt2_param_layout_tp(&o.cfg, tp, NULL, NULL);
        int *owned = calloc(n, sizeof *owned), *normed = calloc(n, sizeof *normed);
        float *flat = malloc(n * sizeof(float)), *back = calloc(n, sizeof(float));
        for (size_t i = 0; i < n; i++)
            flat[i] = (float)(i + 1);
        o.tp = tp;
        o.pp = pp;
        for (int s = 0; s < pp; s++) {
            struct train_range r[TRAIN_STAGE_MAX_RANGES];
            int nr = train_stage_ranges(&o.cfg, tp, pp, s, r);
            cr_assert_leq(nr, TRAIN_STAGE_MAX_RANGES);
            for (int i = 0; i < nr; i++)
                for (size_t j = r[i].off; j < r[i].off + r[i].len; j++) {
                    owned[j] += r[i].owner;
                    normed[j] += r[i].norm;
                }
            size_t len = train_pp_shard_len(&o.cfg, tp, pp, s, dp);
            for (int d = 0; d < dp; d++) {
                struct train_plan p;
                train_plan_init(&p, &o, gpt2_param_layout(&o.cfg, NULL, NULL), tp * dp * pp,
                                train_layout_rank(tp, dp, s, d, 0));
                cr_assert_eq(p.opt_len, len, "the plan's shard is the stage's pieces");
                cr_assert_eq(p.opt_off, (size_t)d * len);
                float *shard = malloc(len * sizeof(float));
                train_pp_shard_copy(&o.cfg, tp, pp, s, dp, d, flat, shard, 0);
                train_pp_shard_copy(&o.cfg, tp, pp, s, dp, d, back, shard, 1);
                free(shard);
            }
        }
        for (size_t j = 0; j < n; j++) {
            cr_assert_eq(owned[j], 1, "tp %d pp %d: weight %zu owned by one stage", tp, pp, j);
            cr_assert_eq(normed[j], 1, "tp %d pp %d: weight %zu in the norm once", tp, pp, j);
        }
        cr_assert(memcmp(flat, back, n * sizeof(float)) == 0, "tp %d pp %d dp %d: the shards give the buffer back", tp,
                  pp, dp);
        free(owned), free(normed), free(flat), free(back);
    }
    /* the tied wte: the same piece on the first and the last stage's dp rank d */
    struct train_range a[TRAIN_STAGE_MAX_RANGES], b[TRAIN_STAGE_MAX_RANGES];
    int na = train_stage_ranges(&o.cfg, 1, 2, 0, a), nb = train_stage_ranges(&o.cfg, 1, 2, 1, b);
    cr_assert(a[0].tensor == GPT2_WTE && a[0].owner && b[nb - 1].tensor == GPT2_WTE && !b[nb - 1].owner);
    cr_assert(a[0].off == b[nb - 1].off && a[0].len == b[nb - 1].len);
    (void)na;
}

/* ZeRO-3 under --pp: a rank's shard is its stage's pieces (as ZeRO-1/2 cut
 * them), weights, m and v alike, and every file holds its own; resumed by
 * one process on the same global batch, the files give the whole model's
 * weights and AdamW state back, the tied wte from either stage. */
Test(policy, zero3_pipeline_checkpoint_is_put_back_together)
{
    struct train_opts o = opts(3, 10);
    o.pp = 2;
    int dp = 2, world = 4;
    skiff_err err;
    size_t n = gpt2_param_layout(&o.cfg, NULL, NULL);
    float *flat = malloc(n * sizeof(float)), *fm = malloc(n * sizeof(float)), *fv = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        flat[i] = (float)(i + 1);
        fm[i] = -(float)(i + 1);
        fv[i] = 0.5f * (float)(i + 1);
    }
    for (int r = 0; r < world; r++) {
        struct train_plan p;
        train_plan_init(&p, &o, n, world, r);
        cr_assert_eq(p.n_pad, train_zero3_len(&o.cfg, 1, dp));
        cr_assert_eq(p.opt_len, train_pp_shard_len(&o.cfg, 1, 2, p.pp_rank, dp), "rank %d: its stage's pieces", r);
        float *ps = malloc(p.opt_len * sizeof(float)), *ms = malloc(p.opt_len * sizeof(float)),
              *vs = malloc(p.opt_len * sizeof(float));
        train_pp_shard_copy(&o.cfg, 1, 2, p.pp_rank, dp, p.rank, flat, ps, 0);
        train_pp_shard_copy(&o.cfg, 1, 2, p.pp_rank, dp, p.rank, fm, ms, 0);
        train_pp_shard_copy(&o.cfg, 1, 2, p.pp_rank, dp, p.rank, fv, vs, 0);
        struct train_ckpt c;
        train_plan_ckpt(&p, &o, 5, ps, ms, vs, &c);
        cr_assert_eq(c.params, ps, "rank %d saves its shard of the weights", r);
        cr_assert_eq(train_ckpt_save(dir, &c, &err), 0, "%s", err.msg);
        free(ps), free(ms), free(vs);
    }
    struct train_opts one = opts(0, 10);
    one.grad_accum = o.grad_accum * dp; /* the same global batch */
    struct train_plan p1;
    train_plan_init(&p1, &one, n, 1, 0);
    float *P = calloc(p1.n_pad, sizeof(float)), *M = calloc(p1.opt_len, sizeof(float)),
          *V = calloc(p1.opt_len, sizeof(float));
    cr_assert_eq(train_resume_load(&p1, &one, P, M, V, &err), 0, "%s", err.msg);
    cr_assert_eq(p1.start, 5);
    cr_assert(memcmp(P, flat, n * sizeof(float)) == 0, "the weights put back together");
    cr_assert(memcmp(M, fm, n * sizeof(float)) == 0, "m put back together");
    cr_assert(memcmp(V, fv, n * sizeof(float)) == 0, "v put back together");
    free(P), free(M), free(V), free(flat), free(fm), free(fv);
}
